"""The study file's one schema (pydantic): every field's type and range, unknown keys refused
with the nearest name; a file that breaks it is one line naming the file and the field
(``cmperf: error: s.yaml: field 'workload[0].rate': ...``, exit 2), never a traceback.

The grid lists take a single value for a list of one; they are made lists before the schema
sees them, so that a field's place reads ``workload[0].rate`` rather than pydantic's union
branches. Validation only checks: the questions carry the file's values as written."""

from __future__ import annotations

import difflib
import math
from typing import Any, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr, ValidationError, field_validator

from ..errors import ConfigError, short, short_path
from ..plan.workload import SLO_STATS

SHAPES = ("pd", "colocated", "afd")


class _Strict(BaseModel):
    # strict: 'x' is no number and True no count (a float field still takes an int); no NaN or inf
    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)


def _lengths(v: Any, name: str) -> Any:
    from ..plan.workload import parse_lengths

    if isinstance(v, bool) or not isinstance(v, (int, float, str)):
        raise ValueError(f"expected a token count, MEAN:P90 or exp:MEAN (got {type(v).__name__})")
    try:
        parse_lengths(str(v), name)
    except ConfigError as e:
        raise ValueError(str(e).removeprefix(f"{name} ")) from None
    return v


class Workload(_Strict):
    prompt_len: Any = 4096
    output_len: Any = 256
    prefix_hit: float = Field(0.0, ge=0, lt=1)
    rate: Any = "max"

    @field_validator("prompt_len", "output_len")
    @classmethod
    def _len(cls, v, info):
        return _lengths(v, info.field_name)

    @field_validator("rate")
    @classmethod
    def _rate(cls, v):
        if v is None or v == "max":
            return v
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not (math.isfinite(v) and v > 0):
            raise ValueError("expected requests/s > 0 or max")
        return v


Stat = Literal[tuple(SLO_STATS)]  # the statistics an SLO may bound (cmperf/plan/workload.py, one list)


class Slo(_Strict):
    ttft_ms: float = Field(2000.0, gt=0)
    tpot_ms: float = Field(50.0, gt=0)
    ttft_stat: Stat = "mean"  # the statistic each SLO bounds
    tpot_stat: Stat = "mean"


class Simulate(_Strict):
    num_prompts: StrictInt = Field(500, ge=10, le=1_000_000)
    seed: StrictInt = Field(0, ge=0, le=2**63 - 1)
    warmup: float = Field(0.1, ge=0, lt=1)


class StudyFile(_Strict):
    title: Optional[StrictStr] = None
    hardware: list[StrictStr] = Field(min_length=1)
    model: list[StrictStr] = Field(min_length=1)
    stack: list[StrictStr] = Field(min_length=1)
    npus: list[Optional[StrictInt]] = Field(min_length=1)
    workload: list[Workload] = Field(min_length=1)
    slo: list[Slo] = Field(min_length=1)
    set: list[dict[StrictStr, Any]] = Field(min_length=1)
    shapes: list[Literal["pd", "colocated", "afd"]] = Field(min_length=1)
    simulate: Optional[Simulate] = None

    @field_validator("hardware", "model", "stack")
    @classmethod
    def _names(cls, v):
        for j, name in enumerate(v):
            if not name.strip():
                raise ValueError(f"item {j}: expected a name (got an empty one)")
        return v

    @field_validator("npus")
    @classmethod
    def _npus(cls, v):
        for j, n in enumerate(v):
            if n is not None and n < 1:
                raise ValueError(f"item {j}: expected a whole number of NPUs >= 1 (got {n})")
        return v

    @field_validator("set")
    @classmethod
    def _sets(cls, v):
        for j, s in enumerate(v):
            for path, value in s.items():
                if isinstance(value, (dict, list)):
                    raise ValueError(f"item {j}: {path}: expected one value a --set takes (got a {type(value).__name__})")
        return v


GRID_DEFAULTS = {"hardware": ["cloudmatrix384"], "model": ["default"], "stack": ["default"], "npus": [None],
                 "workload": [{}], "slo": [{}], "set": [{}]}
FIELDS = {(): StudyFile, ("workload",): Workload, ("slo",): Slo, ("simulate",): Simulate}


def _listed(raw: dict) -> dict:
    """The file with each grid field (and shapes) a list."""
    out = dict(raw)
    for k, default in GRID_DEFAULTS.items():
        v = out.get(k, default)
        out[k] = v if isinstance(v, list) else [v]
    shapes = out.get("shapes", list(SHAPES))
    out["shapes"] = shapes if isinstance(shapes, list) else [s.strip() for s in str(shapes).split(",")]
    return out


def _where(loc: tuple) -> str:
    """('workload', 0, 'rate') -> workload[0].rate"""
    text = ""
    for part in loc:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


def _message(path: str, err: dict) -> str:
    loc = tuple(err["loc"])
    if err["type"] == "extra_forbidden":
        key, parent = str(loc[-1]), loc[:-1]
        model = FIELDS.get(tuple(p for p in parent if not isinstance(p, int)), StudyFile)
        allowed = sorted(model.model_fields)
        near = difflib.get_close_matches(key, allowed, n=1, cutoff=0.5)
        hint = f"did you mean '{near[0]}'? " if near else ""
        where = f"field '{_where(parent)}': " if parent else ""
        return f"{short_path(path)}: {where}unknown field '{short(key, 40)}' ({hint}expected {', '.join(allowed)})"
    msg = err["msg"].removeprefix("Value error, ")
    if err["type"] == "too_short":
        return f"{short_path(path)}: field '{_where(loc)}': an empty list asks no question"
    if msg.startswith("item "):  # a list validator's own message names the item: put it in the field's place
        j, _, msg = msg[5:].partition(": ")
        loc = (*loc, int(j))
    elif err["type"] != "missing" and "input" in err and "(got" not in msg:
        msg = f"{msg[0].lower()}{msg[1:]} (got {short(err['input'], 60)!r})"
    return f"{short_path(path)}: field '{_where(loc)}': {msg}"


def validate(raw: Any, path: str) -> dict:
    """The study file ``raw`` (as read) with its grid fields as lists, checked against the
    schema; else a :class:`ConfigError` naming the file and the first field that is wrong."""
    if not isinstance(raw, dict):
        raise ConfigError(f"{short_path(path)}: expected a mapping of {', '.join(GRID_DEFAULTS)} (a study grid)")
    listed = _listed(raw)
    try:
        StudyFile.model_validate(listed)
    except ValidationError as e:
        raise ConfigError(_message(path, e.errors(include_url=False)[0])) from None
    return listed
