"""Time of one operator on one die, given the share of the die's cores its stream owns
(docs/model.md §3). Everything is numpy-vectorised over the configurations of a grid.

A die has two kinds of resource. Its **cores** (24 AI Cube, 48 AI Vector) can be split
between two streams; its **pools** (HBM, the UB port and its communication engine) cannot:
a stream that runs alone can draw all of them, two streams that run at once share them
(the pipeline, cmperf/schedule/pipeline.py, bounds each pool's total use per layer).

    t_compute = (FLOPs + K0 x outputs) / (peak[dtype] x efficiency[kind] x tile_efficiency x kernel x cube_share)
    t_vector  = element ops / (vector_ops_per_s x kernel x vector_share)
    t_memory  = HBM bytes / (HBM bandwidth x memory efficiency)
    t_network = max(bytes / tier bandwidth, messages x t_msg, SM work / comm SMs)
    t_latency = launches x kernel_launch_s (x vector_launch_ratio for an elementwise kernel)
                + sync rounds x 2 x tier latency
                (a collective: at least launches x its measured per-call floor, §4.5)
    t         = max(t_compute, t_vector, t_memory, t_network) + t_latency

``kernel`` (``Op.kernel_efficiency``, 1 unless a stack's kernel says otherwise) is the share of
the chip's calibrated rates the serving stack's own kernel for the op reaches on the cores it
holds: the chip's efficiencies are those of the kernels its micro-benchmarks timed, and a
stack that runs another implementation (a serving stack's prompt attention backend;
docs/model.md §11.2) keeps the cores busy 1 / kernel times as long for the same work. It
scales an untiled op's compute and every op's vector work; a tiled GEMM's tiles are timed on
the chip's own GEMM rates (no stack sets a kernel efficiency on one).

A stack's **measured kernel** (its attention backend as a table timed it on the chip, docs/model.md
§11.3: ``Op.call_s``, ``Op.busy_efficiency``, set by cmperf/schedule/common.py) keeps the roofline's
terms as its busy time and replaces the launch by the table's fixed time per call and query row:

    t = max(terms) / busy_efficiency + launches x call_s,   call_s = fixed + row_s x rows

``outputs`` is twice the output elements of the op's GEMMs: every output tile pays a
prologue and epilogue worth ``K0`` (``matmul_k_overhead``) steps of its reduction, so short
reductions run below the large-K efficiency (DeepGEMM: 775 TFLOPS at K = 512, 1,520 at
16,384, same M and N).

An op that carries its GEMM's shape (``Op.gemm``: groups x M x N x K) is timed tile by tile
(docs/model.md §3): the output is cut into bm x bn tiles (a fixed tile, or DeepGEMM's
choice: the block N of 16 ... 128 that needs the fewest waves, then fills the last one
best), the U matrix units run them in ceil(tiles / U) waves, and each unit streams its
tiles' K-panels of A and B:

    t_compute = waves x 2 bm bn (K + K0) / (peak x efficiency[dtype] / U)
    t_stream  = waves x (bm K / multicast + bn K) x dtype bytes + bm bn x out bytes) / stream rate per unit
    t_memory  = unique HBM bytes / (HBM bandwidth x memory efficiency)
    t_gemm    = (t_compute^p + t_memory^p + t_stream^p)^(1/p)   (p = matmul_overlap_exponent; max when absent)

The engines of a fused kernel work as a pipeline, so the slowest sets the pace (the
roofline's max) and max(terms) <= t_busy <= sum(terms); cmperf takes the lower bound,
except for attention, whose cube work (scores, then values) waits on its vector work
(softmax) block by block: there t_busy = max(t_compute + t_vector, t_memory, t_network).
Latency holds no core: it is the time a kernel waits for remote writes and flags.

A message (one token sent to one expert's die) costs ``t_msg`` (``message_issue_s``) of the
die's communication engine, which both streams share: it does not slow down when its stream
owns fewer cores (paper §5.4.1; docs/model.md §4.2). A synchronisation round is one UB round
trip (paper Table 1: 2 x 2.1 us), and a collective over ``G`` dies needs ceil(log2 G) rounds
(a dissemination barrier).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np

from ..specs.dtypes import DTYPE_BYTES
from ..specs.view import remember

BOUNDS = ("compute", "vector", "memory", "network", "latency")


@dataclass
class Op:
    """Per-die work of one operator for one microbatch (docs/model.md §2).

    Quantities may be scalars or arrays over the grid. ``engine`` is where the work runs:
    ``cube`` (AI Cube: matmuls, attention), ``vector`` (AI Vector: elementwise, routing,
    message issue) or ``dma`` (bulk copies on the network). ``sync_group`` is the number of
    dies the operator synchronises with (a collective), None for a local operator."""

    name: str
    engine: str
    flops: Any = 0.0
    outputs: Any = 0.0  # 2 x output elements of its GEMMs (FLOPs per unit of reduction length)
    flop_kind: str = "matmul"  # "matmul" | "attention": which efficiency applies
    dtype: str = "int8"
    hbm_bytes: Any = 0.0
    vector_ops: Any = 0.0  # element operations on the AI Vector cores (docs/model.md §2.4)
    tile_efficiency: Any = 1.0
    net_bytes: Any = 0.0  # on ``tier``, unless ``tier_bytes`` spreads them over several tiers
    net_messages: Any = 0.0
    tier: str | None = None  # the tier it uses (for several, the outermost: its latency sets the rounds)
    tier_bytes: Any = None  # {tier: bytes} when the traffic spans tiers
    sync_group: Any = None
    launches: Any = 1.0
    weight_bytes: Any = 0.0  # the part of hbm_bytes that is weights (shown in --breakdown)
    chained: bool = False  # cube and vector work depend on each other block by block (attention)
    gemm: Any = None  # its GEMMs' shapes (a Gemm, or a tuple run one after the other): timed tile by tile
    sm_work_s: Any = 0.0  # SM-seconds of a communication kernel's own work (packing, scales, per-rank slots)
    comm_units: Any = None  # SMs that communication kernel runs on (None or 0: not SM-limited)
    collective: str | None = None  # a collective's kind (specs COLLECTIVE_KINDS): its per-call floor applies
    in_B: Any = 0.0  # bytes of its input a fused producer hands over on chip (not re-read; cmperf/cost/fusion.py)
    kernel_efficiency: Any = 1.0  # share of the chip's calibrated compute and vector rates the stack's kernel reaches
    busy_efficiency: Any = 1.0  # a measured kernel's: its roofline busy time (every term) over the kernel's (§11.3)
    call_s: Any = math.nan  # a measured kernel's fixed time per call, rows included (NaN: launches x the chip's launch)


@dataclass
class Gemm:
    """Shape of one (grouped) GEMM: ``groups`` x (``m`` x ``k``) by (``k`` x ``n``), inputs of
    ``in_B`` bytes, output of ``out_B`` bytes per element. ``masked``: DeepGEMM's masked layout
    (groups padded to ``m`` rows each, no TMA multicast across groups); otherwise the groups
    are contiguous along M."""

    m: Any
    n: Any
    k: Any
    groups: Any = 1.0
    masked: Any = False
    in_B: Any = 1.0
    out_B: Any = 2.0
    w_B: Any = None  # bytes of the B operand (the weights) as stored, when not ``in_B`` (W4A8: 0.5)


# DeepGEMM's candidate block N (deep_gemm 1.0.0, jit_kernels/gemm.py get_best_configs)
BLOCK_N_CHOICES = np.arange(16, 129, 8, dtype=float)
FRACTAL = 16.0  # rows of an Ascend cube unit's fractal: a short GEMM's tile holds its rows rounded up to it


@dataclass
class Tiling:
    """How a GEMM is cut into output tiles and run on ``units`` matrix units."""

    block_m: np.ndarray
    block_n: np.ndarray
    tiles: np.ndarray
    waves: np.ndarray
    multicast: np.ndarray  # 2 where a cluster of two units shares (multicasts) its A tile


NUMBERS = (int, float, np.integer, np.floating)


class Traced:
    """The type of a traced number (cmperf/schedule/replay.py): a number, as a float64 scalar is."""

    __slots__ = ()


def number(x):
    """``np.asarray(x, dtype=float)``, but a number (Python's or numpy's) stays a float64
    scalar: a one-row prediction's arithmetic on it costs a fraction of a 0-d array's."""
    if type(x) is np.float64:
        return x
    if isinstance(x, NUMBERS) and not isinstance(x, bool):
        return np.float64(x)
    if isinstance(x, Traced):
        return x.astype(float)
    return np.asarray(x, dtype=float)


def broadcast(*arrays) -> list[np.ndarray]:
    """``np.broadcast_arrays(*arrays)``, without its cost (tens of microseconds: most of a
    one-row prediction's) when the arrays already share one shape: then they are returned as
    they are (as arrays), 0-d ones filled in to it. The cost model never writes into an array it
    was handed."""
    if all(type(a) is np.float64 for a in arrays):  # numbers (a one-row prediction's): nothing to spread
        return list(arrays)
    out = [np.asarray(a) for a in arrays]
    shape = None
    for a in out:
        if a.shape and a.shape != shape:
            if shape is not None:
                return np.broadcast_arrays(*out)
            shape = a.shape
    if shape is None:
        return out
    if math.prod(shape) > 64:  # a view of a 0-d array (no copy over a large grid)
        return [a if a.shape else np.broadcast_to(a, shape) for a in out]
    return [a if a.shape else np.full(shape, a) for a in out]  # a few rows: filled in (faster than a view)


def maximum(*arrays) -> np.ndarray:
    """The elementwise largest of arrays of one shape: ``np.maximum.reduce(list)`` without
    first copying them all into one stacked array (the same values, NaN propagated alike)."""
    out = np.asarray(arrays[0])
    for a in arrays[1:]:
        out = np.maximum(out, a)
    return out


def tiling(g: Gemm, units, tile_rows, tile_cols=None) -> Tiling:
    """Output tiles of ``g`` and the waves ``units`` matrix units run them in.

    With a fixed tile (``tile_cols``: Ascend's 128 x 152, paper Table 10) every GEMM uses it.
    Without, DeepGEMM's heuristic (deep_gemm 1.0.0, ``get_best_configs``; the M <= 128 and
    masked rows of its table are the same in every later version): block M 64 when M <= 64,
    else 128; block N the one of 16, 24, ..., 128 that needs the fewest waves, then leaves
    the fullest last wave, then is the largest; TMA multicast of A over two units when the
    GEMM's rows (all groups of a contiguous layout) reach 1,024, N splits into an even number
    of tiles and the layout is not masked with several groups."""
    m, n, groups, masked, units = (np.asarray(x, dtype=float) for x in (g.m, g.n, g.groups, g.masked, units))
    return _tiling(m, n, groups, masked, units, tile_rows, tile_cols)


def _tiling(m, n, groups, masked, units, tile_rows, tile_cols) -> Tiling:
    """:func:`tiling` of one GEMM shape (arrays, broadcast together)."""
    if tile_cols is not None:  # one tile for every GEMM: numpy broadcasts the shape's scalars as it goes
        bm = np.minimum(float(tile_rows), np.maximum(np.ceil(m / FRACTAL) * FRACTAL, FRACTAL))
        bn = np.asarray(float(tile_cols))
        tiles = groups * np.ceil(m / bm) * np.ceil(n / bn)
        shape = np.broadcast_shapes(tiles.shape, masked.shape)  # the tiles of every row of the grid
        tiles = tiles if tiles.shape == shape else np.broadcast_to(tiles, shape)
        return Tiling(bm, bn, tiles, waves(tiles, units), np.asarray(1.0))
    m, n, groups, masked, units = broadcast(m, n, groups, masked, units)
    masked = masked.astype(bool)
    bm = np.where(m <= 64, 64.0, 128.0)
    cand = BLOCK_N_CHOICES.reshape((-1,) + (1,) * m.ndim)
    tiles = groups * np.ceil(m / bm) * np.ceil(n / cand)
    w = waves(tiles, units)
    last = tiles - (w - 1) * units
    score = w * (units + 1) - last  # fewer waves first, then a fuller last wave
    pick = len(BLOCK_N_CHOICES) - 1 - np.argmin(score[::-1], axis=0)  # ties: the larger block N
    bn = BLOCK_N_CHOICES[pick]
    rows = np.where(masked, m, m * groups)
    legal = (np.mod(n, 2 * bn) == 0) & (~masked | (groups == 1))
    multicast = np.where((rows >= 1024) & legal, 2.0, 1.0)
    tiles = groups * np.ceil(m / bm) * np.ceil(n / bn)
    return Tiling(bm, bn, tiles, waves(tiles, units), multicast)


def waves(tiles, units) -> np.ndarray:
    """Waves ``units`` matrix units run ``tiles`` output tiles in: ceil(tiles / units)."""
    return np.ceil(tiles / units)


# --------------------------------------------------------------------------- a stage's ops as one table
# The ops a stage runs are timed together (docs/model.md §3, "a stage's operators in one
# evaluation"): their numbers are stacked into arrays whose first axis is the op and whose
# other axes are the grid's rows, and every term below is one numpy evaluation over that
# table. A one-row prediction then pays numpy's dispatch once per term and stage, not once per
# term and op; a search's rows ride along on the axes after the first. The same formulas time
# one op (``op_time``: a table of one).

NUMERIC = ("flops", "outputs", "hbm_bytes", "weight_bytes", "vector_ops", "tile_efficiency", "launches", "in_B",
           "net_bytes", "net_messages", "sync_group", "sm_work_s", "comm_units", "kernel_efficiency", "busy_efficiency",
           "call_s")
GEMM_FIELDS = ("m", "n", "k", "groups", "masked", "in_B", "out_B", "w_B")


def stack(values) -> np.ndarray:
    """``values`` (numbers or arrays) as one array with a first axis over them: the arrays
    broadcast together (numbers alone: a 1-d array, made in one call)."""
    try:
        return np.array(values, dtype=float)
    except ValueError:  # numbers and arrays mixed: each put in its row of the common shape
        shape = np.broadcast_shapes(*(np.shape(v) for v in values))
        out = np.empty((len(values),) + shape)
        for i, v in enumerate(values):
            out[i] = v
        return out


def per_op(a: np.ndarray, ndim: int) -> np.ndarray:
    """A stacked array (ops first) with axes of length 1 after the first, so that it has
    ``ndim`` axes in all and broadcasts against the grid's rows from the right."""
    if a.ndim == ndim:
        return a
    return a.reshape(a.shape[:1] + (1,) * (ndim - a.ndim) + a.shape[1:])


def total(arrays) -> np.ndarray:
    """The sum over ops of stacked arrays (a list of them, ops first), added one op after
    another (as Python's ``sum`` of the ops would: the same rounding)."""
    if not arrays:
        return np.asarray(0.0)
    if all(a.ndim == 1 and a.dtype == np.float64 for a in arrays):  # one row: the ops' numbers, in Python
        numbers = arrays[0].tolist() if len(arrays) == 1 else [x for a in arrays for x in a.tolist()]
        out = numbers[0]
        for x in numbers[1:]:
            out += x
        return np.float64(out)
    if arrays[0][0].size <= 64 and (len(arrays) == 1 or max(a[0].size for a in arrays) <= 64):  # a few rows: one call
        a = arrays[0] if len(arrays) == 1 else np.concatenate(_common(arrays))
        return a[0] if len(a) == 1 else np.add.accumulate(a, axis=0)[-1]
    rows = [row for a in arrays for row in a]  # many: row by row (no copy, no array of partial sums)
    if len(rows) == 1:
        return rows[0]
    out = rows[0] + rows[1]
    for row in rows[2:]:
        if row.shape == out.shape:
            out += row
        else:
            out = out + row
    return out


def _common(arrays) -> list[np.ndarray]:
    """Stacked arrays (ops first) of one shape after their first axis, for a concatenation."""
    shapes = {a.shape[1:] for a in arrays}
    if len(shapes) == 1:
        return list(arrays)
    ndim = max(a.ndim for a in arrays)
    arrays = [per_op(a, ndim) for a in arrays]
    shape = np.broadcast_shapes(*(a.shape[1:] for a in arrays))
    return [np.broadcast_to(a, a.shape[:1] + shape) for a in arrays]


@dataclass
class OpKinds:
    """The kind of each op of one stage, one list per attribute (``gemms``: each op's tuple of
    GEMMs, or None)."""

    names: list
    engines: list
    dtypes: list
    flop_kinds: list
    tiers: list
    tier_bytes: list
    collectives: list
    chained: list
    gemms: list

    def __len__(self) -> int:
        return len(self.names)


@dataclass
class OpColumns(OpKinds):
    """The ops of one stage as a table: ``num`` maps each of :data:`NUMERIC` to its values
    stacked (one row per op; a sync group of None is 1, a comm_units of None is 0), views of
    one array ``block`` (ops x fields) when every value is a number or all are of one shape."""

    num: dict = None
    block: Any = None

    @property
    def kinds(self) -> tuple:
        """What the chip's constants of each op depend on (its kind: :func:`stage_constants`)."""
        return (tuple(self.dtypes), tuple(self.flop_kinds), tuple(self.engines), tuple(self.tiers),
                tuple(self.collectives), tuple(None if b is None else tuple(b) for b in self.tier_bytes),
                tuple(0 if g is None else len(g) for g in self.gemms), tuple(self.chained))


@dataclass
class OpRows(OpKinds):
    """The ops of one stage before they are stacked: per op, its :data:`NUMERIC` values (a
    sync group of None is 1, a comm_units of None is 0), so that fused kernels are merged
    (cmperf/cost/fusion.py) on the values themselves, before the table is made."""

    values: list = None


def rows_of(ops: list[Op]) -> OpRows:
    """``ops`` as :class:`OpRows`."""
    values = [(o.flops, o.outputs, o.hbm_bytes, o.weight_bytes, o.vector_ops, o.tile_efficiency, o.launches, o.in_B,
               o.net_bytes, o.net_messages, 1.0 if o.sync_group is None else o.sync_group, o.sm_work_s,
               0.0 if o.comm_units is None else o.comm_units, o.kernel_efficiency, o.busy_efficiency, o.call_s)
              for o in ops]
    gemms = [None if o.gemm is None else (o.gemm,) if isinstance(o.gemm, Gemm) else tuple(o.gemm) for o in ops]
    return OpRows([o.name for o in ops], [o.engine for o in ops], [o.dtype for o in ops], [o.flop_kind for o in ops],
                  [o.tier for o in ops], [o.tier_bytes for o in ops], [o.collective for o in ops],
                  [o.chained for o in ops], gemms, values)


def columns(ops) -> OpColumns:
    """``ops`` (a list of :class:`Op`, or :class:`OpRows`) as a table (:class:`OpColumns`)."""
    rows = ops if isinstance(ops, OpRows) else rows_of(ops)
    lists = [getattr(rows, f) for f in LISTS]
    try:
        block = np.array(rows.values, dtype=float)  # every value a number (a one-row prediction), or all of one shape
    except ValueError:
        return OpColumns(*lists, {f: stack([v[i] for v in rows.values]) for i, f in enumerate(NUMERIC)})
    return OpColumns(*lists, fields_of(block), block)


LISTS = ("names", "engines", "dtypes", "flop_kinds", "tiers", "tier_bytes", "collectives", "chained", "gemms")


def fields_of(block: np.ndarray) -> dict:
    """The fields of a table's ``block`` (ops x fields [x rows]), as views."""
    return {f: block[:, i] for i, f in enumerate(NUMERIC)}


@dataclass
class OpTime:
    """Time of one op on its stream (a row of :class:`OpTimes`: its terms, and the busy,
    total and load times the table derived)."""

    name: str
    engine: str
    compute_s: Any
    vector_s: Any
    memory_s: Any
    network_s: Any
    latency_s: Any
    pool_compute_s: Any
    pool_vector_s: Any
    activation_memory_s: Any
    flops: Any
    hbm_bytes: Any
    net_bytes: Any
    weight_bytes: Any
    stream_s: Any
    launches: Any
    busy_s: Any
    time_s: Any
    load_s: Any
    bound: Any


@dataclass
class OpTimes:
    """Times of a stage's ops on their stream, one row per op (the grid's rows after it).
    ``*_s`` are the stream's times; ``pool_*_s`` the same work at the whole die's rate, which
    the pipeline sums per shared resource. Never changed once made: the busy, total and load
    times are computed on first use and kept."""

    names: tuple
    engines: tuple
    compute_s: np.ndarray
    vector_s: np.ndarray
    memory_s: np.ndarray
    network_s: np.ndarray
    latency_s: np.ndarray
    pool_compute_s: np.ndarray
    pool_vector_s: np.ndarray
    activation_memory_s: np.ndarray  # memory_s without the weights' bytes
    flops: np.ndarray
    hbm_bytes: np.ndarray
    net_bytes: np.ndarray
    weight_bytes: np.ndarray
    stream_s: np.ndarray  # a tiled GEMM's operand streaming into its units (0: not tiled)
    launches: np.ndarray  # kernel launches of one call (the host's count, cmperf/cost/host.py)
    chained: np.ndarray  # per op: cube and vector phases alternate (see Op.chained)
    tiled: np.ndarray  # per op: timed tile by tile (its GEMMs' p-norm applies)
    overlap_p: Any = None  # p of a tiled GEMM's p-norm of compute, memory and stream (None: max)
    implementations: tuple = ()  # per op: the measured collective it calls (all_reduce_protocols' name), or None

    def __len__(self) -> int:
        return len(self.names)

    def _matmul(self, memory) -> np.ndarray:
        """The GEMM's compute, memory and operand-stream terms combined: their p-norm for a
        tiled op, else (and without p) the max."""
        top = np.maximum(np.maximum(self.compute_s, memory), self.stream_s)
        rows = _rows(self.tiled)
        if self.overlap_p is None or not len(rows):
            return top
        p = np.asarray(self.overlap_p, dtype=float)
        top[rows] = (self.compute_s[rows] ** p + memory[rows] ** p + self.stream_s[rows] ** p) ** (1 / p)
        return top

    def _engines(self, memory) -> np.ndarray:
        """The slowest engine (roofline), or for a chained kernel its cube and vector phases
        one after the other."""
        out = np.maximum(np.maximum(self._matmul(memory), self.vector_s), self.network_s)
        rows = _rows(self.chained)
        if len(rows):
            out[rows] = np.maximum(np.maximum(self.compute_s[rows] + self.vector_s[rows], memory[rows]),
                                   self.network_s[rows])
        return out

    @cached_property
    def busy_s(self) -> np.ndarray:
        """Time the op's engines are busy."""
        return self._engines(self.memory_s)

    @cached_property
    def time_s(self) -> np.ndarray:
        return self.busy_s + self.latency_s

    @cached_property
    def load_s(self) -> np.ndarray:
        """The busy time of the work that grows with the die's tokens: everything but the
        weights read and the latency (the part whose spread across dies makes a barrier wait)."""
        return self._engines(self.activation_memory_s)

    @cached_property
    def total_time_s(self) -> np.ndarray:
        """The stage's ops one after the other."""
        return total([self.time_s])

    def bound(self) -> np.ndarray:
        """Per op, which term dominates: compute, vector, memory, network or latency (launch +
        rounds); ``compute+vector`` for a chained kernel whose cube and vector phases, added, do."""
        first = np.where(self.chained, self.compute_s + self.vector_s, self.compute_s)
        memory = np.maximum(self.memory_s, self.stream_s)  # a tiled GEMM's operand stream is memory traffic
        pick = np.argmax(np.stack(broadcast(first, self.vector_s, memory, self.network_s, self.latency_s)), axis=0)
        names = np.asarray(BOUNDS, dtype=object)[pick]
        return np.where(self.chained & (pick == 0), "compute+vector", names)

    def op(self, i: int) -> OpTime:
        """Op ``i``'s row."""
        bound = self.bound()
        return OpTime(self.names[i], self.engines[i], *(getattr(self, f)[i] for f in ROW_FIELDS), bound[i])

    def ops(self) -> list[OpTime]:
        return [self.op(i) for i in range(len(self))]

    def split(self) -> list["OpTimes"]:
        """A table of one op for each op."""
        return self.parts([1] * len(self))

    def parts(self, sizes: list[int]) -> list["OpTimes"]:
        """The table cut into consecutive tables of ``sizes`` ops: each a view of its rows, its
        derived times cut from the whole table's (derived once) and every other field cut
        from the table's when first read (:meth:`__getattr__`)."""
        derived = [(f, getattr(self, f)) for f in DERIVED]
        out, at = [], 0
        for n in sizes:
            part = OpTimes.__new__(OpTimes)
            d = part.__dict__
            d["names"], d["engines"], d["overlap_p"] = self.names[at:at + n], self.engines[at:at + n], self.overlap_p
            d["implementations"] = self.implementations[at:at + n]
            d["_rows_of"] = (self, at, at + n)
            for f, a in derived:
                d[f] = a[at:at + n]
            out.append(part)
            at += n
        return out

    def __getattr__(self, name: str):
        """A field of a part (:meth:`parts`) not read before: its rows of the whole table's."""
        rows = self.__dict__.get("_rows_of")
        if rows is None or name not in TABLE_FIELDS:
            raise AttributeError(name)
        table, start, stop = rows
        value = self.__dict__[name] = getattr(table, name)[start:stop]
        return value

    @classmethod
    def idle(cls, name: str, engine: str, latency_s) -> "OpTimes":
        """One op that holds no engine, only a wait (``latency_s``): a host term, a pool's
        view of the other pool's stage."""
        t = np.asarray(latency_s, dtype=float)[None]
        z = np.zeros_like(t)
        f = np.zeros((1,) + (1,) * (t.ndim - 1), dtype=bool)
        return cls((name,), (engine,), z, z, z, z, t, z, z, z, z, z, z, z, z, z, f, f)


def _rows(flags: np.ndarray) -> np.ndarray:
    """The ops (rows) whose per-op flag is set."""
    return np.flatnonzero(flags.reshape(len(flags), -1)[:, 0]) if flags.any() else np.empty(0, dtype=int)


TABLE_FIELDS = ("compute_s", "vector_s", "memory_s", "network_s", "latency_s", "pool_compute_s", "pool_vector_s",
                "activation_memory_s", "flops", "hbm_bytes", "net_bytes", "weight_bytes", "stream_s", "launches",
                "chained", "tiled")
DERIVED = ("busy_s", "time_s", "load_s")  # what a table derives (kept), elementwise per op
ROW_FIELDS = ("compute_s", "vector_s", "memory_s", "network_s", "latency_s", "pool_compute_s", "pool_vector_s",
              "activation_memory_s", "flops", "hbm_bytes", "net_bytes", "weight_bytes", "stream_s", "launches",
              "busy_s", "time_s", "load_s")


def sum_ops(tables, field: str = "time_s") -> np.ndarray:
    """``field`` summed over every op of ``tables`` (stages' tables), one op after another."""
    return total([getattr(t, field) for t in tables])


def tier_bandwidth_Bps(hw, tier: str):
    """Achievable bandwidth of a network tier per die and direction (a tier quoted per chip
    or per node shares it among the dies there)."""
    t = hw.system.tiers[tier]
    per = {"die": 1, "chip": hw.chip.dies_per_package, "node": hw.system.node.chips * hw.chip.dies_per_package}[t.per]
    return t.bandwidth_Bps / per


def tier_for_group(hw, group_dies, tiers=None) -> str:
    """The innermost tier (of ``tiers``, default all) whose domain holds ``group_dies`` dies
    (a group of consecutive dies: a TP group, a node). Scalar group sizes only."""
    names = list(tiers) if tiers is not None else hw.system.tiers.keys()
    chips = float(np.max(group_dies)) / hw.chip.dies_per_package
    for name in names:
        domain = hw.system.tiers[name].domain_chips
        if domain is None or chips <= domain:
            return name
    return names[-1]


def hbm_rate_Bps(hw):
    """Achievable HBM bandwidth of one die (Table 9 efficiency x nominal)."""
    return hw.chip.die.hbm_bandwidth_Bps * hw.chip.efficiency.memory_bandwidth


def sync_rounds(group) -> np.ndarray:
    """Rounds of a dissemination barrier over ``group`` dies: ceil(log2 group)."""
    return np.ceil(np.log2(np.maximum(np.asarray(group, dtype=float), 1.0)))


def sync_round_s(hw, tier: str):
    """One synchronisation round: a UB round trip, twice the tier's one-way latency."""
    return 2.0 * hw.system.tiers[tier].latency_s


def launch_s(hw, engine: str, local: bool):
    """Fixed cost of one launch of a kernel on ``engine`` (``local``: on no network tier): the
    chip's ``kernel_launch_s`` (what a GEMM kernel pays: the small-GEMM rows measure it), times
    ``vector_launch_ratio`` for a local elementwise kernel (no GEMM prologue and epilogue, no
    tensor-map set-up: MSM charges a vector op 2 us against a matrix op's 5 us; docs/model.md §2.9)."""
    lat = hw.chip.latency
    ratio = getattr(lat, "vector_launch_ratio", None) if "vector_launch_ratio" in lat.keys() else None
    if engine == "vector" and local and ratio is not None:
        return lat.kernel_launch_s * ratio
    return lat.kernel_launch_s


def all_reduce_protocols(hw, kind: str, tier: str) -> tuple | None:
    """The measured all-reduce the serving stack calls on ``tier`` (docs/model.md §4.5): (its
    name, [(group size, (small_floor_s, small_Bps, large_floor_s, large_Bps)), ...] by group
    size), from the stack's ``all_reduce`` and the system's
    ``collectives.all_reduce_implementations``; None for another collective, without a stack
    naming one, or where the system has not measured it on that tier (the call_floor_s path)."""
    if kind != "all_reduce" or hw.stack is None:
        return None
    try:
        name = hw.stack["all_reduce"]
    except (AttributeError, KeyError):
        return None
    table = hw.system.collectives.all_reduce_implementations
    if name is None or table is None or name not in table.keys() or tier not in table[name].keys():
        return None
    sizes = table[name][tier]
    lines = sorted((int(k[2:]), tuple(sizes[k][f] for f in ("small_floor_s", "small_Bps", "large_floor_s", "large_Bps")))
                   for k in sizes.keys())
    return str(name), lines


def protocol_time_s(lines: list, group, x_B):
    """One call's time of a measured all-reduce (:func:`all_reduce_protocols`' lines) in a group
    of ``group`` dies, ``x_B`` of ring bytes per die (2 (n - 1) / n of its buffer): the faster of
    its two lines, ``min(a1 + x / B1, a2 + x / B2)``, at the smallest measured group size at
    least ``group`` (the largest measured beyond it); 0 for a group of one (no call)."""
    t = None
    for n, (a1, b1, a2, b2) in reversed(lines):  # the largest first: each smaller one where it holds the group
        at_n = np.minimum(a1 + x_B / b1, a2 + x_B / b2)
        t = at_n if t is None else np.where(group <= n, at_n, t)
    return np.where(group > 1, t, 0.0)


def call_floor_s(hw, kind: str, tier: str):
    """The measured time of one call of a collective of ``kind`` over ``tier`` at small sizes
    (nccl-tests and the like: launch, protocol and synchronisation of the whole group;
    docs/model.md §4.5), 0 where the system states none. A collective's latency is the larger
    of this floor and its own launch + barrier rounds, so its time per call is

        t = floor + max(bytes / tier bandwidth, memory, vector)

    (the latency-bandwidth form of a collective, alpha + n / beta)."""
    floors = hw.system.collectives.call_floor_s
    if floors is None or kind not in floors.keys() or tier not in floors[kind].keys():
        return 0.0
    return floors[kind][tier]


def ratio(num, den, where_den_zero=0.0):
    """num / den, elementwise, with ``where_den_zero`` where the denominator is 0 (an op
    with no work of a kind takes no time for it: 0 / 0 = 0)."""
    num, den = number(num), number(den)
    if type(num) is np.float64 and type(den) is np.float64:
        return num / den if den != 0 else np.float64(where_den_zero)
    num, den = broadcast(np.asarray(num, dtype=float), np.asarray(den, dtype=float))
    return np.divide(num, den, out=np.full(num.shape, float(where_den_zero)), where=den != 0)


def matmul_dtype(hw, dtype: str):
    """The chip's GEMM efficiency and extra fixed cost per kernel in ``dtype``: its own entry
    of ``matmul_by_dtype``, else ``matmul_compute`` and no extra cost."""
    eff = hw.chip.efficiency
    own = eff.matmul_by_dtype
    if own is not None and dtype in own.keys():
        fixed = own[dtype].kernel_fixed_s
        return own[dtype].compute, (0.0 if fixed is None else fixed)
    return eff.matmul_compute, 0.0


def stream_units(units, share) -> np.ndarray:
    """Whole units a stream that owns ``share`` of a die's ``units`` has: floor(units x share),
    read with a tolerance for a share given as a rounded fraction (1 - 0.666666666667 of 24
    units is 8, not 7)."""
    return np.floor(np.asarray(units, dtype=float) * np.asarray(share, dtype=float) + 1e-9)


def core_split_fits(hw, share) -> np.ndarray:
    """Whether two streams that own ``share`` and 1 - ``share`` of a die's cores each have
    at least one matrix and one vector unit (a die with one cube core cannot split it)."""
    die = hw.chip.die
    share = np.asarray(share, dtype=float)
    fits = [stream_units(u, x) >= 1 for u in (die.matrix_units, die.vector_units) for x in (share, 1.0 - share)]
    return np.logical_and.reduce(broadcast(*fits))


def gemm_terms(gemms, hw, dtype: str, cube_share=1.0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Tile-level times of an op's GEMMs (one :class:`Gemm` or several run one after the
    other) on one die (docs/model.md §3): the compute of their waves on the stream's share
    of the matrix units, the same on the whole die (the pool the pipeline sums), and the
    operand stream into the units (0 when the chip has no rate)."""
    gemms = [gemms] if isinstance(gemms, Gemm) else list(gemms)
    terms = _gemm_table(gemms, stack([_unit_rate(hw, dtype)] * len(gemms)), cube_share, hw, ndim=1 + _rows_ndim(hw))
    return tuple(total([t]) for t in terms)


def _gemm_table(gemms: list[Gemm], unit_rate, cube_share, hw, by_op: bool = False, ndim: int = 1) -> tuple:
    """:func:`gemm_terms` of each of ``gemms`` (``unit_rate``: the achievable rate of each one's
    dtype on the die, stacked) on a stream that owns ``cube_share`` of the matrix units (with
    ``by_op``, stacked: each GEMM's), stacked: one row per GEMM."""
    eff = hw.chip.efficiency
    units = np.asarray(hw.chip.die.matrix_units, dtype=float)
    rows = [(g.m, g.n, g.k, g.groups, g.masked, g.in_B, g.out_B, g.in_B if g.w_B is None else g.w_B) for g in gemms]
    try:
        a = np.array(rows, dtype=float)
        fields = a.swapaxes(0, 1)
    except ValueError:
        fields = [stack([r[i] for r in rows]) for i in range(8)]
    ndim = max(max(f.ndim for f in fields), (0 if by_op else 1) + np.ndim(cube_share), np.ndim(unit_rate), ndim)
    m, n, k, groups, masked, in_B, out_B, w_B = (per_op(f, ndim) for f in fields)
    per_unit = per_op(unit_rate, ndim) / units
    share = per_op(cube_share, ndim) if by_op else cube_share
    k0 = eff.matmul_k_overhead if eff.matmul_k_overhead is not None else 0.0
    own = np.maximum(stream_units(units, share), 1.0)

    def compute(t, n_waves):
        return n_waves * 2 * t.block_m * t.block_n * (k + k0) / per_unit

    t = _tiling(m, n, groups, masked, own, eff.matmul_tile_rows, eff.matmul_tile_cols)
    stream_compute = compute(t, t.waves)
    if np.all(own == units):  # every stream owns every unit
        pool = stream_compute
    elif eff.matmul_tile_cols is not None:  # a fixed tile: the whole die runs the same tiles, in fewer waves
        pool = compute(t, waves(t.tiles, units))
    else:
        pool_t = _tiling(m, n, groups, masked, units, eff.matmul_tile_rows, eff.matmul_tile_cols)
        pool = compute(pool_t, pool_t.waves)
    if eff.matmul_stream_Bps is None:
        return stream_compute, pool, np.zeros_like(pool)
    tile_B = t.block_m * k / t.multicast * in_B + t.block_n * k * w_B + t.block_m * t.block_n * out_B
    return stream_compute, pool, t.waves * tile_B / eff.matmul_stream_Bps


def _unit_rate(hw, dtype: str):
    """The achievable GEMM rate of a die in ``dtype``: peak x its GEMM efficiency."""
    return getattr(hw.chip.die.peak_flops_per_s, dtype) * matmul_dtype(hw, dtype)[0]


def one_point(*values) -> tuple | None:
    """A hashable key of ``values`` (numbers, None or arrays) when each holds one number
    (its shape and value), else None (a grid of several rows is not memoised)."""
    out = []
    for v in values:
        if v is None or isinstance(v, (bool, int, float, str)):
            out.append(v)
            continue
        a = np.asarray(v)
        if a.size != 1:
            return None
        out.append((a.shape, a.dtype.char, a.item()))
    return tuple(out)


@dataclass
class StageConstants:
    """What the chip and system make of the kinds of a stage's ops (:meth:`OpColumns.kinds`),
    stacked one row per op: derived once per view of the specs and sequence of kinds."""

    rate: Any  # peak x the kind's efficiency (the untiled ops' compute)
    k0: Any  # reduction steps each output pays (matmul_k_overhead; 0 for attention)
    launch: Any  # one launch: the kernel's, plus its dtype's extra fixed cost for a cube kernel
    flags: np.ndarray  # (2, ops): chained (cube and vector phases alternate), tiled
    tiled: list  # the ops timed tile by tile
    untiled: list  # the others
    unit_rate: Any  # per GEMM of the tiled ops: its dtype's achievable rate on the die
    net: list  # the ops on a network tier
    owner: list  # per link (op, tier) of those: its op's position in ``net``
    bandwidth: Any  # per link: the tier's bandwidth per die
    round_s: Any  # per op of ``net``: one synchronisation round on its tier
    floor_s: Any  # per op of ``net``: a collective's per-call floor (0: none)
    collective: Any  # per op of ``net``: a collective
    protocols: list = None  # per op of ``net``: the measured all-reduce it calls (all_reduce_protocols), or None
    gemm_runs: Any = None  # each tiled op's GEMMs in the stage's GEMM table (:class:`Runs`)
    ndim: int = 1  # axes of a stacked table on this chip: 1 + the grid's rows' in a swept number (0: none)


def _rows_ndim(hw) -> int:
    """Axes of the grid's rows in the chip's and system's numbers the roofline reads directly
    (0 unless one of them is swept: then an array over the rows)."""
    die, eff = hw.chip.die, hw.chip.efficiency
    values = (hbm_rate_Bps(hw), die.vector_ops_per_s, die.matrix_units, hw.system.collectives.message_issue_s,
              eff.matmul_k_overhead, eff.matmul_stream_Bps)
    return max(np.ndim(v) for v in values if v is not None)


def stage_constants(hw, kinds: tuple) -> StageConstants:
    """:class:`StageConstants` of ``kinds`` (:meth:`OpColumns.kinds`) on ``hw``."""
    dtypes, flop_kinds, engines, tiers, collectives, tier_keys, n_gemms, chained = kinds
    eff = hw.chip.efficiency
    rate, k0, launch = [], [], []
    for dtype, kind, engine, tier in zip(dtypes, flop_kinds, engines, tiers):
        peak = getattr(hw.chip.die.peak_flops_per_s, dtype)
        matmul_rate, fixed = matmul_dtype(hw, dtype) if kind == "matmul" else (None, 0.0)
        rate.append(peak * (eff.attention_compute if kind == "attention" else matmul_rate))
        k0.append(eff.matmul_k_overhead if kind == "matmul" and eff.matmul_k_overhead is not None else 0.0)
        launch.append(launch_s(hw, engine, tier is None) + (fixed if engine == "cube" else 0.0))
    tiled = [i for i, n in enumerate(n_gemms) if n]
    flags = np.zeros((2, len(dtypes)), dtype=bool)
    flags[0] = np.array(chained, dtype=bool) & (eff.attention_phases == "chained")
    flags[1, tiled] = True
    unit_rate = stack([_unit_rate(hw, dtypes[i]) for i in tiled for _ in range(n_gemms[i])]) if tiled else None
    net = [i for i, t in enumerate(tiers) if t is not None]
    owner, bandwidth = [], []
    for j, i in enumerate(net):
        for t in tier_keys[i] if tier_keys[i] is not None else (tiers[i],):
            owner.append(j)
            bandwidth.append(tier_bandwidth_Bps(hw, t))
    floors = [call_floor_s(hw, collectives[i], tiers[i]) if collectives[i] is not None else 0.0 for i in net]
    protocols = [all_reduce_protocols(hw, collectives[i], tiers[i]) for i in net]
    untiled = [i for i, n in enumerate(n_gemms) if not n]
    rounds = [sync_round_s(hw, tiers[i]) for i in net]
    out = StageConstants(stack(rate), stack(k0), stack(launch), flags, tiled, untiled, unit_rate, net, owner,
                         stack(bandwidth) if net else None, stack(rounds) if net else None,
                         stack(floors) if net else None, np.array([collectives[i] is not None for i in net]),
                         protocols)
    lengths = np.array([n_gemms[i] for i in tiled], dtype=int)
    out.gemm_runs = Runs(np.cumsum(lengths) - lengths, lengths)
    swept = (out.rate, out.k0, out.launch, out.unit_rate, out.bandwidth, out.round_s, out.floor_s)
    measured = [v for p in protocols if p is not None for _, line in p[1] for v in line]  # a swept line: an array
    out.ndim = max(1 + _rows_ndim(hw), *(np.ndim(a) for a in swept if a is not None), *(1 + np.ndim(v) for v in measured))
    return out


def op_times(c: OpColumns, hw, cube_share=1.0, vector_share=1.0, by_op: bool = False) -> OpTimes:
    """Roofline times (module docstring) of the ops of table ``c`` on one die whose stream owns
    ``cube_share`` of the cube cores and ``vector_share`` of the vector cores (1, 1 when it
    runs alone; numbers or arrays over the grid's rows; ``by_op``: a list of each op's), all
    ops in one evaluation."""
    die, eff = hw.chip.die, hw.chip.efficiency
    kinds = c.kinds
    k = remember(hw, ("stage", kinds), lambda: stage_constants(hw, kinds))
    x = c.num
    if by_op:
        cube_share, vector_share = stack(cube_share), stack(vector_share)
    lead = 0 if by_op else 1  # the shares' axes before the grid's rows
    ndim = max(c.block.ndim - 1 if c.block is not None else max(a.ndim for a in x.values()), k.ndim,
               lead + np.ndim(cube_share), lead + np.ndim(vector_share))
    if ndim > 1:
        x = {f: per_op(a, ndim) for f, a in x.items()}
    if by_op:
        cube_share, vector_share = per_op(cube_share, ndim), per_op(vector_share, ndim)
    hbm = hbm_rate_Bps(hw)
    memory = x["hbm_bytes"] / hbm
    activation_memory = (x["hbm_bytes"] - x["weight_bytes"]) / hbm
    pool_vector = x["vector_ops"] / (die.vector_ops_per_s * x["kernel_efficiency"])
    latency = x["launches"] * per_op(k.launch, ndim)
    n, tiled, untiled = len(c), k.tiled, k.untiled
    if untiled:
        u = untiled if tiled else slice(None)
        pool_compute = ratio(x["flops"][u] + per_op(k.k0, ndim)[u] * x["outputs"][u],
                             per_op(k.rate, ndim)[u] * x["tile_efficiency"][u] * x["kernel_efficiency"][u])
        compute = pool_compute / (cube_share[u] if by_op else cube_share)
    stream = 0.0
    if tiled:  # timed tile by tile
        terms = _op_gemms(c, k, hw, cube_share, ndim, by_op)
        if not untiled:
            compute, pool_compute, stream = terms
        else:
            compute, pool_compute = (_join(n, (tiled, t), (untiled, z)) for t, z in zip(terms, (compute, pool_compute)))
            stream = _scatter(terms[2], tiled, n)
    network, net_bytes = 0.0, x["net_bytes"]
    if k.net:
        network, latency, net_bytes = _network(c, x, k, hw, latency, ndim)
    measured = ~np.isnan(x["call_s"])
    if measured.any():  # a stack's measured kernel (its table's line, §11.3): busy / its efficiency + its calls
        e = x["busy_efficiency"]
        compute, pool_compute, pool_vector, memory, activation_memory = (
            a / e for a in (compute, pool_compute, pool_vector, memory, activation_memory))
        latency = np.where(measured, x["launches"] * np.where(measured, x["call_s"], 0.0), latency)
    vector = pool_vector / vector_share
    arrays = broadcast(compute, vector, memory, network, latency, pool_compute, pool_vector, activation_memory,
                       stream)
    flags = k.flags.reshape(k.flags.shape + (1,) * (ndim - 1))
    return OpTimes(tuple(c.names), tuple(c.engines), *arrays[:8],
                   flops=x["flops"], hbm_bytes=x["hbm_bytes"], net_bytes=net_bytes, weight_bytes=x["weight_bytes"],
                   stream_s=arrays[8], launches=x["launches"], chained=flags[0], tiled=flags[1],
                   overlap_p=eff.matmul_overlap_exponent if tiled else None, implementations=_implementations(k, n))


def _implementations(k: StageConstants, n: int) -> tuple:
    """Per op of a stage: the measured collective it calls, or None (() where none does)."""
    if not k.protocols or all(p is None for p in k.protocols):
        return ()
    out = [None] * n
    for j, i in enumerate(k.net):
        if k.protocols[j] is not None:
            out[i] = k.protocols[j][0]
    return tuple(out)


def _join(n: int, *parts) -> np.ndarray:
    """``n`` stacked rows from ``parts`` ((rows, their values stacked) each)."""
    shape = np.broadcast_shapes(*(a.shape[1:] for _, a in parts))
    out = np.empty((n,) + shape)
    for rows, a in parts:
        out[rows] = a
    return out


def _scatter(a: np.ndarray, rows: list[int], n: int) -> np.ndarray:
    """Stacked ``a`` (one row per op of ``rows``) as ``n`` rows, zero elsewhere."""
    out = np.zeros((n,) + a.shape[1:])
    out[rows] = a
    return out


def _op_gemms(c: OpColumns, k: StageConstants, hw, cube_share, ndim: int, by_op: bool) -> tuple:
    """(compute, pool compute, stream) of the tiled ops of ``c``, one row each: their GEMMs
    timed in one table (:func:`_gemm_table`), each op's one after the other."""
    gemms = [g for i in k.tiled for g in c.gemms[i]]
    if by_op:  # each op's share: each GEMM its op's
        cube_share = cube_share[[i for i in k.tiled for _ in c.gemms[i]]]
    terms = [per_op(t, ndim) for t in _gemm_table(gemms, k.unit_rate, cube_share, hw, by_op, ndim)]
    if len(gemms) == len(k.tiled):  # one GEMM each
        return terms
    return tuple(k.gemm_runs.sums(t) for t in terms)  # each tiled op's GEMMs, added one after another


class Runs:
    """Runs of consecutive rows of a stacked array (``lengths[i]`` rows from ``starts[i]``, each
    at least one), whose rows :meth:`sums` adds run by run."""

    def __init__(self, starts, lengths):
        self.starts = np.asarray(starts, dtype=int)
        lengths = np.asarray(lengths, dtype=int)
        # per position k >= 1 in the runs: the runs that reach it, and their row there
        self.steps = [(more, self.starts[more] + k) for k in range(1, int(lengths.max(initial=1)))
                      for more in [lengths > k]]

    def sums(self, a: np.ndarray, add=np.add) -> np.ndarray:
        """Per run, its rows of ``a`` added (``add``) one after another, as :func:`total` adds a
        table's: one call per position in the runs, for all runs at once (``np.add.reduceat``
        adds a long run pairwise, which rounds otherwise)."""
        out = a[self.starts]
        for more, rows in self.steps:
            out[more] = add(out[more], a[rows])
        return out


def _network(c: OpColumns, x: dict, k: StageConstants, hw, latency, ndim: int) -> tuple:
    """(network time, latency, network bytes) of every op of ``c``, the ops on a tier given
    their network terms and barrier rounds (module docstring)."""
    net = k.net
    messages, work, units, group, launches = (x[f][net] for f in ("net_messages", "sm_work_s", "comm_units",
                                                                  "sync_group", "launches"))
    engine = messages * hw.system.collectives.message_issue_s
    sms = ratio(work, units)  # its own SMs' work (0 where it runs on none)
    if len(k.owner) == len(net) and all(c.tier_bytes[i] is None for i in net):
        b = x["net_bytes"][net]  # each op's bytes, on its one tier
    else:
        b = per_op(stack([v for i in net for v in (c.tier_bytes[i] or {None: x["net_bytes"][i]}).values()]), ndim)
    link = b / per_op(k.bandwidth, ndim)
    if len(k.owner) == len(net):  # one tier each
        top, sent = link, b
    else:
        top, sent = _per_owner(link, k.owner, len(net), np.maximum), _per_owner(b, k.owner, len(net), None)
    network = np.maximum(np.maximum(engine, sms), top)
    lat = latency[net] + sync_rounds(group) * per_op(k.round_s, ndim)
    if k.collective.any():  # a collective is never faster per call than measured
        floor = np.where(group > 1, per_op(k.floor_s, ndim), 0.0)
        lat = np.where(per_op(k.collective, ndim), np.maximum(lat, launches * floor), lat)
    measured = [j for j, p in enumerate(k.protocols or ()) if p is not None]
    if measured:  # the stack's own all-reduce, timed as its table measured it: each call, launch included
        net_rows, lat_rows = list(network), list(lat)
        wire = x["net_bytes"][net]  # each op's bytes (b is per link where an op spans tiers)
        for j in measured:
            calls = launches[j]
            lines = [(n, tuple(per_op(stack([v]), ndim)[0] for v in line)) for n, line in k.protocols[j][1]]  # rows on the right
            per_call = protocol_time_s(lines, group[j], wire[j] / np.where(calls > 0, calls, 1.0))
            net_rows[j], lat_rows[j] = calls * per_call, 0.0 * per_call
        network, lat = np.stack(np.broadcast_arrays(*net_rows)), np.stack(np.broadcast_arrays(*lat_rows))
    return _scatter(network, net, len(c)), _put(latency, net, lat), _put(x["net_bytes"], net, sent)


def _per_owner(a: np.ndarray, owner: list[int], n: int, reduce) -> np.ndarray:
    """Rows of ``a`` combined per owner (``owner[i]``: the row's, in order): the largest
    (``reduce`` np.maximum) or the sum, one after another."""
    groups = [[i for i, o in enumerate(owner) if o == j] for j in range(n)]
    rows = [a[g[0]] if len(g) == 1 else (reduce.reduce(a[g], axis=0) if reduce is not None else total([a[g]]))
            for g in groups]
    return np.stack(rows)


def _put(a: np.ndarray, rows: list[int], values: np.ndarray) -> np.ndarray:
    """A copy of stacked ``a`` with ``values`` in ``rows``."""
    shape = a.shape[1:] if a.shape[1:] == values.shape[1:] else np.broadcast_shapes(a.shape[1:], values.shape[1:])
    out = np.array(np.broadcast_to(a, a.shape[:1] + shape)) if shape != a.shape[1:] else a.copy()
    out[rows] = values
    return out


def op_time(op: Op, hw, cube_share=1.0, vector_share=1.0) -> OpTime:
    """Roofline time of ``op`` on one die whose stream owns ``cube_share`` of the cube
    cores and ``vector_share`` of the vector cores (1, 1 when it runs alone)."""
    return op_times(columns([op]), hw, cube_share, vector_share).op(0)


def dtype_bytes(name: str) -> int:
    return DTYPE_BYTES[name]
