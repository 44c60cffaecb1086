"""Derived facts against values derived by hand from the published configuration
(reference §3): the arithmetic is written out here, independently of cmperf.cost.arch."""

import pytest

from cmperf.cost import arch
from cmperf.cost.ops import flops_per_token
from cmperf.facts import chip_facts, system_facts

H, V, LAYERS, DENSE = 7168, 129280, 61, 3
Q_A = H * 1536
Q_B = 1536 * 128 * (128 + 64)
KV_A = H * (512 + 64)
KV_B = 512 * 128 * (128 + 128)
O = 128 * 128 * H
MLA = Q_A + Q_B + KV_A + KV_B + O  # 187,105,280
EXPERT = 3 * H * 2048  # 44,040,192
DENSE_FFN = 3 * H * 18432
ROUTER = 256 * H + 256


def test_mla_weights_per_layer(model):
    assert MLA == 187_105_280
    assert sum(arch.attention_weights(model).values()) == MLA


def test_total_parameters_671b_within_1pct(model):
    pb = arch.param_breakdown(model)
    hand = LAYERS * MLA + DENSE * DENSE_FFN + 58 * (257 * EXPERT + ROUTER) + 2 * V * H
    assert pb.total == pytest.approx(671e9, rel=0.01)
    assert pb.total == pytest.approx(hand, rel=1e-5)  # norms are the only difference


def test_first_three_layers_are_dense_not_moe(model):
    pb = arch.param_breakdown(model)
    assert pb.dense_ffn == 3 * DENSE_FFN
    assert pb.routed_experts == 58 * 256 * EXPERT
    assert pb.shared_experts == 58 * EXPERT


def test_mtp_module_adds_about_14b(model):
    pb = arch.param_breakdown(model)
    block = MLA + 256 * EXPERT + EXPERT + ROUTER
    assert pb.mtp == pytest.approx(block + 2 * H * H, rel=1e-4)
    # on disk: 685B (the MTP module stores its own embedding and head)
    assert pb.total_with_mtp == pytest.approx(685e9, rel=0.01)
    assert pb.total_with_mtp - pb.total == pytest.approx(14e9, rel=0.05)


def test_activated_parameters_about_37b(model):
    hand = LAYERS * MLA + DENSE * DENSE_FFN + 58 * (9 * EXPERT + 256 * H) + V * H
    assert arch.activated_matmul_params(model) == pytest.approx(hand, rel=1e-6)
    assert hand == pytest.approx(37e9, rel=0.03)


def test_kv_cache_bytes_per_token(model):
    assert arch.kv_bytes_per_token(model, 2) == 70_272
    assert arch.kv_bytes_per_token(model, 1) == 35_136


def test_flops_per_token_at_4k(model):
    linear = 2 * (LAYERS * MLA + DENSE * DENSE_FFN + 58 * (9 * EXPERT + 256 * H))
    head = 2 * V * H
    decode_attn = LAYERS * 2 * 128 * (576 + 512) * 4096  # absorbed MLA over the latent cache
    prefill_attn = LAYERS * 2 * 128 * (192 + 128) * (4096 + 1) / 2  # causal MHA, average token
    d = flops_per_token(model, 4096, "decode")
    p = flops_per_token(model, 4096, "prefill")
    assert d["attention_core"] == pytest.approx(decode_attn, rel=1e-9)
    assert d["total"] == pytest.approx(linear + head + decode_attn, rel=1e-9)
    assert p["attention_core"] == pytest.approx(prefill_attn, rel=1e-9)
    assert p["total"] == pytest.approx(linear + head / 4096 + prefill_attn, rel=1e-9)
    assert d["total"] == pytest.approx(142.84e9, rel=1e-3)


def _fact(records, quantity):
    return next(r["value"] for r in records if r["quantity"] == quantity)


def test_ridge_points(specs):
    f = chip_facts(specs.hardware.chip)
    assert _fact(f, "bf16 (peak / HBM bandwidth)") == pytest.approx(376e12 / 1.6e12)  # 235 FLOP/B
    assert _fact(f, "int8 (peak / HBM bandwidth)") == pytest.approx(470.0)
    assert _fact(f, "int8 per package") == pytest.approx(1504e12)


def test_system_totals(specs):
    f = system_facts(specs.hardware)
    assert _fact(f, "chips") == 384
    assert _fact(f, "dies") == 768
    assert _fact(f, "HBM") == pytest.approx(384 * 128e9)
    assert _fact(f, "node uplink to L2") == pytest.approx(7 * 16 * 28e9)
    assert _fact(f, "node uplink to L2") == pytest.approx(8 * 392e9)  # non-blocking
    assert _fact(f, "bisection (unidirectional)") == pytest.approx(192 * 392e9)
    assert _fact(f, "L2 port capacity") == pytest.approx(48 * 8 * 392e9)
