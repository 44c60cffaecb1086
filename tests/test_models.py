"""The models imported from Hugging Face config.json files (cmperf/specs/hf_import.py): each
shipped YAML is exactly what the importer makes of its config, parameter counts match the
published sizes, KV-cache bytes match a hand count, every config field is mapped, knowingly
ignored or reported, and bad or unsupported configs fail in one line. The attention forms the
new families bring (DSA, Gated DeltaNet, windows) are tested in tests/test_attention.py.

The configs ship with the tests (tests/data/hf-configs/, provenance in its SOURCES.md), so
every test here runs on any machine."""

import json
import math
from pathlib import Path

import pytest

from cmperf.cost import arch
from cmperf.errors import SpecError
from cmperf.specs.hf_import import FAMILY_IGNORED, IGNORED, import_hf_config, import_hf_file, source_of
from cmperf.specs.loader import list_builtin, load_model

CONFIGS = Path(__file__).parent / "data" / "hf-configs"

# shipped model -> its config.json
MODELS = {
    "deepseek-v3": "deepseek-v3.json",
    "kimi-k2": "kimi-k2.json",
    "qwen3-235b-a22b": "qwen3-235b-a22b.json",
    "qwen3-30b-a3b": "qwen3-30b-a3b.json",
    "mixtral-8x7b": "mixtral-8x7b.json",
    "llama-3.1-70b": "llama-3.1-70b.json",
    "qwen2.5-72b": "qwen2.5-72b.json",
    "glm-4.5": "glm-4.5.json",
    "deepseek-v3.2": "deepseek-v3.2.json",
    "qwen3-next-80b-a3b": "qwen3-next-80b-a3b-thinking.json",  # the Thinking model's config (same architecture)
    "gpt-oss-120b": "gpt-oss-120b.json",
}
# configs of the families no shipped model covers (dense qwen3, mistral, deepseek_v2)
IMPORTED = {
    "qwen3-8b": "qwen3-8b.json",
    "qwen3-32b": "qwen3-32b.json",
    "mistral-7b-v0.3": "mistral-7b-v0.3.json",
    "deepseek-v2-lite": "deepseek-v2-lite.json",
}
CONFIG_OF = {**MODELS, **IMPORTED}


def _raw(file):
    return json.loads((CONFIGS / file).read_text())


def _dump(m):
    """A model's architecture and precision: what a config.json states. The `serving` section
    is a traffic fact added by hand (DeepSeek-V3 takes DeepSeek-R1's measured imbalance), not
    something a config.json holds."""
    d = m.model_dump()
    d.pop("description")
    d.pop("source")
    d.pop("serving", None)
    return d


@pytest.fixture(scope="module")
def shipped():
    return {name: load_model(name)[0] for name in MODELS}


@pytest.fixture(scope="module")
def models(shipped):
    """Every config's model: the shipped spec, or the config imported."""
    return {**shipped, **{name: load_model(str(CONFIGS / f))[0] for name, f in IMPORTED.items()}}


# --------------------------------------------------------------------------- (a) the test data
def test_every_config_is_tested_and_sourced():
    files = {p.name for p in CONFIGS.glob("*.json")}
    assert files == set(CONFIG_OF.values()), files ^ set(CONFIG_OF.values())
    for f in files:  # a row of SOURCES.md names each file: the import's `source` cites it
        assert "provenance: " in source_of(CONFIGS / f) and "SOURCES.md line" in source_of(CONFIGS / f), f


@pytest.mark.parametrize("name", MODELS)
def test_yaml_is_the_import(name, shipped):
    imported = load_model(str(CONFIGS / MODELS[name]))[0]
    assert _dump(imported) | {"name": name} == _dump(shipped[name])


@pytest.mark.parametrize("file", sorted(CONFIG_OF.values()))
def test_every_field_is_mapped_or_knowingly_ignored(file):
    assert import_hf_file(CONFIGS / file)[1] == []


@pytest.mark.parametrize("name", [n for n, _ in list_builtin("model")])
def test_every_shipped_model_loads(cli, name):
    m, _ = load_model(name)
    assert arch.param_breakdown(m).total > 0
    code, out, err = cli("model", "show", name, "-f", "json")
    assert code == 0 and err == "", err


# --------------------------------------------------------------------------- (b) parameter counts
# Published sizes (B = 1e9 parameters). "Activated" conventions differ by publisher:
#  "matmuls":   the weights a token multiplies through, LM head included, input embedding (a
#               lookup) not: arch.activated_matmul_params (DeepSeek, Moonshot);
#  "+embedding": that plus the input embedding (Qwen, Mistral);
#  "non-embedding": neither embedding nor head (Zhipu's GLM-4.5: 32.08 B this way, 32.85 B with
#               the head, against the published 32 B).
# Sources:
#  - DeepSeek-V3: technical report (arXiv 2412.19437) abstract, "671B total parameters with 37B
#    activated for each token"; the Hugging Face card's 685B = 671B main model + 14B MTP module.
#  - Kimi K2: Moonshot's model card / technical report (arXiv 2507.20534), "1 trillion total
#    parameters, 32 billion activated"; 1.04T total in the report's architecture comparison.
#  - Qwen3 MoE: the Hugging Face model cards (and Qwen3 technical report, arXiv 2505.09388):
#    235B total / 22B activated / 234B non-embedding; 30.5B / 3.3B / 29.9B non-embedding.
#  - Mixtral-8x7B: Mistral's announcement "Mixtral of experts" (Dec 2023), "46.7B total
#    parameters but only uses 12.9B parameters per token".
#  - Llama-3.1-70B: the Hugging Face page of meta-llama/Llama-3.1-70B, 70.6B parameters (safetensors).
#  - Qwen2.5-72B: 72.7B (next-hardware-and-models.md §3.5, derived from the config; the same
#    figure the Qwen2.5-72B model card states).
#  - Qwen3-8B / Qwen3-32B: model cards, 8.2B (6.95B non-embedding) / 32.8B (31.2B non-embedding).
#  - Mistral-7B-v0.3: 7.25B (the Hugging Face page's parameter count).
#  - DeepSeek-V2-Lite: DeepSeek-V2 technical report (arXiv 2405.04434), "15.7B total parameters,
#    2.4B activated".
#  - GLM-4.5: 355B total / 32B active (next-hardware-and-models.md §3.3, SGL-GLM45).
#  - DeepSeek-V3.2: the Hugging Face card's 685B, as for V3 (main model + MTP module + its copies),
#    checked in test_parameter_counts_exact_spots; 37B activated as V3 (+ the indexer, 0.85 B).
#  - Qwen3-Next-80B-A3B: the model card's "80B total, 3B activated" (next-hardware-and-models.md
#    §3.2, VLLM-Q3N "~3B active of 80B"): one significant digit each, so half a unit: 0.6 % and
#    17 %; Qwen counts the activated without embedding and head here (3.25 B; 3.56 B with the
#    head, 3.87 B with both: the nearest "3B" is the non-embedding count).
#  - gpt-oss-120b: OpenAI's model card, 116.83B total, 5.13B active (the card counts the
#    unembedding among the active: cmperf's "matmuls"); biases (0.04 B) are not counted: 0.1 %.
# Tolerances: 2 % where the figure has two or three significant digits and the count is exact
# (the shipped models, as before); half a unit in the last published digit, rounded up, for the
# dense models published to 3-4 digits; V2-Lite's "2.4B" is 2 digits: 3 %. GLM-4.5's 355B is
# 0.6 % above the main model's 352.8 B (its MTP layer's 4.0 B is not in the main model): 1 %.
PUBLISHED = {  # name: (total, rel, activated, rel, convention)
    "deepseek-v3": (671e9, 0.02, 37e9, 0.02, "matmuls"),
    "kimi-k2": (1.04e12, 0.02, 32e9, 0.02, "matmuls"),
    "qwen3-235b-a22b": (235e9, 0.02, 22e9, 0.02, "+embedding"),
    "qwen3-30b-a3b": (30.5e9, 0.02, 3.3e9, 0.02, "+embedding"),
    "mixtral-8x7b": (46.7e9, 0.02, 12.9e9, 0.02, "+embedding"),
    "llama-3.1-70b": (70.6e9, 0.02, None, None, None),
    "qwen2.5-72b": (72.7e9, 0.001, None, None, None),
    "qwen3-8b": (8.2e9, 0.007, None, None, None),
    "qwen3-32b": (32.8e9, 0.002, None, None, None),
    "mistral-7b-v0.3": (7.25e9, 0.001, None, None, None),
    "deepseek-v2-lite": (15.7e9, 0.004, 2.4e9, 0.03, "matmuls"),
    "glm-4.5": (355e9, 0.01, 32e9, 0.02, "non-embedding"),
    "deepseek-v3.2": (671.9e9, 0.001, 37e9, 0.02, "matmuls"),
    "qwen3-next-80b-a3b": (80e9, 0.00625, 3e9, 0.17, "non-embedding"),
    "gpt-oss-120b": (116.83e9, 0.001, 5.13e9, 0.002, "matmuls"),
}
NON_EMBEDDING = {"qwen3-235b-a22b": 234e9, "qwen3-30b-a3b": 29.9e9, "qwen3-8b": 6.95e9, "qwen3-32b": 31.2e9}


def activated(m, convention):
    matmuls = arch.activated_matmul_params(m)
    return {"matmuls": matmuls, "+embedding": matmuls + arch.embedding_params(m),
            "non-embedding": matmuls - arch.embedding_params(m)}[convention]


@pytest.mark.parametrize("name", PUBLISHED)
def test_parameter_counts(name, models):
    m = models[name]
    total, rel, act, act_rel, convention = PUBLISHED[name]
    assert arch.param_breakdown(m).total == pytest.approx(total, rel=rel)
    if act is not None:
        assert activated(m, convention) == pytest.approx(act, rel=act_rel)


@pytest.mark.parametrize("name", NON_EMBEDDING)
def test_non_embedding_counts(name, models):
    pb = arch.param_breakdown(models[name])
    assert pb.total - pb.embedding - pb.head == pytest.approx(NON_EMBEDDING[name], rel=0.005)


def test_parameter_counts_exact_spots(shipped):
    """Numbers that pin the mapping tighter than 2 %."""
    v3 = arch.param_breakdown(shipped["deepseek-v3"])
    assert v3.total / 1e9 == pytest.approx(671.03, abs=0.01)
    assert v3.total_with_mtp == pytest.approx(685e9, rel=0.005)  # the checkpoint's 685B
    # V3.2 = V3 + an indexer per layer (MTP's included): 1536 x 64 x 128 + 7168 x (128 + 64) weights
    # + its key's LayerNorm (2 x 128)
    v32 = arch.param_breakdown(shipped["deepseek-v3.2"])
    indexer = 1536 * 64 * 128 + 7168 * 192 + 2 * 128
    assert v32.total - v3.total == 61 * indexer and v32.total_with_mtp - v3.total_with_mtp == 62 * indexer
    assert v32.total_with_mtp == pytest.approx(685e9, rel=0.005)
    # Llama-3.1-70B by hand: 80 x (attention 8192 x (64 + 8 + 8 + 64) x 128 + SwiGLU 3 x 8192 x 28672
    # + 2 norms x 8192) + final norm + untied embedding and head 2 x 128256 x 8192
    hand = 80 * (8192 * 144 * 128 + 3 * 8192 * 28672 + 2 * 8192) + 8192 + 2 * 128256 * 8192
    assert arch.param_breakdown(shipped["llama-3.1-70b"]).total == hand == 70_553_706_496


# Hand counts of the new families, term by term from the config (q/k/v biases not counted).
HAND_TOTAL = {
    # 80 x (q, k, v, o: 8192 x (64 + 8 + 8 + 64) x 128 + SwiGLU 3 x 8192 x 29568 + 2 norms) + final
    # norm + untied embedding and head 2 x 152064 x 8192
    "qwen2.5-72b": 80 * (8192 * 144 * 128 + 3 * 8192 * 29568 + 2 * 8192) + 8192 + 2 * 152064 * 8192,
    # 36 x (4096 x (32 + 8 + 8 + 32) x 128 + 3 x 4096 x 12288 + 2 norms + q/k norms 2 x 128) + ...
    "qwen3-8b": 36 * (4096 * 80 * 128 + 3 * 4096 * 12288 + 2 * 4096 + 2 * 128) + 4096 + 2 * 151936 * 4096,
    "mistral-7b-v0.3": 32 * (4096 * 80 * 128 + 3 * 4096 * 14336 + 2 * 4096) + 4096 + 2 * 32768 * 4096,
    # 27 x MLA (q 2048 x 16 x (128 + 64) without a q LoRA, kv_a 2048 x (512 + 64), kv_b
    # 512 x 16 x (128 + 128), o 16 x 128 x 2048, norms 2 x 2048 + 512) + 1 dense SwiGLU 3 x 2048 x 10944
    # + 26 x ((64 routed + 2 shared) x 3 x 2048 x 1408 + gate 64 x 2048 + 64 bias) + final norm
    # + embedding and head 2 x 102400 x 2048. (cmperf counts a score-correction bias for every
    # router: 26 x 64 parameters V2-Lite does not have.)
    "deepseek-v2-lite": 27 * (2048 * 16 * 192 + 2048 * 576 + 512 * 16 * 256 + 16 * 128 * 2048 + 2 * 2048 + 512)
    + 3 * 2048 * 10944 + 26 * (66 * 3 * 2048 * 1408 + 64 * 2048 + 64) + 2048 + 2 * 102400 * 2048,
    # 92 x (5120 x (96 + 8 + 8 + 96) x 128 + 2 norms + q/k norms) + 3 dense 3 x 5120 x 12288
    # + 89 x ((160 + 1) x 3 x 5120 x 1536 + gate 160 x 5120 + 160 bias) + final norm + 2 x 151552 x 5120
    "glm-4.5": 92 * (5120 * 208 * 128 + 2 * 5120 + 2 * 128) + 3 * 3 * 5120 * 12288
    + 89 * (161 * 3 * 5120 * 1536 + 160 * 5120 + 160) + 5120 + 2 * 151552 * 5120,
}


HAND_TOTAL.update({
    # 48 layers: 36 Gated DeltaNet (qkvz 2048 x (2 x 2048 + 2 x 4096), ba 2048 x 64, out 4096 x 2048,
    # conv 8192 x 4, A_log + dt_bias 2 x 32, norm 128, 2 layer norms) + 12 gated GQA (q 2048 x 16 x 256 x 2,
    # k, v 2048 x 2 x 256, o 4096 x 2048, 2 norms + q/k norms 2 x 256); each MoE: 513 experts
    # x 3 x 2048 x 512 + gate 512 x 2048 + 512 bias; final norm + embedding and head 2 x 151936 x 2048
    "qwen3-next-80b-a3b": 36 * (2048 * 12288 + 2048 * 64 + 4096 * 2048 + 8192 * 4 + 64 + 128 + 2 * 2048)
    + 12 * (2048 * 8192 + 2 * 2048 * 512 + 4096 * 2048 + 2 * 2048 + 2 * 256)
    + 48 * (513 * 3 * 2048 * 512 + 512 * 2048 + 512) + 2048 + 2 * 151936 * 2048,
    # 36 x (q, k, v, o: 2880 x (64 + 8 + 8 + 64) x 64, 2 norms, 64 sinks; 128 experts x 3 x 2880 x 2880
    # + gate 128 x 2880 + 128 bias) + final norm + 2 x 201088 x 2880
    "gpt-oss-120b": 36 * (2880 * 144 * 64 + 2 * 2880 + 64 + 128 * 3 * 2880 * 2880 + 128 * 2880 + 128)
    + 2880 + 2 * 201088 * 2880,
})


@pytest.mark.parametrize("name", HAND_TOTAL)
def test_parameter_counts_by_hand(name, models):
    assert arch.param_breakdown(models[name]).total == HAND_TOTAL[name]


def test_activated_by_hand(models):
    # V2-Lite: all attention + the dense layer + 26 x (6 routed + 2 shared experts + gate) + LM head
    v2 = (27 * (2048 * 16 * 192 + 2048 * 576 + 512 * 16 * 256 + 16 * 128 * 2048) + 3 * 2048 * 10944
          + 26 * (8 * 3 * 2048 * 1408 + 64 * 2048 + 64) + 102400 * 2048)
    assert arch.activated_matmul_params(models["deepseek-v2-lite"]) == v2 == 2_451_310_208
    # GLM-4.5 without embedding and head: attention + 3 dense + 89 x (8 routed + 1 shared + gate)
    glm = 92 * 5120 * 208 * 128 + 3 * 3 * 5120 * 12288 + 89 * (9 * 3 * 5120 * 1536 + 160 * 5120 + 160)
    assert activated(models["glm-4.5"], "non-embedding") == glm == 32_078_084_000


def test_glm_mtp_module_is_one_more_moe_layer(models):
    """GLM-4.5's one NextN layer: enorm, hnorm, shared-head norm, eh_proj (2h -> h) and one MoE
    decoder layer, sharing embedding and head (their checkpoint copies count on disk only)."""
    m = models["glm-4.5"]
    pb = arch.param_breakdown(m)
    layer = 5120 * 208 * 128 + 2 * 5120 + 2 * 128 + 161 * 3 * 5120 * 1536 + 160 * 5120 + 160
    assert m.mtp.modules == 1 and m.mtp.shares_embedding_and_head
    assert pb.mtp == 3 * 5120 + 2 * 5120 * 5120 + layer
    assert pb.total_with_mtp - pb.total - pb.mtp == 2 * 151552 * 5120


# --------------------------------------------------------------------------- (c) shapes
def test_shapes_the_counts_depend_on(models):
    s = models
    # head_dim implied (Mixtral, Llama, Qwen2, Mistral) or given larger than hidden/heads (Qwen3, GLM)
    assert s["mixtral-8x7b"].attention.head_dim == 4096 // 32
    assert s["qwen2.5-72b"].attention.head_dim == 8192 // 64 and s["mistral-7b-v0.3"].attention.head_dim == 128
    assert s["qwen3-30b-a3b"].attention.head_dim == 128 != 2048 // 32
    assert s["glm-4.5"].attention.head_dim == 128 and 96 * 128 > 5120  # query width 12,288 > hidden
    # q/k norm: Qwen3 (dense and MoE), GLM-4.5 (use_qk_norm); not Llama, Mistral, Qwen2
    assert all(s[n].attention.qk_norm for n in ("qwen3-235b-a22b", "qwen3-8b", "qwen3-32b", "glm-4.5"))
    assert not any(s[n].attention.qk_norm for n in ("llama-3.1-70b", "mistral-7b-v0.3", "qwen2.5-72b"))
    assert [s[n].moe.shared_experts for n in ("deepseek-v3", "kimi-k2", "qwen3-235b-a22b", "mixtral-8x7b",
                                              "deepseek-v2-lite", "glm-4.5")] == [1, 1, 0, 0, 2, 1]
    for dense in ("llama-3.1-70b", "qwen2.5-72b", "qwen3-8b", "qwen3-32b", "mistral-7b-v0.3"):
        assert s[dense].moe is None and s[dense].first_dense_layers == s[dense].num_layers
    assert [s[n].first_dense_layers for n in ("deepseek-v3", "kimi-k2", "deepseek-v2-lite", "glm-4.5")] == [3, 1, 1, 3]
    assert (s["kimi-k2"].moe.groups, s["kimi-k2"].moe.top_groups) == (1, 1)
    assert [s[n].mtp.modules for n in ("deepseek-v3", "kimi-k2", "deepseek-v2-lite", "glm-4.5")] == [1, 0, 0, 1]
    assert s["deepseek-v3"].precision.matmul == "fp8" and s["qwen3-235b-a22b"].precision.matmul == "bf16"


def test_attention_types(models):
    v2 = models["deepseek-v2-lite"].attention
    assert v2.type == "mla" and v2.q_lora_rank is None  # no query compression
    assert (v2.num_heads, v2.kv_lora_rank, v2.qk_nope_head_dim, v2.qk_rope_head_dim, v2.v_head_dim) == (16, 512, 128, 64, 128)
    glm = models["glm-4.5"].attention
    assert (glm.type, glm.num_heads, glm.num_kv_heads) == ("gqa", 96, 8)
    for n in ("qwen2.5-72b", "qwen3-8b", "qwen3-32b", "mistral-7b-v0.3"):
        assert models[n].attention.type == "gqa"


def test_routers(models):
    v2, glm = models["deepseek-v2-lite"].moe, models["glm-4.5"].moe
    assert (v2.routed_experts, v2.experts_per_token, v2.expert_intermediate_size, v2.scoring) == (64, 6, 1408, "softmax")
    assert (v2.groups, v2.top_groups) == (1, 1)  # greedy: no group limit
    assert (glm.routed_experts, glm.experts_per_token, glm.expert_intermediate_size, glm.scoring) == (160, 8, 1536, "sigmoid")
    assert (glm.groups, glm.top_groups) == (1, 1)
    assert models["glm-4.5"].dense_ffn.intermediate_size == 12288
    assert models["deepseek-v2-lite"].dense_ffn.intermediate_size == 10944


def test_deepseek_v2_routing_methods():
    raw = _raw("deepseek-v2-lite.json")
    # DeepSeek-V2 (236B) limits each token to topk_group of n_group device groups
    limited = {**raw, "topk_method": "group_limited_greedy", "n_group": 8, "topk_group": 3}
    model, unmapped = import_hf_config(limited, "x", "test")
    assert (model["moe"]["groups"], model["moe"]["top_groups"]) == (8, 3) and unmapped == []
    # greedy ignores the groups, whatever they say
    model, unmapped = import_hf_config({**raw, "n_group": 8, "topk_group": 3}, "x", "test")
    assert (model["moe"]["groups"], model["moe"]["top_groups"]) == (1, 1) and unmapped == []
    # a router V2 does not have is named, not taken silently
    model, unmapped = import_hf_config({**raw, "topk_method": "noaux_tc"}, "x", "test")
    assert len(unmapped) == 1 and unmapped[0].startswith('topk_method = "noaux_tc"') and "greedy" in unmapped[0]
    # no scoring_func: DeepSeek-V2's softmax; V3 names its own
    model, _ = import_hf_config({k: v for k, v in raw.items() if k != "scoring_func"}, "x", "test")
    assert model["moe"]["scoring"] == "softmax"
    with pytest.raises(SpecError, match="scoring_func"):
        import_hf_config({**raw, "scoring_func": "relu"}, "x", "test")


def test_deepseek_v2_with_q_lora(models):
    """DeepSeek-V2 (236B) compresses the query (q_lora_rank 1536): q_a + q_b replace q."""
    raw = {**_raw("deepseek-v2-lite.json"), "q_lora_rank": 1536}
    model, _ = import_hf_config(raw, "x", "test")
    assert model["attention"]["q_lora_rank"] == 1536
    assert "q_lora_rank" not in import_hf_config(_raw("deepseek-v2-lite.json"), "x", "test")[0]["attention"]


def test_glm_switches():
    raw = _raw("glm-4.5.json")
    model, unmapped = import_hf_config({**raw, "use_qk_norm": False, "num_nextn_predict_layers": 0,
                                        "attention_bias": False}, "x", "test")
    assert "qk_norm" not in model["attention"] and "mtp" not in model and unmapped == []
    assert "attention_bias" in FAMILY_IGNORED["glm4_moe"] and "partial_rotary_factor" in FAMILY_IGNORED["glm4_moe"]


# --------------------------------------------------------------------------- (d) KV cache
KV_BF16 = {  # bytes per token, all layers, BF16
    "llama-3.1-70b": 2 * 8 * 128 * 80 * 2,  # K and V x KV heads x head_dim x layers x 2 B = 327,680
    "qwen2.5-72b": 2 * 8 * 128 * 80 * 2,  # 327,680 (next-hardware-and-models.md §3.5)
    "qwen3-235b-a22b": 2 * 4 * 128 * 94 * 2,  # 192,512
    "qwen3-30b-a3b": 2 * 4 * 128 * 48 * 2,  # 98,304
    "qwen3-8b": 2 * 8 * 128 * 36 * 2,  # 147,456
    "qwen3-32b": 2 * 8 * 128 * 64 * 2,  # 262,144
    "mixtral-8x7b": 2 * 8 * 128 * 32 * 2,  # 131,072
    "mistral-7b-v0.3": 2 * 8 * 128 * 32 * 2,  # 131,072
    "glm-4.5": 2 * 8 * 128 * 92 * 2,  # 376,832 (next-hardware-and-models.md §3.3)
    "deepseek-v3": (512 + 64) * 61 * 2,  # MLA latent + RoPE key x layers x 2 B = 70,272
    "kimi-k2": (512 + 64) * 61 * 2,  # same latent as DeepSeek-V3 despite half the heads
    "deepseek-v2-lite": (512 + 64) * 27 * 2,  # 31,104: the same latent, 27 layers
    "deepseek-v3.2": ((512 + 64) * 2 + 128 + 4) * 61,  # + the indexer's FP8 key and scale: 78,324 (§3.1)
    "qwen3-next-80b-a3b": 2 * 2 * 256 * 12 * 2,  # the 12 full layers only: 24,576 (§3.2; + a fixed state)
    "gpt-oss-120b": 2 * 8 * 64 * 18 * 2,  # the 18 full layers only: 36,864 (§3.4; + at most 128 tokens)
}


@pytest.mark.parametrize("name", KV_BF16)
def test_kv_bytes_per_token(name, models):
    assert arch.kv_bytes_per_token(models[name], 2) == KV_BF16[name]


def test_kv_published_figures():
    assert (KV_BF16["llama-3.1-70b"], KV_BF16["qwen2.5-72b"], KV_BF16["glm-4.5"]) == (327_680, 327_680, 376_832)


# --------------------------------------------------------------------------- (e) nothing dropped silently
def _inert(raw, key):
    """Fields the config's own switches leave without effect."""
    if key in ("sliding_window", "max_window_layers") and raw.get("use_sliding_window") is False:
        return True  # Qwen: read only when use_sliding_window is true
    return key in ("n_group", "topk_group") and raw.get("topk_method") == "greedy"


def _mutations(raw):
    fam = "mla" if raw["model_type"] in ("deepseek_v2", "deepseek_v3", "kimi_k2", "deepseek_v32") else raw["model_type"]
    ignored = IGNORED.keys() | FAMILY_IGNORED.get(fam, {}).keys()
    for k, v in raw.items():
        if k in ignored or k == "model_type" or _inert(raw, k):
            continue
        if isinstance(v, bool):
            yield k, not v
        elif isinstance(v, int):
            yield k, 2 * v if v else 1
        elif v is None:
            yield k, 4096


@pytest.mark.parametrize("file", sorted(CONFIG_OF.values()))
def test_every_mapped_field_changes_the_model_or_is_reported(file):
    """Doubling a number (or flipping a switch, or setting a null) of a field the importer does
    not knowingly ignore changes the model it makes, adds a warning, or is an error."""
    raw = _raw(file)
    base, _ = import_hf_config(raw, "x", "test")
    silent = []
    for key, value in _mutations(raw):
        try:
            model, unmapped = import_hf_config({**raw, key: value}, "x", "test")
        except SpecError:
            continue
        if model == base and not unmapped:
            silent.append(key)
    assert silent == []


def test_unknown_fields_are_reported_in_every_family():
    for file in CONFIG_OF.values():
        _, unmapped = import_hf_config({**_raw(file), "frobnication_factor": 3}, "x", "test")
        assert unmapped == ["frobnication_factor = 3: not a field cmperf maps or knowingly ignores"], file


# --------------------------------------------------------------------------- (f) sliding windows
def _warnings(cli, tmp_path, raw, name="config.json"):
    cfg = tmp_path / name
    cfg.write_text(json.dumps(raw))
    code, out, err = cli("model", "import", cfg)
    assert code == 0, err
    assert "kind: model" in out
    return [w for w in err.strip().splitlines() if w]


@pytest.mark.parametrize("file,change,needles", [
    ("qwen2.5-72b.json", {"use_sliding_window": True}, ["use_sliding_window = true", "sliding_window 131072", "max_window_layers 80"]),
    ("qwen3-30b-a3b.json", {"use_sliding_window": True, "sliding_window": 4096}, ["use_sliding_window = true", "sliding_window 4096"]),
    ("mistral-7b-v0.3.json", {"sliding_window": 4096}, ["sliding_window = 4096"]),  # as in Mistral-7B-v0.1
    ("qwen3-8b.json", {"layer_types": ["sliding_attention", "full_attention"] * 18}, ["layer_types: 18 of 36 layers", "sliding_attention"]),
    ("qwen3-8b.json", {"use_sliding_window": True, "sliding_window": 4096, "layer_types": ["sliding_attention"] * 36},
     ["layer_types: 36 of 36 layers"]),  # layer_types decides: one line, not one per field
])
def test_active_sliding_window_is_one_warning(cli, tmp_path, file, change, needles):
    warnings = _warnings(cli, tmp_path, {**_raw(file), **change})
    assert len(warnings) == 1 and warnings[0].startswith("cmperf: warning: "), warnings
    assert "sliding-window attention" in warnings[0] or "not modelled" in warnings[0]
    for n in needles:
        assert n in warnings[0], (n, warnings[0])


def test_disabled_sliding_window_is_accepted(cli, tmp_path):
    # Qwen2.5-72B ships sliding_window 131072 with use_sliding_window false; full attention everywhere
    assert _warnings(cli, tmp_path, {**_raw("qwen3-8b.json"), "layer_types": ["full_attention"] * 36}) == []
    assert _warnings(cli, tmp_path, _raw("qwen2.5-72b.json")) == []


def test_bad_sliding_window_switch(cli, tmp_path):
    bad = tmp_path / "q.json"
    bad.write_text(json.dumps({**_raw("qwen2.5-72b.json"), "use_sliding_window": "yes"}))
    _one_error_line(cli("model", "import", bad), str(bad), "'use_sliding_window'", "true or false")


# --------------------------------------------------------------------------- (g) bad input
def _one_error_line(result, *needles):
    code, out, err = result
    assert code == 2, (code, out, err)
    assert "Traceback" not in err and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("cmperf: error: "), err
    for n in needles:
        assert n in lines[0], (n, lines[0])


def test_new_families_import_their_attention(models):
    """DeepSeek-V3.2, Qwen3-Next and gpt-oss import as their own architectures (never as
    DeepSeek-V3, Qwen3-MoE or Mixtral): the indexer, the layer pattern, the linear layers, the
    window and sinks, MXFP4 experts."""
    v32, q3n, oss = (models[n] for n in ("deepseek-v3.2", "qwen3-next-80b-a3b", "gpt-oss-120b"))
    assert v32.attention.type == "dsa" and (v32.attention.indexer.heads, v32.attention.indexer.head_dim,
                                            v32.attention.indexer.topk) == (64, 128, 2048)
    assert v32.precision.indexer == "fp8"
    assert q3n.layer_pattern == ["linear", "linear", "linear", "full"] and q3n.attention.output_gate
    la = q3n.linear_attention
    assert (la.key_heads, la.value_heads, la.key_head_dim, la.value_head_dim, la.conv_kernel) == (16, 32, 128, 128, 4)
    assert (q3n.moe.routed_experts, q3n.moe.experts_per_token, q3n.moe.shared_experts) == (512, 10, 1)
    assert oss.layer_pattern == ["window", "full"] and oss.attention.sliding_window == 128 and oss.attention.sinks
    assert oss.precision.expert_weights == "mxfp4" and oss.precision.matmul == "bf16"
    assert (oss.moe.routed_experts, oss.moe.experts_per_token, oss.moe.shared_experts) == (128, 4, 0)


def test_layer_types_decide_the_pattern():
    raw = _raw("qwen3-next-80b-a3b-thinking.json")
    types = ["linear_attention", "full_attention"] * 24
    model, unmapped = import_hf_config({**raw, "layer_types": types}, "x", "test")
    assert model["layer_pattern"] == ["linear", "full"] and unmapped == []
    oss = _raw("gpt-oss-120b.json")
    model, _ = import_hf_config({**oss, "layer_types": ["full_attention"] * 36}, "x", "test")
    assert model["layer_pattern"] == ["full"] and "sliding_window" not in model["attention"]
    # without layer_types gpt-oss alternates (transformers' default), Qwen3-Next follows the interval
    model, _ = import_hf_config({k: v for k, v in oss.items() if k != "layer_types"}, "x", "test")
    assert model["layer_pattern"] == ["window", "full"]
    model, _ = import_hf_config({**raw, "full_attention_interval": 2}, "x", "test")
    assert model["layer_pattern"] == ["linear", "full"]
    # an interval that does not divide the layers: one entry per layer (layers 5, 10, ..., 45 full)
    model, _ = import_hf_config({**raw, "full_attention_interval": 5}, "x", "test")
    assert len(model["layer_pattern"]) == 48 and model["layer_pattern"].count("full") == 9


@pytest.mark.parametrize("file, change, needles", [
    ("gpt-oss-120b.json", {"layer_types": ["sliding_attention"] * 35}, ["'layer_types'", "36 attention type names"]),
    ("gpt-oss-120b.json", {"layer_types": ["linear_attention"] * 36}, ["'layer_types'", "linear_attention", "gpt_oss"]),
    ("deepseek-v3.2.json", {"index_topk": "many"}, ["'index_topk'", "integer"]),
])
def test_bad_new_family_fields_are_one_line(cli, tmp_path, file, change, needles):
    bad = tmp_path / "c.json"
    bad.write_text(json.dumps({**_raw(file), **change}))
    _one_error_line(cli("model", "import", bad), str(bad), *needles)


def test_unsupported_quantization_of_the_new_families_is_named():
    model, unmapped = import_hf_config({**_raw("gpt-oss-120b.json"), "quantization_config": {
        "quant_method": "mxfp4", "modules_to_not_convert": ["lm_head"]}}, "x", "test")
    assert model["precision"]["expert_weights"] == "mxfp4" and len(unmapped) == 1 and "modules_to_not_convert" in unmapped[0]


def test_import_not_json(cli, tmp_path):
    bad = tmp_path / "config.json"
    bad.write_text('{"model_type": "llama",\n  "hidden_size": }')
    _one_error_line(cli("model", "import", bad), str(bad), "malformed JSON", "line 2")


def test_import_json_list(cli, tmp_path):
    bad = tmp_path / "config.json"
    bad.write_text("[1, 2, 3]")
    _one_error_line(cli("model", "import", bad), str(bad), "JSON object", "list")


def test_import_unsupported_model_type(cli, tmp_path):
    bad = tmp_path / "gpt2.json"
    bad.write_text(json.dumps({"model_type": "gpt2", "n_embd": 768}))
    _one_error_line(cli("model", "import", bad), str(bad), 'model_type "gpt2"', "not supported", "llama", "qwen3_moe",
                    "deepseek_v3", "qwen2", "mistral", "glm4_moe", "deepseek_v2")


@pytest.mark.parametrize("file,field", [("qwen3-30b-a3b.json", "num_experts"), ("glm-4.5.json", "n_routed_experts"),
                                        ("deepseek-v2-lite.json", "kv_lora_rank"), ("qwen2.5-72b.json", "intermediate_size")])
def test_import_missing_field(cli, tmp_path, file, field):
    raw = _raw(file)
    del raw[field]
    bad = tmp_path / "q.json"
    bad.write_text(json.dumps(raw))
    _one_error_line(cli("model", "import", bad), str(bad), f"'{field}'", raw["model_type"])


def test_import_invalid_result_names_the_json(cli, tmp_path):
    raw = _raw("llama-3.1-70b.json")
    raw["num_key_value_heads"] = 7  # does not divide 64 heads
    bad = tmp_path / "l.json"
    bad.write_text(json.dumps(raw))
    _one_error_line(cli("model", "import", bad), str(bad), "num_kv_heads")
    _one_error_line(cli("model", "show", bad), str(bad), "num_kv_heads")


def test_unsupported_model_type_api():
    with pytest.raises(SpecError, match='model_type "gpt2" is not supported'):
        import_hf_config({"model_type": "gpt2"}, None, "test")


# --------------------------------------------------------------------------- (h) unmapped fields
def test_unmapped_fields_are_reported(cli, tmp_path):
    raw = _raw("mixtral-8x7b.json")
    raw["frobnication_factor"] = 3
    raw["sliding_window"] = 4096  # mapped only when null: cmperf attends to the whole context
    raw["attention_bias"] = True
    cfg = tmp_path / "mixtral.json"
    cfg.write_text(json.dumps(raw))
    code, out, err = cli("model", "import", cfg)
    assert code == 0, err
    warnings = err.strip().splitlines()
    assert len(warnings) == 3 and all(w.startswith("cmperf: warning: ") for w in warnings)
    for field in ("frobnication_factor = 3", "sliding_window = 4096", "attention_bias = true"):
        assert sum(field in w for w in warnings) == 1, (field, err)
    assert "kind: model" in out and "# unmapped: frobnication_factor" in out
    # ignored fields are knowingly ignored, with a reason, and never reported
    assert "rope_theta" in IGNORED and "rope_theta" not in err


def test_unknown_quantization_is_reported():
    raw = _raw("llama-3.1-70b.json")
    raw["quantization_config"] = {"quant_method": "awq", "bits": 4}
    model, unmapped = import_hf_config(raw, "x", "test")
    assert model["precision"]["matmul"] == "bf16"
    assert len(unmapped) == 1 and unmapped[0].startswith("quantization_config")


# --------------------------------------------------------------------------- (i) CLI
def test_show_config_json(cli):
    code, out, err = cli("model", "show", CONFIGS / "llama-3.1-70b.json", "--format", "json")
    assert code == 0, err
    rows = {r["quantity"]: r["value"] for r in json.loads(out)}
    assert rows["total (main model, without MTP)"] == 70_553_706_496
    assert rows["bf16"] == 327_680


def test_show_config_json_with_set(cli):
    code, out, err = cli("model", "show", CONFIGS / "qwen3-30b-a3b.json", "--set", "model.num_layers=24", "-f", "json")
    assert code == 0, err
    rows = {r["quantity"]: r["value"] for r in json.loads(out)}
    assert rows["bf16"] == 2 * 4 * 128 * 24 * 2


def test_import_out_file_round_trips(cli, tmp_path):
    out = tmp_path / "llama.yaml"
    code, stdout, err = cli("model", "import", CONFIGS / "llama-3.1-70b.json", "--name", "my-llama", "--out", out)
    assert code == 0 and stdout == "", err
    assert err.startswith(f"cmperf: wrote {out}: model 'my-llama' (80 layers") and err.count("\n") == 1, err  # says what it wrote
    m, _ = load_model(str(out))
    assert m.name == "my-llama"
    assert _dump(m) | {"name": "llama-3.1-70b"} == _dump(load_model("llama-3.1-70b")[0])


@pytest.mark.parametrize("file", ["glm-4.5.json", "deepseek-v2-lite.json", "qwen3-8b.json", "mistral-7b-v0.3.json"])
def test_new_families_round_trip_through_yaml(cli, tmp_path, file):
    out = tmp_path / "m.yaml"
    code, _, err = cli("model", "import", CONFIGS / file, "--out", out)
    assert code == 0 and err.startswith(f"cmperf: wrote {out}") and err.count("\n") == 1, err  # one line: what it wrote
    assert _dump(load_model(str(out))[0]) == _dump(load_model(str(CONFIGS / file))[0])


def test_qwen25_decode_on_h100(cli):
    """The dense model decodes with TP 8, no slower than HBM can stream its weights: each of the
    8 GPUs reads at least 1/8 of 72.7 B BF16 weights per step from 3.35 TB/s HBM (5.4 ms)."""
    code, out, err = cli("predict", "decode", "--model", "qwen2.5-72b", "--hardware", "h100-cluster",
                         "--tp", "8", "--dies", "8", "--batch", "16", "-f", "json")
    assert code == 0, err
    r = json.loads(out)
    assert math.isfinite(r["tpot_ms"]) and r["tpot_ms"] >= 72.7e9 * 2 / 8 / 3.35e12 * 1e3
    assert r["fits"] in (True, "yes")
