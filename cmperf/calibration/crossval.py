"""How far the fitted model can be trusted: leave-one-group-out cross-validation, and the
prediction bands it gives (docs/calibration.md#cross-validation).

A fold predicts its group only if the other groups pin every parameter: a parameter that
ends at a search bound, or that the remaining rows leave unidentified (the objective does
not move when it moves by ``fit.PROBE``), takes a value the rows did not give, and the
group's "held-out error" would measure where that free value landed. Such a fold is
reported as not predicting (which parameters, and why), its errors are left blank, and it
gives no band.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable

import numpy as np

from ..bands import BANDS_FILE, NO_EVIDENCE, load_bands
from ..predict import Specs
from .fit import FitResult, evidence, fit_result, search
from .reference import RefFile, load_reference
from .validate import evaluate, spec_value, specs_for

if TYPE_CHECKING:
    import pandas as pd


@dataclass
class CrossValidation:
    """Leave-one-group-out: each evidence group predicted by a fit to the others."""

    groups: pd.DataFrame  # group, rows, predicts, not_identified, held-out max/mean |error|, in-sample max |error|
    rows: pd.DataFrame  # every evidence row: held-out (blank where the fold does not predict) and in-sample error
    parameters: pd.DataFrame  # parameter x fold values (blank where the fold does not identify it), with the spread
    flags: pd.DataFrame  # group, parameter, value, why: each parameter a fold leaves at a bound or unidentified


def _why(c) -> str:
    if c.bound:
        return f"at its {c.bound} search bound"
    return f"not identified (the objective moves {c.rise:.1e} when it moves by 10 %)"


def folds(ref: RefFile) -> list[str]:
    """The evidence groups of ``ref``, in the order cross-validation leaves them out."""
    return sorted({r.fold for r in evidence(ref).rows})


def steps(ref: RefFile, full_given: bool = False) -> int:
    """The fits :func:`cross_validate` makes (its ``progress`` total): one per fold, and the
    file's own unless given."""
    return len(folds(ref)) + (0 if full_given else 1)


def cross_validate(ref: RefFile | None = None, specs: Specs | None = None, full: FitResult | None = None,
                   progress: Callable[[int, int], None] | None = None) -> CrossValidation:
    """Re-fit without each evidence group in turn and predict the group left out
    (docs/calibration.md#cross-validation). About one fit per group; a parameter the whole
    file does not identify holds its spec value in every fold (``full``: the file's
    :func:`fit.fit_result`, computed here when not given). ``progress(done, total)`` is
    called after each fit (:func:`steps`)."""
    import pandas as pd

    ref = ref or load_reference()
    specs = specs or specs_for(ref)
    total, done = steps(ref, full is not None), 0
    shared: dict = {}  # the fits' coarse grids, evaluated once on every fit row (fit._grid_cost)
    if full is None:
        full = fit_result(ref, specs, shared)
        done += 1
        if progress:
            progress(done, total)
    ev = evidence(ref)
    in_sample = evaluate(ev, specs, full.values).set_index("id")
    rows, params, flags, status = [], {"full fit": full.values}, [], {}
    for g in folds(ref):
        fold = search(ref, specs, exclude_groups=[g], kept=full.kept, shared=shared)
        done += 1
        if progress:
            progress(done, total)
        bad = fold.flagged
        status[g] = "; ".join(f"{c.path} {_why(c)}" for c in bad)
        flags += [{"group": g, "parameter": c.path, "value": c.value, "bound": c.bound, "objective_rise": c.rise,
                   "why": _why(c)} for c in bad]
        params[f"without {g}"] = {p: (v if all(c.path != p for c in bad) else float("nan"))
                                  for p, v in fold.values.items()}
        held = ev.model_copy(update={"rows": [r for r in ev.rows if r.fold == g]})
        res = evaluate(held, specs, fold.values)
        for _, r in res.iterrows():
            blank = float("nan") if bad else None
            rows.append({"group": g, "id": r["id"], "metric": r["metric"], "paper": r["paper"], "unit": r["unit"],
                         "predicts": not bad,
                         "held_out": r["predicted"] if blank is None else blank,
                         "held_out_error": r["error"] if blank is None else blank,
                         "in_sample_error": in_sample.loc[r["id"], "error"], "tolerance": r["tolerance"],
                         "known_miss": r["known_miss"] != ""})
    rows = pd.DataFrame(rows)
    groups = rows.groupby("group", sort=False).agg(
        rows=("id", "size"), unit=("unit", "first"), predicts=("predicts", "first"),
        held_out_max_abs_error=("held_out_error", lambda e: float(np.abs(e).max())),
        held_out_mean_abs_error=("held_out_error", lambda e: float(np.abs(e).mean())),
        in_sample_max_abs_error=("in_sample_error", lambda e: float(np.abs(e).max()))).reset_index()
    groups.insert(4, "not_identified", groups["group"].map(status))
    table = pd.DataFrame(params).rename_axis("parameter").reset_index()
    fold_cols = [c for c in table.columns if c.startswith("without")]
    table["min"] = table[fold_cols].min(axis=1)
    table["max"] = table[fold_cols].max(axis=1)
    spread = 100 * (table["max"] - table["min"]) / table["full fit"].abs()
    table["identified_in"] = table[fold_cols].notna().sum(axis=1)  # folds whose rows pin it
    table["spread_pct"] = spread.where(table["identified_in"] >= 2)  # a spread needs two folds
    table["kept"] = False
    if full.kept:  # held at their spec values: no fold fits them
        kept = pd.DataFrame({"parameter": list(full.kept), "full fit": [spec_value(specs, p) for p in full.kept],
                             "identified_in": 0, "kept": True})
        table = pd.concat([table, kept], ignore_index=True)
    flags = pd.DataFrame(flags, columns=["group", "parameter", "value", "bound", "objective_rise", "why"])
    return CrossValidation(groups=groups, rows=rows, parameters=table, flags=flags)


# The evidence rows that bound each phase's band on a platform with end-to-end rows: those
# that time the phase end to end or per layer (docs/calibration.md#prediction-bands). A
# platform with micro-benchmarks only bands both phases by every relative evidence row.
BAND_METRICS = {"decode": ("tpot_ms", "layer_us"), "prefill": ("throughput_per_npu", "ttft_ms")}


def end_to_end(ref: RefFile) -> bool:
    """Whether the file has evidence rows that run a serving phase (decode or prefill) whole."""
    return any(r.kind == "evidence" and r.phase in BAND_METRICS for r in ref.rows)


def band_rows(cv: CrossValidation, phase: str, ref: RefFile) -> pd.DataFrame:
    """The cross-validation rows a phase's band covers, each with ``band_error``: its held-out
    |error| where its fold predicts, and never less than its in-sample |error|."""
    rows = cv.rows[cv.rows["unit"] == "%"]
    if end_to_end(ref):
        phase_of = {r.id: r.phase for r in ref.rows}
        rows = rows[rows["id"].map(phase_of).eq(phase) & rows["metric"].isin(BAND_METRICS[phase])]
    held = rows["held_out_error"].abs().where(rows["predicts"], 0.0)
    return rows.assign(band_error=np.maximum(held, rows["in_sample_error"].abs()))


def _named(r) -> str:
    """One row's errors as the bands file names them (the held-out one where its fold predicts)."""
    if not r.predicts:
        return f"{r.id} {r.in_sample_error:+.2f} % in sample (its fold does not predict)"
    text = f"{r.id} {r.held_out_error:+.2f} % held out"
    return text + (f" ({r.in_sample_error:+.2f} % in sample)" if abs(r.in_sample_error) > abs(r.held_out_error) else "")


def bands_from(cv: CrossValidation, ref: RefFile) -> dict[str, dict]:
    """Each phase's band: the largest :func:`band_rows` error rounded up to the next half per
    cent (never narrower than the evidence), a floor when no row times the phase end to end,
    and the errors it covers in words (``cmperf/reference/prediction-bands.yaml``)."""
    out = {}
    for phase in BAND_METRICS:
        rows = band_rows(cv, phase, ref)
        if not len(rows):
            continue
        if end_to_end(ref):  # a few rows: name each
            named = rows
        else:  # one row per group: its largest
            named = rows.loc[rows.groupby("group", sort=False)["band_error"].idxmax()]
        parts = [_named(r) for r in named.itertuples()]
        out[phase] = {"relative": float(np.ceil(rows["band_error"].max() * 2) / 2) / 100,
                      "floor": not end_to_end(ref), "source": "errors: " + ", ".join(parts)}
    return out


def band_entry(cv: CrossValidation, ref: RefFile, reference_name: str) -> dict:
    """A system's entry of the bands file: the model it was calibrated on, the file, and
    :func:`bands_from` for each phase (a file without rows of a phase bands it like the other)."""
    bands = bands_from(cv, ref)
    for phase in BAND_METRICS:
        bands.setdefault(phase, max(bands.values(), key=lambda b: b["relative"]))
    return {"model": ref.model, "reference": reference_name, **{ph: bands[ph] for ph in BAND_METRICS}}


def no_evidence_entry(entries: dict[str, dict]) -> dict:
    """The band of a system no reference file calibrates: the widest calibrated band, a floor
    (docs/calibration.md#prediction-bands), and the shipped systems it applies to."""
    from ..specs.loader import list_builtin

    system, phase = max(((s, ph) for s in entries for ph in BAND_METRICS), key=lambda k: entries[k[0]][k[1]]["relative"])
    widest = entries[system][phase]["relative"]
    band = {"relative": widest, "floor": True,
            "source": f"no evidence: no reference file calibrates the system; the widest calibrated band "
                      f"({system} {phase}, +-{100 * widest:.1f} %), as a floor"}
    return {"systems": [name for name, _ in list_builtin("system") if name not in entries],
            **{ph: band for ph in BAND_METRICS}}


def write_bands(entries: dict[str, dict], path: Path = BANDS_FILE) -> str:
    """Write the bands file: ``entries`` (system -> :func:`band_entry`) and the no-evidence band."""
    import json

    q = json.dumps  # a JSON string is a YAML double-quoted scalar

    def band(b: dict) -> str:
        return f"{{relative: {b['relative']:.4g}, floor: {str(b['floor']).lower()}, source: {q(b['source'])}}}"

    lines = ["# Prediction bands: relative half-width of every predicted latency and throughput, per system and phase.",
             "# Written by `python -m cmperf.calibration --write` from each system's own cross-validation",
             "# (`cmperf validate --cross-validate`): the largest error of the rows a band covers, held out where",
             "# the fold predicts, never less than in sample, rounded up to 0.5 %. floor: true when no row times",
             "# the phase end to end (micro-benchmarks only); another model than `model` makes any band a floor.",
             "# A system not named here takes `no_evidence` (docs/calibration.md#prediction-bands).",
             "systems:"]
    for name in sorted(entries, key=lambda s: (s != "cloudmatrix384", s)):
        e = entries[name]
        lines += [f"  {name}:", f"    model: {e['model']}", f"    reference: {e['reference']}",
                  *(f"    {ph}: {band(e[ph])}" for ph in BAND_METRICS)]
    none = no_evidence_entry(entries)
    lines += [f"{NO_EVIDENCE}:", f"  systems: [{', '.join(none['systems'])}]",
              *(f"  {ph}: {band(none[ph])}" for ph in BAND_METRICS)]
    from ..report import write_atomic

    write_atomic(path, lambda tmp: Path(tmp).write_text("\n".join(lines) + "\n", encoding="utf-8"), "--write", own=True, say=False)
    load_bands.cache_clear()
    return f"{path}: " + "; ".join(f"{s} " + ", ".join(f"{ph} +-{100 * entries[s][ph]['relative']:.1f} %"
                                                     + (" (floor)" if entries[s][ph]["floor"] else "")
                                                     for ph in BAND_METRICS) for s in entries)
