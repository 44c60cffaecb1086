"""HBM per die: weights under the placement, KV cache, dispatch/combine buffers,
activations and runtime reserve; the largest batch that fits (docs/model.md §7)."""

from __future__ import annotations

import numpy as np

from ..cost import arch
from ..cost.collectives import route_of
from ..cost.ops import (ASCEND_MESSAGE, Bytes, attention_decode_ops, attention_prefill_ops, combine_message_B,
                        dense_ffn_op, dispatch_message_B, kv_shards, moe_ops, mtp_proj_op, placement,
                        state_shards, vocab_tp, vocab_weight_bytes)
from ..cost.roofline import one_point
from ..specs.view import remember
from .decode import chunk_geometry, draft_tokens


def weight_bytes(m, g, phase: str) -> np.ndarray:
    """Weights on one die, read off the same operator builders the schedules time (so a
    weight lives in one formula): one layer of each kind x its count, MTP module included,
    plus the norms, the embedding and the head. Attention and dense FFN weights are split by
    the phase's TP degree, the embedding and the head as the schedules split them
    (:func:`cmperf.cost.ops.vocab_tp`); each die holds its ``instances`` experts per MoE layer."""
    return sum(weight_parts(m, g, phase).values())


def weight_parts(m, g, phase: str) -> dict:
    """:func:`weight_bytes` by part: ``attention`` (all layers' attention and norms),
    ``dense_ffn``, ``gate`` and ``experts`` (MoE layers and the MTP module's block),
    ``embedding_head`` (embedding, LM head, MTP eh_proj). AFD splits them over its pools."""
    fields = ("mtp", "ep", "tp", "attn_tp", "redundant_experts", "shared_copies")
    key = one_point(*(g.get(k) for k in fields))
    if key is None:
        return _weight_parts(m, g, phase)
    return dict(remember(m, ("weight_parts", phase, key), lambda: _weight_parts(m, g, phase)))  # one configuration's


def _weight_parts(m, g, phase: str) -> dict:
    b = Bytes.of(m)
    mtp_on = np.asarray(g["mtp"], dtype=float)
    mtp_layers = m.mtp.modules * mtp_on
    zero = 0.0 * np.asarray(g["ep"], dtype=float)
    held = lambda ops: sum(np.asarray(o.weight_bytes, dtype=float) for o in ops)  # noqa: E731

    def attention(kind):  # one layer's attention weights and norms (the MTP module's layer: full)
        ops = (attention_decode_ops(m, zero, zero, 1.0, g["tp"], kind) if phase == "decode"
               else attention_prefill_ops(m, zero, 2.0, g["attn_tp"], kind=kind))
        return held(ops) + arch.attention_norm_weights(m, kind) * b.hidden

    if phase == "decode":
        ffn = held([dense_ffn_op(m, zero, g["tp"])]) if m.dense_ffn is not None else 0.0
    else:
        ffn = held([dense_ffn_op(m, zero, g["attn_tp"] if m.moe is None else 1.0)]) if m.dense_ffn is not None else 0.0
    gate = experts = 0.0
    if m.moe is not None:
        pl = placement(m, zero, g["ep"], g["redundant_experts"], g["shared_copies"], 1.0, 1)
        gate, _, experts, _ = (held([o]) for o in moe_ops(m, zero, g["ep"], pl))
    moe_blocks = arch.moe_layers(m) + mtp_layers
    layers = sum(n * attention(kind) for kind, n in arch.layer_counts(m).items())
    return {"attention": layers + mtp_layers * attention("full"),
            "dense_ffn": m.first_dense_layers * ffn + zero,
            "gate": moe_blocks * gate + zero,
            "experts": moe_blocks * experts + zero,
            "embedding_head": (vocab_weight_bytes(m, *vocab_tp(g, phase)) + zero
                               + mtp_layers * held([mtp_proj_op(m, zero)]))}


def _rows_of(x, like) -> np.ndarray:
    """``x`` (a spec's number, or a swept one's array) over the rows of ``like``, as floats."""
    return np.broadcast_to(x, np.broadcast_shapes(np.shape(like), np.shape(x))).astype(float)


def buffer_bytes(m, tokens_per_die, ep, message=ASCEND_MESSAGE) -> np.ndarray:
    """Dispatch + combine receive buffers (paper Eq. 1-2): every one of ``ep`` peers may send
    each of its tokens to this die once, so each buffer holds tokens x EP messages."""
    return receive_buffer_bytes(tokens_per_die, ep, dispatch_message_B(m, message) + combine_message_B(m))


def receive_buffer_bytes(tokens_per_peer, peers, message_B) -> np.ndarray:
    """A receive buffer sized for the worst case (paper Eq. 1-2): each of ``peers`` dies may
    write each of its ``tokens_per_peer`` tokens here once."""
    return tokens_per_peer * np.asarray(peers, dtype=float) * message_B


def activation_bytes(m, tokens) -> np.ndarray:
    """Live activations per token: four hidden-size BF16 buffers (residual stream, normed
    input, attention output, MoE output) and the largest attention intermediate (prefill
    q, k, v and output of all heads). Decode adds FP32 logits in decode_memory."""
    b, a, h = Bytes.of(m), m.attention, m.hidden_size
    attn = a.num_heads * (2 * arch.qk_head_dim(m) + 2 * arch.v_head_dim(m)) * b.attn
    return tokens * (4 * h * b.hidden + attn)


def held_kv(m, tp, mtp_on, phase: str = "decode") -> arch.KVCache:
    """The cache a die of a TP group of ``tp`` dies holds per request of its own (docs/model.md
    §7): it keeps its share of the KV heads (GQA: 1/min(tp, KV heads); MLA's latent and DSA's
    indexer key whole) and of the linear layers' heads (1/min(tp, key heads)) for all the
    group's requests. In prefill the KV is made where the heads are: the same shares."""
    tp = np.asarray(tp, dtype=float)
    kv = arch.kv_cache(m, Bytes.of(m).kv, mtp_on)
    return kv.scaled(kv=tp / kv_shards(m, tp), state=tp / state_shards(m, tp))


def decode_kv_tokens(g) -> tuple[np.ndarray, np.ndarray]:
    """Tokens of KV cache one decode request holds (docs/model.md §7): (mean, peak).

    ``kv_len`` is the mean context a decode step attends. Continuous batching holds requests
    at every step of their output, so the context a request holds, averaged over the requests
    in the batch at any moment, is that same mean (prompt + output/2 for fixed lengths, the
    default of ``kv_len``; a given ``kv_len`` is requests at that context) — plus the draft
    tokens whose KV the step writes. The peak is the longest context one request reaches:
    prompt + output, or ``kv_len`` when that is given larger, plus the drafts."""
    k = draft_tokens(g)
    mean = np.asarray(g["kv_len"], dtype=float) + k
    peak = np.maximum(np.asarray(g["prompt_len"], dtype=float) + g["output_len"], g["kv_len"]) + k
    return mean, peak


def decode_memory(hw, m, g) -> dict:
    """HBM of a decode die (docs/model.md §7): weights, the KV its requests hold (mean
    context, :func:`decode_kv_tokens`) and the prompts a co-located chunk is filling, the
    dispatch/combine buffers and activations of every token of the iteration, the runtime
    reserve. The rows add up to ``memory_per_die_bytes``."""
    dpp = hw.chip.dies_per_package
    R_die = g["batch"] / dpp
    tpr = 1 + draft_tokens(g)
    tp = np.asarray(g["tp"], dtype=float)
    cache = held_kv(m, tp, np.asarray(g["mtp"], dtype=float))
    held, peak = decode_kv_tokens(g)
    weights = weight_bytes(m, g, "decode")
    reserve = hw.chip.memory.runtime_reserved_B
    msg = route_of(hw, "decode").message
    buffers = buffer_bytes(m, 1.0, g["ep"], msg) if m.moe is not None else 0.0
    act = activation_bytes(m, tp)  # per token of the die (a TP die works on its group's tokens)
    logits = m.vocab_size * 4.0  # FP32 logits of one sampled token
    chunk = chunk_geometry(hw, g)
    # per request: its KV, and per token it runs (1 + drafts): buffers, activations, logits
    P, k = np.asarray(g["prompt_len"], dtype=float), chunk["chunk"]
    per_request = cache.bytes(held) + tpr * (buffers + act + logits)
    kv = R_die * cache.bytes(held) + chunk["in_flight"] * cache.bytes((P + k) / 2)
    buf = R_die * tpr * buffers + chunk["tokens"] * buffers
    acts = R_die * tpr * (act + logits) + chunk["tokens"] * act + chunk["prompts"] * logits
    total = weights + kv + buf + acts + reserve
    fixed = total - R_die * per_request  # everything that does not grow with the batch
    cap = hw.chip.die.hbm_capacity_B
    max_r = np.floor(np.maximum(cap - fixed, 0) / per_request)
    return {
        "memory_per_die_bytes": total,
        "weights_per_die_bytes": weights,
        "kv_cache_per_die_bytes": kv,
        "kv_cache_peak_per_die_bytes": R_die * cache.bytes(peak) + chunk["in_flight"] * cache.bytes(P),
        "buffers_per_die_bytes": buf,
        "activations_per_die_bytes": acts,
        "runtime_reserve_per_die_bytes": _rows_of(reserve, total),
        "hbm_per_die_bytes": _rows_of(cap, total),
        "max_batch_per_npu": max_r * dpp,
        "fits": total <= cap,
    }


def prefill_memory(hw, m, g, microbatches) -> dict:
    """HBM of a prefill die (docs/model.md §7): weights, the KV of its prompts (cached prefix
    included), one microbatch's buffers and activations, the runtime reserve; the rows add up
    to ``memory_per_die_bytes``."""
    dpp = hw.chip.dies_per_package
    T_die = g["tokens_per_npu"] / dpp
    T_mb = T_die / microbatches
    tp = np.asarray(g["attn_tp"], dtype=float)
    # GQA's K/V and the linear layers' states are made per head shard; MLA's latent per token
    cache = held_kv(m, tp, np.asarray(g["mtp"], dtype=float))
    if arch.is_mla(m):
        cache = cache.scaled(kv=1.0 / tp)
    weights = weight_bytes(m, g, "prefill")
    reserve = hw.chip.memory.runtime_reserved_B
    fixed = weights + reserve
    msg = route_of(hw, "prefill").message
    buffers = buffer_bytes(m, 1.0, g["ep"], msg) if m.moe is not None else 0.0
    act = activation_bytes(m, 1.0)
    # a computed token's prompt brings its cached prefix's KV too: the prompt's cache over its computed tokens
    kv_tok = cache.bytes(g["prompt_len"]) / (g["prompt_len"] - g["cached_len"])
    per_token = kv_tok + (buffers + act) / microbatches
    total = fixed + T_die * per_token
    cap = hw.chip.die.hbm_capacity_B
    return {
        "memory_per_die_bytes": total,
        "weights_per_die_bytes": weights,
        "kv_cache_per_die_bytes": T_die * kv_tok,
        "buffers_per_die_bytes": T_mb * buffers,
        "activations_per_die_bytes": T_mb * act,
        "runtime_reserve_per_die_bytes": _rows_of(reserve, total),
        "hbm_per_die_bytes": _rows_of(cap, total),
        "max_tokens_per_npu": np.floor(np.maximum(cap - fixed, 0) / per_token) * dpp,
        "fits": total <= cap,
    }


def afd_memory(hw, m, g) -> dict:
    """HBM of the two pools of an AFD instance (docs/model.md §5.4).

    Attention die: every weight but the experts (attention, dense FFN, gate, embedding,
    head, MTP projections; TP 1), the KV its requests hold (:func:`decode_kv_tokens`), the
    e2a receive buffers (each of the E expert dies may return each of its tokens once),
    activations, reserve. Expert die: its expert instances per MoE layer (MTP block
    included), the a2e receive buffers (each of the A attention dies may send each of its
    tokens once), reserve. Each pool's rows add up to its ``*_memory_per_die_bytes``.
    ``max_batch_per_npu``: the largest batch per attention NPU both pools can hold."""
    dpp = hw.chip.dies_per_package
    A, E = g["attention_dies"], g["expert_dies"]
    R_die = g["batch"] / dpp
    tpr = 1 + draft_tokens(g)
    one = 0.0 * np.asarray(A, dtype=float) + 1.0
    view = {**g, "ep": E, "tp": one}  # the decode layout of the same weights: data-parallel attention, EP = expert dies
    parts = weight_parts(m, view, "decode")
    attention_w = parts["attention"] + parts["dense_ffn"] + parts["gate"] + parts["embedding_head"]
    expert_w = parts["experts"]
    msg = route_of(hw, "decode").message
    held, peak = decode_kv_tokens(g)
    cache = held_kv(m, one, np.asarray(g["mtp"], dtype=float))
    reserve = hw.chip.memory.runtime_reserved_B
    cap = hw.chip.die.hbm_capacity_B
    e2a = receive_buffer_bytes(1.0, E, combine_message_B(m))
    act = activation_bytes(m, one) + m.vocab_size * 4.0
    per_request = cache.bytes(held) + tpr * (e2a + act)
    attention_total = attention_w + reserve + R_die * per_request
    expert_per_request = tpr * receive_buffer_bytes(1.0, A, dispatch_message_B(m, msg))  # per request of each attention die
    expert_total = expert_w + reserve + R_die * expert_per_request
    max_r = np.minimum(np.floor(np.maximum(cap - attention_w - reserve, 0) / per_request),
                       np.floor(np.maximum(cap - expert_w - reserve, 0) / expert_per_request))
    return {
        "attention_memory_per_die_bytes": attention_total,
        "attention_weights_per_die_bytes": attention_w,
        "kv_cache_per_die_bytes": R_die * cache.bytes(held),
        "kv_cache_peak_per_die_bytes": R_die * cache.bytes(peak),
        "attention_buffers_per_die_bytes": R_die * tpr * e2a,
        "attention_activations_per_die_bytes": R_die * tpr * act,
        "expert_memory_per_die_bytes": expert_total,
        "expert_weights_per_die_bytes": expert_w,
        "expert_buffers_per_die_bytes": R_die * expert_per_request,
        "runtime_reserve_per_die_bytes": _rows_of(reserve, attention_total),
        "hbm_per_die_bytes": _rows_of(cap, attention_total),
        "max_batch_per_npu": max_r * dpp,
        "attention_fits": attention_total <= cap,
        "expert_fits": expert_total <= cap,
        "fits": (attention_total <= cap) & (expert_total <= cap),
    }
