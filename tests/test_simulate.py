"""``cmperf simulate`` (cmperf/simulate, docs/model.md §12): the engine against a plain
per-step reference, bench_serving's metric definitions by hand, the step-time grid against
predict's own rows, and the structure a queue must show (more load, longer waits; a closed
loop never exceeds its concurrency; the same seed, the same run)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from cmperf.plan.workload import SLO, Workload, fixed, lognormal
from cmperf.predict import load_specs, predict
from cmperf.simulate import DeploymentSpec, InstanceGroup, Traffic, simulate
from cmperf.simulate.engine import Requests, Stats, draw_steps, mtp_tokens_per_step
from cmperf.simulate.metrics import metrics
from sim_reference import reference_run

SLOS = SLO(ttft_s=5.0, tpot_s=0.1)


@pytest.fixture(scope="module")
def specs():
    return load_specs("cloudmatrix384", "deepseek-r1")


@pytest.fixture(scope="module")
def small():
    return DeploymentSpec(prefill=[InstanceGroup(2, {"dies": 32, "attn_tp": 4})], decode=[InstanceGroup(1, {"dies": 64})])


def _workload():
    return Workload(prompt=lognormal(2048, 3500, "2048:3500", "--prompt-len"), output=lognormal(128, 220, "128:220", "--output-len"),
                    prefix_hit=0.0, slo=SLOS)


# --------------------------------------------------------------------------- hand-derived pieces
def test_mtp_tokens_per_step_by_hand():
    """k = 1, a = 0.7: 1 token with 0.3, 2 with 0.7: mean 1.7, variance 0.21; k = 2, a = 0.5:
    1 (0.5), 2 (0.25), 3 (0.25): mean 1.75, variance 3.75 - 3.0625 = 0.6875."""
    assert mtp_tokens_per_step(1, 0.7) == pytest.approx((1.7, 0.21))
    assert mtp_tokens_per_step(2, 0.5) == pytest.approx((1.75, 0.6875))
    assert mtp_tokens_per_step(0, 0.9) == (1.0, 0.0)


def test_decode_steps_follow_the_renewal_law():
    rng = np.random.default_rng(1)
    out = np.full(20000, 1001.0)
    n = draw_steps(out, 1, 0.7, rng)
    assert n.mean() == pytest.approx(1000 / 1.7, rel=2e-3)  # 588.2 steps for 1,000 decode tokens
    assert n.std() == pytest.approx(math.sqrt(1000 * 0.21 / 1.7 ** 3), rel=0.05)  # 6.54
    assert n.min() >= 500 and n.max() <= 1000  # at most 2 tokens a step, at least 1
    assert (draw_steps(np.array([1.0, 2.0]), 1, 0.7, rng) == [0, 1]).all()  # the first token comes from prefill


def test_metrics_follow_bench_serving_definitions():
    """Three requests by hand: TTFT = first - send; TPOT = (E2E - TTFT) / (output - 1);
    concurrency = sum(E2E) / duration; throughput over first send to last finish."""
    req = Requests(arrival_s=np.zeros(3), prompt=np.array([100.0, 200, 300]), output=np.array([11.0, 1, 21]),
                   cached=np.zeros(3), steps=np.zeros(3, int))
    req.send_s[:] = [0.0, 1.0, 2.0]
    req.prefill_start_s[:] = req.prefill_end_s[:] = req.kv_arrive_s[:] = [0.5, 1.5, 2.5]
    req.first_token_s[:] = [0.5, 1.5, 3.0]
    req.finish_s[:] = [1.5, 1.5, 5.0]
    m = metrics(req, Stats(), slo_ttft_ms=800, slo_tpot_ms=100)
    assert m["duration_s"] == 5.0 and m["completed"] == 3
    assert m["mean_ttft_ms"] == pytest.approx((500 + 500 + 1000) / 3)
    assert m["mean_tpot_ms"] == pytest.approx((100 + 100) / 2)  # (1.5 - 0.5) / 10, (5 - 3) / 20; one-token request left out
    assert m["concurrency"] == pytest.approx((1.5 + 0.5 + 3.0) / 5.0)
    assert m["output_throughput_tps"] == pytest.approx(33 / 5.0) and m["request_throughput_rps"] == pytest.approx(0.6)
    assert m["goodput_rps"] == pytest.approx(2 / 5.0)  # the third misses the 800 ms TTFT


def test_the_step_grid_is_predicts_own_rows(specs, small):
    """At a grid point the predictor returns exactly predict's iteration time; between two
    batches it lies between their times."""
    from cmperf.simulate.predictor import resolved
    from cmperf.simulate.predictor import decode_predictor

    inp = resolved("decode", {"dies": 64}, specs)
    pred = decode_predictor(specs, inp, max_batch=64, max_kv=8192, ref_kv=2048)
    b, L = pred.step_s.x[3], pred.step_s.y[4]
    row = predict("decode", {**inp, "batch": b, "kv_len": L, "prompt_len": int(L), "output_len": 1}, specs).columns
    assert pred.step(b, L) == pytest.approx(row["iteration_ms"].iat[0] / 1e3, rel=1e-12)
    lo, hi = pred.step(pred.step_s.x[3], L), pred.step(pred.step_s.x[4], L)
    assert min(lo, hi) <= pred.step((pred.step_s.x[3] + pred.step_s.x[4]) / 2, L) <= max(lo, hi)


# --------------------------------------------------------------------------- against the reference
@pytest.mark.parametrize("traffic", [Traffic(rate_rps=12.0, num_prompts=300), Traffic(max_concurrency=48, num_prompts=300)],
                         ids=["poisson", "closed-loop"])
def test_the_engine_agrees_with_a_per_step_reference(specs, small, traffic):
    """The event-jumping engine and a plain per-step loop (tests/sim_reference.py: per-step
    MTP draws, per-step KV growth) on the same deployment, requests and step-time grids: mean
    TTFT, mean TPOT and throughput within 6 %."""
    res = simulate(specs, _workload(), small, traffic, seed=3)
    r = res.requests
    dec, pre = res.instances["decode"][0], res.instances["prefill"][0]
    from cmperf.simulate.predictor import decode_predictor, prefill_predictor

    st = specs.stack_view()
    dpred = decode_predictor(specs, dec, max_batch=min(48 * 64 / 32, 2048), max_kv=float(np.max(r.prompt + r.output)),
                             ref_kv=_workload().decode_kv_len)
    groups = 32 // 4
    ppred = prefill_predictor(specs, pre, groups * st.max_prefill_tokens, r.prompt)
    send, first, finish = reference_run(r.prompt, r.output, r.arrival_s, ppred, 2, groups * st.max_prefill_tokens, math.inf,
                                        dpred, 64, st.max_running_per_rank, int(dec["mtp_k"]), float(dec["mtp_acceptance"]),
                                        np.random.default_rng(5), traffic.max_concurrency or math.inf, r.kv_B,
                                        res.settings["prefill_router"])
    ttft_ref, ttft = np.mean(first - send), np.mean(r.first_token_s - r.send_s)
    tpot_ref = np.mean((finish - first) / (r.output - 1))
    tpot = np.mean((r.finish_s - r.first_token_s) / (r.output - 1))
    thr_ref = r.output.sum() / (finish.max() - send.min())
    thr = r.output.sum() / (np.nanmax(r.finish_s) - np.nanmin(r.send_s))
    assert ttft == pytest.approx(ttft_ref, rel=0.06)
    assert tpot == pytest.approx(tpot_ref, rel=0.06)
    assert thr == pytest.approx(thr_ref, rel=0.06)


# --------------------------------------------------------------------------- structure
def test_more_load_never_shortens_the_wait(specs, small):
    ttft = [simulate(specs, _workload(), small, Traffic(rate_rps=r, num_prompts=400), seed=2).metrics["mean_ttft_ms"]
            for r in (4.0, 10.0, 16.0)]
    assert ttft[0] <= ttft[1] <= ttft[2]


def test_a_closed_loop_never_exceeds_its_concurrency(specs, small):
    res = simulate(specs, _workload(), small, Traffic(max_concurrency=20, num_prompts=200), seed=4)
    r = res.requests
    events = sorted([(t, 1) for t in r.send_s] + [(t, -1) for t in r.finish_s], key=lambda e: (e[0], e[1]))
    level = np.cumsum([e[1] for e in events])
    assert level.max() <= 20 and res.metrics["concurrency"] <= 20


def test_the_same_seed_gives_the_same_run(specs, small):
    a = simulate(specs, _workload(), small, Traffic(rate_rps=8, num_prompts=150), seed=7).metrics
    b = simulate(specs, _workload(), small, Traffic(rate_rps=8, num_prompts=150), seed=7).metrics
    c = simulate(specs, _workload(), small, Traffic(rate_rps=8, num_prompts=150), seed=8).metrics
    assert a == b and a["mean_ttft_ms"] != c["mean_ttft_ms"]


def test_the_hot_rank_sets_the_step(specs):
    """DP ranks that hold unequal KV: a step runs at the hot rank's KV, so skewed lengths cost
    time that their mean would not (longer TPOT than equal lengths with the same mean)."""
    dep = DeploymentSpec(prefill=[InstanceGroup(2, {"dies": 32, "attn_tp": 4})], decode=[InstanceGroup(1, {"dies": 64})])
    even = Workload(prompt=fixed(4096), output=fixed(128), prefix_hit=0.0, slo=SLOS)
    skew = Workload(prompt=lognormal(4096, 8000, "4096:8000", "--prompt-len"), output=fixed(128), prefix_hit=0.0, slo=SLOS)
    m_even = simulate(specs, even, dep, Traffic(max_concurrency=64, num_prompts=256), seed=1).metrics
    m_skew = simulate(specs, skew, dep, Traffic(max_concurrency=64, num_prompts=256), seed=1).metrics
    assert m_skew["mean_tpot_ms"] > m_even["mean_tpot_ms"]
    assert m_skew["dp_rank_wait_share"] > m_even["dp_rank_wait_share"] >= 0.0


# --------------------------------------------------------------------------- the command
def test_simulate_with_no_flags_runs_the_papers_deployment(cli):
    code, out, err = cli("simulate", "--num-prompts", "600", "--format", "json")
    assert code == 0, err
    m = json.loads(out)
    assert m["settings"]["deployment"] == "6 x prefill 32 dies (TP 4) + 1 x decode 320 dies"
    assert m["completed"] == 600 and m["mean_ttft_ms"] > 0 and m["p99_tpot_ms"] >= m["mean_tpot_ms"]
    assert "the planner's closed form" in err


@pytest.mark.parametrize("args", [["--max-concurrency", "64", "--request-rate", "inf"], ["--request-rate", "5"],
                                  ["--stack", "xdeepserve", "--request-rate", "5"], ["--burstiness", "3", "--request-rate", "5"]])
def test_simulate_flags(cli, args):
    code, out, err = cli("simulate", "--prefill", "2x32:tp=4", "--decode", "1x64", "--num-prompts", "200", *args, "--format", "json")
    assert code == 0, err
    assert json.loads(out)["completed"] == 200


def test_simulate_a_trace(cli, tmp_path):
    trace = tmp_path / "t.csv"
    trace.write_text("prompt_len,output_len\n" + "\n".join(f"{1000 + 37 * i},{50 + i}" for i in range(120)) + "\n")
    code, out, err = cli("simulate", "--trace", str(trace), "--prefill", "2x32:tp=4", "--decode", "1x64", "--num-prompts", "120",
                         "--request-rate", "6", "--format", "json", "--out", str(tmp_path / "r.csv"))
    assert code == 0, err
    m = json.loads(out)
    assert m["total_input_tokens"] == sum(1000 + 37 * i for i in range(120))
    assert (tmp_path / "r.csv").read_text().count("\n") >= 121


@pytest.mark.parametrize("args, needle", [(["--prefill", "2x"], "--prefill 2x"), (["--decode", "1x64"], "needs --prefill"),
                                          (["--request-rate", "-3"], "--request-rate"), (["--max-concurrency", "0"], "--max-concurrency"),
                                          (["--num-prompts", "0"], "--num-prompts")])
def test_simulate_bad_input_is_one_line(cli, args, needle):
    code, _, err = cli("simulate", *args)
    assert code == 2 and needle in err and err.count("\n") == 1, err


def test_a_colocated_instance_prefills_its_own_prompts_and_decode_waits_for_the_pass(specs):
    """Aggregated serving: no KV transfer (the prompt's KV stays), and every prefill pass stops
    the decode batch, so a request's TPOT is longer than the same instance's decode steps alone."""
    w = Workload(prompt=fixed(2048), output=fixed(256), prefix_hit=0.0, slo=SLOS)
    dep = DeploymentSpec(decode=[InstanceGroup(1, {"dies": 32})], colocated=True)
    res = simulate(specs, w, dep, Traffic(max_concurrency=32, num_prompts=128), seed=2)
    r = res.requests
    assert np.isfinite(r.finish_s).all()
    assert (r.kv_arrive_s == r.prefill_end_s).all() and (r.first_token_s == r.prefill_end_s).all()
    pd_dep = DeploymentSpec(prefill=[InstanceGroup(1, {"dies": 32, "attn_tp": 4})], decode=[InstanceGroup(1, {"dies": 32})])
    pd = simulate(specs, w, pd_dep, Traffic(max_concurrency=32, num_prompts=128), seed=2)
    assert res.metrics["mean_tpot_ms"] > pd.metrics["mean_tpot_ms"]


# --------------------------------------------------------------------------- the fixed part (issue 22 item 5)
def test_the_default_rate_is_the_planners_and_kept_for_the_same_specs_workload_and_deployment(specs, small, tmp_path,
                                                                                               monkeypatch):
    """--request-rate plan reads the planner's closed form (evaluate) once; asked again for the
    same specs, workload and deployment it comes from the answer cache unchanged, without the
    planner; any change of them is another answer."""
    from cmperf.cli.simulate import _plan_rate
    from cmperf.plan import planner

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.delenv("CMPERF_NO_CACHE", raising=False)
    w = Workload(prompt=fixed(2048), output=fixed(128), prefix_hit=0.0, slo=SLOS)
    calls = []
    real = planner.evaluate
    monkeypatch.setattr(planner, "evaluate", lambda *a: calls.append(real(*a)) or calls[-1])
    first = _plan_rate(specs, w, small)
    assert first == {k: calls[0][k] for k in ("goodput_rps", "binding", "prefill_tokens_per_npu")} and first["goodput_rps"] > 0
    assert _plan_rate(specs, w, small) == first and len(calls) == 1  # kept, not evaluated again
    ev = calls[0]
    tighter = Workload(prompt=fixed(2048), output=fixed(128), prefix_hit=0.0, slo=SLO(ttft_s=1.0, tpot_s=0.1))
    bigger = DeploymentSpec(prefill=[InstanceGroup(3, {"dies": 32, "attn_tp": 4})], decode=[InstanceGroup(1, {"dies": 64})])
    assert _plan_rate(specs, tighter, small)["goodput_rps"] < ev["goodput_rps"]  # a tighter TTFT SLO: less
    assert _plan_rate(specs, w, bigger)["goodput_rps"] >= ev["goodput_rps"]  # one more prefill instance: never less
    assert len(calls) == 3


def test_the_default_deployment_is_the_systems_and_kept(specs, tmp_path, monkeypatch):
    """The deployment simulated when none is given comes back from the answer cache equal to
    what default_deployment gives, without calling it again."""
    from cmperf.cli.simulate import _default_deployment
    from cmperf.simulate import deployment

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.delenv("CMPERF_NO_CACHE", raising=False)
    w = Workload(prompt=fixed(4096), output=fixed(256), prefix_hit=0.0, slo=SLOS)
    real = deployment.default_deployment(specs, w)
    assert _default_deployment(specs, w) == real and real.prefill and real.decode
    monkeypatch.setattr(deployment, "default_deployment", lambda *a: pytest.fail("computed again"))
    assert _default_deployment(specs, w) == real


def test_a_cache_key_holds_every_value():
    """Two arrays that print alike (numpy elides the middle of a long one) are two keys; a value
    without an exact plain form is refused, not stringified."""
    from cmperf.cli.cache import plain

    a, b = np.arange(5000.0), np.arange(5000.0)
    b[2500] += 0.5
    assert str(a) == str(b) and plain(a) != plain(b)
    assert plain(fixed(4096)) != plain(fixed(4096.5)) and plain({"x": np.float64(0.1)}) == {"x": 0.1}
    with pytest.raises(TypeError):
        plain({"x": object()})


def test_a_simulation_at_a_given_rate_loads_neither_pandas_nor_scipy():
    """The rate given, a simulation needs neither the planner's tables (pandas) nor its queue's
    special functions (SciPy): they are ~0.5 s of a ~0.4 s run (benchmarks/simulate_speed.py)."""
    import os
    import subprocess
    import sys

    script = ("import sys\nsys.argv = ['cmperf', 'simulate', '--num-prompts', '20', '--request-rate', '140', '--format', "
              "'json']\nfrom cmperf.cli import main\ntry:\n    main()\nexcept SystemExit:\n    pass\n"
              "print([m for m in ('pandas', 'scipy') if m in sys.modules], file=sys.stderr)")
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, env=dict(os.environ))
    assert json.loads(r.stdout)["completed"] == 20, r.stderr
    assert r.stderr.strip().splitlines()[-1] == "[]", r.stderr


def test_a_pass_of_whole_prompts_is_the_cost_models_under_every_budget():
    """A prefill pass of k whole 2,048-token prompts on 8 H200s costs what ``predict`` says
    for k x 2,048 / 8 tokens per GPU, whether the instance's budget is 16 or 64 prompts: the
    cost model steps with a GEMM's waves between the plan's budgets (benchmarks/pass_staircase.py),
    which a line between grid points missed by up to 8 %, differently under each budget (16
    prompts: 308.5 ms under a 16-prompt budget, 332.0 under 64)."""
    from cmperf.predict import predict
    from cmperf.simulate.predictor import prefill_predictor

    s = load_specs("h200-cluster", "deepseek-r1")
    inst, P, ks = {"dies": 8, "ep": 8}, 2048.0, (8, 9, 13, 15, 16)
    want = predict("prefill", rows=[{**inst, "tokens_per_npu": k * P / 8, "prompt_len": int(P)} for k in ks],
                   specs=s).columns["forward_ms"] / 1e3
    for budget in (16, 64):
        pred = prefill_predictor(s, inst, budget * P, np.array([P]))
        got = [pred.times(k * P, P, prompts=k)[0] for k in ks]
        assert got == pytest.approx(list(want), rel=1e-9), budget


def test_the_planned_rate_is_simulated_with_the_planned_pass_budget(cli):
    """--request-rate plan simulates the rate with the prefill budget the planner timed it at:
    CloudMatrix384's default DeepSeek-V3.2 deployment (6 x 48 + 1 x 336 dies) plans 2,048
    tokens per NPU a pass; at the stack's 16K its passes ran ~3.2 s and the mean TTFT 3.5 s
    against the plan's 2 s SLO (found by benchmarks/simulate_matrix.py). A group's own
    pass_tokens stays."""
    from helpers import SIMULATED_PROMPTS, check_default_simulate

    args = ("simulate", "--model", "deepseek-v3.2", "--num-prompts", SIMULATED_PROMPTS, "--format", "json")
    code, out, err = cli(*args)
    m = check_default_simulate(code, out, err, "deepseek-v3.2")
    assert "prefill passes of at most 2,048 prompt tokens per NPU" in err
    assert m["mean_ttft_ms"] <= 2000 and m["mean_prefill_ms"] < 1000
    code, out, err = cli("simulate", "--model", "deepseek-v3.2", "--prefill", "6x48:tp=4:pass_tokens=262144",
                         "--decode", "1x336", "--num-prompts", SIMULATED_PROMPTS, "--format", "json")
    assert code == 0 and "prefill passes of at most" not in err, err
    assert json.loads(out)["mean_prefill_ms"] > 2 * m["mean_prefill_ms"]  # the stack's largest passes: what the plan never timed


def test_every_system_simulates_its_own_model_from_its_defaults(cli):
    """The simulate column of the matrix: every shipped system runs its own model's default
    deployment at the planner's rate for it (no flag beyond --hardware), every request
    completes within 10 % of the default SLOs, or one line says why it cannot run
    (tests/helpers.py ``check_default_simulate``; every model on every system:
    benchmarks/simulate_matrix.py, held to the same check)."""
    from helpers import SIMULATED_PROMPTS, check_default_simulate

    from cmperf.specs.loader import list_builtin

    ran = 0
    for system, _ in list_builtin("system"):
        code, out, err = cli("simulate", "--hardware", system, "--num-prompts", SIMULATED_PROMPTS, "--format", "json")
        ran += check_default_simulate(code, out, err, system) is not None
    assert ran >= 12
