"""Time of one operator on one die: roofline for compute and HBM, alpha-beta for the network
(docs/model.md §2-§4). Everything is numpy-vectorised over the configurations of a grid.

    t_compute = FLOPs / (peak[dtype] x efficiency[kind] x tile_efficiency x share)
    t_memory  = HBM bytes / (HBM bandwidth x memory efficiency x share)
    t_vector  = element operations / (vector_ops_per_s x share)
    t_network = max(bytes / tier bandwidth, messages x message_issue_s / share)
    t_latency = launches x kernel_launch_s + startup_s
    t         = max(t_compute, t_vector, t_memory, t_network) + t_latency

Cube, vector, load/store and network engines of a fused kernel work in a pipeline, so the
slowest sets the pace (the roofline's max); fixed costs add.

``share`` is the fraction of the die's cube/vector cores (and so of their load/store
engines) that the operator's stream owns: 1 when it runs alone, 16/24 for the attention
stream of the paper's decode overlap (docs/model.md §5.2).
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
    message issue) or ``dma`` (bulk copies on the network)."""

    name: str
    engine: str
    flops: Any = 0.0
    flop_kind: str = "matmul"  # "matmul" | "attention": which efficiency applies
    dtype: str = "int8"
    hbm_bytes: Any = 0.0
    vector_ops: Any = 0.0  # element operations on the AI Vector cores (docs/model.md §2.4)
    tile_efficiency: Any = 1.0
    net_bytes: Any = 0.0
    net_messages: Any = 0.0
    tier: str | None = None
    startup_s: Any = 0.0
    launches: Any = 1.0
    weight_bytes: Any = 0.0  # the part of hbm_bytes that is weights (shown in --breakdown)


@dataclass
class OpTime:
    name: str
    engine: str
    compute_s: np.ndarray
    vector_s: np.ndarray
    memory_s: np.ndarray
    network_s: np.ndarray
    latency_s: np.ndarray
    flops: np.ndarray
    hbm_bytes: np.ndarray
    net_bytes: np.ndarray
    weight_bytes: np.ndarray

    @property
    def time_s(self) -> np.ndarray:
        return np.maximum.reduce([self.compute_s, self.vector_s, self.memory_s, self.network_s]) + self.latency_s

    def bound(self) -> np.ndarray:
        """Which term dominates: compute, vector, memory, network or latency (floor + start-up)."""
        stack = np.stack(np.broadcast_arrays(self.compute_s, self.vector_s, self.memory_s, self.network_s, self.latency_s))
        return np.asarray(BOUNDS, dtype=object)[np.argmax(stack, axis=0)]


def tier_bandwidth_Bps(hw, tier: str):
    """Per-die bandwidth of a network tier: its measured value, else its chip port's nominal."""
    t = getattr(hw.system.tiers, tier)
    if t.bandwidth_Bps is not None:
        return t.bandwidth_Bps
    if t.port is not None:
        return getattr(hw.chip.die.ports, t.port)
    return t.node_bandwidth_Bps / (hw.system.node.npus * hw.chip.dies_per_package)


def op_time(op: Op, hw, share=1.0) -> OpTime:
    """Roofline + alpha-beta time of ``op`` on one die with ``share`` of its cores."""
    die, eff = hw.chip.die, hw.chip.efficiency
    peak = getattr(die.peak_flops_per_s, op.dtype)
    kind_eff = eff.attention_compute if op.flop_kind == "attention" else eff.matmul_compute
    flops = np.asarray(op.flops, dtype=float)
    compute = flops / (peak * kind_eff * op.tile_efficiency * share)
    memory = np.asarray(op.hbm_bytes, dtype=float) / (die.hbm_bandwidth_Bps * eff.memory_bandwidth * share)
    vector = np.asarray(op.vector_ops, dtype=float) / (die.vector_ops_per_s * share)
    if op.tier is not None:
        bw = tier_bandwidth_Bps(hw, op.tier)
        issue = np.asarray(op.net_messages, dtype=float) * hw.system.collectives.message_issue_s / share
        network = np.maximum(np.asarray(op.net_bytes, dtype=float) / bw, issue)
    else:
        network = np.zeros_like(compute)
    latency = np.asarray(op.launches, dtype=float) * hw.chip.latency.kernel_launch_s + op.startup_s
    return OpTime(op.name, op.engine, *np.broadcast_arrays(compute, vector, memory, network, latency),
                  flops=flops, hbm_bytes=np.asarray(op.hbm_bytes, dtype=float),
                  net_bytes=np.asarray(op.net_bytes, dtype=float), weight_bytes=np.asarray(op.weight_bytes, dtype=float))


def collective_startup_s(hw, group):
    """Fixed cost of one collective over ``group`` dies beyond its kernel launch: one
    synchronisation round per doubling of the group (a dissemination barrier needs
    ceil(log2 P) rounds), docs/model.md §4.2."""
    rounds = np.ceil(np.log2(np.maximum(np.asarray(group, dtype=float), 1.0)))
    return rounds * hw.system.tiers.ub.sync_round_s


def dtype_bytes(name: str) -> int:
    return DTYPE_BYTES[name]
