"""The cost model against values worked out by hand at FIXED parameter values (not the shipped
fit), and against physical structure. A bug in a formula fails here whatever a re-fit does
with the fitted parameters (benchmarks/mutation.py plants such bugs and re-fits).

Fixed parameters: kernel launch 2 us, vector rate 1e12 op/s, 0.1 us per message, cv 0.1.
Achievable HBM: 1.6e12 x 0.841 = 1.3456e12 B/s. A UB barrier round: 2 x 2.1 us = 4.2 us.
"""

import math

import numpy as np
import pytest

from cmperf.cost.collectives import barrier_wait_s, expected_max_normal
from cmperf.cost.ops import attention_decode_ops, moe_ops, placement
from cmperf.cost.roofline import op_time
from cmperf.predict import load_specs, predict

FIXED = ["chip.latency.kernel_launch_s=2e-6", "chip.die.vector_ops_per_s=1e12",
         "system.collectives.message_issue_s=1e-7", "system.collectives.step_time_cv=0.1"]
HBM = 1.6e12 * 0.841
ROUND = 2 * 2.1e-6
EXPERT = 3 * 7168 * 2048
US = 1e-6


@pytest.fixture(scope="module")
def fixed():
    return load_specs(sets=FIXED)


@pytest.fixture(scope="module")
def views(fixed):
    return fixed.views()


def test_expected_maximum_of_normals_matches_tables():
    # E[max of n standard normals] (Tippett 1925; Harter 1961): 1/sqrt(pi), 3/(2 sqrt(pi)), ...
    g = expected_max_normal(np.array([1, 2, 3, 5, 10, 100]))
    assert g == pytest.approx([0.0, 1 / math.sqrt(math.pi), 1.5 / math.sqrt(math.pi), 1.16296, 1.53875, 2.50759],
                              abs=2e-4)


def test_barrier_wait_grows_with_group_load_and_spread():
    assert float(barrier_wait_s(100e-6, 10, 0.1)) == pytest.approx(0.1 * 100e-6 * 1.53875, rel=1e-3)
    w = barrier_wait_s(100e-6, np.array([2, 8, 32, 320]), 0.1)
    assert np.all(np.diff(w) > 0)
    assert float(barrier_wait_s(100e-6, 320, 0.0)) == 0.0
    assert float(barrier_wait_s(200e-6, 320, 0.1)) == pytest.approx(2 * float(barrier_wait_s(100e-6, 320, 0.1)))


def test_decode_attention_core_on_the_attention_stream(views):
    """D1 with two microbatches: 24 requests, 48 tokens (MTP) per die and microbatch, 4K
    cache, on 16 of 24 cube and 32 of 48 vector cores. FlashAttention's cube and vector
    work alternate block by block, so they add."""
    hw, m = views
    _, core, _ = attention_decode_ops(m, 48.0, 24.0, 4096)
    t = op_time(core, hw, 16 / 24, 32 / 48)
    compute = 2 * 48 * 128 * (576 + 512) * 4096 / (376e12 * 0.654 * 16 / 24)  # 334.0 us
    vector = 5 * 48 * 128 * 4096 / (1e12 * 32 / 48)  # softmax, 5 op per score: 188.7 us
    memory = (24 * 4096 * 576 * 2 + 48 * 128 * 1088 * 2) / HBM  # BF16 cache read once: 94.1 us
    assert float(t.compute_s) == pytest.approx(compute, rel=1e-9)
    assert float(t.vector_s) == pytest.approx(vector, rel=1e-9)
    assert float(t.memory_s) == pytest.approx(memory, rel=1e-9)
    assert float(t.time_s) == pytest.approx(compute + vector + 2 * US, rel=1e-9)  # 524.8 us


def test_decode_dispatch_on_the_moe_stream(views):
    """D1's dispatch per microbatch on the MoE stream (8 of 24 cube, 16 of 48 vector cores):
    the messages go through the die's communication engine, which the stream does not own."""
    hw, m = views
    pl = placement(m, 48.0, 320, 32, 32, 1.0, 128)
    _, dispatch, _, _ = moe_ops(m, 48.0, 320, pl)
    t = op_time(dispatch, hw, 1 / 3, 1 / 3)
    messages = 48 * (8 * 319 / 320 + 1)  # 430.8: 8 routed experts (1/320 local) + the remote shared copy
    engine = messages * 0.1 * US  # 43.1 us
    link = max(messages, 480 * 319 / 320) * 7680 / 135e9  # the shared-copy die receives 478.5: 27.2 us
    vector = 48 * 3 * 7168 / (1e12 / 3)  # quantise before sending: 3.1 us
    latency = 2 * US + 9 * ROUND  # launch + ceil(log2 320) = 9 barrier rounds: 39.8 us
    assert float(t.network_s) == pytest.approx(max(engine, link), rel=1e-9)
    assert float(t.vector_s) == pytest.approx(vector, rel=1e-9)
    assert float(t.latency_s) == pytest.approx(latency, rel=1e-9)
    assert float(t.time_s) == pytest.approx(engine + latency, rel=1e-9)  # 82.9 us
    full = op_time(dispatch, hw)
    assert float(t.time_s) == pytest.approx(float(full.time_s), rel=0.05)  # a third of the cores: ~no change


def test_table7_dispatch_at_ep8(fixed):
    """Table 7's micro-benchmark: 128 tokens per rank, top-8 of 256 experts over 8 dies."""
    t = predict("collective", {"tokens": 128, "ep": 8}, fixed).table
    messages = 128 * 8 * 7 / 8  # 896 remote
    link = messages * 7680 / 135e9  # 51.0 us
    expect = max(messages * 0.1 * US, link, 128 * 3 * 7168 / 1e12) + 2 * US + 3 * ROUND  # 104.2 us
    assert t["dispatch_us"].iat[0] == pytest.approx(expect / US, rel=1e-9)
    combine_link = messages * 14336 / 135e9  # 95.1 us: combine moves twice the bytes
    expect_c = max(messages * 0.1 * US, combine_link) + 2 * US + 3 * ROUND
    assert t["combine_us"].iat[0] == pytest.approx(expect_c / US, rel=1e-9)


def test_memory_bound_ops_do_not_slow_with_fewer_cores(views):
    """Sanity: an op bound by bandwidth or latency does not slow down in proportion to the
    cores it lost; a compute-bound one does."""
    hw, m = views
    prolog, _, o_proj = attention_decode_ops(m, 48.0, 24.0, 4096)
    for op in (prolog, o_proj):
        assert float(op_time(op, hw, 2 / 3, 2 / 3).time_s) == pytest.approx(float(op_time(op, hw).time_s), rel=1e-9)
    pl = placement(m, 480.0, 32, 32, 32, 1.0, 128)
    experts = moe_ops(m, 480.0, 32, pl)[2]
    assert float(op_time(experts, hw, 1 / 3, 1 / 3).compute_s) == pytest.approx(3 * float(op_time(experts, hw).compute_s))


def test_kv_transfer_over_rdma(fixed):
    """P1: 8,192 prompt tokens per die, latent cache of 61 + 1 (MTP) layers in BF16, sent
    once over the die's 200 Gbps RDMA port."""
    t = predict("prefill", {}, fixed).table
    kv = 8192 * 576 * 62 * 2  # 585 MB
    assert t["kv_transfer_ms"].iat[0] == pytest.approx((kv / 25e9 + 5e-6) * 1e3, rel=1e-9)  # 23.4 ms


def test_kv_memory_holds_prompt_and_output(fixed):
    t = predict("decode", {"batch": 96, "prompt_len": 4096, "output_len": 256}, fixed).table
    assert t["kv_cache_per_die_bytes"].iat[0] == pytest.approx(48 * (4096 + 256) * 576 * 62 * 2)


def test_expert_weights_counted_per_instance(fixed):
    """EP32 holds 10 expert instances per die, EP320 one: 9 more per MoE layer (58 + MTP)."""
    t = predict("decode", rows=[{"dies": 32, "ep": 32}, {"dies": 320, "ep": 320}], specs=fixed).table
    t = t.set_index("ep")
    assert t.loc[32, "weights_per_die_bytes"] - t.loc[320, "weights_per_die_bytes"] == pytest.approx(9 * EXPERT * 59)
    ops, _ = predict("prefill", {}, fixed).breakdown(0)
    experts = ops[(ops["section"] == "moe_layer") & (ops["op"] == "experts")]
    assert experts["weight_bytes"].iat[0] == 10 * EXPERT  # re-read by every microbatch


def test_combine_adds_the_residual(views):
    hw, m = views
    from cmperf.cost.ops import Placement

    one = Placement(instances_per_die=np.asarray(1.0), rows=np.asarray(9.0), padded_rows=np.asarray(128.0),
                    shared_remote=np.asarray(True), remote_routed_fraction=np.asarray(1.0))
    combine = moe_ops(m, 1.0, 320, one)[3]
    # weighted sum of 9 expert outputs and the token's own (2 op each), + the residual add
    assert float(combine.vector_ops) == 7168 * (2 * (9 + 1) + 1)


def test_layer_counts_and_mtp_tokens(fixed):
    """61 layers = 3 dense + 58 MoE, one MTP draft step; the MTP module sees one token per
    request where the main model sees two (the verified token and the draft)."""
    r = predict("decode", {"batch": 96, "microbatches": 2}, fixed)
    ops, sections = r.breakdown(0)
    count = sections.set_index("section")["count"]
    assert count["dense_layer"] == 3 and count["moe_layer"] == 58 and count["mtp_layer"] == 1
    core = ops[ops["op"] == "attention_core"].set_index("section")["flops"]
    assert core["mtp_layer"] == pytest.approx(core["moe_layer"] / 2)
    assert core["moe_layer"] == pytest.approx(2 * 48 * 128 * 1088 * 4224)  # 48 tokens per microbatch


def test_serial_layer_is_stages_plus_waits(fixed):
    """One microbatch: the layer is every op in series plus the two barrier waits, each the
    expected maximum over 320 dies of the load spread since the previous barrier."""
    r = predict("decode", {"batch": 96, "kv_len": 4096, "microbatches": 1}, fixed)
    ops, sections = r.breakdown(0)
    moe = ops[ops["section"] == "moe_layer"].set_index("op")
    serial = moe["time_us"].sum()
    layer = sections.set_index("section").loc["moe_layer", "time_us"]
    assert layer == pytest.approx(serial + r.table["barrier_wait_us"].iat[0], rel=1e-9)
    g320 = float(expected_max_normal(320))
    assert 2.85 < g320 < 2.95
    wait = r.table["barrier_wait_us"].iat[0]
    # the load before dispatch is at least the attention core's chain, before combine the experts' compute
    assert wait >= 0.1 * g320 * (moe.loc["attention_core", "compute_us"] + moe.loc["experts", "compute_us"])


def test_halving_context_shortens_the_layer_by_half_the_attention_core(fixed):
    """With one microbatch and no spread, the cache length enters the layer only through the
    attention core (its cube + vector chain is linear in the context)."""
    specs = load_specs(sets=FIXED[:3] + ["system.collectives.step_time_cv=0"])
    r = predict("decode", {"batch": 96, "kv_len": [4096, 2048], "microbatches": 1}, specs)
    layer = r.table["layer_us"].to_numpy()
    ops, _ = r.breakdown(0)
    core = ops[(ops["section"] == "moe_layer") & (ops["op"] == "attention_core")].iloc[0]
    assert layer[0] - layer[1] == pytest.approx(0.5 * (core["time_us"] - core["latency_us"]), rel=1e-9)


def test_two_microbatches_win_at_the_papers_batch_and_lose_at_batch_8(specs):
    t = predict("decode", {"batch": [8, 96], "kv_len": 4096}, specs).table.set_index("batch")
    assert t.loc[96, "microbatch_gain"] > 0.03 and t.loc[96, "microbatches_used"] == 2
    assert t.loc[8, "microbatch_gain"] < 0 and t.loc[8, "microbatches_used"] == 1


def test_overlap_hides_waits_only_in_the_slack(fixed):
    """More spread never helps, and hurts one microbatch more than two."""
    base = load_specs(sets=FIXED[:3] + ["system.collectives.step_time_cv=0"])
    noisy = load_specs(sets=FIXED[:3] + ["system.collectives.step_time_cv=0.2"])
    q = {"batch": 96, "kv_len": 4096, "microbatches": [1, 2]}
    a = predict("decode", q, base).table["layer_us"].to_numpy()
    b = predict("decode", q, noisy).table["layer_us"].to_numpy()
    assert np.all(b >= a)
    assert b[0] - a[0] > b[1] - a[1]


def test_stream_times_only_for_two_microbatches(specs):
    t = predict("decode", {"batch": 8, "microbatches": [1, 2]}, specs).table
    assert np.isnan(t["stream_a_us"].iat[0]) and np.isnan(t["stream_b_us"].iat[0])
    assert t["stream_a_us"].iat[1] > 0 and t["stream_b_us"].iat[1] > 0


def test_prediction_bands(specs):
    from cmperf.bands import band_for

    b = band_for("decode", "cloudmatrix384").relative
    t = predict("decode", {}, specs).table
    assert t["tpot_ms_lo"].iat[0] == pytest.approx(t["tpot_ms"].iat[0] * (1 - b))
    assert t["tpot_ms_hi"].iat[0] == pytest.approx(t["tpot_ms"].iat[0] * (1 + b))
    assert t["throughput_per_npu_lo"].iat[0] < t["throughput_per_npu"].iat[0] < t["throughput_per_npu_hi"].iat[0]
    p = predict("prefill", {}, specs).table
    assert p["ttft_ms_lo"].iat[0] < p["ttft_ms"].iat[0] < p["ttft_ms_hi"].iat[0]


def test_prefill_tensor_parallel_collectives_over_ub(views):
    """P1's SP -> TP all-gather and TP -> SP all-to-all per microbatch (4,096 tokens per die,
    TP 4) are bulk copies over the UB plane: bytes / 135 GB/s + launch + ceil(log2 4) rounds."""
    from cmperf.cost.ops import attention_prefill_ops

    hw, m = views
    _, gather, _, _, a2a, _ = attention_prefill_ops(m, 4096.0, 4096, 4)
    rounds = 2 * US + 2 * ROUND
    gather_bytes = 3 * 4096 * (1536 + 576) * 2  # the compressed q and kv of the 3 other dies, BF16
    a2a_bytes = 4096 * 3 / 4 * 128 * 128 * 2  # 3/4 of the attention outputs leave the die
    assert float(op_time(gather, hw).time_s) == pytest.approx(gather_bytes / 135e9 + rounds, rel=1e-9)  # 394.9 us
    assert float(op_time(a2a, hw).time_s) == pytest.approx(a2a_bytes / 135e9 + rounds, rel=1e-9)  # 756.1 us
