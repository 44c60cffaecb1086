"""Weight shapes of a transformer with MLA, DSA (sparse MLA) or GQA attention, linear-attention
(Gated DeltaNet) layers mixed in by a layer pattern, dense and/or MoE FFN layers and optional
MTP modules: the single place parameter counts and cache shapes come from (docs/model.md §1).
Every function takes a model spec or a SpecView of one; results are element counts (multiply
by bytes per element for memory), except the cache (:func:`kv_cache`), which is in bytes.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from ..specs.dtypes import DTYPE_BYTES
from ..specs.view import remember

STATE_DTYPE_BYTES = {"bf16": 2, "fp16": 2, "fp32": 4}  # a linear-attention state's element (schema.StateDtype)


def is_mla(m) -> bool:
    """MLA attention, dense or sparse (DSA): a latent per token and layer."""
    return m.attention.type in ("mla", "dsa")


def is_dsa(m) -> bool:
    """DeepSeek-V3.2's sparse MLA: a lightning indexer picks the keys the core attends."""
    return m.attention.type == "dsa"


# --------------------------------------------------------------------------- layer pattern
def layer_kinds(m) -> list[str]:
    """Attention of each layer of the main model (docs/model.md §1.4): ``layer_pattern``
    repeated over the layers; every layer ``full`` without one."""
    pattern = list(m.layer_pattern or ["full"])
    return [pattern[i % len(pattern)] for i in range(m.num_layers)]


def layer_counts(m, part: str = "all") -> dict[str, int]:
    """Layers of each attention kind, in order of first appearance, among ``part``: ``dense``
    (the first ``first_dense_layers``), ``moe`` (the rest) or ``all``."""
    return dict(remember(m, ("layer_counts", part), lambda: _layer_counts(m, part)))


def _layer_counts(m, part: str) -> dict[str, int]:
    kinds = layer_kinds(m)
    n = m.first_dense_layers if m.moe is not None else m.num_layers
    chosen = {"dense": kinds[:n], "moe": kinds[n:], "all": kinds}[part]
    out: dict[str, int] = {}
    for k in chosen:
        out[k] = out.get(k, 0) + 1
    return out


def qk_head_dim(m) -> int:
    """Width of a query/key head: nope + rope (MLA) or head_dim (GQA)."""
    a = m.attention
    return a.qk_nope_head_dim + a.qk_rope_head_dim if is_mla(m) else a.head_dim


def v_head_dim(m) -> int:
    a = m.attention
    return a.v_head_dim if is_mla(m) else a.head_dim


def latent_dim(m) -> int:
    """MLA: width of one cached token per layer, compressed KV + decoupled RoPE key."""
    a = m.attention
    return a.kv_lora_rank + a.qk_rope_head_dim


def kv_elements(m) -> int:
    """Elements one token keeps in the KV cache per layer: the MLA latent, or a key and a
    value per KV head (GQA)."""
    if is_mla(m):
        return latent_dim(m)
    return 2 * m.attention.num_kv_heads * m.attention.head_dim


def q_width(m) -> int:
    """Outputs of a GQA layer's query projection: the query heads, twice when each head also
    emits its output gate (Qwen3-Next's gated attention)."""
    a = m.attention
    return a.num_heads * a.head_dim * (2 if getattr(a, "output_gate", False) else 1)


def linear_dims(m) -> dict[str, int]:
    """Widths of a Gated DeltaNet layer (docs/model.md §2.7): ``key`` = key heads x key head
    dim (q and k each), ``value`` = value heads x value head dim (v and the output gate z
    each), ``conv`` = the channels the causal conv1d filters (q, k and v)."""
    la = m.linear_attention
    key, value = la.key_heads * la.key_head_dim, la.value_heads * la.value_head_dim
    return {"key": key, "value": value, "conv": 2 * key + value}


def attention_weights(m, kind: str = "full") -> dict[str, int]:
    """Projection matrices of one attention layer of ``kind`` (docs/model.md §1.1).

    MLA: ``q_a``/``q_b`` (or ``q`` without a q LoRA), ``kv_a``, the up-projection ``kv_b``
    split into its key half W_UK and value half W_UV (absorbed into the query and output in
    decode; the element counts are the same), ``o``; DSA adds the indexer's ``idx_q`` (query
    latent -> heads x head dim), ``idx_k`` (hidden -> one key) and ``idx_w`` (hidden -> one
    weight per head). GQA (``full`` and ``window`` layers): ``q`` (with the output gate when
    the layer has one), ``k``, ``v``, ``o``. A ``linear`` layer: ``qkvz`` (hidden -> q, k, v
    and the output gate z), ``ba`` (hidden -> the delta rule's beta and decay per value
    head), ``out``."""
    h, a = m.hidden_size, m.attention
    if kind == "linear":
        d = linear_dims(m)
        return {"qkvz": h * (2 * d["key"] + 2 * d["value"]), "ba": h * 2 * m.linear_attention.value_heads,
                "out": d["value"] * h}
    if not is_mla(m):
        return {"q": h * q_width(m), "k": h * a.num_kv_heads * a.head_dim,
                "v": h * a.num_kv_heads * a.head_dim, "o": a.num_heads * a.head_dim * h}
    q = ({"q_a": h * a.q_lora_rank, "q_b": a.q_lora_rank * a.num_heads * qk_head_dim(m)} if a.q_lora_rank
         else {"q": h * a.num_heads * qk_head_dim(m)})
    out = {
        **q,
        "kv_a": h * latent_dim(m),
        "kv_b_k": a.kv_lora_rank * a.num_heads * a.qk_nope_head_dim,  # W_UK
        "kv_b_v": a.kv_lora_rank * a.num_heads * a.v_head_dim,  # W_UV
        "o": a.num_heads * a.v_head_dim * h,
    }
    if is_dsa(m):
        ix = a.indexer
        out.update(idx_q=a.q_lora_rank * ix.heads * ix.head_dim, idx_k=h * ix.head_dim, idx_w=h * ix.heads)
    return out


def attention_norm_weights(m, kind: str = "full") -> int:
    """Per-layer vectors that are not matmul weights: the input and post-attention RMSNorms,
    plus MLA's q_a and kv_a norms (DSA: and the indexer key's LayerNorm, weight and bias),
    GQA's per-head q/k norms and its sinks (one logit per head), or a linear layer's conv1d
    taps, its two per-head gate parameters (A_log, dt_bias) and its output norm."""
    a, h = m.attention, m.hidden_size
    if kind == "linear":
        la = m.linear_attention
        return 2 * h + linear_dims(m)["conv"] * la.conv_kernel + 2 * la.value_heads + la.value_head_dim
    if is_mla(m):
        return 2 * h + (a.q_lora_rank or 0) + a.kv_lora_rank + (2 * a.indexer.head_dim if is_dsa(m) else 0)
    return 2 * h + (2 * a.head_dim if a.qk_norm else 0) + (a.num_heads if getattr(a, "sinks", False) else 0)


def attention_params(m, part: str = "all", per_layer=None) -> int:
    """``per_layer(kind)`` summed over the layers of ``part`` (default: the attention weights)."""
    per_layer = per_layer or (lambda kind: sum(attention_weights(m, kind).values()))
    return sum(n * per_layer(kind) for kind, n in layer_counts(m, part).items())


def swiglu_params(hidden: int, intermediate: int) -> int:
    """gate, up (hidden -> intermediate) and down (intermediate -> hidden)."""
    return 3 * hidden * intermediate


def expert_params(m) -> int:
    return swiglu_params(m.hidden_size, m.moe.expert_intermediate_size)


def dense_ffn_params(m) -> int:
    return swiglu_params(m.hidden_size, m.dense_ffn.intermediate_size) if m.dense_ffn is not None else 0


def router_params(m) -> int:
    """Gate matrix plus the per-expert score-correction bias (DeepSeek-V3 aux-free balancing)."""
    return m.moe.routed_experts * m.hidden_size + m.moe.routed_experts


def moe_layers(m) -> int:
    return m.num_layers - m.first_dense_layers if m.moe is not None else 0


def dispatching_layers(m, mtp):
    """MoE layers a prompt's tokens are dispatched in: the model's, and the MTP module's where
    ``mtp`` (0/1, arrays) runs it; 0 for a dense model."""
    if m.moe is None:
        return 0.0
    return moe_layers(m) + (np.asarray(mtp, dtype=float) if m.mtp.modules else 0.0)


def embedding_params(m) -> int:
    return m.vocab_size * m.hidden_size


def mtp_eh_proj_params(m) -> int:
    """The MTP module's entry projection: concatenated [hidden; embedding] (2h) -> h."""
    return 2 * m.hidden_size * m.hidden_size


def mtp_module_params(m) -> int:
    """One MTP module without the shared embedding/head: enorm, hnorm, eh_proj (2h -> h), one
    MoE transformer block, and the shared-head norm."""
    h = m.hidden_size
    block = sum(attention_weights(m).values()) + attention_norm_weights(m) + moe_layer_params(m)
    return 3 * h + mtp_eh_proj_params(m) + block


def moe_layer_params(m) -> int:
    mo = m.moe
    return (mo.routed_experts + mo.shared_experts) * expert_params(m) + router_params(m)


@dataclass(frozen=True)
class ParamBreakdown:
    attention: int
    dense_ffn: int
    routed_experts: int
    shared_experts: int
    router: int
    norms: int
    embedding: int
    head: int
    mtp: int
    mtp_embedding_and_head_copies: int

    @property
    def total(self) -> int:
        """Main model (what "671B" counts): everything but the MTP module."""
        return (self.attention + self.dense_ffn + self.routed_experts + self.shared_experts + self.router
                + self.norms + self.embedding + self.head)

    @property
    def total_with_mtp(self) -> int:
        """As stored on disk: main model + MTP module + its own copies of embedding and head."""
        return self.total + self.mtp + self.mtp_embedding_and_head_copies


def param_breakdown(m) -> ParamBreakdown:
    n_moe = moe_layers(m)
    emb = embedding_params(m)
    copies = 2 * emb if m.mtp.shares_embedding_and_head else 0
    moe = m.moe
    return ParamBreakdown(
        attention=attention_params(m),
        dense_ffn=m.first_dense_layers * dense_ffn_params(m),
        routed_experts=n_moe * moe.routed_experts * expert_params(m) if moe else 0,
        shared_experts=n_moe * moe.shared_experts * expert_params(m) if moe else 0,
        router=n_moe * router_params(m) if moe else 0,
        norms=attention_params(m, per_layer=lambda kind: attention_norm_weights(m, kind)) + m.hidden_size,
        embedding=emb,
        head=0 if m.tie_word_embeddings else emb,
        mtp=m.mtp.modules * mtp_module_params(m) if m.mtp.modules else 0,
        mtp_embedding_and_head_copies=m.mtp.modules * copies,
    )


def activated_matmul_params(m) -> int:
    """Weights one token multiplies through in the main model: all attention and dense
    weights, top-k routed + shared experts, router, and the LM head (the embedding is a
    lookup, not a matmul)."""
    n_moe = moe_layers(m)
    per_moe = 0
    if m.moe is not None:
        mo = m.moe
        per_moe = (mo.experts_per_token + mo.shared_experts) * expert_params(m) + router_params(m)
    return attention_params(m) + m.first_dense_layers * dense_ffn_params(m) + n_moe * per_moe + embedding_params(m)


def kv_layers(m, mtp_on=0):
    """Layers that keep a cache: the main model's, plus the MTP module's when it runs."""
    return m.num_layers + m.mtp.modules * mtp_on


def indexer_key_B(m, indexer_B: float) -> float:
    """One cached indexer key (DSA) per token and layer: ``head_dim`` values of
    ``indexer_B`` bytes, plus its scale when they are quantised (8-bit or narrower):
    128 x 1 + 4 = 132 B for DeepSeek-V3.2's FP8 keys."""
    ix = m.attention.indexer
    return ix.head_dim * indexer_B + (ix.scale_B if indexer_B < 2 else 0)


def linear_state_elements(m) -> dict[str, int]:
    """A linear layer's per-sequence state (docs/model.md §1.2): the delta rule's
    ``recurrent`` matrix (value heads x key head dim x value head dim) and the conv1d's
    ``conv`` history (conv_kernel - 1 past inputs of each conv channel)."""
    la = m.linear_attention
    return {"recurrent": la.value_heads * la.key_head_dim * la.value_head_dim,
            "conv": (la.conv_kernel - 1) * linear_dims(m)["conv"]}


def linear_state_B(m) -> float:
    """Bytes of one linear layer's state per sequence, in its ``state_dtype``."""
    return sum(linear_state_elements(m).values()) * STATE_DTYPE_BYTES[m.linear_attention.state_dtype]


@dataclass(frozen=True)
class KVCache:
    """What one sequence keeps between steps, by layer kind (docs/model.md §1.2):
    ``full_B`` bytes per token on the full-attention layers (a DSA model's indexer keys
    included), ``window_B`` per token on the window layers for at most ``window`` tokens,
    ``state_B`` per sequence on the linear layers whatever its length. Fields may be arrays."""

    full_B: object = 0.0
    window_B: object = 0.0
    window: object = np.inf
    state_B: object = 0.0

    def bytes(self, tokens) -> np.ndarray:
        """Bytes a sequence of ``tokens`` tokens holds: tokens x full + min(tokens, window)
        x window + state (0 tokens: nothing, no state either)."""
        tokens = np.asarray(tokens, dtype=float)
        return (tokens * self.full_B + np.minimum(tokens, self.window) * self.window_B
                + np.where(tokens > 0, 1.0, 0.0) * self.state_B)

    def scaled(self, kv=1.0, state=1.0) -> "KVCache":
        """The same cache with the KV parts (full, window) times ``kv`` and the state times
        ``state``: the share a die of a tensor-parallel group holds (docs/model.md §7)."""
        return replace(self, full_B=self.full_B * kv, window_B=self.window_B * kv, state_B=self.state_B * state)


def kv_cache(m, kv_B: float, mtp_on=0.0) -> KVCache:
    """The cache of one sequence (docs/model.md §1.2) with its KV in ``kv_B`` bytes per
    element: per token, the KV elements (§1.2) of every ``full`` layer (and of the MTP
    module's layer when it runs: ``mtp_on``), a DSA model's indexer key in each; per token up
    to the window, the KV elements of every ``window`` layer; per sequence, the state of
    every ``linear`` layer (in its own dtype)."""
    counts = layer_counts(m)
    full = counts.get("full", 0) + m.mtp.modules * np.asarray(mtp_on, dtype=float)
    per_full = kv_elements(m) * kv_B
    if is_dsa(m):
        per_full = per_full + indexer_key_B(m, DTYPE_BYTES[m.precision.indexer or m.precision.attention])
    window = getattr(m.attention, "sliding_window", None)
    return KVCache(full_B=full * per_full,
                   window_B=counts.get("window", 0) * kv_elements(m) * kv_B,
                   window=float(window) if window is not None else np.inf,
                   state_B=counts.get("linear", 0) * linear_state_B(m) if counts.get("linear") else 0.0)


def kv_bytes_per_token(m, dtype_bytes: float, layers: int | None = None) -> float:
    """Bytes every token adds to the cache (§1.2): KV elements (DSA: and the indexer key) x
    the full-attention layers (or ``layers`` of them) x bytes. Window and linear layers add
    none beyond their cap: :func:`kv_cache` has the whole per-sequence shape."""
    if layers is None:
        return float(kv_cache(m, dtype_bytes).full_B)
    per_layer = kv_elements(m) * dtype_bytes
    if is_dsa(m):
        per_layer += indexer_key_B(m, DTYPE_BYTES[m.precision.indexer or m.precision.attention])
    return per_layer * layers
