"""Decode schedule: one iteration of the decode instance (docs/model.md §5).

Per die, each iteration runs ``1 + k`` tokens for each of its requests (the last accepted
token and ``k`` MTP drafts to verify) through 61 layers, the LM head and ``k`` steps of the
MTP module. A MoE layer is two stages (paper §4.2.3):

    A = MLAProlog + FusedAttention + O-proj          -> dispatch barrier
    B = Gate + Dispatch + Experts + Combine          -> combine barrier

With one microbatch they run in series on all cores and every barrier wait is paid. With
two, A runs on a stream that owns ``attention_share`` of the cube and vector cores (16/24
and 32/48 in the paper) and B on the rest; HBM and the UB engine stay shared, and the
pipeline (cmperf/schedule/pipeline.py) gives the time per layer. The three dense layers
have no barrier to hide and run on all cores as one microbatch.
"""

from __future__ import annotations

import numpy as np

from ..cost.ops import dense_ffn_op, embedding_op, head_op, mla_decode_ops, moe_ops, mtp_proj_op, placement
from .common import Schedule, choose, select, timed, tokens_per_s_per_tflops, wait_after
from .pipeline import Pipeline, Stage, pipeline

LANES = {1: ("serial", "serial"), 2: ("A (attention)", "B (moe)")}
RULES = {1: "one microbatch: A + dispatch wait + B + combine wait",
         2: "max(2A, 2B, A + B + barrier waits, shared pools): two microbatches on two streams"}


def moe_stages(hw, m, g, tokens, requests, n: int) -> list[Stage]:
    """The two stages of one MoE layer for one of ``n`` microbatches of a die's ``tokens``
    tokens of ``requests`` requests, timed on the cores their streams own."""
    T, R = tokens / n, requests / n
    share = g["attention_share"] if n == 2 else 1.0
    moe_share = 1.0 - share if n == 2 else 1.0

    pl = placement(m, T, g["ep"], g["redundant_experts"], g["shared_copies"], g["expert_imbalance"],
                   hw.chip.efficiency.matmul_tile_rows)
    attn = timed(mla_decode_ops(m, T, R, g["kv_len"]), hw, share, share)
    moe = timed(moe_ops(m, T, g["ep"], pl), hw, moe_share, moe_share)
    lane_a, lane_b = LANES[n]
    # dispatch waits for the slowest die's attention, gate and send; combine for its experts
    w_dispatch = wait_after(attn + moe[:2], g["ep"], hw)
    w_combine = wait_after(moe[2:], g["ep"], hw)
    return [Stage("attention", lane_a, attn, w_dispatch), Stage("moe", lane_b, moe, w_combine)]


def iteration(hw, m, g, n: int) -> tuple[np.ndarray, Schedule, Pipeline]:
    """Iteration time with ``n`` microbatches in the MoE layers; returns (time, schedule,
    the main stack's pipeline)."""
    sched = Schedule()
    R_die = g["batch"] / hw.chip.dies_per_package
    k = draft_tokens(g)
    T_die = R_die * (1 + k)
    n_dense = m.first_dense_layers
    dense = timed(mla_decode_ops(m, T_die, R_die, g["kv_len"]) + [dense_ffn_op(m, T_die)], hw)
    sched.serial("dense_layer", dense, n_dense, "sum of all ops (all cores; no barrier to hide)")
    main = pipeline(moe_stages(hw, m, g, T_die, R_die, n), n)
    sched.stack("moe_layer", main, m.num_layers - n_dense, rule=RULES[n])
    # MTP: k draft steps, each one token per request through eh_proj, one MoE block and the head
    sched.serial("mtp", timed([mtp_proj_op(m, R_die), head_op(m, R_die, "mtp_head")], hw), k,
                 "eh_proj + head, once per draft step")
    draft = pipeline(moe_stages(hw, m, g, R_die, R_die, n), n)
    sched.stack("mtp_layer", draft, 1, repeats=k, rule=RULES[n])
    sched.serial("per_iteration", timed([embedding_op(m, T_die), head_op(m, T_die)], hw), 1,
                 "embedding + LM head over all tokens + iteration overhead", hw.chip.latency.iteration_overhead_s)
    return sched.total_s(), sched, main


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

    ``stream_a_us`` / ``stream_b_us`` are one microbatch's time on each stream of the
    two-microbatch schedule, the MoE stream's including the barrier waits inside dispatch
    and combine (paper §4.2.3: about 600 us each); empty when one microbatch is used."""
    it1, s1, p1 = iteration(hw, m, g, 1)
    it2, s2, p2 = iteration(hw, m, g, 2)
    choice = choose(g["microbatches"], it1, it2)
    it = select(choice, it1, it2)
    tpot = it / emitted_tokens(g)
    throughput = g["batch"] / tpot
    two = choice == 2
    return {
        "microbatches_used": choice,
        "iteration_ms": it * 1e3,
        "tpot_ms": tpot * 1e3,
        "layer_us": select(choice, p1.period_s, p2.period_s) * 1e6,
        "barrier_wait_us": select(choice, p1.wait_s, 2 * p2.wait_s) * 1e6,
        "stream_a_us": np.where(two, p2.lane_s(LANES[2][0]), np.nan) * 1e6,
        "stream_b_us": np.where(two, p2.lane_s(LANES[2][1]) + p2.wait_s, np.nan) * 1e6,
        "tokens_per_iteration": emitted_tokens(g),
        "throughput_per_npu": throughput,
        "tokens_per_s_per_user": 1.0 / tpot,
        "tokens_per_s_per_tflops": tokens_per_s_per_tflops(throughput, hw, m),
        "microbatch_gain": it1 / it2 - 1.0,
        "microbatch_layer_saving": 1.0 - p2.period_s / p1.period_s,
        "_schedules": (s1, s2),
        "_choice": choice,
    }
