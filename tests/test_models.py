"""The models imported from Hugging Face config.json files (cmperf/specs/hf_import.py):
each shipped YAML is exactly what the importer makes of its config, parameter counts match the
published sizes, KV-cache bytes match a hand count, and bad configs fail in one line."""

import json
from pathlib import Path

import pytest

from cmperf.cost import arch
from cmperf.errors import SpecError
from cmperf.specs.hf_import import IGNORED, import_hf_config, import_hf_file
from cmperf.specs.loader import load_model

CONFIGS = Path("/work/shared/reference/hf-configs")
if not CONFIGS.is_dir():  # the reference configs live outside the repository
    pytestmark = pytest.mark.skip(reason=f"{CONFIGS} not present")

# shipped model -> its config.json
MODELS = {
    "deepseek-v3": "deepseek-v3.json",
    "kimi-k2": "kimi-k2.json",
    "qwen3-235b-a22b": "qwen3-235b-a22b.json",
    "qwen3-30b-a3b": "qwen3-30b-a3b.json",
    "mixtral-8x7b": "mixtral-8x7b.json",
    "llama-3.1-70b": "llama-3.1-70b.json",
}


def _dump(m):
    d = m.model_dump()
    d.pop("description")
    d.pop("source")
    return d


@pytest.fixture(scope="module")
def shipped():
    return {name: load_model(name)[0] for name in MODELS}


# --------------------------------------------------------------------------- (a) YAML == import
@pytest.mark.parametrize("name", MODELS)
def test_yaml_is_the_import(name, shipped):
    imported, unmapped = load_model(str(CONFIGS / MODELS[name]))[0], import_hf_file(CONFIGS / MODELS[name])[1]
    assert _dump(imported) == _dump(shipped[name])
    assert unmapped == []  # every field of the six configs is mapped or knowingly ignored


# --------------------------------------------------------------------------- (b) parameter counts
# Published sizes (B = 1e9 parameters). "Activated" conventions differ by publisher: DeepSeek and
# Moonshot count the weights a token multiplies through (arch.activated_matmul_params: the input
# embedding is a lookup, not counted); Qwen and Mistral also count the input embedding.
#  - DeepSeek-V3: technical report (arXiv 2412.19437) abstract, "671B total parameters with 37B
#    activated for each token"; the Hugging Face card's 685B = 671B main model + 14B MTP module.
#  - Kimi K2: Moonshot's model card / technical report (arXiv 2507.20534), "1 trillion total
#    parameters, 32 billion activated"; 1.04T total in the report's architecture comparison.
#  - Qwen3: the Hugging Face model cards (and Qwen3 technical report, arXiv 2505.09388):
#    235B total / 22B activated / 234B non-embedding; 30.5B / 3.3B / 29.9B non-embedding.
#  - Mixtral-8x7B: Mistral's announcement "Mixtral of experts" (Dec 2023), "46.7B total
#    parameters but only uses 12.9B parameters per token".
#  - Llama-3.1-70B: the Hugging Face page of meta-llama/Llama-3.1-70B, 70.6B parameters (safetensors).
PUBLISHED = {  # name: (total, activated, activated counts the input embedding)
    "deepseek-v3": (671e9, 37e9, False),
    "kimi-k2": (1.04e12, 32e9, False),
    "qwen3-235b-a22b": (235e9, 22e9, True),
    "qwen3-30b-a3b": (30.5e9, 3.3e9, True),
    "mixtral-8x7b": (46.7e9, 12.9e9, True),
    "llama-3.1-70b": (70.6e9, None, False),
}


def activated(m, with_embedding):
    return arch.activated_matmul_params(m) + (arch.embedding_params(m) if with_embedding else 0)


@pytest.mark.parametrize("name", MODELS)
def test_parameter_counts(name, shipped):
    m = shipped[name]
    total, act, with_emb = PUBLISHED[name]
    assert arch.param_breakdown(m).total == pytest.approx(total, rel=0.02)
    if act is not None:
        assert activated(m, with_emb) == pytest.approx(act, rel=0.02)


def test_parameter_counts_exact_spots(shipped):
    """Numbers that pin the mapping tighter than 2 %."""
    v3 = arch.param_breakdown(shipped["deepseek-v3"])
    assert v3.total / 1e9 == pytest.approx(671.03, abs=0.01)
    assert v3.total_with_mtp == pytest.approx(685e9, rel=0.005)  # the checkpoint's 685B
    for name, non_embedding in (("qwen3-235b-a22b", 234e9), ("qwen3-30b-a3b", 29.9e9)):
        pb = arch.param_breakdown(shipped[name])
        assert pb.total - pb.embedding - pb.head == pytest.approx(non_embedding, rel=0.005)
    # Llama-3.1-70B by hand: 80 x (attention 8192 x (64 + 8 + 8 + 64) x 128 + SwiGLU 3 x 8192 x 28672
    # + 2 norms x 8192) + final norm + untied embedding and head 2 x 128256 x 8192
    hand = 80 * (8192 * 144 * 128 + 3 * 8192 * 28672 + 2 * 8192) + 8192 + 2 * 128256 * 8192
    assert arch.param_breakdown(shipped["llama-3.1-70b"]).total == hand == 70_553_706_496


def test_shapes_the_counts_depend_on(shipped):
    # head_dim implied (Mixtral, Llama) or given larger than hidden/heads (Qwen3)
    assert shipped["mixtral-8x7b"].attention.head_dim == 4096 // 32
    assert shipped["qwen3-30b-a3b"].attention.head_dim == 128 != 2048 // 32
    assert shipped["qwen3-235b-a22b"].attention.qk_norm and not shipped["llama-3.1-70b"].attention.qk_norm
    assert [shipped[n].moe.shared_experts for n in ("deepseek-v3", "kimi-k2", "qwen3-235b-a22b", "mixtral-8x7b")] == [1, 1, 0, 0]
    assert shipped["llama-3.1-70b"].moe is None and shipped["llama-3.1-70b"].first_dense_layers == 80
    assert (shipped["kimi-k2"].moe.groups, shipped["kimi-k2"].moe.top_groups) == (1, 1)
    assert shipped["kimi-k2"].mtp.modules == 0 and shipped["deepseek-v3"].mtp.modules == 1
    assert shipped["deepseek-v3"].precision.matmul == "fp8" and shipped["qwen3-235b-a22b"].precision.matmul == "bf16"


# --------------------------------------------------------------------------- (c) KV cache
KV_BF16 = {  # bytes per token, all layers, BF16
    "llama-3.1-70b": 2 * 8 * 128 * 80 * 2,  # K and V x KV heads x head_dim x layers x 2 B = 327,680
    "qwen3-235b-a22b": 2 * 4 * 128 * 94 * 2,  # 192,512
    "qwen3-30b-a3b": 2 * 4 * 128 * 48 * 2,  # 98,304
    "mixtral-8x7b": 2 * 8 * 128 * 32 * 2,  # 131,072
    "deepseek-v3": (512 + 64) * 61 * 2,  # MLA latent + RoPE key x layers x 2 B = 70,272
    "kimi-k2": (512 + 64) * 61 * 2,  # same latent as DeepSeek-V3 despite half the heads
}


@pytest.mark.parametrize("name", MODELS)
def test_kv_bytes_per_token(name, shipped):
    assert arch.kv_bytes_per_token(shipped[name], 2) == KV_BF16[name]
    assert KV_BF16["llama-3.1-70b"] == 327_680


# --------------------------------------------------------------------------- (d) bad input
def _one_error_line(result, *needles):
    code, out, err = result
    assert code == 2, (code, out, err)
    assert "Traceback" not in err and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("cmperf: error: "), err
    for n in needles:
        assert n in lines[0], (n, lines[0])


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
    _one_error_line(cli("model", "import", bad), str(bad), 'model_type "gpt2"', "not supported", "llama", "qwen3_moe", "deepseek_v3")


def test_import_missing_field(cli, tmp_path):
    raw = json.loads((CONFIGS / "qwen3-30b-a3b.json").read_text())
    del raw["num_experts"]
    bad = tmp_path / "q.json"
    bad.write_text(json.dumps(raw))
    _one_error_line(cli("model", "import", bad), str(bad), "'num_experts'", "qwen3_moe")


def test_import_invalid_result_names_the_json(cli, tmp_path):
    raw = json.loads((CONFIGS / "llama-3.1-70b.json").read_text())
    raw["num_key_value_heads"] = 7  # does not divide 64 heads
    bad = tmp_path / "l.json"
    bad.write_text(json.dumps(raw))
    _one_error_line(cli("model", "import", bad), str(bad), "num_kv_heads")
    _one_error_line(cli("model", "show", bad), str(bad), "num_kv_heads")


def test_unsupported_model_type_api():
    with pytest.raises(SpecError, match='model_type "gpt2" is not supported'):
        import_hf_config({"model_type": "gpt2"}, None, "test")


# --------------------------------------------------------------------------- (e) unmapped fields
def test_unmapped_fields_are_reported(cli, tmp_path):
    raw = json.loads((CONFIGS / "mixtral-8x7b.json").read_text())
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
    raw = json.loads((CONFIGS / "llama-3.1-70b.json").read_text())
    raw["quantization_config"] = {"quant_method": "awq", "bits": 4}
    model, unmapped = import_hf_config(raw, "x", "test")
    assert model["precision"]["matmul"] == "bf16"
    assert len(unmapped) == 1 and unmapped[0].startswith("quantization_config")


# --------------------------------------------------------------------------- (f) CLI
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
    assert code == 0 and stdout == "" and err == "", err
    m, _ = load_model(str(out))
    assert m.name == "my-llama"
    assert _dump(m) | {"name": "llama-3.1-70b"} == _dump(load_model("llama-3.1-70b")[0])


@pytest.mark.parametrize("name", MODELS)
def test_show_builtin(cli, name):
    code, out, err = cli("model", "show", name, "-f", "json")
    assert code == 0 and err == "", err
