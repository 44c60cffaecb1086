"""Reference files: published results as rows a prediction is checked against
(docs/calibration.md#the-reference-file).

A row names a scenario (the ``predict`` inputs), a metric, the published value, a tolerance
(relative, or absolute for fractions) and its kind: ``evidence`` (an independent measurement
the model predicts), ``derived`` (arithmetic on another row, or a row that sets the
parameter it tests) or ``spec`` (a hardware-file number checked against its table).

A row whose effect the model's structure cannot produce yet carries ``known_miss``: the
reason, in words. It is still predicted, shown and cross-validated, but not fitted to (it
would pull every parameter toward an effect the model lacks), and it is reported as a known
miss instead of failing ``cmperf validate`` (like a strict pytest xfail, a known miss that
comes back within tolerance is reported so that the mark can be removed).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from ..errors import CmperfError, SpecError, short, short_path
from ..specs.loader import read_yaml

REFERENCE_DIR = Path(__file__).resolve().parent.parent / "reference"
BUILTIN_REFERENCE = REFERENCE_DIR / "cloudmatrix384-paper.yaml"


def builtin_references() -> list[Path]:
    """Every shipped reference file: the CloudMatrix384 paper first, then each platform's
    micro-benchmarks (``<system>-microbenchmarks.yaml``)."""
    return [BUILTIN_REFERENCE, *sorted(REFERENCE_DIR.glob("*-microbenchmarks.yaml"))]

KINDS = ("evidence", "derived", "spec")


class RefRow(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    id: str
    description: str
    where: str
    kind: Literal["evidence", "derived", "spec"] = "evidence"
    group: Optional[str] = None  # the measurement the row belongs to (cross-validation folds)
    derived_from: Optional[str] = None
    phase: Literal["decode", "prefill", "collective", "gemm", "attention", "spec"]
    metric: str
    paper: float = Field(allow_inf_nan=False)
    tolerance: Optional[float] = Field(default=None, gt=0, allow_inf_nan=False)  # relative
    tolerance_abs: Optional[float] = Field(default=None, gt=0, allow_inf_nan=False)  # in the metric's unit
    scenario: dict[str, Any] = Field(default_factory=dict)
    known_miss: Optional[str] = Field(default=None, min_length=20)  # why the structure misses it

    @model_validator(mode="after")
    def _one_tolerance(self):
        if (self.tolerance is None) == (self.tolerance_abs is None):
            raise ValueError("give exactly one of `tolerance` (relative) and `tolerance_abs` (absolute)")
        if self.tolerance is not None and self.paper == 0:
            raise ValueError("a relative tolerance needs a non-zero published value")
        return self

    @property
    def fold(self) -> str:
        return self.group or self.id


class FitParam(BaseModel):
    """A spec field the file's evidence rows calibrate: its search range (log-spaced for
    positive rates and times, linear for fractions) and what it means."""

    model_config = ConfigDict(extra="forbid", strict=True)
    path: str
    lo: float = Field(allow_inf_nan=False)
    hi: float = Field(allow_inf_nan=False)
    log: bool = True
    meaning: str

    @model_validator(mode="after")
    def _range(self):
        if not self.lo < self.hi or (self.log and self.lo <= 0):
            raise ValueError(f"{self.path}: need lo < hi (and lo > 0 for a log range)")
        return self


class Measured(BaseModel):
    """A spec field read from one row alone (not evidence: that row cannot fail)."""

    model_config = ConfigDict(extra="forbid", strict=True)
    path: str
    row: str
    lo: float = Field(allow_inf_nan=False)
    hi: float = Field(allow_inf_nan=False)
    meaning: str


class RefFile(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    name: str
    source: str
    hardware: str = "cloudmatrix384"
    model: str = "deepseek-r1"
    sets: list[str] = Field(default_factory=list)  # spec overrides the rows assume (e.g. a precision)
    # systems without evidence of their own that take this file's fitted hardware values as
    # their proxy: `python -m cmperf.calibration --write` writes the values into their files too
    proxies: list[str] = Field(default_factory=list)
    # models of the same architecture that take this file's measured model values (DeepSeek-V3
    # takes DeepSeek-R1's default expert imbalance): written by --write too
    model_proxies: list[str] = Field(default_factory=list)
    fit: list[FitParam] = Field(default_factory=list)
    measured: list[Measured] = Field(default_factory=list)
    rows: list[RefRow] = Field(min_length=1)


def check_scenario(row: RefRow, path: Path) -> None:
    """A row's scenario holds one value per input, each checked like a flag of ``predict``
    (cmperf/scenario.py), the error naming the file, the row and the field; a spec row reads a
    spec field and takes no scenario."""
    from ..scenario import check_inputs

    where = f"{short_path(path)}: row {short(row.id, 40)}"
    if row.phase == "spec":
        if row.scenario:
            raise SpecError(f"{where}: a spec row reads a spec field and takes no scenario (found {short(row.scenario)})")
        return
    for key, value in row.scenario.items():
        if isinstance(value, (list, tuple, dict)):
            raise SpecError(f"{where}: scenario.{short(key, 40)}: expected one value, found {short(value)}")
    try:
        check_inputs(row.phase, row.scenario, name=lambda k: f"scenario.{k}")
    except CmperfError as e:
        raise SpecError(f"{where}: {e}") from None


def load_reference(path: str | Path = BUILTIN_REFERENCE) -> RefFile:
    p = Path(path)
    if not p.is_file():
        raise SpecError(f"{p}: no such reference file (expected a YAML file of rows; see docs/calibration.md)")
    raw = read_yaml(p)
    try:
        ref = RefFile.model_validate(raw)
    except ValidationError as e:
        problems = [f"field '{'.'.join(str(x) for x in err['loc'])}': {err['msg'].removeprefix('Value error, ')}"
                    for err in e.errors()]
        raise SpecError(f"{p}: " + "; ".join(problems)) from None
    ids = [r.id for r in ref.rows]
    dup = sorted({i for i in ids if ids.count(i) > 1})
    if dup:
        raise SpecError(f"{p}: duplicate row id(s): {', '.join(dup)}")
    for r in ref.rows:
        check_scenario(r, p)
        if r.derived_from is not None and r.derived_from not in ids:
            raise SpecError(f"{p}: row {r.id}: derived_from '{r.derived_from}' names no row of the file")
    for mea in ref.measured:
        if mea.row not in ids:
            raise SpecError(f"{p}: measured {mea.path}: row '{mea.row}' names no row of the file")
    return ref
