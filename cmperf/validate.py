"""Replay published results: ``cmperf validate [FILE ...]`` (docs/calibration.md).

A reference file lists rows: a scenario (the ``predict`` inputs), a metric, the published
value and a relative tolerance. Rows of one phase are evaluated together, as one grid.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable, Literal, Mapping, Optional

import numpy as np
import pandas as pd
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from .errors import SpecError
from .predict import Specs, load_specs, predict
from .specs.loader import read_yaml
from .specs.schema import Count, Sourced

BUILTIN_REFERENCE = Path(__file__).resolve().parent / "reference" / "cloudmatrix384-paper.yaml"


class RefRow(BaseModel):
    model_config = ConfigDict(extra="forbid")
    id: str
    description: str
    where: str
    phase: Literal["decode", "prefill", "collective", "spec"]
    metric: str
    paper: float
    tolerance: float = Field(gt=0)
    scenario: dict[str, Any] = Field(default_factory=dict)


class RefFile(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str
    source: str
    hardware: str = "cloudmatrix384"
    model: str = "deepseek-r1"
    rows: list[RefRow] = Field(min_length=1)


def load_reference(path: str | Path = BUILTIN_REFERENCE) -> RefFile:
    p = Path(path)
    if not p.is_file():
        raise SpecError(f"{p}: no such reference file (expected a YAML file of rows; see docs/calibration.md)")
    raw = read_yaml(p)
    try:
        ref = RefFile.model_validate(raw)
    except ValidationError as e:
        first = e.errors()[0]
        loc = ".".join(str(x) for x in first["loc"])
        raise SpecError(f"{p}: field '{loc}': {first['msg']}") from None
    ids = [r.id for r in ref.rows]
    dup = sorted({i for i in ids if ids.count(i) > 1})
    if dup:
        raise SpecError(f"{p}: duplicate row id(s): {', '.join(dup)}")
    return ref


def spec_value(specs: Specs, path: str, sweeps: Mapping[str, Any] | None = None) -> float:
    """The number at a dotted spec path (``chip.efficiency.matmul_compute``)."""
    hw, m = specs.views(sweeps)
    root, *rest = path.split(".")
    node = {"chip": hw.chip, "system": hw.system, "model": m}.get(root)
    if node is None or not rest:
        raise SpecError(f"metric '{path}': a spec path must start with chip., system. or model.")
    try:
        for k in rest:
            node = getattr(node, k)
    except AttributeError:
        raise SpecError(f"metric '{path}': no such spec field") from None
    return float(np.asarray(node).ravel()[0])


def predictions(ref: RefFile, specs: Specs, sweeps: Mapping[str, Iterable[float]] | None = None) -> np.ndarray:
    """Predicted metric of every row of ``ref`` (axis 0) for every combination of the swept
    spec values (axis 1, cartesian-product order, last path fastest): one vectorised
    ``predict`` call per phase."""
    sweeps = {k: list(v) for k, v in (sweeps or {}).items()}
    n = int(np.prod([len(v) for v in sweeps.values()])) if sweeps else 1
    out = np.empty((len(ref.rows), n))
    for phase in ("decode", "prefill", "collective"):
        idx = [i for i, r in enumerate(ref.rows) if r.phase == phase]
        if not idx:
            continue
        table = predict(phase, rows=[ref.rows[i].scenario for i in idx], specs=specs, sweeps=sweeps or None).table
        for j, i in enumerate(idx):
            r = ref.rows[i]
            if r.metric not in table.columns:
                raise SpecError(f"reference row {r.id}: unknown {phase} metric '{r.metric}'")
            out[i] = table[r.metric].to_numpy()[j * n:(j + 1) * n]
    for i, r in enumerate(ref.rows):
        if r.phase == "spec":  # a spec field is one number; swept only if its own path is swept
            out[i] = sweeps[r.metric] if r.metric in sweeps else spec_value(specs, r.metric)
    return out


def evaluate(ref: RefFile, specs: Specs | None = None, sweeps: Mapping[str, Any] | None = None) -> pd.DataFrame:
    """Predicted vs paper for every row of ``ref``; ``sweeps`` (path -> value) overrides
    spec fields for this evaluation (used by sensitivity)."""
    specs = specs or load_specs(ref.hardware, ref.model)
    predicted = predictions(ref, specs, {k: [v] for k, v in (sweeps or {}).items()})[:, 0]
    out = pd.DataFrame([{
        "id": r.id, "where": r.where, "metric": r.metric, "predicted": p, "paper": r.paper,
        "tolerance_pct": 100 * r.tolerance, "description": r.description,
    } for r, p in zip(ref.rows, predicted)])
    out["error_pct"] = 100 * (out["predicted"] - out["paper"]) / out["paper"]
    out["pass"] = out["error_pct"].abs() <= out["tolerance_pct"] + 1e-9
    return out


def fitted_parameters(specs: Specs) -> pd.DataFrame:
    """Every hardware number whose source says it was fitted, with the rows it was fitted to."""
    rows = []
    for label, spec in (("chip", specs.hardware.chip), ("system", specs.hardware.system), ("model", specs.model)):
        for path, value in _walk(spec, label):
            if value.source.lower().startswith("fitted"):
                rows.append({"parameter": path, "value": value.value, "source": value.source})
    return pd.DataFrame(rows, columns=["parameter", "value", "source"])


def sourced_parameters(specs: Specs) -> list[tuple[str, float]]:
    """Every sourced number of the hardware specs (for sensitivity)."""
    out = []
    for label, spec in (("chip", specs.hardware.chip), ("system", specs.hardware.system)):
        out += [(p, v.value) for p, v in _walk(spec, label) if not isinstance(v, Count)]
    return out


def _walk(obj: BaseModel, prefix: str) -> Iterable[tuple[str, Sourced]]:
    for name in type(obj).model_fields:
        v = getattr(obj, name)
        path = f"{prefix}.{name}"
        if isinstance(v, Sourced):
            yield path, v
        elif isinstance(v, BaseModel):
            yield from _walk(v, path)


HEADLINE = ("P1", "P2", "D1", "D2", "L1", "L2", "T7-D256", "T7-C256")


def sensitivity(ref: RefFile, specs: Specs | None = None, step: float = 0.10,
                params: Optional[list[str]] = None) -> pd.DataFrame:
    """Percent change of each headline row when each parameter moves by -step and +step."""
    specs = specs or load_specs(ref.hardware, ref.model)
    rows = [r for r in ref.rows if r.id in HEADLINE] or [r for r in ref.rows if r.phase != "spec"]
    sub = ref.model_copy(update={"rows": rows})
    base = evaluate(sub, specs).set_index("id")["predicted"]
    out = []
    candidates = [(p, v) for p, v in sourced_parameters(specs) if v != 0 and (params is None or p in params)]
    for path, value in candidates:
        entry = {"parameter": path, "value": value}
        for sign in (-1, +1):
            pert = evaluate(sub, specs, {path: value * (1 + sign * step)}).set_index("id")["predicted"]
            change = 100 * (pert - base) / base
            for rid in base.index:
                entry[f"{rid} {'-' if sign < 0 else '+'}{int(step * 100)}%"] = change[rid]
        out.append(entry)
    df = pd.DataFrame(out)
    change_cols = [c for c in df.columns if c not in ("parameter", "value")]
    df["max_abs_change_pct"] = df[change_cols].abs().max(axis=1)
    return df.sort_values("max_abs_change_pct", ascending=False).reset_index(drop=True)
