"""Hugging Face ``config.json`` -> cmperf model spec (``cmperf model import``, ``--model x.json``).

Each supported family names the same architecture numbers differently (``n_routed_experts``
vs ``num_experts`` vs ``num_local_experts``; ``first_k_dense_replace``; MLA ranks; ``head_dim``
given or implied by hidden_size / heads). :func:`import_hf_config` maps one family's names
onto the schema of :class:`cmperf.specs.schema.ModelSpec` and reports every config field it
neither used nor knowingly ignored (:data:`IGNORED`, :data:`FAMILY_IGNORED`), so that nothing
that could change a performance number is dropped silently.

Families (``model_type``):

- dense GQA, every layer attention + SwiGLU FFN: Llama (``llama``), Mistral (``mistral``),
  Qwen2/Qwen2.5 (``qwen2``: q/k/v projections carry biases, not counted: see :func:`_dense`),
  Qwen3 (``qwen3``: RMSNorm on q and k per head);
- GQA, every layer MoE: Mixtral (``mixtral``), Qwen3-MoE (``qwen3_moe``, with q/k norm);
- MLA, dense then MoE layers with shared experts: DeepSeek-V2 (``deepseek_v2``: softmax
  router, greedy or group-limited; ``q_lora_rank`` null in V2-Lite), DeepSeek-V3/R1
  (``deepseek_v3``) and Kimi K2 (``kimi_k2``): sigmoid router with group-limited routing, MTP;
- GQA, dense then MoE layers with a shared expert: GLM-4.5/4.6 (``glm4_moe``: partial RoPE,
  q/k norm, q/k/v biases, sigmoid router, MTP);
- DSA (sparse MLA with a lightning indexer), otherwise DeepSeek-V3: DeepSeek-V3.2
  (``deepseek_v32``: ``index_n_heads``, ``index_head_dim``, ``index_topk``);
- hybrid linear attention: Qwen3-Next (``qwen3_next``: Gated DeltaNet layers with gated full
  attention every ``full_attention_interval``-th layer, every layer MoE with a shared expert);
- alternating sliding-window / full attention with sinks and MXFP4 experts: gpt-oss
  (``gpt_oss``: ``layer_types``, ``sliding_window``, ``quantization_config`` mxfp4).

A family whose attention is full in every layer accepts sliding-window fields when they are
switched off and reports an active window in one line (its import attends to the whole
context); gpt-oss and Qwen3-Next take their layer pattern from ``layer_types`` (or Qwen3-Next's
``full_attention_interval``).
"""

from __future__ import annotations

import json
import math
import os
import sys
from pathlib import Path
from typing import Any, Callable

import yaml

from ..errors import SpecError, short

# Config fields that do not change FLOPs, bytes or communication of serving, in any family.
IGNORED: dict[str, str] = {
    "architectures": "transformers class name; `model_type` selects the mapping",
    "auto_map": "remote-code class paths",
    "transformers_version": "version of the library that wrote the file",
    "bos_token_id": "tokenizer special-token id",
    "eos_token_id": "tokenizer special-token id",
    "pad_token_id": "tokenizer special-token id",
    "initializer_range": "training-time weight initialisation",
    "rms_norm_eps": "numerical epsilon of RMSNorm: same FLOPs and bytes",
    "rope_theta": "RoPE base frequency: same FLOPs and bytes for any value",
    "rope_scaling": "RoPE context extension (YaRN, llama3): rescaled frequencies, same FLOPs and bytes",
    "rope_parameters": ("RoPE base, scaling and rotary fraction (transformers >= 5): which frequencies rotate "
                        "which dims, not the matmuls or bytes; cmperf counts RoPE's elementwise work over the whole q/k head"),
    "hidden_act": "activation inside the gated (SwiGLU) FFN every supported family uses: elementwise work",
    "attention_dropout": "training-only dropout",
    "use_cache": "runtime flag of transformers' generate()",
    "output_router_logits": "training-only router output",
    "router_aux_loss_coef": "training-only load-balancing loss",
    "aux_loss_alpha": "training-only load-balancing loss",
    "seq_aux": "training-only load-balancing loss",
    "pretraining_tp": "training-time tensor-parallel split of the projections: same math",
    "ep_size": "expert-parallel degree of the reference code: a deployment choice (`--ep`)",
    "norm_topk_prob": "renormalises the top-k routing weights: k elementwise operations per token",
    "routed_scaling_factor": "scales the routed experts' output: one multiply per element",
}

# Config fields ignored in one family only, because there they describe nothing that runs or
# change a number by less than cmperf prints.
FAMILY_IGNORED: dict[str, dict[str, str]] = {
    "mla": {
        "num_key_value_heads": "MLA caches one shared latent per token, not per-head keys and values",
    },
    "qwen3_moe": {
        "intermediate_size": "width of dense FFN layers: none here (decoder_sparse_step 1, mlp_only_layers empty)",
    },
    "qwen3_next": {
        "intermediate_size": "width of dense FFN layers: none here (decoder_sparse_step 1, mlp_only_layers empty)",
        "partial_rotary_factor": ("RoPE rotates this fraction of each q/k head (Qwen3-Next: a quarter); cmperf counts "
                                  "RoPE's elementwise work over the whole head (as for GLM-4.5, docs/specs.md)"),
    },
    "gpt_oss": {
        "attention_bias": ("biases on the q/k/v/o projections (gpt-oss-120b: (64 + 8 + 8) x 64 + 2,880 = 8,000 per layer, "
                           "0.29 M of 117 B parameters, and as many adds per token and layer): not counted"),
        "swiglu_limit": "clamps the SwiGLU's gate and up outputs: elementwise work of the same FFN",
        "initial_context_length": "the context YaRN extends (rope_scaling's original_max_position_embeddings): RoPE frequencies",
    },
    "glm4_moe": {
        "attention_bias": ("biases on the q/k/v projections (GLM-4.5: (96 + 2 x 8) x 128 = 14,336 per layer, "
                           "1.3 M of 353 B parameters, and as many adds per token and layer): not counted"),
        "partial_rotary_factor": ("RoPE rotates this fraction of each q/k head (GLM-4.5: half); cmperf counts "
                                  "RoPE's elementwise work over the whole head, which hides under the projections: "
                                  "halving it leaves GLM-4.5's predicted TPOT and TTFT unchanged (docs/specs.md)"),
    },
}

# transformers' default for `tie_word_embeddings` in each family's config class
_TIE_DEFAULT = {"deepseek_v2": False, "deepseek_v3": False, "kimi_k2": False, "qwen3_moe": False, "mixtral": False,
                "llama": False, "mistral": False, "qwen2": False, "qwen3": False, "glm4_moe": False,
                "deepseek_v32": False, "qwen3_next": False, "gpt_oss": False}

_LABELS = {"deepseek_v2": "DeepSeek-V2-architecture", "deepseek_v3": "DeepSeek-V3-architecture",
           "kimi_k2": "Kimi-K2 (DeepSeek-V3 architecture)", "qwen3_moe": "Qwen3", "mixtral": "Mixtral",
           "llama": "Llama", "mistral": "Mistral", "qwen2": "Qwen2", "qwen3": "Qwen3", "glm4_moe": "GLM-4.5-architecture",
           "deepseek_v32": "DeepSeek-V3.2-architecture", "qwen3_next": "Qwen3-Next", "gpt_oss": "gpt-oss"}

_DTYPES = {"bfloat16": "bf16", "float16": "fp16", "half": "fp16"}

DEFAULT_IMBALANCE = {"value": 1.0, "source": "ASSUMPTION: perfect balance until measured (docs/calibration.md)"}

_MISSING = object()


def _short(v: Any) -> str:
    """A config value as written in JSON, cut to 40 characters."""
    try:
        text = json.dumps(v)
    except (TypeError, ValueError):
        text = repr(v)
    return text if len(text) <= 40 else text[:37] + "..."


class _Config:
    """A config.json mapping that records which fields were read and what could not be mapped."""

    def __init__(self, raw: dict, model_type: str):
        self.raw, self.model_type = raw, model_type
        self.used: set[str] = {"model_type"}
        self.ignored: dict[str, str] = {}
        self.problems: list[tuple[str, str]] = []  # (top-level key, message)

    def has(self, key: str) -> bool:
        return key in self.raw

    def get(self, key: str, default: Any = _MISSING) -> Any:
        if key in self.raw:
            self.used.add(key)
            return self.raw[key]
        if default is _MISSING:
            raise SpecError(f"missing required field '{key}' for model_type '{self.model_type}'")
        return default

    def int(self, key: str, default: Any = _MISSING, minimum: int = 1) -> Any:
        v = self.get(key, default)
        if v is None and default is None:
            return None
        if isinstance(v, bool) or not isinstance(v, int):
            raise SpecError(f"field '{key}': expected an integer, got {_short(v)}")
        if v < minimum:
            raise SpecError(f"field '{key}': expected an integer >= {minimum}, got {v}")
        return v

    def bool(self, key: str, default: bool) -> bool:
        v = self.get(key, default)
        if not isinstance(v, bool):
            raise SpecError(f"field '{key}': expected true or false, got {_short(v)}")
        return v

    def expect(self, key: str, expected: Any, why: str) -> None:
        """A field the mapping relies on having one value (or being absent): reported when not.
        A field this family knowingly ignores (:data:`FAMILY_IGNORED`) is not checked."""
        if key not in self.raw or key in self.ignored:
            return
        self.used.add(key)
        if self.raw[key] != expected:
            self.report(key, f"{key} = {_short(self.raw[key])}: {why}")

    def ignore(self, table: str) -> None:
        self.ignored.update(FAMILY_IGNORED[table])

    def ignore_field(self, key: str, why: str) -> None:
        """A field that this config's other fields make inert (read, and knowingly not applied)."""
        if key in self.raw:
            self.used.add(key)
            self.ignored[key] = why

    def report(self, key: str, message: str) -> None:
        self.used.add(key)
        self.problems.append((key, message))

    def unmapped(self) -> list[str]:
        order = {k: i for i, k in enumerate(self.raw)}
        out = list(self.problems)
        for k, v in self.raw.items():
            if k not in self.used and k not in IGNORED and k not in self.ignored:
                name = k if k.isprintable() else json.dumps(k)  # a key with a line break in it, quoted
                out.append((k, f"{name} = {_short(v)}: not a field cmperf maps or knowingly ignores"))
        return [m for _, m in sorted(out, key=lambda p: order.get(p[0], len(order)))]


# --------------------------------------------------------------------------- shared parts
def _common(c: _Config) -> dict:
    return {
        "hidden_size": c.int("hidden_size"),
        "num_layers": c.int("num_hidden_layers"),
        "vocab_size": c.int("vocab_size"),
    }


def _tie(c: _Config) -> bool:
    return c.bool("tie_word_embeddings", _TIE_DEFAULT[c.model_type])


def _gqa(c: _Config, qk_norm: bool = False) -> dict:
    hidden, heads = c.int("hidden_size"), c.int("num_attention_heads")
    if c.has("head_dim") and c.raw["head_dim"] is not None:
        head_dim = c.int("head_dim")
    else:
        c.get("head_dim", None)
        if hidden % heads:
            raise SpecError(f"no 'head_dim', and hidden_size ({hidden}) is not a multiple of num_attention_heads ({heads})")
        head_dim = hidden // heads
    kv_heads = c.int("num_key_value_heads", heads)  # transformers' default: multi-head attention
    c.expect("attention_bias", False, "biases on the q/k/v/o projections are not modelled")
    out = {"type": "gqa", "num_heads": heads, "num_kv_heads": kv_heads, "head_dim": head_dim}
    if qk_norm:
        out["qk_norm"] = True
    return out


def _sliding_window(c: _Config, switched: bool) -> None:
    """Accept sliding-window fields that leave every layer attending to the whole context;
    report an active window in one line (cmperf attends to the whole context in every layer).

    ``switched``: the family turns the window on with ``use_sliding_window`` (Qwen: off by
    default, and then ``sliding_window`` / ``max_window_layers`` are inert); otherwise a
    non-null ``sliding_window`` is the window (Mistral, Mixtral). A ``layer_types`` list
    (newer transformers versions write one) names each layer's attention and decides when given."""
    keys = ("use_sliding_window", "sliding_window", "max_window_layers") if switched else ("sliding_window",)
    present = [k for k in (*keys, "layer_types") if c.has(k)]
    for k in present:
        c.get(k)
    active = c.bool("use_sliding_window", False) if switched else c.raw.get("sliding_window") is not None
    types = c.raw.get("layer_types")
    if types is not None:
        if not isinstance(types, list) or not all(isinstance(t, str) for t in types):
            raise SpecError(f"field 'layer_types': expected a list of attention type names, got {_short(types)}")
        other = [t for t in types if t != "full_attention"]
        if other:
            c.report("layer_types", f"layer_types: {len(other)} of {len(types)} layers {_short(sorted(set(other)))[1:-1]}: "
                     "not modelled (cmperf attends to the whole context in every layer)")
    elif active:
        given = ", ".join(f"{k} {_short(c.raw[k])}" for k in present)
        c.report(present[0], f"{present[0]} = {_short(c.raw[present[0]])}: sliding-window attention ({given}) "
                 "is not modelled (cmperf attends to the whole context in every layer)")


def _precision(c: _Config) -> dict:
    dtype_key = "torch_dtype" if c.has("torch_dtype") or not c.has("dtype") else "dtype"  # transformers >= 4.56: `dtype`
    name = c.get(dtype_key, "bfloat16")
    base = _DTYPES.get(name) if isinstance(name, str) else None
    if base is None:
        c.report(dtype_key, f"{dtype_key} = {_short(name)}: no such cmperf dtype (bf16, fp16); served as bf16")
        base = "bf16"
    matmul, expert_weights = base, None
    q = c.get("quantization_config", None)
    if q is not None:
        if isinstance(q, dict) and q.get("quant_method") == "fp8":
            matmul = "fp8"
            # scale_fmt ue8m0: the block scales are powers of two (DeepSeek-V3.2), the same FP8 GEMMs
            checks = {"fmt": ("e4m3", None), "weight_block_size": ([128, 128], None),
                      "activation_scheme": ("dynamic", "static", None), "quant_method": ("fp8",),
                      "scale_fmt": ("ue8m0", None)}
            for k, v in q.items():
                if k not in checks or v not in checks[k]:
                    c.report("quantization_config", f"quantization_config.{k} = {_short(v)}: "
                             "not mapped (cmperf knows FP8 e4m3 with 128x128 weight blocks)")
        elif isinstance(q, dict) and q.get("quant_method") == "mxfp4" and c.model_type in _MXFP4_KEEP:
            expert_weights = "mxfp4"
            keep = _MXFP4_KEEP[c.model_type]
            for k, v in q.items():
                if k == "modules_to_not_convert" and isinstance(v, list) and set(v) == keep:
                    continue
                if k != "quant_method":
                    c.report("quantization_config", f"quantization_config.{k} = {_short(v)}: not mapped (cmperf knows "
                             f"MXFP4 experts with {', '.join(sorted(keep))} unquantised)")
        else:
            method = q.get("quant_method") if isinstance(q, dict) else None
            c.report("quantization_config", f"quantization_config (quant_method {_short(method)}): "
                     f"not mapped (cmperf knows fp8, and mxfp4 experts for gpt_oss); matmuls taken as {base} from {dtype_key}")
    out = {"matmul": matmul, "attention": "bf16", "hidden": "bf16", "embedding": "bf16", "head": "bf16",
           "kv_cache": "bf16"} if base == "bf16" else {
           "matmul": matmul, "attention": base, "hidden": base, "embedding": base, "head": base, "kv_cache": base}
    if expert_weights is not None:
        out["expert_weights"] = expert_weights
    return out


# MXFP4 checkpoints: what stays unquantised (everything but the experts' weights)
_MXFP4_KEEP = {"gpt_oss": {"model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"}}


def _moe_extras(model: dict) -> dict:
    model["serving"] = {"default_expert_imbalance": dict(DEFAULT_IMBALANCE)}
    return model


# --------------------------------------------------------------------------- families
def _dense(c: _Config, qk_norm: bool = False, switched: bool = False) -> dict:
    """Llama, Mistral, Qwen2, Qwen3: every layer GQA attention + one SwiGLU FFN.

    Qwen2's q/k/v projections always carry biases (no config field says so): (num_heads + 2
    num_kv_heads) x head_dim parameters per layer, 0.82 M of Qwen2.5-72B's 72.7 B, and as many
    adds per token and layer. They are not counted."""
    c.expect("mlp_bias", False, "FFN biases are not modelled")
    _sliding_window(c, switched)
    common = _common(c)
    return {
        **common,
        "first_dense_layers": common["num_layers"],
        "tie_word_embeddings": _tie(c),
        "attention": _gqa(c, qk_norm),
        "dense_ffn": {"intermediate_size": c.int("intermediate_size")},
        "precision": _precision(c),
    }


def _routing_groups(c: _Config, grouped: bool) -> tuple[int, int]:
    """``n_group`` / ``topk_group`` of group-limited routing; (1, 1) when the router picks its
    top-k among all experts (DeepSeek-V2's ``greedy``), which leaves both fields inert."""
    if grouped:
        return c.int("n_group", 1), c.int("topk_group", 1)
    for key in ("n_group", "topk_group"):
        c.ignore_field(key, "topk_method greedy picks the top-k among all experts: no group limit")
    return 1, 1


def _shared_expert_moe(c: _Config, scoring: str, grouped: bool = True) -> dict:
    """The MoE fields DeepSeek-V2/V3, Kimi K2 and GLM-4-MoE name alike: ``first_k_dense_replace``
    dense layers, then a MoE block in every layer with ``n_shared_experts`` always-on experts;
    ``num_nextn_predict_layers`` MTP modules (DeepSeek-V3 §2.2), sharing embedding and head."""
    c.expect("moe_layer_freq", 1, "cmperf puts a MoE block in every layer after the first dense ones")
    groups, top_groups = _routing_groups(c, grouped)
    return _moe_extras({
        **_common(c),
        "first_dense_layers": c.int("first_k_dense_replace", minimum=0),
        "tie_word_embeddings": _tie(c),
        "dense_ffn": {"intermediate_size": c.int("intermediate_size")},
        "moe": {
            "routed_experts": c.int("n_routed_experts"),
            "experts_per_token": c.int("num_experts_per_tok"),
            "shared_experts": c.int("n_shared_experts", 0, minimum=0),
            "expert_intermediate_size": c.int("moe_intermediate_size"),
            "groups": groups,
            "top_groups": top_groups,
            "scoring": scoring,
        },
        "mtp": {"modules": c.int("num_nextn_predict_layers", 0, minimum=0), "shares_embedding_and_head": True},
        "precision": _precision(c),
    })


# The routers each DeepSeek model_type has: topk_method -> group-limited?; the first is
# transformers' default when the field is absent
_DEEPSEEK_ROUTING = {
    "deepseek_v2": {"greedy": False, "group_limited_greedy": True},  # softmax scores; device-limited groups (DeepSeek-V2 report)
    "deepseek_v3": {"noaux_tc": True},  # sigmoid scores + a score-correction bias (DeepSeek-V3 §2.1.2)
    "kimi_k2": {"noaux_tc": True},
    "deepseek_v32": {"noaux_tc": True},
}


def _deepseek(c: _Config) -> dict:
    """MLA attention (``q_lora_rank`` null: q projected straight from the hidden state, as in
    DeepSeek-V2-Lite) + the shared-expert MoE. DeepSeek-V2 routes by softmax scores, greedily or
    group-limited (``n_group`` / ``topk_group`` device groups); V3, V3.2 and Kimi K2 by sigmoid
    scores, group-limited with a score-correction bias (``noaux_tc``). V3.2 (``deepseek_v32``)
    adds the lightning indexer: attention type ``dsa``, its keys and scores in FP8."""
    c.ignore("mla")
    attention = {
        "type": "mla",
        "num_heads": c.int("num_attention_heads"),
        "q_lora_rank": c.int("q_lora_rank", None),
        "kv_lora_rank": c.int("kv_lora_rank"),
        "qk_nope_head_dim": c.int("qk_nope_head_dim"),
        "qk_rope_head_dim": c.int("qk_rope_head_dim"),
        "v_head_dim": c.int("v_head_dim"),
    }
    if attention["q_lora_rank"] is None:
        del attention["q_lora_rank"]
    dsa = c.model_type == "deepseek_v32"
    if dsa:  # the lightning indexer: FP8 keys and scores (DeepSeek-V3.2's inference code; VLLM-DSV32's 132 B cache)
        attention = {"type": "dsa", **{k: v for k, v in attention.items() if k != "type"},
                     "indexer": {"heads": c.int("index_n_heads"), "head_dim": c.int("index_head_dim"),
                                 "topk": c.int("index_topk"), "scale_B": 4}}
    c.expect("attention_bias", False, "biases on the attention projections are not modelled")
    methods = _DEEPSEEK_ROUTING[c.model_type]
    default = next(iter(methods))
    method = c.get("topk_method", default)
    if method not in methods:
        c.report("topk_method", f"topk_method = {_short(method)}: cmperf models {' and '.join(methods)} routing "
                 f"for model_type {c.model_type}; taken as {default}")
        method = default
    # DeepSeek-V2 scores by softmax (transformers' DeepseekV2 router has no other); V3 names its own
    scoring = c.get("scoring_func", "softmax" if c.model_type == "deepseek_v2" else _MISSING)
    if scoring not in ("sigmoid", "softmax"):
        raise SpecError(f"field 'scoring_func': expected \"sigmoid\" or \"softmax\", got {_short(scoring)}")
    model = {**_shared_expert_moe(c, scoring, grouped=methods[method]), "attention": attention}
    if dsa:
        model["precision"]["indexer"] = "fp8"
    return model


def _glm4_moe(c: _Config) -> dict:
    """GLM-4.5/4.6: GQA (more query width than hidden, partial RoPE, q/k norm when
    ``use_qk_norm``, q/k/v biases) + the shared-expert MoE with DeepSeek-V3's router: sigmoid
    scores with a score-correction bias, group-limited by ``n_group`` / ``topk_group``."""
    c.ignore("glm4_moe")
    attention = _gqa(c, qk_norm=c.bool("use_qk_norm", False))  # transformers' default: no q/k norm
    return {**_shared_expert_moe(c, "sigmoid"), "attention": attention}


def _qwen3_moe(c: _Config) -> dict:
    c.ignore("qwen3_moe")
    c.expect("decoder_sparse_step", 1, "cmperf needs every layer to be MoE (a MoE block every `decoder_sparse_step` layers is not modelled)")
    c.expect("mlp_only_layers", [], "cmperf needs every layer to be MoE (dense layers in between are not modelled)")
    _sliding_window(c, switched=True)
    c.expect("mlp_bias", False, "FFN biases are not modelled")
    return _moe_extras({
        **_common(c),
        "first_dense_layers": 0,
        "tie_word_embeddings": _tie(c),
        "attention": _gqa(c, qk_norm=True),  # Qwen3: RMSNorm on q and k per head
        "moe": {
            "routed_experts": c.int("num_experts"),
            "experts_per_token": c.int("num_experts_per_tok"),
            "shared_experts": 0,
            "expert_intermediate_size": c.int("moe_intermediate_size"),
            "groups": 1,
            "top_groups": 1,
            "scoring": "softmax",
        },
        "precision": _precision(c),
    })


def _mixtral(c: _Config) -> dict:
    _sliding_window(c, switched=False)
    return _moe_extras({
        **_common(c),
        "first_dense_layers": 0,
        "tie_word_embeddings": _tie(c),
        "attention": _gqa(c),
        "moe": {
            "routed_experts": c.int("num_local_experts"),
            "experts_per_token": c.int("num_experts_per_tok"),
            "shared_experts": 0,
            "expert_intermediate_size": c.int("intermediate_size"),  # each expert is a full-width FFN
            "groups": 1,
            "top_groups": 1,
            "scoring": "softmax",
        },
        "precision": _precision(c),
    })


_LAYER_TYPES = {"full_attention": "full", "sliding_attention": "window", "linear_attention": "linear"}


def _layer_pattern(c: _Config, kinds: list[str] | None, allowed: tuple[str, ...]) -> list[str]:
    """Each layer's attention kind, from ``layer_types`` when given (it decides), else
    ``kinds`` (the family's rule), as the shortest pattern that repeats over the layers."""
    n = c.int("num_hidden_layers")
    if c.has("layer_types"):
        types = c.get("layer_types")
        if not isinstance(types, list) or len(types) != n or not all(isinstance(t, str) for t in types):
            raise SpecError(f"field 'layer_types': expected a list of {n} attention type names "
                            f"(one per layer), got {_short(types)}")
        bad = sorted({t for t in types if _LAYER_TYPES.get(t) not in allowed})
        if bad:
            raise SpecError(f"field 'layer_types': {_short(bad)[1:-1]} is not a layer type of model_type "
                            f"{c.model_type} (expected {', '.join(t for t, k in _LAYER_TYPES.items() if k in allowed)})")
        kinds = [_LAYER_TYPES[t] for t in types]
    period = next(p for p in range(1, n + 1) if n % p == 0 and all(kinds[i] == kinds[i % p] for i in range(n)))
    return kinds[:period]


def _qwen3_next(c: _Config) -> dict:
    """Qwen3-Next: every ``full_attention_interval``-th layer gated full attention (GQA with q/k
    norm whose query projection also emits a sigmoid output gate), the others Gated DeltaNet
    (``linear_*``: key/value heads and dims, the conv1d kernel; its state in BF16, vLLM's
    default for the model dtype); every layer MoE with one shared expert (its own sigmoid
    gate, one weight vector per layer, not counted) of ``shared_expert_intermediate_size``,
    as that many experts of the routed width. No MTP module is stated in config.json."""
    c.ignore("qwen3_next")
    c.expect("decoder_sparse_step", 1, "cmperf needs every layer to be MoE (a MoE block every `decoder_sparse_step` layers is not modelled)")
    c.expect("mlp_only_layers", [], "cmperf needs every layer to be MoE (dense layers in between are not modelled)")
    c.expect("use_sliding_window", False, "Qwen3-Next's full-attention layers attend the whole context")
    c.expect("mlp_bias", False, "FFN biases are not modelled")
    n, interval = c.int("num_hidden_layers"), c.int("full_attention_interval")
    pattern = _layer_pattern(c, ["full" if (i + 1) % interval == 0 else "linear" for i in range(n)], ("full", "linear"))
    attention = {**_gqa(c, qk_norm=True), "output_gate": True}
    width, shared = c.int("moe_intermediate_size"), c.int("shared_expert_intermediate_size", 0, minimum=0)
    if shared % width:
        c.report("shared_expert_intermediate_size", f"shared_expert_intermediate_size = {shared}: not a whole number of "
                 f"experts of moe_intermediate_size {width} (cmperf counts a shared expert as experts of the routed width); "
                 f"taken as {shared // width}")
    model = _moe_extras({
        **_common(c),
        "first_dense_layers": 0,
        "tie_word_embeddings": _tie(c),
        "attention": attention,
        "layer_pattern": pattern,
        "linear_attention": {"type": "gated_deltanet", "key_heads": c.int("linear_num_key_heads"),
                             "value_heads": c.int("linear_num_value_heads"), "key_head_dim": c.int("linear_key_head_dim"),
                             "value_head_dim": c.int("linear_value_head_dim"), "conv_kernel": c.int("linear_conv_kernel_dim"),
                             "state_dtype": "bf16"},
        "moe": {
            "routed_experts": c.int("num_experts"),
            "experts_per_token": c.int("num_experts_per_tok"),
            "shared_experts": shared // width,
            "expert_intermediate_size": width,
            "groups": 1,
            "top_groups": 1,
            "scoring": "softmax",
        },
        "precision": _precision(c),
    })
    if "full" not in pattern:
        del model["attention"]["output_gate"]
    return model


def _gpt_oss(c: _Config) -> dict:
    """gpt-oss: GQA with one learned sink per head, ``layer_types`` alternating sliding-window
    (``sliding_window`` tokens) and full attention; every layer MoE (``num_local_experts``,
    top ``num_experts_per_tok``, each expert ``intermediate_size`` wide, softmax over the
    chosen; the experts' and router's biases, 128 x (2 x 2,880 + 2,880) + 128 per layer, not
    counted), no shared expert; MXFP4 expert weights (``quantization_config``: ``mxfp4``, 0.5 B per weight plus the
    shared 8-bit scale per 32 values, 1/32 B)."""
    c.ignore("gpt_oss")
    n = c.int("num_hidden_layers")
    pattern = _layer_pattern(c, ["window" if (i + 1) % 2 else "full" for i in range(n)], ("full", "window"))
    attention = {**_gqa(c), "sinks": True}
    window = c.int("sliding_window", None)
    if "window" in pattern:
        if window is None:
            raise SpecError("missing field 'sliding_window' for model_type 'gpt_oss' (its sliding_attention layers' window)")
        attention["sliding_window"] = window
    k = c.int("num_experts_per_tok")
    c.expect("experts_per_token", k, f"gpt-oss names the routed experts per token twice; cmperf takes num_experts_per_tok ({k})")
    return _moe_extras({
        **_common(c),
        "first_dense_layers": 0,
        "tie_word_embeddings": _tie(c),
        "attention": attention,
        "layer_pattern": pattern,
        "moe": {
            "routed_experts": c.int("num_local_experts"),
            "experts_per_token": k,
            "shared_experts": 0,
            "expert_intermediate_size": c.int("intermediate_size"),
            "groups": 1,
            "top_groups": 1,
            "scoring": "softmax",
        },
        "precision": _precision(c),
    })


FAMILIES: dict[str, Callable[[_Config], dict]] = {
    "llama": _dense,
    "mistral": _dense,
    "qwen2": lambda c: _dense(c, switched=True),
    "qwen3": lambda c: _dense(c, qk_norm=True, switched=True),  # Qwen3: RMSNorm on q and k per head
    "mixtral": _mixtral,
    "qwen3_moe": _qwen3_moe,
    "deepseek_v2": _deepseek,
    "deepseek_v3": _deepseek,
    "kimi_k2": _deepseek,
    "glm4_moe": _glm4_moe,
    "deepseek_v32": _deepseek,
    "qwen3_next": _qwen3_next,
    "gpt_oss": _gpt_oss,
}


def _description(m: dict, model_type: str) -> str:
    a, mo = m["attention"], m.get("moe")
    attn = ("MLA attention" if a["type"] == "mla"
            else f"DSA sparse attention (MLA over the top-{a['indexer']['topk']} keys of a lightning indexer)"
            if a["type"] == "dsa"
            else f"GQA attention with {a['num_heads']} query / {a['num_kv_heads']} KV heads"
            + (" and q/k norm" if a.get("qk_norm") else "") + (", output gate" if a.get("output_gate") else "")
            + (", sinks" if a.get("sinks") else ""))
    pattern = m.get("layer_pattern")
    if pattern:
        kinds = [pattern[i % len(pattern)] for i in range(m["num_layers"])]
        named = {"full": "full", "window": f"{a.get('sliding_window')}-token window", "linear": "Gated DeltaNet"}
        attn += " in " + " + ".join(f"{kinds.count(k)} {named[k]}" for k in ("full", "window", "linear") if k in kinds) + " layers"
    if mo is None:
        return f"{_LABELS[model_type]} dense ({attn}, {m['num_layers']} layers)"
    dense, n = m["first_dense_layers"], m["num_layers"]
    layers = f"{dense} dense + {n - dense} MoE layers" if dense else f"{n} MoE layers"
    experts = f"top-{mo['experts_per_token']} of {mo['routed_experts']} experts"
    if mo["shared_experts"]:
        experts += f" + {mo['shared_experts']} shared"
    mtp = m.get("mtp", {}).get("modules", 0)
    return (f"{_LABELS[model_type]} MoE ({attn}, {layers}, {experts}"
            + (f", {mtp} MTP module" + ("s" if mtp > 1 else "") if mtp else "") + ")")


# --------------------------------------------------------------------------- API
def import_hf_config(raw: dict, name: str | None, source: str) -> tuple[dict, list[str]]:
    """Map a parsed Hugging Face ``config.json`` onto a raw model spec.

    Returns the model mapping (the shape of a ``models/*.yaml`` file, for
    ``validate("model", ...)``) and the config fields it could not map, one entry per field:
    ``"<field> = <value>: <why>"``. ``name`` defaults to ``"imported"``; ``source`` becomes
    the spec's ``source``. Raises :class:`SpecError` (without a file name: callers prefix it)
    for an unsupported ``model_type`` or a missing or mistyped required field."""
    if not isinstance(raw, dict):
        raise SpecError(f"expected a JSON object of config fields at the top level, got {type(raw).__name__}")
    supported = ", ".join(sorted(FAMILIES))
    model_type = raw.get("model_type")
    if model_type is None:
        raise SpecError(f"missing field 'model_type' (supported: {supported})")
    if not isinstance(model_type, str) or model_type not in FAMILIES:
        raise SpecError(f"model_type {_short(model_type)} is not supported (supported: {supported})")
    c = _Config(raw, model_type)
    body = FAMILIES[model_type](c)
    if body.get("mtp", {}).get("modules", 1) == 0:
        del body["mtp"]  # the schema's default: no MTP module
    context = c.int("max_position_embeddings", None)
    if context is not None:  # the longest supported context: predictions past it are warned about
        body["max_context_tokens"] = {"value": context, "source": "config.json max_position_embeddings"}
    model = {"kind": "model", "name": name or "imported", "description": _description(body, model_type),
             "source": source, **body}
    return model, c.unmapped()


def default_name(path: Path) -> str:
    """``llama-3.1-70b.json`` -> ``llama-3.1-70b``; ``Meta-Llama-3.1-70B/config.json`` -> ``meta-llama-3.1-70b``."""
    stem = path.stem if path.stem != "config" or not path.resolve().parent.name else path.resolve().parent.name
    return stem.lower()


def source_of(path: Path) -> str:
    """The spec's ``source``: the config file, and the row of a ``SOURCES.md`` next to it that names it."""
    from .loader import read_text

    text = f"Hugging Face config.json: {path}"
    sources = path.parent / "SOURCES.md"
    if not os.path.lexists(sources):
        return text
    try:  # a regular UTF-8 file of at most 1 MB: a FIFO, a device or a binary file is not read
        lines = read_text(sources, "SOURCES.md table").splitlines()
    except SpecError as e:
        sys.stderr.write(f"cmperf: warning: {short(str(e), 300)}; its provenance row is not read\n")
        return text
    for i, line in enumerate(lines, 1):
        cells = [x.strip() for x in line.strip().strip("|").split("|")]
        if line.lstrip().startswith("|") and cells and cells[0] == path.name:
            model = f" ({cells[1]})" if len(cells) > 1 else ""
            return f"{text}{model}; provenance: {sources} line {i}"
    return text


MAX_INT_DIGITS = 30  # far above any count a config holds (vocabularies, lengths: 6-7 digits)


def read_hf_config(path: Path) -> dict:
    """A config.json as a mapping; one-line :class:`SpecError` naming the file otherwise."""
    from .loader import MAX_DEPTH, read_text

    text = read_text(Path(path), "JSON file")

    def no_constant(word):
        raise SpecError(f"{path}: malformed JSON: {word} is not a finite number")

    def finite(text):
        value = float(text)
        if not math.isfinite(value):
            raise SpecError(f"{path}: malformed JSON: {short(text, 40)} is not a finite number")
        return value

    def pairs(items):
        keys = [k for k, _ in items]
        dup = next((k for k in keys if keys.count(k) > 1), None)
        if dup is not None:
            raise SpecError(f"{path}: malformed JSON: key {short(dup, 40)!r} given twice in one object")
        return dict(items)

    depth = max(text.count("["), text.count("{"))
    if depth > MAX_DEPTH and _nesting(text) > MAX_DEPTH:
        raise SpecError(f"{path}: malformed JSON: nested deeper than {MAX_DEPTH} levels")
    def integer(digits):
        if len(digits.lstrip("-")) > MAX_INT_DIGITS:
            raise SpecError(f"{path}: malformed JSON: an integer of {len(digits.lstrip('-')):,} digits "
                            f"(a config's counts have at most {MAX_INT_DIGITS})")
        return int(digits)

    try:
        raw = json.loads(text, parse_constant=no_constant, parse_float=finite, parse_int=integer, object_pairs_hook=pairs)
    except json.JSONDecodeError as e:
        raise SpecError(f"{path}: malformed JSON at line {e.lineno}, column {e.colno}: {e.msg}") from None
    if not isinstance(raw, dict):
        raise SpecError(f"{path}: expected a JSON object of config fields at the top level, got {type(raw).__name__}")
    return raw


def _nesting(text: str) -> int:
    """How deep brackets nest in JSON text (outside strings), counted without recursion."""
    depth = deepest = 0
    in_string = escaped = False
    for c in text:
        if in_string:
            escaped, in_string = (False, True) if escaped else (c == "\\", c != '"')
        elif c == '"':
            in_string = True
        elif c in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif c in "]}":
            depth -= 1
    return deepest


def import_hf_file(path: str | Path, name: str | None = None) -> tuple[dict, list[str]]:
    """Read and import a config.json; errors name the file."""
    path = Path(path)
    raw = read_hf_config(path)
    try:
        return import_hf_config(raw, name or default_name(path), source_of(path))
    except SpecError as e:
        raise SpecError(f"{path}: {e}") from None


# --------------------------------------------------------------------------- YAML
_SECTIONS = [("kind", "name", "description", "source"),
             ("hidden_size", "num_layers", "first_dense_layers", "vocab_size", "tie_word_embeddings", "max_context_tokens"),
             ("attention",), ("layer_pattern", "linear_attention"), ("dense_ffn",), ("moe",), ("mtp",), ("precision",), ("serving",)]


def to_yaml(model: dict, header: list[str] = ()) -> str:
    """A model mapping as a YAML spec file laid out like ``models/deepseek-r1.yaml``."""
    def dump(d: dict, flow=False) -> str:
        return yaml.safe_dump(d, sort_keys=False, default_flow_style=None if flow else False,
                              width=10_000, allow_unicode=True)

    blocks = []
    for keys in _SECTIONS:
        part = {k: model[k] for k in keys if k in model}
        if part:
            blocks.append(dump(part, flow=keys == ("serving",)))
    rest = {k: v for k, v in model.items() if not any(k in s for s in _SECTIONS)}
    if rest:
        blocks.append(dump(rest))
    head = "".join(f"# {' '.join(line.splitlines())}\n" for line in header)  # a comment is one line: no line break of any kind in it
    return head + "\n".join(blocks)
