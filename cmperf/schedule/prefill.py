"""Prefill schedule: one forward pass over the prompts a prefill instance holds
(docs/model.md §6).

Each layer is a chain of compute stages (AI Cube with the vector work fused in) and
communication stages (UB collectives, each ending in a barrier):

    C1 MLA down-proj   M1 all-gather (SP -> TP)
    C2 up-proj + FlashAttention   M2 all-to-all (TP -> SP)
    C3 O-proj + gate   M3 dispatch
    C4 experts         M4 combine          (dense layers: C3 = O-proj + dense FFN, no M3/M4)

The compute stages run on one lane (all cube cores), the communication stages on another
(the UB engine and the vector work of dispatch/combine; paper §4.3.2). With one microbatch
they alternate; with two, microbatch 1 runs one stage behind microbatch 0, so each compute
stage of one overlaps a communication stage of the other. The pipeline
(cmperf/schedule/pipeline.py) gives the time per layer, bounded below by the work of every
pool the lanes share (vector cores, HBM, UB).
"""

from __future__ import annotations

import numpy as np

from ..cost import arch
from ..cost.arch import kv_cache
from ..cost.ops import (Bytes, vocab_tp, activation_op, attention_prefill_ops, dense_ffn_op, embedding_ops, head_ops, moe_ops,
                        mtp_proj_op, placement, residual_add_op, residual_norm_ops, router_topk_op, tp_allreduce_op)
from ..cost.collectives import route_of
from ..cost.host import prefill_host
from ..cost.pool import pass_with_pool_s, pool_read_s, pool_write_s, tail_bytes, written_blocks
from ..cost.roofline import number, tier_bandwidth_Bps, tier_for_group
from .common import (Schedule, stack_attention, Timing, choose, grid_rows, layer_section, select, timed_parts, tokens_per_s_per_tflops,
                     wait_after)
from .pipeline import Stage, pipeline

RULES = {1: "one microbatch: every stage and barrier wait in series",
         2: "two microbatches one stage apart: compute of one under communication of the other"}


def ffn_tp(m, g):
    """TP degree of the dense FFN in prefill: data-parallel (1) in a MoE model's few dense
    layers (paper §4.3.1), the attention's TP degree in a dense model (Megatron style)."""
    return g["attn_tp"] if m.moe is None else np.ones_like(number(g["attn_tp"]))


def split_at_collectives(ops) -> list[list]:
    """An attention layer's prefill ops as its stages: the runs of compute ops between the
    collectives (the ops with a tier), each collective a stage of its own."""
    stages, run = [], []
    for o in ops:
        if o.tier is None:
            run.append(o)
        else:
            stages += [run, [o]]
            run = []
    return stages + [run]


def layer_parts(hw, m, g, T, moe: bool, kind: str = "full") -> list[tuple]:
    """The ops of each stage of one layer with attention of ``kind`` for a microbatch of
    ``T`` tokens per die, compute and communication stages in turn, each on all the die's
    cores (as :func:`timed_parts` takes them); :func:`layer_of` makes the stages."""
    tp_tier = tier_for_group(hw, g["attn_tp"])
    c1, gather, c2, a2a, (o_proj,) = split_at_collectives(stack_attention(
        hw, m, attention_prefill_ops(m, T, g["prompt_len"], g["attn_tp"], tp_tier, g["cached_len"], kind), "prefill", T))
    # the previous block's residual add first (this block's RMSNorm is in the attention's
    # first op), the attention's residual add and the FFN's RMSNorm after O-proj (§2.9)
    c1 = [residual_add_op(m, T)] + c1
    o_proj = [o_proj] + residual_norm_ops(m, T)
    if not moe:
        tp = ffn_tp(m, g)
        stages = [c1, gather, c2, a2a, [*o_proj, dense_ffn_op(m, T * tp, tp),
                                        activation_op(m, T * tp, m.dense_ffn.intermediate_size / tp)]]
        if m.moe is None:  # the TP group sums the FFN's partial outputs
            stages.append([tp_allreduce_op(m, T * tp, tp, tp_tier, "ffn_allreduce")])
        return [(ops, 1.0, 1.0) for ops in stages]
    pl = placement(m, T, g["ep"], g["redundant_experts"], g["shared_copies"], g["expert_imbalance"],
                   hw.chip.efficiency.matmul_tile_rows)
    gate, dispatch, experts, combine = moe_ops(m, T, g["ep"], pl, route_of(hw, "prefill"))
    act = activation_op(m, pl.rows, m.moe.expert_intermediate_size, Bytes.of(m).expert)
    stages = [c1, gather, c2, a2a, [*o_proj, gate, router_topk_op(m, T)], [dispatch], [experts, act], [combine]]
    return [(ops, 1.0, 1.0) for ops in stages]


def layer_of(hw, g, moe: bool, timed_stages: list) -> list[Stage]:
    """The stages of one layer from the tables of its parts (:func:`layer_parts`): compute
    stages C1, C2, ... and communication stages M1, M2, ..., each of these ending in a barrier."""
    groups = [g["attn_tp"], g["attn_tp"], g["ep"] if moe else g["attn_tp"], g["ep"]]
    stages = []
    for i, ops in enumerate(timed_stages):
        if i % 2 == 0:  # compute stage: its load counts toward the next barrier
            stages.append(Stage(f"C{i // 2 + 1}", "compute", [ops]))
        else:
            wait = wait_after([timed_stages[i - 1], ops], groups[i // 2], hw)
            stages.append(Stage(f"M{i // 2 + 1}", "comm", [ops], wait))
    return stages


def layer_stages(hw, m, g, T, moe: bool, kind: str = "full") -> list[Stage]:
    """The stages of one layer (:func:`layer_parts`), every stage timed in one evaluation."""
    return layer_of(hw, g, moe, timed_parts(layer_parts(hw, m, g, T, moe, kind), hw))


def shared_ops(hw, m, g, timing: Timing) -> dict:
    """The ops of a pass that do not depend on its microbatches, added to ``timing``: the MTP
    module's eh_proj over all prompt tokens and the embedding and head ends."""
    T_die = g["tokens_per_npu"] / hw.chip.dies_per_package
    out = {}
    if m.mtp.modules:
        out["mtp"] = timing.add([([mtp_proj_op(m, T_die)], 1.0, 1.0)])
    tier = tier_for_group(hw, g["attn_tp"])
    # the embedding on each die's own tokens (sequence-parallel); the head vocab-parallel over
    # the attention TP group on the last token of each of its prompts
    emb_tp, head_tp = vocab_tp(g, "prefill")
    ends = embedding_ops(m, T_die * emb_tp, emb_tp, tier) + head_ops(m, prompts_per_die(hw, g) * head_tp, head_tp, tier)
    out["ends"] = timing.add([(ends, 1.0, 1.0)])
    return out


def pass_layers(hw, m, g, n: int, timing: Timing) -> dict:
    """The layers of a pass with ``n`` microbatches, added to ``timing``: each stack's (dense
    and MoE, one per attention kind: (part, kind, count, parts)) and the MTP module's."""
    T = g["tokens_per_npu"] / hw.chip.dies_per_package / n
    out = {"stacks": []}
    for part, moe in (("dense", False), ("moe", True)):
        if part == "moe" and m.moe is None:
            continue
        for kind, count in arch.layer_counts(m, part).items():
            out["stacks"].append((part, kind, count, timing.add(layer_parts(hw, m, g, T, moe, kind))))
    if m.mtp.modules:
        out["mtp"] = timing.add(layer_parts(hw, m, g, T, moe=True))
    return out


def forward(hw, m, g, n: int, shared: dict | None = None, layers: dict | None = None) -> tuple[np.ndarray, Schedule]:
    """The pass with ``n`` microbatches: (time, schedule). ``shared`` (:func:`shared_ops`) and
    ``layers`` (:func:`pass_layers`) added to one :class:`Timing` with every other part of the
    prediction (made here when not given)."""
    if shared is None or layers is None:
        timing = Timing(hw, grid_rows(g))
        shared = shared or shared_ops(hw, m, g, timing)
        layers = layers or pass_layers(hw, m, g, n, timing)
    sched = Schedule()
    T_die = g["tokens_per_npu"] / hw.chip.dies_per_package
    T = T_die / n
    counts = {part: sum(count for p, _, count, _ in layers["stacks"] if p == part) for part in ("dense", "moe")}
    for part, kind, count, timed_layer in layers["stacks"]:  # one stack per attention kind, filled and drained once in all
        sched.stack(layer_section(f"{part}_layer", kind), pipeline(layer_of(hw, g, part == "moe", timed_layer.times), n),
                    count, rule=RULES[n], share=count / counts[part])
    if m.mtp.modules:
        mtp = number(g["mtp"])
        sched.serial("mtp", shared["mtp"].times[0], mtp, "eh_proj over all prompt tokens")
        sched.stack("mtp_layer", pipeline(layer_of(hw, g, True, layers["mtp"].times), n), 1, repeats=mtp, rule=RULES[n])
    sched.serial("per_pass", shared["ends"].times[0], 1,
                 "embedding + final norm + vocab-parallel LM head, logits gather and sampling on the last token of "
                 "each prompt + overhead", hw.chip.latency.iteration_overhead_s)
    if np.any(np.asarray(g["pool_len"]) > 0):
        sched.serial("pool_load", [], 1, "the cached prefixes' pool-held tails read from the pool before the pass",
                     pool_load_s(hw, m, g))
    moe = arch.dispatching_layers(m, number(g["mtp"]))
    per_rank = prompts_per_die(hw, g) * number(g["attn_tp"])  # a DP-attention rank's prompts (its attn_tp dies')
    return sched.with_host(prefill_host(hw.stack, sched.launches(), moe, n, T, per_rank)), sched


def prompts_per_die(hw, g) -> np.ndarray:
    """Prompts a die computes per pass: its tokens over each prompt's uncached tokens."""
    T_die = g["tokens_per_npu"] / hw.chip.dies_per_package
    return T_die / (g["prompt_len"] - g["cached_len"])


def pool_reads(hw, m, g) -> tuple[np.ndarray, np.ndarray]:
    """(bytes, blocks) of the pool-held part of a die's cached prefixes (each prefix's last
    ``pool_len`` tokens; the head is in HBM), all layers (docs/model.md §1.2: KV per token,
    window layers' last window, linear layers' state), in whole blocks."""
    kv = kv_cache(m, Bytes.of(m).kv, number(g["mtp"]))
    C = number(g["cached_len"])
    L = np.minimum(number(g["pool_len"]), C)
    seqs = prompts_per_die(hw, g)
    blocks = seqs * np.ceil(L / hw.system.memory_pool.block_tokens)
    return seqs * tail_bytes(kv, C, L), blocks


def pool_load_s(hw, m, g) -> np.ndarray:
    """The pool-held part of a die's cached prefixes read from the pool before the pass, while
    ``pool_readers`` dies read at once (docs/model.md §9.5; not overlapped with the previous pass)."""
    bytes_, blocks = pool_reads(hw, m, g)
    return np.where(np.asarray(g["pool_len"]) > 0, pool_read_s(hw, bytes_, blocks, g["pool_readers"]), 0.0)


def pool_writes(hw, m, g) -> tuple[np.ndarray, np.ndarray]:
    """(bytes, blocks) a die writes back to the pool: its prompts' new whole blocks, while
    caching is in use (a cached prefix asked); none without a pool (docs/model.md §9.5)."""
    zero = 0.0 * number(g["cached_len"])
    if hw.system.memory_pool is None:
        return zero, zero
    kv = kv_cache(m, Bytes.of(m).kv, number(g["mtp"]))
    bytes_, blocks = written_blocks(kv, g["prompt_len"], g["cached_len"], hw.system.memory_pool.block_tokens)
    seqs = prompts_per_die(hw, g)
    on = np.asarray(g["cached_len"]) > 0
    return np.where(on, seqs * bytes_, 0.0), np.where(on, seqs * blocks, 0.0)


def pool_write_time_s(hw, m, g) -> np.ndarray:
    """A die's write-back of its new blocks while ``pool_readers`` dies write at once
    (docs/model.md §9.5; overlapped with the pass: :func:`cmperf.cost.pool.pass_with_pool_s`)."""
    bytes_, blocks = pool_writes(hw, m, g)
    if hw.system.memory_pool is None:
        return bytes_
    return np.where(bytes_ > 0, pool_write_s(hw, bytes_, blocks, g["pool_readers"]), 0.0)


def kv_transfer_s(hw, m, g) -> np.ndarray:
    """Whole cache of a die's prompts (cached prefix included; §1.2) sent once to the decode
    instance over the system's KV-transfer tier (RDMA in the paper, §4.1): bytes / bandwidth
    + latency (docs/model.md §4.4)."""
    kv = kv_cache(m, Bytes.of(m).kv, number(g["mtp"]))
    return kv_send_s(hw, prompts_per_die(hw, g) * kv.bytes(g["prompt_len"]))


def kv_send_s(hw, bytes_):
    """``bytes_`` of KV sent by one die over the system's KV-transfer tier: bytes / bandwidth
    + latency (docs/model.md §4.4)."""
    tier = hw.system.kv_transfer_tier
    return number(bytes_) / tier_bandwidth_Bps(hw, tier) + hw.system.tiers[tier].latency_s


def prefill(hw, m, g) -> dict:
    timing = Timing(hw, grid_rows(g))  # every stage of both microbatch schedules in one table
    shared = shared_ops(hw, m, g, timing)
    layers = {n: pass_layers(hw, m, g, n, timing) for n in (1, 2)}
    f1, s1 = forward(hw, m, g, 1, shared, layers[1])
    f2, s2 = forward(hw, m, g, 2, shared, layers[2])
    choice = choose(g["microbatches"], f1, f2)
    t = select(choice, f1, f2)
    kv = kv_transfer_s(hw, m, g)
    read = pool_load_s(hw, m, g) if hw.system.memory_pool is not None else 0.0 * kv
    write = pool_write_time_s(hw, m, g)
    t_pool = pass_with_pool_s(t - read, read, write)  # the write-back overlapped with the pass
    wait = t_pool - t
    t = t_pool
    throughput = g["tokens_per_npu"] / t
    prompt_tokens = prompts_per_die(hw, g) * hw.chip.dies_per_package * g["prompt_len"]
    return {
        "microbatches_used": choice,
        "forward_ms": t * 1e3,
        "kv_transfer_ms": kv * 1e3,
        "pool_load_ms": read * 1e3,
        "pool_write_ms": write * 1e3,
        "pool_write_wait_ms": wait * 1e3,
        "pool_bytes_per_die": pool_reads(hw, m, g)[0] if hw.system.memory_pool is not None else 0.0 * kv,
        "pool_blocks_per_die": pool_reads(hw, m, g)[1] if hw.system.memory_pool is not None else 0.0 * kv,
        "pool_write_bytes_per_die": pool_writes(hw, m, g)[0],
        "pool_write_blocks_per_die": pool_writes(hw, m, g)[1],
        "ttft_ms": (t + kv) * 1e3,
        "throughput_per_npu": throughput,
        "prompt_throughput_per_npu": prompt_tokens / t,
        "tokens_per_s_per_tflops": tokens_per_s_per_tflops(throughput, hw, m),
        "microbatch_gain": f1 / f2 - 1.0,
        "host_ms": np.broadcast_to(select(choice, s1.host_s, s2.host_s), np.shape(t)) * 1e3,
        "_schedules": (s1, s2),
        "_choice": choice,
    }
