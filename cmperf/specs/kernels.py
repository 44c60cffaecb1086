"""The kernels a served step launches, by name: the one list the cost model's operators
(cmperf/cost/ops.py), a stack's fusion groups (stacks/*.yaml ``fusion``, cmperf/cost/fusion.py)
and the docs use (docs/model.md §2.9)."""

from __future__ import annotations

# small kernels: each a roofline kernel of its own (its HBM bytes, its launch) unless a stack fuses it
SMALL_KERNELS = {
    "residual_add": "the residual stream plus a block's output (the previous block's, at a layer's start)",
    "rmsnorm": "RMSNorm of the hidden state before attention, before the FFN / MoE, and before the LM head",
    "rope": "rotary position embedding of the queries' and keys' rotary dims",
    "kv_write": "the new tokens' keys and values (MLA: latent) written into the paged KV cache",
    "activation": "SwiGLU (silu(gate) x up) between the FFN's or the experts' two GEMMs",
    "router_topk": "the router's scores (softmax / sigmoid, bias, group top-k) and the top-k experts",
    "sampling": "logits to token: softmax / top-k / top-p or argmax over the vocabulary",
    "embedding": "the tokens' embedding rows gathered",
}
# the larger operators a fusion group may fold small kernels into (their names in cmperf/cost/ops.py)
HOST_OPS = ("qkv_proj", "mla_prolog", "o_proj", "linear_proj", "linear_out", "dense_ffn", "gate", "experts", "lm_head",
            "mtp_head")
KERNELS = tuple(SMALL_KERNELS) + HOST_OPS
