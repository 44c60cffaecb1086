"""Per-operator work of a model on one die (DeepSeek-R1 the running example): FLOPs, HBM
bytes, network bytes and messages, engine (docs/model.md §1-§4). Each builder takes the model view ``m``, the
hardware view ``hw`` and per-die, per-microbatch token counts (scalars or grid arrays) and
returns :class:`~cmperf.cost.roofline.Op` records; the schedules (cmperf.schedule) decide
which stream runs them and how they overlap.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import partial

import numpy as np

from . import arch
from ..specs.view import remember
from .roofline import Gemm, Op, dtype_bytes, number, ratio


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
    indexer: float = 2.0  # a DSA indexer's queries and cached keys
    state: float = 0.0  # a linear layer's state element

    @classmethod
    def of(cls, m) -> "Bytes":
        return remember(m, "bytes", lambda: cls._of(m))

    @classmethod
    def _of(cls, m) -> "Bytes":
        p = m.precision
        weights = getattr(p, "weights", None) or p.matmul
        expert_weights = getattr(p, "expert_weights", None) or getattr(p, "weights", None) or experts_dtype(m)
        return cls(weight=dtype_bytes(weights), act=dtype_bytes(p.matmul), hidden=dtype_bytes(p.hidden),
                   attn=dtype_bytes(p.attention), kv=dtype_bytes(p.kv_cache), head=dtype_bytes(p.head),
                   emb=dtype_bytes(p.embedding), expert=dtype_bytes(experts_dtype(m)),
                   expert_weight=dtype_bytes(expert_weights),
                   indexer=dtype_bytes(getattr(p, "indexer", None) or p.attention),
                   state=arch.STATE_DTYPE_BYTES[m.linear_attention.state_dtype] if getattr(m, "linear_attention", None) else 0.0)


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
VEC_LAYERNORM = 5  # RMSNorm's four and the mean subtracted
VEC_GATE = 4  # sigmoid (exp, add, divide) and the multiply: an output gate per element
VEC_SILU = 4  # x sigmoid(x): exp, add, divide, multiply
VEC_GATES = 10  # a linear layer's decay -exp(A) softplus(a + dt_bias) and beta = sigmoid(b), per value head
VEC_DELTA = 4  # per state element and token: the decay multiply and three FMAs (k^T S, the rank-1 update, q^T S)
VEC_INDEX_SCORE = 3  # per indexer head and (query, key) pair: ReLU, the head's weight, the sum over heads
VEC_TOPK = 8  # per score: a radix select of FP32 keys in four 8-bit passes, each a read and a histogram add


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
    units = np.maximum(number(units), 1.0)
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
    ep = number(ep)
    D = np.minimum(number(route.inner_dies), ep)
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
    """HBM bytes of the activations of a W8A8 SwiGLU FFN's two GEMMs over ``rows`` tokens:
    quantised input, BF16 gate and up outputs written, quantised input of the down
    projection read, BF16 output (``act``: bytes of a quantised activation). The activation
    between them reads gate and up and writes the down projection's input
    (:func:`activation_op`)."""
    b, h = Bytes.of(m), m.hidden_size
    act = b.act if act is None else act
    gate_up = 2 * intermediate * b.hidden  # two matrices' outputs
    return rows * (h * act + gate_up + intermediate * act + h * b.hidden)


# --------------------------------------------------------------------------- small kernels
# Each a roofline kernel with its own HBM bytes and launch (docs/model.md §2.9; the names:
# cmperf/specs/kernels.py). ``in_B``: the bytes of its input a fused producer would hand over.
def residual_add_op(m, T) -> Op:
    """The residual stream plus a block's output for ``T`` tokens: reads both and writes the
    sum, 3 T h bytes in the hidden dtype; one add per element."""
    b, h = Bytes.of(m), m.hidden_size
    x = number(T) * h * b.hidden
    return Op("residual_add", "vector", vector_ops=VEC_RESIDUAL * T * h, hbm_bytes=3 * x, in_B=x)


def rmsnorm_op(m, T, width=None) -> Op:
    """RMSNorm of ``T`` vectors of ``width`` (default the hidden size): reads them and the
    weight, writes the normed vectors, 2 T width + width bytes; VEC_RMSNORM per element."""
    b = Bytes.of(m)
    w = m.hidden_size if width is None else width
    x = number(T) * w * b.hidden
    return Op("rmsnorm", "vector", vector_ops=VEC_RMSNORM * T * w, hbm_bytes=2 * x + w * b.hidden, in_B=x)


def rope_op(m, T, heads, rot_dims) -> Op:
    """Rotary embedding in place on ``heads`` query and key heads of ``rot_dims`` rotary dims
    for ``T`` tokens (the cos/sin table read per token): reads and writes those dims, 2 T
    heads rot_dims bytes in the attention dtype plus T rot_dims x 4 of the table."""
    b = Bytes.of(m)
    x = number(T) * heads * rot_dims * b.attn
    return Op("rope", "vector", vector_ops=VEC_ROPE * T * heads * rot_dims,
              hbm_bytes=2 * x + number(T) * rot_dims * 4, in_B=x)


def kv_write_op(m, T, width) -> Op:
    """``T`` tokens' new cache entries of ``width`` elements (keys and values; MLA: the latent)
    copied into the paged cache: read in the attention dtype, written in the cache dtype
    (a cast where they differ: one operation per element)."""
    b = Bytes.of(m)
    T = number(T)
    return Op("kv_write", "vector", vector_ops=T * width, hbm_bytes=T * width * (b.attn + b.kv), in_B=T * width * b.attn)


def activation_op(m, rows, intermediate, act=None) -> Op:
    """SwiGLU between an FFN's two GEMMs for ``rows`` tokens of ``intermediate`` columns:
    reads gate and up (2 I in the hidden dtype), writes silu(gate) x up as the down
    projection's input (``act``: its bytes, default the matmul dtype's; quantised there)."""
    b = Bytes.of(m)
    act = b.act if act is None else act
    rows = number(rows)
    gate_up = rows * 2 * intermediate * b.hidden
    return Op("activation", "vector", vector_ops=rows * intermediate * (VEC_SWIGLU + (VEC_QUANT if act < b.hidden else 0)),
              hbm_bytes=gate_up + rows * intermediate * act, in_B=gate_up)


def router_topk_op(m, T) -> Op:
    """The router's scores to each of ``T`` tokens' top-k experts: reads the gate's FP32 logits
    (E per token), writes k expert ids and weights (4 B each); VEC_ROUTING per logit."""
    E, k = m.moe.routed_experts, m.moe.experts_per_token
    T = number(T)
    return Op("router_topk", "vector", vector_ops=VEC_ROUTING * T * E, hbm_bytes=T * (E * 4 + 2 * k * 4), in_B=T * E * 4)


def sampling_op(m, T) -> Op:
    """Logits to one token for each of ``T`` tokens: reads the logits (hidden dtype) over the
    whole vocabulary, writes the token id; VEC_SAMPLING per logit (the FP32 cast among them)."""
    T = number(T)
    V, b = m.vocab_size, Bytes.of(m).hidden
    return Op("sampling", "vector", vector_ops=VEC_SAMPLING * T * V, hbm_bytes=T * (V * b + 4), in_B=T * V * b)


def residual_norm_ops(m, T) -> list[Op]:
    """A block's entry: the residual add of the block before, then RMSNorm (FlashInfer's fused
    add + RMSNorm fuses exactly this pair)."""
    return [residual_add_op(m, T), rmsnorm_op(m, T)]


# --------------------------------------------------------------------------- attention
def kv_shards(m, tp) -> np.ndarray:
    """How many ways tensor parallelism splits a token's KV cache: by KV head, up to the
    number of KV heads (GQA); not at all for MLA's single latent (nor DSA's indexer key)."""
    tp = number(tp)
    return np.minimum(tp, m.attention.num_kv_heads) if not arch.is_mla(m) else np.ones_like(tp)


def state_shards(m, tp) -> np.ndarray:
    """How many ways tensor parallelism splits a linear layer's heads and state: by key head
    (with the value heads it serves), up to the number of key heads; beyond, replicated."""
    tp = number(tp)
    return np.minimum(tp, m.linear_attention.key_heads) if m.linear_attention is not None else np.ones_like(tp)


def attention_decode_ops(m, T, R, L, tp=1.0, kind: str = "full") -> list[Op]:
    """Decode attention of one layer of ``kind`` (docs/model.md §2.1, §2.5-§2.8) for ``T``
    tokens of ``R`` requests with ``L`` cached tokens each, heads split ``tp`` ways: prolog
    (projections, RoPE, cache write), the attention core over the cache, output projection;
    with ``tp`` > 1 the per-die work is 1/tp of the heads for the whole TP group's tokens.
    ``full``: MLA, DSA (the indexer's ops after the output projection) or GQA over all ``L``
    tokens; ``window``: GQA over the last ``sliding_window``; ``linear``: a Gated DeltaNet
    step. The core is always the second op (cmperf/schedule/kernels.py replays it). RoPE
    and the cache write are kernels of their own (:func:`attention_decode_kernels`)."""
    if kind == "linear":
        return _deltanet_decode_ops(m, T, R, tp)
    if arch.is_dsa(m):
        return _dsa_decode_ops(m, T, R, L, tp)
    if arch.is_mla(m):
        return _mla_decode_ops(m, T, R, L, tp)
    return _gqa_decode_ops(m, T, R, L, tp, window=kind == "window")


def position_cache_ops(m, T, tp=1.0, kind: str = "full") -> list[Op]:
    """RoPE and the cache write of ``T`` tokens' new keys on one die of a TP group of ``tp``
    (docs/model.md §2.9): MLA rotates the 64 rope dims of its H / tp query heads and of the
    one shared key and writes the latent (576); GQA rotates the head dim of its H / tp query
    and Hkv / shards key heads and writes their keys and values. A linear layer has neither
    (its state is written by its step)."""
    if kind == "linear":
        return []
    a = m.attention
    tp = number(tp)
    if arch.is_mla(m):
        return [rope_op(m, T, a.num_heads / tp + 1, a.qk_rope_head_dim), kv_write_op(m, T, arch.latent_dim(m))]
    Hkv = a.num_kv_heads / kv_shards(m, tp)
    return [rope_op(m, T, a.num_heads / tp + Hkv, a.head_dim), kv_write_op(m, T, 2 * Hkv * a.head_dim)]


def attention_decode_kernels(m, T, R, L, tp=1.0, kind: str = "full") -> list[Op]:
    """Every kernel of a decode attention block in launch order (docs/model.md §2.9): the
    projection, RoPE, the cache write, then the rest of :func:`attention_decode_ops`."""
    ops = attention_decode_ops(m, T, R, L, tp, kind)
    return ops[:1] + position_cache_ops(m, T, tp, kind) + ops[1:]


def attention_prefill_ops(m, T, P, tp, tier: str = "ub", cached=0.0, kind: str = "full") -> list[Op]:
    """Prefill attention of one layer of ``kind`` for ``T`` computed tokens of prompts of
    length ``P`` whose first ``cached`` tokens' KV come from the context cache, hybrid SP ->
    TP(``tp``) -> SP (paper §4.3.1, docs/model.md §2.2, §2.5-§2.8, §9.5). Returns, in order:
    the SP ops on each die's own tokens, the all-gather, the TP ops (projections and the
    core), the all-to-all, the output projection: the collectives are the ops with a tier."""
    cached = number(cached)
    if kind == "linear":
        return _deltanet_prefill_ops(m, T, P, tp, tier, cached)
    if arch.is_dsa(m):
        return _dsa_prefill_ops(m, T, P, tp, tier, cached)
    if arch.is_mla(m):
        return _mla_prefill_ops(m, T, P, tp, tier, cached)
    return _gqa_prefill_ops(m, T, P, tp, tier, cached, window=kind == "window")


def attended_tokens(P, cached) -> np.ndarray:
    """Mean keys a computed prompt token attends, causally: the ``cached`` prefix and, of
    the ``P - cached`` new tokens, itself and those before it: cached + (P - cached + 1) / 2."""
    P, cached = number(P), number(cached)
    return cached + (P - cached + 1) / 2


def capped_tokens(P, cached, cap) -> np.ndarray:
    """Mean keys a computed prompt token attends when each attends at most ``cap`` (a window,
    a DSA top-k): the token at position i (1-based) attends min(i, cap), averaged over
    i = cached + 1 ... P, with S(n) = sum of min(i, cap) for i <= n = n (n + 1) / 2 up to the
    cap and cap (cap + 1) / 2 + (n - cap) cap beyond: (S(P) - S(cached)) / (P - cached)."""
    P, cached, cap = (number(x) for x in (P, cached, cap))

    def S(n):
        return np.where(n <= cap, n * (n + 1) / 2, cap * (cap + 1) / 2 + (n - cap) * cap)

    return (S(P) - S(cached)) / (P - cached)


def cached_rows(T, P, cached) -> np.ndarray:
    """Cached prefix tokens of the prompts whose ``T`` computed tokens a die holds."""
    P, cached = number(P), number(cached)
    return number(T) * cached / (P - cached)


def _mla_q_weights(m, w) -> int:
    return w["q_b"] if "q_b" in w else w["q"]


def _mla_decode_ops(m, T, R, L, tp, selected=None) -> list[Op]:
    """Absorbed MLA (MLAProlog, FusedAttention over the latent cache, O-proj). The latent is
    one per token, so every die of a TP group reads all of its requests' caches. With
    ``selected`` (DSA, :func:`_dsa_decode_ops`) the core attends that many keys per query
    token, each query token gathering its own selection's latents."""
    b, a, h = Bytes.of(m), m.attention, m.hidden_size
    w = arch.attention_weights(m)
    tp = number(tp)
    lat = arch.latent_dim(m)
    qk_dim = arch.qk_head_dim(m)
    r_q = a.q_lora_rank or 0
    prolog_w = w.get("q_a", 0) + w["kv_a"] + (_mla_q_weights(m, w) + w["kv_b_k"]) / tp
    out_w = (w["kv_b_v"] + w["o"]) / tp
    nope, rope, H = a.qk_nope_head_dim, a.qk_rope_head_dim, a.num_heads / tp
    prolog_vec = (VEC_QUANT * h + VEC_DEQUANT * (r_q + lat)
                  + VEC_RMSNORM * (r_q + a.kv_lora_rank) + VEC_QUANT * r_q
                  + VEC_DEQUANT * H * qk_dim + VEC_QUANT * H * nope
                  + VEC_DEQUANT * H * a.kv_lora_rank)
    gm = partial(Gemm, in_B=b.act, w_B=b.weight, out_B=b.hidden)
    q_in = [gm(T, r_q, h), gm(T, H * qk_dim, r_q)] if r_q else [gm(T, H * qk_dim, h)]
    prolog = Op(
        "mla_prolog", "cube", flops=2 * T * prolog_w, dtype=m.precision.matmul, vector_ops=T * prolog_vec,
        gemm=(*q_in, gm(T, lat, h), gm(T, a.kv_lora_rank, nope, groups=H)),
        outputs=2 * T * (r_q + lat + H * (qk_dim + a.kv_lora_rank)),
        hbm_bytes=prolog_w * b.weight + T * h * b.hidden + T * H * lat * b.attn + T * lat * b.attn,
        weight_bytes=prolog_w * b.weight, in_B=T * h * b.hidden,
    )
    keys = L if selected is None else selected
    cache = R * L * lat * b.kv if selected is None else T * selected * (lat * b.kv + INDEX_B)
    core = Op(
        "attention_core" if selected is None else "sparse_attention_core", "cube", flop_kind="attention",
        dtype=m.precision.attention, flops=2 * T * H * (lat + a.kv_lora_rank) * keys,
        vector_ops=VEC_SOFTMAX * T * H * keys, chained=True,
        hbm_bytes=cache + T * H * (lat + a.kv_lora_rank) * b.attn,
    )
    o_vec = (VEC_QUANT * H * a.kv_lora_rank + VEC_DEQUANT * H * a.v_head_dim + VEC_QUANT * H * a.v_head_dim
             + VEC_DEQUANT * h)
    o_proj = Op(
        "o_proj", "cube", flops=2 * T * out_w, dtype=m.precision.matmul, vector_ops=T * o_vec,
        gemm=(gm(T, a.v_head_dim, a.kv_lora_rank, groups=H), gm(T, h, H * a.v_head_dim)),
        outputs=2 * T * (H * a.v_head_dim + h),
        hbm_bytes=out_w * b.weight + T * H * a.kv_lora_rank * b.attn + T * h * b.hidden,
        weight_bytes=out_w * b.weight,
    )
    return [prolog, core, o_proj]


# --------------------------------------------------------------------------- DSA
INDEX_B = 4  # one selected key's index (int32) the sparse core reads per query token


def indexer_runs(m, L) -> np.ndarray:
    """1 where the indexer scores and selects (more cached keys than its top-k), 0 where the
    top-k would keep every key and kernels skip it (TRT-DSV32's short-sequence fast path)."""
    return np.where(number(L) > m.attention.indexer.topk, 1.0, 0.0)


def _indexer_proj_op(m, T, queries: bool = True, keys: bool = True, name: str = "indexer_proj") -> Op:
    """The lightning indexer's projections for ``T`` tokens (docs/model.md §2.6): with
    ``queries``, its queries from the MLA query latent (idx_q: r_q -> heads x head dim); with
    ``keys``, its key and per-head weights from the hidden state (idx_k, idx_w), the key
    through LayerNorm and written to the indexer cache. RoPE on the rope dims, a Hadamard
    rotation (log2 d butterflies per element) and the cast to the indexer dtype of queries
    and keys. The weights are read whole: the indexer is not split by tensor parallelism
    (TRT-DSV32)."""
    b, ix, h = Bytes.of(m), m.attention.indexer, m.hidden_size
    w = arch.attention_weights(m)
    r_q, d, n, rope = m.attention.q_lora_rank, ix.head_dim, ix.heads, m.attention.qk_rope_head_dim
    q, kw = float(queries), float(keys)
    weights = q * w["idx_q"] + kw * (w["idx_k"] + w["idx_w"])
    rotate = (float(np.log2(d)) + VEC_QUANT) * d
    vec = q * n * (VEC_ROPE * rope + rotate) + kw * (VEC_LAYERNORM * d + VEC_ROPE * rope + rotate)
    gm = partial(Gemm, in_B=b.act, w_B=b.weight, out_B=b.hidden)
    gemms = ((gm(T, n * d, r_q),) if queries else ()) + ((gm(T, d + n, h),) if keys else ())
    return Op(name, "cube", dtype=m.precision.matmul, vector_ops=T * vec, flops=2 * T * weights,
              gemm=gemms, outputs=2 * T * (q * n * d + kw * (d + n)),
              hbm_bytes=(weights * b.weight + T * q * (r_q * b.hidden + n * d * b.indexer)
                         + T * kw * (h * b.hidden + arch.indexer_key_B(m, b.indexer) + n * 4)),
              weight_bytes=weights * b.weight)


def _indexer_select_ops(m, Q, keys, key_rows, runs) -> list[Op]:
    """Scores and top-k of the lightning indexer (docs/model.md §2.6) for ``Q`` query tokens
    over ``keys`` cached keys each, reading ``key_rows`` cached indexer keys (a request's
    keys once however many of its tokens score them); nothing where ``runs`` is 0.

    indexer_scores: 2 x heads x head dim FLOPs per (query, key) pair in the indexer dtype,
    then ReLU, the per-head weight and the sum over heads on the vector cores
    (VEC_INDEX_SCORE per head and pair); the score matrix (FP32) written to HBM.
    topk_select: the scores read back and a radix select of the top-k (VEC_TOPK per score),
    the indices written."""
    b, ix = Bytes.of(m), m.attention.indexer
    Q, keys, runs = (number(x) for x in (Q, keys, runs))
    pairs = Q * keys * runs
    dt = m.precision.indexer or m.precision.attention
    scores = Op("indexer_scores", "cube", flop_kind="attention", dtype=dt, chained=True,
                flops=2 * ix.heads * ix.head_dim * pairs, vector_ops=VEC_INDEX_SCORE * ix.heads * pairs,
                hbm_bytes=runs * (number(key_rows) * arch.indexer_key_B(m, b.indexer)
                                  + Q * ix.heads * (ix.head_dim * b.indexer + 4)) + pairs * 4,
                launches=runs)
    topk = Op("topk_select", "vector", flop_kind="attention", vector_ops=VEC_TOPK * pairs,
              hbm_bytes=pairs * 4 + runs * Q * ix.topk * INDEX_B, launches=runs)
    return [scores, topk]


def _dsa_decode_ops(m, T, R, L, tp) -> list[Op]:
    """DSA decode (docs/model.md §2.6): absorbed MLA whose core attends min(top-k, L) keys per
    query token, then the indexer that chose them: its projections, its scores over all ``L``
    cached keys and the top-k selection (skipped where ``L`` <= top-k). The indexer runs on
    every die of a TP group for the group's ``T`` tokens."""
    selected = np.minimum(number(L), m.attention.indexer.topk)
    prolog, core, o_proj = _mla_decode_ops(m, T, R, L, tp, selected=selected)
    runs = indexer_runs(m, L)
    return [prolog, core, o_proj, _indexer_proj_op(m, T),
            *_indexer_select_ops(m, T, L, number(R) * L, runs)]


def _mla_down_gather(m, T, tp, tier, extra_B=0.0) -> tuple[Op, Op, int]:
    """MLA prefill's SP part: the down-projections on each die's own ``T`` tokens, then the
    compressed q/kv (and ``extra_B`` more bytes per token) all-gathered in the TP group;
    also returns the compressed width per token."""
    b, a, h = Bytes.of(m), m.attention, m.hidden_size
    w = arch.attention_weights(m)
    lat = arch.latent_dim(m)
    tp = number(tp)
    r_q = a.q_lora_rank or 0
    down_w = w.get("q_a", 0) + w["kv_a"]
    compressed = (r_q or h) + lat  # per token, gathered across the TP group (the hidden state when no q LoRA)
    down_vec = (VEC_RMSNORM * h + VEC_QUANT * h + VEC_DEQUANT * compressed
                + VEC_RMSNORM * (r_q + a.kv_lora_rank) + VEC_ROPE * a.qk_rope_head_dim)
    gm = partial(Gemm, in_B=b.act, w_B=b.weight, out_B=b.hidden)
    down = Op("mla_down", "cube", flops=2 * T * down_w, dtype=m.precision.matmul, vector_ops=T * down_vec,
              gemm=(gm(T, r_q, h), gm(T, lat, h)) if r_q else gm(T, lat, h),
              outputs=2 * T * (r_q + lat),
              hbm_bytes=down_w * b.weight + T * h * b.hidden + T * compressed * b.hidden,
              weight_bytes=down_w * b.weight)
    per_token = compressed * b.hidden + extra_B
    gather = Op("attn_allgather", "dma", launches=1, tier=tier, collective="all_gather",
                net_bytes=(tp - 1) * T * per_token, net_messages=0.0,
                hbm_bytes=tp * T * per_token, sync_group=tp)
    return down, gather, compressed


def _mla_out(m, T, tp, tier) -> tuple[Op, Op]:
    """MLA prefill's return to SP: the heads' outputs all-to-all back to their tokens, O-proj."""
    b, a, h = Bytes.of(m), m.attention, m.hidden_size
    w = arch.attention_weights(m)
    tp = number(tp)
    H = a.num_heads
    a2a = Op("attn_alltoall", "dma", launches=1, tier=tier, collective="all_to_all",
             net_bytes=T * (tp - 1) / tp * H * a.v_head_dim * b.hidden, net_messages=0.0,
             hbm_bytes=T * H * a.v_head_dim * b.hidden, sync_group=tp)
    o_vec = VEC_QUANT * H * a.v_head_dim + VEC_DEQUANT * h
    o_proj = Op("o_proj", "cube", flops=2 * T * w["o"], dtype=m.precision.matmul, vector_ops=T * o_vec, outputs=2 * T * h,
                gemm=Gemm(T, h, H * a.v_head_dim, in_B=b.act, w_B=b.weight, out_B=b.hidden),
                hbm_bytes=w["o"] * b.weight + T * H * a.v_head_dim * b.attn + T * h * b.hidden,
                weight_bytes=w["o"] * b.weight)
    return a2a, o_proj


def _dsa_prefill_ops(m, T, P, tp, tier, cached) -> list[Op]:
    """DSA prefill in MLA's MQA (absorbed) mode, as DeepSeek-V3.2 and TRT-DSV32 run it (docs/
    model.md §2.6): the SP down-projections with the indexer's key and weights on each die's
    own tokens, the all-gather of the compressed q/kv and those indexer outputs, then on 1/tp
    of the heads for the TP group's tokens: q_b with W_UK absorbed and W_UV (``mla_up``), the
    indexer's queries, scores over the attended prefix and top-k for all the group's tokens
    (the indexer is not TP-split), the sparse core over the latent of min(i, top-k) keys per
    token; the all-to-all back and O-proj. A cached prefix's latent is read as it is (no
    up-projection: the core attends the latent)."""
    b, a, ix = Bytes.of(m), m.attention, m.attention.indexer
    w = arch.attention_weights(m)
    lat, qk = arch.latent_dim(m), arch.qk_head_dim(m)
    tp = number(tp)
    P = number(P)
    r_q, H = a.q_lora_rank, a.num_heads
    idx_key = _indexer_proj_op(m, T, queries=False, name="indexer_k_proj")
    down, gather, _ = _mla_down_gather(m, T, tp, tier, extra_B=arch.indexer_key_B(m, b.indexer) + ix.heads * 4)
    rows = tp * T  # each die: 1/tp of the heads for the TP group's tokens
    up_w = w["q_b"] + w["kv_b_k"] + w["kv_b_v"]
    gm = partial(Gemm, in_B=b.act, w_B=b.weight, out_B=b.hidden)
    Hd = H / tp
    up_vec = VEC_QUANT * r_q + VEC_DEQUANT * H * (qk + a.kv_lora_rank + a.v_head_dim) + VEC_ROPE * H * a.qk_rope_head_dim
    up = Op("mla_up", "cube", flops=2 * T * up_w, dtype=m.precision.matmul, vector_ops=T * up_vec,
            gemm=(gm(rows, Hd * qk, r_q), gm(rows, a.kv_lora_rank, a.qk_nope_head_dim, groups=Hd),
                  gm(rows, a.v_head_dim, a.kv_lora_rank, groups=Hd)),
            outputs=2 * T * H * (qk + a.kv_lora_rank + a.v_head_dim),
            hbm_bytes=(up_w * b.weight / tp + T * r_q * b.hidden + T * H * (lat + 2 * a.kv_lora_rank + a.v_head_dim) * b.attn
                       + T * lat * b.kv),
            weight_bytes=up_w * b.weight / tp)
    keys = attended_tokens(P, cached)
    selected = capped_tokens(P, cached, ix.topk)
    runs = np.where(P > ix.topk, 1.0, 0.0) * np.ones_like(keys)
    prompt_rows = rows + cached_rows(rows, P, cached)  # every token of the group's prompts, once
    idx_q = _indexer_proj_op(m, rows, keys=False)
    scores, topk = _indexer_select_ops(m, rows, keys, prompt_rows, runs)
    core = Op("sparse_attention_core", "cube", flop_kind="attention", dtype=m.precision.attention,
              flops=2 * T * H * (lat + a.kv_lora_rank) * selected, vector_ops=VEC_SOFTMAX * T * H * selected, chained=True,
              hbm_bytes=rows * selected * (lat * b.kv + INDEX_B) + T * H * (lat + a.kv_lora_rank) * b.attn)
    a2a, o_proj = _mla_out(m, T, tp, tier)
    return [down, idx_key, gather, up, idx_q, scores, topk, core, a2a, o_proj]


# --------------------------------------------------------------------------- GQA
def _gqa_decode_ops(m, T, R, L, tp, window: bool = False) -> list[Op]:
    """GQA: q/k/v projections with RoPE and the cache write, the attention core over the
    K and V caches (a ``window`` layer: over the last sliding_window tokens), the output
    projection. Sinks add one score per head to each softmax; an output gate doubles the
    query projection's outputs and multiplies the attention output by its sigmoid."""
    b, a, h = Bytes.of(m), m.attention, m.hidden_size
    w = arch.attention_weights(m)
    tp = number(tp)
    shards = kv_shards(m, tp)
    d, H, Hkv = a.head_dim, a.num_heads / tp, a.num_kv_heads / shards
    Hq = arch.q_width(m) / d / tp  # query heads' outputs, in head widths (2 H with an output gate)
    qkv_w = w["q"] / tp + (w["k"] + w["v"]) / shards
    qkv_vec = VEC_QUANT * h + VEC_DEQUANT * (Hq + 2 * Hkv) * d + (VEC_RMSNORM * (H + Hkv) * d if a.qk_norm else 0)
    gm = partial(Gemm, in_B=b.act, w_B=b.weight, out_B=b.hidden)
    qkv = Op("qkv_proj", "cube", flops=2 * T * qkv_w, dtype=m.precision.matmul, vector_ops=T * qkv_vec,
             gemm=gm(T, (Hq + 2 * Hkv) * d, h),
             outputs=2 * T * (Hq + 2 * Hkv) * d,
             hbm_bytes=qkv_w * b.weight + T * h * b.hidden + T * (Hq + 2 * Hkv) * d * b.attn,
             weight_bytes=qkv_w * b.weight, in_B=T * h * b.hidden)
    keys = np.minimum(L, a.sliding_window) if window else L
    sinks = 1.0 if getattr(a, "sinks", False) else 0.0  # one more logit per head: negligible
    core = Op("window_attention_core" if window else "attention_core", "cube", flop_kind="attention",
              dtype=m.precision.attention, flops=2 * T * H * 2 * d * keys,
              vector_ops=VEC_SOFTMAX * T * H * (keys + sinks), chained=True,
              hbm_bytes=R * keys * 2 * Hkv * d * b.kv + 2 * T * H * d * b.attn)
    o_w = w["o"] / tp
    gate = Hq - H  # the gate's head widths (0 without one)
    o_vec = VEC_GATE * gate * d + VEC_QUANT * H * d + VEC_DEQUANT * h
    o_proj = Op("o_proj", "cube", flops=2 * T * o_w, dtype=m.precision.matmul, vector_ops=T * o_vec, outputs=2 * T * h,
                gemm=gm(T, h, H * d),
                hbm_bytes=o_w * b.weight + T * (H + gate) * d * b.attn + T * h * b.hidden, weight_bytes=o_w * b.weight)
    return [qkv, core, o_proj]


def tp_allreduce_op(m, T, tp, tier: str, name: str = "tp_allreduce") -> Op:
    """Sum the partial outputs of a TP group for ``T`` tokens (ring all-reduce: each die
    sends and receives 2 (tp - 1)/tp of the hidden states; nothing when tp = 1)."""
    b = Bytes.of(m)
    tp = number(tp)
    data = T * m.hidden_size * b.hidden
    return Op(name, "dma", tier=tier, collective="all_reduce", net_bytes=2 * (tp - 1) / tp * data,
              hbm_bytes=np.where(tp > 1, 3 * data, 0.0),
              vector_ops=np.where(tp > 1, T * m.hidden_size, 0.0), sync_group=tp, launches=np.where(tp > 1, 1.0, 0.0))


def _mla_prefill_ops(m, T, P, tp, tier, cached) -> list[Op]:
    """Non-absorbed MLA as causal MHA: the down-projections on each die's own tokens, the
    compressed q/kv all-gathered in the TP group, up-projections and FlashAttention on 1/tp
    of the heads, an all-to-all back to the tokens, O-proj. A cached prefix's latent is read
    from HBM and up-projected to keys and values like the new tokens' (no query)."""
    b, a = Bytes.of(m), m.attention
    w = arch.attention_weights(m)
    lat, qk = arch.latent_dim(m), arch.qk_head_dim(m)
    tp = number(tp)
    r_q = a.q_lora_rank or 0
    up_w = w.get("q_b", 0) + w.get("q", 0) + w["kv_b_k"] + w["kv_b_v"]
    down, gather, compressed = _mla_down_gather(m, T, tp, tier)
    H, rope, h = a.num_heads, a.qk_rope_head_dim, m.hidden_size
    up_vec = (VEC_QUANT * (r_q + a.kv_lora_rank) + VEC_DEQUANT * H * (qk + a.qk_nope_head_dim + a.v_head_dim)
              + VEC_ROPE * H * rope)
    gm = partial(Gemm, in_B=b.act, w_B=b.weight, out_B=b.hidden)
    Hd, rows = H / tp, tp * T  # each die: 1/tp of the heads for the TP group's tokens
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
    a2a, o_proj = _mla_out(m, T, tp, tier)
    return [down, gather, up, core, a2a, o_proj]


def _prefix_kv_up(m, C, tp) -> dict:
    """The work of up-projecting the MLA latent of ``C`` cached prefix tokens per die to keys
    and values (no queries), on 1/tp of the heads for the TP group's prefixes: the latent
    read from HBM, the keys and values written (docs/model.md §9.5). Terms of an Op; the
    weights (W_UK, W_UV) are counted by the op that holds them."""
    b, a = Bytes.of(m), m.attention
    w = arch.attention_weights(m)
    lat, qk = arch.latent_dim(m), arch.qk_head_dim(m)
    tp = number(tp)
    kv_dims = a.qk_nope_head_dim + a.v_head_dim
    return {"flops": 2 * C * (w["kv_b_k"] + w["kv_b_v"]),
            "gemm": Gemm(tp * C, a.num_heads / tp * kv_dims, a.kv_lora_rank, in_B=b.act, w_B=b.weight, out_B=b.hidden),
            "outputs": 2 * C * a.num_heads * kv_dims,
            "hbm_bytes": C * lat * b.kv + C * a.num_heads * (qk + a.v_head_dim) * b.attn}


def chunk_attention_ops(m, T, P, k, tp=1.0, kind: str = "full") -> list[Op]:
    """The attention ``T`` prompt tokens per die add to the decode iteration they share (a
    co-located instance's chunked prefill, docs/model.md §9.4), in chunks of ``k`` tokens of
    ``P``-token prompts, on a layer of ``kind``; ``tp``: the decode TP group (work per die as
    for all heads of its own tokens).

    A chunk at offset o attends the o tokens before it and, causally, itself. Averaged over
    a prompt's chunks o = (P - k)/2, so it is the prefill attention of a prompt of
    (P + k)/2 tokens whose first (P - k)/2 are cached: (P + 1)/2 keys per token, the
    prefix's KV read back (MLA: its latent up-projected to keys and values again; a window
    layer: the prefix's last window; a linear layer: its state). Only that work (the ops
    whose cost depends on the context: the core, DSA's indexer scores and top-k, the linear
    scan): the chunk's own projections run in the decode ops over decode + chunk tokens, one
    GEMM each, so the weights are read once. Nothing (no launch either) where ``T`` is 0."""
    T = number(T)
    P = number(P)
    k = number(k)
    k = np.where(k > 0, np.minimum(k, P), P)  # no chunk: any k; P keeps the terms finite
    cached = (P - k) / 2
    ops = attention_prefill_ops(m, T, cached + k, tp, cached=cached, kind=kind)
    out = [replace(o, name="chunk_attention" if o.name == "attention_core" else f"chunk_{o.name}",
                   launches=np.where(T > 0, o.launches, 0.0)) for o in ops if o.flop_kind == "attention"]
    if arch.is_mla(m) and not arch.is_dsa(m) and kind == "full":
        C = cached_rows(T, cached + k, cached)
        out.insert(0, Op("chunk_prefix_up", "cube", dtype=m.precision.matmul, launches=np.where(C > 0, 1.0, 0.0),
                         **_prefix_kv_up(m, C, tp)))
    return out


def _hidden_gather(m, T, tp, tier) -> tuple[Op, Op]:
    """GQA's and a linear layer's prefill SP part: RMSNorm and quantisation of each die's own
    ``T`` tokens, then the normed hidden states all-gathered in the TP group."""
    b, h = Bytes.of(m), m.hidden_size
    tp = number(tp)
    down = Op("attn_norm", "vector", vector_ops=T * (VEC_RMSNORM * h + VEC_QUANT * h),
              hbm_bytes=T * h * b.hidden + T * h * b.act)
    gather = Op("attn_allgather", "dma", launches=1, tier=tier, collective="all_gather", net_bytes=(tp - 1) * T * h * b.act,
                hbm_bytes=tp * T * h * b.act, sync_group=tp)
    return down, gather


def _gqa_prefill_ops(m, T, P, tp, tier, cached, window: bool = False) -> list[Op]:
    """GQA prefill, the same SP -> TP -> SP shape: the normed hidden states all-gathered in
    the TP group, q/k/v projections and FlashAttention on 1/tp of the heads, an all-to-all
    back to the tokens, the output projection. A cached prefix's K and V are read from HBM
    (a ``window`` layer: at most its last window, and each token attends min(i, window))."""
    b, a, h = Bytes.of(m), m.attention, m.hidden_size
    w = arch.attention_weights(m)
    tp = number(tp)
    shards = kv_shards(m, tp)
    d, H, Hkv = a.head_dim, a.num_heads, a.num_kv_heads
    Hq = arch.q_width(m) / d
    P = number(P)
    # per die: 1/tp of the q heads and 1/shards of the kv heads for all tp x T tokens of the group
    qkv_w = w["q"] / tp + (w["k"] + w["v"]) / shards
    qkv_flops = 2 * T * tp * qkv_w
    down, gather = _hidden_gather(m, T, tp, tier)
    qkv_vec = VEC_DEQUANT * (Hq + 2 * Hkv) * d + VEC_ROPE * (H + Hkv) * d + (VEC_RMSNORM * (H + Hkv) * d if a.qk_norm else 0)
    gm = partial(Gemm, in_B=b.act, w_B=b.weight, out_B=b.hidden)
    up = Op("qkv_proj", "cube", flops=qkv_flops, dtype=m.precision.matmul, vector_ops=T * qkv_vec,
            gemm=gm(tp * T, (Hq / tp + 2 * Hkv / shards) * d, h),
            outputs=2 * T * tp * (Hq / tp + 2 * Hkv / shards) * d,
            hbm_bytes=qkv_w * b.weight + tp * T * h * b.act + T * (Hq + 2 * Hkv) * d * b.attn + T * 2 * Hkv * d * b.kv,
            weight_bytes=qkv_w * b.weight)
    prefix = cached_rows(T, P, cached)
    if window:
        keys = capped_tokens(P, cached, a.sliding_window)
        prefix = prefix * np.minimum(cached, a.sliding_window) / np.where(cached > 0, cached, 1.0)
    else:
        keys = attended_tokens(P, cached)
    sinks = 1.0 if getattr(a, "sinks", False) else 0.0
    core = Op("window_attention_core" if window else "attention_core", "cube", flop_kind="attention",
              dtype=m.precision.attention, flops=2 * T * H * 2 * d * keys, vector_ops=VEC_SOFTMAX * T * H * (keys + sinks),
              chained=True,
              hbm_bytes=T * (H + 2 * Hkv) * d * b.attn + T * H * d * b.attn + prefix * tp / shards * 2 * Hkv * d * b.kv)
    a2a = Op("attn_alltoall", "dma", launches=1, tier=tier, collective="all_to_all", net_bytes=T * (tp - 1) / tp * H * d * b.hidden,
             hbm_bytes=T * H * d * b.hidden, sync_group=tp)
    gate = Hq - H
    o_vec = VEC_GATE * gate * d + VEC_QUANT * H * d + VEC_DEQUANT * h
    o_proj = Op("o_proj", "cube", flops=2 * T * w["o"], dtype=m.precision.matmul, vector_ops=T * o_vec, outputs=2 * T * h,
                gemm=gm(T, h, H * d),
                hbm_bytes=w["o"] * b.weight + T * (H + gate) * d * b.attn + T * h * b.hidden, weight_bytes=w["o"] * b.weight)
    return [down, gather, up, core, a2a, o_proj]


# --------------------------------------------------------------------------- linear attention
DELTANET_CHUNK = 64  # tokens per chunk of the chunkwise (WY) form: FLA's chunk_gated_delta_rule (BT = 64)


def deltanet_step_flops(m) -> float:
    """FLOPs of one token's gated delta-rule step per linear layer, all heads (docs/model.md
    §2.7): per value head and state element, the decay (1), k^T S (2), the rank-1 update
    (2) and the read-out q^T S (2): 7 d_k d_v; the conv1d's taps: 2 x kernel per channel."""
    la = m.linear_attention
    return 7 * la.value_heads * la.key_head_dim * la.value_head_dim + 2 * la.conv_kernel * arch.linear_dims(m)["conv"]


def deltanet_chunk_flops(m, chunk: int = DELTANET_CHUNK) -> float:
    """FLOPs per token of the chunkwise gated delta rule per linear layer, all heads (docs/
    model.md §2.7), in multiply-adds x 2, per value head: within a chunk of C tokens the
    decayed K K^T (C d_k), its triangular inverse (C^2 / 6 per token), the WY factors W and U
    (C d_k + C d_v), the intra-chunk scores and outputs (C d_k + C d_v); across chunks
    U - W S, Q S and the state update K^T V' (3 d_k d_v); plus the conv1d (2 x kernel per
    channel)."""
    la = m.linear_attention
    dk, dv, C = la.key_head_dim, la.value_head_dim, float(chunk)
    per_head = 3 * dk * dv + 3 * C * dk + 2 * C * dv + C * C / 6
    return 2 * la.value_heads * per_head + 2 * la.conv_kernel * arch.linear_dims(m)["conv"]


def _deltanet_vector_ops(m) -> float:
    """Element operations per token of a linear layer's core besides the state update: the
    conv1d (kernel taps + SiLU per channel), the L2 norms of q and k, the gates (decay and
    beta per value head), the gated RMSNorm of the output (RMSNorm + SiLU gate by z)."""
    la, d = m.linear_attention, arch.linear_dims(m)
    return ((la.conv_kernel + VEC_SILU) * d["conv"] + VEC_RMSNORM * 2 * d["key"] + VEC_GATES * la.value_heads
            + (VEC_RMSNORM + VEC_SWIGLU) * d["value"])


def _deltanet_proj_ops(m, rows, s, out_rows, out_s) -> tuple[Op, Op]:
    """A linear layer's input projections (qkvz and ba: ``rows`` tokens on 1/``s`` of the
    heads) and output projection (``out_rows`` tokens on 1/``out_s`` of the heads)."""
    b, h, la, d = Bytes.of(m), m.hidden_size, m.linear_attention, arch.linear_dims(m)
    w = arch.attention_weights(m, "linear")
    s, out_s = number(s), number(out_s)
    in_w = (w["qkvz"] + w["ba"]) / s
    width = (d["conv"] + d["value"] + 2 * la.value_heads) / s  # q, k, v, z, beta, decay
    gm = partial(Gemm, in_B=b.act, w_B=b.weight, out_B=b.hidden)
    proj = Op("linear_proj", "cube", flops=2 * rows * in_w, dtype=m.precision.matmul,
              vector_ops=rows * VEC_DEQUANT * width, gemm=gm(rows, width, h), outputs=2 * rows * width,
              hbm_bytes=in_w * b.weight + rows * h * b.act + rows * width * b.attn, weight_bytes=in_w * b.weight)
    out_w, value = w["out"] / out_s, d["value"] / out_s
    out = Op("linear_out", "cube", flops=2 * out_rows * out_w, dtype=m.precision.matmul,
             vector_ops=out_rows * (VEC_QUANT * value + VEC_DEQUANT * h),
             gemm=gm(out_rows, h, value), outputs=2 * out_rows * h,
             hbm_bytes=out_w * b.weight + out_rows * value * b.attn + out_rows * h * b.hidden, weight_bytes=out_w * b.weight)
    return proj, out


def _deltanet_decode_ops(m, T, R, tp) -> list[Op]:
    """A Gated DeltaNet layer's decode step (docs/model.md §2.7) for ``T`` tokens of ``R``
    requests, its heads split over the TP group (1/s of them, s = min(tp, key heads)): the
    input projections, the step (conv1d over the conv state, gates, the delta-rule update of
    each request's state and its read-out, the gated norm; vector work, the state read once
    per request and written once per token: a draft's state is kept until it is verified),
    the output projection. Nothing grows with the context."""
    b, h = Bytes.of(m), m.hidden_size
    s = state_shards(m, tp)
    proj, out = _deltanet_proj_ops(m, T, s, T, s)
    proj = replace(proj, vector_ops=proj.vector_ops + T * VEC_QUANT * h,
                   hbm_bytes=proj.hbm_bytes + T * h * (b.hidden - b.act))
    la, d = m.linear_attention, arch.linear_dims(m)
    state = arch.linear_state_B(m) / s  # recurrent + conv state of one request on this die
    step = Op("linear_attention", "vector", flop_kind="attention", dtype=m.precision.attention,
              flops=T * deltanet_step_flops(m) / s,
              vector_ops=T * (VEC_DELTA * la.value_heads * la.key_head_dim * la.value_head_dim + _deltanet_vector_ops(m)) / s,
              hbm_bytes=(R + T) * state + T * (d["conv"] + 2 * d["value"] + 2 * la.value_heads) / s * b.attn)
    return [proj, step, out]


def _deltanet_prefill_ops(m, T, P, tp, tier, cached) -> list[Op]:
    """A Gated DeltaNet layer's prefill (docs/model.md §2.7), the SP -> TP -> SP shape of GQA
    prefill: the normed hidden states all-gathered in the TP group, the input projections and
    the chunkwise scan on 1/s of the heads (s = min(tp, key heads)) for the group's tokens,
    the all-to-all back, the output projection. The scan writes each chunk's state and reads
    it back (FLA's chunk_gated_delta_rule), reads a cached prefix's state, writes the final
    one: its cost per token does not depend on the prompt's length."""
    b, h = Bytes.of(m), m.hidden_size
    tp = number(tp)
    s = state_shards(m, tp)
    la, d = m.linear_attention, arch.linear_dims(m)
    rows = tp * T  # the group's tokens; this die's 1/s of the heads
    down, gather = _hidden_gather(m, T, tp, tier)
    proj, out = _deltanet_proj_ops(m, rows, s, T, 1.0)
    prompts = rows / (number(P) - cached)
    recurrent = la.value_heads * la.key_head_dim * la.value_head_dim * b.state / s
    state = arch.linear_state_B(m) / s
    scan = Op("linear_scan", "cube", flop_kind="attention", dtype=m.precision.attention,
              flops=rows * deltanet_chunk_flops(m) / s,
              vector_ops=rows * (_deltanet_vector_ops(m) + 2 * DELTANET_CHUNK * la.value_heads) / s,
              hbm_bytes=(rows * (3 * d["conv"] + 2 * d["value"] + 2 * la.value_heads) / s * b.attn
                         + 2 * rows / DELTANET_CHUNK * recurrent
                         + prompts * (np.where(cached > 0, 1.0, 0.0) + 1) * state))
    a2a = Op("attn_alltoall", "dma", launches=1, tier=tier, collective="all_to_all", net_bytes=T * (tp - 1) / tp * d["value"] * b.hidden,
             hbm_bytes=T * d["value"] * b.hidden, sync_group=tp)
    return [down, gather, proj, scan, a2a, out]


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
    ep = number(ep)
    R = mo.routed_experts + number(redundant)
    S = number(shared_copies)
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
    ep = number(ep)
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
    sm_work = T * ep * number(route.sm_pair_s)  # every token visits every rank of the group

    router_w = mo.routed_experts * h  # the gate matrix; its bias is read too
    gate = Op("gate", "cube", flops=2 * T * router_w, dtype=m.precision.hidden, outputs=2 * T * mo.routed_experts,
              gemm=Gemm(T, mo.routed_experts, h, in_B=b.hidden, out_B=4),
              vector_ops=0.0 * T, in_B=T * h * b.hidden,
              hbm_bytes=arch.router_params(m) * b.hidden + T * h * b.hidden + T * mo.routed_experts * 4,
              weight_bytes=arch.router_params(m) * b.hidden)
    dispatch = Op("dispatch", "vector", tier=route.tiers[-1], collective="expert_all_to_all", vector_ops=T * VEC_QUANT * h,
                  net_messages=d_msgs, tier_bytes=d_tiers, net_bytes=sum(d_tiers.values()),
                  hbm_bytes=T * h * b.hidden + (T * fanout + rows_remote) * d_B, sync_group=ep,
                  sm_work_s=sm_work, comm_units=comm_units)
    e_w = arch.expert_params(m)
    rows = pl.rows
    experts = Op("experts", "cube", flops=2 * rows * e_w, dtype=experts_dtype(m), outputs=2 * rows * (2 * I + h),
                 vector_ops=rows * VEC_DEQUANT * (2 * I + h),
                 tile_efficiency=rows / np.maximum(pl.padded_rows, 1e-30),
                 # the instances' rows stacked along M, each padded to whole tiles (contiguous layout)
                 gemm=(Gemm(pl.padded_rows, 2 * I, h, in_B=b.expert, w_B=b.expert_weight, out_B=b.hidden),
                       Gemm(pl.padded_rows, h, I, in_B=b.expert, w_B=b.expert_weight, out_B=b.hidden)),
                 hbm_bytes=pl.instances_per_die * e_w * b.expert_weight + swiglu_activation_bytes(m, rows, I, b.expert),
                 weight_bytes=pl.instances_per_die * e_w * b.expert_weight)
    combine = Op("combine", "vector", tier=route.tiers[-1], collective="expert_all_to_all", vector_ops=T * h * VEC_COMBINE * (fanout + 1),
                 net_messages=c_msgs, tier_bytes=c_tiers,
                 net_bytes=sum(c_tiers.values()),
                 hbm_bytes=(T * fanout + rows_remote) * c_B + T * h * b.hidden, sync_group=ep,
                 sm_work_s=sm_work, comm_units=comm_units)
    return [gate, dispatch, experts, combine]


def dense_ffn_op(m, T, tp=1.0) -> Op:
    """SwiGLU FFN of a dense layer for ``T`` tokens, its intermediate split ``tp`` ways
    (each die 1/tp of the columns for all the TP group's tokens; tp = 1: data-parallel)."""
    b, h, I = Bytes.of(m), m.hidden_size, m.dense_ffn.intermediate_size
    tp = number(tp)
    w = arch.dense_ffn_params(m) / tp
    Ip = I / tp
    vec = VEC_QUANT * h + VEC_DEQUANT * (2 * Ip + h)
    gm = partial(Gemm, in_B=b.act, w_B=b.weight, out_B=b.hidden)
    return Op("dense_ffn", "cube", flops=2 * T * w, dtype=m.precision.matmul, vector_ops=T * vec, outputs=2 * T * (2 * Ip + h),
              gemm=(gm(T, 2 * Ip, h), gm(T, h, Ip)),
              hbm_bytes=w * b.weight + swiglu_activation_bytes(m, T, Ip),
              weight_bytes=w * b.weight, in_B=T * h * b.hidden)


# --------------------------------------------------------------------------- per iteration
def embedding_op(m, T) -> Op:
    """The ``T`` tokens' embedding rows gathered: each read and written once (vocab-parallel
    under TP: each die its own rows, the rest zero, summed by :func:`embedding_ops`' all-reduce)."""
    b = Bytes.of(m)
    return Op("embedding", "vector", hbm_bytes=2 * T * m.hidden_size * b.emb)


def embedding_ops(m, T, tp, tier: str) -> list[Op]:
    """The embedding of a TP group's ``T`` tokens (every die's): vLLM's and SGLang's
    VocabParallelEmbedding, each die looking up its 1/tp of the vocabulary and an all-reduce
    of the rows (none at tp = 1)."""
    split = [tp_allreduce_op(m, T, tp, tier, "embed_allreduce")] if np.any(np.asarray(tp) > 1) else []
    return [embedding_op(m, T)] + split


def vocab_tp(g, phase: str) -> tuple:
    """How a phase splits the vocabulary over a die's TP group (docs/model.md §7): (embedding
    TP, head TP). The one statement of it: the schedules time the embedding and the head with
    it, and memory holds their weights with it. Decode: both vocab-parallel over the TP group
    (VocabParallelEmbedding, ParallelLMHead); prefill: the embedding on each die's own tokens
    (sequence-parallel: the whole table on every die), the head vocab-parallel over the
    attention TP group; AFD's attention dies run decode at TP 1."""
    if phase == "prefill":
        return 1.0, g["attn_tp"]
    return g["tp"], g["tp"]


def vocab_weight_bytes(m, emb_tp, head_tp) -> np.ndarray:
    """Embedding and LM-head weights one die holds under :func:`vocab_tp`'s split: the
    embedding table's 1/``emb_tp`` and the head's 1/``head_tp`` (:func:`head_op`'s weights).
    Tied weights are one table: the die holds the larger of the two shares."""
    emb = arch.embedding_params(m) * Bytes.of(m).emb / number(emb_tp)
    head = number(head_op(m, 0.0, tp=head_tp).weight_bytes)
    return np.maximum(emb, head) if m.tie_word_embeddings else emb + head


def head_op(m, T, name: str = "lm_head", tp=1.0) -> Op:
    """LM head over ``T`` tokens on 1/``tp`` of the vocabulary (vocab-parallel over the
    attention TP group, as vLLM's and SGLang's ParallelLMHead): V h / tp weights read,
    T V / tp logits written in the hidden dtype (cast to FP32 by the sampler)."""
    b, h, V = Bytes.of(m), m.hidden_size, m.vocab_size
    tp = number(tp)
    Vd = V / tp
    return Op(name, "cube", flops=2 * T * Vd * h, dtype=m.precision.head, outputs=2 * T * Vd,
              gemm=Gemm(T, Vd, h, in_B=b.head, out_B=b.hidden),
              hbm_bytes=Vd * h * b.head + T * h * b.hidden + T * Vd * b.hidden, weight_bytes=Vd * h * b.head,
              in_B=T * h * b.hidden)


def logits_gather_op(m, T, tp, tier: str) -> Op:
    """The vocab-parallel head's logits gathered across its TP group (an all-gather: each die
    receives the other dies' (tp - 1) / tp of T x V logits in the hidden dtype and writes all
    of them; nothing at tp = 1)."""
    tp = number(tp)
    data = number(T) * m.vocab_size * Bytes.of(m).hidden
    return Op("logits_gather", "dma", tier=tier, collective="all_gather", net_bytes=(tp - 1) / tp * data,
              hbm_bytes=np.where(tp > 1, data, 0.0), sync_group=tp, launches=np.where(tp > 1, 1.0, 0.0))


def head_ops(m, T, tp, tier: str, name: str = "lm_head") -> list[Op]:
    """The end of a pass for the TP group's ``T`` tokens on each die: the final RMSNorm, the
    vocab-parallel head, the logits gather and the sampling of each token (every die of the
    group samples all of them, as SGLang does; nothing gathered at tp = 1)."""
    gather = [logits_gather_op(m, T, tp, tier)] if np.any(np.asarray(tp) > 1) else []
    return [rmsnorm_op(m, T), head_op(m, T, name, tp)] + gather + [sampling_op(m, T)]


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
    builders the schedules use (docs/model.md §1.3), each layer by its attention kind.

    ``decode``: one new token attending to ``context`` cached tokens (absorbed MLA).
    ``prefill``: the average token of a ``context``-long prompt (causal MHA)."""
    mo = m.moe
    attn_core = attn_linear = 0.0
    for kind, n in arch.layer_counts(m).items():
        if phase == "decode":
            attn = attention_decode_ops(m, 1.0, 1.0, context, kind=kind)
        else:
            attn = [o for o in attention_prefill_ops(m, 1.0, context, 1.0, kind=kind) if o.tier is None]
        attn_core += n * sum(float(o.flops) for o in attn if o.flop_kind == "attention")
        attn_linear += n * sum(float(o.flops) for o in attn if o.flop_kind != "attention")
    n_dense, n_moe = m.first_dense_layers, arch.moe_layers(m)
    moe = 0.0
    if mo is not None:
        one_token = Placement(instances_per_die=np.asarray(1.0), rows=np.asarray(float(mo.experts_per_token + mo.shared_experts)),
                              padded_rows=np.asarray(float(mo.experts_per_token + mo.shared_experts)),
                              shared_remote=np.asarray(False), remote_routed_fraction=np.asarray(1.0))
        gate, _, experts, _ = moe_ops(m, 1.0, 1.0, one_token)
        moe = float(gate.flops) + float(experts.flops)
    out = {
        "attention_core": attn_core,
        "attention_projections": attn_linear,
        "dense_ffn": n_dense * float(dense_ffn_op(m, 1.0).flops) if n_dense else 0.0,
        "moe": n_moe * moe,
        # prefill runs the head on the last prompt token only: amortised over the prompt
        "lm_head": float(head_op(m, 1.0).flops) / (1.0 if phase == "decode" else float(context)),
    }
    out["total"] = sum(out.values())
    return out
