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
from cmperf.errors import SpecError
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


def test_kv_memory_holds_the_mean_context_and_the_drafts(fixed):
    """docs/model.md §7: a request holds the KV of the mean context a step attends (kv_len) and
    of its draft tokens; the peak, prompt + output (or kv_len when larger). MLA: 576 BF16
    values per token and layer, 61 layers + the MTP layer with MTP on; 48 requests per die."""
    rows = [{"batch": 96, "kv_len": 4096}, {"batch": 96, "kv_len": 4096, "mtp": 0},
            {"batch": 96, "kv_len": 8192, "prompt_len": 4096, "output_len": 256}]
    t = predict("decode", rows=rows, specs=fixed).table
    assert t["kv_cache_per_die_bytes"].tolist() == pytest.approx(
        [48 * (4096 + 1) * 576 * 62 * 2, 48 * 4096 * 576 * 61 * 2, 48 * (8192 + 1) * 576 * 62 * 2], rel=1e-12)
    assert t["kv_cache_peak_per_die_bytes"].tolist() == pytest.approx(
        [48 * (4096 + 256 + 1) * 576 * 62 * 2, 48 * (4096 + 256) * 576 * 61 * 2, 48 * (8192 + 1) * 576 * 62 * 2], rel=1e-12)
    # the default kv_len is prompt + output / 2, so a context given as lengths holds what the same kv_len does
    a = predict("decode", {"batch": 8, "prompt_len": 131072 - 128, "output_len": 256}, fixed).table
    b = predict("decode", {"batch": 8, "kv_len": 131072}, fixed).table
    assert a["kv_cache_per_die_bytes"].iat[0] == b["kv_cache_per_die_bytes"].iat[0]
    assert a["max_batch_per_npu"].iat[0] == b["max_batch_per_npu"].iat[0]


@pytest.mark.parametrize("system,model,extra", [("cloudmatrix384", "deepseek-r1", {}),
                                                ("h100-cluster", "llama-3.1-70b", {"dies": 8, "tp": 8}),
                                                ("h800-cluster", "deepseek-v3", {"dies": 16})])
def test_a_longer_context_never_fits_more_requests(system, model, extra):
    t = predict("decode", {"kv_len": [1024, 2000, 4224, 16384, 131072], "batch": 8, **extra},
                specs=load_specs(system, model)).table
    assert np.all(np.diff(t["max_batch_per_npu"].to_numpy()) <= 0)
    assert np.all(np.diff(t["memory_per_die_bytes"].to_numpy()) > 0)


def test_a_128k_context_at_the_papers_batch_does_not_fit(cli):
    """48 requests per die x 131,073 tokens x 70,272 B = 442 GB of KV on a 64 GB die."""
    import json

    code, out, err = cli("predict", "decode", "--kv-len", "131072", "--batch", "96", "--format", "json")
    assert code == 0, err
    row = json.loads(out)
    assert row["fits"] is False and row["max_batch_per_npu"] < 96
    assert row["kv_cache_per_die_bytes"] == pytest.approx(48 * 131073 * 576 * 62 * 2, rel=1e-12)
    assert "does not fit" in err


MEMORY_CASES = [("cloudmatrix384", "deepseek-r1", {}), ("cloudmatrix384", "deepseek-r1", {"chunk_tokens": 1024}),
                ("h100-cluster", "llama-3.1-70b", {"dies": 8, "tp": 8}),
                ("h100-cluster", "llama-3.1-70b", {"dies": 8, "tp": 8, "chunk_tokens": 512}),
                ("h800-cluster", "deepseek-v3", {"dies": 16}), ("h100-cluster", "qwen3-30b-a3b", {"dies": 8})]


def _memory_rows(phase: str, pool: str = "") -> list[str]:
    """The memory rows `cmperf predict` shows for ``phase`` (of an AFD pool: its own rows, the
    KV cache on the attention side, the reserve on both): every `*_per_die_bytes` but the
    totals, the HBM and the peak."""
    from cmperf.cli.predict import SUMMARY

    rows = [c for c in SUMMARY[phase] if c.endswith("_per_die_bytes") and "memory" not in c
            and c not in ("hbm_per_die_bytes", "kv_cache_peak_per_die_bytes")]
    if phase != "afd":
        return rows
    own = [c for c in rows if c.startswith(pool + "_")]
    return own + ["runtime_reserve_per_die_bytes"] + (["kv_cache_per_die_bytes"] if pool == "attention" else [])


@pytest.mark.parametrize("system,model,extra", MEMORY_CASES)
def test_the_memory_rows_shown_add_up_to_the_total(system, model, extra):
    """Every byte a die needs is on a row of `cmperf predict`: weights, KV, buffers,
    activations and the runtime reserve sum to memory_per_die_bytes, in decode, prefill and
    both pools of AFD."""
    specs = load_specs(system, model)
    shown = lambda t, rows: t[rows].sum(axis=1).to_numpy()  # noqa: E731
    d = predict("decode", {"batch": [8, 64], **extra}, specs).table
    assert len(_memory_rows("decode")) >= 5
    assert shown(d, _memory_rows("decode")) == pytest.approx(d["memory_per_die_bytes"].to_numpy(), rel=1e-12)
    pre = {k: v for k, v in extra.items() if k == "dies"} | ({"attn_tp": extra["tp"]} if "tp" in extra else {})
    p = predict("prefill", {"tokens_per_npu": [8192, 16384], **pre}, specs, strict=False).table
    assert len(p) and shown(p, _memory_rows("prefill")) == pytest.approx(p["memory_per_die_bytes"].to_numpy(), rel=1e-12)
    if specs.views()[1].moe is not None and system == "cloudmatrix384":
        a = predict("afd", {"batch": [8, 96]}, specs).table
        for pool in ("attention", "expert"):
            assert shown(a, _memory_rows("afd", pool)) == pytest.approx(a[f"{pool}_memory_per_die_bytes"].to_numpy(),
                                                                        rel=1e-12)


def test_expert_weights_counted_per_instance(fixed):
    """EP32 holds 10 expert instances per die, EP320 one: 9 more per MoE layer (58 + MTP)."""
    layout = {"redundant_experts": 32, "shared_copies": 32}
    t = predict("decode", rows=[{"dies": 32, "ep": 32, **layout}, {"dies": 320, "ep": 320, **layout}], specs=fixed).table
    t = t.set_index("ep")
    assert t.loc[32, "weights_per_die_bytes"] - t.loc[320, "weights_per_die_bytes"] == pytest.approx(9 * EXPERT * 59)
    ops, _ = predict("prefill", {}, fixed).breakdown(0)
    experts = ops[(ops["section"] == "moe_layer") & (ops["op"] == "experts")]
    assert experts["weight_bytes"].iat[0] == 10 * EXPERT  # re-read by every microbatch


def test_combine_sums_the_experts_and_the_residual_is_its_own_kernel(views):
    hw, m = views
    from cmperf.cost.ops import Placement, residual_add_op

    one = Placement(instances_per_die=np.asarray(1.0), rows=np.asarray(9.0), padded_rows=np.asarray(128.0),
                    shared_remote=np.asarray(True), remote_routed_fraction=np.asarray(1.0))
    combine = moe_ops(m, 1.0, 320, one)[3]
    # weighted sum of 9 expert outputs and the token's own (2 op each); the residual add is a
    # kernel of its own (docs/model.md §2.9: one add per element)
    assert float(combine.vector_ops) == 7168 * 2 * (9 + 1)
    assert float(residual_add_op(m, 1.0).vector_ops) == 7168


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


# --------------------------------------------------------------------------- co-located chunk in the decode pass
def test_chunk_attention_by_hand(model):
    """docs/model.md §9.4: 1,000 chunk tokens of 4,096-token prompts, 1,000 at a time: mean
    offset (4,096 - 1,000)/2 = 1,548, each token attends (4,096 + 1)/2 keys; the 1,548 prefix
    tokens of its prompt are up-projected to keys and values again (MLA, no queries)."""
    from cmperf.cost import arch
    from cmperf.cost.ops import chunk_attention_ops

    prefix, core = chunk_attention_ops(model, 1000.0, 4096.0, 1000.0)
    assert float(core.flops) == pytest.approx(2 * 1000 * 128 * (192 + 128) * 2048.5)
    assert float(core.vector_ops) == pytest.approx(5 * 1000 * 128 * 2048.5)
    w = arch.attention_weights(model)
    assert float(prefix.flops) == pytest.approx(2 * 1548 * (w["kv_b_k"] + w["kv_b_v"]))
    assert float(prefix.weight_bytes) == 0 and float(core.weight_bytes) == 0  # the decode ops read the weights
    # whole prompts in one chunk: no prefix to re-read; no chunk: no work and no launch
    _, whole = chunk_attention_ops(model, 4096.0, 4096.0, 4096.0)
    assert float(whole.flops) == pytest.approx(2 * 4096 * 128 * 320 * 2048.5)
    for op in chunk_attention_ops(model, 0.0, 4096.0, 0.0):
        assert float(op.flops) == 0 and float(op.hbm_bytes) == 0 and float(op.launches) == 0


def test_a_chunk_holds_the_kv_of_the_prompts_it_fills(fixed):
    """docs/model.md §9.4: 1,024 chunk tokens per NPU = 512 per die fill one 4K prompt, which
    holds (4,096 + 512)/2 = 2,304 tokens on average and 4,096 at its end; 16,384 per NPU
    (8,192 per die) are two whole prompts per iteration: 8,192 tokens."""
    t = predict("decode", {"batch": 96, "kv_len": 4096, "chunk_tokens": [0, 1024, 16384]}, fixed).table
    kv_B = 576 * 62 * 2
    assert (t["kv_cache_per_die_bytes"] - t["kv_cache_per_die_bytes"].iat[0]).tolist() == pytest.approx(
        [0, 2304 * kv_B, 8192 * kv_B], rel=1e-12)
    assert (t["kv_cache_peak_per_die_bytes"] - t["kv_cache_peak_per_die_bytes"].iat[0]).tolist() == pytest.approx(
        [0, 4096 * kv_B, 8192 * kv_B], rel=1e-12)
    assert t["max_batch_per_npu"].is_monotonic_decreasing


def test_no_chunk_leaves_the_decode_iteration_as_it_was(fixed):
    """chunk_tokens = 0 is the decode pass before the co-located input existed: D2 and D1 at the
    fixed parameters (26.6632 ms and 89.5216 ms per iteration, the values of the model before
    it with every kernel costed (docs/model.md §2.9; 26.6473 and 89.0486 before that), with the
    MoE stream on its 8 whole cube cores: 91.3012 ms when a rounding error gave it 7), alone or
    in a grid with chunked rows."""
    alone = predict("decode", {"batch": [8, 96]}, fixed).table["iteration_ms"].to_numpy()
    assert alone == pytest.approx([26.663191077153527, 89.52163217407545], rel=1e-12)
    mixed = predict("decode", {"batch": [8, 96], "chunk_tokens": [0, 512]}, fixed).table
    assert mixed.loc[mixed["chunk_tokens"] == 0, "iteration_ms"].to_numpy() == pytest.approx(alone, rel=1e-12)
    h100 = load_specs("h100-cluster", "llama-3.1-70b")
    a = predict("decode", {"batch": [8, 32], "dies": 8, "tp": 8}, h100).table
    b = predict("decode", {"batch": [8, 32], "dies": 8, "tp": 8, "chunk_tokens": [0, 1024]}, h100).table
    assert b.loc[b["chunk_tokens"] == 0, "iteration_ms"].to_numpy() == pytest.approx(a["iteration_ms"].to_numpy(), rel=1e-12)


CHUNK_SYSTEMS = [("cloudmatrix384", "deepseek-r1", {}), ("h100-cluster", "llama-3.1-70b", {"dies": 8, "tp": 8}),
                 ("h100-cluster", "qwen3-30b-a3b", {"dies": 8, "redundant_experts": 0})]


@pytest.mark.parametrize("system,model,extra", CHUNK_SYSTEMS)
def test_more_chunk_tokens_never_make_an_iteration_faster(system, model, extra):
    chunks = [0, 64, 128, 512, 2048, 4096, 8192, 16384]
    t = predict("decode", {"batch": [1, 16, 96], "chunk_tokens": chunks, **extra}, load_specs(system, model)).table
    for _, g in t.groupby("batch"):
        it = g.sort_values("chunk_tokens")["iteration_ms"].to_numpy()
        assert np.all(np.diff(it) > 0)


@pytest.mark.parametrize("system,model,extra", CHUNK_SYSTEMS)
def test_the_fused_pass_reads_the_weights_once_and_beats_two_passes(system, model, extra):
    """The chunk's tokens share the decode GEMMs: with one microbatch the pass reads exactly
    the decode pass's weights; and it is shorter than the decode iteration plus a pass of the
    same chunk on the same instance (at batch 1), with either schedule or the faster. On the
    paper's EP320 decode layout (data-parallel attention) it also beats the decode iteration
    plus `predict prefill` of the same whole prompts on those dies. (A dense TP instance is
    not compared with `predict prefill`: prefill splits attention SP-TP-SP, decode all-reduces
    its output, a different layout.)"""
    specs = load_specs(system, model)
    hw, m = specs.views()
    dpp = hw.chip.dies_per_package
    base = {"batch": 16, **extra}
    one = predict("decode", rows=[{**base, "microbatches": 1}, {**base, "microbatches": 1, "chunk_tokens": 4096 * dpp}],
                  specs=specs)  # one microbatch: each weight read once per layer
    weights = [one.breakdown(i)[0].eval("weight_bytes * calls").sum() for i in (0, 1)]
    assert weights[1] == pytest.approx(weights[0], rel=1e-12)
    for mb in (1, 2, 0):
        for chunk in (256 * dpp, 4096 * dpp):
            t = predict("decode", rows=[{**base, "microbatches": mb}, {**base, "microbatches": mb, "chunk_tokens": chunk},
                                        {**base, "batch": 1, "microbatches": mb, "chunk_tokens": chunk}], specs=specs).table
            decode_only, fused, chunk_only = t["iteration_ms"].to_numpy()
            assert decode_only < fused < decode_only + chunk_only, (mb, chunk)
    if system == "cloudmatrix384":
        layout = {k: one.table[k].iat[0] for k in ("dies", "ep", "redundant_experts", "shared_copies", "mtp")}
        p = predict("prefill", {"tokens_per_npu": 4096 * dpp, "attn_tp": 1, **layout}, specs).table
        t = predict("decode", rows=[base, {**base, "chunk_tokens": 4096 * dpp}], specs=specs).table["iteration_ms"]
        assert t.iat[1] < t.iat[0] + p["forward_ms"].iat[0]


def test_w4a8_stores_half_the_weight_bytes_and_keeps_the_int8_gemms():
    """W4A8 (Ascend): INT4 expert weights dequantised into INT8 GEMMs. At EP320 a die holds
    one expert instance per MoE layer (58 + the MTP block): 59 x 3 x 7168 x 2048 weights, at
    1 B in INT8 and 0.5 B in INT4; the GEMMs' FLOPs and compute dtype do not change, and the
    expert op reads exactly the weight bytes it saves less."""
    layout = {"redundant_experts": 32, "shared_copies": 32, "batch": 96}
    w8 = load_specs(sets=FIXED)
    w4 = load_specs(sets=[*FIXED, "model.precision.expert_weights=int4"])
    t8, t4 = (predict("decode", layout, s) for s in (w8, w4))
    saved = t8.table["weights_per_die_bytes"].iat[0] - t4.table["weights_per_die_bytes"].iat[0]
    assert saved == pytest.approx(59 * EXPERT * 0.5, rel=1e-12)
    ops8, ops4 = (t.breakdown(0)[0].set_index(["section", "stream", "op"]) for t in (t8, t4))
    e8, e4 = ops8.xs("experts", level="op"), ops4.xs("experts", level="op")
    assert (e8["flops"] == e4["flops"]).all()
    assert np.allclose(e8["weight_bytes"] - e4["weight_bytes"], EXPERT * 0.5, rtol=1e-12)
    assert t4.table["tpot_ms"].iat[0] <= t8.table["tpot_ms"].iat[0]  # fewer bytes never slower
    # int4 as a compute dtype needs an INT4 peak: the 910C has none
    with pytest.raises(SpecError, match="int4"):
        load_specs(sets=[*FIXED, "model.precision.matmul=int4"])
