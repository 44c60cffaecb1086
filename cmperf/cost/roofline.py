"""Time of one operator on one die, given the share of the die's cores its stream owns
(docs/model.md §3). Everything is numpy-vectorised over the configurations of a grid.

A die has two kinds of resource. Its **cores** (24 AI Cube, 48 AI Vector) can be split
between two streams; its **pools** (HBM, the UB port and its communication engine) cannot:
a stream that runs alone can draw all of them, two streams that run at once share them
(the pipeline, cmperf/schedule/pipeline.py, bounds each pool's total use per layer).

    t_compute = (FLOPs + K0 x outputs) / (peak[dtype] x efficiency[kind] x tile_efficiency x cube_share)
    t_vector  = element ops / (vector_ops_per_s x vector_share)
    t_memory  = HBM bytes / (HBM bandwidth x memory efficiency)
    t_network = max(bytes / tier bandwidth, messages x t_msg, SM work / comm SMs)
    t_latency = launches x kernel_launch_s (x vector_launch_ratio for an elementwise kernel)
                + sync rounds x 2 x tier latency
                (a collective: at least launches x its measured per-call floor, §4.5)
    t         = max(t_compute, t_vector, t_memory, t_network) + t_latency

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
from ..specs.view import KEEP, remember

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


def number(x):
    """``np.asarray(x, dtype=float)``, but a number (Python's or numpy's) stays a float64
    scalar: a one-row prediction's arithmetic on it costs a fraction of a 0-d array's."""
    if type(x) is np.float64:
        return x
    if isinstance(x, NUMBERS) and not isinstance(x, bool):
        return np.float64(x)
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
    shape = [np.asarray(x, dtype=float) for x in (g.m, g.n, g.groups, g.masked, units)]
    key = one_point(*shape, tile_rows, tile_cols) if KEEP["on"] else None  # one GEMM shape: tiled once per process
    if key is not None:
        hit = _TILINGS.get(key)
        if hit is not None:
            return hit
    out = _tiling(*shape, tile_rows, tile_cols)
    if key is not None:
        if len(_TILINGS) >= 65536:
            _TILINGS.clear()
        _TILINGS[key] = out
    return out


_TILINGS: dict[tuple, Tiling] = {}  # (shapes, values of m, n, groups, masked, units, tile) -> its tiling (read-only)


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


@dataclass
class OpTime:
    """Time of one op on its stream. ``*_s`` are the stream's times; ``pool_*_s`` the same
    work at the whole die's rate, which the pipeline sums per shared resource. Never changed
    once made: its busy, total and load times are computed on first use and kept."""

    name: str
    engine: str
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

    chained: bool = False  # cube and vector phases alternate (see Op.chained)
    stream_s: Any = 0.0  # a tiled GEMM's operand streaming into its units (0: not tiled)
    overlap_p: Any = None  # p of the GEMM's p-norm of compute, memory and stream (None: max)

    def _matmul(self, memory) -> np.ndarray:
        """The GEMM's compute, memory and operand-stream terms combined: their p-norm, or the max."""
        if self.overlap_p is None:
            return maximum(*broadcast(self.compute_s, memory, self.stream_s))
        p = np.asarray(self.overlap_p, dtype=float)
        return (self.compute_s ** p + memory ** p + np.asarray(self.stream_s, dtype=float) ** p) ** (1 / p)

    @cached_property
    def busy_s(self) -> np.ndarray:
        """Time the op's engines are busy: the slowest of them (roofline), or for a chained
        kernel its cube and vector phases one after the other."""
        if self.chained:
            return maximum(self.compute_s + self.vector_s, self.memory_s, self.network_s)
        return maximum(self._matmul(self.memory_s), self.vector_s, self.network_s)

    @cached_property
    def time_s(self) -> np.ndarray:
        return self.busy_s + self.latency_s

    @cached_property
    def load_s(self) -> np.ndarray:
        """The busy time of the work that grows with the die's tokens: everything but the
        weights read and the latency (the part whose spread across dies makes a barrier wait)."""
        if self.chained:
            return maximum(self.compute_s + self.vector_s, self.activation_memory_s, self.network_s)
        return maximum(self._matmul(self.activation_memory_s), self.vector_s, self.network_s)

    def bound(self) -> np.ndarray:
        """Which term dominates: compute, vector, memory, network or latency (launch + rounds);
        ``compute+vector`` for a chained kernel whose cube and vector phases, added, do."""
        first = self.compute_s + self.vector_s if self.chained else self.compute_s
        memory = np.maximum(self.memory_s, self.stream_s)  # a tiled GEMM's operand stream is memory traffic
        stack = np.stack(broadcast(first, self.vector_s, memory, self.network_s, self.latency_s))
        names = ("compute+vector" if self.chained else "compute",) + BOUNDS[1:]
        return np.asarray(names, dtype=object)[np.argmax(stack, axis=0)]


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


def launch_s(hw, op: Op):
    """Fixed cost of one launch of ``op``'s kernel: the chip's ``kernel_launch_s`` (what a GEMM
    kernel pays: the small-GEMM rows measure it), times ``vector_launch_ratio`` for a local
    elementwise kernel (no GEMM prologue and epilogue, no tensor-map set-up: MSM charges a
    vector op 2 us against a matrix op's 5 us; docs/model.md §2.9)."""
    lat = hw.chip.latency
    ratio = getattr(lat, "vector_launch_ratio", None) if "vector_launch_ratio" in lat.keys() else None
    if op.engine == "vector" and op.tier is None and ratio is not None:
        return lat.kernel_launch_s * ratio
    return lat.kernel_launch_s


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
    if not isinstance(gemms, Gemm):
        parts = [gemm_terms(g, hw, dtype, cube_share) for g in gemms]
        return tuple(sum(p[i] for p in parts) for i in range(3))
    key = one_point(gemms.m, gemms.n, gemms.k, gemms.groups, gemms.masked, gemms.in_B, gemms.out_B, gemms.w_B, cube_share)
    if key is None:
        return _gemm_terms(gemms, hw, dtype, cube_share)
    # one GEMM shape (a one-row prediction's) is timed once per view of the chip (the arrays
    # are never written into)
    return remember(hw.chip, ("gemm_terms", key, dtype), lambda: _gemm_terms(gemms, hw, dtype, cube_share))


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


def _gemm_terms(g: Gemm, hw, dtype: str, cube_share) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`gemm_terms` of one GEMM."""
    eff = hw.chip.efficiency
    units = np.asarray(hw.chip.die.matrix_units, dtype=float)
    rate, _ = matmul_dtype(hw, dtype)
    per_unit = getattr(hw.chip.die.peak_flops_per_s, dtype) * rate / units
    k0 = eff.matmul_k_overhead if eff.matmul_k_overhead is not None else 0.0
    k = np.asarray(g.k, dtype=float)
    own = np.maximum(stream_units(units, cube_share), 1.0)

    def compute(t, n_waves):
        return n_waves * 2 * t.block_m * t.block_n * (k + k0) / per_unit

    t = tiling(g, own, eff.matmul_tile_rows, eff.matmul_tile_cols)
    stream_compute = compute(t, t.waves)
    if own.shape == units.shape and np.all(own == units):  # the stream owns every unit
        pool = stream_compute
    elif eff.matmul_tile_cols is not None:  # a fixed tile: the whole die runs the same tiles, in fewer waves
        pool = compute(t, waves(t.tiles, units))
    else:
        pool_t = tiling(g, units, eff.matmul_tile_rows, eff.matmul_tile_cols)
        pool = compute(pool_t, pool_t.waves)
    if eff.matmul_stream_Bps is None:
        return stream_compute, pool, np.zeros_like(pool)
    w_B = g.in_B if g.w_B is None else g.w_B
    tile_B = t.block_m * k / t.multicast * np.asarray(g.in_B, dtype=float) + t.block_n * k * np.asarray(w_B, dtype=float) \
        + t.block_m * t.block_n * np.asarray(g.out_B, dtype=float)
    return stream_compute, pool, t.waves * tile_B / eff.matmul_stream_Bps


def op_time(op: Op, hw, cube_share=1.0, vector_share=1.0) -> OpTime:
    """Roofline time of ``op`` on one die whose stream owns ``cube_share`` of the cube
    cores and ``vector_share`` of the vector cores (1, 1 when it runs alone)."""
    die, eff, coll = hw.chip.die, hw.chip.efficiency, hw.system.collectives
    peak = getattr(die.peak_flops_per_s, op.dtype)
    matmul_rate, fixed = matmul_dtype(hw, op.dtype) if op.flop_kind == "matmul" else (None, 0.0)
    kind_eff = eff.attention_compute if op.flop_kind == "attention" else matmul_rate
    flops = number(op.flops)
    # each output tile pays a prologue/epilogue worth `matmul_k_overhead` reduction steps
    k0 = eff.matmul_k_overhead if op.flop_kind == "matmul" and eff.matmul_k_overhead is not None else 0.0
    memory = number(op.hbm_bytes) / hbm_rate_Bps(hw)
    activation_memory = (number(op.hbm_bytes) - number(op.weight_bytes)) / hbm_rate_Bps(hw)
    pool_vector = number(op.vector_ops) / die.vector_ops_per_s
    latency = number(op.launches) * (launch_s(hw, op) + (fixed if op.engine == "cube" else 0.0))
    stream, overlap_p = 0.0, None
    if op.gemm is not None:  # timed tile by tile
        compute, pool_compute, stream = gemm_terms(op.gemm, hw, op.dtype, cube_share)
        overlap_p = eff.matmul_overlap_exponent
    else:
        work = flops + k0 * number(op.outputs)
        pool_compute = ratio(work, peak * kind_eff * number(op.tile_efficiency))
        compute = pool_compute / cube_share
    net_bytes = number(op.net_bytes)
    if op.tier is not None:
        engine = number(op.net_messages) * coll.message_issue_s
        per_tier = op.tier_bytes if op.tier_bytes is not None else {op.tier: net_bytes}
        links = [number(b) / tier_bandwidth_Bps(hw, t) for t, b in per_tier.items()]
        sms = 0.0 if op.comm_units is None else ratio(op.sm_work_s, op.comm_units)  # its own SMs' work
        network = maximum(*broadcast(engine, sms, *links))
        net_bytes = sum(number(b) for b in per_tier.values())
        if op.sync_group is not None:
            latency = latency + sync_rounds(op.sync_group) * sync_round_s(hw, op.tier)
        if op.collective is not None and op.sync_group is not None:  # never faster per call than measured
            floor = np.where(number(op.sync_group) > 1, call_floor_s(hw, op.collective, op.tier), 0.0)
            latency = np.maximum(latency, number(op.launches) * floor)
    else:
        network = np.zeros_like(memory)
    vector = pool_vector / vector_share
    arrays = broadcast(compute, vector, memory, network, latency, pool_compute, pool_vector, activation_memory)
    return OpTime(op.name, op.engine, *arrays,
                  flops=flops, hbm_bytes=number(op.hbm_bytes),
                  net_bytes=net_bytes, weight_bytes=number(op.weight_bytes),
                  chained=op.chained and eff.attention_phases == "chained",
                  stream_s=stream if np.shape(stream) == arrays[0].shape else np.broadcast_to(stream, arrays[0].shape),
                  overlap_p=overlap_p)


def dtype_bytes(name: str) -> int:
    return DTYPE_BYTES[name]
