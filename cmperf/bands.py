"""Prediction bands: every predicted latency and throughput with the range the model's
held-out errors give it (docs/calibration.md#prediction-bands).

``cmperf/reference/prediction-bands.yaml`` holds, per phase, the relative half-width ``b``:
the largest error of a latency row of that phase when the row was left out of the fit
(``cmperf validate --cross-validate``). A latency ``t`` is reported as [t (1 - b), t (1 + b)]
and a throughput ``x`` (work / time) as [x / (1 + b), x / (1 - b)].
"""

from __future__ import annotations

import math
from functools import lru_cache
from pathlib import Path

import numpy as np

from .errors import SpecError

BANDS_FILE = Path(__file__).resolve().parent / "reference" / "prediction-bands.yaml"
BANDED = {"decode": {"tpot_ms": "latency", "throughput_per_npu": "throughput"},
          "prefill": {"ttft_ms": "latency", "throughput_per_npu": "throughput"}}


@lru_cache(maxsize=4)
def load_bands(path: Path = BANDS_FILE) -> dict[str, float]:
    """{phase: relative half-width} from the bands file: exactly ``decode`` and ``prefill``,
    each ``{relative: 0 <= b < 1, source: text}`` (checked by hand: a pydantic model here
    cost the command line's start-up more than the whole check)."""
    from .specs.loader import read_yaml

    raw = read_yaml(Path(path))
    out = {}
    for phase in ("decode", "prefill"):
        band = raw.get(phase) if isinstance(raw, dict) else None
        where = f"{path}: field '{phase}"
        if not isinstance(band, dict) or set(band) != {"relative", "source"}:
            found = sorted(band) if isinstance(band, dict) else type(band).__name__
            raise SpecError(f"{where}': expected {{relative: number, source: text}} (found {found})")
        b = band["relative"]
        if isinstance(b, bool) or not isinstance(b, (int, float)) or not (math.isfinite(b) and 0 <= b < 1):
            raise SpecError(f"{where}.relative': expected a number >= 0 and < 1 (found {b!r})")
        if not isinstance(band["source"], str):
            raise SpecError(f"{where}.source': expected text (found {band['source']!r})")
        out[phase] = float(b)
    extra = sorted(set(raw) - {"decode", "prefill"})
    if extra:
        raise SpecError(f"{path}: unexpected field(s) {', '.join(map(str, extra))} (expected decode, prefill)")
    return out


def add_bands(table, phase: str) -> None:
    """Add ``<column>_lo`` / ``<column>_hi`` next to each banded column of ``table`` (a
    DataFrame or cmperf.columns.Columns)."""
    if phase not in BANDED:
        return
    b = load_bands()[phase]
    for col, kind in BANDED[phase].items():
        if col not in table.columns:
            continue
        v = table[col].to_numpy(dtype=float)
        lo, hi = (v * (1 - b), v * (1 + b)) if kind == "latency" else (v / (1 + b), v / (1 - b))
        pos = list(table.columns).index(col) + 1
        table.insert(pos, f"{col}_hi", hi)
        table.insert(pos, f"{col}_lo", lo)


def half_width(lo, hi) -> np.ndarray:
    return (np.asarray(hi, dtype=float) - np.asarray(lo, dtype=float)) / 2
