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


# --------------------------------------------------------------------------- a stack's host time, per phase
def test_a_decode_schedulers_overhead_is_charged_to_decode_iterations_only(cli):
    """stack.scheduler_overhead_s is host time per decode iteration: +10 ms makes a decode
    iteration exactly 10 ms longer (the host waits are serial with the device) and leaves a
    prefill pass unchanged (its own host time is prefill_overhead_s)."""
    def row(phase, *sets):
        argv = ["predict", phase, "--stack", "cloudmatrix-infer", *[a for s in sets for a in ("--set", s)], "-f", "json"]
        code, out, err = cli(*argv)
        assert code == 0, err
        d = json.loads(out)
        return d if "phase" in d else d["rows"][0]

    base, slow = row("decode"), row("decode", "stack.scheduler_overhead_s=0.01")
    assert slow["iteration_ms"] - base["iteration_ms"] == pytest.approx(10.0, abs=1e-6)
    p0, p1 = row("prefill"), row("prefill", "stack.scheduler_overhead_s=0.01")
    assert p1["ttft_ms"] == pytest.approx(p0["ttft_ms"], rel=1e-12)


# --------------------------------------------------------------------------- Gated DeltaNet prefill: the state's bytes
def test_gated_deltanet_prefill_writes_each_prompts_state_once():
    """Qwen3-Next's linear layer (32 value heads, 16 key heads, 128 x 128 head dims, conv kernel
    4, bf16 state): a prompt's final state is 32 x 128 x 128 recurrent + 3 x (2 x 16 x 128 +
    32 x 128) conv = 548,864 elements = 1,097,728 bytes, written once per prompt. The same
    4,096 tokens as two prompts of 2,048 instead of one of 4,096 write exactly one state more
    (a state written per token would add nothing here, and 4,096 of them everywhere); a cached
    prefix's state is read once more per prompt."""
    from cmperf.cost.ops import attention_prefill_ops

    _, m = load_specs("cloudmatrix384", "qwen3-next-80b-a3b").views()

    def scan(T, P, cached=0.0):
        ops = attention_prefill_ops(m, np.asarray(T, dtype=float), np.asarray(P, dtype=float), np.asarray(1.0), "ub",
                                    np.asarray(cached, dtype=float), kind="linear")
        (op,) = [o for o in ops if o.name == "linear_scan"]
        return float(np.asarray(op.hbm_bytes))

    state = (32 * 128 * 128 + 3 * (2 * 16 * 128 + 32 * 128)) * 2
    assert state == 1_097_728
    assert scan(4096, 2048) - scan(4096, 4096) == pytest.approx(state, rel=1e-9)
    assert scan(4096, 4096 + 1024, cached=1024) - scan(4096, 4096) == pytest.approx(state, rel=1e-9)


# --------------------------------------------------------------------------- a die's vector rate follows its vector units
def test_a_dies_vector_rate_follows_its_vector_units():
    """--set chip.die.vector_units=24 on the 910C (48 AI Vector cores): half the cores, half the
    vector rate (the rate is the units' sum: cmperf/specs/loader.py UNIT_RATES); given both, the
    rate is as given. A sweep of the units carries the rate the same way."""
    base = load_specs().views()[0].chip.die
    half = load_specs(sets=["chip.die.vector_units=24"]).views()[0].chip.die
    assert half.vector_ops_per_s == pytest.approx(base.vector_ops_per_s * 24 / base.vector_units, rel=1e-12)
    both = load_specs(sets=["chip.die.vector_units=24", "chip.die.vector_ops_per_s=1e12"]).views()[0].chip.die
    assert both.vector_ops_per_s == 1e12
    swept = load_specs().views({"chip.die.vector_units": np.array([12.0, 48.0, 96.0])})[0].chip.die
    assert np.allclose(np.asarray(swept.vector_ops_per_s), base.vector_ops_per_s * np.array([0.25, 1.0, 2.0]), rtol=1e-12)


@pytest.mark.parametrize("chip", ["ascend-910b", "ascend-950dt", "ascend-950pr"])
def test_a_proxy_chips_vector_rate_is_the_910c_rate_per_core_times_its_cores(chip):
    """Chips without a vector measurement take the 910C's fitted rate per AI Vector core times
    their own cores (their sources say so): 1.062e12 / 48 per core. A rate taken from the 910C's
    die whole (unscaled by the core count) is 50 % off on the 950s; tolerance 0.5 % (the 950
    files quote the rate of an earlier fit, 1.065e12)."""
    from cmperf.specs.loader import load_chip

    c910, _ = load_chip("ascend-910c", {})
    c, _ = load_chip(chip, {})
    assert "910C" in c.die.vector_ops_per_s.source
    per_core = c910.die.vector_ops_per_s.value / c910.die.vector_units.value
    assert c.die.vector_ops_per_s.value == pytest.approx(per_core * c.die.vector_units.value, rel=5e-3)


# --------------------------------------------------------------------------- DP ranks of a TP > 1 decode instance
def _most_decoding(r) -> float:
    """The most requests decoding at once (admitted at their first token, out at their finish)."""
    q = r.requests
    t = np.r_[q.first_token_s, q.finish_s]
    d = np.r_[np.ones(len(q.first_token_s)), -np.ones(len(q.finish_s))]
    return float(np.cumsum(d[np.lexsort((d, t))]).max())  # a finish before a start at the same time


@pytest.mark.parametrize("tp", [1, 2, 4])
def test_a_decode_instance_has_dies_over_tp_ranks_each_holding_the_stacks_limit(tp):
    """32 decode dies at TP t are 32 / t data-parallel attention ranks; with
    max_running_per_rank = 2 and 300 requests sent at once, exactly 2 x 32 / t decode at once
    (64, 32, 16): ranks counted as dies would hold 64 at any TP."""
    specs = load_specs("cloudmatrix384", "deepseek-r1", ["stack.max_running_per_rank=2"], "sglang-ascend")
    dep = DeploymentSpec(prefill=[InstanceGroup(2, {"dies": 16, "attn_tp": 8})], decode=[InstanceGroup(1, {"dies": 32, "tp": tp})])
    w = Workload(prompt=fixed(512), output=fixed(64), prefix_hit=0.0, slo=SLOS)
    r = simulate(specs, w, dep, Traffic(rate_rps=None, num_prompts=300), seed=0)
    assert _most_decoding(r) == 2 * 32 / tp


# --------------------------------------------------------------------------- an eager phase's launches, counted once
def test_an_eager_prefill_waits_for_each_launch_once(cli):
    """sglang-ascend runs prefill eagerly: the host launches each of the pass's N kernels in
    eager_launch_s e, ahead of the device, so the pass is max(device, N e) + its serial host
    time (cmperf/cost/host.py). A fast host leaves the pass as the graph pass; a slow one makes
    it host-bound, growing by N per second of e, the slope of the pass's own host time: a launch
    also added to the device's time (counted twice) would make it 2 N."""
    def run(e=None, graph=False):
        sets = ([f"stack.eager_launch_s={e!r}"] if e is not None else []) + (["stack.prefill_graph.value=graph"] if graph else [])
        code, out, err = cli("predict", "prefill", "--stack", "sglang-ascend", *[a for s in sets for a in ("--set", s)], "-f", "json")
        assert code == 0, err
        d = json.loads(out)
        d = d if "phase" in d else d["rows"][0]
        return d["ttft_ms"], d["host_ms"]

    graph, _ = run(graph=True)
    assert run(1e-9)[0] == pytest.approx(graph, rel=1e-9)
    (t1, h1), (t2, h2), (t3, h3) = run(2e-2), run(4e-2), run(8e-2)
    n = (h2 - h1) / 2e-2  # the pass's launches (ms of host time per s of e)
    assert n > 0 and (h3 - h2) / 4e-2 == pytest.approx(n, rel=1e-9)
    assert t1 > graph and (t2 - t1) / 2e-2 == pytest.approx(n, rel=1e-6) and (t3 - t2) / 4e-2 == pytest.approx(n, rel=1e-6)