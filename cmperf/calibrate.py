"""Fit the few parameters no paper table gives, from named reference rows
(docs/calibration.md). Run ``python -m cmperf.calibrate`` to re-fit and print the values;
add ``--write`` to store them in the built-in spec files of a source checkout.

The fit is a least-squares zooming grid search (see ``_zoom``), evaluated with the same
vectorised code as every prediction.
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .predict import Specs, load_specs
from .validate import RefFile, evaluate, load_reference, predictions


@dataclass(frozen=True)
class Param:
    path: str  # spec path (chip./system./model.)
    lo: float
    hi: float
    meaning: str


# Jointly fitted to FIT_ROWS. Each has a physical meaning (docs/calibration.md).
PARAMS = [
    Param("chip.latency.kernel_launch_s", 1e-7, 50e-6, "fixed cost of one kernel launch inside a captured graph"),
    Param("chip.die.vector_ops_per_s", 1e11, 2e13, "element operations per second of a die's 48 AI Vector cores"),
    Param("system.collectives.message_issue_s", 1e-9, 1e-6, "vector-core time to issue one token message"),
    Param("system.tiers.ub.sync_round_s", 1e-8, 30e-6, "one synchronisation round across the EP group"),
]
FIT_ROWS = ["P1", "D1", "D2", "L1", "L2", "L3-A", "L3-B",
            "T7-D8", "T7-D16", "T7-D32", "T7-D64", "T7-D128", "T7-D256",
            "T7-C8", "T7-C16", "T7-C32", "T7-C64", "T7-C128", "T7-C256"]
# Fitted afterwards, alone, to the one row that defines it.
IMBALANCE = Param("model.serving.default_expert_imbalance", 1.0, 3.0, "max/mean expert load of the paper's default balance")
IMBALANCE_ROW = "P2"


def _rows(ref: RefFile, ids) -> RefFile:
    return ref.model_copy(update={"rows": [r for r in ref.rows if r.id in ids]})


# The fit is a zooming grid search in the log of each parameter: every step evaluates a grid
# of GRID_POINTS values per parameter (all combinations, one vectorised predict call per
# phase), keeps the best, and narrows each range to one grid step around it. The model is
# piecewise smooth (max, ceil), where gradient solvers stall at kinks; a grid does not, and
# it reproduces itself exactly from any state of the spec files.
GRID_POINTS = 13
ZOOM_STEPS = 8


def _residuals(sub: RefFile, specs: Specs, axes: dict[str, np.ndarray]) -> np.ndarray:
    """log(predicted / paper) of every row of ``sub`` (axis 0) for every combination of the
    parameter values in ``axes`` (axis 1)."""
    paper = np.array([r.paper for r in sub.rows])[:, None]
    return np.log(predictions(sub, specs, axes) / paper)


def _zoom(sub: RefFile, specs: Specs, params: list[Param]) -> dict[str, float]:
    lo = np.log([p.lo for p in params])
    hi = np.log([p.hi for p in params])
    best = None
    for _ in range(ZOOM_STEPS):
        axes = {p.path: np.exp(np.linspace(a, b, GRID_POINTS)) for p, a, b in zip(params, lo, hi)}
        cost = (_residuals(sub, specs, axes) ** 2).sum(axis=0)
        k = np.unravel_index(int(np.argmin(cost)), [GRID_POINTS] * len(params))
        best = np.array([np.log(axes[p.path][i]) for p, i in zip(params, k)])
        step = (hi - lo) / (GRID_POINTS - 1)
        lo = np.maximum(best - step, np.log([p.lo for p in params]))
        hi = np.minimum(best + step, np.log([p.hi for p in params]))
    return {p.path: float(np.exp(v)) for p, v in zip(params, best)}


def fit(ref: RefFile | None = None, specs: Specs | None = None) -> dict[str, float]:
    """Least squares on log(predicted / paper): the four hardware parameters jointly over
    FIT_ROWS, then the default imbalance alone against its row (docs/calibration.md)."""
    ref = ref or load_reference()
    specs = specs or load_specs(ref.hardware, ref.model)
    values = _zoom(_rows(ref, FIT_ROWS), specs, PARAMS)
    fitted = load_specs(ref.hardware, ref.model, [f"{k}={v!r}" for k, v in values.items()])
    values.update(_zoom(_rows(ref, [IMBALANCE_ROW]), fitted, [IMBALANCE]))
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
