"""`cmperf plan` (docs/model.md §9): hand-derived terms, agreement with `cmperf predict`, the
paper's Tables 2 and 11, and the directions physics fixes (prefix reuse, KV-transfer tier,
supernode size, arrival rate, budget, SLOs)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from cmperf.errors import ConfigError
from cmperf.plan import default_workload, plan
from cmperf.plan.planner import alignment_s, curves, summary, ttft_terms
from cmperf.plan.workload import SLO, Workload, fixed, lognormal, parse_lengths, read_trace
from cmperf.predict import load_specs, predict

from helpers import one_line_error



@pytest.fixture(scope="module")
def paper_plan():
    return plan(shape_names=["pd"])


@pytest.fixture(scope="module")
def views():
    return load_specs().views()


def workload(**kw) -> Workload:
    base = dict(prompt=fixed(4096), output=fixed(256), prefix_hit=0.0, slo=SLO(2.0, 0.050))
    base.update(kw)
    return Workload(**base)


# --------------------------------------------------------------------------- hand-derived terms
def test_alignment_is_the_residual_of_a_busy_pass():
    """Uniform residual on (0, period) with probability rho: mean rho T / 2; p90 T (1 - 0.1 / rho)."""
    assert alignment_s(0.5, 1.0, "mean") == pytest.approx(0.25)
    assert alignment_s(1.0, 0.8, "mean") == pytest.approx(0.4)
    assert alignment_s(0.5, 1.0, "p90") == pytest.approx(0.8)
    assert alignment_s(0.05, 1.0, "p90") == 0.0  # idle 95 % of the time: the p90 arrival finds no pass


def test_ttft_at_no_load_is_one_pass_plus_transfer():
    t = ttft_terms(np.array([0.0]), 10.0, 1.0, 0.0, 1.0, 1.25, "mean")
    assert t["ttft_s"][0] == pytest.approx(1.25)
    t = ttft_terms(np.array([10.0]), 10.0, 1.0, 0.0, 1.0, 1.25, "mean")  # rho = 1: the queue never empties
    assert math.isinf(t["ttft_s"][0])


def test_a_pass_of_one_prompt_has_no_alignment():
    """Three instances whose pass holds one prompt are three servers of the queue (M/D/3): the
    queue's wait is the whole wait; with two prompts a pass the busy instance's residual adds
    rho T / 2 (rho = 2 x 0.5 / 6)."""
    one = ttft_terms(np.array([2.0]), 3.0, 0.5, 0.0, 0.5, 0.5, "mean", 3.0)
    assert one["align_s"][0] == 0.0 and one["ttft_s"][0] == pytest.approx(one["queue_s"][0] + 0.5)
    two = ttft_terms(np.array([2.0]), 6.0, 0.5, 0.0, 0.5, 0.5, "mean", 3.0)
    assert two["align_s"][0] == pytest.approx(2.0 * 0.5 / 6.0 * 0.5 / 2)


def test_the_wait_for_the_decode_step_by_hand():
    """One decode option: batch 1 and 2 per NPU (1 NPU), TPOT 20 and 30 ms, steps 40 and 60 ms
    (2 tokens a step), 100-token outputs: capacity 1 / (100 x 0.02) = 0.5 and 2 / 3 = 0.667
    requests/s. At 0.667 requests/s on one instance it holds L = 0.667 x 100 x 0.03 = 2
    requests, runs steps 1 - e^-2 of the time, and a request waits (1 - e^-2) x 60 / 2 ms for
    the step it joins; p90: 60 (1 - 0.1 / (1 - e^-2)) ms. On two instances each serves half."""
    from cmperf.plan.instances import DecodeCurves
    from cmperf.plan.planner import decode_join_s

    b, t = np.array([1.0, 2.0]), np.array([0.02, 0.03])
    c = DecodeCurves(dies=np.array([1.0]), keys=[{"dies": 1.0}], batch=[b], tpot_s=[t], capacity_rps=[b / (100 * t)],
                     step_s=[np.array([0.04, 0.06])])
    busy = 1 - math.exp(-2.0)
    rate = np.array([2 / 3])
    assert decode_join_s(c, np.array([0]), np.array([1.0]), rate, 100.0, "mean")[0] == pytest.approx(busy * 0.03)
    assert decode_join_s(c, np.array([0]), np.array([1.0]), rate, 100.0, "p90")[0] == pytest.approx(0.06 * (1 - 0.1 / busy))
    half = decode_join_s(c, np.array([0]), np.array([2.0]), 2 * rate, 100.0, "mean")[0]
    assert half == pytest.approx(busy * 0.03)
    assert decode_join_s(c, np.array([0]), np.array([1.0]), np.array([0.0]), 100.0, "mean")[0] == 0.0


def test_lognormal_lengths_from_mean_and_p90():
    """p90 = 2 x mean: ln 2 = z s - s^2/2 -> s = 1.2816 - sqrt(1.2816^2 - 2 ln 2) = 0.7753, scv = e^{s^2} - 1 = 0.824."""
    x = parse_lengths("1000:2000", "--prompt-len")
    assert x.scv == pytest.approx(0.824, abs=0.002)
    assert parse_lengths("exp:500", "--output-len").p90 == pytest.approx(500 * math.log(10))
    assert parse_lengths("4096", "--prompt-len").scv == 0.0
    with pytest.raises(ConfigError, match="log-normal"):
        parse_lengths("100:1000", "--prompt-len")


def test_decode_kv_length_is_time_weighted():
    """Fixed lengths: prompt + output / 2 (the paper's 4,096 + 128); exponential outputs
    (scv 1) weight long requests more: prompt + output."""
    assert workload().decode_kv_len == pytest.approx(4096 + 128)
    assert workload(output=parse_lengths("exp:256", "x")).decode_kv_len == pytest.approx(4096 + 256)


def test_prefix_cache_rounds_to_whole_blocks():
    w = workload(prefix_hit=0.5, block_tokens=256)
    assert w.cached_tokens == 2048 and w.computed.mean == 2048
    w = workload(prefix_hit=0.3, block_tokens=512)  # 1,228.8 tokens -> two 512-token blocks
    assert w.cached_tokens == 1024


def test_trace_rows_are_checked(tmp_path):
    good = tmp_path / "t.csv"
    good.write_text("prompt_len,output_len,prefix_hit_tokens\n4096,256,1024\n2048,128,0\n")
    prompt, output, cached = read_trace(str(good))
    assert prompt.mean == 3072 and output.mean == 192 and list(cached) == [1024, 0]
    bad = tmp_path / "b.csv"
    bad.write_text("prompt_len,output_len\n4096,256\n4096,nan\n")
    with pytest.raises(ConfigError, match="line 3, output_len"):
        read_trace(str(bad))


# --------------------------------------------------------------------------- the paper's setting
def test_default_plan_and_its_rates_agree_with_predict(paper_plan):
    """The instance rates the plan uses are `cmperf predict`'s for the same configurations:
    the paper's P1 prefill instance and D1 decode instance are among its options."""
    b = paper_plan.best
    assert b is not None and b["goodput_rps"] > 0 and paper_plan.message == ""
    pre = paper_plan.instances["prefill"]
    p1 = pre[(pre["dies"] == 32) & (pre["tokens_per_npu"] == 16384)].iloc[0]
    alone = predict("prefill").table
    for col in ("forward_ms", "kv_transfer_ms", "throughput_per_npu"):
        assert p1[col] == pytest.approx(alone[col].iat[0], rel=1e-9)
    chosen = pre[(pre["dies"] == b["prefill_dies"]) & (pre["tokens_per_npu"] == b["prefill_tokens_per_npu"])].iloc[0]
    # a pass's k prompts send their KV one after another: a prompt's arrives after (k + 1) / 2 of the k transfers
    k = b["prefill_tokens_per_npu"] * b["prefill_dies"] / 2 / 4096
    # the request's own pass: the pass of the backlog when its instance is busy, of itself alone when
    # idle (docs/model.md §9.3): between predict's pass of one prompt and of the whole budget
    lone = predict("prefill", {"dies": int(b["prefill_dies"]), "tokens_per_npu": 4096 * 2 / 4}).table["forward_ms"].iat[0]
    assert lone * (1 - 1e-9) <= b["ttft_prefill_ms"] <= chosen["forward_ms"] * (1 + 1e-9)
    assert b["ttft_kv_transfer_ms"] == pytest.approx(chosen["kv_transfer_ms"] * (k + 1) / (2 * k), rel=1e-12)
    dec = paper_plan.instances["decode"]
    d1 = dec[(dec["dies"] == 320) & (dec["batch"] == 96)].iloc[0]
    alone = predict("decode", {"batch": 96}).table
    assert d1["tpot_ms"] == pytest.approx(alone["tpot_ms"].iat[0], rel=1e-9)
    # the decode capacity is Little's law on predict's TPOT: b x NPUs / (output x TPOT)
    c = paper_plan.decode_curves["pd"]
    k = list(c.dies).index(320)
    i = list(c.batch[k]).index(96)
    assert c.capacity_rps[k][i] == pytest.approx(96 * 160 / (256 * d1["tpot_ms"] / 1e3))


def test_plan_meets_its_slos_and_conserves_work(paper_plan):
    """At the goodput both SLOs hold, the NPUs add up, and the prefill NPUs process the prompt
    tokens at no more than predict's throughput per NPU."""
    b = paper_plan.best
    assert b["ttft_ms"] <= 2000 * (1 + 1e-6) and b["tpot_ms"] <= 50
    assert b["npus"] == b["prefill_npus"] + b["decode_npus"] <= 384
    pre = paper_plan.instances["prefill"]
    best_tput = pre["throughput_per_npu"].max()
    assert b["goodput_rps"] * 4096 <= b["prefill_npus"] * best_tput * (1 + 1e-9)
    assert b["goodput_rps"] * 256 <= b["decode_npus"] * paper_plan.instances["decode"]["throughput_per_npu"].max()
    # prefill binds: hundreds of prompt slots in the pool run it near capacity (rho >= 0.9)
    assert b["binding"] == "prefill capacity (the TTFT SLO)"
    slots = b["prefill_instances"] * b["prefill_tokens_per_npu"] * (b["prefill_dies"] / 2) / 4096
    assert 0.9 * slots / (b["ttft_prefill_ms"] / 1e3) <= b["goodput_rps"] < slots / (b["ttft_prefill_ms"] / 1e3)


def test_ttft_grows_with_the_arrival_rate(paper_plan):
    b = paper_plan.table.iloc[0]
    rates = np.linspace(0, b["goodput_rps"], 20)
    c = curves(paper_plan, b, rates)
    assert np.all(np.diff(c["ttft_s"]) > 0) and np.all(np.diff(c["tpot_s"]) >= 0)
    # at no load a prompt finds its instance idle and passes alone: one 4K prompt per attention
    # TP group of 4 dies (2,048 tokens per NPU), then its KV transfer
    lone = predict("prefill", {"dies": int(b["prefill_dies"]), "tokens_per_npu": 4096 * 2 / 4}).table["forward_ms"].iat[0]
    assert c["ttft_s"][0] == pytest.approx((lone + b["ttft_kv_transfer_ms"]) / 1e3)


# --------------------------------------------------------------------------- Tables 2 and 11
def test_table11_switches_follow_from_the_fabric(views):
    """Table 11: 384/352/288/256/192 NPUs -> 56/56/42/42/28 logical switches, 100/92/100/89/100 %
    utilisation, from 16 uplinks per L1 chip, 48-port L2 chips and two chips per logical switch."""
    from cmperf.plan.supernode import ub_switches

    hw, _ = views
    for npus, sw, util in ((384, 56, 1.00), (352, 56, 0.92), (288, 42, 1.00), (256, 42, 0.89), (192, 28, 1.00)):
        r = ub_switches(hw, npus)
        assert r["logical_switches"] == sw and r["port_utilisation"] == pytest.approx(util, abs=0.005)


def test_table2_model_loading(views):
    """Table 2: a 671B INT8 model loads in ~320 s from OBS (2.5 GB/s per bucket) and ~5 s from
    the DRAM pool. The OBS row reads back its own 2.5 GB/s input (bookkeeping, within 20 %:
    the paper's 320 s includes overhead the bandwidth alone does not); the pool row follows from
    one CPU socket's UB read rate (Table 1), an assumption documented in docs/specs.md."""
    from cmperf.cost.pool import model_load_s
    from cmperf.plan.bringup import model_bytes

    hw, m = views
    size = model_bytes(m, mtp_on=False)
    assert size == pytest.approx(671e9, rel=0.01)
    assert float(model_load_s(hw, size, 32, "object_storage")) == pytest.approx(320, rel=0.20)
    assert float(model_load_s(hw, size, 32, "pool")) == pytest.approx(5, rel=0.20)


# --------------------------------------------------------------------------- directions
def test_more_npus_and_looser_slos_never_serve_less():
    g = [plan(workload(), shape_names=["pd"], npus=n).best["goodput_rps"] for n in (64, 128, 192)]
    assert g[0] < g[1] < g[2]
    tight = plan(workload(slo=SLO(1.5, 0.050)), shape_names=["pd"], npus=128).best["goodput_rps"]
    loose = plan(workload(slo=SLO(3.0, 0.050)), shape_names=["pd"], npus=128).best["goodput_rps"]
    assert tight < g[1] < loose


def test_longer_prompts_serve_fewer_requests():
    a = plan(workload(), shape_names=["pd"], npus=128).best["goodput_rps"]
    b = plan(workload(prompt=fixed(8192)), shape_names=["pd"], npus=128).best["goodput_rps"]
    assert b < a


def test_kv_transfer_over_ub_is_faster_than_rdma():
    rdma = plan(workload(), shape_names=["pd"], npus=128).best
    ub = plan(workload(), shape_names=["pd"], npus=128, kv_tier="ub").best
    assert ub["ttft_kv_transfer_ms"] < rdma["ttft_kv_transfer_ms"]
    assert ub["goodput_rps"] >= rdma["goodput_rps"]


def test_smaller_supernodes_never_serve_more():
    """384 NPUs as two 192-NPU supernodes: no instance may span the two UB domains, and the KV
    transfer must leave the supernode: the best plan cannot beat one 384-NPU supernode's."""
    one = plan(workload(), shape_names=["pd"], npus=384).best
    two = plan(workload(), shape_names=["pd"], npus=384, supernode=192).best
    assert two["goodput_rps"] <= one["goodput_rps"] * (1 + 1e-9)
    assert max(two["prefill_dies"], two["decode_dies"]) <= 384
    with pytest.raises(ConfigError, match="kv-tier"):
        plan(workload(), shape_names=["pd"], npus=384, supernode=192, kv_tier="ub")


def test_prefix_reuse_raises_goodput():
    none = plan(workload(), shape_names=["pd"], npus=128).best
    half = plan(workload(prefix_hit=0.5), shape_names=["pd"], npus=128).best
    assert half["goodput_rps"] > 1.3 * none["goodput_rps"]


def test_a_given_rate_is_met_or_named():
    met = plan(workload(arrival_rate_per_s=50.0), shape_names=["pd"], npus=128)
    assert met.message == "" and met.best["rate_rps"] == 50.0 and met.best["binding"] == "arrival rate"
    over = plan(workload(arrival_rate_per_s=1e4), shape_names=["pd"], npus=128)
    assert "at most" in over.message


# --------------------------------------------------------------------------- command line
def test_cli_default_plan_prints_split_goodput_and_breakdown(cli):
    code, out, err = cli("plan", "--shapes", "pd")
    assert code == 0, err
    for text in ("split", "goodput", "requests/min", "TTFT", "KV transfer", "TPOT", "bringing up"):
        assert text in out


def test_cli_impossible_slo_exits_1_naming_the_closest_plan(cli):
    code, out, err = cli("plan", "--shapes", "pd", "--npus", "64", "--tpot-slo", "5")
    assert code == 1
    assert "closest" in err and "binding" in err


@pytest.mark.parametrize("args", [["--rate", "abc"], ["--rate", "nan"], ["--prompt-len", "0"], ["--shapes", "foo"],
                                  ["--prefix-hit", "1.5"], ["--ttft-stat", "p95"], ["--tpot-slo", "-1"],
                                  ["--kv-tier", "nvlink"], ["--supernode", "100"], ["--out", ""]])
def test_cli_bad_input_is_one_line(cli, args):
    code, _, err = cli("plan", *args)
    one_line_error(code, err, args[0])


# --------------------------------------------------------------------------- context cache (EMS)
def test_a_cached_prefix_is_attended_not_computed(model):
    """Hand-derived: 1,000 computed tokens of 4,096-token prompts with a 2,048-token cached
    prefix attend 2,048 + (2,048 + 1) / 2 = 3,072.5 keys each; the 500 prefix tokens of their
    prompts are up-projected to keys and values (MLA) but not to queries."""
    from cmperf.cost import arch
    from cmperf.cost.ops import attention_prefill_ops

    a = model.attention
    ops = {o.name: o for o in attention_prefill_ops(model, 1000.0, 4096.0, 1.0, "ub", 2048.0)}
    core = float(ops["attention_core"].flops)
    assert core == pytest.approx(2 * 1000 * 128 * (192 + 128) * 3072.5)
    none = {o.name: o for o in attention_prefill_ops(model, 1000.0, 4096.0, 1.0, "ub", 0.0)}
    w = arch.attention_weights(model)
    extra = float(ops["mla_up"].flops) - float(none["mla_up"].flops)
    assert extra == pytest.approx(2 * 1000 * (w["kv_b_k"] + w["kv_b_v"]))  # 1,000 x 2,048 / 2,048 prefix tokens


def test_prefill_with_a_cached_prefix():
    """Same computed tokens per NPU: each pass holds more prompts, so the prompt tokens per
    second rise with the hit length while the computed ones fall (longer attention); the
    pool read is the prefixes' KV over Table 1's 147 GB/s; the KV sent to decode is the whole prompt's."""
    t = predict("prefill", {"cached_len": [0, 2048, 3584], "tokens_per_npu": 8192}).table
    prompt = t["prompt_throughput_per_npu"].to_numpy()
    computed = t["throughput_per_npu"].to_numpy()
    assert prompt[0] < prompt[1] < prompt[2] and computed[0] > computed[1] > computed[2]
    # 2,048 cached: 4,096 computed tokens per die = 2 prompts per die, 2 x 2,048 tokens x 70,272... B (62 KV layers, BF16)
    kv_B = (512 + 64) * 62 * 2
    # 8 blocks of 256 tokens each pay the wire's 1.7 us and the pool's 2.6 us lookup/submission; 32 readers
    # share 48 nodes x 210 GB/s = 10 TB/s (315 GB/s each): the die's own 147 GB/s still binds
    assert t["pool_load_ms"].iat[1] == pytest.approx((2 * 2048 * kv_B / 147e9 + 2 * 8 * (1.7e-6 + 2.6e-6)) * 1e3, rel=1e-6)
    shared = predict("prefill", {"cached_len": 2048, "tokens_per_npu": 8192, "pool_readers": 608}).table
    # 608 readers: 10.08 TB/s / 608 = 16.6 GB/s each, the memory servers bind
    assert shared["pool_load_ms"].iat[0] == pytest.approx((2 * 2048 * kv_B / (48 * 210e9 / 608) + 2 * 8 * 4.3e-6) * 1e3, rel=1e-6)
    assert t["kv_transfer_ms"].iat[1] == pytest.approx(2 * t["kv_transfer_ms"].iat[0], rel=0.01)  # twice the prompts


def test_reading_the_cache_over_ub_beats_the_vpc_plane():
    """Paper §4.4: EMS reads cached KV over UB; over the VPC plane (400 Gbps per node shared
    by 16 dies) the same hits are worth less."""
    w = workload(prefix_hit=0.9)
    ub = plan(w, shape_names=["pd"], npus=128).best
    vpc = plan(w, shape_names=["pd"], npus=128, pool_path="vpc").best
    assert vpc["goodput_rps"] < ub["goodput_rps"]


def test_another_pool_path_or_kv_tier_keeps_the_serving_stack():
    """--pool-path/--kv-tier choose a route, not a stack: the decode instances keep the system's
    stack and its caps (a plan over the VPC plane once lost them and out-served UB)."""
    w = workload(prefix_hit=0.5)
    base = plan(w, shape_names=["pd"], npus=64)
    for kw in ({"pool_path": "vpc"}, {"kv_tier": "vpc"}):
        other = plan(w, shape_names=["pd"], npus=64, **kw)
        assert other.specs.stack_name == base.specs.stack_name is not None
        key = ["dies", "tp", "batch"]
        assert other.instances["decode"][key].equals(base.instances["decode"][key])


# --------------------------------------------------------------------------- AFD vs PD
def _decode_capacity_per_npu(tpot_slo_s: float) -> dict:
    """Best decode capacity (requests/s the decode side carries at the TPOT SLO) per decode
    NPU of each shape, for 16K-token prompts and 1K-token outputs."""
    p = plan(workload(prompt=fixed(16384), output=fixed(1024), slo=SLO(60.0, tpot_slo_s)),
             shape_names=["pd", "afd"])
    per_npu = p.table["decode_max_rps"] / p.table["decode_npus"]
    return per_npu.groupby(p.table["shape"]).max().to_dict()


def test_afd_loses_under_a_tight_tpot_and_wins_when_decode_is_memory_bound():
    """Attention dies hold no experts (more KV, larger batches) but AFD pays two transfers per
    layer and its expert dies see only the attention dies' tokens: under a 20 ms TPOT
    (small batches) PD decode carries more per decode NPU; under 100 ms, with 16K-token
    contexts, where PD's decode batch is capped by KV memory, AFD's larger batch carries more
    (docs/model.md §5.4, §9.8). Decode capacity, not goodput: the prefill side binds both
    shapes' goodput at the same rate."""
    tight, loose = _decode_capacity_per_npu(0.020), _decode_capacity_per_npu(0.100)
    assert tight["pd"] > tight["afd"]
    assert loose["afd"] > loose["pd"]


def test_cli_plans_each_value_of_a_list(cli):
    """--prefix-hit 0,0.5 plans each share: one row per value, goodput rising with the hits."""
    code, out, err = cli("plan", "--shapes", "pd", "--npus", "128", "--prefix-hit", "0,0.5", "--format", "json")
    assert code == 0, err
    import json

    doc = json.loads(out)
    rows = doc["rows"]
    assert doc["provenance"]["command"] == "plan" and doc["provenance"]["prefix_hit"] == "0,0.5"
    assert [r["prefix_hit"] for r in rows] == ["0", "0.5"]
    assert rows[1]["goodput_rps"] > rows[0]["goodput_rps"]


@pytest.mark.parametrize("args,text", [(["--npus", "1"], "no valid prefill instance size"),
                                       (["--output-len", "1e9"], "no decode option fits"),
                                       (["--prompt-len", "131072", "--output-len", "4096"], "closest")])
def test_cli_impossible_plans_say_why(cli, args, text):
    code, out, err = cli("plan", "--shapes", "pd", *args)
    assert code == 1 and text in err and "Traceback" not in err


@pytest.mark.parametrize("args", [["--trace", "/"], ["--supernode", "1000"], ["--working-set-tokens", "0"],
                                  ["--top", "-1"], ["--npus", "0"], ["--rate", "1,,2"], ["--block-tokens", "0"]])
def test_cli_more_bad_input_is_one_line(cli, args):
    code, _, err = cli("plan", *args)
    one_line_error(code, err)


# --------------------------------------------------------------------------- the TTFT model vs the batched queue
@pytest.mark.parametrize("instances,prompts,rho,mean_tol,p90_tol", [
    (19, 32, 0.9, (-0.08, 0.08), (-0.08, 0.10)),   # the default plan's pool: hundreds of slots
    (19, 32, 0.99, (-0.08, 0.08), (-0.08, 0.10)),
    (2, 64, 0.5, (-0.15, 0.08), (-0.08, 0.10)),
    (2, 64, 0.95, (-0.08, 0.08), (-0.08, 0.10)),
    (4, 8, 0.8, (0.0, 0.30), (0.0, 0.55)),          # a few small instances: conservative (model above)
    (1, 8, 0.9, (-0.12, 0.05), (0.0, 0.20)),
])
def test_ttft_terms_against_a_simulation_of_batched_passes(instances, prompts, rho, mean_tol, p90_tol):
    """TTFT = W_q(M/G/c with instances x prompts slots) + alignment + pass, checked against an
    event simulation of the passes themselves (tests/queue_sim.py: an idle instance starts a
    pass with whatever waits, up to its prompts). Measured (200K requests, docs/model.md §9.3):
    within -6 %..+6 % (mean) and -1 %..+6 % (p90) for pools of 128-608 slots at 50-99 %
    load; a few small instances (4 x 8) are over-predicted by 13-20 % (mean), 30-46 % (p90):
    conservative; one instance under-predicted by up to 17 % at half load."""
    from queue_sim import simulate_batched_ttft

    S = 1.0
    rate = rho * instances * prompts / S
    sim = simulate_batched_ttft(rate, instances, prompts, S, customers=120_000, seed=1)
    for stat, tol, value in (("mean", mean_tol, sim.mean()), ("p90", p90_tol, np.quantile(sim, 0.9))):
        model = ttft_terms(np.array([rate]), instances * prompts, S, 0.0, S, S, stat)["ttft_s"][0]
        assert tol[0] <= model / value - 1 <= tol[1], (stat, model, value)


@pytest.mark.parametrize("args,flag", [(["--prefix-hit", "0.5", "--set", "stack.prefix_cache_hbm_share=0"], "--prefix-hit"),
                                       (["--block-tokens", "128"], "--block-tokens"), (["--pool-path", "ib"], "--pool-path")])
def test_cache_flags_on_a_system_without_a_memory_pool_name_the_flag(cli, args, flag):
    """The error names the flag the user wrote, not the --set path it would become (hits need a
    tier: without a pool, a stack that keeps no prefix cache in HBM has none)."""
    code, _, err = cli("plan", "--hardware", "h100-cluster", "--model", "llama-3.1-70b", "--shapes", "pd", *args)
    line = one_line_error(code, err, flag, "memory pool")
    assert "--set" not in line


# --------------------------------------------------------------------------- every system: sizes, tensor parallelism
def test_instance_sizes_and_tp_degrees_follow_the_system():
    """Sizes are multiples of a node (8 GPUs on an H100 node, 16 dies on CloudMatrix384, where
    the paper's 32-die prefill and 320-die decode are options); TP stays in the scale-up
    domain of the tier a node's collectives use (NVLink: 8 GPUs; UB: the supernode) and
    divides the heads."""
    from cmperf.plan import shapes

    h100, llama = load_specs("h100-cluster", "llama-3.1-70b").views()
    assert shapes.sizes(h100, shapes.PREFILL_NODES, 96)[:3] == [4, 8, 16]
    assert shapes.tp_degrees(h100, llama, 96) == [1, 2, 4, 8]
    assert shapes.dense_groups(h100, llama, 96) == [1, 2, 4, 8]
    cm, r1 = load_specs().views()
    assert {32, 256} <= set(shapes.sizes(cm, shapes.PREFILL_NODES, 768))
    assert {8, 160, 320, 768} <= set(shapes.sizes(cm, shapes.DECODE_NODES, 768))
    assert shapes.tp_degrees(cm, r1, 768) == [1, 2, 4, 8, 16]
    assert shapes.dense_groups(cm, llama, 768) == [2, 4, 8, 16]  # whole NPUs of two dies


def test_a_dense_model_is_planned_in_tensor_parallel_groups():
    """Llama-3.1-70B on the 96-GPU H100 cluster: 141 GB of BF16 weights fit an 80 GB GPU only
    split, so every instance is a TP group inside a node (prefill TP = dies, decode TP =
    dies); the rates are `cmperf predict`'s for the same TP group."""
    p = plan(workload(), hardware="h100-cluster", model="llama-3.1-70b")
    b = p.best
    assert b is not None and b["goodput_rps"] > 0 and p.message == ""
    assert b["shape"] == "pd" and 2 <= b["prefill_tp"] == b["prefill_dies"] <= 8
    assert 2 <= b["decode_tp"] == b["decode_dies"] <= 8
    assert b["npus"] <= 96 and b["ttft_ms"] <= 2000 * (1 + 1e-6) and b["tpot_ms"] <= 50
    dec = p.instances["decode"]
    row = dec[(dec["dies"] == 8) & (dec["tp"] == 8) & (dec["batch"] == 16)].iloc[0]
    alone = predict("decode", {"batch": 16, "dies": 8, "tp": 8, "kv_len": row["kv_len"]},
                    load_specs("h100-cluster", "llama-3.1-70b")).table
    assert row["tpot_ms"] == pytest.approx(alone["tpot_ms"].iat[0], rel=1e-12)
    assert not dec.loc[dec["tp"] == 1, "fits"].any()  # one GPU never holds the model


# --------------------------------------------------------------------------- co-located against PD
def _by_shape(p) -> dict:
    return {r["shape"]: r for _, r in p.table.drop_duplicates("shape").iterrows()}


@pytest.mark.parametrize("system,model,npus,prompt,output,ttft_s,tpot_s", [
    ("h100-cluster", "llama-3.1-70b", 8, 1024, 64, 5.0, 0.200),
    ("cloudmatrix384", "deepseek-r1", 32, 2048, 128, 10.0, 0.100),
])
def test_colocated_wins_on_a_small_cluster_with_loose_slos(system, model, npus, prompt, output, ttft_s, tpot_s):
    """Few NPUs, short outputs, loose SLOs: PD must split a small budget into whole prefill and
    decode instances and its decode side idles (8 GPUs: one TP4 prefill, one TP4 decode);
    a co-located instance spends every iteration on both. Measured: 26.7 against 17.7
    requests/s on 8 H100 (x1.51), 81.1 against 66.1 on 32 NPUs of CloudMatrix384 (x1.23)."""
    w = workload(prompt=fixed(prompt), output=fixed(output), slo=SLO(ttft_s, tpot_s))
    p = plan(w, hardware=system, model=model, npus=npus, shape_names=["pd", "colocated"])
    best = _by_shape(p)
    assert p.best["shape"] == "colocated" and best["pd"]["goodput_rps"] > 0
    r = summary(p)["aggregated_vs_disaggregated"]
    assert r["colocated_vs_pd_goodput"] == pytest.approx(p.best["goodput_rps"] / best["pd"]["goodput_rps"])
    assert 1.1 < r["colocated_vs_pd_goodput"] < 2.0
    c = p.best
    assert c["ttft_ms"] <= ttft_s * 1e3 * (1 + 1e-6) and c["tpot_ms"] <= tpot_s * 1e3


def test_pd_wins_in_the_papers_setting():
    """4K prompts under a 50 ms TPOT: a chunk costs every decode iteration its prefill work,
    so a co-located instance holds a small batch; PD serves ~3x more (494 against ~167
    requests/s). The co-located shape still finds deployments that meet both SLOs."""
    p = plan(shape_names=["pd", "colocated"])
    r = summary(p)["aggregated_vs_disaggregated"]
    assert p.best["shape"] == "pd" and p.best["goodput_rps"] == pytest.approx(494.4, rel=0.01)
    assert r["pd_goodput_rps"] == p.best["goodput_rps"]
    assert r["colocated_goodput_rps"] > 0 and 0.2 < r["colocated_vs_pd_goodput"] < 0.5
    c = _by_shape(p)["colocated"]
    assert c["ttft_ms"] <= 2000 * (1 + 1e-6) and c["tpot_ms"] <= 50


def test_colocated_ttft_is_the_iterations_a_prompt_takes():
    """At no load a co-located prompt waits for nothing: its TTFT is the iterations its die
    takes to compute it at the die's share of the chunk, times the iteration of that row."""
    p = plan(workload(slo=SLO(20.0, 0.200)), shape_names=["colocated"], npus=64)
    b = p.table.iloc[0]
    assert b["shape"] == "colocated" and b["goodput_rps"] > 0
    colo = p.instances["colocated"]
    row = colo[(colo["dies"] == b["decode_dies"]) & (colo["tp"] == b["decode_tp"])
               & (colo["chunk_tokens"] == b["prefill_tokens_per_npu"])]
    it = row.loc[np.isclose(row["tpot_ms"], b["tpot_ms"]), "iteration_ms"].iat[0]
    per_die = b["prefill_tokens_per_npu"] / 2
    iterations = math.ceil(4096 / per_die) if per_die < 4096 else 1
    assert curves(p, b, [0.0])["ttft_s"][0] * 1e3 == pytest.approx(iterations * it, rel=1e-9)


def test_cli_reports_aggregated_against_disaggregated(cli, tmp_path):
    import json

    args = ["plan", "--hardware", "h100-cluster", "--model", "llama-3.1-70b", "--npus", "8", "--prompt-len", "1024",
            "--output-len", "64", "--ttft-slo", "5000", "--tpot-slo", "200", "--shapes", "pd,colocated"]
    code, out, err = cli(*args)
    assert code == 0, err
    assert "aggregated vs disaggregated" in out and "co-located / PD" in out
    code, out, err = cli(*args, "--format", "json")
    r = json.loads(out)["aggregated_vs_disaggregated"]
    assert r["colocated_vs_pd_goodput"] > 1 and r["pd_goodput_rps_per_npu"] > 0
    csv = tmp_path / "p.csv"
    code, out, err = cli(*args, "--format", "csv", "--out", csv)
    assert code == 0, err
    for text in (out, csv.read_text()):
        assert "# colocated_vs_pd_goodput: " in text and "# pd_goodput_rps: " in text


def test_a_defaulted_kv_tier_reaches_the_budget_and_a_given_one_is_kept():
    """Past one SuperPoD the system's own UB tier cannot carry KV: with no --kv-tier the plan
    takes the nearest tier that reaches every NPU of the budget (UBoE, issue 24); a --kv-tier
    or --set the user gave is kept, and refused by its flag."""
    p = plan(hardware="atlas-950-superpod", npus=100_000, shape_names=("pd",))
    assert p.settings["kv_tier"] == "uboe" and p.best is not None
    with pytest.raises(ConfigError, match=r"^--kv-tier ub: "):
        plan(hardware="atlas-950-superpod", npus=100_000, kv_tier="ub")
    with pytest.raises(ConfigError, match=r"^the KV transfer tier 'ub' \(system.kv_transfer_tier"):
        plan(hardware="atlas-950-superpod", npus=100_000, sets=["system.kv_transfer_tier=ub"])


def test_whole_prompt_passes_by_hand():
    """FCFS whole prompts under a token budget (docs/model.md §9.3): lengths 600, 300, 500,
    900, 200, 400, 100 under 1,000 tokens pack as [600, 300] [500] [900] [200, 400, 100]
    (the last pass, cut at the draw's end, is not counted); a prompt over the budget goes
    alone (1,500 under 1,000: [1500] [200, 300], the last, [1200], not counted)."""
    from cmperf.plan.instances import whole_prompt_passes

    (k, S, Q), = whole_prompt_passes(np.array([600, 300, 500, 900, 200, 400, 100, 50.0]), [1000.0])
    assert list(k) == [2, 1, 1] and list(S) == [900, 500, 900] and list(Q) == [450_000, 250_000, 810_000]
    (k, S, _), = whole_prompt_passes(np.array([1500, 200, 300, 1200, 100.0]), [1000.0])
    assert list(k) == [1, 2] and list(S) == [1500, 500]


def test_varying_lengths_pack_fewer_prompts_than_the_budget_holds_of_the_mean():
    """A budget of whole log-normal prompts holds fewer tokens than the budget (the next one
    does not fit), so fewer prompts than budget / mean; fixed lengths fill it exactly."""
    from cmperf.plan.instances import whole_prompt_passes
    from cmperf.simulate.requests import sample_lengths

    c = sample_lengths(lognormal(1024, 2048, "1024:2048", "--prompt-len"), 8192, np.random.default_rng(0))
    for budget in (2048.0, 8192.0, 32768.0):
        (k, S, _), = whole_prompt_passes(c, [budget])
        assert S.mean() < budget and k.mean() < budget / 1024
        (k, S, _), = whole_prompt_passes(np.full(64, 1024.0), [budget])
        assert set(S) == {budget} and set(k) == {budget / 1024}
