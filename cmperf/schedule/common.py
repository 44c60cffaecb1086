"""Pieces shared by the phase schedules: timing a list of ops, the load-dependent part of
a stage and its barrier wait, the one-or-two-microbatch choice, and the record of what was
timed (for ``--breakdown``)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from ..cost import host
from ..cost.collectives import barrier_wait_s
from ..cost.fusion import fused_table
from ..cost.roofline import Op, OpTimes, op_times, rows_of, sum_ops, total
from .pipeline import Pipeline


def timed(ops: list[Op], hw, cube_share=1.0, vector_share=1.0) -> OpTimes:
    """The ops of one stage timed together on the stream's shares (one table:
    cmperf/cost/roofline.py ``op_times``), adjacent kernels the serving stack fuses
    (``hw.fusion``) merged first (cmperf/cost/fusion.py); each keeps its op's ``launches``
    (the host's launch count of a step, cmperf/cost/host.py)."""
    return timed_parts([(ops, cube_share, vector_share)], hw)[0]


MEASURED_CORES = ("attention_core", "window_attention_core", "chunk_attention")  # the cores a table's kernel is


def attention_line(hw, m, phase: str):
    """The stack's measured attention kernel on the chip for ``phase`` (prefill, decode) and the
    model's attention kind (docs/model.md §11.3): the chip's ``attention_implementations`` line of
    the stack's ``attention``, or None (no stack naming one, not measured for that phase and
    kind, or an attention the tables do not time: sparse, linear)."""
    from ..cost import arch

    name = host.stack_value(hw.stack, "attention", None)
    table = hw.chip.attention_implementations
    if name is None or table is None or arch.is_dsa(m) or name not in table.keys():
        return None
    kind = "mla" if arch.is_mla(m) else "gqa"
    if phase not in table[name].keys() or kind not in table[name][phase].keys():
        return None
    return table[name][phase][kind]


def stack_attention(hw, m, ops: list, phase: str, rows) -> list:
    """``ops`` with the attention core run as the serving stack runs it: a prompt's attention
    (``phase`` prefill: passes and co-located chunks) at the stack's
    ``prefill_attention_efficiency`` (the share of the chip's calibrated attention rates its
    backend reaches, docs/model.md §11.2; 1 without a stack or a figure), and on a chip that
    measured the stack's kernel (:func:`attention_line`) the core at its table's line: busy /
    busy_efficiency + call_s + row_s x ``rows`` (the core's query rows per die in full-head
    units: a die's own tokens, whatever its TP group; §11.3)."""
    eff = host.stack_value(hw.stack, "prefill_attention_efficiency", 1.0) if phase == "prefill" else 1.0
    line = attention_line(hw, m, phase)
    if line is None and np.all(np.asarray(eff) == 1.0):
        return ops
    out = []
    for o in ops:
        if o.flop_kind == "attention":
            o = replace(o, kernel_efficiency=eff)
            if line is not None and o.name in MEASURED_CORES:
                o = replace(o, busy_efficiency=line["busy_efficiency"],
                            call_s=line["call_s"] + line["row_s"] * np.asarray(rows, dtype=float))
        out.append(o)
    return out


def timed_parts(parts: list[tuple], hw) -> list[OpTimes]:
    """:func:`timed` of each of ``parts`` ((ops, cube share, vector share): the stages of a
    layer, each on its stream's shares), all in one evaluation; kernels fuse within a part."""
    table, sizes = fused_table(rows_of([o for ops, _, _ in parts for o in ops]), getattr(hw, "fusion", ()),
                               [len(ops) for ops, _, _ in parts])
    if all(_same(p[i], parts[0][i]) for p in parts for i in (1, 2)):
        times = op_times(table, hw, parts[0][1], parts[0][2])
    else:
        shares = tuple([p[i] for p, n in zip(parts, sizes) for _ in range(n)] for i in (1, 2))
        times = op_times(table, hw, *shares, by_op=True)
    return [times] if len(parts) == 1 else times.parts(sizes)


ONE_TABLE_ROWS = 64  # a grid of at most this many rows times a whole step's stages as one table


class Timing:
    """The stages of a whole step (both microbatch schedules, every layer kind, the MTP
    module and the step's ends) gathered first and timed in one evaluation: each :meth:`add`
    takes a list of parts (as :func:`timed_parts` takes them) and returns a :class:`Timed`
    whose ``times`` are their tables; the first ``times`` asked for times every part added
    until then, together. A one-row prediction then pays the table's numpy dispatch once per
    step, not once per stage. A grid of more than ONE_TABLE_ROWS ``rows`` is timed one added
    list at a time instead (each table stays small enough for the caches). Either way every
    op's times are the same numbers: an op's terms are its own, elementwise."""

    def __init__(self, hw, rows: int = 1):
        self.hw, self.one_table = hw, rows <= ONE_TABLE_ROWS
        self.pending: list[Timed] = []

    def add(self, parts: list[tuple]) -> "Timed":
        t = Timed(self, list(parts))
        self.pending.append(t)
        return t

    def run(self) -> None:
        """Time every part added and not yet timed."""
        pending, self.pending = self.pending, []
        if not pending:
            return
        if not self.one_table or len(pending) == 1:
            for t in pending:
                t._times = timed_parts(t.parts, self.hw)
            return
        times = timed_parts([p for t in pending for p in t.parts], self.hw)
        at = 0
        for t in pending:
            t._times = times[at:at + len(t.parts)]
            at += len(t.parts)


class Timed:
    """Parts added to a :class:`Timing`; ``times``: their tables (timed on first use)."""

    __slots__ = ("timing", "parts", "_times")

    def __init__(self, timing: Timing, parts: list[tuple]):
        self.timing, self.parts, self._times = timing, parts, None

    @property
    def times(self) -> list[OpTimes]:
        if self._times is None:
            self.timing.run()
        return self._times


def grid_rows(g) -> int:
    """Rows of a grid (a mapping of column -> number or array over its rows)."""
    return max((np.size(v) for v in g.values()), default=1)


def _same(a, b) -> bool:
    """Whether two shares are the same (one object, or equal numbers)."""
    return a is b or (np.ndim(a) == 0 and np.ndim(b) == 0 and a == b)


def wait_after(tables: list[OpTimes], group, hw) -> np.ndarray:
    """Expected barrier wait at the end of the ops of ``tables``, the work a die did since the
    previous barrier: the spread of its load-dependent part across ``group`` dies
    (docs/model.md §4.3; weights, launches and barrier rounds are the same on every die)."""
    return barrier_wait_s(sum_ops(tables, "load_s"), group, hw.system.collectives.step_time_cv)


def choose(microbatches, one, two) -> np.ndarray:
    """Microbatches used per row: the flag (1 or 2), or for auto (0) the faster schedule."""
    mb = np.asarray(microbatches)
    return np.where(mb == 1, 1, np.where(mb == 2, 2, np.where(two < one, 2, 1)))


def select(choice: np.ndarray, one, two):
    """Per-row choice between the 1- and 2-microbatch variant of a quantity."""
    return np.where(choice == 2, two, one)


def tokens_per_s_per_tflops(throughput_per_npu, hw, m) -> np.ndarray:
    """Throughput per NPU over the package's dense peak in the matmul dtype (the paper's
    normalisation: 1,504 INT8 TFLOPS per 910C)."""
    peak_package = hw.chip.dies_per_package * getattr(hw.chip.die.peak_flops_per_s, m.precision.matmul)
    return throughput_per_npu / (peak_package / 1e12)


@dataclass
class Part:
    """The ops of one stage as scheduled: which section and stream, how often per step."""

    section: str
    stream: str
    calls: object  # calls per step (scalar or array): layers x microbatches
    t: OpTimes  # its ops (a stage's table)
    launches: object = 1.0  # kernel launches per call of all its ops (0: a host term, no kernel)


@dataclass
class Section:
    """How the ops of one section combine into its time (the overlap rule, in words)."""

    name: str
    rule: str
    time_s: np.ndarray  # time of one instance of the section
    count: object  # instances per step


@dataclass
class Schedule:
    parts: list[Part] = field(default_factory=list)
    sections: list[Section] = field(default_factory=list)
    host_s: object = 0.0  # the step's host time (launches + serial terms; :meth:`with_host`)

    def serial(self, section: str, ops, count, rule: str, extra_s=0.0) -> None:
        """Record ops (a stage's table, or a list of them) that run one after another on all
        cores (plus a fixed ``extra_s``)."""
        tables = [ops] if isinstance(ops, OpTimes) else list(ops)
        t = np.asarray((sum_ops(tables) if tables else 0.0) + extra_s, dtype=float)
        self.parts += [Part(section, "serial", count, o, total([o.launches])) for o in tables]
        self.sections.append(Section(section, rule, t, count))

    def stack(self, section: str, pipe: Pipeline, layers, repeats=1, rule: str = "", share=1.0) -> None:
        """Record ``repeats`` runs of a stack of ``layers`` layers through a pipeline: the
        steady period per layer, then the fill and drain of each run as a section of its own.
        ``share``: the stack's share of the layers of a run that interleaves several kinds of
        layer (hybrid attention): the run fills and drains once, each kind for its share."""
        layers = np.asarray(layers, dtype=float)
        for st in pipe.stages:
            self.parts += [Part(section, st.lane, layers * repeats * pipe.n, o, total([o.launches])) for o in st.ops]
        run = pipe.total_s(layers)
        self.sections.append(Section(section, rule, pipe.period_s, layers * repeats))
        self.sections.append(Section(f"{section}_fill_drain", "first and last layer of a run beyond the steady state",
                                     run - layers * pipe.period_s, np.asarray(repeats, dtype=float) * share))

    def total_s(self) -> np.ndarray:
        return sum(np.asarray(s.time_s) * s.count for s in self.sections)

    def launches(self) -> np.ndarray:
        """Kernel launches of one step: every recorded op's launches times its calls."""
        return host.launches(self.parts)

    def with_host(self, h: host.HostTime) -> np.ndarray:
        """The step time (docs/model.md §11.1: max(device, overlapped host) + serial host),
        the device's being what is recorded so far; each host term is recorded as a section
        and a breakdown row (section ``host``, engine ``host``, its time as latency)."""
        device = self.total_s()
        self.host_s = h.host_s
        ahead = np.asarray(h.overlapped_s, dtype=float)
        if np.any(ahead > 0):  # the launches, on the host's own lane (like a second stream: they overlap)
            self.parts.append(Part("host", "host (ahead of the device)", 1.0, host_time("host_launch", ahead), 0.0))
        terms = {"launch": np.maximum(ahead - device, 0.0), **h.serial}
        for name, t in terms.items():
            t = np.asarray(t, dtype=float)
            if not np.any(t > 0):
                continue
            if name != "launch":
                self.parts.append(Part("host", "host (device waits)", 1.0, host_time(f"host_{name}", t), 0.0))
            self.sections.append(Section(f"host_{name}", HOST_RULES[name], t, 1.0))
        return h.step_s(device)


HOST_RULES = {"launch": "host launches beyond the device's time: max(device, host launches) - device",
              "scheduler": "host time between iterations the device waits for", "pass": "host time per pass",
              "requests": "host work per prompt of the pass, one DP-attention rank's prompts",
              "dp_sync": "the scheduler's CPU all-gather across DP ranks: (ranks - 1) hops",
              "spec_seams": "eager seams between a speculative step's graphs: (graphs - 1) x (seam + the next graph's launch)",
              "spec_metadata": "host-built metadata of a speculative step, once per step",
              "dispatch_syncs": "device-to-host syncs of normal-mode dispatch: the device waits"}


def host_time(name: str, time_s) -> OpTimes:
    """A host term as a breakdown row: time the device waits (its latency), no work."""
    return OpTimes.idle(name, "host", time_s)


def layer_section(base: str, kind: str) -> str:
    """The section of a layer of attention ``kind``: ``moe_layer`` for full attention (every
    layer of most models), ``moe_layer_window`` / ``moe_layer_linear`` for the others."""
    return base if kind == "full" else f"{base}_{kind}"


@dataclass
class LayerMix:
    """The layers of a stack that mixes attention kinds (docs/model.md §5.1): each kind's
    pipeline (or AFD layer) and its layer count; a per-layer quantity of the stack is the
    mean over its layers."""

    parts: list  # (pipeline or layer, layers)

    def mean(self, f) -> np.ndarray:
        total = sum(n for _, n in self.parts)
        return sum(np.asarray(f(p), dtype=float) * n for p, n in self.parts) / total

    @property
    def period_s(self) -> np.ndarray:
        return self.mean(lambda p: p.period_s)

    @property
    def wait_s(self) -> np.ndarray:
        return self.mean(lambda p: p.wait_s)

    def lane_s(self, lane: str) -> np.ndarray:
        return self.mean(lambda p: p.lane_s(lane))
