"""Per-operator work of DeepSeek-R1 on one die: FLOPs, HBM bytes, network bytes and
messages, engine (docs/model.md §1-§4). Each builder takes the model view ``m``, the
hardware view ``hw`` and per-die, per-microbatch token counts (scalars or grid arrays) and
returns :class:`~cmperf.cost.roofline.Op` records; the schedules (cmperf.schedule) decide
which stream runs them and how they overlap.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import partial

import numpy as np

from . import arch
from .roofline import Gemm, Op, dtype_bytes, ratio


@dataclass
class Bytes:
    """Bytes per element of each tensor family, from the model's precision section."""

    weight: float  # projection weights as stored (W4A8: 0.5)
    act: float  # the projections' compute dtype: their activations and streamed operands
    hidden: float
    attn: float
    kv: float
    head: float
    emb: float
    expert: float  # the experts' compute dtype: their activations and dispatched tokens
    expert_weight: float  # expert weights as stored

    @classmethod
    def of(cls, m) -> "Bytes":
        p = m.precision
        weights = getattr(p, "weights", None) or p.matmul
        expert_weights = getattr(p, "expert_weights", None) or getattr(p, "weights", None) or experts_dtype(m)
        return cls(weight=dtype_bytes(weights), act=dtype_bytes(p.matmul), hidden=dtype_bytes(p.hidden),
                   attn=dtype_bytes(p.attention), kv=dtype_bytes(p.kv_cache), head=dtype_bytes(p.head),
                   emb=dtype_bytes(p.embedding), expert=dtype_bytes(experts_dtype(m)),
                   expert_weight=dtype_bytes(expert_weights))


def experts_dtype(m) -> str:
    """Dtype of the MoE grouped GEMMs and of the tokens dispatched to them."""
    return m.precision.experts or m.precision.matmul


# --------------------------------------------------------------------------- vector work
# Element operations per element on the AI Vector cores (docs/model.md §2.4). They are
# operation counts of the textbook kernels, not fitted; the fitted quantity is the rate at
# which a die executes them (chip.die.vector_ops_per_s).
VEC_RMSNORM = 4  # square, reduce, scale by rsqrt, multiply by weight
VEC_QUANT = 3  # abs-max reduce, scale, cast (dynamic per-token INT8)
VEC_DEQUANT = 2  # INT32 accumulator x weight scale x token scale -> BF16
VEC_ROPE = 4  # two multiplies, one add, one rotate
VEC_SOFTMAX = 5  # online softmax per score: max, subtract, exp, sum, cast
VEC_SWIGLU = 5  # sigmoid (exp, add, divide) and two multiplies
VEC_RESIDUAL = 1
VEC_COMBINE = 2  # multiply by routing weight and accumulate
VEC_ROUTING = 10  # sigmoid, bias, group top-k, top-k, normalise, per expert score
VEC_SAMPLING = 3  # softmax / argmax over the vocabulary, per logit


# --------------------------------------------------------------------------- messages
@dataclass(frozen=True)
class MessageFormat:
    """Layout of a dispatched token (the system's ``expert_parallel.<phase>.message``)."""

    scale_block: int = 0  # elements per scale; 0: one scale per token
    scale_B: int = 4
    header_B: int = 0
    align_B: int = 512

    @classmethod
    def of(cls, spec) -> "MessageFormat":
        return cls(int(spec.scale_block), int(spec.scale_B), int(spec.header_B), int(spec.align_B))


ASCEND_MESSAGE = MessageFormat()  # paper §4.2.1: INT8 + one FP32 scale, 512 B aligned


def dispatch_message_B(m, fmt: MessageFormat = ASCEND_MESSAGE) -> float:
    """One token sent to one expert: the hidden vector in the matmul dtype, its scales and
    header, aligned (paper §4.2.1: 7,168 + 4 -> 7,680 B = 7.5 KiB; DeepEP's FP8: 7,168 +
    56 x 4 + 16 = 7,408 B)."""
    h = m.hidden_size
    scales = 1 if fmt.scale_block == 0 else -(-h // fmt.scale_block)
    raw = h * dtype_bytes(experts_dtype(m)) + scales * fmt.scale_B + fmt.header_B
    return float(-(-raw // fmt.align_B) * fmt.align_B)


def combine_message_B(m) -> float:
    """One expert output returned to its token: the hidden vector in BF16 (14 KiB)."""
    return float(m.hidden_size * dtype_bytes(m.precision.hidden))


@dataclass(frozen=True)
class Route:
    """How dispatch and combine reach the experts' dies (docs/model.md §4.2): ``direct``
    sends every message over the innermost of ``tiers`` that holds both dies; ``hierarchical``
    sends one copy per destination domain of the inner tier over the outer tier, then forwards
    it inside the domain. ``inner_dies``: dies in one domain of the inner tier. ``chunked``:
    tokens travel packed in per-destination buffers, so the engine's per-message cost does
    not apply, only the tiers' bandwidth (DeepEP's normal kernels). ``sm_pair_s``: SM-seconds
    the kernel's own work takes per (token, rank of the group) pair, spread over the SMs it
    runs on (0: not SM-limited; docs/model.md §4.2)."""

    style: str = "direct"
    tiers: tuple = ("ub",)
    inner_dies: object = 1.0
    message: MessageFormat = ASCEND_MESSAGE
    chunked: bool = False
    sm_pair_s: object = 0.0


def distinct_reached(units, k) -> np.ndarray:
    """Expected number of distinct units (dies, nodes) a token reaches when each of its ``k``
    experts sits on one of ``units`` equally likely units: units x (1 - (1 - 1/units)^k)."""
    units = np.maximum(np.asarray(units, dtype=float), 1.0)
    return units * (1 - (1 - 1 / units) ** k)


def ep_traffic(route: Route, T, k, remote_fraction, shared_msgs, received_rows, ep, msg_B):
    """Per die and microbatch: messages through the communication engine and bytes on each
    tier of ``route`` for ``T`` tokens, each sent to ``k`` routed experts (a fraction
    ``remote_fraction`` of them on other dies) and ``shared_msgs`` remote shared copies; the
    busiest die receives ``received_rows`` remote rows. Returns (sent, {tier: bytes})."""
    sent = T * (k * remote_fraction + shared_msgs)
    link = np.maximum(sent, received_rows)  # a die's port carries the larger of what it sends and receives
    if len(route.tiers) == 1:
        return sent, {route.tiers[0]: link * msg_B}
    inner, outer = route.tiers[0], route.tiers[-1]
    ep = np.asarray(ep, dtype=float)
    D = np.minimum(np.asarray(route.inner_dies, dtype=float), ep)
    inside = np.where(ep > 1, (D - 1) / np.maximum(ep - 1, 1), 0.0)  # remote peers in the same inner domain
    if route.style == "direct":
        return sent, {inner: link * inside * msg_B, outer: link * (1 - inside) * msg_B}
    # hierarchical (DeepEP normal kernels): a token crosses the outer tier once per remote
    # domain it reaches and the inner tier once per distinct die it reaches that is not at the
    # sender's (or the receiving proxy's) position in its domain: copies are de-duplicated
    # per node and per die, not sent once per expert. The busiest die's excess (received /
    # sent) scales both.
    domains = ep / D
    remote_domains = distinct_reached(domains, k) * (domains - 1) / np.maximum(domains, 1)
    dies_reached = distinct_reached(ep, k) + shared_msgs
    excess = ratio(link, sent, where_den_zero=1.0)
    outer_msgs = excess * T * remote_domains
    forwards = excess * T * dies_reached * (D - 1) / np.maximum(D, 1)
    return outer_msgs + forwards, {inner: forwards * msg_B, outer: outer_msgs * msg_B}


def swiglu_activation_bytes(m, rows, intermediate, act=None) -> object:
    """HBM bytes of the activations of a W8A8 SwiGLU FFN over ``rows`` tokens: quantised
    input, BF16 gate and up outputs written and read back by the activation, quantised input
    of the down projection, BF16 output (``act``: bytes of a quantised activation)."""
    b, h = Bytes.of(m), m.hidden_size
    act = b.act if act is None else act
    gate_up = 2 * intermediate * b.hidden  # two matrices' outputs
    return rows * (h * act + 2 * gate_up + intermediate * act + h * b.hidden)


# --------------------------------------------------------------------------- attention
def kv_shards(m, tp) -> np.ndarray:
    """How many ways tensor parallelism splits a token's KV cache: by KV head, up to the
    number of KV heads (GQA); not at all for MLA's single latent."""
    tp = np.asarray(tp, dtype=float)
    return np.minimum(tp, m.attention.num_kv_heads) if not arch.is_mla(m) else np.ones_like(tp)


def attention_decode_ops(m, T, R, L, tp=1.0) -> list[Op]:
    """Decode attention for ``T`` tokens of ``R`` requests with ``L`` cached tokens each,
    heads split ``tp`` ways (docs/model.md §2.1): prolog (projections, RoPE, cache write),
    the attention core over the cache, output projection; with ``tp`` > 1 the per-die work
    is 1/tp of the heads for the whole TP group's tokens."""
    return _mla_decode_ops(m, T, R, L, tp) if arch.is_mla(m) else _gqa_decode_ops(m, T, R, L, tp)


def attention_prefill_ops(m, T, P, tp, tier: str = "ub", cached=0.0) -> list[Op]:
    """Prefill attention for ``T`` computed tokens of prompts of length ``P`` whose first
    ``cached`` tokens' KV come from the context cache, hybrid SP -> TP(``tp``) -> SP (paper
    §4.3.1, docs/model.md §2.2, §9.5). Returns, in order: pre-projection, all-gather,
    projections + FlashAttention, all-to-all, output projection."""
    build = _mla_prefill_ops if arch.is_mla(m) else _gqa_prefill_ops
    return build(m, T, P, tp, tier, np.asarray(cached, dtype=float))


def attended_tokens(P, cached) -> np.ndarray:
    """Mean keys a computed prompt token attends, causally: the ``cached`` prefix and, of
    the ``P - cached`` new tokens, itself and those before it: cached + (P - cached + 1) / 2."""
    P, cached = np.asarray(P, dtype=float), np.asarray(cached, dtype=float)
    return cached + (P - cached + 1) / 2


def cached_rows(T, P, cached) -> np.ndarray:
    """Cached prefix tokens of the prompts whose ``T`` computed tokens a die holds."""
    P, cached = np.asarray(P, dtype=float), np.asarray(cached, dtype=float)
    return np.asarray(T, dtype=float) * cached / (P - cached)


def _mla_q_weights(m, w) -> int:
    return w["q_b"] if "q_b" in w else w["q"]


def _mla_decode_ops(m, T, R, L, tp) -> list[Op]:
    """Absorbed MLA (MLAProlog, FusedAttention over the latent cache, O-proj). The latent is
    one per token, so every die of a TP group reads all of its requests' caches."""
    b, a, h = Bytes.of(m), m.attention, m.hidden_size
    w = arch.attention_weights(m)
    tp = np.asarray(tp, dtype=float)
    lat = arch.latent_dim(m)
    qk_dim = arch.qk_head_dim(m)
    r_q = a.q_lora_rank or 0
    prolog_w = w.get("q_a", 0) + w["kv_a"] + (_mla_q_weights(m, w) + w["kv_b_k"]) / tp
    out_w = (w["kv_b_v"] + w["o"]) / tp
    nope, rope, H = a.qk_nope_head_dim, a.qk_rope_head_dim, a.num_heads / tp
    prolog_vec = (VEC_RMSNORM * h + VEC_QUANT * h + VEC_DEQUANT * (r_q + lat)
                  + VEC_RMSNORM * (r_q + a.kv_lora_rank) + VEC_QUANT * r_q
                  + VEC_DEQUANT * H * qk_dim + VEC_ROPE * (H + 1) * rope + VEC_QUANT * H * nope
                  + VEC_DEQUANT * H * a.kv_lora_rank)
    gm = partial(Gemm, in_B=b.act, w_B=b.weight, out_B=b.hidden)
    q_in = [gm(T, r_q, h), gm(T, H * qk_dim, r_q)] if r_q else [gm(T, H * qk_dim, h)]
    prolog = Op(
        "mla_prolog", "cube", flops=2 * T * prolog_w, dtype=m.precision.matmul, vector_ops=T * prolog_vec,
        gemm=(*q_in, gm(T, lat, h), gm(T, a.kv_lora_rank, nope, groups=H)),
        outputs=2 * T * (r_q + lat + H * (qk_dim + a.kv_lora_rank)),
        hbm_bytes=prolog_w * b.weight + T * h * b.hidden + T * H * lat * b.attn + T * lat * b.kv,
        weight_bytes=prolog_w * b.weight,
    )
    core = Op(
        "attention_core", "cube", flop_kind="attention", dtype=m.precision.attention,
        flops=2 * T * H * (lat + a.kv_lora_rank) * L,
        vector_ops=VEC_SOFTMAX * T * H * L, chained=True,
        hbm_bytes=R * L * lat * b.kv + T * H * (lat + a.kv_lora_rank) * b.attn,
    )
    o_vec = (VEC_QUANT * H * a.kv_lora_rank + VEC_DEQUANT * H * a.v_head_dim + VEC_QUANT * H * a.v_head_dim
             + VEC_DEQUANT * h + VEC_RESIDUAL * h)
    o_proj = Op(
        "o_proj", "cube", flops=2 * T * out_w, dtype=m.precision.matmul, vector_ops=T * o_vec,
        gemm=(gm(T, a.v_head_dim, a.kv_lora_rank, groups=H), gm(T, h, H * a.v_head_dim)),
        outputs=2 * T * (H * a.v_head_dim + h),
        hbm_bytes=out_w * b.weight + T * H * a.kv_lora_rank * b.attn + T * h * b.hidden,
        weight_bytes=out_w * b.weight,
    )
    return [prolog, core, o_proj]


def _gqa_decode_ops(m, T, R, L, tp) -> list[Op]:
    """GQA: q/k/v projections with RoPE and the cache write, the attention core over the
    K and V caches, the output projection."""
    b, a, h = Bytes.of(m), m.attention, m.hidden_size
    w = arch.attention_weights(m)
    tp = np.asarray(tp, dtype=float)
    shards = kv_shards(m, tp)
    d, H, Hkv = a.head_dim, a.num_heads / tp, a.num_kv_heads / shards
    qkv_w = w["q"] / tp + (w["k"] + w["v"]) / shards
    qkv_vec = (VEC_RMSNORM * h + VEC_QUANT * h + VEC_DEQUANT * (H + 2 * Hkv) * d + VEC_ROPE * (H + Hkv) * d
               + (VEC_RMSNORM * (H + Hkv) * d if a.qk_norm else 0))
    gm = partial(Gemm, in_B=b.act, w_B=b.weight, out_B=b.hidden)
    qkv = Op("qkv_proj", "cube", flops=2 * T * qkv_w, dtype=m.precision.matmul, vector_ops=T * qkv_vec,
             gemm=gm(T, (H + 2 * Hkv) * d, h),
             outputs=2 * T * (H + 2 * Hkv) * d,
             hbm_bytes=qkv_w * b.weight + T * h * b.hidden + T * H * d * b.attn + T * 2 * Hkv * d * b.kv,
             weight_bytes=qkv_w * b.weight)
    core = Op("attention_core", "cube", flop_kind="attention", dtype=m.precision.attention,
              flops=2 * T * H * 2 * d * L, vector_ops=VEC_SOFTMAX * T * H * L, chained=True,
              hbm_bytes=R * L * 2 * Hkv * d * b.kv + 2 * T * H * d * b.attn)
    o_w = w["o"] / tp
    o_vec = VEC_QUANT * H * d + VEC_DEQUANT * h + VEC_RESIDUAL * h
    o_proj = Op("o_proj", "cube", flops=2 * T * o_w, dtype=m.precision.matmul, vector_ops=T * o_vec, outputs=2 * T * h,
                gemm=gm(T, h, H * d),
                hbm_bytes=o_w * b.weight + T * H * d * b.attn + T * h * b.hidden, weight_bytes=o_w * b.weight)
    return [qkv, core, o_proj]


def tp_allreduce_op(m, T, tp, tier: str, name: str = "tp_allreduce") -> Op:
    """Sum the partial outputs of a TP group for ``T`` tokens (ring all-reduce: each die
    sends and receives 2 (tp - 1)/tp of the hidden states; nothing when tp = 1)."""
    b = Bytes.of(m)
    tp = np.asarray(tp, dtype=float)
    data = T * m.hidden_size * b.hidden
    return Op(name, "dma", tier=tier, net_bytes=2 * (tp - 1) / tp * data, hbm_bytes=np.where(tp > 1, 3 * data, 0.0),
              vector_ops=np.where(tp > 1, T * m.hidden_size, 0.0), sync_group=tp, launches=np.where(tp > 1, 1.0, 0.0))


def _mla_prefill_ops(m, T, P, tp, tier, cached) -> list[Op]:
    """Non-absorbed MLA as causal MHA: the down-projections on each die's own tokens, the
    compressed q/kv all-gathered in the TP group, up-projections and FlashAttention on 1/tp
    of the heads, an all-to-all back to the tokens, O-proj. A cached prefix's latent is read
    from HBM and up-projected to keys and values like the new tokens' (no query)."""
    b, a, h = Bytes.of(m), m.attention, m.hidden_size
    w = arch.attention_weights(m)
    lat, qk = arch.latent_dim(m), arch.qk_head_dim(m)
    tp = np.asarray(tp, dtype=float)
    r_q = a.q_lora_rank or 0
    down_w = w.get("q_a", 0) + w["kv_a"]
    up_w = w.get("q_b", 0) + w.get("q", 0) + w["kv_b_k"] + w["kv_b_v"]
    compressed = (r_q or h) + lat  # per token, gathered across the TP group (the hidden state when no q LoRA)
    H, rope = a.num_heads, a.qk_rope_head_dim
    down_vec = (VEC_RMSNORM * h + VEC_QUANT * h + VEC_DEQUANT * compressed
                + VEC_RMSNORM * (r_q + a.kv_lora_rank) + VEC_ROPE * rope)
    up_vec = (VEC_QUANT * (r_q + a.kv_lora_rank) + VEC_DEQUANT * H * (qk + a.qk_nope_head_dim + a.v_head_dim)
              + VEC_ROPE * H * rope)
    o_vec = VEC_QUANT * H * a.v_head_dim + VEC_DEQUANT * h + VEC_RESIDUAL * h
    gm = partial(Gemm, in_B=b.act, w_B=b.weight, out_B=b.hidden)
    Hd, rows = H / tp, tp * T  # each die: 1/tp of the heads for the TP group's tokens
    down = Op("mla_down", "cube", flops=2 * T * down_w, dtype=m.precision.matmul, vector_ops=T * down_vec,
              gemm=(gm(T, r_q, h), gm(T, lat, h)) if r_q else gm(T, lat, h),
              outputs=2 * T * (r_q + lat),
              hbm_bytes=down_w * b.weight + T * h * b.hidden + T * compressed * b.hidden,
              weight_bytes=down_w * b.weight)
    gather = Op("attn_allgather", "dma", launches=1, tier=tier,
                net_bytes=(tp - 1) * T * compressed * b.hidden, net_messages=0.0,
                hbm_bytes=tp * T * compressed * b.hidden, sync_group=tp)
    C = cached_rows(T, P, cached)  # prefix tokens: keys and values only
    prefix = _prefix_kv_up(m, C, tp)
    up = Op("mla_up", "cube", flops=2 * T * up_w + prefix["flops"], dtype=m.precision.matmul, vector_ops=T * up_vec,
            gemm=(gm(rows, Hd * qk, r_q or h), gm(rows, Hd * (a.qk_nope_head_dim + a.v_head_dim), a.kv_lora_rank),
                  prefix["gemm"]),
            outputs=2 * T * H * (qk + a.qk_nope_head_dim + a.v_head_dim) + prefix["outputs"],
            hbm_bytes=(up_w * b.weight / tp + T * compressed * b.hidden + T * H * (2 * qk + a.v_head_dim) * b.attn
                       + prefix["hbm_bytes"]),
            weight_bytes=up_w * b.weight / tp)
    keys = attended_tokens(P, cached)
    core = Op("attention_core", "cube", flop_kind="attention", dtype=m.precision.attention,
              flops=2 * T * H * (qk + a.v_head_dim) * keys,
              vector_ops=VEC_SOFTMAX * T * H * keys, chained=True,
              hbm_bytes=T * H * (2 * qk + 2 * a.v_head_dim) * b.attn + T * lat * b.kv + C * H * (qk + a.v_head_dim) * b.attn)
    a2a = Op("attn_alltoall", "dma", launches=1, tier=tier,
             net_bytes=T * (tp - 1) / tp * H * a.v_head_dim * b.hidden, net_messages=0.0,
             hbm_bytes=T * H * a.v_head_dim * b.hidden, sync_group=tp)
    o_proj = Op("o_proj", "cube", flops=2 * T * w["o"], dtype=m.precision.matmul, vector_ops=T * o_vec, outputs=2 * T * h,
                gemm=gm(T, h, H * a.v_head_dim),
                hbm_bytes=w["o"] * b.weight + T * H * a.v_head_dim * b.attn + T * h * b.hidden,
                weight_bytes=w["o"] * b.weight)
    return [down, gather, up, core, a2a, o_proj]


def _prefix_kv_up(m, C, tp) -> dict:
    """The work of up-projecting the MLA latent of ``C`` cached prefix tokens per die to keys
    and values (no queries), on 1/tp of the heads for the TP group's prefixes: the latent
    read from HBM, the keys and values written (docs/model.md §9.5). Terms of an Op; the
    weights (W_UK, W_UV) are counted by the op that holds them."""
    b, a = Bytes.of(m), m.attention
    w = arch.attention_weights(m)
    lat, qk = arch.latent_dim(m), arch.qk_head_dim(m)
    tp = np.asarray(tp, dtype=float)
    kv_dims = a.qk_nope_head_dim + a.v_head_dim
    return {"flops": 2 * C * (w["kv_b_k"] + w["kv_b_v"]),
            "gemm": Gemm(tp * C, a.num_heads / tp * kv_dims, a.kv_lora_rank, in_B=b.act, w_B=b.weight, out_B=b.hidden),
            "outputs": 2 * C * a.num_heads * kv_dims,
            "hbm_bytes": C * lat * b.kv + C * a.num_heads * (qk + a.v_head_dim) * b.attn}


def chunk_attention_ops(m, T, P, k, tp=1.0) -> list[Op]:
    """The attention ``T`` prompt tokens per die add to the decode iteration they share (a
    co-located instance's chunked prefill, docs/model.md §9.4), in chunks of ``k`` tokens of
    ``P``-token prompts; ``tp``: the decode TP group (work per die as for all heads of its
    own tokens).

    A chunk at offset o attends the o tokens before it and, causally, itself. Averaged over
    a prompt's chunks o = (P - k)/2, so it is the prefill attention of a prompt of
    (P + k)/2 tokens whose first (P - k)/2 are cached: (P + 1)/2 keys per token, the
    prefix's KV read back (MLA: its latent up-projected to keys and values again). Only that
    work: the chunk's own projections run in the decode ops over decode + chunk tokens, one
    GEMM each, so the weights are read once. Nothing (no launch either) where ``T`` is 0."""
    T = np.asarray(T, dtype=float)
    P = np.asarray(P, dtype=float)
    k = np.asarray(k, dtype=float)
    k = np.where(k > 0, np.minimum(k, P), P)  # no chunk: any k; P keeps the terms finite
    cached = (P - k) / 2
    ops = attention_prefill_ops(m, T, cached + k, tp, cached=cached)
    core = next(o for o in ops if o.flop_kind == "attention")
    out = [replace(core, name="chunk_attention", launches=np.where(T > 0, core.launches, 0.0))]
    if arch.is_mla(m):
        C = cached_rows(T, cached + k, cached)
        out.insert(0, Op("chunk_prefix_up", "cube", dtype=m.precision.matmul, launches=np.where(C > 0, 1.0, 0.0),
                         **_prefix_kv_up(m, C, tp)))
    return out


def _gqa_prefill_ops(m, T, P, tp, tier, cached) -> list[Op]:
    """GQA prefill, the same SP -> TP -> SP shape: the normed hidden states all-gathered in
    the TP group, q/k/v projections and FlashAttention on 1/tp of the heads, an all-to-all
    back to the tokens, the output projection. A cached prefix's K and V are read from HBM."""
    b, a, h = Bytes.of(m), m.attention, m.hidden_size
    w = arch.attention_weights(m)
    tp = np.asarray(tp, dtype=float)
    shards = kv_shards(m, tp)
    d, H, Hkv = a.head_dim, a.num_heads, a.num_kv_heads
    P = np.asarray(P, dtype=float)
    # per die: 1/tp of the q heads and 1/shards of the kv heads for all tp x T tokens of the group
    qkv_w = w["q"] / tp + (w["k"] + w["v"]) / shards
    qkv_flops = 2 * T * tp * qkv_w
    down = Op("attn_norm", "vector", vector_ops=T * (VEC_RMSNORM * h + VEC_QUANT * h),
              hbm_bytes=T * h * b.hidden + T * h * b.act)
    gather = Op("attn_allgather", "dma", launches=1, tier=tier, net_bytes=(tp - 1) * T * h * b.act,
                hbm_bytes=tp * T * h * b.act, sync_group=tp)
    qkv_vec = VEC_DEQUANT * (H + 2 * Hkv) * d + VEC_ROPE * (H + Hkv) * d + (VEC_RMSNORM * (H + Hkv) * d if a.qk_norm else 0)
    gm = partial(Gemm, in_B=b.act, w_B=b.weight, out_B=b.hidden)
    up = Op("qkv_proj", "cube", flops=qkv_flops, dtype=m.precision.matmul, vector_ops=T * qkv_vec,
            gemm=gm(tp * T, (H / tp + 2 * Hkv / shards) * d, h),
            outputs=2 * T * tp * (H / tp + 2 * Hkv / shards) * d,
            hbm_bytes=qkv_w * b.weight + tp * T * h * b.act + T * (H + 2 * Hkv) * d * b.attn + T * 2 * Hkv * d * b.kv,
            weight_bytes=qkv_w * b.weight)
    keys = attended_tokens(P, cached)
    core = Op("attention_core", "cube", flop_kind="attention", dtype=m.precision.attention,
              flops=2 * T * H * 2 * d * keys, vector_ops=VEC_SOFTMAX * T * H * keys, chained=True,
              hbm_bytes=T * (H + 2 * Hkv) * d * b.attn + T * H * d * b.attn + cached_rows(T, P, cached) * tp / shards * 2 * Hkv * d * b.kv)
    a2a = Op("attn_alltoall", "dma", launches=1, tier=tier, net_bytes=T * (tp - 1) / tp * H * d * b.hidden,
             hbm_bytes=T * H * d * b.hidden, sync_group=tp)
    o_vec = VEC_QUANT * H * d + VEC_DEQUANT * h + VEC_RESIDUAL * h
    o_proj = Op("o_proj", "cube", flops=2 * T * w["o"], dtype=m.precision.matmul, vector_ops=T * o_vec, outputs=2 * T * h,
                gemm=gm(T, h, H * d),
                hbm_bytes=w["o"] * b.weight + T * H * d * b.attn + T * h * b.hidden, weight_bytes=w["o"] * b.weight)
    return [down, gather, up, core, a2a, o_proj]


# --------------------------------------------------------------------------- MoE
@dataclass
class Placement:
    """Expert instances on the busiest die and the rows (tokens) they receive
    (docs/model.md §2.3). All fields are arrays over the grid."""

    instances_per_die: np.ndarray
    rows: np.ndarray  # tokens processed by the busiest die's experts
    padded_rows: np.ndarray  # the same, each instance padded to whole GEMM tiles
    shared_remote: np.ndarray  # tokens travel to a shared-expert copy on another die
    remote_routed_fraction: np.ndarray
    received_rows: np.ndarray = None  # rows the busiest die receives from other dies (None: rows x remote fraction)


def placement(m, T, ep, redundant, shared_copies, imbalance, tile_rows) -> Placement:
    """Routed instances (256 + redundant) and shared-expert copies spread over ``ep`` dies.

    A die holds ``n = (routed + redundant + shared copies) / ep`` instances; when they do
    not split evenly, dies hold ceil or floor of the routed share and fill up with shared
    copies, and the busiest of the two kinds sets the pace. ``imbalance`` (max/mean tokens
    of a die's routed experts) scales the routed rows of the busiest die."""
    mo = m.moe
    ep = np.asarray(ep, dtype=float)
    R = mo.routed_experts + np.asarray(redundant, dtype=float)
    S = np.asarray(shared_copies, dtype=float)
    n = (R + S) / ep
    rows_r = T * ep * mo.experts_per_token / R * imbalance
    rows_s = np.where(S > 0, T * ep * mo.shared_experts / np.maximum(S, 1), 0.0)
    tile = float(tile_rows)

    def pad(x):
        return np.ceil(x / tile) * tile

    every_die = (S >= ep) & (np.mod(S, ep) == 0)
    shared_remote = (S > 0) & ~every_die
    remote = (ep - 1) / ep
    best_rows, best_pad, best_in = None, None, None
    for r in (np.ceil(R / ep), np.floor(R / ep)):
        s = np.maximum(n - r, 0)
        rows = r * rows_r + s * rows_s
        padded = r * pad(rows_r) + s * pad(rows_s)
        # a shared copy on every die serves its own tokens: those rows never cross the network
        received = r * rows_r * remote + np.where(shared_remote, s * rows_s * remote, 0.0)
        best_rows = rows if best_rows is None else np.maximum(best_rows, rows)
        best_pad = padded if best_pad is None else np.maximum(best_pad, padded)
        best_in = received if best_in is None else np.maximum(best_in, received)
    return Placement(instances_per_die=n, rows=best_rows, padded_rows=np.maximum(best_pad, best_rows),
                     shared_remote=shared_remote, remote_routed_fraction=remote, received_rows=best_in)


def moe_ops(m, T, ep, pl: Placement, route: Route = Route(), comm_units=None) -> list[Op]:
    """Gate, dispatch, grouped-GEMM experts (+ SwiGLU + re-quantisation) and combine for
    ``T`` tokens per die (paper §4.2, docs/model.md §2.3, §4.2); ``comm_units``: the SMs
    dispatch and combine run on (None or 0: not SM-limited)."""
    b, mo, h = Bytes.of(m), m.moe, m.hidden_size
    I = mo.expert_intermediate_size
    ep = np.asarray(ep, dtype=float)
    shared_msgs = np.where(pl.shared_remote, mo.shared_experts, 0.0)
    fanout = mo.experts_per_token * pl.remote_routed_fraction + shared_msgs
    rows_remote = pl.received_rows if pl.received_rows is not None else pl.rows * pl.remote_routed_fraction
    d_B, c_B = dispatch_message_B(m, route.message), combine_message_B(m)
    traffic = partial(ep_traffic, route, T, mo.experts_per_token, pl.remote_routed_fraction, shared_msgs, rows_remote, ep)
    d_msgs, d_tiers = traffic(d_B)
    _, c_tiers = traffic(c_B)
    c_msgs = rows_remote if route.style == "direct" else d_msgs
    if route.chunked:  # packed buffers: no per-token engine cost
        d_msgs = c_msgs = 0.0
    sm_work = T * ep * np.asarray(route.sm_pair_s, dtype=float)  # every token visits every rank of the group

    router_w = mo.routed_experts * h  # the gate matrix; its bias is read too
    gate = Op("gate", "cube", flops=2 * T * router_w, dtype=m.precision.hidden, outputs=2 * T * mo.routed_experts,
              gemm=Gemm(T, mo.routed_experts, h, in_B=b.hidden, out_B=4),
              vector_ops=T * (VEC_RMSNORM * h + VEC_ROUTING * mo.routed_experts),
              hbm_bytes=arch.router_params(m) * b.hidden + T * h * b.hidden + T * mo.routed_experts * 4,
              weight_bytes=arch.router_params(m) * b.hidden)
    dispatch = Op("dispatch", "vector", tier=route.tiers[-1], vector_ops=T * VEC_QUANT * h,
                  net_messages=d_msgs, tier_bytes=d_tiers, net_bytes=sum(d_tiers.values()),
                  hbm_bytes=T * h * b.hidden + (T * fanout + rows_remote) * d_B, sync_group=ep,
                  sm_work_s=sm_work, comm_units=comm_units)
    e_w = arch.expert_params(m)
    rows = pl.rows
    experts = Op("experts", "cube", flops=2 * rows * e_w, dtype=experts_dtype(m), outputs=2 * rows * (2 * I + h),
                 vector_ops=rows * (VEC_SWIGLU * I + VEC_QUANT * I + VEC_DEQUANT * (2 * I + h)),
                 tile_efficiency=rows / np.maximum(pl.padded_rows, 1e-30),
                 # the instances' rows stacked along M, each padded to whole tiles (contiguous layout)
                 gemm=(Gemm(pl.padded_rows, 2 * I, h, in_B=b.expert, w_B=b.expert_weight, out_B=b.hidden),
                       Gemm(pl.padded_rows, h, I, in_B=b.expert, w_B=b.expert_weight, out_B=b.hidden)),
                 hbm_bytes=pl.instances_per_die * e_w * b.expert_weight + swiglu_activation_bytes(m, rows, I, b.expert),
                 weight_bytes=pl.instances_per_die * e_w * b.expert_weight)
    combine = Op("combine", "vector", tier=route.tiers[-1], vector_ops=T * h * (VEC_COMBINE * (fanout + 1) + VEC_RESIDUAL),
                 net_messages=c_msgs, tier_bytes=c_tiers,
                 net_bytes=sum(c_tiers.values()),
                 hbm_bytes=(T * fanout + rows_remote) * c_B + T * h * b.hidden, sync_group=ep,
                 sm_work_s=sm_work, comm_units=comm_units)
    return [gate, dispatch, experts, combine]


def dense_ffn_op(m, T, tp=1.0) -> Op:
    """SwiGLU FFN of a dense layer for ``T`` tokens, its intermediate split ``tp`` ways
    (each die 1/tp of the columns for all the TP group's tokens; tp = 1: data-parallel)."""
    b, h, I = Bytes.of(m), m.hidden_size, m.dense_ffn.intermediate_size
    tp = np.asarray(tp, dtype=float)
    w = arch.dense_ffn_params(m) / tp
    Ip = I / tp
    vec = (VEC_RMSNORM * h + VEC_QUANT * h + VEC_DEQUANT * (2 * Ip + h) + VEC_SWIGLU * Ip + VEC_QUANT * Ip
           + VEC_RESIDUAL * h)
    gm = partial(Gemm, in_B=b.act, w_B=b.weight, out_B=b.hidden)
    return Op("dense_ffn", "cube", flops=2 * T * w, dtype=m.precision.matmul, vector_ops=T * vec, outputs=2 * T * (2 * Ip + h),
              gemm=(gm(T, 2 * Ip, h), gm(T, h, Ip)),
              hbm_bytes=w * b.weight + swiglu_activation_bytes(m, T, Ip),
              weight_bytes=w * b.weight)


# --------------------------------------------------------------------------- per iteration
def embedding_op(m, T) -> Op:
    b = Bytes.of(m)
    return Op("embedding", "vector", hbm_bytes=2 * T * m.hidden_size * b.emb)


def head_op(m, T, name: str = "lm_head") -> Op:
    """Final RMSNorm + LM head over ``T`` tokens, logits written in FP32, then sampling."""
    b, h, V = Bytes.of(m), m.hidden_size, m.vocab_size
    return Op(name, "cube", flops=2 * T * V * h, dtype=m.precision.head, outputs=2 * T * V,
              gemm=Gemm(T, V, h, in_B=b.head, out_B=4),
              vector_ops=T * (VEC_RMSNORM * h + VEC_SAMPLING * V),
              hbm_bytes=V * h * b.head + T * h * b.hidden + T * V * 4, weight_bytes=V * h * b.head,
              launches=2)


def mtp_proj_op(m, T) -> Op:
    """MTP module entry: RMSNorm of hidden state and of the next token's embedding,
    concatenation, eh_proj (2h -> h)."""
    b, h = Bytes.of(m), m.hidden_size
    w = arch.mtp_eh_proj_params(m)
    return Op("mtp_eh_proj", "cube", flops=2 * T * w, dtype=m.precision.matmul, outputs=2 * T * h,
              gemm=Gemm(T, h, 2 * h, in_B=b.act, w_B=b.weight, out_B=b.hidden),
              vector_ops=T * (2 * VEC_RMSNORM * h + VEC_QUANT * 2 * h + VEC_DEQUANT * h),
              hbm_bytes=w * b.weight + 3 * T * h * b.hidden, weight_bytes=w * b.weight)


# --------------------------------------------------------------------------- per-token facts
def flops_per_token(m, context, phase: str = "decode") -> dict[str, float]:
    """FLOPs one token costs through the main model (no MTP), from the same operator
    builders the schedules use (docs/model.md §1.3).

    ``decode``: one new token attending to ``context`` cached tokens (absorbed MLA).
    ``prefill``: the average token of a ``context``-long prompt (causal MHA)."""
    mo = m.moe
    if phase == "decode":
        attn = attention_decode_ops(m, 1.0, 1.0, context)
    else:
        attn = [o for o in attention_prefill_ops(m, 1.0, context, 1.0) if o.tier is None]
    n_dense, n_moe = m.first_dense_layers, arch.moe_layers(m)
    moe = 0.0
    if mo is not None:
        one_token = Placement(instances_per_die=np.asarray(1.0), rows=np.asarray(float(mo.experts_per_token + mo.shared_experts)),
                              padded_rows=np.asarray(float(mo.experts_per_token + mo.shared_experts)),
                              shared_remote=np.asarray(False), remote_routed_fraction=np.asarray(1.0))
        gate, _, experts, _ = moe_ops(m, 1.0, 1.0, one_token)
        moe = float(gate.flops) + float(experts.flops)
    attn_core = sum(float(o.flops) for o in attn if o.flop_kind == "attention")
    attn_linear = sum(float(o.flops) for o in attn if o.flop_kind != "attention")
    out = {
        "attention_core": m.num_layers * attn_core,
        "attention_projections": m.num_layers * attn_linear,
        "dense_ffn": n_dense * float(dense_ffn_op(m, 1.0).flops) if n_dense else 0.0,
        "moe": n_moe * moe,
        # prefill runs the head on the last prompt token only: amortised over the prompt
        "lm_head": float(head_op(m, 1.0).flops) / (1.0 if phase == "decode" else float(context)),
    }
    out["total"] = sum(out.values())
    return out
