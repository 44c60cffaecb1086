"""Python API: predictions as pandas DataFrames (one row per configuration).

    >>> from cmperf.predict import predict
    >>> r = predict("decode", {"batch": [8, 96]})
    >>> r.table[["batch", "tpot_ms", "throughput_per_npu"]]

A single prediction and a sweep take the same path: the grid is evaluated as numpy arrays
by cmperf.schedule; nothing loops over configurations.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

import numpy as np
import pandas as pd

from .bands import add_bands
from .errors import CmperfError, ConfigError, SpecError, short
from .schedule.collective import collective
from .schedule.decode import decode
from .schedule.kernels import attention, gemm
from .schedule.memory import decode_memory, prefill_memory
from .schedule.prefill import prefill
from .scenario import grid_from_rows, make_grid, validate
from .specs.loader import Hardware, load_hardware_parts, load_model, split_overrides
from .specs.schema import DTYPE_BYTES, ModelSpec
from .specs.view import HardwareView, SpecView

PHASES = ("decode", "prefill", "collective", "gemm", "attention")
RUN = {"decode": decode, "prefill": prefill, "collective": collective, "gemm": gemm, "attention": attention}


@dataclass
class Specs:
    """Validated specs and their numeric views (with swept fields as grid arrays)."""

    hardware: Hardware
    model: ModelSpec

    def views(self, sweeps: Mapping[str, np.ndarray] | None = None):
        sweeps = sweeps or {}
        pick = lambda prefix: {k[len(prefix):]: v for k, v in sweeps.items() if k.startswith(prefix)}
        hw = HardwareView(SpecView(self.hardware.system, pick("system.")), SpecView(self.hardware.chip, pick("chip.")))
        return hw, SpecView(self.model, pick("model."))


def load_specs(hardware: str = "cloudmatrix384", model: str = "deepseek-r1", sets: Iterable[str] = ()) -> Specs:
    """The system, its chip and the model, validated together: every problem of the three
    files, and a model dtype the chip lacks, named in one error (not the first alone)."""
    overrides = split_overrides(sets)
    (system, chip, spath, cpath), problems = load_hardware_parts(hardware, overrides)
    m = None
    try:
        m, _ = load_model(model, overrides)
    except CmperfError as e:
        problems.append(str(e))
    if chip is not None and m is not None:
        problems += precision_problems(chip, m)
    if problems:
        raise SpecError(" | ".join(problems))
    return Specs(hardware=Hardware(system=system, chip=chip, system_path=spath, chip_path=cpath), model=m)



@dataclass
class Prediction:
    phase: str
    table: pd.DataFrame  # inputs + outputs, one row per configuration (valid rows only)
    invalid: pd.DataFrame  # rows rejected by validation, with their reason
    schedules: Any = field(repr=False, default=None)

    def breakdown(self, row: int = 0) -> tuple[pd.DataFrame, pd.DataFrame]:
        """Per-operator and per-section tables of one configuration (docs/model.md §5-§6)."""
        s1, s2 = self.schedules
        choice = int(self.table["microbatches_used"].iat[row])
        sched = s2 if choice == 2 else s1
        pick = lambda x: float(np.broadcast_to(np.asarray(x, dtype=float), (len(self.table),))[row])
        ops = []
        for p in sched.parts:
            t = p.t
            calls = pick(p.calls)
            if calls == 0:
                continue
            per = pick(t.time_s)
            ops.append({
                "section": p.section, "stream": p.stream, "op": t.name, "engine": t.engine,
                "calls": calls, "time_us": per * 1e6, "total_ms": per * calls * 1e3,
                "compute_us": pick(t.compute_s) * 1e6, "vector_us": pick(t.vector_s) * 1e6,
                "memory_us": pick(t.memory_s) * 1e6,
                "network_us": pick(t.network_s) * 1e6, "latency_us": pick(t.latency_s) * 1e6,
                "bound": np.broadcast_to(t.bound(), (len(self.table),))[row],
                "flops": pick(t.flops), "hbm_bytes": pick(t.hbm_bytes), "weight_bytes": pick(t.weight_bytes),
                "net_bytes": pick(t.net_bytes),
            })
        sections = []
        for s in sched.sections:
            count = pick(s.count)
            if count == 0:
                continue
            sections.append({"section": s.name, "rule": s.rule, "time_us": pick(s.time_s) * 1e6,
                             "count": count, "total_ms": pick(s.time_s) * count * 1e3})
        return pd.DataFrame(ops), pd.DataFrame(sections)


def predict(phase: str, values: Mapping[str, Any] | None = None, specs: Specs | None = None,
            sweeps: Mapping[str, Iterable[float]] | None = None, strict: bool = True,
            rows: list[Mapping[str, Any]] | None = None, zip_sweeps: bool = False) -> Prediction:
    """Predict ``phase`` for every combination of ``values`` (and of swept spec fields).

    ``sweeps`` maps a spec path (``system.tiers.ub.bandwidth_Bps``) to the values it takes;
    they join the cartesian product (with ``zip_sweeps``, the lists are equally long and
    taken together, point by point: one set of spec values per point). ``rows`` instead
    lists configurations one by one. With ``strict``, an invalid configuration raises
    :class:`ConfigError`; otherwise invalid rows are returned in ``Prediction.invalid``."""
    if phase not in PHASES:
        raise ConfigError(f"unknown phase '{phase}' (expected one of: {', '.join(PHASES)})")
    specs = specs or load_specs()
    values = dict(values or {})
    sweep_cols = {k: list(v) for k, v in (sweeps or {}).items()}
    base = grid_from_rows(phase, rows) if rows is not None else make_grid(phase, values)
    given = set(values) if rows is None else set().union(*(set(r) for r in rows)) if rows else set()
    base = _model_defaults(base, given, specs.model)
    grid = _with_sweeps(base, sweep_cols, zip_sweeps) if sweep_cols else base
    hw0, m0 = specs.views()
    if phase in ("decode", "prefill"):
        check_precision(specs)
    if "expert_imbalance" in grid:  # 'default' = the model's documented real-traffic balance
        serving = specs.model.serving
        default = serving.default_expert_imbalance.value if serving is not None else 1.0
        col = grid["expert_imbalance"]  # a numeric column cannot hold the word: skip the per-row str()
        grid["_default_imbalance"] = False if pd.api.types.is_numeric_dtype(col) else col.astype(str) == "default"
        grid["expert_imbalance"] = _numeric(grid["expert_imbalance"].replace("default", default), "--expert-imbalance")
    hw_rows, m_rows = specs.views({k: grid[k].to_numpy(dtype=float) for k in sweep_cols}) if sweep_cols else (hw0, m0)
    valid, reason = validate(phase, grid, m_rows, hw_rows, given)  # each row with its own swept spec values
    invalid = grid.loc[~valid].drop(columns="_default_imbalance", errors="ignore").assign(reason=reason[~valid])
    if strict and not valid.all():
        raise ConfigError(str(reason[~valid][0]))
    g = grid.loc[valid].reset_index(drop=True)
    if len(g) == 0:
        return Prediction(phase, g, invalid, None)
    cols = {c: g[c].to_numpy() for c in g.columns}
    hw, m = specs.views({k: cols[k].astype(float) for k in sweep_cols})
    if "_default_imbalance" in cols:  # a swept default balance reaches the rows that asked for it
        default = m.serving.default_expert_imbalance if specs.model.serving is not None else 1.0
        cols["expert_imbalance"] = np.where(cols.pop("_default_imbalance"), default, cols["expert_imbalance"]).astype(float)
        g = g.drop(columns="_default_imbalance").assign(expert_imbalance=cols["expert_imbalance"])
    with np.errstate(all="ignore"):  # an overflow is found in the outputs below and named, not printed
        out = RUN[phase](hw, m, cols)
        mem = (decode_memory(hw, m, cols) if phase == "decode" else prefill_memory(hw, m, cols, out["_choice"])
               if phase == "prefill" else {})
    table = g.copy()
    n = len(g)
    for k, v in {**out, **mem}.items():
        if not k.startswith("_"):
            table[k] = np.broadcast_to(np.asarray(v), (n,))
    table.insert(0, "phase", phase)
    add_bands(table, phase)
    bad = output_problems(table, list(grid.columns))
    if (bad != "").any():
        if strict:
            raise ConfigError(str(bad[bad != ""][0]))
        invalid = pd.concat([invalid, g.loc[bad != ""].assign(reason=bad[bad != ""])], ignore_index=True)
        table = table.loc[bad == ""].reset_index(drop=True)
    return Prediction(phase, table, invalid, out["_schedules"])


# Outputs that are empty by design: a second stream's time when one microbatch runs.
EMPTY_BY_DESIGN = {"stream_a_us", "stream_b_us"}
# Outputs that must be positive (time, rate) or non-negative (bytes); others may be negative
# (a microbatch gain) but never infinite or, outside EMPTY_BY_DESIGN, empty.
POSITIVE = ("tpot_ms", "ttft_ms", "iteration_ms", "forward_ms", "layer_us", "throughput_per_npu", "tokens_per_s_per_user")
NON_NEGATIVE = ("_ms", "_us", "_s", "_bytes", "_GBps", "_TFLOPS", "tokens_per_s_per_tflops")


def output_problems(table: pd.DataFrame, inputs: list[str]) -> np.ndarray:
    """Per row, '' or why its prediction cannot be shown: an output that is infinite, empty
    (NaN) or of the wrong sign, which only a spec value or input far outside the model's range
    produces (a bandwidth or peak of 1e-300 overflows a time to inf). The safety net behind the
    input checks: no NaN, inf or negative time ever reaches a table."""
    reason = np.full(len(table), "", dtype=object)
    for c in table.columns:
        if c in inputs or c in EMPTY_BY_DESIGN or c.endswith(("_lo", "_hi")) or not pd.api.types.is_numeric_dtype(table[c]) \
                or pd.api.types.is_bool_dtype(table[c]):
            continue
        x = table[c].to_numpy(dtype=float)
        wrong = ~np.isfinite(x)
        if c in POSITIVE:
            wrong |= x <= 0
        elif c.endswith(NON_NEGATIVE):
            wrong |= x < 0
        for i in np.flatnonzero(wrong & (reason == "")):
            reason[i] = (f"the predicted {c} is {x[i]:g}: an input or spec value lies outside the model's range "
                         f"(e.g. a bandwidth, peak or efficiency near zero)")
    return reason


def precision_problems(chip, m) -> list[str]:
    """Every dtype the model computes in must be one the chip's matrix units run: a model in
    FP8 on a chip without FP8 (Ascend) is an error, not a silent fallback."""
    p = m.precision
    needed = {"matmul": p.matmul, "attention": p.attention, "head": p.head}
    if m.moe is not None:  # the router's gate runs in the hidden dtype; experts follow matmul unless set
        needed["hidden"] = p.hidden
        if p.experts is not None:
            needed["experts"] = p.experts
    have = chip.die.peak_flops_per_s.dtypes()
    missing = {k: v for k, v in needed.items() if v not in have}
    if not missing:
        return []
    what = "; ".join(f"precision.{k} = {v}" for k, v in missing.items())
    return [f"model {m.name} computes in a dtype chip {chip.name} lacks ({what}); the chip runs {', '.join(have)}: "
            f"set e.g. --set model.precision.{next(iter(missing))}={_closest(next(iter(missing.values())), chip)}"]


def check_precision(specs: Specs) -> None:
    """Raise the precision problems of ``specs`` (specs built without load_specs)."""
    problems = precision_problems(specs.hardware.chip, specs.model)
    if problems:
        raise ConfigError("; ".join(problems))


def _closest(dtype: str, chip) -> str:
    """The chip's dtype of the same width, else its widest."""
    have = chip.die.peak_flops_per_s.dtypes()
    same = [d for d in have if DTYPE_BYTES[d] == DTYPE_BYTES[dtype]]
    return same[0] if same else have[0]


def _model_defaults(grid: pd.DataFrame, given: set, m) -> pd.DataFrame:
    """Defaults that depend on the model: MTP off for a model without an MTP module, no
    shared-expert copies for a model without a shared expert (the paper's deployment
    defaults assume DeepSeek-R1)."""
    grid = grid.copy()
    if "mtp" in grid and "mtp" not in given and m.mtp.modules == 0:
        grid["mtp"] = 0
    if "shared_copies" in grid and "shared_copies" not in given and (m.moe is None or m.moe.shared_experts == 0):
        grid["shared_copies"] = 0
    return grid


def _with_sweeps(base: pd.DataFrame, sweep_cols, zipped: bool = False) -> pd.DataFrame:
    """Every base row for every swept value (cartesian product, or the zipped points)."""
    if zipped:
        n = len(next(iter(sweep_cols.values())))
        if any(len(v) != n for v in sweep_cols.values()):
            raise ConfigError("zipped sweeps need lists of one length")
        extra = pd.DataFrame({"_row": np.repeat(np.arange(len(base)), n),
                              **{k: np.tile(np.asarray(v, dtype=float), len(base)) for k, v in sweep_cols.items()}})
    else:
        idx = pd.MultiIndex.from_product([range(len(base)), *sweep_cols.values()], names=["_row", *sweep_cols])
        extra = idx.to_frame(index=False)
    return base.iloc[extra["_row"]].reset_index(drop=True).join(extra.drop(columns="_row"))


def _numeric(col: pd.Series, flag: str) -> pd.Series:
    out = pd.to_numeric(col, errors="coerce")
    if out.isna().any():
        raise ConfigError(f"{flag}: expected a number or 'default' (got {short(col[out.isna()].iat[0], 40)!r})")
    return out
