"""Attention-FFN disaggregated decode (docs/model.md §5.4): values worked out by hand at
FIXED parameters, the structure of the pipeline across the two pools, and the directions
physics gives when AFD is compared with EP decode (PD) on the same NPUs.

Fixed parameters (as tests/test_physics.py): kernel launch 2 us, vector rate 1e12 op/s,
0.1 us per message, cv 0.1; UB 135 GB/s per die and direction, a barrier round 2 x 2.1 us.
The default AFD instance: A = 224 attention dies, E = 96 expert dies (160 NPUs), batch 96
per attention NPU (48 requests per die), MTP: T = 96 tokens per attention die, 256 routed
+ 32 redundant + 96 shared-copy instances: 3 routed + 1 shared instance per expert die.
"""

import numpy as np
import pytest

from helpers import one_line_error

from cmperf.predict import load_specs, predict

FIXED = ["chip.latency.kernel_launch_s=2e-6", "chip.die.vector_ops_per_s=1e12",
         "system.collectives.message_issue_s=1e-7", "system.collectives.step_time_cv=0.1"]
UB = 135e9
ROUND = 2 * 2.1e-6
EXPERT_B = 3 * 7168 * 2048  # INT8 weights of one expert
US = 1e-6


@pytest.fixture(scope="module")
def fixed():
    return load_specs(sets=FIXED)


def test_transfers_by_hand(fixed):
    """One microbatch (n = 1). Each side of a transfer is timed by the EP dispatch/combine
    builders; the transfer ends with the slower side. a2e: the attention die issues 96 x 9
    messages (86.4 us) and sends 864 x 7,680 B (49.2 us); the expert die receives
    224 x 96 x 9 / 96 = 2,016 rows x 7,680 B (114.7 us): the receiver is slower. e2a: the
    expert die issues 2,016 messages (201.6 us) and sends 2,016 x 14,336 B (214.1 us); the
    attention die receives 864 x 14,336 B (91.7 us). Each side pays a launch and
    ceil(log2 320) = 9 barrier rounds."""
    t = predict("afd", {"microbatches": 1}, fixed).table.iloc[0]
    latency = 2 * US + 9 * ROUND
    a2e = 2016 * 7680 / UB + latency
    e2a = 2016 * 14336 / UB + latency
    assert t["expert_rows"] == pytest.approx(2016)
    assert t["transfer_us"] * US == pytest.approx(a2e + e2a, rel=1e-6)


def test_expert_rows_scale_with_attention_over_expert_dies(fixed):
    """An expert die computes the rows of ALL attention dies: with one shared copy per expert
    die and the routed instances split evenly, A x T x (k + 1) / E rows per microbatch."""
    pairs = [(224, 96), (112, 96), (272, 48), (176, 144), (288, 32)]
    t = predict("afd", rows=[{"attention_dies": a, "expert_dies": e, "microbatches": n}
                             for a, e in pairs for n in (1, 2)], specs=fixed).table
    T = 96 / t["microbatches_used"]
    assert t["expert_rows"].to_numpy() == pytest.approx((t["attention_dies"] * T * 9 / t["expert_dies"]).to_numpy())


def test_more_expert_dies_shorten_the_expert_stage(fixed):
    """Fewer rows and fewer instances (weights) per die: the expert stage falls as E grows."""
    t = predict("afd", {"attention_dies": 176, "expert_dies": [32, 48, 72, 96, 144], "microbatches": 1}, fixed).table
    assert np.all(np.diff(t["expert_stage_us"]) < 0)
    # e2a's slower side is the expert die's, which issues A/E times an attention die's messages
    assert np.all(np.diff(t["transfer_us"]) < 0)


def test_memory_by_hand(fixed):
    """Expert die: 4 instances x (58 MoE layers + the MTP block) x 44 MB. Attention die: what
    an EP320 decode die holds (one expert instance per MoE block) minus that instance. The
    KV cache per die is decode's at the same batch; the receive buffers are the paper's
    Eq. 1-2 with the other pool's dies as peers."""
    t = predict("afd", {}, fixed).table.iloc[0]
    d = predict("decode", {"batch": 96, "dies": 320, "ep": 320}, fixed).table.iloc[0]
    assert t["expert_weights_per_die_bytes"] == pytest.approx(4 * 59 * EXPERT_B)
    assert t["attention_weights_per_die_bytes"] == pytest.approx(d["weights_per_die_bytes"] - 59 * EXPERT_B)
    # 48 requests per attention die x the KV they hold (4,224 + 1 draft tokens) x 576 B in BF16 x 62 layers (61 + MTP)
    assert t["kv_cache_per_die_bytes"] == pytest.approx(48 * (t["kv_len"] + 1) * 576 * 2 * 62)
    assert t["attention_buffers_per_die_bytes"] == pytest.approx(48 * 2 * 96 * 14336)  # E = 96 peers return each token
    assert t["expert_buffers_per_die_bytes"] == pytest.approx(48 * 2 * 224 * 7680)  # A = 224 peers send each token


def test_attention_dies_hold_more_requests_than_decode_dies(specs):
    """No expert weights on an attention die: more HBM for KV, so a larger batch per NPU
    than an EP decode die at the same dies (and the expert dies are far from full)."""
    a = predict("afd", {"kv_len": [4096, 32768], "prompt_len": [4096, 32768]}, specs).table
    d = predict("decode", {"kv_len": [4096, 32768], "prompt_len": [4096, 32768]}, specs).table
    assert np.all(a["max_batch_per_npu"].to_numpy() > d["max_batch_per_npu"].to_numpy())
    assert np.all(a["expert_memory_per_die_bytes"] < a["hbm_per_die_bytes"] / 2)
    big = predict("afd", {"batch": 400}, specs).table.iloc[0]
    assert not big["fits"] and not big["attention_fits"] and big["expert_fits"]


def test_one_microbatch_is_the_trip(fixed):
    """n = 1: attention, a2e, experts, e2a and both barrier waits in series."""
    t = predict("afd", {"microbatches": 1, "batch": [8, 96, 192]}, fixed).table
    trip = t["attention_stage_us"] + t["transfer_us"] + t["expert_stage_us"] + t["barrier_wait_us"]
    assert t["layer_us"].to_numpy() == pytest.approx(trip.to_numpy(), rel=1e-9)


def test_pipeline_bounds(specs):
    """n microbatches: no lane does less than n stages, no microbatch less than its trip, and
    nothing is worse than every stage of every microbatch in series:
    max(n A, n X, trip) <= layer <= n trip."""
    t = predict("afd", {"microbatches": [2, 3, 4], "batch": [8, 96, 256],
                        "expert_dies": [48, 96], "attention_dies": [176, 224]}, specs).table
    n = t["microbatches_used"]
    trip = t["attention_stage_us"] + t["transfer_us"] + t["expert_stage_us"] + t["barrier_wait_us"]
    lower = np.maximum.reduce([n * t["attention_stage_us"], n * t["expert_stage_us"], trip])
    assert np.all(t["layer_us"] >= lower * (1 - 1e-9))
    assert np.all(t["layer_us"] <= n * trip * (1 + 1e-9))


def test_the_pools_are_per_die(specs):
    """Three microbatches at the default are attention-bound (3 x 389 us). Heavier experts
    (imbalance 1.5) load only the expert dies: while their lane and the trip stay below the
    attention lane, the layer does not move (an expert die's HBM and cores are not an
    attention die's)."""
    t = predict("afd", {"microbatches": 3, "expert_imbalance": [1.0, 1.5]}, specs).table
    assert t["expert_stage_us"].iat[1] > 1.2 * t["expert_stage_us"].iat[0]
    assert t["layer_us"].iat[0] == pytest.approx(3 * t["attention_stage_us"].iat[0], rel=1e-9)
    assert t["layer_us"].iat[1] == pytest.approx(t["layer_us"].iat[0], rel=1e-9)


def test_two_microbatches_cost_at_most_the_fixed_trip(specs):
    """Each stage is a max of terms linear in its tokens plus fixed costs (weights, launches,
    barrier rounds), so two microbatches of T/2 cost each lane at most its time for T plus
    its fixed part once more, and the trip of T/2 is no longer than that of T: a layer with
    two microbatches is never slower than one by more than the layer with no tokens — bounded
    here by the layer at the smallest batch a user may give (one request per NPU)."""
    for a, e in ((224, 96), (272, 48), (288, 32)):
        base = {"attention_dies": a, "expert_dies": e, "batch": [1, 2, 8, 32, 96, 256], "kv_len": [1024, 32768]}
        one = predict("afd", {**base, "microbatches": 1}, specs).table
        two = predict("afd", {**base, "microbatches": 2}, specs).table
        empty = predict("afd", {**base, "batch": 1, "microbatches": 1}, specs).table["layer_us"].max()
        assert np.all(two["layer_us"] - one["layer_us"] <= empty)
    auto = predict("afd", {"batch": [8, 96, 256]}, specs).table
    each = [predict("afd", {"batch": [8, 96, 256], "microbatches": n}, specs).table["iteration_ms"] for n in (1, 2, 3, 4)]
    assert auto["iteration_ms"].to_numpy() == pytest.approx(np.minimum.reduce([x.to_numpy() for x in each]))


def test_an_ideal_network_removes_the_transfers(specs):
    """UB bandwidth and message rate -> infinity, latencies -> 0: only the local work of the
    transfers stays (quantising, summing the k + 1 results, HBM); with that work free too,
    the transfer term vanishes."""
    ideal = ["system.tiers.ub.bandwidth_Bps=1e30", "system.tiers.ub.latency_s=1e-30",
             "system.collectives.message_issue_s=1e-30", "chip.latency.kernel_launch_s=1e-30"]
    base = predict("afd", {"microbatches": 1}, specs).table.iloc[0]
    net = predict("afd", {"microbatches": 1}, load_specs(sets=ideal)).table.iloc[0]
    free = predict("afd", {"microbatches": 1}, load_specs(sets=ideal + ["chip.die.vector_ops_per_s=1e30",
                                                                       "chip.die.hbm_bandwidth_Bps=1e30"])).table.iloc[0]
    assert net["transfer_us"] < 0.1 * base["transfer_us"]
    assert free["transfer_us"] < 1e-6


def test_afd_vs_pd_on_the_same_npus(specs):
    """AFD against EP320 decode (PD) on the same 160 NPUs, batch per attention NPU = PD's
    batch per NPU. AFD keeps every attention die's cores for attention and every expert
    die's for experts (no core split), but only A of the A + E dies carry requests, every
    weight is re-read per microbatch, and a second barrier is crossed per layer.

    - Small batch (8): a layer is fixed costs (weights, launches, barrier rounds) in both;
      AFD pays them with fewer request-carrying dies and an expert die reads 4 instances
      instead of 1: PD is faster per NPU, for any split.
    - As the batch grows the work that scales with tokens dominates, which AFD runs on
      whole dies: AFD's throughput relative to PD rises with the batch.
    - At batch 96 with 1/3 of the dies on experts the attention pool binds (its lane is
      more than twice the experts'): moving 48 expert dies to attention raises throughput.
    """
    pd_ = predict("decode", {"batch": [8, 96]}, specs).table.set_index("batch")["throughput_per_npu"]
    for a, e in ((224, 96), (272, 48)):
        t = predict("afd", {"batch": [8, 96], "attention_dies": a, "expert_dies": e}, specs).table.set_index("batch")
        ratio = t["throughput_per_npu"] / pd_
        assert ratio[8] < 0.8
        assert ratio[96] > ratio[8]
    third = predict("afd", {"batch": 96}, specs).table.iloc[0]
    assert third["attention_stage_us"] > 2 * third["expert_stage_us"]
    moved = predict("afd", {"batch": 96, "attention_dies": 272, "expert_dies": 48}, specs).table.iloc[0]
    assert moved["throughput_per_npu"] > third["throughput_per_npu"]


def test_longer_context_moves_dies_to_attention(specs):
    """Attention work grows with the cached tokens, expert work does not: the split with the
    best throughput per NPU has no more expert dies at 16K context than at 2K."""
    splits = [32, 48, 72, 96, 144]
    for batch in (32, 96):
        best = []
        for kv in (2048, 16384):
            t = predict("afd", rows=[{"kv_len": kv, "batch": batch, "expert_dies": e, "attention_dies": 320 - e}
                                     for e in splits], specs=specs).table
            best.append(int(t.loc[t["throughput_per_npu"].idxmax(), "expert_dies"]))
        assert best[1] <= best[0], best


def test_cli_predict_afd(cli):
    code, out, err = cli("predict", "afd", "--format", "json")
    assert code == 0, err
    import json

    row = json.loads(out)
    assert row["npus"] == 160 and row["fits"] is True
    # Little's law over all 160 NPUs: 96 requests on each of the 112 attention NPUs, one token per TPOT each
    assert row["throughput_per_npu"] == pytest.approx(96 * 112 / 160 / (row["tpot_ms"] / 1e3))
    code, out, err = cli("predict", "afd", "--microbatches", "3", "--breakdown", "--format", "csv")
    assert code == 0 and "a2e" in out and "e2a" in out and "experts" in out


@pytest.mark.parametrize("args, names", [
    (("--expert-dies", "64", "--redundant-experts", "32", "--shared-copies", "64"), ("--expert-dies 64", "352 expert instances")),
    (("--attention-dies", "700"), ("--attention-dies 700", "768 dies")),
    (("--attention-dies", "0"), ("--attention-dies",)),
    (("--microbatches", "5"), ("--microbatches 5",)),
    (("--model", "llama-3.1-70b"), ("no MoE layers",)),
    (("--set", "system.tiers.ub.domain_chips=64", "--set", "system.memory_pool.tier=rdma"), ("128 dies", "'ub' domain")),
])
def test_cli_afd_bad_input(cli, args, names):
    code, _, err = cli("predict", "afd", *args)
    one_line_error(code, err, *names)


def test_microbatches_alone_as_a_grid(specs):
    """A grid over the microbatch count alone (every other input one value) is each count's
    own prediction, auto the fastest of them (it failed to broadcast the count's column
    against the runs' one-value times)."""
    t = predict("afd", {"microbatches": [0, 1, 2, 3, 4]}, specs).table
    each = [predict("afd", {"microbatches": n}, specs).table["tpot_ms"].iat[0] for n in (1, 2, 3, 4)]
    assert list(t["microbatches_used"]) == [1 + int(np.argmin(each)), 1, 2, 3, 4]
    assert list(t["tpot_ms"]) == [min(each), *each]
