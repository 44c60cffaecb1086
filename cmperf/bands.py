"""Prediction bands: every predicted latency and throughput with the range the model's
held-out errors give it (docs/calibration.md#prediction-bands).

``cmperf/reference/prediction-bands.yaml`` holds, per phase, the relative half-width ``b``:
the largest error of a latency row of that phase when the row was left out of the fit
(``cmperf validate --cross-validate``). A latency ``t`` is reported as [t (1 - b), t (1 + b)]
and a throughput ``x`` (work / time) as [x / (1 + b), x / (1 - b)].
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from .errors import SpecError

BANDS_FILE = Path(__file__).resolve().parent / "reference" / "prediction-bands.yaml"
BANDED = {"decode": {"tpot_ms": "latency", "throughput_per_npu": "throughput"},
          "prefill": {"ttft_ms": "latency", "throughput_per_npu": "throughput"}}


class _Band(BaseModel):
    model_config = ConfigDict(extra="forbid")
    relative: float = Field(ge=0, lt=1, allow_inf_nan=False)
    source: str


class _Bands(BaseModel):
    model_config = ConfigDict(extra="forbid")
    decode: _Band
    prefill: _Band


@lru_cache(maxsize=4)
def load_bands(path: Path = BANDS_FILE) -> dict[str, float]:
    from .specs.loader import read_yaml

    try:
        bands = _Bands.model_validate(read_yaml(Path(path)))
    except ValidationError as e:
        first = e.errors()[0]
        raise SpecError(f"{path}: field '{'.'.join(map(str, first['loc']))}': {first['msg']}") from None
    return {"decode": bands.decode.relative, "prefill": bands.prefill.relative}


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
