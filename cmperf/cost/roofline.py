"""Time of one operator on one die, given the share of the die's cores its stream owns
(docs/model.md §3). Everything is numpy-vectorised over the configurations of a grid.

A die has two kinds of resource. Its **cores** (24 AI Cube, 48 AI Vector) can be split
between two streams; its **pools** (HBM, the UB port and its communication engine) cannot:
a stream that runs alone can draw all of them, two streams that run at once share them
(the pipeline, cmperf/schedule/pipeline.py, bounds each pool's total use per layer).

    t_compute = (FLOPs + K0 x outputs) / (peak[dtype] x efficiency[kind] x tile_efficiency x cube_share)
    t_vector  = element ops / (vector_ops_per_s x vector_share)
    t_memory  = HBM bytes / (HBM bandwidth x memory efficiency)
    t_network = max(bytes / tier bandwidth, messages x t_msg)
    t_latency = launches x kernel_launch_s + sync rounds x 2 x tier latency
    t         = max(t_compute, t_vector, t_memory, t_network) + t_latency

``outputs`` is twice the output elements of the op's GEMMs: every output tile pays a
prologue and epilogue worth ``K0`` (``matmul_k_overhead``) steps of its reduction, so short
reductions run below the large-K efficiency (DeepGEMM: 775 TFLOPS at K = 512, 1,520 at
16,384, same M and N).

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

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..specs.schema import DTYPE_BYTES

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


@dataclass
class OpTime:
    """Time of one op on its stream. ``*_s`` are the stream's times; ``pool_*_s`` the same
    work at the whole die's rate, which the pipeline sums per shared resource."""

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

    @property
    def busy_s(self) -> np.ndarray:
        """Time the op's engines are busy: the slowest of them (roofline), or for a chained
        kernel its cube and vector phases one after the other."""
        if self.chained:
            return np.maximum.reduce([self.compute_s + self.vector_s, self.memory_s, self.network_s])
        return np.maximum.reduce([self.compute_s, self.vector_s, self.memory_s, self.network_s])

    @property
    def time_s(self) -> np.ndarray:
        return self.busy_s + self.latency_s

    @property
    def load_s(self) -> np.ndarray:
        """The busy time of the work that grows with the die's tokens: everything but the
        weights read and the latency (the part whose spread across dies makes a barrier wait)."""
        if self.chained:
            return np.maximum.reduce([self.compute_s + self.vector_s, self.activation_memory_s, self.network_s])
        return np.maximum.reduce([self.compute_s, self.vector_s, self.activation_memory_s, self.network_s])

    def bound(self) -> np.ndarray:
        """Which term dominates: compute, vector, memory, network or latency (launch + rounds);
        ``compute+vector`` for a chained kernel whose cube and vector phases, added, do."""
        first = self.compute_s + self.vector_s if self.chained else self.compute_s
        stack = np.stack(np.broadcast_arrays(first, self.vector_s, self.memory_s, self.network_s, self.latency_s))
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


def ratio(num, den, where_den_zero=0.0):
    """num / den, elementwise, with ``where_den_zero`` where the denominator is 0 (an op
    with no work of a kind takes no time for it: 0 / 0 = 0)."""
    num, den = np.broadcast_arrays(np.asarray(num, dtype=float), np.asarray(den, dtype=float))
    return np.divide(num, den, out=np.full(num.shape, float(where_den_zero)), where=den != 0)


def op_time(op: Op, hw, cube_share=1.0, vector_share=1.0) -> OpTime:
    """Roofline time of ``op`` on one die whose stream owns ``cube_share`` of the cube
    cores and ``vector_share`` of the vector cores (1, 1 when it runs alone)."""
    die, eff, coll = hw.chip.die, hw.chip.efficiency, hw.system.collectives
    peak = getattr(die.peak_flops_per_s, op.dtype)
    kind_eff = eff.attention_compute if op.flop_kind == "attention" else eff.matmul_compute
    flops = np.asarray(op.flops, dtype=float)
    # each output tile pays a prologue/epilogue worth `matmul_k_overhead` reduction steps
    k0 = eff.matmul_k_overhead if op.flop_kind == "matmul" and eff.matmul_k_overhead is not None else 0.0
    work = flops + k0 * np.asarray(op.outputs, dtype=float)
    pool_compute = ratio(work, peak * kind_eff * np.asarray(op.tile_efficiency, dtype=float))
    memory = np.asarray(op.hbm_bytes, dtype=float) / hbm_rate_Bps(hw)
    activation_memory = (np.asarray(op.hbm_bytes, dtype=float) - np.asarray(op.weight_bytes, dtype=float)) / hbm_rate_Bps(hw)
    pool_vector = np.asarray(op.vector_ops, dtype=float) / die.vector_ops_per_s
    latency = np.asarray(op.launches, dtype=float) * hw.chip.latency.kernel_launch_s
    net_bytes = np.asarray(op.net_bytes, dtype=float)
    if op.tier is not None:
        engine = np.asarray(op.net_messages, dtype=float) * coll.message_issue_s
        per_tier = op.tier_bytes if op.tier_bytes is not None else {op.tier: net_bytes}
        links = [np.asarray(b, dtype=float) / tier_bandwidth_Bps(hw, t) for t, b in per_tier.items()]
        network = np.maximum.reduce(np.broadcast_arrays(engine, *links))
        net_bytes = sum(np.asarray(b, dtype=float) for b in per_tier.values())
        if op.sync_group is not None:
            latency = latency + sync_rounds(op.sync_group) * sync_round_s(hw, op.tier)
    else:
        network = np.zeros_like(memory)
    compute = pool_compute / cube_share
    vector = pool_vector / vector_share
    arrays = np.broadcast_arrays(compute, vector, memory, network, latency, pool_compute, pool_vector, activation_memory)
    return OpTime(op.name, op.engine, *arrays,
                  flops=flops, hbm_bytes=np.asarray(op.hbm_bytes, dtype=float),
                  net_bytes=net_bytes, weight_bytes=np.asarray(op.weight_bytes, dtype=float),
                  chained=op.chained and eff.attention_phases == "chained")


def dtype_bytes(name: str) -> int:
    return DTYPE_BYTES[name]
