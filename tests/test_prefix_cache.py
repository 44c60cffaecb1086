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


@pytest.mark.parametrize("system,npus", [("cloudmatrix384", 128), ("h800-cluster", 64)])
def test_more_hits_never_lower_the_planned_goodput(system, npus):
    """plan: the largest rate within the SLOs never falls as the hit share rises."""
    from cmperf.plan.planner import plan

    specs = load_specs(system)
    good = [plan(Workload(prompt=fixed(4096), output=fixed(256), prefix_hit=h, slo=SLO(ttft_s=2.0, tpot_s=0.05)),
                 specs=specs, npus=npus, shape_names=("pd",)).best["goodput_rps"] for h in HITS]
    assert all(b >= a * (1 - 1e-9) for a, b in zip(good, good[1:])), dict(zip(HITS, good))
