"""Python API: predictions as pandas DataFrames (one row per configuration).

    >>> from cmperf.predict import predict
    >>> r = predict("decode", {"batch": [8, 96]})
    >>> r.table[["batch", "tpot_ms", "throughput_per_npu"]]

A single prediction and a sweep take the same path: the grid is evaluated as numpy arrays
by cmperf.schedule; nothing loops over configurations. The grid and the result are numpy
columns (cmperf/columns.py) until the API's edge: ``Prediction.table`` builds the DataFrame
when it is first asked for, so the command line, which renders from ``Prediction.columns``,
never imports pandas.
"""

from __future__ import annotations

import math
import os
import sys
from dataclasses import dataclass, field
from functools import cached_property, lru_cache, partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Mapping

import numpy as np

from .bands import add_bands
from .defaults import PHASE_DEFAULTS
from .columns import Columns, infer, product
from .errors import CmperfError, ConfigError, SpecError, short
from .schedule.afd import afd
from .schedule.collective import collective
from .schedule.decode import decode
from .schedule.kernels import attention, gemm
from .schedule.memory import afd_memory, decode_memory, prefill_memory
from .schedule.prefill import prefill
from .schedule import replay
from . import deployment, stack
from .stack import stack_fusion
from .scenario import check_inputs, grid_from_rows, make_grid, validate
from .specs.dtypes import NARROW_FLOATS, closest_dtype, dtypes_of
from .specs.loader import (UNIT_RATES, Hardware, cached_spec, carried_scale, load_hardware_parts, load_model,
                           split_overrides)
from .specs.view import KEEP, HardwareView, SpecView

if TYPE_CHECKING:
    from .specs.schema import ModelSpec

PHASES = ("decode", "prefill", "collective", "gemm", "attention", "afd")
RUN = {"decode": decode, "prefill": prefill, "collective": collective, "gemm": gemm, "attention": attention, "afd": afd}


class Specs:
    """Validated specs (``hardware``: a :class:`Hardware`, ``model``: a ModelSpec) and their
    numeric views (with swept fields as grid arrays).

    Specs read from the spec cache (:func:`load_specs` of files validated before) hold the
    validated specs as plain data (``model_dump``): the views read that, and the pydantic
    objects are built only when ``hardware`` or ``model`` is first asked for, so that a
    prediction from cached specs never imports pydantic (~50 ms of a cold start)."""

    def __init__(self, hardware: Hardware | None = None, model: ModelSpec | None = None, *,
                 plain: Mapping[str, Any] | None = None, notes: Iterable[str] = (), stack: Mapping | None = None,
                 stack_name: str | None = None):
        if plain is None and (hardware is None or model is None):
            raise TypeError("Specs needs hardware and model (or the plain data of both)")
        self._hardware, self._model, self._plain = hardware, model, plain
        self.notes = list(notes)  # what loading chose for the user (a dtype the chip lacks, adapted)
        self.stack, self.stack_name = stack, stack_name  # the serving stack (plain data; cmperf/stack.py) or None

    @classmethod
    def from_plain(cls, system: dict, chip: dict, model: dict, system_path: Path, chip_path: Path,
                   notes: Iterable[str] = ()) -> "Specs":
        """Specs from the plain data of three validated specs (:func:`.specs.loader.cached_spec`)."""
        return cls(plain={"system": system, "chip": chip, "model": model, "system_path": system_path,
                          "chip_path": chip_path}, notes=notes)

    def with_hardware(self, hardware: Hardware) -> "Specs":
        """A copy on ``hardware``, keeping the model, the notes and the serving stack."""
        return Specs(hardware=hardware, model=self.model, notes=self.notes, stack=self.stack,
                     stack_name=self.stack_name)

    @property
    def hardware(self) -> Hardware:
        if self._hardware is None:
            from .specs.schema import ChipSpec, SystemSpec

            p = self._plain
            self._hardware = Hardware(system=SystemSpec.model_validate(p["system"]), chip=ChipSpec.model_validate(p["chip"]),
                                      system_path=p["system_path"], chip_path=p["chip_path"])
        return self._hardware

    @property
    def model(self) -> ModelSpec:
        if self._model is None:
            from .specs.schema import ModelSpec

            self._model = ModelSpec.model_validate(self._plain["model"])
        return self._model

    def part(self, prefix: str):
        """One spec's data by its path prefix (chip, system, model, stack): plain data or its
        pydantic model; a SpecError for a stack when there is none."""
        if prefix == "stack":
            if self.stack is None:
                raise SpecError("stack.*: no serving stack to sweep (load the specs with stack=NAME)")
            return self.stack
        if self._plain is not None:
            return self._plain[prefix]
        return self.model if prefix == "model" else getattr(self.hardware, prefix)

    def views(self, sweeps: Mapping[str, np.ndarray] | None = None, phase: str | None = None):
        """Numeric views of the specs, with ``sweeps`` (spec path -> array over the grid's rows)
        in place of their fields; a swept unit count carries the rates its units sum along
        (:data:`.specs.loader.UNIT_RATES`), as a ``--set`` of it does. The serving stack (with its
        ``stack.*`` sweeps) rides along as ``hw.stack``, whatever the ``phase``: each phase's
        schedule adds its own host time (cmperf/cost/host.py)."""
        if not sweeps and KEEP["on"]:  # the same specs read again: the views (and what they gave) are kept
            key = (id(self._plain), id(self._hardware), id(self._model), id(self.stack))
            hit = self.__dict__.get("_views")
            if hit is None or hit[0] != key:
                hit = self._views = (key, self._new_views({}))
            return hit[1]
        return self._new_views(sweeps or {})

    def _new_views(self, sweeps: Mapping[str, np.ndarray]):
        """:meth:`views`, built afresh."""
        pick = lambda prefix: {k[len(prefix):]: v for k, v in sweeps.items() if k.startswith(prefix)}
        if self._plain is not None:
            system, chip, model = self._plain["system"], self._plain["chip"], self._plain["model"]
        else:
            system, chip, model = self.hardware.system, self.hardware.chip, self.model
        chip_over = pick("chip.")
        for count in UNIT_RATES.keys() & chip_over.keys():
            chip_over.update(_unit_rates(SpecView(chip), count, chip_over))
        chip_view = SpecView(chip, chip_over)
        stack_view = None if self.stack is None else SpecView(self.stack, pick("stack."))
        hw = HardwareView(SpecView(system, pick("system.")), chip_view, stack_view, stack_fusion(self.stack))
        return hw, SpecView(model, pick("model."))

    def stack_view(self):
        """The serving stack as a view (values unwrapped), or None."""
        return None if self.stack is None else SpecView(self.stack)

    def __repr__(self) -> str:
        return f"Specs(hardware={self.hardware!r}, model={self.model!r})"


def _unit_rates(chip: SpecView, count: str, swept: Mapping[str, Any]) -> dict[str, Any]:
    """The rates a swept unit count ``count`` scales (``UNIT_RATES``), as view overrides."""
    base = chip
    for k in count.split("."):
        base = base[k]
    rates = UNIT_RATES[count]
    factor = carried_scale(rates, np.asarray(swept[count], dtype=float), base, swept)
    if factor is None:
        return {}
    node = chip
    for k in rates.split("."):
        node = node[k]
    if isinstance(node, SpecView):  # a mapping of rates (peaks per dtype)
        return {f"{rates}.{d}": node[d] * factor for d in node.keys() if node[d] is not None}
    return {rates: node * factor}


DEFAULT_MODEL = "deepseek-r1"  # the model of a system whose deployment names none (the paper's)


def system_model(hardware: str) -> str:
    """The model a system is published with (its ``deployment.model``; CloudMatrix384:
    DeepSeek-R1, DeepSeek's H800 cluster: DeepSeek-V3), the default ``--model`` on it;
    DEFAULT_MODEL when its file names none or cannot be read (loading names the problem)."""
    hit = cached_spec("system", hardware)
    if hit is not None:
        dep = hit[0].get("deployment") or {}
        return dep.get("model") or DEFAULT_MODEL
    try:
        dep = load_hardware_parts(hardware, {})[0][0].deployment
    except (CmperfError, AttributeError, TypeError):
        return DEFAULT_MODEL
    return dep.model if dep is not None and dep.model else DEFAULT_MODEL


def system_stack(hardware: str) -> str | None:
    """The serving stack a system usually runs (its ``deployment.stack``), or None."""
    hit = cached_spec("system", hardware)
    if hit is not None:
        return (hit[0].get("deployment") or {}).get("stack")
    try:
        dep = load_hardware_parts(hardware, {})[0][0].deployment
    except (CmperfError, AttributeError, TypeError):
        return None
    return dep.stack if dep is not None else None


def _with_stack(specs: "Specs", hardware: str, stack: str | None, overrides: Mapping[str, Any]) -> "Specs":
    """A copy of ``specs`` with the serving stack (``stack``: a name or path; None: the
    system's; 'none': no stack) and its ``--set stack.*`` overrides (``specs`` itself when
    there is none)."""
    from .stack import NONE, load_stack

    name = stack if stack is not None else system_stack(hardware)
    if name is None or name == NONE:
        if overrides:
            raise SpecError(f"--set stack.{next(iter(overrides))}: no serving stack to set (give --stack NAME)")
        return specs
    import copy

    out = copy.copy(specs)  # the given specs are left as they were
    out.stack, out.stack_name = load_stack(name, overrides), name
    _check_implementations(out, hardware, name, overrides)
    vendor = str(specs.views()[0].chip.vendor)
    vendors = out.stack.get("vendors")
    if vendors and vendor not in vendors:
        out.notes = [*specs.notes, f"stack {name} runs on {', '.join(vendors)} chips; the chip of {hardware} is {vendor}'s: "
                                   f"its host costs and limits are another platform's (give --stack for this chip, or none)"]
    return out


def _check_implementations(specs: "Specs", hardware: str, stack: str, overrides) -> None:
    """The implementations a stack names of the hardware's measured ones exist there: its
    all-reduce on the system (``collectives.all_reduce_implementations``, docs/model.md §4.5),
    its attention kernels on the chip (``attention_implementations``, §11.3), where the
    hardware has measured any (else every stack's is timed on the floor or the roofline);
    else one line naming what was written and what there is."""
    hw, names = specs.views()[0], specs.stack_view()
    for field, table, listing, what in (
            ("all_reduce", hw.system.collectives.all_reduce_implementations, "collectives.all_reduce_implementations",
             hardware),
            ("attention", hw.chip.attention_implementations, "attention_implementations", f"the chip of {hardware}")):
        impl = names[field] if field in names.keys() else None
        if impl is not None and table is not None and impl not in table.keys():
            where = f"--set stack.{field}" if field in overrides else f"stack {stack}: {field}"
            raise SpecError(f"{where} {str(impl)[:60]!r}: not an implementation {what} has measured "
                            f"({listing}: {', '.join(table.keys())})")


def _check_spec_names(hardware, model, sets, stack) -> list[str]:
    """load_specs' arguments as given by value (the API): a name or path each (``model`` and
    ``stack`` may be None: the system's), ``sets`` a list of FIELD=VALUE strings; else one
    line naming the argument and what it got. Returns ``sets`` as a list."""
    for name, v, optional in (("hardware", hardware, False), ("model", model, True), ("stack", stack, True)):
        if v is None and optional:
            continue
        if not isinstance(v, (str, os.PathLike)) or not str(v).strip():
            got = repr(short(v, 40)) if isinstance(v, str) else short(v, 40) if v is None or isinstance(v, (int, float)) \
                else f"a {type(v).__name__}"
            what = "a system" if name == "hardware" else f"a {name}"
            raise SpecError(f"{name}={got}: expected {what} spec: a built-in name or a path to a YAML file"
                            + ("" if name == "hardware" else " (or None: the system's)"))
    if sets is None:  # as the CLI gives no --set
        return []
    if isinstance(sets, (str, bytes)) or not isinstance(sets, Iterable):
        raise SpecError(f"sets={short(sets, 60)!r}: expected a list of FIELD=VALUE strings, e.g. "
                        f"['chip.die.hbm_bandwidth_Bps=3.2e12']")
    sets = list(sets)
    bad = [x for x in sets if not isinstance(x, str)]
    if bad:
        raise SpecError(f"sets: expected FIELD=VALUE strings (got {_got(bad[0])})")
    return sets


def load_specs(hardware: str = "cloudmatrix384", model: str | None = None, sets: Iterable[str] = (),
               stack: str | None = None) -> Specs:
    """The system, its chip and the model (default: the system's, :func:`system_model`),
    validated together: every problem of the three files named in one error (not the first
    alone); a dtype of the model file the chip lacks adapted (:func:`adapted_precision`, with
    a note). Files validated before, unchanged, come from the spec cache (:mod:`.specs.cache`)
    when no ``--set`` changes them."""
    sets = _check_spec_names(hardware, model, sets, stack)
    model = model if model is not None else system_model(hardware)
    if not sets:
        cached = _cached_specs(hardware, model)
        if cached is not None:
            return _warned(_with_stack(cached, hardware, stack, {}))
    overrides = split_overrides(sets)
    (system, chip, spath, cpath), problems = load_hardware_parts(hardware, overrides)
    m = None
    try:
        m, _ = load_model(model, overrides)
    except CmperfError as e:
        problems.append(str(e))
    notes: list[str] = []
    if chip is not None and m is not None:
        changes, notes = adapted_precision(chip, m, set(overrides["model"]))
        if changes:
            m = m.model_copy(update={"precision": m.precision.model_copy(update=changes)})
        problems += precision_problems(chip, m)
    if problems:
        raise SpecError(" | ".join(problems))
    specs = Specs(hardware=Hardware(system=system, chip=chip, system_path=spath, chip_path=cpath), model=m, notes=notes)
    return _warned(_with_stack(specs, hardware, stack, overrides["stack"]))


_DEFAULT_SPECS: dict[str, Any] = {}


def default_specs() -> Specs:
    """``load_specs()`` (the default system, its model and serving stack), read once per
    process: the specs of a call that gives none (``predict("decode", {"batch": 64})``). They
    are read again when one of their files changes (its size, modification time or inode),
    as ``load_specs`` would see the change."""
    hit = _DEFAULT_SPECS.get("specs")
    if hit is not None and _file_stamps(hit[0]) == hit[1]:
        return hit[2]
    specs = load_specs()
    paths = _spec_paths(specs)
    _DEFAULT_SPECS["specs"] = (paths, _file_stamps(paths), specs)
    return specs


def _spec_paths(specs: Specs) -> tuple[Path, ...]:
    """The files ``specs`` were read from: the system, its chip, the model, the stack."""
    from .specs.loader import resolve

    if specs._plain is not None:
        paths = [specs._plain["system_path"], specs._plain["chip_path"]]
    else:
        paths = [specs.hardware.system_path, specs.hardware.chip_path]
    paths.append(resolve("model", system_model(str(paths[0]))))
    if specs.stack_name is not None:
        paths.append(resolve("stack", specs.stack_name))
    return tuple(Path(p) for p in paths)


def _file_stamps(paths: Iterable[Path]) -> tuple:
    """(size, mtime, inode) of each file (None for one that is gone)."""
    out = []
    for p in paths:
        try:
            st = os.stat(p)
        except OSError:
            out.append(None)
            continue
        out.append((st.st_size, st.st_mtime_ns, st.st_ino))
    return tuple(out)


_implausible_said: set[str] = set()


def _warned(specs: Specs) -> Specs:
    """``specs``, after one warning line on stderr (once per process) for each value outside the
    range of any real part (:mod:`.specs.plausible`); the prediction runs all the same."""
    from .specs.plausible import implausible

    if specs._plain is not None:
        chip, system = specs._plain["chip"], specs._plain["system"]
    else:
        chip, system = specs.hardware.chip.model_dump(), specs.hardware.system.model_dump()
    for line in implausible(chip, system):
        if line not in _implausible_said:
            _implausible_said.add(line)
            sys.stderr.write(f"cmperf: warning: {line}\n")
    return specs


def _cached_specs(hardware: str, model: str) -> Specs | None:
    """The specs from the cache when all three files were validated before (and agree on the
    precision), else None."""
    system = cached_spec("system", hardware)
    if system is None or not isinstance(system[0].get("chip"), str):
        return None
    chip = cached_spec("chip", system[0]["chip"], near=system[1].parent)
    m = cached_spec("model", model)
    if chip is None or m is None:
        return None
    from .specs.view import SpecView

    changes, notes = adapted_precision(SpecView(chip[0]), SpecView(m[0]), set())
    model = {**m[0], "precision": {**m[0]["precision"], **changes}} if changes else m[0]
    specs = Specs.from_plain(system[0], chip[0], model, system[1], chip[1], notes)
    hw, mv = specs.views()
    return None if precision_problems(hw.chip, mv) else specs



@dataclass
class Prediction:
    phase: str
    columns: Columns  # inputs + outputs, one row per configuration (valid rows only)
    invalid_columns: Columns  # rows rejected by validation, with their reason
    schedules: Any = field(repr=False, default=None)
    # where a row's schedules are when the rows of several microbatch counts shared them
    # (:func:`microbatch_blocks`): (counts, rows of a count, each row's position in count order)
    schedule_rows: Any = field(repr=False, default=None)
    # the stack's measured attention kernel per phase of its attention (prefill, decode), or None
    # (docs/model.md §11.3): what --breakdown names on an attention core
    attention: dict = field(repr=False, default_factory=dict)

    @cached_property
    def table(self):
        """Inputs and outputs as a pandas DataFrame, one row per valid configuration."""
        return self.columns.to_frame()

    @cached_property
    def invalid(self):
        """The rejected rows as a pandas DataFrame, with their ``reason``."""
        return self.invalid_columns.to_frame()

    def breakdown(self, row: int = 0):
        """Per-operator and per-section tables of one configuration (docs/model.md §5-§6), as
        pandas DataFrames."""
        import pandas as pd

        ops, sections = self.breakdown_records(row)
        return pd.DataFrame(ops), pd.DataFrame(sections)

    def _attention_of(self, op: str) -> str | None:
        """The measured attention kernel an op of the breakdown ran (a prompt's: a prefill pass's
        or a co-located chunk's core; else a decode step's), or None."""
        from .schedule.common import MEASURED_CORES

        if op not in MEASURED_CORES:
            return None
        return self.attention.get("prefill" if self.phase == "prefill" or op == "chunk_attention" else "decode")

    def breakdown_records(self, row: int = 0) -> tuple[list[dict], list[dict]]:
        """The rows of :meth:`breakdown`, as lists of dicts."""
        n = len(self.columns)
        choice = int(self.columns["microbatches_used"].iat[row])
        sched = self.schedules[choice - 1]  # one schedule per microbatch count
        shape, at = (n,), row
        if self.schedule_rows is not None:  # the schedules of the rows of each microbatch count, shared
            k, u, where = self.schedule_rows
            shape, at = (k, u), divmod(int(where[row]), u)
        pick = lambda x: float(np.broadcast_to(np.asarray(x, dtype=float), shape)[at])
        ops = []
        for p in sched.parts:
            calls = pick(p.calls)
            if calls == 0:
                continue
            impls = p.t.implementations
            for i, t in enumerate(p.t.ops()):
                per = pick(t.time_s)
                ops.append({
                    "section": p.section, "stream": p.stream, "op": t.name, "engine": t.engine,
                    "implementation": (impls[i] if impls else None) or self._attention_of(t.name) or "",
                    "calls": calls, "time_us": per * 1e6, "total_ms": per * calls * 1e3,
                    "compute_us": pick(t.compute_s) * 1e6, "vector_us": pick(t.vector_s) * 1e6,
                    "memory_us": pick(t.memory_s) * 1e6,
                    "network_us": pick(t.network_s) * 1e6, "latency_us": pick(t.latency_s) * 1e6,
                    "bound": str(np.broadcast_to(t.bound, shape)[at]),
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
        return ops, sections


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
    specs = specs or default_specs()
    values = given_values(values, "predict")
    sweep_cols = sweep_columns(specs, sweeps)
    given = set(values) if rows is None else set().union(*(set(r) for r in rows)) if rows else set()
    hw0, m0 = specs.views(phase=phase)
    st = hw0.stack  # the serving stack's view (no sweeps in it: specs.stack_view())
    if rows is None:  # the instance the system runs the model with, for what is not given
        values = deployment.with_instance(phase, check_inputs(phase, stack.input_defaults(phase, st, values)), hw0, m0)
    else:
        rows = _rows_with_instance(phase, stack.rows_defaults(phase, st, rows), hw0, m0)
    base = grid_from_rows(phase, rows) if rows is not None else make_grid(phase, values)
    grid = _with_sweeps(base, sweep_cols, zip_sweeps) if sweep_cols else base
    if phase in ("decode", "prefill", "afd"):
        check_precision(specs)
    if "expert_imbalance" in grid:  # 'default' = the model's documented real-traffic balance
        serving = m0.serving
        default = serving.default_expert_imbalance if serving is not None else 1.0
        col = grid["expert_imbalance"]  # a numeric column cannot hold the word: skip the per-row str()
        is_default = np.zeros(len(grid), dtype=bool) if col.dtype != object else col.astype(str) == "default"
        grid["_default_imbalance"] = is_default
        grid["expert_imbalance"] = _numeric(np.where(is_default, default, col), "--expert-imbalance")
    hw_rows, m_rows = specs.views({k: grid[k].to_numpy(dtype=float) for k in sweep_cols}, phase) if sweep_cols else (hw0, m0)
    with np.errstate(all="ignore"):
        deployment.resolve(phase, grid, hw_rows, m_rows)  # MTP, expert layout, batch capped by HBM
    valid, reason = validate(phase, grid, m_rows, hw_rows, given)  # each row with its own swept spec values
    invalid = grid.take(~valid).drop(["_default_imbalance"])
    invalid["reason"] = reason[~valid]
    if strict and not valid.all():
        raise ConfigError(str(reason[~valid][0]))
    g = grid.take(valid)
    if len(g) == 0:
        return Prediction(phase, g, invalid, None)
    cols = g.arrays()
    hw, m = specs.views({k: cols[k].astype(float) for k in sweep_cols}, phase)
    if "_default_imbalance" in cols:  # a swept default balance reaches the rows that asked for it
        default = m.serving.default_expert_imbalance if m0.serving is not None else 1.0
        cols["expert_imbalance"] = np.where(cols.pop("_default_imbalance"), default, cols["expert_imbalance"]).astype(float)
        g = g.drop(["_default_imbalance"])
        g["expert_imbalance"] = cols["expert_imbalance"]
    n = len(g)
    blocks = microbatch_blocks(cols) if phase in ("decode", "prefill", "afd") else None
    if blocks is not None:  # the rows of each microbatch count share one evaluation of the others' schedules
        order, counts, u = blocks
        cols = {k: v[order[:u]] for k, v in cols.items()}
        cols["microbatches"] = counts.reshape(-1, 1)  # (counts, 1): the choice is made for each count
        if sweep_cols:
            hw, m = specs.views({k: cols[k].astype(float) for k in sweep_cols}, phase)
    if phase in ("decode", "prefill", "afd"):
        cols = {k: v if k == "microbatches" and blocks is not None else _scalar_if_constant(v) for k, v in cols.items()}
    run = partial(evaluate, phase)
    with np.errstate(all="ignore"):  # an overflow is found in the outputs below and named, not printed
        out = None
        if n == 1 and hw is hw0 and phase in ("decode", "prefill", "afd"):  # a one-row question: its replay
            out = replay.evaluate(phase, hw, m, cols, run)
            if out is not None:
                out["_schedules"] = Later(lambda: run(hw, m, cols)["_schedules"])
        if out is None:
            out = run(hw, m, cols)
    table = g.copy()
    for k, v in out.items():
        if not k.startswith("_"):
            v = np.asarray(v)
            if blocks is not None:
                table[k] = _in_row_order(v, blocks)
            else:
                table[k] = v if v.shape == (n,) else v.reshape(1) if n == 1 else np.broadcast_to(v, (n,))
    table.insert(0, "phase", phase)
    add_bands(table, phase, hw0.system.name, m0.name)
    bad = output_problems(table, list(grid.columns))
    if (bad != "").any():
        if strict:
            raise ConfigError(str(bad[bad != ""][0]))
        dropped = g.take(bad != "")
        dropped["reason"] = bad[bad != ""]
        invalid = Columns.from_records(invalid.records() + dropped.records(), invalid.columns)
        table = table.take(bad == "")
        kept = np.flatnonzero(bad == "")
    else:
        kept = None
    schedule_rows = None
    if blocks is not None:  # where each row's schedules are: (counts, rows of a count, its position)
        at = np.empty(n, dtype=int)
        at[blocks[0]] = np.arange(n)
        schedule_rows = (len(blocks[1]), blocks[2], at if kept is None else at[kept])
    return Prediction(phase, table, invalid, out["_schedules"], schedule_rows, _attention_names(hw0, m0))


def _attention_names(hw, m) -> dict:
    """Per phase of attention, the stack's measured kernel that times it, if any (--breakdown)."""
    from .cost.host import stack_value
    from .schedule.common import attention_line

    name = stack_value(hw.stack, "attention", None)
    return {ph: str(name) for ph in ("prefill", "decode") if attention_line(hw, m, ph) is not None}


def given_values(values: Mapping[str, Any] | None, call: str) -> dict[str, Any]:
    """The ``values`` the API was given (``call``: predict, search): a mapping, no input None
    (None was dropped: the default answered for what was asked); a copy."""
    if values is not None and not isinstance(values, Mapping):
        raise ConfigError(f"{call}(values=...): expected a mapping of inputs to values, e.g. {{'batch': 64}} "
                          f"(got a {type(values).__name__})")
    unset = [k for k, v in (values or {}).items() if v is None]
    if unset:
        raise ConfigError(f"{call}(values={{{short(unset[0], 40)!r}: None}}): expected a value or a list of values; "
                          f"leave an input out to take its default")
    return dict(values or {})


def sweep_columns(specs: Specs, sweeps: Mapping[str, Iterable[float]] | None) -> dict[str, list]:
    """``sweeps`` as lists, each path a numeric field of ``specs`` (``chip.``, ``system.``,
    ``model.`` or ``stack.``; named as --set names a field that is not there, with the nearest
    name) and each value a finite number: a misspelt path would otherwise sweep nothing."""
    from .specs.loader import check_field

    if not sweeps:
        return {}
    if not isinstance(sweeps, Mapping):
        raise ConfigError(f"predict(sweeps=...): expected a mapping of spec paths to lists of values "
                          f"(got a {type(sweeps).__name__})")
    out = {}
    for path, values in sweeps.items():
        flag = f"sweeps[{short(path, 80)!r}]"
        prefix, _, rest = str(path).partition(".")
        parts = {"chip": "chip", "system": "system", "model": "model", "stack": "stack"}
        if not isinstance(path, str) or prefix not in parts or not rest:
            raise ConfigError(f"{flag}: a spec path must start with chip., system., model. or stack. "
                              f"(e.g. 'system.tiers.ub.bandwidth_Bps')")
        check_field(specs.part(prefix), rest, flag)
        if isinstance(values, (str, bytes, Mapping)) or not hasattr(values, "__iter__"):
            raise ConfigError(f"{flag}: expected a list of numbers (got {_got(values)})")
        values = list(values)
        bad = [v for v in values if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating))
               or not math.isfinite(v)]
        if bad or not values:
            raise ConfigError(f"{flag}: expected a list of finite numbers (got {_got(bad[0])})" if bad else
                              f"{flag}: expected a list of finite numbers (got an empty list)")
        out[path] = values
    return out


def _got(v) -> str:
    """A value as an error message shows it: a string in quotes, a number as written."""
    return repr(short(v, 40)) if isinstance(v, str) else short(v, 40)


def evaluate(phase: str, hw, m, cols: Mapping[str, Any]) -> dict:
    """The cost model's outputs of ``phase`` on the grid ``cols`` (its columns: numbers or
    arrays over its rows) and, for decode, prefill and AFD, its memory's; ``_schedules``: what
    each row's schedules timed (``--breakdown``)."""
    out = RUN[phase](hw, m, cols)
    mem = (decode_memory(hw, m, cols) if phase == "decode" else prefill_memory(hw, m, cols, out["_choice"])
           if phase == "prefill" else afd_memory(hw, m, cols) if phase == "afd" else {})
    return {**out, **mem}


class Later:
    """The schedules of a replayed one-row prediction (cmperf/schedule/replay.py), evaluated by
    the normal path when first read (``--breakdown``)."""

    def __init__(self, make):
        self.make, self.value = make, None

    def __getitem__(self, i):
        if self.value is None:
            with np.errstate(all="ignore"):
                self.value = self.make()
        return self.value[i]


def microbatch_blocks(cols: Mapping[str, Any]) -> tuple | None:
    """When the rows of a grid (``cols``: arrays of its rows) are one set of rows repeated for
    each of several microbatch counts (a search's product over ``microbatches``), (the rows
    in count order, stably: each count's rows in one block; the counts; the rows of a block);
    else None. The microbatch count only chooses among schedules every row evaluates (1 and
    2, AFD's 1..4), so one block's rows give every block's schedules: numpy broadcasts the
    counts, a (counts, 1) column, against them."""
    mb = cols.get("microbatches")
    if not isinstance(mb, np.ndarray) or mb.ndim != 1 or len(mb) < 2:
        return None
    counts, sizes = np.unique(mb, return_counts=True)
    if len(counts) < 2 or (sizes != sizes[0]).any():
        return None
    order, u = np.argsort(mb, kind="stable"), int(sizes[0])
    for k, v in cols.items():
        if k == "microbatches":
            continue
        if not isinstance(v, np.ndarray) or v.dtype.kind not in "biuf" or v.shape != mb.shape:
            return None
        x = v[order].reshape(len(counts), u)
        same = x[1:] == x[:1]
        if v.dtype.kind == "f":
            same |= np.isnan(x[1:]) & np.isnan(x[:1])
        if not same.all():
            return None
    return order, counts, u


def _in_row_order(v: np.ndarray, blocks: tuple) -> np.ndarray:
    """An output over (counts, rows of a block) (or broadcast to it), as a column of the grid's rows."""
    order, counts, u = blocks
    flat = np.broadcast_to(v, (len(counts), u)).reshape(-1)
    out = np.empty(len(flat), dtype=flat.dtype)
    out[order] = flat
    return out


def _scalar_if_constant(col: np.ndarray):
    """A grid column that holds one number in every row, as that number (a numpy scalar): the
    schedules broadcast it, so a one-row prediction's arithmetic is on scalars (a fraction of a
    one-element array's cost) and a search's on the columns that vary only. The same numbers,
    to the last bit or two (numpy's array loops of exp, log and power round like its scalar
    ones to within an ulp)."""
    if col.dtype.kind not in "biuf" or not len(col):
        return col
    first = col[0]
    if len(col) == 1 or bool((col == first).all()):
        return first
    # an input left unset in every row (NaN: the system's attention share, ...) is one value too
    return first if first != first and bool(np.isnan(col).all()) else col


def inert_fields(table, inputs: Iterable[str], fields: Iterable[str], outputs: Iterable[str]) -> list[str]:
    """The ``fields`` (input columns of ``table``) that change no output: among rows that
    agree on every other input, wherever the field takes two values, every one of
    ``outputs`` is the same. A field never seen to vary with the rest fixed is not named.
    ``table`` is Columns or a DataFrame; the rows are grouped with numpy (np.unique)."""
    inputs, out = [c for c in inputs if c in table.columns], []
    ys = [np.asarray(table[c], dtype=float) for c in outputs]
    for k in fields:
        x = np.asarray(table[k], dtype=float)
        others = [np.nan_to_num(np.asarray(table[c], dtype=float), nan=-np.inf) for c in inputs if c != k]  # NaN = unset
        group = np.unique(np.column_stack(others), axis=0, return_inverse=True)[1].ravel() if others else np.zeros(len(x), int)
        varies = _spread(x, group) > 0
        if varies.any() and all((_spread(y, group)[varies] == 0).all() for y in ys):
            out.append(k)
    return out


def _spread(values: np.ndarray, group: np.ndarray) -> np.ndarray:
    """max - min of ``values`` within each group; NaN and infinities count as values of their
    own (NaN in every row of a group: no spread; NaN in some rows only: infinite spread)."""
    n = int(group.max()) + 1 if len(group) else 0
    finite = np.isfinite(values)
    code = np.where(finite, 0.0, np.where(np.isnan(values), 1.0, np.sign(values) + 3.0))  # nan 1, -inf 2, +inf 4
    out = np.zeros(n)
    for v in (np.where(finite, values, 0.0), code):
        hi, lo = np.full(n, -np.inf), np.full(n, np.inf)
        np.maximum.at(hi, group, v)
        np.minimum.at(lo, group, v)
        out = np.maximum(out, hi - lo)
    return np.where(np.isnan(out), np.inf, out)


def inert_overrides(phase: str, values: Mapping[str, Any], specs: Specs, sets: Iterable[str],
                    base: Specs | None = None) -> list[str]:
    """The ``--set`` paths (numeric ones) that change no output of this prediction: the same
    prediction at the value the files give them (``base``: the specs without the overrides)
    is the same (:func:`inert_specs`). Without ``base``, each is moved x 2 instead."""
    from .specs.loader import split_overrides

    at: dict[str, float] = {}
    for prefix, fields in split_overrides(sets).items():
        for path, v in fields.items():
            if f"{prefix}.{path}".startswith(("system.deployment.", "stack.")):
                continue  # it chooses inputs or limits (docs/model.md §10-§11), not a number the cost model reads
            if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
                at[f"{prefix}.{path.removesuffix('.value')}"] = float(v)
    return inert_specs(phase, values, specs, at, file_values(base, at) if base is not None else None) or []


def file_values(base: Specs, paths: Iterable[str]) -> dict[str, float]:
    """The numbers ``base`` (the specs as the files give them) holds at ``paths`` (a path the
    files leave out, an optional field a --set adds, is not among them)."""
    out = {}
    for path in paths:
        try:
            v = spec_value(base, path)
        except (KeyError, AttributeError, TypeError):
            continue
        if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
            out[path] = float(v)
    return out


def inert_specs(phase: str, values: Mapping[str, Any], specs: Specs, at: Mapping[str, float],
                other: Mapping[str, float] | None = None) -> list[str] | None:
    """The spec fields of ``at`` (path -> the value it holds) that change no output of the
    prediction of ``phase`` at ``values``: the prediction is run again with each field at
    ``other``'s value for it (the unchanged file's, for a --set), else moved (x 2; 0 -> 1),
    one field per point of a zipped sweep, and :func:`inert_fields` judges. A field the
    vectorised model cannot vary (a count that shapes the model) cannot be judged: None then."""
    keys = list(at)
    if not keys:
        return []
    other = other or {}
    moved = {k: other[k] if k in other and other[k] != at[k] else (at[k] * 2 or 1.0) for k in keys}
    points = {k: [at[k]] + [moved[k] if j == i else at[k] for j in range(len(keys))]
              for i, k in enumerate(keys)}
    try:
        t = predict(phase, values, specs, sweeps=points, strict=False, zip_sweeps=True).columns
    except (TypeError, ValueError, IndexError, CmperfError):
        return None
    inputs = [*PHASE_DEFAULTS[phase], *keys]
    outputs = [c for c in t.columns if c not in inputs and t[c].dtype.kind in "biuf"]
    return inert_fields(t, inputs, keys, outputs)


def spec_value(specs: Specs, path: str) -> Any:
    """The value the specs give a dotted path (``system.tiers.ub.latency_s``), as the cost
    model reads it (a sourced pair's number)."""
    hw, m = specs.views()
    prefix, _, rest = path.partition(".")
    node = {"system": hw.system, "chip": hw.chip, "model": m}[prefix]
    for part in rest.split("."):
        node = node[part]
    return node


def unused_fields(specs: Specs, fields: Iterable[str], other: Mapping[str, float] | None = None) -> list[str] | None:
    """The numeric spec ``fields`` that change no output of the default decode nor of the
    default prefill prediction on these specs (:func:`inert_specs`; ``other``: the value to
    compare a field's with, the file's for a --set): the instance the system runs the model
    with (cmperf/deployment.py). None when neither default is a valid configuration there.
    The deployment section is not judged: it chooses inputs."""
    at = {}
    for f in fields:
        if f.startswith("system.deployment."):
            continue
        v = spec_value(specs, f)
        if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
            at[f] = float(v)
    unused, judged = set(at), False
    for phase in ("decode", "prefill"):
        try:
            r = predict(phase, {}, specs)
        except CmperfError:
            continue
        judged = True
        inputs = {k: r.columns[k].iat[0] for k in ("dies", "ep", "tp", "attn_tp", "batch", "tokens_per_npu", "mtp",
                                                 "redundant_experts", "shared_copies") if k in r.columns}
        inert = inert_specs(phase, inputs, specs, at, other)
        if inert is None:  # some field cannot be varied across a grid: judge each alone
            inert = [f for f in at if inert_specs(phase, inputs, specs, {f: at[f]}, other)]
        unused &= set(inert)
    return [f for f in at if f in unused] if judged else None


# Outputs that are empty by design: a second stream's time when one microbatch runs.
EMPTY_BY_DESIGN = {"stream_a_us", "stream_b_us"}
# Outputs that must be positive (time, rate) or non-negative (bytes); others may be negative
# (a microbatch gain) but never infinite or, outside EMPTY_BY_DESIGN, empty.
POSITIVE = ("tpot_ms", "ttft_ms", "iteration_ms", "forward_ms", "layer_us", "throughput_per_npu", "tokens_per_s_per_user")
NON_NEGATIVE = ("_ms", "_us", "_s", "_bytes", "_GBps", "_TFLOPS", "tokens_per_s_per_tflops")


def output_problems(table: Columns, inputs: list[str]) -> np.ndarray:
    """Per row, '' or why its prediction cannot be shown: an output that is infinite, empty
    (NaN) or of the wrong sign, which only a spec value or input far outside the model's range
    produces (a bandwidth or peak of 1e-300 overflows a time to inf). The safety net behind the
    input checks: no NaN, inf or negative time ever reaches a table."""
    reason = np.full(len(table), "", dtype=object)
    cols = table.arrays() if isinstance(table, Columns) else {c: np.asarray(table[c]) for c in table.columns}
    names = [c for c, v in cols.items() if not (c in inputs or c in EMPTY_BY_DESIGN or c.endswith(("_lo", "_hi"))
                                                or v.dtype.kind not in "iuf")]
    if not names or not len(table):
        return reason
    x = np.array([cols[c] for c in names], dtype=float)  # outputs x rows, checked at once
    positive, non_negative = _signs(tuple(names))
    wrong = ~np.isfinite(x) | ((x <= 0) & positive) | ((x < 0) & non_negative)
    if not wrong.any():
        return reason
    for i in np.flatnonzero(wrong.any(axis=0)):  # each such row: its first output (in order) that is wrong
        j = int(np.argmax(wrong[:, i]))
        reason[i] = (f"the predicted {names[j]} is {x[j, i]:g}: an input or spec value lies outside the model's range "
                     f"(e.g. a bandwidth, peak or efficiency near zero)")
    return reason


@lru_cache(maxsize=64)
def _signs(names: tuple) -> tuple[np.ndarray, np.ndarray]:
    """Per output of ``names`` (a column each): (must be positive, must be non-negative)."""
    positive = np.array([[c in POSITIVE] for c in names])
    return positive, np.array([[c not in POSITIVE and c.endswith(NON_NEGATIVE)] for c in names])


def _needed_dtypes(m) -> dict[str, str]:
    """The precision fields whose dtype the chip must run natively: the matmul and attention
    dtypes, the head, the gate (hidden dtype, MoE), the experts; a floating-point 8/4-bit KV
    cache (read by the attention kernels as it is stored). Storage-only dtypes (``weights``,
    ``expert_weights``: dequantised on the way in) need no peak."""
    p = m.precision
    needed = {"matmul": p.matmul, "attention": p.attention, "head": p.head}
    if m.moe is not None:  # the router's gate runs in the hidden dtype; experts follow matmul unless set
        needed["hidden"] = p.hidden
        if p.experts is not None:
            needed["experts"] = p.experts
    if p.kv_cache in NARROW_FLOATS:
        needed["kv_cache"] = p.kv_cache
    if getattr(p, "indexer", None) is not None:  # a DSA indexer's score GEMMs
        needed["indexer"] = p.indexer
    return needed


def adapted_precision(chip, m, user_set: set) -> tuple[dict[str, str], list[str]]:
    """The dtypes a model's file names that the chip lacks, replaced by the chip's closest
    (same width; else the narrowest wider one: FP8 -> INT8 on Ascend, the paper's W8A8), for
    every field the user did not set with --set (those stay errors); and one note per model
    saying so. (changes {field: dtype}, notes)."""
    have = dtypes_of(chip.die.peak_flops_per_s)
    changes = {k: _closest(v, chip) for k, v in _needed_dtypes(m).items()
               if v not in have and f"precision.{k}" not in user_set}
    if not changes:
        return {}, []
    what = ", ".join(f"{k} {getattr(m.precision, k)} -> {v}" for k, v in changes.items())
    return changes, [f"model {m.name} runs as {what} on chip {chip.name}, which lacks the file's dtype "
                     f"(give --set model.precision.FIELD=DTYPE to choose another)"]


def precision_problems(chip, m) -> list[str]:
    """Every dtype the model computes in must be one the chip's matrix units run
    (:func:`_needed_dtypes`); a dtype the user set and the chip lacks is an error, not a
    silent fallback (a model file's own dtype is adapted first: :func:`adapted_precision`).
    ``chip`` and ``m`` are the validated specs or their views."""
    needed = _needed_dtypes(m)
    have = dtypes_of(chip.die.peak_flops_per_s)
    missing = {k: v for k, v in needed.items() if v not in have}
    if not missing:
        return []
    what = "; ".join(f"precision.{k} = {v}" for k, v in missing.items())
    return [f"model {m.name} computes in a dtype chip {chip.name} lacks ({what}); the chip runs {', '.join(have)}: "
            f"set e.g. --set model.precision.{next(iter(missing))}={_closest(next(iter(missing.values())), chip)}"]


def check_precision(specs: Specs) -> None:
    """Raise the precision problems of ``specs`` (specs built without load_specs)."""
    hw, m = specs.views()
    problems = precision_problems(hw.chip, m)
    if problems:
        raise ConfigError("; ".join(problems))


def _closest(dtype: str, chip) -> str:
    """The chip's dtype that runs ``dtype`` best (same element width first: :func:`closest_dtype`)."""
    return closest_dtype(dtype, dtypes_of(chip.die.peak_flops_per_s))


def _rows_with_instance(phase: str, rows: list[Mapping[str, Any]], hw, m) -> list[dict]:
    """Each row with the derived instance inputs it leaves unset (rows that name the same
    instance inputs share one derivation)."""
    keys = ("dies", "tp", "attn_tp", "attention_dies", "expert_dies")
    scalar = (int, float, str, np.generic)  # np.ndim(v) == 0 without the call (a planner passes thousands of rows)
    memo: dict[tuple, dict] = {}
    names: dict[tuple, frozenset] = {}  # a row's inputs (in their order) -> as a set: rows share a few orders
    out = []
    for r in rows:
        if _holds_none(r.values()):
            r = {k: v for k, v in r.items() if v is not None}
        order = tuple(r)
        given = names.get(order)
        if given is None:
            given = names[order] = frozenset(order)
        key = (given, tuple([(k, r[k]) for k in keys if k in r and (isinstance(r[k], scalar) or np.ndim(r[k]) == 0)]))
        derived = memo.get(key)
        if derived is None:
            derived = memo[key] = deployment.instance(phase, hw, m, check_inputs(phase, r))
        out.append({**derived, **r})
    return out


def _holds_none(values) -> bool:
    """Whether any of ``values`` is None (``in``'s C loop; an array among them, whose ``== None``
    has no truth value, looked at one by one)."""
    try:
        return None in values
    except (ValueError, TypeError):
        return any(v is None for v in values)


def _with_sweeps(base: Columns, sweep_cols, zipped: bool = False) -> Columns:
    """Every base row for every swept value (cartesian product, or the zipped points)."""
    if zipped:
        n = len(next(iter(sweep_cols.values())))
        if any(len(v) != n for v in sweep_cols.values()):
            raise ConfigError("zipped sweeps need lists of one length")
        extra = Columns({"_row": np.repeat(np.arange(len(base)), n),
                         **{k: np.tile(np.asarray(v, dtype=float), len(base)) for k, v in sweep_cols.items()}})
    else:
        extra = product({"_row": list(range(len(base))), **sweep_cols})
    out = base.take(extra["_row"].to_numpy())
    for k in sweep_cols:
        out[k] = extra[k].to_numpy()
    return out


def _numeric(col: np.ndarray, flag: str) -> np.ndarray:
    """A column of numbers (an object column once held the word 'default')."""
    if col.dtype != object:
        return col
    out = np.empty(len(col), dtype=float)
    for i, v in enumerate(col):  # an object column: a few configurations, each looked at once
        try:
            out[i] = float(v)
        except (TypeError, ValueError):
            raise ConfigError(f"{flag}: expected a number or 'default' (got {short(v, 40)!r})") from None
    return infer(out.tolist())


from . import callable_module  # noqa: E402  (``from cmperf import predict``: cmperf/__init__.py)

callable_module(__name__, "predict")
