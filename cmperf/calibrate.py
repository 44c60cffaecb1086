"""Fit the few parameters no table gives, from the evidence rows of a reference file
(docs/calibration.md). ``python -m cmperf.calibrate`` re-fits and prints the values;
``--write`` stores them in the built-in spec files of a source checkout.

The objective is a weighted least squares over the evidence rows, each error in units of
its own tolerance (log(predicted / paper) / tolerance, or the absolute error / tolerance),
each row weighted by 1 / sqrt(rows in its group) so that the twelve Table 7 rows count as
one measurement series, not twelve. The search is a deterministic pattern search in the
log of each positive parameter (linear for fractions): a coarse grid of every combination,
then, from its best points, steps along each axis that halve when no step improves. Every
step evaluates all its candidate points in one vectorised ``predict`` call per phase. The
model is piecewise smooth (max, ceil), where gradient solvers stall at kinks; a grid and a
pattern search do not, and they give the same result from any state of the spec files.
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
    log: bool
    meaning: str


# Fitted jointly to the evidence rows. Each has a physical meaning (docs/calibration.md).
PARAMS = [
    Param("chip.latency.kernel_launch_s", 1e-7, 50e-6, True, "fixed cost of one kernel inside a captured graph"),
    Param("chip.die.vector_ops_per_s", 1e11, 5e12, True, "element operations per second of a die's 48 AI Vector cores"),
    Param("system.collectives.message_issue_s", 1e-9, 1e-6, True, "communication-engine time of one token message of dispatch/combine"),
    Param("system.collectives.step_time_cv", 0.0, 0.6, False, "spread (std/mean) of a die's load-dependent time between barriers"),
]
# Not evidence: the paper's "default" expert balance appears in row P2 only, so it is
# measured from that row alone, after the joint fit (docs/calibration.md).
IMBALANCE = Param("model.serving.default_expert_imbalance", 1.0, 3.0, False, "max/mean expert load of the paper's default balance")
IMBALANCE_ROW = "P2"

COARSE_POINTS = 5  # per parameter
STARTS = 3  # best coarse points refined
MIN_STEP = 1e-3  # of each parameter's (transformed) range


def evidence(ref: RefFile, exclude_groups=()) -> RefFile:
    """The evidence rows of ``ref``, leaving out the named groups."""
    rows = [r for r in ref.rows if r.kind == "evidence" and r.fold not in set(exclude_groups)]
    return ref.model_copy(update={"rows": rows})


def _weighted_residuals(sub: RefFile, predicted: np.ndarray) -> np.ndarray:
    """Each row's error in units of its tolerance, weighted by 1/sqrt(group size)."""
    sizes = {}
    for r in sub.rows:
        sizes[r.fold] = sizes.get(r.fold, 0) + 1
    out = np.empty_like(predicted)
    for i, r in enumerate(sub.rows):
        if r.tolerance is not None:
            with np.errstate(divide="ignore", invalid="ignore"):
                e = np.log(np.maximum(predicted[i], 1e-300) / r.paper) / r.tolerance
        else:
            e = (predicted[i] - r.paper) / r.tolerance_abs
        out[i] = e / np.sqrt(sizes[r.fold])
    return np.where(np.isfinite(out), out, 1e6)


class _Space:
    """Parameters <-> unit coordinates (log for positive parameters, linear for fractions)."""

    def __init__(self, params: list[Param]):
        self.params = params
        self.lo = np.array([np.log(p.lo) if p.log else p.lo for p in params])
        self.hi = np.array([np.log(p.hi) if p.log else p.hi for p in params])

    def values(self, u: np.ndarray) -> dict[str, np.ndarray]:
        x = self.lo + np.clip(u, 0.0, 1.0) * (self.hi - self.lo)
        return {p.path: (np.exp(x[:, j]) if p.log else x[:, j]) for j, p in enumerate(self.params)}


def _cost(sub: RefFile, specs: Specs, space: _Space, u: np.ndarray, fixed: dict[str, float]) -> np.ndarray:
    sweeps = {k: list(v) for k, v in space.values(u).items()}
    sweeps.update({k: [v] * len(u) for k, v in fixed.items()})
    pred = predictions(sub, specs, sweeps, zipped=True)
    return (_weighted_residuals(sub, pred) ** 2).sum(axis=0)


def minimise(sub: RefFile, specs: Specs, params: list[Param], fixed: dict[str, float] | None = None) -> dict[str, float]:
    """Coarse grid over every parameter, then a pattern search from its best points; the
    ``fixed`` spec values hold throughout."""
    fixed = dict(fixed or {})
    space = _Space(params)
    d = len(params)
    axis = (np.arange(COARSE_POINTS) + 0.5) / COARSE_POINTS
    grid = np.stack(np.meshgrid(*[axis] * d, indexing="ij"), axis=-1).reshape(-1, d)
    cost = _cost(sub, specs, space, grid, fixed)
    order = np.argsort(cost, kind="stable")[:STARTS]
    centers, best = grid[order].copy(), cost[order].copy()
    step = np.full(len(centers), 0.5 / COARSE_POINTS)
    moves = np.vstack([np.eye(d), -np.eye(d)])
    while (step > MIN_STEP).any():
        cand = np.clip(centers[:, None, :] + step[:, None, None] * moves[None], 0.0, 1.0)
        c = _cost(sub, specs, space, cand.reshape(-1, d), fixed).reshape(len(centers), -1)
        k = np.argmin(c, axis=1)
        better = c[np.arange(len(centers)), k] < best - 1e-12
        centers[better] = cand[np.arange(len(centers)), k][better]
        best[better] = c[np.arange(len(centers)), k][better]
        step = np.where(better | (step <= MIN_STEP), step, step / 2)
    winner = centers[int(np.argmin(best))][None, :]
    return {k: float(v[0]) for k, v in space.values(winner).items()}


def fit(ref: RefFile | None = None, specs: Specs | None = None, exclude_groups=()) -> dict[str, float]:
    """The joint fit of PARAMS to the evidence rows (leaving out ``exclude_groups``), then
    the default imbalance from its row."""
    ref = ref or load_reference()
    specs = specs or load_specs(ref.hardware, ref.model)
    values = minimise(evidence(ref, exclude_groups), specs, PARAMS)
    imbalance_rows = ref.model_copy(update={"rows": [r for r in ref.rows if r.id == IMBALANCE_ROW]})
    if imbalance_rows.rows:
        values.update(minimise(imbalance_rows, specs, [IMBALANCE], fixed=values))
    return values


@dataclass
class CrossValidation:
    """Leave-one-group-out: each evidence group predicted by a fit to the others."""

    groups: "pd.DataFrame"  # group, rows, held-out max/mean |error|, in-sample max |error|
    rows: "pd.DataFrame"  # every evidence row: held-out and in-sample error
    parameters: "pd.DataFrame"  # parameter x fold values, with the full fit and the spread


def cross_validate(ref: RefFile | None = None, specs: Specs | None = None) -> CrossValidation:
    """Re-fit without each evidence group in turn and predict the group left out
    (docs/calibration.md#cross-validation). About one fit per group."""
    import pandas as pd

    ref = ref or load_reference()
    specs = specs or load_specs(ref.hardware, ref.model)
    full = fit(ref, specs)
    ev = evidence(ref)
    in_sample = evaluate(ev, specs, full).set_index("id")
    folds = sorted({r.fold for r in ev.rows})
    rows, params = [], {"full fit": full}
    for g in folds:
        values = fit(ref, specs, exclude_groups=[g])
        params[f"without {g}"] = values
        held = ev.model_copy(update={"rows": [r for r in ev.rows if r.fold == g]})
        res = evaluate(held, specs, values)
        for _, r in res.iterrows():
            rows.append({"group": g, "id": r["id"], "metric": r["metric"], "paper": r["paper"], "unit": r["unit"],
                         "held_out": r["predicted"], "held_out_error": r["error"],
                         "in_sample_error": in_sample.loc[r["id"], "error"], "tolerance": r["tolerance"]})
    rows = pd.DataFrame(rows)
    groups = rows.groupby("group", sort=False).agg(
        rows=("id", "size"), unit=("unit", "first"),
        held_out_max_abs_error=("held_out_error", lambda e: float(np.abs(e).max())),
        held_out_mean_abs_error=("held_out_error", lambda e: float(np.abs(e).mean())),
        in_sample_max_abs_error=("in_sample_error", lambda e: float(np.abs(e).max()))).reset_index()
    table = pd.DataFrame(params).rename_axis("parameter").reset_index()
    fold_cols = [c for c in table.columns if c.startswith("without")]
    table["min"] = table[fold_cols].min(axis=1)
    table["max"] = table[fold_cols].max(axis=1)
    table["spread_pct"] = 100 * (table["max"] - table["min"]) / table["full fit"].abs()
    return CrossValidation(groups=groups, rows=rows, parameters=table)


# The evidence rows that bound the error of each phase's latency and throughput: those that
# measure the phase's time end to end or per layer (docs/calibration.md#prediction-bands).
BAND_METRICS = {"decode": ("tpot_ms", "layer_us"), "prefill": ("throughput_per_npu", "ttft_ms")}
BANDS_FILE = Path(__file__).resolve().parent / "reference" / "prediction-bands.yaml"


def _band_rows(cv: CrossValidation, phase: str, ref: RefFile):
    phase_of = {r.id: r.phase for r in ref.rows}
    rows = cv.rows
    return rows[rows["id"].map(phase_of).eq(phase) & rows["metric"].isin(BAND_METRICS[phase])]


def bands_from(cv: CrossValidation, ref: RefFile | None = None) -> dict[str, float]:
    """Relative half-width of each phase's prediction band: the largest held-out |error| of
    its latency rows, rounded up to the next half per cent (never narrower than the evidence)."""
    ref = ref or load_reference()
    out = {}
    for phase in BAND_METRICS:
        rows = _band_rows(cv, phase, ref)
        if len(rows):
            out[phase] = float(np.ceil(rows["held_out_error"].abs().max() * 2) / 2) / 100
    return out


def write_bands(bands: dict[str, float], cv: CrossValidation, ref: RefFile | None = None, path: Path = BANDS_FILE) -> str:
    ref = ref or load_reference()
    lines = ["# Prediction bands: relative half-width of every predicted latency and throughput, per phase.",
             "# Written by `python -m cmperf.calibrate --write` from `cmperf validate --cross-validate`:",
             "# the largest held-out |error| of the phase's latency rows, rounded up to 0.5 %.",
             "# They hold for the built-in hardware and model; other specs inherit them as a lower bound."]
    for phase, half in bands.items():
        rows = _band_rows(cv, phase, ref)
        detail = ", ".join(f"{r.id} {r.held_out_error:+.2f} %" for r in rows.itertuples())
        lines.append(f"{phase}: {{relative: {half:.4g}, source: \"held-out errors: {detail}\"}}")
    from .report import write_atomic

    write_atomic(path, lambda tmp: Path(tmp).write_text("\n".join(lines) + "\n"))
    return f"{path}: " + ", ".join(f"{k} +-{100 * v:.1f} %" for k, v in bands.items())


def write(values: dict[str, float], specs: Specs) -> list[str]:
    """Replace the ``value:`` of each fitted field in its spec file (flow-style lines)."""
    from .specs.loader import resolve

    files = {"chip": specs.hardware.chip_path, "system": specs.hardware.system_path,
             "model": resolve("model", specs.model.name)}
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
    ap.add_argument("--write", action="store_true",
                    help="store the fitted values in the built-in spec files and the prediction bands (runs the cross-validation)")
    args = ap.parse_args(argv)
    ref = load_reference()
    specs = load_specs(ref.hardware, ref.model)
    values = fit(ref, specs)
    ev = evidence(ref)
    print(f"fitted {len(PARAMS)} parameters to {len(ev.rows)} evidence rows "
          f"(groups {', '.join(sorted({r.fold for r in ev.rows}))}); {IMBALANCE.path} measured from {IMBALANCE_ROW}:")
    for p in PARAMS + [IMBALANCE]:
        print(f"  {p.path:45s} = {values[p.path]:.4g}    # {p.meaning}")
    out = evaluate(ref, specs, values)
    print(out[["id", "kind", "predicted", "paper", "error", "pass"]].to_string(index=False))
    if args.write:
        for line in write(values, specs):
            print("wrote", line)
        cv = cross_validate(ref, load_specs(ref.hardware, ref.model))
        print(cv.groups.to_string(index=False))
        print("wrote", write_bands(bands_from(cv, ref), cv, ref))
    return 0


if __name__ == "__main__":
    sys.exit(main())
