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

from ..cost import arch
from ..cost.collectives import route_of
from ..cost.ops import (activation_op, attention_decode_kernels, chunk_attention_ops, dense_ffn_op, embedding_ops, head_ops,
                        moe_ops, mtp_proj_op, placement, residual_norm_ops, router_topk_op, tp_allreduce_op)
from ..cost.ops import Bytes, vocab_tp
from ..cost.host import decode_host, with_extend
from ..cost.roofline import core_split_fits, number, tier_for_group
from .common import (LayerMix, stack_attention, Part, Schedule, Section, Timing, choose, grid_rows, layer_section, select, timed_parts,
                     tokens_per_s_per_tflops, wait_after)
from .pipeline import Pipeline, Stage, pipeline

LANES = {1: ("serial", "serial"), 2: ("A (attention)", "B (moe)")}
LANE_NAMES = {"core-split": ("A (attention)", "B (moe)"), "compute-comm": ("compute", "comm")}
RULES = {1: "one microbatch: every stage and barrier wait in series",
         2: "max(2A, 2B, A + B + barrier waits, shared pools): two microbatches on two streams",
         "compute-comm": "two microbatches one stage apart: compute of one under communication of the other"}


def comm_shares(hw, n: int, overlap) -> tuple[float, float]:
    """(compute lane, communication lane) shares of the cores in a compute-comm overlap:
    communication holds ``comm_units`` of the die's units while it runs (0: it only issues
    remote writes and holds none; its little vector work then draws on the shared pool)."""
    if n == 1:
        return 1.0, 1.0
    held = overlap.comm_units / hw.chip.die.vector_units
    return 1.0 - held, np.where(held > 0, held, 1.0)


def attention_ops(hw, m, g, T, R, C=0.0, kind: str = "full") -> list:
    """Attention of a die's ``T`` tokens of ``R`` requests on a layer of ``kind`` (full,
    window, linear), heads split over its TP group of ``tp`` dies (each die works on the
    whole group's tokens), then the group's all-reduce.

    ``C`` prompt tokens of a co-located chunk (docs/model.md §9.4) join the same pass: they
    go through the same projections (one GEMM over ``T + C`` rows: the weights are read once)
    and add their own attention over their prompts (:func:`chunk_attention_ops`).

    The block's small kernels around it (docs/model.md §2.9): the previous block's residual
    add and this block's RMSNorm before, the attention's residual add and the FFN's RMSNorm
    after the all-reduce, on the group's tokens (the residual stream is replicated over TP)."""
    tp = g["tp"]
    C = number(C)
    rows = (T + C) * tp
    ops = stack_attention(hw, m, attention_decode_kernels(m, T * tp, R * tp, g["kv_len"], tp, kind), "decode", T)
    if np.any(C > 0):
        fused = attention_decode_kernels(m, (T + C) * tp, R * tp, g["kv_len"], tp, kind)
        ops = [own if own.flop_kind == "attention" else both for own, both in zip(ops, fused)]
        core = next(i for i, o in enumerate(ops) if o.flop_kind == "attention")
        # the chunk's attention right after the decode tokens' core: the kernels a stack fuses
        # around the block (O-proj and the residual add) stay adjacent
        ops[core + 1:core + 1] = stack_attention(hw, m, chunk_attention_ops(m, C, g["prompt_len"], chunk_geometry(hw, g)["chunk"], tp, kind),
                                                 "prefill", C)
    ops = residual_norm_ops(m, rows) + ops
    if np.any(np.asarray(tp) > 1):
        ops.append(tp_allreduce_op(m, rows, tp, tier_for_group(hw, tp), "attn_allreduce"))
    return ops + residual_norm_ops(m, rows)


def chunk_geometry(hw, g) -> dict:
    """A co-located instance's prompt chunk on one die (docs/model.md §9.4): ``tokens`` per
    iteration (``chunk_tokens`` per NPU over the package's dies), taken ``chunk`` = min(tokens,
    P) at a time from P-token prompts, so ``in_flight`` = tokens / chunk prompts are being
    filled and ``prompts`` = tokens / P finish per iteration. The KV they hold: a prompt
    filled chunk by chunk holds (P + chunk)/2 tokens on average (the mean over its chunks of
    offset + chunk) and P at its end (``decode_memory`` applies the cache's shape to both)."""
    T = number(g["chunk_tokens"]) / hw.chip.dies_per_package
    P = number(g["prompt_len"])
    k = np.minimum(T, P)
    flight = np.where(T > 0, T / np.where(k > 0, k, 1.0), 0.0)
    return {"tokens": T, "chunk": k, "prompts": T / P, "in_flight": flight}


def attention_share(hw, g, overlap=None):
    """The share of the cores the attention stream owns with two microbatches: the input,
    else the system's (core-split overlaps)."""
    overlap = overlap or hw.system.overlap.decode
    return np.where(np.isnan(g["attention_share"]), overlap.attention_share, g["attention_share"])


def moe_parts(hw, m, g, tokens, requests, n: int, chunk=0.0, overlap=None, kind: str = "full") -> list[tuple]:
    """The ops of each stage of one MoE layer with attention of ``kind`` for one of ``n``
    microbatches of a die's ``tokens`` tokens of ``requests`` requests (and ``chunk``
    co-located prompt tokens, which run through the same gate, dispatch, experts and
    combine), with the shares of the cores their lanes own (docs/model.md §5.2), as
    :func:`timed_parts` takes them; :func:`moe_layer` makes the stages of their tables.

    core-split (Ascend): A = attention | B = gate, dispatch, experts, combine, on two streams.
    compute-comm (NVIDIA two-batch overlap): attention + gate | dispatch | experts | combine,
    compute on one lane and communication on the other. ``overlap``: the system's decode
    overlap unless given (a co-located pass may run the prefill's, :func:`decode`)."""
    overlap = overlap or hw.system.overlap.decode
    T, R, C = tokens / n, requests / n, chunk / n
    pl = placement(m, T + C, g["ep"], g["redundant_experts"], g["shared_copies"], g["expert_imbalance"],
                   hw.chip.efficiency.matmul_tile_rows)
    attn_ops = attention_ops(hw, m, g, T, R, C, kind)
    gate, dispatch, experts, combine = moe_ops(m, T + C, g["ep"], pl, route_of(hw, "decode"))
    route = [gate, router_topk_op(m, T + C)]
    expert_ops = [experts, activation_op(m, pl.rows, m.moe.expert_intermediate_size, Bytes.of(m).expert)]
    if overlap.style == "core-split":
        share = attention_share(hw, g, overlap) if n == 2 else 1.0
        other = 1.0 - share if n == 2 else 1.0
        return [(attn_ops, share, share), (route + [dispatch], other, other), (expert_ops + [combine], other, other)]
    compute, comm = comm_shares(hw, n, overlap)
    return [(attn_ops + route, compute, compute), ([dispatch], comm, comm), (expert_ops, compute, compute),
            ([combine], comm, comm)]


def moe_layer(hw, g, n: int, overlap, times: list) -> list[Stage]:
    """The stages of one MoE layer from the tables of its parts (:func:`moe_parts`): each on
    its lane, the barriers' waits after dispatch and combine."""
    ep = g["ep"]
    if overlap.style == "core-split":
        attn, send, work = times
        lane_a, lane_b = LANES[n]
        # dispatch waits for the slowest die's attention, gate and send; combine for its experts
        return [Stage("attention", lane_a, [attn], wait_after([attn, send], ep, hw)),
                Stage("moe", lane_b, [send, work], wait_after([work], ep, hw))]
    c1, m1, c2, m2 = times
    lane_c, lane_m = ("serial", "serial") if n == 1 else ("compute", "comm")
    return [Stage("attention", lane_c, [c1]), Stage("dispatch", lane_m, [m1], wait_after([c1, m1], ep, hw)),
            Stage("experts", lane_c, [c2]), Stage("combine", lane_m, [m2], wait_after([c2, m2], ep, hw))]


def moe_stages(hw, m, g, tokens, requests, n: int, chunk=0.0, overlap=None, kind: str = "full") -> list[Stage]:
    """The stages of one MoE layer (:func:`moe_parts`), timed on the cores their lanes own."""
    overlap = overlap or hw.system.overlap.decode
    return moe_layer(hw, g, n, overlap, timed_parts(moe_parts(hw, m, g, tokens, requests, n, chunk, overlap, kind), hw))


def rule(n: int, overlap) -> str:
    return RULES[n] if n == 1 or overlap.style == "core-split" else RULES["compute-comm"]


def shared_ops(hw, m, g, timing: Timing) -> dict:
    """The ops of an iteration that do not depend on its microbatches (:func:`iteration`),
    added to ``timing``: the dense layers' (one table per attention kind), the MTP module's
    eh_proj and head (the first draft step's with a chunk's prompt tokens, then a plain
    step's), and the embedding and head ends; timed once for every microbatch count."""
    R_die = g["batch"] / hw.chip.dies_per_package
    T_die = R_die * (1 + draft_tokens(g))
    chunk = chunk_geometry(hw, g)
    C = chunk["tokens"]  # co-located prompt tokens per die, in the same pass (0: decode only)
    tp = g["tp"]
    tp_tier = tier_for_group(hw, tp)
    emb_tp, head_tp = vocab_tp(g, "decode")  # the embedding's and the head's split (memory holds the same)
    out = {"dense": []}
    if m.first_dense_layers:
        ffn = [dense_ffn_op(m, (T_die + C) * tp, tp), activation_op(m, (T_die + C) * tp, m.dense_ffn.intermediate_size / tp)]
        if np.any(np.asarray(tp) > 1):
            ffn.append(tp_allreduce_op(m, (T_die + C) * tp, tp, tp_tier, "ffn_allreduce"))
        for kind, count in arch.layer_counts(m, "dense").items():
            out["dense"].append((kind, count, timing.add([(attention_ops(hw, m, g, T_die, R_die, C, kind) + ffn, 1.0, 1.0)])))
    if m.mtp.modules:
        head = head_ops(m, R_die * head_tp, head_tp, tp_tier, "mtp_head")
        if np.any(C > 0):
            out["mtp_first"] = timing.add([([mtp_proj_op(m, R_die + C)] + head, 1.0, 1.0)])
        out["mtp"] = timing.add([([mtp_proj_op(m, R_die)] + head, 1.0, 1.0)])
    ends = (embedding_ops(m, (T_die + C) * emb_tp, emb_tp, tp_tier)
            + head_ops(m, (T_die + chunk["prompts"]) * head_tp, head_tp, tp_tier))
    out["ends"] = timing.add([(ends, 1.0, 1.0)])
    return out


def moe_layers(hw, m, g, n: int, overlap, timing: Timing) -> dict:
    """The MoE layers of an iteration with ``n`` microbatches overlapped as ``overlap`` says,
    added to ``timing``: the main stack's, one per attention kind ((kind, count, parts)); the
    MTP module's layer for a draft step with a chunk's prompt tokens and for a plain step."""
    out = {"main": []}
    R_die = g["batch"] / hw.chip.dies_per_package
    T_die = R_die * (1 + draft_tokens(g))
    C = chunk_geometry(hw, g)["tokens"]
    if m.moe is not None:
        for kind, count in arch.layer_counts(m, "moe").items():
            out["main"].append((kind, count, timing.add(moe_parts(hw, m, g, T_die, R_die, n, C, overlap, kind))))
    if m.mtp.modules:
        if np.any(C > 0):
            out["mtp_first"] = timing.add(moe_parts(hw, m, g, R_die, R_die, n, C, overlap))
        out["mtp"] = timing.add(moe_parts(hw, m, g, R_die, R_die, n, overlap=overlap))
    return out


def iteration(hw, m, g, n: int, overlap=None, shared: dict | None = None,
              layers: dict | None = None) -> tuple[np.ndarray, Schedule, Pipeline]:
    """Iteration time with ``n`` microbatches in the MoE layers, overlapped as ``overlap``
    says (default: the system's decode overlap); returns (time, schedule, the main stack's
    pipeline). ``shared``: the ops that do not depend on ``n`` (:func:`shared_ops`) and
    ``layers``: the MoE layers (:func:`moe_layers`), added to one :class:`Timing` with every
    other part of the step (made here when not given)."""
    overlap = overlap or hw.system.overlap.decode
    if shared is None or layers is None:
        timing = Timing(hw, grid_rows(g))
        shared = shared or shared_ops(hw, m, g, timing)
        layers = layers or moe_layers(hw, m, g, n, overlap, timing)
    sched = Schedule()
    k = draft_tokens(g)
    C = chunk_geometry(hw, g)["tokens"]  # co-located prompt tokens per die, in the same pass (0: decode only)
    for kind, count, ops in shared["dense"]:
        sched.serial(layer_section("dense_layer", kind), ops.times[0], count, "sum of all ops (all cores; no barrier to hide)")
    main = None
    if m.moe is not None:
        total = sum(count for _, count, _ in layers["main"])
        parts = []
        for kind, count, timed_layer in layers["main"]:  # one stack per attention kind, filled and drained once in all
            pipe = pipeline(moe_layer(hw, g, n, overlap, timed_layer.times), n)
            sched.stack(layer_section("moe_layer", kind), pipe, count, rule=rule(n, overlap), share=count / total)
            parts.append((pipe, count))
        main = LayerMix(parts)
    if m.mtp.modules:
        # MTP: k draft steps, each one token per request through eh_proj, one MoE block and the head;
        # a chunk's prompt tokens run through the module once (its layer's cache), in the first step
        if np.any(C > 0):
            first = np.minimum(k, 1.0) * (C > 0)
            sched.serial("mtp", shared["mtp_first"].times[0], first,
                         "eh_proj + head, the first draft step with the chunk's prompt tokens")
            sched.stack("mtp_layer", pipeline(moe_layer(hw, g, n, overlap, layers["mtp_first"].times), n), 1,
                        repeats=first, rule=rule(n, overlap))
            k = k - first
        sched.serial("mtp", shared["mtp"].times[0], k, "eh_proj + head, once per draft step")
        draft = pipeline(moe_layer(hw, g, n, overlap, layers["mtp"].times), n)
        sched.stack("mtp_layer", draft, 1, repeats=k, rule=rule(n, overlap))
    sched.serial("per_iteration", shared["ends"].times[0], 1,
                 "embedding + final norm + vocab-parallel LM head, logits gather and sampling over all tokens "
                 "(a chunk: the last token of each prompt it finishes) + iteration overhead",
                 hw.chip.latency.iteration_overhead_s)
    h = decode_host(hw.stack, sched.launches(), draft_tokens(g), dp_ranks(g))
    if np.any(C > 0):  # a co-located chunk: the stack's extend forward pays the prefill pass's host terms
        h = with_extend(hw.stack, h, sched.launches(), chunk_geometry(hw, g)["in_flight"] * number(g["tp"]), arch.dispatching_layers(m, k > 0), C)
    return sched.with_host(h), sched, main


def dp_ranks(g) -> np.ndarray:
    """DP-attention ranks of a decode instance: its dies over the attention TP degree."""
    return number(g["dies"]) / number(g["tp"])


def _dense_model(hw, m, g, it, sched) -> dict:
    tpot = it / emitted_tokens(g)
    throughput = g["batch"] / tpot
    layers = [s for s in sched.sections if s.name.startswith("dense_layer")]
    layer = sum(np.asarray(s.time_s) * s.count for s in layers) / sum(s.count for s in layers)
    nan = np.full(np.shape(tpot), np.nan)
    return {"microbatches_used": np.ones(np.shape(tpot)), "iteration_ms": it * 1e3, "tpot_ms": tpot * 1e3,
            "layer_us": np.broadcast_to(layer, np.shape(tpot)) * 1e6, "barrier_wait_us": np.zeros(np.shape(tpot)),
            "stream_a_us": nan, "stream_b_us": nan, "tokens_per_iteration": emitted_tokens(g),
            "throughput_per_npu": throughput, "tokens_per_s_per_user": 1.0 / tpot,
            "tokens_per_s_per_tflops": tokens_per_s_per_tflops(throughput, hw, m),
            "microbatch_gain": np.zeros(np.shape(tpot)), "microbatch_layer_saving": np.zeros(np.shape(tpot)),
            "host_ms": np.broadcast_to(sched.host_s, np.shape(tpot)) * 1e3,
            "_schedules": (sched, sched), "_choice": np.ones(np.shape(tpot))}


def draft_tokens(g) -> np.ndarray:
    """Speculative (MTP) tokens each request verifies per iteration: ``mtp_k`` when MTP is on."""
    return np.where(np.asarray(g["mtp"]) == 1, g["mtp_k"], 0).astype(float)


def emitted_tokens(g) -> np.ndarray:
    """Tokens a request emits per iteration: 1 + a + a^2 + ... + a^k (each draft is kept only
    if all before it were accepted; docs/model.md §5.3)."""
    k = draft_tokens(g)
    a = number(g["mtp_acceptance"])
    geometric = np.where(np.isclose(a, 1.0), k, a * (1 - a ** k) / np.where(np.isclose(a, 1.0), 1.0, 1 - a))
    return 1.0 + geometric


def acceptance_for(accept_length: float, k: int) -> float:
    """The per-draft acceptance ``a`` at which ``k`` drafts give a mean accept length of
    ``accept_length`` tokens per step: the root in [0, 1] of 1 + a + ... + a^k = accept_length
    (the inverse of :func:`emitted_tokens`; a server's logged accept length -> the acceptance
    a stack profile states). ``accept_length`` must lie in [1, k + 1]."""
    from scipy.optimize import brentq

    L, k = float(accept_length), int(k)
    if k < 1 or not 1.0 <= L <= k + 1.0:
        raise ValueError(f"an accept length of {L:g} tokens per step needs 1 <= it <= k + 1 = {k + 1} (k = {k} drafts)")
    if L in (1.0, k + 1.0):
        return 0.0 if L == 1.0 else 1.0
    return float(brentq(lambda a: sum(a ** i for i in range(k + 1)) - L, 0.0, 1.0, xtol=1e-12))


def decode(hw, m, g) -> dict:
    """Vectorised decode prediction for grid ``g`` (a mapping of column -> array).

    ``stream_a_us`` / ``stream_b_us`` are one microbatch's time on each stream of the
    two-microbatch schedule, the MoE stream's including the barrier waits inside dispatch
    and combine (paper §4.2.3: about 600 us each); empty when one microbatch is used.

    ``host_ms`` is the step's host time (docs/model.md §11.1): its launches and serial terms,
    which the step is never shorter than.

    A row with a co-located chunk (``chunk_tokens`` > 0) is a forward pass that is mostly
    prefill work when the chunk is large: its two microbatches may also run the way the
    system overlaps a prefill pass (compute of one under communication of the other), and
    the faster of the two overlaps is its two-microbatch schedule."""
    # every stage of both microbatch schedules (and of a chunk's prefill overlap) in one table
    timing = Timing(hw, grid_rows(g))
    shared = shared_ops(hw, m, g, timing)
    decode_overlap, prefill_overlap = hw.system.overlap.decode, hw.system.overlap.prefill
    chunked = number(g["chunk_tokens"]) > 0
    runs = {1: moe_layers(hw, m, g, 1, decode_overlap, timing)}
    if m.moe is not None:
        runs[2] = moe_layers(hw, m, g, 2, decode_overlap, timing)
        if np.any(chunked) and prefill_overlap.style != decode_overlap.style:
            runs[3] = moe_layers(hw, m, g, 2, prefill_overlap, timing)
    it1, s1, p1 = iteration(hw, m, g, 1, decode_overlap, shared, runs[1])
    if m.moe is None:  # a dense model has no barrier for a second microbatch to hide
        return _dense_model(hw, m, g, it1, s1)
    it2, s2, p2 = iteration(hw, m, g, 2, decode_overlap, shared, runs[2])
    if hw.system.overlap.decode.style == "core-split":  # no second stream where a die's cores cannot be split
        it2 = np.where(core_split_fits(hw, attention_share(hw, g)), it2, np.inf)
    lanes = LANE_NAMES[hw.system.overlap.decode.style]
    two_mb = {"period": p2.period_s, "wait": p2.wait_s, "a": p2.lane_s(lanes[0]), "b": p2.lane_s(lanes[1]) + p2.wait_s}
    if 3 in runs:
        it3, s3, p3 = iteration(hw, m, g, 2, prefill_overlap, shared, runs[3])
        other = LANE_NAMES[prefill_overlap.style]
        use = chunked & (it3 < it2)
        alt = {"period": p3.period_s, "wait": p3.wait_s, "a": p3.lane_s(other[0]), "b": p3.lane_s(other[1]) + p3.wait_s}
        two_mb = {k: np.where(use, alt[k], v) for k, v in two_mb.items()}
        host2 = np.where(use, s3.host_s, s2.host_s)
        it2, s2 = np.where(use, it3, it2), either(s2, s3, use)
        s2.host_s = host2
    choice = choose(g["microbatches"], it1, it2)
    it = select(choice, it1, it2)
    emitted = emitted_tokens(g)
    tpot = it / emitted
    throughput = g["batch"] / tpot
    two = choice == 2
    return {
        "microbatches_used": choice,
        "iteration_ms": it * 1e3,
        "tpot_ms": tpot * 1e3,
        "layer_us": select(choice, p1.period_s, two_mb["period"]) * 1e6,
        "barrier_wait_us": select(choice, p1.wait_s, 2 * two_mb["wait"]) * 1e6,
        "stream_a_us": np.where(two, two_mb["a"], np.nan) * 1e6,
        "stream_b_us": np.where(two, two_mb["b"], np.nan) * 1e6,
        "tokens_per_iteration": emitted,
        "throughput_per_npu": throughput,
        "tokens_per_s_per_user": 1.0 / tpot,
        "tokens_per_s_per_tflops": tokens_per_s_per_tflops(throughput, hw, m),
        "microbatch_gain": np.where(np.isfinite(it2), it1 / it2 - 1.0, 0.0),
        "microbatch_layer_saving": np.where(np.isfinite(it2), 1.0 - two_mb["period"] / p1.period_s, 0.0),
        "host_ms": np.broadcast_to(select(choice, s1.host_s, s2.host_s), np.shape(tpot)) * 1e3,
        "_schedules": (s1, s2),
        "_choice": choice,
    }


def either(a: Schedule, b: Schedule, use_b) -> Schedule:
    """One schedule that is ``b`` on the rows where ``use_b`` and ``a`` elsewhere: each part
    and section of the other kept with zero calls (the breakdown skips them, the total adds 0)."""
    use_b = np.asarray(use_b, dtype=bool)
    out = Schedule()
    for sched, on in ((a, ~use_b), (b, use_b)):
        out.parts += [Part(p.section, p.stream, p.calls * on, p.t, p.launches) for p in sched.parts]
        out.sections += [Section(x.name, x.rule, x.time_s, x.count * on) for x in sched.sections]
    return out
