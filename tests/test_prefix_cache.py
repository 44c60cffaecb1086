"""Prefix caching as physics (issue 22; docs/model.md §9.5, §12.2): a per-request hit share,
the pool's block-granular reads at their per-block cost, the uncached tokens' attention over
the whole context; more hits are never slower, in ``predict prefill`` and in ``simulate``."""

from __future__ import annotations

import numpy as np
import pytest

from cmperf.plan.workload import SLO, Workload, fixed
from cmperf.predict import load_specs, predict
from cmperf.simulate import DeploymentSpec, InstanceGroup, Traffic, simulate
from cmperf.simulate.predictor import prefill_predictor
from cmperf.simulate.requests import hit_shares

HITS = (0.0, 0.25, 0.5, 0.75, 0.9)


def test_hit_shares_have_the_beta_moments():
    """Beta(k h, k (1 - h)): mean h, variance h (1 - h) / (k + 1); k = inf is every request h."""
    rng = np.random.default_rng(3)
    x = hit_shares(0.6, 2.0, 200_000, rng)
    assert x.mean() == pytest.approx(0.6, abs=3e-3)
    assert x.var() == pytest.approx(0.6 * 0.4 / 3.0, rel=0.02)
    assert (hit_shares(0.6, float("inf"), 5, rng) == 0.6).all() and (hit_shares(0.0, 2.0, 5, rng) == 0).all()


@pytest.mark.parametrize("system", ["cloudmatrix384", "h800-cluster"])
def test_a_homogeneous_batch_is_predicts_own_row(system):
    """n prompts of P = 4096 with C = 2048 cached (n >= the attention groups): the pass the
    predictor gives from the batch's own bytes and blocks is predict's forward_ms at that row."""
    specs = load_specs(system)
    hw, _ = specs.views()
    dpp = hw.chip.dies_per_package
    dies, tp = 32, 4
    inst = {"dies": dies, "attn_tp": tp, "pool_readers": dies}
    comp = np.full(16, 2048.0)
    cached = np.full(16, 2048.0)
    pred = prefill_predictor(specs, inst, 16 * 2048.0, comp, cached)
    from cmperf.cost.arch import kv_cache
    from cmperf.cost.ops import Bytes

    _, m = specs.views()
    row = predict("prefill", {**inst, "tokens_per_npu": 16 * 2048 / (dies / dpp), "prompt_len": 4096, "cached_len": 2048,
                              "pool_len": 2048}, specs)  # the whole prefix read from the pool, as the batch's bytes say
    r = row.columns.records()[0]
    kv = kv_cache(m, Bytes.of(m).kv, float(r["mtp"]))
    n = 16
    block = hw.system.memory_pool.block_tokens
    pass_s, xfer_s = pred.times(n * 2048.0, 2048.0, 2048.0, n, n * float(kv.bytes(2048.0)), n * np.ceil(2048 / block),
                                n * float(kv.bytes(4096.0)))
    assert pass_s == pytest.approx(r["forward_ms"] / 1e3, rel=1e-6)
    assert xfer_s == pytest.approx(r["kv_transfer_ms"] / 1e3, rel=1e-6)


@pytest.mark.parametrize("system", ["cloudmatrix384", "h800-cluster"])
def test_more_cached_is_never_slower_per_prompt(system):
    """predict prefill at a fixed number of prompts per pass: a longer cached prefix (the
    rest computed, attending the whole context; the prefix read in blocks) never takes longer."""
    specs = load_specs(system)
    hw, _ = specs.views()
    dpp = hw.chip.dies_per_package
    P = 8192
    rows = [{"dies": 32, "attn_tp": 4, "tokens_per_npu": 4 * (P - C) / dpp, "prompt_len": P,
             **({"cached_len": C} if C else {})} for C in range(0, P, 512)]
    t = predict("prefill", rows=rows, specs=specs).columns["forward_ms"].to_numpy()
    assert (np.diff(t) <= 1e-9).all(), t


def _ttfts(specs, dep, rate, n=600):
    w0 = dict(prompt=fixed(4096), output=fixed(128), slo=SLO(ttft_s=2.0, tpot_s=0.1))
    return [simulate(specs, Workload(prefix_hit=h, **w0), dep, Traffic(rate_rps=rate, num_prompts=n), seed=4).metrics["mean_ttft_ms"]
            for h in HITS]


CASES = {
    "cloudmatrix384 (the paper's 6 x 32 + 1 x 320)": ("cloudmatrix384", None,
        DeploymentSpec(prefill=[InstanceGroup(6, {"dies": 32, "attn_tp": 4})], decode=[InstanceGroup(1, {"dies": 320})]), 60.0),
    "h800-cluster (3FS)": ("h800-cluster", None,
        DeploymentSpec(prefill=[InstanceGroup(4, {"dies": 32})], decode=[InstanceGroup(1, {"dies": 64})]), 25.0),
    "cloudmatrix384 on vllm-ascend": ("cloudmatrix384", "vllm-ascend",
        DeploymentSpec(prefill=[InstanceGroup(2, {"dies": 32, "attn_tp": 4})], decode=[InstanceGroup(1, {"dies": 64})]), 15.0),
}


@pytest.mark.parametrize("case", list(CASES))
def test_more_hits_never_raise_the_mean_ttft(case):
    system, stack, dep, rate = CASES[case]
    t = _ttfts(load_specs(system, stack=stack), dep, rate)
    assert all(b <= a * 1.0 + 1e-9 for a, b in zip(t, t[1:])), dict(zip(HITS, t))
    assert t[-1] < t[0]


def test_a_pool_too_small_for_the_working_set_serves_fewer_hits():
    """An LRU pool under uniform popularity keeps held / W of a working set W: the hit share
    served falls, and the mean TTFT rises towards the no-hit run's."""
    specs = load_specs("cloudmatrix384")
    dep = CASES["cloudmatrix384 (the paper's 6 x 32 + 1 x 320)"][2]
    w = Workload(prompt=fixed(4096), output=fixed(128), prefix_hit=0.75, slo=SLO(ttft_s=2.0, tpot_s=0.1))
    tr = Traffic(rate_rps=60.0, num_prompts=400)
    big = simulate(specs, w, dep, tr, seed=4)
    small = simulate(specs, w, dep, tr, seed=4, working_set_tokens=1e13)
    assert small.requests.cached.mean() < 0.01 * big.requests.cached.mean()
    assert small.metrics["mean_ttft_ms"] > big.metrics["mean_ttft_ms"]


@pytest.mark.parametrize("system,model,npus", [("cloudmatrix384", None, 128), ("h800-cluster", None, 64),
                                              ("h100-cluster", "llama-3.1-70b", 16)])
def test_more_hits_never_lower_the_planned_goodput(system, model, npus):
    """plan: the largest rate within the SLOs never falls as the hit share rises (from the
    pool; from HBM on 16 H100s, which have none)."""
    from cmperf.plan.planner import plan

    specs = load_specs(system, model)
    good = [plan(Workload(prompt=fixed(4096), output=fixed(256), prefix_hit=h, slo=SLO(ttft_s=2.0, tpot_s=0.05)),
                 specs=specs, npus=npus, shape_names=("pd",)).best["goodput_rps"] for h in HITS]
    assert all(b >= a * (1 - 1e-9) for a, b in zip(good, good[1:])), dict(zip(HITS, good))


# --------------------------------------------------------------------------- the two tiers, write-back, capacity
# (docs/model.md §9.5: the HBM prefix cache of the stack, the pool as the next tier)
from pathlib import Path  # noqa: E402

from cmperf.cost.pool import cache_tiers, pool_write_s, served_hit  # noqa: E402
from cmperf.predict import system_model  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
SYSTEMS = sorted(p.stem for p in (REPO / "hardware").glob("*.yaml") if "kind: system" in p.read_text())
PAPER_DEP = CASES["cloudmatrix384 (the paper's 6 x 32 + 1 x 320)"][2]


def test_no_hits_give_the_results_of_before_the_tiers():
    """--prefix-hit 0 uses neither tier nor writes back: the paper deployment's run is the one
    main gave before the cache tiers (commit 8417c4d: mean TTFT 428.4683771949519 ms, TPOT
    12.012012029008895 ms, 6,327.345923150682 tokens/s at 60 requests/s, 600 prompts, seed 4),
    with the passes of whole prompts timed exactly since (simulate/predictor.py
    whole_prompt_tokens: TTFT 426.52893356657785 ms, 6,348.702363991706 tokens/s; TPOT as it was)."""
    specs = load_specs("cloudmatrix384")
    w = Workload(prompt=fixed(4096), output=fixed(128), prefix_hit=0.0, slo=SLO(ttft_s=2.0, tpot_s=0.1))
    r = simulate(specs, w, PAPER_DEP, Traffic(rate_rps=60.0, num_prompts=600), seed=4)
    assert r.metrics["mean_ttft_ms"] == pytest.approx(426.52893356657785, rel=1e-12)
    assert r.metrics["mean_tpot_ms"] == pytest.approx(12.012012029008895, rel=1e-12)
    assert r.metrics["output_throughput_tps"] == pytest.approx(6348.702363991706, rel=1e-12)
    assert not r.requests.write_B.any() and not r.requests.pool_B.any()
    row = predict("prefill", {}, specs).columns.records()[0]
    assert row["pool_write_ms"] == 0 and row["pool_write_wait_ms"] == 0 and row["pool_load_ms"] == 0


def test_more_cached_is_never_slower_on_every_system():
    """Every shipped system with its default model, prefill instance and stack: at 4 prompts
    per die, a longer cached prefix never makes the pass longer, from the first tier there is
    (HBM where the stack caches) and, where the system has a pool, read wholly from the pool."""
    P, Cs = 4096, range(0, 4096, 512)
    for system in SYSTEMS:
        specs = load_specs(system, system_model(system))
        hw, _ = specs.views()
        dpp = hw.chip.dies_per_package
        tails = [None] + (["pool"] if hw.system.memory_pool is not None else [])
        for tail in tails:
            rows = [{"tokens_per_npu": 4 * (P - C) * dpp, "prompt_len": P,
                     **({"cached_len": C} if C else {}), **({"pool_len": C} if tail and C else {})} for C in Cs]
            t = predict("prefill", rows=rows, specs=specs).columns["forward_ms"].to_numpy()
            assert (np.diff(t) <= 1e-9 * t[:-1]).all(), (system, tail, t)


def test_the_tiers_keep_what_fits_of_the_working_set():
    """Hand-derived (docs/model.md §9.5): LRU tiers of 1 M (HBM) and 4 M (pool, a superset)
    tokens over a working set of 8 M keep 1/8 in HBM and 4/8 - 1/8 = 3/8 in the pool; a working
    set that fits is served wholly from the first tier; more of either capacity never serves
    fewer hits."""
    assert cache_tiers(1e6, 4e6, 8e6) == pytest.approx((0.125, 0.375))
    assert cache_tiers(1e6, 4e6, 5e5) == (1.0, 0.0)
    assert cache_tiers(1e6, 4e6, None) == (1.0, 0.0)
    assert cache_tiers(1e6, 4e6, None, hbm=False) == (0.0, 1.0)
    assert cache_tiers(1e6, 4e6, 8e6, pool=False) == pytest.approx((0.125, 0.0))
    caps = np.geomspace(1e5, 1e8, 13)
    for W in (1e6, 3e7):
        served = np.array([[sum(cache_tiers(h, p, W)) for p in caps] for h in caps])
        in_hbm = np.array([[cache_tiers(h, p, W)[0] for p in caps] for h in caps])
        assert (np.diff(served, axis=0) >= -1e-12).all() and (np.diff(served, axis=1) >= -1e-12).all()
        assert (np.diff(in_hbm, axis=0) >= 0).all() and (np.diff(in_hbm, axis=1) == 0).all()


def test_served_hit_splits_a_prefix_between_the_tiers():
    """CloudMatrix-Infer keeps no HBM prefix cache (EMS only, paper §4.4): a working set of
    twice the pool's 672 M tokens serves half the hits, all from the pool. The H800 cluster
    (no stack: every free HBM page caches) with a working set of twice an instance's HBM tier
    serves every hit (3FS holds the rest), half of each prefix from 3FS."""
    w = Workload(prompt=fixed(4096), output=fixed(256), prefix_hit=0.6, slo=SLO(ttft_s=2.0, tpot_s=0.05))
    hw, m = load_specs("cloudmatrix384").views()
    _, pool_tokens, _ = served_hit(hw, m, w)
    hit, _, part = served_hit(hw, m, w, 2 * pool_tokens, hbm_tokens=1e9)
    assert (hit, part) == (pytest.approx(0.3), 1.0)
    hw, m = load_specs("h800-cluster").views()
    hit, _, part = served_hit(hw, m, w, 2e6, hbm_tokens=1e6)
    assert (hit, part) == (pytest.approx(0.6), pytest.approx(0.5))
    assert served_hit(hw, m, w)[2] == 0.0  # no working set: every prefix in HBM


def test_write_back_hand_derived():
    """predict prefill on CloudMatrix384, P = 4096, C = 2048 cached, 16K tokens per NPU: each
    die writes back its 4 prompts' 8 new 256-token blocks (the blocks past the cached ones) at
    paper Table 1's NPU-CPU write, 107 GB/s and 1.9 us a block, plus the 2.6 us block
    overhead (32 writers share 48 x 210 GB/s: 315 GB/s each, above 107), overlapped with the
    pass; with the write at 1 GB/s it outlasts the compute and the pass is read + write."""
    from cmperf.cost.arch import kv_cache
    from cmperf.cost.ops import Bytes

    specs = load_specs("cloudmatrix384")
    _, m = specs.views()
    q = {"tokens_per_npu": 16384, "prompt_len": 4096, "cached_len": 2048}
    r = predict("prefill", q, specs).columns.records()[0]
    kv_tok = float(kv_cache(m, Bytes.of(m).kv, float(r["mtp"])).bytes(2048.0)) / 2048.0
    seqs = 16384 / 2 / 2048
    assert r["pool_write_blocks_per_die"] == seqs * 8
    expected = seqs * 2048 * kv_tok / 107e9 + seqs * 8 * (1.9e-6 + 2.6e-6)
    assert r["pool_write_ms"] == pytest.approx(expected * 1e3, rel=1e-9)
    assert r["pool_write_wait_ms"] == 0.0  # hidden under a ~3 s pass
    slow = load_specs("cloudmatrix384", sets=["system.memory_pool.writes.ub.bandwidth_Bps=1e8"])
    s = predict("prefill", q, slow).columns.records()[0]
    assert s["pool_write_ms"] > s["forward_ms"] - s["pool_write_wait_ms"] - s["pool_load_ms"]
    assert s["forward_ms"] == pytest.approx(s["pool_load_ms"] + s["pool_write_ms"], rel=1e-12)
    assert float(pool_write_s(slow.views()[0], 1e9, 0.0)) == pytest.approx(10.0)


def _ttft(specs, dep, h, ws=None, rate=25.0, n=300):
    w = Workload(prompt=fixed(4096), output=fixed(128), prefix_hit=h, slo=SLO(ttft_s=2.0, tpot_s=0.1))
    return simulate(specs, w, dep, Traffic(rate_rps=rate, num_prompts=n), seed=4, working_set_tokens=ws).metrics["mean_ttft_ms"]


def test_more_pool_capacity_or_bandwidth_is_never_slower():
    """simulate on CloudMatrix384 at 75 % hits with a working set of twice the pool (half the
    hits served): a pool of twice the DRAM serves them all and is faster; a pool read and
    write of half the bandwidth is never faster, of twice never slower."""
    base = load_specs("cloudmatrix384")
    hw, m = base.views()
    w = Workload(prompt=fixed(4096), output=fixed(128), prefix_hit=0.75, slo=SLO(ttft_s=2.0, tpot_s=0.1))
    ws = 2 * served_hit(hw, m, w)[1]
    t = {name: _ttft(load_specs("cloudmatrix384", sets=sets), PAPER_DEP, 0.75, ws, rate=60.0)
         for name, sets in {"base": [], "dram x2": ["system.memory_pool.dram_per_node_B=4e12"],
                            "bw / 2": ["system.memory_pool.reads.ub.bandwidth_Bps=73.5e9", "system.memory_pool.writes.ub.bandwidth_Bps=53.5e9"],
                            "bw x 2": ["system.memory_pool.reads.ub.bandwidth_Bps=294e9", "system.memory_pool.writes.ub.bandwidth_Bps=214e9"]}.items()}
    assert t["dram x2"] < t["base"], t
    assert t["bw x 2"] <= t["base"] <= t["bw / 2"], t


@pytest.mark.parametrize("system,model,dep,rate", [
    ("h100-cluster", "llama-3.1-70b", DeploymentSpec(prefill=[InstanceGroup(1, {"dies": 8})], decode=[InstanceGroup(1, {"dies": 4})]), 5.0),
    ("gb200-nvl72", None, DeploymentSpec(prefill=[InstanceGroup(1, {"dies": 8})], decode=[InstanceGroup(1, {"dies": 48})]), 40.0)])
def test_systems_without_a_pool_cache_in_hbm(system, model, dep, rate):
    """No pool, no flag: the stack's HBM prefix cache serves the hits and the mean TTFT falls
    with them (issue 22's done-criterion on two more systems); a working set ten times the
    instance's HBM tier serves a tenth of the hits and is slower."""
    specs = load_specs(system, model)
    t = [_ttft(specs, dep, h, rate=rate, n=300) for h in HITS]
    assert all(b <= a for a, b in zip(t, t[1:])) and t[-1] < 0.5 * t[0], dict(zip(HITS, t))
    from cmperf.plan.instances import hbm_instance_tokens

    w = Workload(prompt=fixed(4096), output=fixed(128), prefix_hit=0.75, slo=SLO(ttft_s=2.0, tpot_s=0.1))
    ws = 10 * hbm_instance_tokens(specs, w, dict(dep.prefill[0].inputs))
    assert _ttft(specs, dep, 0.75, ws, rate=rate) > t[HITS.index(0.75)]


@pytest.mark.parametrize("args,names", [
    (["--cached-len", "1024", "--pool-len", "2048"], ["--pool-len 2048", "at most --cached-len 1024"]),
    (["--pool-len", "-1"], ["--pool-len"]),
    (["--hardware", "h100-cluster", "--model", "llama-3.1-70b", "--cached-len", "1024", "--pool-len", "512"],
     ["--pool-len 512", "no memory pool"]),
    (["--hardware", "h100-cluster", "--model", "llama-3.1-70b", "--cached-len", "1024", "--set", "stack.prefix_cache_hbm_share=0"],
     ["--cached-len 1024", "prefix_cache_hbm_share"])])
def test_pool_len_and_tierless_caching_are_clear_errors(cli, args, names):
    from helpers import one_line_error

    code, _, err = cli("predict", "prefill", *args)
    one_line_error(code, err, *names)


def test_pool_len_reads_the_tail_from_the_pool(cli):
    """--pool-len L of a C-token prefix reads only the last L tokens from the pool: half the
    prefix, half the bytes and blocks (MLA: the same bytes per token)."""
    import json

    rows = [json.loads(cli("predict", "prefill", "--cached-len", "2048", *x, "-f", "json")[1])
            for x in ([], ["--pool-len", "1024"], ["--pool-len", "0"])]
    assert rows[0]["pool_len"] == 2048  # CloudMatrix-Infer: the whole prefix from EMS
    assert rows[1]["pool_bytes_per_die"] == pytest.approx(rows[0]["pool_bytes_per_die"] / 2, rel=1e-12)
    assert rows[1]["pool_blocks_per_die"] == rows[0]["pool_blocks_per_die"] / 2
    assert rows[2]["pool_load_ms"] == 0 < rows[1]["pool_load_ms"] < rows[0]["pool_load_ms"]
    assert rows[2]["forward_ms"] < rows[1]["forward_ms"] < rows[0]["forward_ms"]


# --------------------------------------------------------------------------- what caching cannot remove
# (docs/model.md §9.5, "What a hit cannot remove: the gain's bound")
ASCEND_STACKS = ("cloudmatrix-infer", "sglang-ascend", "vllm-ascend", "xdeepserve")


def _hand_read_s(hw, m, mtp, prompts_per_die, tail, readers):
    """A die's read of its prompts' ``tail``-token pool-held prefixes, by the formula of §9.5
    from the spec's own figures: bytes / min(r, N s / n) + blocks x (latency + overhead)."""
    from cmperf.cost.arch import kv_cache
    from cmperf.cost.ops import Bytes

    if tail <= 0:
        return 0.0
    pool = hw.system.memory_pool
    read = pool.reads[pool.tier]
    rate = min(read.bandwidth_Bps, hw.system.nodes * pool.serve_per_node_Bps / readers)
    kv_B = float(kv_cache(m, Bytes.of(m).kv, mtp).bytes(float(tail)))
    return prompts_per_die * (kv_B / rate + np.ceil(tail / pool.block_tokens) * (read.latency_s + pool.block_overhead_s))


def test_the_gain_of_a_hit_is_bounded_by_what_caching_cannot_remove():
    """Every shipped system with its default model and stack, and CloudMatrix384 with each Ascend
    stack, from the first tier and wholly from the pool: 4 prompts of 4,096 tokens per die, a
    share h of each cached. The device work of the computed tokens is at least (1 - h) of the
    uncached pass's (linear work falls as P - C, attention over the whole context as
    (P - C)(C + (P - C + 1)/2) >= (1 - h) P (P + 1)/2, weights and latencies not at all), and
    the pool read and the pass's own host work are not removed at all:

        T(h) >= R(h) + (1 - h)(T(0) - H) + H,   gain T(0)/T(h) <= T(0) / (R(h) + (1 - h)(T(0) - H) + H)

    with R the die's pool read and H = prefill_overhead_s + prompts per rank x
    prefill_request_s, both hand-derived from the spec files. And a cached prompt is never
    faster than a fresh prompt of its computed tokens plus the read: T(P, C) >= T(P - C, 0) + R.
    A planted bug that lets a hit skip a pass's host work, or its pool read, breaks one of them."""
    from cmperf.cost.host import stack_value

    P = 4096
    cases = [(s, None) for s in SYSTEMS] + [("cloudmatrix384", st) for st in ASCEND_STACKS]
    checked = 0
    for system, stack in cases:
        specs = load_specs(system, system_model(system), stack=stack)
        hw, m = specs.views()
        dpp = hw.chip.dies_per_package
        for tail in [None] + (["pool"] if hw.system.memory_pool is not None else []):
            for h in (0.5, 0.9):
                C = int(round(h * P))
                pool = {"pool_len": C} if tail else {}
                rows = [{"tokens_per_npu": 4 * P * dpp, "prompt_len": P},
                        {"tokens_per_npu": 4 * (P - C) * dpp, "prompt_len": P, "cached_len": C, **pool},
                        {"tokens_per_npu": 4 * (P - C) * dpp, "prompt_len": P - C}]
                r0, rh, fresh = predict("prefill", rows=rows, specs=specs).columns.records()
                per_rank = 4 * float(rh["attn_tp"])
                H = (float(stack_value(hw.stack, "prefill_overhead_s"))
                     + per_rank * float(stack_value(hw.stack, "prefill_request_s"))) if hw.stack is not None else 0.0
                R = _hand_read_s(hw, m, float(rh["mtp"]), 4.0, float(rh["pool_len"]), float(rh["pool_readers"])) \
                    if hw.system.memory_pool is not None else 0.0
                t0, th = r0["forward_ms"] / 1e3, rh["forward_ms"] / 1e3
                where = (system, stack, tail, h)
                assert rh["pool_load_ms"] / 1e3 == pytest.approx(R, rel=1e-9, abs=1e-12), where
                assert th >= R + (1 - h) * (t0 - H) + H - 1e-9 * t0, (where, th, R, H, t0)
                assert 1.0 <= t0 / th <= t0 / (R + (1 - h) * (t0 - H) + H) + 1e-9, where
                assert th >= fresh["forward_ms"] / 1e3 + R - 1e-9 * th, (where, th, fresh["forward_ms"], R)
                checked += 1
    assert checked >= 2 * (len(cases) + 4)  # the pool rows too, on the systems that have one
