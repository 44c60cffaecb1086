"""The schema of a serving-evidence file (``validate --serving FILE``, cmperf/reference/*-serving.yaml),
with ranges: what :func:`cmperf.calibration.serving.load_serving` accepts before any row is
replayed. Every error is one line naming the file, the row (by its id) and the field, with what
was expected and what was found.

    name, hardware, model, stack, source   text
    targets                                {METRIC: share > 0 and at most 10}, one per metric any row measures
    rows[]  id                             text, unique in the file
            description                    text (optional)
            deployment                     as a deployment file (cmperf/simulate/deployment.py FIELDS)
            sets, stack_sets               lists of --set PATH=VALUE (stack_sets: stack fields)
            workload                       {prompt_len, output_len}: whole tokens, 1 to MAX_TOKENS
            traffic                        {request_rate: > 0 or inf, max_concurrency: 1 to MAX_PROMPTS,
                                            num_prompts: 1 to MAX_PROMPTS}
            measured                       {METRIC: a finite number > 0}, at least one
            accept_length                  the run's logged MTP accept length, 1 to 65 (optional)
            not_fitted                     why the stack's fit must not see this run (optional)
    fit[]   path, lo, hi, meaning          a stack host constant fitted to the runs: stack.FIELD,
                                           0 < lo < hi (optional)

A row's specs (its sets and stack_sets on the file's hardware, model and stack) and its
deployment are checked against the system by :func:`check_rows`.
"""

from __future__ import annotations

import math
from typing import Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from ..errors import SpecError, short
from ..specs.loader import error_message

# What bench_serving logs and the simulation predicts (cmperf/simulate/metrics.py).
METRIC_NAMES = ("output_throughput_tps", "input_throughput_tps", "total_throughput_tps", "request_throughput_rps",
                "duration_s", "concurrency",
                *(f"{s}_{q}_ms" for q in ("ttft", "tpot", "itl", "e2e") for s in ("mean", "median", "p90", "p99")))
Metric = Literal[METRIC_NAMES]  # type: ignore[valid-type]
MAX_PROMPTS = 100_000  # requests one row replays (the released runs have at most a few thousand)
MAX_TOKENS = 1e9  # as cmperf/plan/workload.py
MAX_TARGET = 10.0  # a target of 1,000 % bounds nothing


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class Workload(_Strict):
    prompt_len: int = Field(ge=1, le=int(MAX_TOKENS))
    output_len: int = Field(ge=1, le=int(MAX_TOKENS))


class Traffic(_Strict):
    request_rate: Optional[Union[Literal["inf"], float]] = None  # requests/s; inf or none: all at once
    max_concurrency: Optional[int] = Field(None, ge=1, le=MAX_PROMPTS)
    num_prompts: int = Field(ge=1, le=MAX_PROMPTS)

    @model_validator(mode="after")
    def _rate(self):
        r = self.request_rate
        if isinstance(r, float) and not (math.isfinite(r) and r > 0):
            raise ValueError(f"request_rate: expected requests/s > 0 or inf (got {r!r})")
        return self


class Row(_Strict):
    id: str = Field(min_length=1, max_length=200)
    description: Optional[str] = None
    deployment: dict
    sets: list[str] = []
    stack_sets: list[str] = []
    workload: Workload
    traffic: Traffic
    measured: dict[Metric, float] = Field(min_length=1)  # type: ignore[valid-type]
    accept_length: Optional[float] = Field(None, ge=1.0, le=65.0)  # 1 + at most 64 drafts (the stack schema's bound)
    not_fitted: Optional[str] = Field(None, min_length=3)

    @model_validator(mode="after")
    def _positive(self):
        for k, v in self.measured.items():
            if not (math.isfinite(v) and v > 0):
                raise ValueError(f"measured.{k}: expected a finite number > 0 (got {v!r})")
        return self


class FitParam(_Strict):
    path: str = Field(pattern=r"^stack\.[a-z_]+$")
    lo: float = Field(gt=0)
    hi: float = Field(gt=0)
    meaning: str = Field(min_length=3)

    @model_validator(mode="after")
    def _range(self):
        if not (math.isfinite(self.hi) and self.lo < self.hi):
            raise ValueError(f"{self.path}: expected 0 < lo < hi (got lo {self.lo!r}, hi {self.hi!r})")
        return self


class ServingFile(_Strict):
    name: str
    source: Optional[str] = None
    description: Optional[str] = None
    hardware: str
    model: str
    stack: str
    targets: dict[Metric, float] = Field(min_length=1)  # type: ignore[valid-type]
    rows: list = Field(min_length=1)
    fit: Optional[list[FitParam]] = None

    @model_validator(mode="after")
    def _targets(self):
        for k, v in self.targets.items():
            if not (math.isfinite(v) and 0 < v <= MAX_TARGET):
                raise ValueError(f"targets.{k}: expected a share > 0 and at most {MAX_TARGET:g} (got {v!r})")
        return self


def _problem(e: ValidationError, head: str) -> str:
    """The first problem pydantic found, as ``head: field: what (got ...)``, and how many more."""
    errs = e.errors()
    first = errs[0]
    loc = ".".join(str(x) for x in first["loc"])
    kind = first["type"]
    if kind == "literal_error" and first["loc"] and first["loc"][-1] == "[key]":
        msg = "unknown metric (expected one of simulate's: output_throughput_tps, mean_ttft_ms, p99_tpot_ms, ...)"
    elif kind == "too_short":
        msg = "expected at least one entry (found none)"
    else:
        msg = error_message(first)
    loc = loc.replace(".[key]", "")
    more = f" (and {len(errs) - 1} more problems)" if len(errs) > 1 else ""
    return f"{head}: {loc + ': ' if loc else ''}{msg}{more}"


def validated(raw, path: str) -> dict:
    """``raw`` (a serving file's data) checked against the schema: the same data, or a
    SpecError naming the file, the row and the field."""
    from ..simulate.deployment import from_data

    if not isinstance(raw, dict):
        raise SpecError(f"{path}: expected a serving-evidence file (a mapping with name, hardware, model, stack, "
                        f"targets and rows), found {type(raw).__name__}")
    try:
        ServingFile.model_validate(raw)
    except ValidationError as e:
        raise SpecError(_problem(e, path)) from None
    seen: dict[str, int] = {}
    for j, r in enumerate(raw["rows"]):
        rid = r.get("id") if isinstance(r, dict) else None
        head = f"{path}: row {short(rid, 40) if isinstance(rid, str) else j}"
        if not isinstance(r, dict):
            raise SpecError(f"{head}: expected a row {{id, deployment, workload, traffic, measured}} (found {short(r, 40)})")
        try:
            row = Row.model_validate(r)
        except ValidationError as e:
            raise SpecError(_problem(e, head)) from None
        if row.id in seen:
            raise SpecError(f"{head}: id {row.id!r} is also row {seen[row.id]}'s (each row its own id)")
        seen[row.id] = j
        missing = [k for k in row.measured if k not in raw["targets"]]
        if missing:
            raise SpecError(f"{head}: measured.{missing[0]} has no target (give targets.{missing[0]}: a share, e.g. 0.15)")
        from_data(r["deployment"], f"{head}: deployment")
    return raw


def check_rows(raw: dict, path: str) -> None:
    """Each row's specs load (its sets and stack_sets: a stack limit out of range is named by
    the row, not by --set) and its deployment fits the system (cmperf/simulate/deployment.py check)."""
    from ..errors import CmperfError
    from ..predict import load_specs
    from ..simulate.deployment import check, from_data
    from ..specs.loader import check_field

    fit = raw.get("fit") or []
    stack = load_specs(raw["hardware"], raw["model"], [], raw["stack"]).part("stack") if fit else None
    for i, p in enumerate(fit):  # a constant the stack has not would be fitted to nothing
        check_field(stack, p["path"].removeprefix("stack."), f"{path}: fit[{i}].path {short(p['path'], 60)}")
    for r in raw["rows"]:
        head = f"{path}: row {short(r['id'], 40)}"
        sets = [*r.get("sets", []), *(f"stack.{s}" for s in r.get("stack_sets", []))]
        try:
            specs = load_specs(raw["hardware"], raw["model"], sets, raw["stack"])
            check(from_data(r["deployment"], f"{head}: deployment"), specs)
        except CmperfError as e:
            text = str(e)
            raise SpecError(text if text.startswith(head) else f"{head}: {text.replace('--set stack.', 'stack_sets: ').replace('--set ', 'sets: ')}") from None
