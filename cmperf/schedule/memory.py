"""HBM per die: weights under the placement, KV cache, dispatch/combine buffers,
activations and runtime reserve; the largest batch that fits (docs/model.md §7)."""

from __future__ import annotations

import numpy as np

from ..cost import arch
from ..cost.collectives import route_of
from ..cost.ops import ASCEND_MESSAGE, Bytes, combine_message_B, dispatch_message_B, placement
from .decode import draft_tokens


def weight_bytes(m, g, attn_tp=1.0) -> np.ndarray:
    """Weights on one die: attention, dense FFN, router, norms, embedding and head are
    replicated on every die (data-parallel attention; the prefill up-projections are split
    ``attn_tp`` ways); each die holds its ``instances`` experts in every MoE layer, MTP
    module included."""
    b = Bytes.of(m)
    w = arch.mla_weights(m)
    mtp_on = np.asarray(g["mtp"], dtype=float)
    mtp_layers = m.mtp.modules * mtp_on
    layers = arch.kv_layers(m, mtp_on)
    up = w["q_b"] + w["kv_b_k"] + w["kv_b_v"]
    mla = (sum(w.values()) - up + up / np.asarray(attn_tp, dtype=float)) * b.weight
    instances = placement(m, 0.0, g["ep"], g["redundant_experts"], g["shared_copies"], 1.0, 1).instances_per_die
    n_moe = m.num_layers - m.first_dense_layers + mtp_layers
    return (layers * mla
            + m.first_dense_layers * arch.dense_ffn_params(m) * b.weight
            + n_moe * (instances * arch.expert_params(m) * b.weight + arch.router_params(m) * b.hidden)
            + layers * arch.mla_norm_weights(m) * b.hidden
            + arch.embedding_params(m) * (b.emb + b.head)
            + mtp_layers * arch.mtp_eh_proj_params(m) * b.weight)


def buffer_bytes(m, tokens_per_die, ep, message=ASCEND_MESSAGE) -> np.ndarray:
    """Dispatch + combine receive buffers (paper Eq. 1-2): every one of ``ep`` peers may send
    each of its tokens to this die once, so each buffer holds tokens x EP messages."""
    return tokens_per_die * np.asarray(ep, dtype=float) * (dispatch_message_B(m, message) + combine_message_B(m))


def activation_bytes(m, tokens) -> np.ndarray:
    """Live activations per token: four hidden-size BF16 buffers (residual stream, normed
    input, attention output, MoE output) and the largest attention intermediate (prefill
    q, k, v and output of all heads). Decode adds FP32 logits in decode_memory."""
    b, a, h = Bytes.of(m), m.attention, m.hidden_size
    attn = a.num_heads * (2 * arch.qk_head_dim(m) + 2 * a.v_head_dim) * b.attn
    return tokens * (4 * h * b.hidden + attn)


def decode_memory(hw, m, g) -> dict:
    dpp = hw.chip.dies_per_package
    R_die = g["batch"] / dpp
    tpr = 1 + draft_tokens(g)
    kv_tok = arch.kv_bytes_per_token(m, Bytes.of(m).kv, arch.kv_layers(m, np.asarray(g["mtp"], dtype=float)))
    context = g["prompt_len"] + g["output_len"]
    fixed = weight_bytes(m, g) + hw.chip.memory.runtime_reserved_B
    msg = route_of(hw, "decode").message
    per_request = context * kv_tok + tpr * (buffer_bytes(m, 1.0, g["ep"], msg) + activation_bytes(m, 1.0)
                                            + m.vocab_size * 4)
    total = fixed + R_die * per_request
    cap = hw.chip.die.hbm_capacity_B
    max_r = np.floor(np.maximum(cap - fixed, 0) / per_request)
    return {
        "memory_per_die_bytes": total,
        "weights_per_die_bytes": weight_bytes(m, g),
        "kv_cache_per_die_bytes": R_die * context * kv_tok,
        "buffers_per_die_bytes": buffer_bytes(m, R_die * tpr, g["ep"], msg),
        "hbm_per_die_bytes": np.broadcast_to(cap, np.shape(total)).astype(float),
        "max_batch_per_npu": max_r * dpp,
        "fits": total <= cap,
    }


def prefill_memory(hw, m, g, microbatches) -> dict:
    dpp = hw.chip.dies_per_package
    T_die = g["tokens_per_npu"] / dpp
    T_mb = T_die / microbatches
    kv_tok = arch.kv_bytes_per_token(m, Bytes.of(m).kv, arch.kv_layers(m, np.asarray(g["mtp"], dtype=float)))
    fixed = weight_bytes(m, g, g["attn_tp"]) + hw.chip.memory.runtime_reserved_B
    msg = route_of(hw, "prefill").message
    per_token = kv_tok + (buffer_bytes(m, 1.0, g["ep"], msg) + activation_bytes(m, 1.0)) / microbatches
    total = fixed + T_die * per_token
    cap = hw.chip.die.hbm_capacity_B
    return {
        "memory_per_die_bytes": total,
        "weights_per_die_bytes": weight_bytes(m, g, g["attn_tp"]),
        "kv_cache_per_die_bytes": T_die * kv_tok,
        "buffers_per_die_bytes": buffer_bytes(m, T_mb, g["ep"], msg),
        "hbm_per_die_bytes": np.broadcast_to(cap, np.shape(total)).astype(float),
        "max_tokens_per_npu": np.floor(np.maximum(cap - fixed, 0) / per_token) * dpp,
        "fits": total <= cap,
    }
