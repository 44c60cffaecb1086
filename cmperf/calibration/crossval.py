"""How far the fitted model can be trusted: leave-one-group-out cross-validation, and the
prediction bands it gives (docs/calibration.md#cross-validation)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ..bands import BANDS_FILE
from ..predict import Specs
from .fit import evidence, fit
from .validate import specs_for
from .reference import RefFile, load_reference
from .validate import evaluate

if TYPE_CHECKING:
    import pandas as pd

@dataclass
class CrossValidation:
    """Leave-one-group-out: each evidence group predicted by a fit to the others."""

    groups: pd.DataFrame  # group, rows, held-out max/mean |error|, in-sample max |error|
    rows: pd.DataFrame  # every evidence row: held-out and in-sample error
    parameters: pd.DataFrame  # parameter x fold values, with the full fit and the spread


def cross_validate(ref: RefFile | None = None, specs: Specs | None = None) -> CrossValidation:
    """Re-fit without each evidence group in turn and predict the group left out
    (docs/calibration.md#cross-validation). About one fit per group."""
    import pandas as pd

    ref = ref or load_reference()
    specs = specs or specs_for(ref)
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
             "# Written by `python -m cmperf.calibration --write` from `cmperf validate --cross-validate`:",
             "# the largest held-out |error| of the phase's latency rows, rounded up to 0.5 %.",
             "# They hold for the built-in hardware and model; other specs inherit them as a lower bound."]
    for phase, half in bands.items():
        rows = _band_rows(cv, phase, ref)
        detail = ", ".join(f"{r.id} {r.held_out_error:+.2f} %" for r in rows.itertuples())
        lines.append(f"{phase}: {{relative: {half:.4g}, source: \"held-out errors: {detail}\"}}")
    from ..report import write_atomic

    write_atomic(path, lambda tmp: Path(tmp).write_text("\n".join(lines) + "\n"))
    return f"{path}: " + ", ".join(f"{k} +-{100 * v:.1f} %" for k, v in bands.items())
