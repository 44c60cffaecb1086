"""One workload on several systems side by side (``cmperf compare``): each system at its own
parallel configuration, through the same ``predict`` as everything else.

A *set-up* names, per system, the model and the spec overrides it is served with (its
precision) and one configuration per phase. The built-in set-ups
(``cmperf/reference/setups.yaml``) are the deployments the CloudMatrix384 paper compares in
Tables 3-4; a user's own file in the same format replaces them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import pandas as pd
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from .errors import ConfigError, SpecError, short
from .predict import load_specs, predict
from .scenario import check_inputs

SETUPS_FILE = Path(__file__).resolve().parent / "reference" / "setups.yaml"
LATENCY = {"decode": "tpot_ms", "prefill": "ttft_ms"}


class SystemSetup(BaseModel):
    model_config = ConfigDict(extra="forbid")
    model: str
    sets: list[str] = Field(default_factory=list)
    prefill: dict[str, Any] = Field(default_factory=dict)
    decode: dict[str, Any] = Field(default_factory=dict)
    source: str = ""


class Setups(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str
    source: str
    systems: dict[str, SystemSetup] = Field(min_length=1)


def load_setups(path: str | Path = SETUPS_FILE) -> Setups:
    from .specs.loader import read_yaml

    p = Path(path)
    if not p.is_file():
        raise SpecError(f"{p}: no such set-up file (expected YAML with `systems:`; see README, Compare)")
    try:
        return Setups.model_validate(read_yaml(p))
    except ValidationError as e:
        problems = [f"field '{'.'.join(map(str, err['loc']))}': {err['msg']}" for err in e.errors()]
        raise SpecError(f"{p}: " + "; ".join(problems)) from None


@dataclass
class Comparison:
    phase: str
    table: pd.DataFrame  # one row per system
    breakdowns: dict = field(default_factory=dict)  # system -> per-operator table


def compare(phase: str, systems: list[str] | None = None, setups: Setups | None = None, model: str | None = None,
            sets: Mapping[str, list[str]] | None = None, values: Mapping[str, Mapping[str, Any]] | None = None) -> Comparison:
    """Predict ``phase`` on each system at its set-up's configuration. ``sets`` and
    ``values`` add spec overrides and scenario inputs per system (key ``"*"``: all)."""
    if phase not in LATENCY:
        raise ConfigError(f"compare {phase}: expected decode or prefill")
    setups = setups or load_setups()
    systems = systems or list(setups.systems)
    sets, values = dict(sets or {}), dict(values or {})
    for flag, given in (("--set", sets), ("--with", values)):
        unknown = [k for k in given if k != "*" and k not in systems]
        if unknown:
            raise ConfigError(f"{flag} {unknown[0]}:...: no such system in this comparison (compared: {', '.join(systems)})")
    rows, breakdowns = [], {}
    for name in systems:
        su = setups.systems.get(name)
        chosen = model or (su.model if su is not None else None) or _deployment_model(name)
        if su is None or su.model != chosen:
            # not this set-up's model: the system's own deployment for it (cmperf/deployment.py),
            # with the set-up's workload (its lengths) kept
            workload = {k: v for k, v in (getattr(su, phase) if su is not None else {}).items() if k in WORKLOAD}
            su = SystemSetup(model=chosen, sets=su.sets if su is not None else [], **{phase: workload},
                             source=f"the system's deployment defaults for {chosen} (docs/model.md §10)")
        spec_sets = [*su.sets, *sets.get("*", []), *sets.get(name, [])]
        specs = load_specs(name, chosen, spec_sets)
        where = lambda k, n=name: f"set-ups {setups.name}: systems.{n}.{phase}.{k}"  # noqa: E731
        for k, v in getattr(su, phase).items():
            if v is None or isinstance(v, (list, tuple, dict)):
                raise ConfigError(f"{where(k)}: expected one value (one configuration per system), got {short(v, 40)}")
        check_inputs(phase, getattr(su, phase), name=where)
        for target in ("*", name):  # each --with value, named as the user wrote it
            check_inputs(phase, values.get(target, {}), name=lambda k, t=target: f"--with {'' if t == '*' else t + ':'}{k}")
        inputs = {**getattr(su, phase), **values.get("*", {}), **values.get(name, {})}
        r = predict(phase, inputs, specs)
        row = r.table.iloc[0]
        ops, _ = r.breakdown(0)
        breakdowns[name] = ops
        chip = specs.hardware.chip
        dtype = specs.model.precision.matmul  # the dtype whose peak normalises tokens/s/TFLOPS (as the paper's INT8)
        top = ops.sort_values("total_ms", ascending=False).iloc[0]
        rows.append({
            "system": name, "chip": chip.name, "model": specs.model.name, "dtype": dtype,
            "dies": row["dies"], "ep": row["ep"],
            **({"batch": row["batch"], "kv_len": row["kv_len"], "mtp": row["mtp"]} if phase == "decode"
               else {"tokens_per_npu": row["tokens_per_npu"], "prompt_len": row["prompt_len"], "attn_tp": row["attn_tp"]}),
            "microbatches_used": row["microbatches_used"],
            LATENCY[phase]: row[LATENCY[phase]],
            f"{LATENCY[phase]}_lo": row[f"{LATENCY[phase]}_lo"], f"{LATENCY[phase]}_hi": row[f"{LATENCY[phase]}_hi"],
            "throughput_per_npu": row["throughput_per_npu"],
            "throughput_per_npu_lo": row["throughput_per_npu_lo"], "throughput_per_npu_hi": row["throughput_per_npu_hi"],
            "band_floor": bool(row["band_floor"]),  # the system's own band; a floor without end-to-end evidence
            # the package peak predict normalised by (schedule/common.py tokens_per_s_per_tflops)
            "npu_peak_TFLOPS": row["throughput_per_npu"] / row["tokens_per_s_per_tflops"],
            "tokens_per_s_per_tflops": row["tokens_per_s_per_tflops"],
            "memory_per_die_bytes": row["memory_per_die_bytes"], "fits": bool(row["fits"]),
            "bound": f"{top['op']} ({top['bound']}, {100 * top['total_ms'] / ops['total_ms'].sum():.0f} % of op time)",
            "confidence": min(specs.hardware.chip.confidence, specs.hardware.system.confidence, key=_rank),
            "setup_source": su.source,
        })
    return Comparison(phase, pd.DataFrame(rows), breakdowns)


WORKLOAD = ("prompt_len", "output_len", "kv_len", "cached_len")  # set-up inputs that describe the traffic, not the deployment


def _deployment_model(system: str) -> str:
    """The model a system's deployment section was published with (deepseek-r1 otherwise)."""
    from .specs.loader import load_hardware

    dep = load_hardware(system).system.deployment
    return dep.model if dep is not None and dep.model else "deepseek-r1"


def _rank(c: str) -> int:
    return {"low": 0, "medium": 1, "high": 2}[c]
