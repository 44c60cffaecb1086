"""The attention forms that are not dense (docs/model.md §1.2, §1.4, §2.6-§2.8): DSA's lightning
indexer and sparse MLA core (DeepSeek-V3.2), Gated DeltaNet linear layers (Qwen3-Next), sliding
windows and sinks (gpt-oss), and the cache of a sequence by layer kind.

Every number below is worked by hand from the model's config.json shapes (the arithmetic is in
the comment and in docs/model.md), never the builder's formula re-typed: a planted bug in any of
the new formulas fails one of them. The structural tests check what the forms are for: DSA's
decode time grows with the context far more slowly than dense MLA's, its indexer linearly; a
linear layer's time and memory do not grow at all; a window caps its layers' KV."""

from __future__ import annotations

import numpy as np
import pytest

from cmperf.cost import arch
from cmperf.cost.ops import attention_decode_ops, attention_prefill_ops, capped_tokens
from cmperf.predict import load_specs, predict


@pytest.fixture(scope="module")
def v32():
    return load_specs("cloudmatrix384", "deepseek-v3.2").views()[1]


@pytest.fixture(scope="module")
def r1():
    return load_specs("cloudmatrix384", "deepseek-r1").views()[1]


@pytest.fixture(scope="module")
def q3n():
    return load_specs("cloudmatrix384", "qwen3-next-80b-a3b").views()[1]


@pytest.fixture(scope="module")
def oss():
    return load_specs("cloudmatrix384", "gpt-oss-120b").views()[1]


def by_name(ops):
    return {o.name: o for o in ops}


# --------------------------------------------------------------------------- DSA (§2.6)
def test_indexer_and_sparse_core_by_hand(v32):
    """One token of one request with 8,192 cached tokens, DeepSeek-V3.2's shapes: 64 indexer
    heads of 128 dims, top-2,048, 8-bit indexer keys (132 B with their FP32 scale), BF16
    latent (576 values, 2 B)."""
    ops = by_name(attention_decode_ops(v32, 1.0, 1.0, 8192))
    s = ops["indexer_scores"]
    assert float(s.flops) == 2 * 64 * 128 * 8192 == 134_217_728
    assert float(s.vector_ops) == 3 * 64 * 8192 == 1_572_864  # ReLU, weight, sum per head and pair
    # cache 8,192 x 132 + the query and weights 64 x (128 + 4) + FP32 scores 8,192 x 4
    assert float(s.hbm_bytes) == 8192 * 132 + 64 * 132 + 8192 * 4 == 1_122_560
    t = ops["topk_select"]
    assert float(t.vector_ops) == 8 * 8192 == 65_536  # four 8-bit radix passes, read + histogram each
    assert float(t.hbm_bytes) == 8192 * 4 + 2048 * 4 == 40_960
    c = ops["sparse_attention_core"]
    assert float(c.flops) == 2 * 128 * (576 + 512) * 2048 == 570_425_344
    # the 2,048 selected latents and their indices, the absorbed query and output of 128 heads
    assert float(c.hbm_bytes) == 2048 * (576 * 2 + 4) + 128 * 1088 * 2 == 2_646_016
    p = ops["indexer_proj"]
    # idx_q 1536 x 64 x 128, idx_k 7168 x 128, idx_w 7168 x 64: 13,959,168 weights, 2 FLOPs each
    assert float(p.flops) == 2 * (1536 * 8192 + 7168 * 128 + 7168 * 64) == 27_918_336
    dense = attention_decode_ops(load_specs("cloudmatrix384", "deepseek-r1").views()[1], 1.0, 1.0, 8192)[1]
    assert float(dense.flops) == 2 * 128 * 1088 * 8192 == 2_281_701_376
    assert float(dense.hbm_bytes) == 8192 * 1152 + 128 * 1088 * 2 == 9_715_712


def test_what_a_request_reads_once_and_what_each_token_reads(v32, q3n):
    """Two tokens of one request (MTP: the last token and its draft). The indexer reads the
    request's keys once (8,192 x 132 B) but scores and selects per token; the sparse core
    gathers each token's own 2,048 latents; a linear layer reads the state once and writes it
    per token (a draft's state is kept until verified)."""
    ops = by_name(attention_decode_ops(v32, 2.0, 1.0, 8192))
    assert float(ops["indexer_scores"].hbm_bytes) == 8192 * 132 + 2 * 64 * 132 + 2 * 8192 * 4
    assert float(ops["sparse_attention_core"].hbm_bytes) == 2 * 2048 * 1156 + 2 * 128 * 1088 * 2
    step = by_name(attention_decode_ops(q3n, 2.0, 1.0, 8192, kind="linear"))["linear_attention"]
    assert float(step.hbm_bytes) == 3 * 1_097_728 + 2 * (8192 + 2 * 4096 + 64) * 2
    # TP 4 splits the 16 key heads (and their value heads) four ways: a quarter of the state per die
    step = by_name(attention_decode_ops(q3n, 4.0, 4.0, 8192, tp=4.0, kind="linear"))["linear_attention"]
    assert float(step.hbm_bytes) == (4 + 4) * 1_097_728 / 4 + 4 * (8192 + 2 * 4096 + 64) * 2 / 4


def test_indexer_scores_grow_linearly_and_the_core_stops_at_top_k(v32):
    L = np.array([4096.0, 8192.0, 16384.0, 131072.0])
    ops = by_name(attention_decode_ops(v32, 48.0, 24.0, L))
    flops = ops["indexer_scores"].flops
    assert flops / L == pytest.approx(np.full(4, 48 * 2 * 64 * 128))  # proportional to L
    cache = np.asarray(ops["indexer_scores"].hbm_bytes)
    slope = np.diff(cache) / np.diff(L)
    assert slope == pytest.approx(np.full(3, 24 * 132 + 48 * 4))  # each request's keys + each token's scores
    assert np.ptp(ops["sparse_attention_core"].flops) == 0  # 2,048 keys at every L > 2,048
    # at L <= top-k every key is selected: no scores, no top-k, the core attends L
    short = by_name(attention_decode_ops(v32, 1.0, 1.0, 1024.0))
    assert float(short["indexer_scores"].flops) == 0 and float(short["topk_select"].launches) == 0
    assert float(short["sparse_attention_core"].flops) == 2 * 128 * 1088 * 1024


def _tpot(model, kv_len):
    r = predict("decode", {"batch": 8, "kv_len": kv_len, "mtp": 0, "microbatches": 1},
                load_specs("cloudmatrix384", model), strict=False)
    return float(r.columns["tpot_ms"].iat[0])


def test_dsa_decode_grows_far_more_slowly_than_dense_mla():
    """Same instance (cloudmatrix384's defaults at batch 8, no MTP), 16K -> 128K tokens: dense
    MLA's core adds 278,528 FLOPs and 1,152 B per key; DSA's indexer 16,384 FLOPs, 132 B and a
    few vector operations per key. The difference of the two TPOT slopes is that ratio's order."""
    dense = _tpot("deepseek-r1", 131072) - _tpot("deepseek-r1", 16384)
    sparse = _tpot("deepseek-v3.2", 131072) - _tpot("deepseek-v3.2", 16384)
    assert 0 < sparse < 0.25 * dense, (sparse, dense)
    # below the top-k DSA is dense MLA over all keys plus the indexer's projections: no faster
    assert _tpot("deepseek-v3.2", 2048) >= 0.99 * _tpot("deepseek-r1", 2048)


def test_dsa_prefill_by_hand(v32):
    """A 4,096-token prompt, one die, TP 1: token i attends min(i, 2048) selected keys, on
    average (2048 x 2049 / 2 + 2048 x 2048) / 4096 = 1,536.25 (capped_tokens), in MQA mode
    (2 x 128 x 1088 FLOPs per pair); the indexer scores (4096 + 1)/2 keys per token."""
    assert float(capped_tokens(4096, 0, 2048)) == (2048 * 2049 / 2 + 2048 * 2048) / 4096 == 1536.25
    ops = by_name(attention_prefill_ops(v32, 4096.0, 4096.0, 1.0))
    assert float(ops["sparse_attention_core"].flops) == pytest.approx(2 * 4096 * 128 * 1088 * 1536.25, rel=1e-12)
    assert float(ops["indexer_scores"].flops) == pytest.approx(2 * 64 * 128 * 4096 * 2048.5, rel=1e-12)
    short = by_name(attention_prefill_ops(v32, 2048.0, 2048.0, 1.0))  # P <= top-k: the fast path
    assert float(short["indexer_scores"].flops) == 0 and float(short["topk_select"].vector_ops) == 0


# --------------------------------------------------------------------------- Gated DeltaNet (§2.7)
def test_deltanet_decode_step_by_hand(q3n):
    """One Qwen3-Next token at TP 1: 32 value heads with a 128 x 128 state; per state element a
    decay and three FMAs (7 FLOPs, 4 element ops); a 4-tap conv over 2 x 2048 + 4096 = 8,192
    channels (2 x 4 FLOPs each); the BF16 state (32 x 128 x 128 + 3 x 8,192 elements =
    1,097,728 B) read once and written once."""
    ops = by_name(attention_decode_ops(q3n, 1.0, 1.0, 65536.0, kind="linear"))
    step = ops["linear_attention"]
    assert float(step.flops) == 7 * 32 * 128 * 128 + 2 * 4 * 8192 == 3_735_552
    assert float(step.hbm_bytes) == 2 * 1_097_728 + (8192 + 2 * 4096 + 64) * 2 == 2_228_352
    # 4 per state element; conv taps + SiLU on 8,192; L2 norms of q, k (4 x 4,096); gates 10 x 32;
    # gated RMSNorm (4 + 5) x 4,096
    assert float(step.vector_ops) == 4 * 524_288 + 8 * 8192 + 4 * 4096 + 10 * 32 + 9 * 4096 == 2_216_256
    proj = ops["linear_proj"]
    # qkvz 2048 x (2 x 2048 + 2 x 4096) + ba 2048 x 64
    assert float(proj.weight_bytes) == (2048 * 12288 + 2048 * 64) * 2


def test_deltanet_chunked_prefill_by_hand(q3n):
    """Per token and value head, in multiply-adds (chunks of 64): 3 x 128 x 128 across chunks,
    3 x 64 x 128 + 2 x 64 x 128 within, 64^2 / 6 for the triangular inverse; 2 FLOPs each, x 32
    heads, + the conv's 2 x 4 x 8,192. The same per token at any prompt length."""
    per_token = 2 * 32 * (3 * 128 * 128 + 3 * 64 * 128 + 2 * 64 * 128 + 64 * 64 / 6) + 2 * 4 * 8192
    for P in (4096.0, 131072.0):
        scan = by_name(attention_prefill_ops(q3n, 1024.0, P, 1.0, kind="linear"))["linear_scan"]
        assert float(scan.flops) == pytest.approx(1024 * per_token, rel=1e-12)
        assert float(scan.flops) == pytest.approx(1024 * 5_876_394.667, rel=1e-9)


def test_a_linear_layer_does_not_grow_with_context():
    """Qwen3-Next decode at batch 8: the linear layers' stack takes the same time at 4K and at
    128K tokens; the KV grows by the 12 full layers' 2 x 2 x 256 x 2 B x 12 = 24,576 B per token
    only (the 36 linear layers' state is the same 39.5 MB per request)."""
    specs = load_specs("cloudmatrix384", "qwen3-next-80b-a3b")
    r = predict("decode", {"batch": 8, "kv_len": [4096, 131072], "dies": 16, "tp": 1}, specs, strict=False)

    def section(row, name):
        return next(s for s in r.breakdown_records(row)[1] if s["section"] == name)["time_us"]

    assert section(0, "moe_layer_linear") == pytest.approx(section(1, "moe_layer_linear"), rel=1e-12)
    assert section(1, "moe_layer") > 2 * section(0, "moe_layer")  # the full layers do grow
    kv = r.columns["kv_cache_per_die_bytes"].to_numpy()
    R_die = 8 / 2  # requests per die: 8 per NPU, two dies
    assert kv[1] - kv[0] == pytest.approx(R_die * 24_576 * (131072 - 4096), rel=1e-12)
    assert kv[0] == pytest.approx(R_die * (24_576 * 4096 + 36 * 1_097_728), rel=1e-12)  # no MTP: kv_len tokens


# --------------------------------------------------------------------------- windows and sinks (§2.8)
def test_window_layer_by_hand(oss):
    """gpt-oss, one token at 131,072 cached tokens: a window layer attends 128 of them (64 heads
    of 64 dims, 8 KV heads, BF16), a full layer all; sinks add one score per head."""
    window = by_name(attention_decode_ops(oss, 1.0, 1.0, 131072.0, kind="window"))["window_attention_core"]
    full = by_name(attention_decode_ops(oss, 1.0, 1.0, 131072.0, kind="full"))["attention_core"]
    assert float(window.flops) == 2 * 64 * 2 * 64 * 128 == 2_097_152
    assert float(window.hbm_bytes) == 128 * 2 * 8 * 64 * 2 + 2 * 64 * 64 * 2 == 278_528
    assert float(window.vector_ops) == 5 * 64 * (128 + 1) == 41_280
    assert float(full.flops) == 2 * 64 * 2 * 64 * 131072 == 2_147_483_648
    # prefill: the mean of min(i, 128) over i = 1..4,096 = (128 x 129 / 2 + 3,968 x 128) / 4,096
    core = by_name(attention_prefill_ops(oss, 4096.0, 4096.0, 1.0, kind="window"))["window_attention_core"]
    assert float(core.flops) == pytest.approx(4096 * 2 * 64 * 2 * 64 * (8256 + 3968 * 128) / 4096, rel=1e-12)


def test_the_window_caps_the_kv():
    """gpt-oss decode at batch 8: beyond 128 tokens only the 18 full layers' KV grows,
    2 x 8 x 64 x 2 B x 18 = 36,864 B per token; the 18 window layers hold at most 128 tokens,
    4,718,592 B per request. A model whose every layer is a window holds no more at 128K than
    at 4K."""
    specs = load_specs("cloudmatrix384", "gpt-oss-120b")
    r = predict("decode", {"batch": 8, "kv_len": [4096, 131072], "dies": 8, "tp": 1}, specs, strict=False)
    kv = r.columns["kv_cache_per_die_bytes"].to_numpy()
    assert kv[1] - kv[0] == pytest.approx(4 * 36_864 * (131072 - 4096), rel=1e-12)
    assert kv[0] == pytest.approx(4 * (36_864 * 4096 + 4_718_592), rel=1e-12)
    all_window = load_specs("cloudmatrix384", "gpt-oss-120b", ["model.layer_pattern=[window]"])
    w = predict("decode", {"batch": 8, "kv_len": [4096, 131072], "dies": 8, "tp": 1}, all_window, strict=False)
    kv = w.columns["kv_cache_per_die_bytes"].to_numpy()
    assert kv[0] == kv[1] == pytest.approx(4 * 36 * 2048 * 128, rel=1e-12)


# --------------------------------------------------------------------------- the cache (§1.2)
def test_cache_per_sequence_by_hand(v32, q3n, oss):
    # DSA: (576 x 2 + 132) x 61 layers per token; with the MTP layer, 62
    assert float(arch.kv_cache(v32, 2).bytes(1)) == 78_324
    assert float(arch.kv_cache(v32, 2, mtp_on=1).bytes(1000)) == 1284 * 62 * 1000
    # Qwen3-Next: 12 full layers' K and V + 36 fixed states, from the first token on
    assert float(arch.kv_cache(q3n, 2).bytes(10_000)) == 24_576 * 10_000 + 39_518_208
    assert float(arch.kv_cache(q3n, 2).bytes(0)) == 0
    # gpt-oss: 18 full layers per token, 18 window layers up to 128 tokens
    assert float(arch.kv_cache(oss, 2).bytes(100)) == 2 * 36_864 * 100
    assert float(arch.kv_cache(oss, 2).bytes(131072)) == 36_864 * 131072 + 36_864 * 128 == 4_836_556_800


def test_the_breakdown_shows_the_new_forms(cli):
    for model, needles in (("deepseek-v3.2", ("indexer_proj", "indexer_scores", "topk_select", "sparse_attention_core")),
                           ("qwen3-next-80b-a3b", ("moe_layer_linear", "linear_attention", "linear_proj", "attention_core")),
                           ("gpt-oss-120b", ("moe_layer_window", "window_attention_core", "attention_core"))):
        code, out, err = cli("predict", "decode", "--model", model, "--kv-len", "131072", "--breakdown")
        assert code == 0, err
        for n in needles + ("kv_cache_per_die_bytes", "memory_per_die_bytes"):
            assert n in out, (model, n)


# --------------------------------------------------------------------------- the schema
BAD = [
    ("layer_pattern: [window, full]\n", "sliding_window"),
    ("layer_pattern: [linear, full]\n", "linear_attention"),
    ("layer_pattern: [full, full, full, full, full]\n", "does not divide num_layers"),
    ("layer_pattern: [dense]\n", "layer_pattern"),
    ("linear_attention: {type: gated_deltanet, key_heads: 3, value_heads: 8, key_head_dim: 128, value_head_dim: 128,"
     " conv_kernel: 4, state_dtype: bf16}\nlayer_pattern: [linear, full]\n", "key_heads (3) must divide value_heads (8)"),
]


@pytest.mark.parametrize("extra, needle", BAD)
def test_bad_attention_fields_are_one_line(cli, tmp_path, extra, needle):
    from pathlib import Path

    from helpers import one_line_error

    text = (Path(__file__).resolve().parents[1] / "models" / "qwen3-30b-a3b.yaml").read_text() + "\n" + extra
    f = tmp_path / "m.yaml"
    f.write_text(text)
    code, _, err = cli("model", "show", f)
    one_line_error(code, err, needle)


@pytest.mark.parametrize("change, needle", [
    ("model.attention.q_lora_rank=null", "q_lora_rank"),
    ("model.attention.indexer.topk=0", "topk"),
])
def test_bad_dsa_fields_are_one_line(cli, change, needle):
    from helpers import one_line_error

    code, _, err = cli("model", "show", "deepseek-v3.2", "--set", change)
    one_line_error(code, err, needle)


def test_an_indexer_dtype_needs_an_indexer(cli):
    from helpers import one_line_error

    code, _, err = cli("model", "show", "deepseek-r1", "--set", "model.precision.indexer=fp8")
    one_line_error(code, err, "precision.indexer")
