"""Weight shapes of a transformer with MLA or GQA attention, dense and/or MoE FFN layers and
optional MTP modules: the single place parameter counts come from (docs/model.md §1). Every
function takes a model spec or a SpecView of one; results are element counts (multiply by
bytes per element for memory).
"""

from __future__ import annotations

from dataclasses import dataclass


def is_mla(m) -> bool:
    return m.attention.type == "mla"


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


def attention_weights(m) -> dict[str, int]:
    """Projection matrices of one attention layer (docs/model.md §1.1).

    MLA: ``q_a``/``q_b`` (or ``q`` without a q LoRA), ``kv_a``, the up-projection ``kv_b``
    split into its key half W_UK and value half W_UV (absorbed into the query and output in
    decode; the element counts are the same), ``o``. GQA: ``q``, ``k``, ``v``, ``o``."""
    h, a = m.hidden_size, m.attention
    if not is_mla(m):
        return {"q": h * a.num_heads * a.head_dim, "k": h * a.num_kv_heads * a.head_dim,
                "v": h * a.num_kv_heads * a.head_dim, "o": a.num_heads * a.head_dim * h}
    q = ({"q_a": h * a.q_lora_rank, "q_b": a.q_lora_rank * a.num_heads * qk_head_dim(m)} if a.q_lora_rank
         else {"q": h * a.num_heads * qk_head_dim(m)})
    return {
        **q,
        "kv_a": h * latent_dim(m),
        "kv_b_k": a.kv_lora_rank * a.num_heads * a.qk_nope_head_dim,  # W_UK
        "kv_b_v": a.kv_lora_rank * a.num_heads * a.v_head_dim,  # W_UV
        "o": a.num_heads * a.v_head_dim * h,
    }


def attention_norm_weights(m) -> int:
    """RMSNorm weights of one layer: input and post-attention norms, plus MLA's q_a and kv_a
    norms or GQA's per-head q/k norms."""
    a = m.attention
    if is_mla(m):
        return 2 * m.hidden_size + (a.q_lora_rank or 0) + a.kv_lora_rank
    return 2 * m.hidden_size + (2 * a.head_dim if a.qk_norm else 0)


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
        attention=m.num_layers * sum(attention_weights(m).values()),
        dense_ffn=m.first_dense_layers * dense_ffn_params(m),
        routed_experts=n_moe * moe.routed_experts * expert_params(m) if moe else 0,
        shared_experts=n_moe * moe.shared_experts * expert_params(m) if moe else 0,
        router=n_moe * router_params(m) if moe else 0,
        norms=m.num_layers * attention_norm_weights(m) + m.hidden_size,
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
    return (m.num_layers * sum(attention_weights(m).values()) + m.first_dense_layers * dense_ffn_params(m)
            + n_moe * per_moe + embedding_params(m))


def kv_layers(m, mtp_on=0):
    """Layers that keep a KV cache: the main model's, plus the MTP module's when it runs."""
    return m.num_layers + m.mtp.modules * mtp_on


def kv_bytes_per_token(m, dtype_bytes: float, layers: int | None = None) -> float:
    """KV cache per token: elements per layer (§1.2) x layers x bytes."""
    return kv_elements(m) * (m.num_layers if layers is None else layers) * dtype_bytes
