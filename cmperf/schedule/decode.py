"""Decode schedule: one iteration of the decode instance (docs/model.md §5).

Per die, each iteration runs ``1 + k`` tokens for each of its requests (the last accepted
token and ``k`` MTP drafts to verify) through 61 layers, the LM head and ``k`` steps of the
MTP module. MoE layers run either as one microbatch on all cores (ops in series) or as two
microbatches on two streams with the cores split between them (paper §4.2.3):

    stream A = MLAProlog + FusedAttention + O-proj      on ``share`` of the cores
    stream B = Gate + Dispatch + Experts + Combine      on ``1 - share``
    layer    = max(n x max(A, B), HBM bytes of both streams / HBM bandwidth)

since in steady state each stream processes both microbatches once per layer, and both
streams draw on one HBM. The three dense layers have no communication to hide and run on
all cores as one microbatch.
"""

from __future__ import annotations

import numpy as np

from ..cost.ops import embedding_op, head_op, mla_decode_ops, moe_ops, mtp_proj_op, placement, dense_ffn_op
from .common import Schedule, Section, hbm_bound_s, select


def moe_layer(sched: Schedule, section: str, hw, m, g, T_die, R_die, n: int, calls) -> np.ndarray:
    """Time of one MoE layer for ``T_die`` tokens of ``R_die`` requests per die, ``n`` microbatches."""
    T, R = T_die / n, R_die / n
    pl = placement(m, T, g["ep"], g["redundant_experts"], g["shared_copies"], g["expert_imbalance"],
                   hw.chip.efficiency.matmul_tile_rows)
    attn = mla_decode_ops(m, T, R, g["kv_len"])
    moe = moe_ops(m, hw, T, g["ep"], pl)
    if n == 1:
        t = sched.add_ops(section, "serial", attn + moe, hw, 1.0, calls)
        sched.sections.append(Section(section, "sum of all ops (one microbatch, all cores)", t, calls))
        return t
    share = g["attention_share"]
    start = len(sched.parts)
    a = sched.add_ops(section, "A (attention)", attn, hw, share, calls * n)
    b = sched.add_ops(section, "B (moe)", moe, hw, 1.0 - share, calls * n)
    sched.streams[section] = (a, b)
    hbm = n * hbm_bound_s(sched.parts[start:], hw)
    t = np.maximum(n * np.maximum(a, b), hbm)
    sched.sections.append(Section(section, f"max({n} x max(stream A, stream B), HBM bytes of both / HBM bandwidth)", t, calls))
    return t


def dense_layer(sched: Schedule, hw, m, g, T_die, R_die, calls) -> np.ndarray:
    ops = mla_decode_ops(m, T_die, R_die, g["kv_len"]) + [dense_ffn_op(m, T_die)]
    t = sched.add_ops("dense_layer", "serial", ops, hw, 1.0, calls)
    sched.sections.append(Section("dense_layer", "sum of all ops (all cores)", t, calls))
    return t


def iteration(hw, m, g, n: int) -> tuple[np.ndarray, Schedule, np.ndarray]:
    """Iteration time with ``n`` microbatches in the MoE layers; returns (time, schedule, layer time)."""
    sched = Schedule()
    R_die = g["batch"] / hw.chip.dies_per_package
    k = draft_tokens(g)
    T_die = R_die * (1 + k)
    n_dense = m.first_dense_layers
    n_moe = m.num_layers - n_dense
    dense_layer(sched, hw, m, g, T_die, R_die, n_dense)
    layer = moe_layer(sched, "moe_layer", hw, m, g, T_die, R_die, n, n_moe)
    # MTP: k draft steps, each one token per request through eh_proj, one MoE block and the head.
    t = sched.add_ops("mtp", "serial", [mtp_proj_op(m, R_die), head_op(m, R_die, "mtp_head")], hw, 1.0, k)
    sched.sections.append(Section("mtp", "eh_proj + head, once per draft step", t, k))
    moe_layer(sched, "mtp_layer", hw, m, g, R_die, R_die, n, k)
    t = sched.add_ops("per_iteration", "serial", [embedding_op(m, T_die), head_op(m, T_die)], hw, 1.0, 1)
    t = t + hw.chip.latency.iteration_overhead_s
    sched.sections.append(Section("per_iteration", "embedding + LM head over all tokens + iteration overhead", t, 1))
    return sched.total_s(), sched, layer


def draft_tokens(g) -> np.ndarray:
    """Speculative (MTP) tokens each request verifies per iteration: ``mtp_k`` when MTP is on."""
    return np.where(np.asarray(g["mtp"]) == 1, g["mtp_k"], 0).astype(float)


def emitted_tokens(g) -> np.ndarray:
    """Tokens a request emits per iteration: 1 + a + a^2 + ... + a^k (each draft is kept only
    if all before it were accepted; docs/model.md §5.3)."""
    k = draft_tokens(g)
    a = np.asarray(g["mtp_acceptance"], dtype=float)
    geometric = np.where(np.isclose(a, 1.0), k, a * (1 - a ** k) / np.where(np.isclose(a, 1.0), 1.0, 1 - a))
    return 1.0 + geometric


def decode(hw, m, g) -> dict:
    """Vectorised decode prediction for grid ``g`` (a mapping of column -> array).

    ``stream_a_us`` / ``stream_b_us`` are the per-microbatch times of the two streams of
    the two-microbatch MoE layer (paper §4.2.3 reports about 600 us each)."""
    it1, s1, l1 = iteration(hw, m, g, 1)
    it2, s2, l2 = iteration(hw, m, g, 2)
    mb = np.asarray(g["microbatches"])
    choice = np.where(mb == 1, 1, np.where(mb == 2, 2, np.where(it2 < it1, 2, 1)))
    it = select(choice, it1, it2)
    emitted = emitted_tokens(g)
    tpot = it / emitted
    dpp = hw.chip.dies_per_package
    throughput = g["batch"] / tpot
    peak_pkg = dpp * getattr(hw.chip.die.peak_flops_per_s, m.precision.matmul)
    stream_a, stream_b = s2.streams["moe_layer"]
    return {
        "microbatches_used": choice,
        "iteration_ms": it * 1e3,
        "tpot_ms": tpot * 1e3,
        "layer_us": select(choice, l1, l2) * 1e6,
        "stream_a_us": stream_a * 1e6,
        "stream_b_us": stream_b * 1e6,
        "tokens_per_iteration": emitted,
        "throughput_per_npu": throughput,
        "tokens_per_s_per_user": 1.0 / tpot,
        "tokens_per_s_per_tflops": throughput / (peak_pkg / 1e12),
        "_schedules": (s1, s2),
        "_choice": choice,
    }
