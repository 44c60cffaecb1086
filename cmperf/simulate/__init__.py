"""``cmperf simulate``: what a deployment serves, request by request (docs/model.md §12).

    >>> from cmperf.simulate import simulate, Traffic
    >>> r = simulate(traffic=Traffic(rate_rps=100, num_prompts=2000))
    >>> r.metrics["mean_ttft_ms"], r.metrics["p99_tpot_ms"]

The parts, each in its own place (the layout of Vidur): the requests and their arrivals
(:mod:`.requests`), the deployment's instances (:mod:`.deployment`), the step-time predictor
that evaluates the one cost model once on a grid (:mod:`.predictor`), the event-driven engine
(:mod:`.engine`) and bench_serving's metrics (:mod:`.metrics`). The serving stack's facts
(cmperf/stack.py) set the engine's limits: requests per DP rank, prefill budgets, DP balance.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from ..errors import ConfigError
from ..predict import Specs, load_specs, predict
from ..plan.workload import Workload
from .deployment import DeploymentSpec, InstanceGroup, default_deployment
from .engine import CoLocatedInstance, DecodeInstance, PrefillInstance, Requests, Simulation, Stats, draw_steps, mtp_tokens_per_step
from .metrics import metrics
from .predictor import decode_predictor, prefill_predictor
from .requests import Traffic, make_requests

__all__ = ["simulate", "Traffic", "DeploymentSpec", "InstanceGroup", "SimResult", "default_deployment"]


@dataclass
class SimResult:
    metrics: dict
    requests: Requests
    stats: Stats
    deployment: DeploymentSpec
    settings: dict = field(default_factory=dict)
    instances: dict = field(default_factory=dict)  # the resolved predict inputs of each instance kind


def resolved(phase: str, inputs: dict, specs: Specs) -> dict:
    """The full predict inputs of an instance (what the deployment defaults derive for what
    ``inputs`` leave unset): one predict row, read back."""
    r = predict(phase, inputs, specs)
    row = r.columns.records()[0]
    return {k: row[k] for k in _INPUTS[phase] if k in row and not (isinstance(row[k], float) and math.isnan(row[k]))}


_INPUTS = {
    "decode": ("dies", "ep", "tp", "microbatches", "mtp", "mtp_k", "mtp_acceptance", "expert_imbalance",
               "redundant_experts", "shared_copies", "attention_share"),
    "afd": ("attention_dies", "expert_dies", "microbatches", "mtp", "mtp_k", "mtp_acceptance", "expert_imbalance",
            "redundant_experts", "shared_copies"),
    "prefill": ("dies", "ep", "attn_tp", "microbatches", "mtp", "expert_imbalance", "redundant_experts", "shared_copies"),
}


def simulate(specs: Specs | None = None, workload: Workload | None = None, deployment: DeploymentSpec | None = None,
             traffic: Traffic | None = None, seed: int = 0, progress: Callable[[int, int], None] | None = None,
             warmup: float = 0.0, sweeps: dict[str, list] | None = None):
    """Simulate ``deployment`` (default: the system's, :func:`.deployment.default_deployment`)
    serving ``workload``'s requests under ``traffic`` (module docstring).

    ``sweeps`` (spec path -> the values of n points taken together; paths that change step
    times only, such as a stack's host constants, ``stack.spec_seam_s``): the step-time grids
    of every point come from one vectorised evaluation and the same requests (same seed) are
    simulated at each; a list of n results then."""
    from ..plan.planner import default_workload

    specs = specs or load_specs()
    workload = workload or default_workload()
    traffic = traffic or Traffic()
    deployment = deployment or default_deployment(specs, workload)
    st = specs.stack_view()
    hw, _ = specs.views()
    dpp = int(hw.chip.dies_per_package)
    n_points = len(next(iter(sweeps.values()))) if sweeps else 1

    prompt, output, cached = make_requests(workload, traffic, np.random.default_rng(seed))
    max_ctx = float(np.max(prompt + output))
    dec_phase = deployment.decode_phase
    dec_inputs = [resolved(dec_phase, g.inputs, specs) for g in deployment.decode]
    pre_inputs = [resolved("prefill", g.inputs, specs) for g in deployment.prefill]
    if deployment.colocated and deployment.prefill:
        raise ConfigError("a co-located deployment prefills in its own instances: give --colocated alone")
    k = int(dec_inputs[0]["mtp_k"]) if dec_inputs[0].get("mtp") else 0
    a = float(dec_inputs[0]["mtp_acceptance"])
    mu, _ = mtp_tokens_per_step(k, a)
    cap_rank = float(st.max_running_per_rank) if st is not None and st.max_running_per_rank is not None else math.inf
    policy = st.dp_balance if st is not None else "round_robin"

    def listed(pred):
        return pred if sweeps else [pred]

    dec_preds, pre_preds = [], []  # per instance group: (its ranks, npus, decode predictors, co-located prefill predictors)
    for g, inp in zip(deployment.decode, dec_inputs):
        ranks = _ranks(dec_phase, inp)
        npus = (inp["attention_dies"] if dec_phase == "afd" else inp["dies"]) / dpp
        cap = min(cap_rank, 4096.0)
        pred = listed(decode_predictor(specs, inp, max_batch=min(cap * ranks / npus, 2048.0), max_kv=max_ctx,
                                       phase=dec_phase, ref_kv=float(workload.decode_kv_len), sweeps=sweeps))
        pre = None
        if deployment.colocated:  # the instance prefills its own prompts, data-parallel over its ranks
            pre_inp = {**{k: inp[k] for k in ("dies", "ep", "redundant_experts", "shared_copies", "mtp") if k in inp},
                       "attn_tp": int(inp.get("tp") or 1)}
            budget_t, _ = _budgets(st, ranks, inp["dies"] / dpp)
            pre = listed(prefill_predictor(specs, pre_inp, budget_t, prompt - cached + 0.0, float(np.mean(cached)),
                                           sweeps=sweeps))
        dec_preds.append((ranks, cap, pred, pre))
    for g, inp in zip(deployment.prefill, pre_inputs):
        groups = max(int(inp["dies"]) // int(inp.get("attn_tp") or 1), 1)
        budget_t, _ = _budgets(st, groups, inp["dies"] / dpp)
        readers = sum(gg.count * ii["dies"] for gg, ii in zip(deployment.prefill, pre_inputs))  # every prefill die may read the pool
        pre_preds.append((groups, listed(prefill_predictor(specs, {**inp, "pool_readers": int(readers)}, budget_t,
                                                           prompt - cached + 0.0, float(np.mean(cached)), sweeps=sweeps))))

    results = []
    for i in range(n_points):
        rng = np.random.default_rng(seed)  # the same requests, lengths and steps at every point
        prompt, output, cached = make_requests(workload, traffic, rng)
        steps = draw_steps(output, k, a, rng)
        arrivals = _arrivals(traffic, len(prompt), rng)
        req = Requests(arrival_s=arrivals, prompt=prompt.astype(float), output=output.astype(float),
                       cached=cached.astype(float), steps=steps)
        stats = Stats()
        decode = []
        for g, inp, (ranks, cap, pred, pre) in zip(deployment.decode, dec_inputs, dec_preds):
            if deployment.colocated:
                budget_t, budget_r = _budgets(st, ranks, inp["dies"] / dpp)
                for _ in range(g.count):
                    decode.append(CoLocatedInstance(len(decode), pred[i], ranks, mu, cap, policy, req, stats, pre[i],
                                                    budget_t, budget_r))
                continue
            for _ in range(g.count):
                decode.append(DecodeInstance(len(decode), pred[i], ranks, mu, cap, policy, req, stats))
        prefill = []
        for g, inp, (groups, pred) in zip(deployment.prefill, pre_inputs, pre_preds):
            budget_t, budget_r = _budgets(st, groups, inp["dies"] / dpp)
            for _ in range(g.count):
                prefill.append(PrefillInstance(len(prefill), pred[i], budget_t, budget_r))
        conc = float(traffic.max_concurrency) if traffic.max_concurrency else math.inf
        sim = Simulation(req, prefill, decode, conc, stats)
        sim.run(progress)
        results.append(_result(req, stats, workload, warmup, mu, prefill, decode, deployment, dpp, dec_inputs, pre_inputs,
                               traffic, seed, specs))
    return results if sweeps else results[0]


def _result(req, stats, workload, warmup, mu, prefill, decode, deployment, dpp, dec_inputs, pre_inputs, traffic, seed,
            specs) -> SimResult:
    """A run's metrics (bench_serving's) and what it was run with."""
    res = metrics(req, stats, workload.slo.ttft_s * 1e3, workload.slo.tpot_s * 1e3, warmup)
    res["accept_length"] = float(mu)
    dur = res["duration_s"]
    res["prefill_utilisation"] = float(np.mean([p.busy for p in prefill]) / dur) if prefill else 0.0
    res["decode_utilisation"] = float(np.mean([d.busy for d in decode]) / dur) if decode else 0.0
    npus = deployment.npus(dpp, dec_inputs, pre_inputs)
    res["npus"] = npus
    res["output_throughput_per_npu"] = res["output_throughput_tps"] / npus
    settings = {"traffic": traffic.describe(), "seed": seed, "stack": specs.stack_name or "none",
                "deployment": deployment.describe(dec_inputs, pre_inputs), "requests": len(req.prompt),
                "slo": {"ttft": workload.slo.ttft_s * 1e3, "tpot": workload.slo.tpot_s * 1e3}}
    return SimResult(metrics=res, requests=req, stats=stats, deployment=deployment, settings=settings,
                     instances={"decode": dec_inputs, "prefill": pre_inputs})


def _budgets(st, groups: int, npus: float) -> tuple[float, float]:
    """(tokens, prompts) one prefill pass takes at most: the stack's per attention group x
    groups; without a stack, the paper's 16K tokens per NPU (Table 3)."""
    if st is None:
        return 16384.0 * npus, math.inf
    return (groups * float(st.max_prefill_tokens),
            groups * float(st.max_prefill_requests) if st.max_prefill_requests is not None else math.inf)


def _ranks(phase: str, inp: dict) -> int:
    if phase == "afd":
        return int(inp["attention_dies"])
    return max(int(inp["dies"]) // int(inp.get("tp") or 1), 1)


def _arrivals(traffic: Traffic, n: int, rng: np.random.Generator) -> np.ndarray:
    """Arrival times: all at 0 (rate inf: as fast as the client may send), Poisson, or gamma
    (burstier than Poisson when its coefficient of variation exceeds 1)."""
    if traffic.rate_rps is None or math.isinf(traffic.rate_rps):
        return np.zeros(n)
    mean = 1.0 / traffic.rate_rps
    cv = traffic.burstiness
    if cv == 1.0:
        gaps = rng.exponential(mean, n)
    else:
        shape = 1.0 / (cv * cv)
        gaps = rng.gamma(shape, mean / shape, n)
    return np.cumsum(gaps) - gaps[0]
