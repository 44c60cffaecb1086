"""Prefill schedule: one forward pass over the prompts a prefill instance holds
(docs/model.md §6).

Each layer is a chain of compute stages (AI Cube, with the vector work fused in) and
communication stages (UB collectives):

    C1 MLA down-proj   M1 all-gather (SP -> TP)
    C2 up-proj + FlashAttention   M2 all-to-all (TP -> SP)
    C3 O-proj + gate   M3 dispatch
    C4 experts         M4 combine          (dense layers: C4 = dense FFN, no M3/M4)

With one microbatch the stages run in series: sum(C) + sum(M). With two, microbatch 1 runs
one stage behind microbatch 0, so each compute stage of one overlaps a communication stage
of the other:

    layer = sum_i max(C_i, M_{i-1}) + sum_i max(C_i, M_i)     (per-microbatch stage times)

which lies between max(2 sum C, 2 sum M) and 2 (sum C + sum M).
"""

from __future__ import annotations

import numpy as np

from ..cost.arch import kv_bytes_per_token, kv_layers
from ..cost.ops import Bytes, dense_ffn_op, embedding_op, head_op, mla_prefill_ops, moe_ops, mtp_proj_op, placement
from ..cost.roofline import tier_bandwidth_Bps
from .common import Schedule, Section, select


def layer(sched: Schedule, section: str, hw, m, g, T, n: int, calls, moe: bool) -> np.ndarray:
    down, gather, up, core, a2a, o_proj = mla_prefill_ops(m, hw, T, g["prompt_len"], g["attn_tp"])
    if moe:
        pl = placement(m, T, g["ep"], g["redundant_experts"], g["shared_copies"], g["expert_imbalance"],
                       hw.chip.efficiency.matmul_tile_rows)
        gate, dispatch, experts, combine = moe_ops(m, hw, T, g["ep"], pl)
        stages = [([down], [gather]), ([up, core], [a2a]), ([o_proj, gate], [dispatch]), ([experts], [combine])]
    else:
        stages = [([down], [gather]), ([up, core], [a2a]), ([o_proj, dense_ffn_op(m, T)], [])]
    C = [sched.add_ops(section, "compute", c, hw, 1.0, calls * n) for c, _ in stages]
    M = [sched.add_ops(section, "comm", c, hw, 1.0, calls * n) if c else np.zeros_like(C[0]) for _, c in stages]
    if n == 1:
        t = sum(C) + sum(M)
        rule = "sum of compute and communication stages (one microbatch)"
    else:
        t = sum(np.maximum(C[i], M[i - 1]) + np.maximum(C[i], M[i]) for i in range(len(C)))
        rule = "sum_i max(C_i, M_i-1) + max(C_i, M_i): two microbatches one stage apart"
    sched.sections.append(Section(section, rule, t, calls))
    return t


def forward(hw, m, g, n: int) -> tuple[np.ndarray, Schedule]:
    sched = Schedule()
    T_die = g["tokens_per_npu"] / hw.chip.dies_per_package
    T = T_die / n
    n_dense = m.first_dense_layers
    layer(sched, "dense_layer", hw, m, g, T, n, n_dense, moe=False)
    layer(sched, "moe_layer", hw, m, g, T, n, m.num_layers - n_dense, moe=True)
    mtp = np.asarray(g["mtp"], dtype=float)
    t = sched.add_ops("mtp", "serial", [mtp_proj_op(m, T_die)], hw, 1.0, mtp)
    sched.sections.append(Section("mtp", "eh_proj over all prompt tokens", t, mtp))
    layer(sched, "mtp_layer", hw, m, g, T, n, mtp, moe=True)
    seqs = T_die / g["prompt_len"]
    t = sched.add_ops("per_pass", "serial", [embedding_op(m, T_die), head_op(m, seqs)], hw, 1.0, 1)
    t = t + hw.chip.latency.iteration_overhead_s
    sched.sections.append(Section("per_pass", "embedding + LM head on the last token of each prompt + overhead", t, 1))
    return sched.total_s(), sched


def kv_transfer_s(hw, m, g) -> np.ndarray:
    """Whole KV cache of a die's prompts sent once to the decode instance over RDMA
    (paper §4.1): bytes / RDMA bandwidth + latency (docs/model.md §4.3)."""
    layers = kv_layers(m, np.asarray(g["mtp"], dtype=float))
    T_die = g["tokens_per_npu"] / hw.chip.dies_per_package
    bytes_ = T_die * kv_bytes_per_token(m, Bytes.of(m).kv, layers)
    return bytes_ / tier_bandwidth_Bps(hw, "rdma") + hw.system.tiers.rdma.latency_s


def prefill(hw, m, g) -> dict:
    f1, s1 = forward(hw, m, g, 1)
    f2, s2 = forward(hw, m, g, 2)
    mb = np.asarray(g["microbatches"])
    choice = np.where(mb == 1, 1, np.where(mb == 2, 2, np.where(f2 < f1, 2, 1)))
    t = select(choice, f1, f2)
    dpp = hw.chip.dies_per_package
    throughput = g["tokens_per_npu"] / t
    peak_pkg = dpp * getattr(hw.chip.die.peak_flops_per_s, m.precision.matmul)
    kv = kv_transfer_s(hw, m, g)
    return {
        "microbatches_used": choice,
        "forward_ms": t * 1e3,
        "kv_transfer_ms": kv * 1e3,
        "ttft_ms": (t + kv) * 1e3,
        "throughput_per_npu": throughput,
        "tokens_per_s_per_tflops": throughput / (peak_pkg / 1e12),
        "_schedules": (s1, s2),
        "_choice": choice,
    }
