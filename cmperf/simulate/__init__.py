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
from typing import Callable

import numpy as np

from ..cost.host import mixes_chunks, stack_value
from ..errors import ConfigError
from ..predict import Specs, load_specs
from ..plan.workload import Workload
from .deployment import DeploymentSpec, InstanceGroup, default_deployment
from ..stack import prefill_router
from .engine import (CoLocatedInstance, DecodeInstance, PrefillInstance, Requests, Router, Simulation, Stats, draw_steps,
                     mtp_tokens_per_step)
from .metrics import metrics
from .predictor import decode_predictor, geometric, points, prefill_predictor, resolved
from .requests import Traffic, check_seed, check_warmup, make_requests

ROUTER_STREAM = 1  # the second entropy word of the router's generator (the first: the run's seed)

__all__ = ["simulate", "Traffic", "DeploymentSpec", "InstanceGroup", "SimResult", "default_deployment"]


@dataclass
class SimResult:
    metrics: dict
    requests: Requests
    stats: Stats
    deployment: DeploymentSpec
    settings: dict = field(default_factory=dict)
    instances: dict = field(default_factory=dict)  # the resolved predict inputs of each instance kind


def simulate(specs: Specs | None = None, workload: Workload | None = None, deployment: DeploymentSpec | None = None,
             traffic: Traffic | None = None, seed: int = 0, progress: Callable[[int, int], None] | None = None,
             warmup: float = 0.0, working_set_tokens: float | None = None, sweeps: dict[str, list] | None = None):
    """Simulate ``deployment`` (default: the system's, :func:`.deployment.default_deployment`)
    serving ``workload``'s requests under ``traffic`` (module docstring).

    ``sweeps`` (spec path -> the values of n points taken together; paths that change step
    times only, such as a stack's host constants, ``stack.spec_seam_s``): the step-time grids
    of every point come from one vectorised evaluation and the same requests (same seed) are
    simulated at each; a list of n results then."""
    traffic = traffic or Traffic()
    check_seed(seed, "simulate: seed")  # where every caller's seed enters (the CLI names --seed first)
    check_warmup(warmup, traffic.num_prompts, "simulate: warmup")
    specs = specs or load_specs()
    if workload is None:
        from ..plan.planner import default_workload

        workload = default_workload()
    deployment = deployment or default_deployment(specs, workload)
    st = specs.stack_view()
    hw, _ = specs.views()
    dpp = int(hw.chip.dies_per_package)

    workload = served_workload(specs, workload, working_set_tokens, [dict(g.inputs) for g in deployment.prefill])
    prompt, output, cached = make_requests(workload, traffic, np.random.default_rng(seed))
    max_ctx = float(np.max(prompt + output))
    dec_phase = deployment.decode_phase
    if deployment.colocated and deployment.prefill:
        raise ConfigError("a co-located deployment prefills in its own instances: give --colocated alone")
    cap_rank = float(st.max_running_per_rank) if st is not None and st.max_running_per_rank is not None else math.inf
    policy = st.dp_balance if st is not None else "round_robin"
    router = prefill_router(st)
    computed = np.maximum(prompt - cached, 1.0)
    made = []  # (group, predictor, ranks, cap, co-located budgets) of each decode group
    # the dies that may read the pool at once: every co-located die (they prefill their own prompts)
    coloc_readers = sum(g.count * float(g.inputs["dies"]) for g in deployment.decode) if deployment.colocated else None
    for g in deployment.decode:
        # the instance's layout: the grid's own rows resolve what it leaves unset (one predict), unless
        # its TP is unknown, which sizes the grid
        inp = g.inputs if dec_phase == "afd" or "tp" in g.inputs else resolved(dec_phase, g.inputs, specs)
        ranks = _ranks(dec_phase, inp)
        npus = (inp["attention_dies"] if dec_phase == "afd" else inp["dies"]) / dpp
        cap = min(cap_rank, 4096.0, max(float(g.limits.get("running", math.inf)) / ranks, 1.0))
        kw, budgets = {}, None
        if deployment.colocated:  # the instance prefills its own prompts in mixed iterations (Sarathi)
            budget_t, budget_r, chunked = _chunk_budget(st, ranks, npus)
            if "pass_tokens" in g.limits:  # a chunk size given: prompts split at it (the planner's co-located rows)
                budget_t, chunked = float(g.limits["pass_tokens"]), True
            # the largest chunk an iteration is timed at: its hot rank's (a whole prompt past the
            # rank's budget when prompts are not split), as if every rank carried it
            hot = budget_t / ranks if chunked else max(budget_t / ranks, float(np.max(computed)))
            kw = {"chunks": tuple(geometric(64.0, hot * ranks / npus, 2.0)), "chunk_prompt": float(np.sum(computed ** 2) / np.sum(computed))}
            budgets = (budget_t, budget_r, chunked, int(stack_value(st, "prefill_delay_passes", 0)), not mixes_chunks(st))
        pred = decode_predictor(specs, inp, max_batch=min(cap * ranks / npus, 2048.0), max_kv=max_ctx, phase=dec_phase,
                                ref_kv=float(workload.decode_kv_len), sweeps=sweeps, pool_readers=coloc_readers, **kw)
        # a budget shared with the decode batch (vLLM V1): each running request's 1 + drafts first; the
        # planner's chunk (pass_tokens) is the prompts' already (its launch config adds the decode tokens)
        if budgets is not None and bool(stack_value(st, "budget_counts_decode", False)) and "pass_tokens" not in g.limits:
            p0 = (pred if sweeps else [pred])[0].inputs
            budgets = (*budgets, 1.0 + (int(p0["mtp_k"]) if p0.get("mtp") else 0))
        made.append((g, pred if sweeps else [pred], ranks, cap, budgets))
    dec_inputs = [preds[0].inputs for _, preds, _, _, _ in made]
    k = int(dec_inputs[0]["mtp_k"]) if dec_inputs[0].get("mtp") else 0
    a = float(dec_inputs[0]["mtp_acceptance"])
    mu, _ = mtp_tokens_per_step(k, a)
    pre_made, pre_inputs = [], []
    given = [g.inputs if "attn_tp" in g.inputs else resolved("prefill", g.inputs, specs) for g in deployment.prefill]
    readers = sum(g.count * inp["dies"] for g, inp in zip(deployment.prefill, given))  # every prefill die may read the pool
    for g, inp in zip(deployment.prefill, given):
        groups = max(int(inp["dies"]) // int(inp.get("attn_tp") or 1), 1)
        budget_t, budget_r = _budgets(st, groups, inp["dies"] / dpp)
        budget_t = min(budget_t, float(g.limits.get("pass_tokens", math.inf)))
        pred = prefill_predictor(specs, {**inp, "pool_readers": int(readers)}, budget_t, prompt - cached, cached, sweeps=sweeps)
        preds = pred if sweeps else [pred]
        pre_inputs.append(preds[0].inputs)
        pre_made.append((g, preds, budget_t, budget_r))
    results = []
    for i in range(points(sweeps)):
        rng = np.random.default_rng(seed)  # the same requests, lengths and steps at every point
        prompt, output, cached = make_requests(workload, traffic, rng)
        steps = draw_steps(output, k, a, rng)
        arrivals = _arrivals(traffic, len(prompt), rng)
        req = Requests(arrival_s=arrivals, prompt=prompt.astype(float), output=output.astype(float),
                       cached=cached.astype(float), steps=steps, **_cache_bytes(specs, prompt, cached, dec_inputs[0], workload))
        stats = Stats()
        decode = []
        for g, preds, ranks, cap, budgets in made:
            for _ in range(g.count):
                if budgets is None:
                    decode.append(DecodeInstance(len(decode), preds[i], ranks, mu, cap, policy, req, stats))
                else:
                    decode.append(CoLocatedInstance(len(decode), preds[i], ranks, mu, cap, policy, req, stats, *budgets))
        prefill = []
        for g, preds, budget_t, budget_r in pre_made:
            for _ in range(g.count):
                prefill.append(PrefillInstance(len(prefill), preds[i], budget_t, budget_r))
        conc = float(traffic.max_concurrency) if traffic.max_concurrency else math.inf
        # the router's own stream (its random draws do not move the arrivals and lengths)
        sim = Simulation(req, prefill, decode, conc, stats, Router(router, np.random.default_rng([seed, ROUTER_STREAM])))
        sim.run(progress)
        results.append(_result(req, stats, workload, warmup, mu, prefill, decode, deployment, dpp, dec_inputs, pre_inputs,
                               traffic, seed, specs))
    return results if sweeps else results[0]


STAT_KEYS = {"mean": "mean", "p50": "median", "p90": "p90", "p99": "p99"}  # an SLO statistic -> its metrics' prefix


def at_stat(m: dict, name: str, stat: str) -> float:
    """The metric ``name`` (ttft, tpot) of the run's metrics ``m`` at an SLO statistic (mean,
    p50, p90, p99): what the SLO on that statistic is held to."""
    return float(m.get(f"{STAT_KEYS[stat]}_{name}_ms", float("nan")))


def _result(req, stats, workload, warmup, mu, prefill, decode, deployment, dpp, dec_inputs, pre_inputs, traffic, seed,
            specs) -> SimResult:
    """A run's metrics (bench_serving's) and what it was run with."""
    res = metrics(req, stats, workload.slo.ttft_s * 1e3, workload.slo.tpot_s * 1e3, warmup)
    res["accept_length"] = float(mu)
    slo = workload.slo
    res["slo_ttft_ms"], res["slo_tpot_ms"] = at_stat(res, "ttft", slo.ttft_stat), at_stat(res, "tpot", slo.tpot_stat)
    res["meets_slos"] = bool(res["slo_ttft_ms"] <= slo.ttft_s * 1e3 and res["slo_tpot_ms"] <= slo.tpot_s * 1e3)
    res["preemptions"] = int(sum(d.preemptions for d in decode))
    # the most KV tokens a decode rank held over what it holds (a PD decode rank never above 1 but for
    # one request alone longer than the rank; a co-located one by at most a step's tokens, then preempts)
    # a rank with no room for KV (its instance does not fit: simulated one request at a time)
    # holds more than it can: an infinite share, not 0
    res["decode_peak_kv_share"] = max((d.peak_kv / d.cap_kv if d.cap_kv > 0 else (math.inf if d.peak_kv > 0 else 0.0)
                                       for d in decode), default=0.0)
    dur = res["duration_s"]
    res["prefill_utilisation"] = float(np.mean([p.busy for p in prefill]) / dur) if prefill else 0.0
    res["decode_utilisation"] = float(np.mean([d.busy for d in decode]) / dur) if decode else 0.0
    npus = deployment.npus(dpp, dec_inputs, pre_inputs)
    res["npus"] = npus
    res["output_throughput_per_npu"] = res["output_throughput_tps"] / npus
    settings = {"traffic": traffic.describe(), "seed": seed, "stack": specs.stack_name or "none",
                "prefill_router": prefill_router(specs.stack_view()) if prefill else None,
                "deployment": deployment.describe(dec_inputs, pre_inputs), "requests": len(req.prompt),
                "slo": {"ttft": workload.slo.ttft_s * 1e3, "tpot": workload.slo.tpot_s * 1e3,
                        "ttft_stat": workload.slo.ttft_stat, "tpot_stat": workload.slo.tpot_stat}}
    return SimResult(metrics=res, requests=req, stats=stats, deployment=deployment, settings=settings,
                     instances={"decode": dec_inputs, "prefill": pre_inputs})


def served_workload(specs: Specs, workload: Workload, working_set_tokens: float | None = None,
                    prefill: list | None = None) -> Workload:
    """``workload`` with the prefix hits the system's cache tiers serve (the planner's rule,
    :func:`cmperf.cost.pool.served_hit`), in the cache's blocks (the pool's, else the stack's
    pages), and the share of a served prefix read from the pool; the HBM tier's capacity is
    that of the deployment's ``prefill`` instances (their resolved inputs; the smallest), or
    of the system's default prefill instance. A workload served already (a plan's, for
    ``--verify``) is kept as it is when no working set is given. A hit with neither tier is
    refused, as the planner does."""
    from ..cost.pool import cache_block_tokens, can_cache, hbm_cache_share, no_cache_error, served_hit

    hw, m = specs.views()
    if (workload.prefix_hit > 0 or workload.cached_samples is not None) and not can_cache(hw):
        raise no_cache_error(hw, "--prefix-hit")
    if not can_cache(hw):
        return workload
    hbm = 0.0
    if working_set_tokens is not None and workload.prefix_hit > 0 and hbm_cache_share(hw) > 0:
        from ..plan.instances import hbm_instance_tokens

        hbm = min(hbm_instance_tokens(specs, workload, inp) for inp in (prefill or [{}]))
    if working_set_tokens is None and workload.pool_part is not None:  # served already (a plan's): its split kept
        return workload
    hit, _, pool_part = served_hit(hw, m, workload, working_set_tokens, hbm)
    return Workload(**{**workload.__dict__, "prefix_hit": hit, "block_tokens": cache_block_tokens(hw, specs.stack_view()),
                       "pool_part": pool_part})


def _cache_bytes(specs: Specs, prompt: np.ndarray, cached: np.ndarray, dec: dict, workload: Workload) -> dict:
    """Each request's pool bytes and blocks (the pool-held tail of its cached prefix, all
    layers, whole blocks), its new whole blocks written back while caching is in use, and its
    whole prompt's KV bytes (docs/model.md §1.2, §9.5), as predict counts them."""
    from ..cost.arch import kv_cache
    from ..cost.ops import Bytes
    from ..cost.pool import tail_bytes, written_blocks

    hw, m = specs.views()
    kv = kv_cache(m, Bytes.of(m).kv, float(dec.get("mtp", 0) or 0))
    out = {"kv_B": np.asarray(kv.bytes(prompt), dtype=float)}
    if hw.system.memory_pool is None:
        return out
    block = float(hw.system.memory_pool.block_tokens)
    tail = np.minimum(np.ceil(cached * workload.pool_part / block) * block, cached)
    out["pool_B"] = np.where(tail > 0, tail_bytes(kv, cached, tail), 0.0)
    out["blocks"] = np.ceil(tail / block)
    if workload.prefix_hit > 0 or workload.cached_samples is not None:  # caching in use: new blocks written back
        out["write_B"], out["write_blocks"] = written_blocks(kv, prompt, cached, block)
    return out


def _budgets(st, groups: int, npus: float) -> tuple[float, float]:
    """(tokens, prompts) one prefill pass takes at most: the stack's per attention group x
    groups; without a stack, the paper's 16K tokens per NPU (Table 3)."""
    if st is None:
        return 16384.0 * npus, math.inf
    return (groups * float(st.max_prefill_tokens),
            groups * float(st.max_prefill_requests) if st.max_prefill_requests is not None else math.inf)


def _chunk_budget(st, ranks: int, npus: float) -> tuple[float, float, bool]:
    """(prompt tokens, prompts, split?) one co-located iteration carries at most: with the
    stack's chunked prefill on, its chunk size per attention group (within its prefill budget),
    prompts split across iterations; off, whole prompts within the prefill budget (_budgets)."""
    budget_t, budget_r = _budgets(st, ranks, npus)
    if st is not None and int(st.chunked_prefill_tokens) > 0:
        return min(budget_t, ranks * float(st.chunked_prefill_tokens)), budget_r, True
    return budget_t, budget_r, False


def _ranks(phase: str, inp: dict) -> int:
    if phase == "afd":
        return int(inp["attention_dies"])
    return max(int(inp["dies"]) // int(inp.get("tp") or 1), 1)


def _arrivals(traffic: Traffic, n: int, rng: np.random.Generator) -> np.ndarray:
    """Arrival times: a trace's (from its first; repeated after its span plus a mean gap when
    more requests are asked), all at 0 (rate inf: as fast as the client may send), Poisson, or
    gamma (burstier than Poisson when its coefficient of variation exceeds 1)."""
    if traffic.arrivals_s is not None:
        a = np.sort(np.asarray(traffic.arrivals_s, dtype=float))
        a = a - a[0]
        span = a[-1] + (a[-1] / max(len(a) - 1, 1) if len(a) > 1 else 1.0)
        reps = -(-n // len(a))
        return (a[None, :] + span * np.arange(reps)[:, None]).ravel()[:n]
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


from .. import callable_module  # noqa: E402  (``from cmperf import simulate``: cmperf/__init__.py)

callable_module(__name__, "simulate")
