"""Prediction bands: every predicted latency and throughput with the range the model's
held-out errors on that system give it (docs/calibration.md#prediction-bands).

``cmperf/reference/prediction-bands.yaml`` holds, per system and phase, the relative
half-width ``b``: the largest error of the system's own evidence rows when their group was
left out of the fit (``cmperf validate --cross-validate``; never less than the row's
in-sample error). A latency ``t`` is reported as [t (1 - b), t (1 + b)] and a throughput
``x`` (work / time) as [x / (1 + b), x / (1 - b)].

A band is a *floor* (``band_floor``: the error is at least this) when nothing measured it
end to end: a system calibrated from micro-benchmarks only (no row tests how its kernels
compose), a model other than the one the system was calibrated on, and a system with no
evidence at all, which takes the widest calibrated band (``no_evidence``).
"""

from __future__ import annotations

import math
from functools import lru_cache
from pathlib import Path
from typing import NamedTuple

import numpy as np

from .errors import SpecError

BANDS_FILE = Path(__file__).resolve().parent / "reference" / "prediction-bands.yaml"
BANDED = {"decode": {"tpot_ms": "latency", "throughput_per_npu": "throughput"},
          "prefill": {"ttft_ms": "latency", "throughput_per_npu": "throughput"},
          "afd": {"tpot_ms": "latency", "throughput_per_npu": "throughput"}}
BAND_PHASE = {"decode": "decode", "prefill": "prefill", "afd": "decode"}  # AFD decodes: decode's band
PHASES = ("decode", "prefill")
NO_EVIDENCE = "no_evidence"


class Band(NamedTuple):
    relative: float  # half-width, a fraction of the predicted value
    floor: bool  # the true error is at least this (nothing measured the phase end to end)
    source: str  # the errors it covers, in words


def _band(raw, where: str) -> Band:
    """One ``{relative, floor, source}`` mapping, checked; ``where`` names it in an error."""
    if not isinstance(raw, dict) or set(raw) != {"relative", "floor", "source"}:
        found = sorted(map(str, raw)) if isinstance(raw, dict) else type(raw).__name__
        raise SpecError(f"{where}: expected {{relative: number, floor: true/false, source: text}} (found {found})")
    b = raw["relative"]
    if isinstance(b, bool) or not isinstance(b, (int, float)) or not (math.isfinite(b) and 0 <= b < 1):
        raise SpecError(f"{where}.relative: expected a number >= 0 and < 1 (found {b!r})")
    if not isinstance(raw["floor"], bool):
        raise SpecError(f"{where}.floor: expected true or false (found {raw['floor']!r})")
    if not isinstance(raw["source"], str):
        raise SpecError(f"{where}.source: expected text (found {raw['source']!r})")
    return Band(float(b), raw["floor"], raw["source"])


def _fields(raw, where: str, names: dict[str, type]) -> None:
    """``raw`` is a mapping of exactly ``names``, each of its type; ``where`` names it in an error."""
    if not isinstance(raw, dict) or set(raw) != set(names):
        found = sorted(map(str, raw)) if isinstance(raw, dict) else type(raw).__name__
        raise SpecError(f"{where}: expected the fields {', '.join(names)} (found {found})")
    for k, kind in names.items():
        if not isinstance(raw[k], kind):
            raise SpecError(f"{where}.{k}: expected {'a mapping' if kind is dict else kind.__name__} (found {raw[k]!r})")


@lru_cache(maxsize=4)
def load_bands(path: Path = BANDS_FILE) -> dict:
    """The bands file: ``{"systems": {name: {"model", "reference", "decode": Band,
    "prefill": Band}}, "no_evidence": {"systems": [names], "decode": Band, "prefill": Band}}``
    (checked by hand: a pydantic model here cost the command line's start-up more than the
    whole check)."""
    from .specs.loader import read_yaml

    raw = read_yaml(Path(path))
    _fields(raw, f"{path}: top level", {"systems": dict, NO_EVIDENCE: dict})
    systems = {}
    for name, entry in raw["systems"].items():
        where = f"{path}: field systems.{name}"
        _fields(entry, where, {"model": str, "reference": str, "decode": dict, "prefill": dict})
        systems[str(name)] = {"model": entry["model"], "reference": entry["reference"],
                              **{ph: _band(entry[ph], f"{where}.{ph}") for ph in PHASES}}
    where = f"{path}: field {NO_EVIDENCE}"
    none = raw[NO_EVIDENCE]
    _fields(none, where, {"systems": list, "decode": dict, "prefill": dict})
    if not all(isinstance(s, str) for s in none["systems"]):
        raise SpecError(f"{where}.systems: expected a list of system names (found {none['systems']!r})")
    return {"systems": systems, NO_EVIDENCE: {"systems": list(none["systems"]),
                                              **{ph: _band(none[ph], f"{where}.{ph}") for ph in PHASES}}}


def band_for(phase: str, system: str, model: str | None = None, path: Path = BANDS_FILE) -> Band:
    """The band of ``phase`` predicted on ``system`` for ``model``: the system's own, a floor
    when ``model`` is not the one it was calibrated on; the no-evidence band for a system
    the file does not calibrate."""
    bands = load_bands(path)
    entry = bands["systems"].get(system)
    if entry is None:
        return bands[NO_EVIDENCE][BAND_PHASE[phase]]
    band = entry[BAND_PHASE[phase]]
    if model is not None and model != entry["model"] and not band.floor:
        return band._replace(floor=True, source=f"{band.source}; calibrated on {entry['model']}, not {model}")
    return band


def add_bands(table, phase: str, system: str, model: str | None = None) -> None:
    """Add ``<column>_lo`` / ``<column>_hi`` next to each banded column of ``table`` (a
    DataFrame or cmperf.columns.Columns), with ``system``'s band (:func:`band_for`), and
    ``band_floor`` after the last of them."""
    if phase not in BANDED:
        return
    band = band_for(phase, system, model)
    b, added = band.relative, []
    for col, kind in BANDED[phase].items():
        if col not in table.columns:
            continue
        v = table[col].to_numpy(dtype=float)
        lo, hi = (v * (1 - b), v * (1 + b)) if kind == "latency" else (v / (1 + b), v / (1 - b))
        pos = list(table.columns).index(col) + 1
        table.insert(pos, f"{col}_hi", hi)
        table.insert(pos, f"{col}_lo", lo)
        added.append(f"{col}_hi")
    if added:
        last = max(list(table.columns).index(c) for c in added)
        table.insert(last + 1, "band_floor", np.full(len(table), band.floor))


def half_width(lo, hi) -> np.ndarray:
    return (np.asarray(hi, dtype=float) - np.asarray(lo, dtype=float)) / 2
