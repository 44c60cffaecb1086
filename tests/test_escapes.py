"""Tests for the kinds of planted bug that escaped the suite (issue 23): each a hand-derived
value or a structural law, not a pinned output, so that a bug of that kind fails here after
any re-fit. Where the code is being rewritten (the simulation engine), the test reads the
public behaviour: simulate()'s requests and metrics, plan's rows."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from cmperf.plan.workload import SLO, Workload, fixed
from cmperf.predict import load_specs
from cmperf.simulate import DeploymentSpec, InstanceGroup, Traffic, simulate

SLOS = SLO(ttft_s=1e6, tpot_s=1e6)


@pytest.fixture(scope="module")
def specs():
    return load_specs("cloudmatrix384", "deepseek-r1")


def _short_requests(n_out=2):
    return Workload(prompt=fixed(128), output=fixed(n_out), prefix_hit=0.0, slo=SLOS)


# --------------------------------------------------------------------------- arrivals
@pytest.mark.parametrize("burstiness", [1.0, 0.5, 3.0])
def test_arrival_gaps_have_mean_one_over_the_rate_and_cv_the_burstiness(specs, burstiness):
    """bench_serving's gamma arrivals: gaps of mean 1/rate and coefficient of variation CV
    (shape 1/CV^2, scale mean CV^2). With n = 6,000 gaps the sample mean is within
    4 CV / sqrt(n) of 1/rate and the sample CV within 12 % of CV (a scale of mean/shape^2 or
    shape CV^2 fails both)."""
    rate, n = 50.0, 6000
    dep = DeploymentSpec(prefill=[InstanceGroup(6, {"dies": 32, "attn_tp": 4})], decode=[InstanceGroup(1, {"dies": 320})])
    r = simulate(specs, _short_requests(), dep, Traffic(rate_rps=rate, burstiness=burstiness, num_prompts=n + 1), seed=3)
    gaps = np.diff(np.sort(r.requests.arrival_s))
    assert gaps.mean() == pytest.approx(1 / rate, rel=4 * burstiness / math.sqrt(n))
    assert gaps.std() / gaps.mean() == pytest.approx(burstiness, rel=0.12)


# --------------------------------------------------------------------------- MTP off
def test_without_mtp_every_decode_step_gives_one_token(specs):
    """MTP off (mtp 0): accept length 1 and output - 1 decode steps per request (the first
    token comes from prefill), whatever the stack's draft tokens say."""
    dep = DeploymentSpec(prefill=[InstanceGroup(2, {"dies": 32, "attn_tp": 4})], decode=[InstanceGroup(1, {"dies": 64, "mtp": 0})])
    r = simulate(specs, _short_requests(9), dep, Traffic(rate_rps=20.0, num_prompts=50), seed=1)
    assert r.metrics["accept_length"] == 1.0
    assert (r.requests.steps == 8).all()


# --------------------------------------------------------------------------- ITL per token
def test_itl_quantiles_are_over_tokens_not_intervals():
    """Two decode intervals, each one step: 99 requests step in 1 ms, then 1 request in 100 ms.
    99 of the 100 token gaps are 1 ms: the median ITL is 1 ms (per interval it would be
    ~50 ms) and the mean (99 x 1 + 100) / 100 = 1.99 ms."""
    from cmperf.simulate.engine import Requests, Stats
    from cmperf.simulate.metrics import metrics

    n = 100
    send = np.zeros(n)
    req = Requests(arrival_s=send, prompt=np.full(n, 10.0), output=np.full(n, 2.0), cached=np.zeros(n), steps=np.ones(n))
    req.send_s = send
    req.first_token_s = np.full(n, 0.01)
    req.finish_s = np.r_[np.full(99, 0.011), 0.111]
    req.prefill_start_s, req.prefill_end_s, req.kv_arrive_s = np.zeros(n), np.full(n, 0.005), np.full(n, 0.006)
    stats = Stats()
    # (step time, growth per step, steps, requests, step time of balanced ranks)
    stats.intervals.extend([(0.001, 0.0, 1, 99, 0.001), (0.100, 0.0, 1, 1, 0.100)])
    m = metrics(req, stats)
    assert m["median_itl_ms"] == pytest.approx(1.0, rel=1e-6)
    assert m["mean_itl_ms"] == pytest.approx(1.99, rel=1e-6)


# --------------------------------------------------------------------------- plan with given shapes
def test_plan_of_given_shapes_keeps_their_counts_and_counts_npus_not_dies(cli):
    """plan --prefill 2x32 --decode 3x64 on CloudMatrix384 (2 dies per NPU): 2 prefill and 3
    decode instances as given, (2 x 32 + 3 x 64) / 2 = 128 NPUs."""
    code, out, err = cli("plan", "--prefill", "2x32:tp=4", "--decode", "3x64", "-f", "json")
    assert code in (0, 1), err
    best = json.loads(out)["best"]
    assert best["prefill_instances"] == 2 and best["decode_instances"] == 3
    assert best["prefill_dies"] == 32 and best["decode_dies"] == 64
    assert best["npus"] == pytest.approx(128)


# --------------------------------------------------------------------------- dispatch fan-out
def test_dispatch_counts_the_local_expert_as_local(specs):
    """EP = 2, 256 routed experts (128 per die), top-8, a shared copy on each die: of the
    other die's T tokens x 8 choices, half land on this die's experts: it receives 4 T rows
    (a local expert counted as remote gives 8 T); EP = 1 receives nothing."""
    from cmperf.cost.ops import placement

    _, m = specs.views()
    T = 100.0
    pl = placement(m, T, 2.0, 0.0, 2.0, 1.0, 1)
    assert float(pl.remote_routed_fraction) == pytest.approx(0.5)
    assert float(pl.received_rows) == pytest.approx(4 * T)
    one = placement(m, T, 1.0, 0.0, 1.0, 1.0, 1)
    assert float(one.remote_routed_fraction) == 0.0 and float(one.received_rows) == 0.0
