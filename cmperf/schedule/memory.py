"""HBM per die: weights under the placement, KV cache, dispatch/combine buffers,
activations and runtime reserve; the largest batch that fits (docs/model.md §7)."""

from __future__ import annotations

import numpy as np

from ..cost import arch
from ..cost.collectives import route_of
from ..cost.ops import (ASCEND_MESSAGE, Bytes, attention_decode_ops, attention_prefill_ops, combine_message_B,
                        dense_ffn_op, dispatch_message_B, head_op, kv_shards, moe_ops, mtp_proj_op, placement)
from .decode import draft_tokens


def weight_bytes(m, g, phase: str) -> np.ndarray:
    """Weights on one die, read off the same operator builders the schedules time (so a
    weight lives in one formula): one layer of each kind x its count, MTP module included,
    plus the norms, the embedding and the head. Attention and dense FFN weights are split by
    the phase's TP degree; each die holds its ``instances`` experts per MoE layer."""
    b = Bytes.of(m)
    mtp_on = np.asarray(g["mtp"], dtype=float)
    mtp_layers = m.mtp.modules * mtp_on
    layers = arch.kv_layers(m, mtp_on)
    zero = 0.0 * np.asarray(g["ep"], dtype=float)
    held = lambda ops: sum(np.asarray(o.weight_bytes, dtype=float) for o in ops)  # noqa: E731
    if phase == "decode":
        tp = g["tp"]
        attn = held(attention_decode_ops(m, zero, zero, 1.0, tp))
        ffn = held([dense_ffn_op(m, zero, tp)]) if m.dense_ffn is not None else 0.0
    else:
        attn = held(attention_prefill_ops(m, zero, 1.0, g["attn_tp"]))
        ffn = held([dense_ffn_op(m, zero, g["attn_tp"] if m.moe is None else 1.0)]) if m.dense_ffn is not None else 0.0
    moe = 0.0
    if m.moe is not None:
        pl = placement(m, zero, g["ep"], g["redundant_experts"], g["shared_copies"], 1.0, 1)
        gate, _, experts, _ = moe_ops(m, zero, g["ep"], pl)
        moe = held([gate, experts])
    return (layers * (attn + arch.attention_norm_weights(m) * b.hidden)
            + m.first_dense_layers * ffn
            + (arch.moe_layers(m) + mtp_layers) * moe
            + arch.embedding_params(m) * b.emb + held([head_op(m, zero)])
            + mtp_layers * held([mtp_proj_op(m, zero)]))


def buffer_bytes(m, tokens_per_die, ep, message=ASCEND_MESSAGE) -> np.ndarray:
    """Dispatch + combine receive buffers (paper Eq. 1-2): every one of ``ep`` peers may send
    each of its tokens to this die once, so each buffer holds tokens x EP messages."""
    return tokens_per_die * np.asarray(ep, dtype=float) * (dispatch_message_B(m, message) + combine_message_B(m))


def activation_bytes(m, tokens) -> np.ndarray:
    """Live activations per token: four hidden-size BF16 buffers (residual stream, normed
    input, attention output, MoE output) and the largest attention intermediate (prefill
    q, k, v and output of all heads). Decode adds FP32 logits in decode_memory."""
    b, a, h = Bytes.of(m), m.attention, m.hidden_size
    attn = a.num_heads * (2 * arch.qk_head_dim(m) + 2 * arch.v_head_dim(m)) * b.attn
    return tokens * (4 * h * b.hidden + attn)


def decode_memory(hw, m, g) -> dict:
    dpp = hw.chip.dies_per_package
    R_die = g["batch"] / dpp
    tpr = 1 + draft_tokens(g)
    tp = np.asarray(g["tp"], dtype=float)
    # a die of a TP group holds its share of the KV heads for all the group's requests
    kv_tok = (arch.kv_bytes_per_token(m, Bytes.of(m).kv, arch.kv_layers(m, np.asarray(g["mtp"], dtype=float)))
              * tp / kv_shards(m, tp))
    context = g["prompt_len"] + g["output_len"]
    weights = weight_bytes(m, g, "decode")
    fixed = weights + hw.chip.memory.runtime_reserved_B
    msg = route_of(hw, "decode").message
    buffers = buffer_bytes(m, 1.0, g["ep"], msg) if m.moe is not None else 0.0
    per_request = context * kv_tok + tpr * (buffers + activation_bytes(m, tp) + m.vocab_size * 4)
    total = fixed + R_die * per_request
    cap = hw.chip.die.hbm_capacity_B
    max_r = np.floor(np.maximum(cap - fixed, 0) / per_request)
    return {
        "memory_per_die_bytes": total,
        "weights_per_die_bytes": weights,
        "kv_cache_per_die_bytes": R_die * context * kv_tok,
        "buffers_per_die_bytes": R_die * tpr * buffers,
        "hbm_per_die_bytes": np.broadcast_to(cap, np.shape(total)).astype(float),
        "max_batch_per_npu": max_r * dpp,
        "fits": total <= cap,
    }


def prefill_memory(hw, m, g, microbatches) -> dict:
    dpp = hw.chip.dies_per_package
    T_die = g["tokens_per_npu"] / dpp
    T_mb = T_die / microbatches
    tp = np.asarray(g["attn_tp"], dtype=float)
    shares = tp / kv_shards(m, tp) if not arch.is_mla(m) else 1.0  # GQA's K/V are made per head shard, MLA's latent per token
    kv_tok = arch.kv_bytes_per_token(m, Bytes.of(m).kv, arch.kv_layers(m, np.asarray(g["mtp"], dtype=float))) * shares
    weights = weight_bytes(m, g, "prefill")
    fixed = weights + hw.chip.memory.runtime_reserved_B
    msg = route_of(hw, "prefill").message
    buffers = buffer_bytes(m, 1.0, g["ep"], msg) if m.moe is not None else 0.0
    per_token = kv_tok + (buffers + activation_bytes(m, 1.0)) / microbatches
    total = fixed + T_die * per_token
    cap = hw.chip.die.hbm_capacity_B
    return {
        "memory_per_die_bytes": total,
        "weights_per_die_bytes": weights,
        "kv_cache_per_die_bytes": T_die * kv_tok,
        "buffers_per_die_bytes": T_mb * buffers,
        "hbm_per_die_bytes": np.broadcast_to(cap, np.shape(total)).astype(float),
        "max_tokens_per_npu": np.floor(np.maximum(cap - fixed, 0) / per_token) * dpp,
        "fits": total <= cap,
    }
