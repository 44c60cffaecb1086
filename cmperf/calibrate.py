"""Fit the few parameters no paper table gives, from named reference rows
(docs/calibration.md). Run ``python -m cmperf.calibrate`` to re-fit and print the values;
add ``--write`` to store them in the built-in spec files of a source checkout.

Needs scipy (``pip install 'cmperf[calibrate]'``): the fit is a bounded non-linear least
squares on the log of predicted / published, which scipy.optimize.least_squares does well.
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .predict import Specs, load_specs
from .validate import RefFile, evaluate, load_reference


@dataclass(frozen=True)
class Param:
    path: str  # spec path (chip./system./model.)
    lo: float
    hi: float
    meaning: str


# Jointly fitted to FIT_ROWS. Each has a physical meaning (docs/calibration.md).
PARAMS = [
    Param("chip.latency.kernel_launch_s", 0.0, 50e-6, "fixed cost of one kernel launch inside a captured graph"),
    Param("chip.die.vector_ops_per_s", 1e11, 2e13, "element operations per second of a die's 48 AI Vector cores"),
    Param("system.collectives.message_issue_s", 1e-9, 1e-6, "vector-core time to issue one token message"),
    Param("system.tiers.ub.sync_round_s", 0.0, 30e-6, "one synchronisation round across the EP group"),
]
FIT_ROWS = ["P1", "D1", "D2", "L1", "L2", "L3-A", "L3-B",
            "T7-D8", "T7-D16", "T7-D32", "T7-D64", "T7-D128", "T7-D256",
            "T7-C8", "T7-C16", "T7-C32", "T7-C64", "T7-C128", "T7-C256"]
# Fitted afterwards, alone, to the one row that defines it.
IMBALANCE = Param("model.serving.default_expert_imbalance", 1.0, 3.0, "max/mean expert load of the paper's default balance")
IMBALANCE_ROW = "P2"


def _rows(ref: RefFile, ids) -> RefFile:
    return ref.model_copy(update={"rows": [r for r in ref.rows if r.id in ids]})


def fit(ref: RefFile | None = None, specs: Specs | None = None) -> dict[str, float]:
    from scipy.optimize import brentq, least_squares

    ref = ref or load_reference()
    specs = specs or load_specs(ref.hardware, ref.model)
    sub = _rows(ref, FIT_ROWS)
    scale = np.array([max(p.hi, 1e-12) for p in PARAMS])

    def residuals(x):
        values = {p.path: v for p, v in zip(PARAMS, x * scale)}
        out = evaluate(sub, specs, values)
        return np.log(out["predicted"].to_numpy() / out["paper"].to_numpy())

    from .validate import spec_value
    x0 = np.array([spec_value(specs, p.path) for p in PARAMS]) / scale
    lo = np.array([p.lo for p in PARAMS]) / scale
    hi = np.array([p.hi for p in PARAMS]) / scale
    x0 = np.clip(x0, lo + 1e-9, hi - 1e-9)
    res = least_squares(residuals, x0, bounds=(lo, hi), diff_step=1e-3)
    values = {p.path: float(v) for p, v in zip(PARAMS, res.x * scale)}

    one = _rows(ref, [IMBALANCE_ROW])

    def gap(f):
        return float(evaluate(one, specs, {**values, IMBALANCE.path: f})["error_pct"].iat[0])

    values[IMBALANCE.path] = brentq(gap, IMBALANCE.lo, IMBALANCE.hi) if gap(IMBALANCE.lo) * gap(IMBALANCE.hi) < 0 else IMBALANCE.lo
    return values


def write(values: dict[str, float], specs: Specs) -> list[str]:
    """Replace the ``value:`` of each fitted field in its spec file (flow-style lines)."""
    files = {"chip": specs.hardware.chip_path, "system": specs.hardware.system_path}
    from .specs.loader import resolve
    files["model"] = resolve("model", specs.model.name)
    done = []
    for path, v in values.items():
        root, *rest = path.split(".")
        f = Path(files[root])
        text = f.read_text()
        pat = re.compile(rf"^(\s*{re.escape(rest[-1])}:\s*\{{value:\s*)([^,]+)(,)", re.M)
        new, n = pat.subn(lambda mt: f"{mt.group(1)}{v:.4g}{mt.group(3)}", text)
        if n != 1:
            raise SystemExit(f"calibrate: cannot find a single flow-style '{rest[-1]}: {{value: ...}}' line in {f}")
        f.write_text(new)
        done.append(f"{f}: {path} = {v:.4g}")
    return done


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m cmperf.calibrate", description=__doc__.splitlines()[0])
    ap.add_argument("--write", action="store_true", help="store the fitted values in the built-in spec files")
    args = ap.parse_args(argv)
    ref = load_reference()
    specs = load_specs(ref.hardware, ref.model)
    values = fit(ref, specs)
    print(f"fitted {len(values)} parameters to rows {', '.join(FIT_ROWS)} (+ {IMBALANCE.path} to {IMBALANCE_ROW}):")
    for p in PARAMS + [IMBALANCE]:
        print(f"  {p.path:45s} = {values[p.path]:.4g}    # {p.meaning}")
    out = evaluate(ref, specs, values)
    print(out[["id", "predicted", "paper", "error_pct", "pass"]].to_string(index=False))
    if args.write:
        for line in write(values, specs):
            print("wrote", line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
