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

from ..cost.collectives import route_of
from ..cost.ops import (attention_decode_ops, dense_ffn_op, embedding_op, head_op, moe_ops, mtp_proj_op, placement,
                        tp_allreduce_op)
from ..cost.roofline import tier_for_group
from .common import Schedule, choose, select, timed, tokens_per_s_per_tflops, wait_after
from .pipeline import Pipeline, Stage, pipeline

LANES = {1: ("serial", "serial"), 2: ("A (attention)", "B (moe)")}
RULES = {1: "one microbatch: every stage and barrier wait in series",
         2: "max(2A, 2B, A + B + barrier waits, shared pools): two microbatches on two streams",
         "compute-comm": "two microbatches one stage apart: compute of one under communication of the other"}


def comm_shares(hw, n: int) -> tuple[float, float]:
    """(compute lane, communication lane) shares of the cores in a compute-comm overlap:
    communication holds ``comm_units`` of the die's units while it runs (0: it only issues
    remote writes and holds none; its little vector work then draws on the shared pool)."""
    if n == 1:
        return 1.0, 1.0
    held = hw.system.overlap.decode.comm_units / hw.chip.die.vector_units
    return 1.0 - held, np.where(held > 0, held, 1.0)


def attention_ops(hw, m, g, T, R) -> list:
    """Attention of a die's ``T`` tokens of ``R`` requests, heads split over its TP group of
    ``tp`` dies (each die works on the whole group's tokens), then the group's all-reduce."""
    tp = g["tp"]
    ops = attention_decode_ops(m, T * tp, R * tp, g["kv_len"], tp)
    if np.any(np.asarray(tp) > 1):
        ops.append(tp_allreduce_op(m, T * tp, tp, tier_for_group(hw, tp), "attn_allreduce"))
    return ops


def moe_stages(hw, m, g, tokens, requests, n: int) -> list[Stage]:
    """The stages of one MoE layer for one of ``n`` microbatches of a die's ``tokens``
    tokens of ``requests`` requests, timed on the cores their lanes own (docs/model.md §5.2).

    core-split (Ascend): A = attention | B = gate, dispatch, experts, combine, on two streams.
    compute-comm (NVIDIA two-batch overlap): attention + gate | dispatch | experts | combine,
    compute on one lane and communication on the other."""
    T, R = tokens / n, requests / n
    pl = placement(m, T, g["ep"], g["redundant_experts"], g["shared_copies"], g["expert_imbalance"],
                   hw.chip.efficiency.matmul_tile_rows)
    attn_ops = attention_ops(hw, m, g, T, R)
    gate, dispatch, experts, combine = moe_ops(m, T, g["ep"], pl, route_of(hw, "decode"))
    ep = g["ep"]
    if hw.system.overlap.decode.style == "core-split":
        share = np.where(np.isnan(g["attention_share"]), hw.system.overlap.decode.attention_share,
                         g["attention_share"]) if n == 2 else 1.0
        other = 1.0 - share if n == 2 else 1.0
        attn = timed(attn_ops, hw, share, share)
        moe = timed([gate, dispatch, experts, combine], hw, other, other)
        lane_a, lane_b = LANES[n]
        # dispatch waits for the slowest die's attention, gate and send; combine for its experts
        return [Stage("attention", lane_a, attn, wait_after(attn + moe[:2], ep, hw)),
                Stage("moe", lane_b, moe, wait_after(moe[2:], ep, hw))]
    compute, comm = comm_shares(hw, n)
    c1 = timed(attn_ops + [gate], hw, compute, compute)
    m1 = timed([dispatch], hw, comm, comm)
    c2 = timed([experts], hw, compute, compute)
    m2 = timed([combine], hw, comm, comm)
    lane_c, lane_m = ("serial", "serial") if n == 1 else ("compute", "comm")
    return [Stage("attention", lane_c, c1), Stage("dispatch", lane_m, m1, wait_after(c1 + m1, ep, hw)),
            Stage("experts", lane_c, c2), Stage("combine", lane_m, m2, wait_after(c2 + m2, ep, hw))]


def rule(hw, n: int) -> str:
    return RULES[n] if n == 1 or hw.system.overlap.decode.style == "core-split" else RULES["compute-comm"]


def iteration(hw, m, g, n: int) -> tuple[np.ndarray, Schedule, Pipeline]:
    """Iteration time with ``n`` microbatches in the MoE layers; returns (time, schedule,
    the main stack's pipeline)."""
    sched = Schedule()
    R_die = g["batch"] / hw.chip.dies_per_package
    k = draft_tokens(g)
    T_die = R_die * (1 + k)
    n_dense = m.first_dense_layers
    if n_dense:
        tp = g["tp"]
        ffn = [dense_ffn_op(m, T_die * tp, tp)]
        if np.any(np.asarray(tp) > 1):
            ffn.append(tp_allreduce_op(m, T_die * tp, tp, tier_for_group(hw, tp), "ffn_allreduce"))
        sched.serial("dense_layer", timed(attention_ops(hw, m, g, T_die, R_die) + ffn, hw), n_dense,
                     "sum of all ops (all cores; no barrier to hide)")
    main = None
    if m.moe is not None:
        main = pipeline(moe_stages(hw, m, g, T_die, R_die, n), n)
        sched.stack("moe_layer", main, m.num_layers - n_dense, rule=rule(hw, n))
    if m.mtp.modules:
        # MTP: k draft steps, each one token per request through eh_proj, one MoE block and the head
        sched.serial("mtp", timed([mtp_proj_op(m, R_die), head_op(m, R_die, "mtp_head")], hw), k,
                     "eh_proj + head, once per draft step")
        draft = pipeline(moe_stages(hw, m, g, R_die, R_die, n), n)
        sched.stack("mtp_layer", draft, 1, repeats=k, rule=rule(hw, n))
    sched.serial("per_iteration", timed([embedding_op(m, T_die), head_op(m, T_die)], hw), 1,
                 "embedding + LM head over all tokens + iteration overhead", hw.chip.latency.iteration_overhead_s)
    return sched.total_s(), sched, main


def _dense_model(hw, m, g, it, sched) -> dict:
    tpot = it / emitted_tokens(g)
    throughput = g["batch"] / tpot
    layer = sched.sections[0].time_s
    nan = np.full(np.shape(tpot), np.nan)
    return {"microbatches_used": np.ones(np.shape(tpot)), "iteration_ms": it * 1e3, "tpot_ms": tpot * 1e3,
            "layer_us": np.broadcast_to(layer, np.shape(tpot)) * 1e6, "barrier_wait_us": np.zeros(np.shape(tpot)),
            "stream_a_us": nan, "stream_b_us": nan, "tokens_per_iteration": emitted_tokens(g),
            "throughput_per_npu": throughput, "tokens_per_s_per_user": 1.0 / tpot,
            "tokens_per_s_per_tflops": tokens_per_s_per_tflops(throughput, hw, m),
            "microbatch_gain": np.zeros(np.shape(tpot)), "microbatch_layer_saving": np.zeros(np.shape(tpot)),
            "_schedules": (sched, sched), "_choice": np.ones(np.shape(tpot))}


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
    if m.moe is None:  # a dense model has no barrier for a second microbatch to hide
        return _dense_model(hw, m, g, it1, s1)
    it2, s2, p2 = iteration(hw, m, g, 2)
    choice = choose(g["microbatches"], it1, it2)
    it = select(choice, it1, it2)
    tpot = it / emitted_tokens(g)
    throughput = g["batch"] / tpot
    two = choice == 2
    lanes = ("A (attention)", "B (moe)") if hw.system.overlap.decode.style == "core-split" else ("compute", "comm")
    return {
        "microbatches_used": choice,
        "iteration_ms": it * 1e3,
        "tpot_ms": tpot * 1e3,
        "layer_us": select(choice, p1.period_s, p2.period_s) * 1e6,
        "barrier_wait_us": select(choice, p1.wait_s, 2 * p2.wait_s) * 1e6,
        "stream_a_us": np.where(two, p2.lane_s(lanes[0]), np.nan) * 1e6,
        "stream_b_us": np.where(two, p2.lane_s(lanes[1]) + p2.wait_s, np.nan) * 1e6,
        "tokens_per_iteration": emitted_tokens(g),
        "throughput_per_npu": throughput,
        "tokens_per_s_per_user": 1.0 / tpot,
        "tokens_per_s_per_tflops": tokens_per_s_per_tflops(throughput, hw, m),
        "microbatch_gain": it1 / it2 - 1.0,
        "microbatch_layer_saving": 1.0 - p2.period_s / p1.period_s,
        "_schedules": (s1, s2),
        "_choice": choice,
    }
