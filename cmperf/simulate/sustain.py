"""The largest rate a deployment sustains within its SLOs, by simulation (docs/model.md §12.5).

A rate is *sustained* when, over the measured window, the simulated run meets the planner's
SLOs in steady state:

    window      the requests sent between the 10th and the 90th percentile of send times
                (the first 10 % warm the queues up, the last 10 % are sent while nothing
                arrives behind them: the drain; bench_serving's metrics over that window)
    TTFT        its statistic (the SLO's: mean, p50, p90 or p99) <= the TTFT SLO over the window, and the
                mean of the window's last quarter no more above its first quarter's than 10 %
                of the SLO or three standard errors of the difference (batch means, 10 batches
                a quarter), whichever is larger (a queue that still grows is not steady, even
                while its mean is under the SLO: above capacity the wait grows without bound,
                at any run length; a heavy tail's noise is not growth)
    TPOT        the window's statistic (the SLO's) <= the TPOT SLO

Every rate of one search runs the same requests and the same arrival gaps scaled by 1 / rate
(common random numbers: one seed family), so "sustained" is monotone in the rate up to the
run's own noise and bisection finds the largest one: bracket it around the planned rate
(x 1.25 steps out), then halve the bracket to 2 % of the rate.
"""

from __future__ import annotations

import math

import numpy as np

from .engine import Requests

WINDOW = (0.1, 0.9)
GROWTH = 0.1  # the TTFT's rise over the window a steady run may show, as a share of the SLO


def run_length(rate: float, slo_ttft_s: float, e2e_s: float, given: int = 4000, most: int = 200_000) -> int:
    """Requests a steady-state run needs: its window (80 % of it) spans 20 TTFT SLOs and 4
    end-to-end latencies (the queues and the decode batch fill), at least ``given``."""
    return int(min(max(given, math.ceil(rate * max(20 * slo_ttft_s, 4 * e2e_s) / (WINDOW[1] - WINDOW[0]))), most))


def steady(req: Requests, slo_ttft_s: float, slo_tpot_s: float, ttft_stat: str = "mean", tpot_stat: str = "mean") -> dict:
    """The steady-state metrics of a run over the measured window (module docstring):
    ``ttft_ms`` and ``tpot_ms`` at the SLOs' statistics (cmperf.plan.workload.SLO_STATS)."""
    from ..plan.workload import stat_quantile

    order = np.argsort(req.send_s, kind="stable")
    n = len(order)
    lo, hi = int(WINDOW[0] * n), max(int(WINDOW[1] * n), int(WINDOW[0] * n) + 1)
    win = order[lo:hi]
    ttft = req.first_token_s[win] - req.send_s[win]
    out = req.output[win]
    tpot = np.where(out > 1, (req.finish_s[win] - req.first_token_s[win]) / np.maximum(out - 1, 1), np.nan)
    q = max(len(win) // 4, 1)
    first, last = ttft[:q], ttft[-q:]

    def stat(x, which=ttft_stat):
        x = x[np.isfinite(x)]
        if not len(x):
            return float("inf")
        q = stat_quantile(which)
        return float(np.mean(x) if q is None else np.quantile(x, q))

    span = float(req.send_s[win[-1]] - req.send_s[win[0]]) if len(win) > 1 else 0.0
    res = {"measured_requests": int(len(win)), "window_s": span,
           "ttft_ms": stat(ttft) * 1e3, "ttft_first_quarter_ms": stat(first) * 1e3, "ttft_last_quarter_ms": stat(last) * 1e3,
           "mean_tpot_ms": float(np.nanmean(tpot) * 1e3) if np.isfinite(tpot).any() else 0.0,
           "tpot_ms": stat(tpot, tpot_stat) * 1e3 if np.isfinite(tpot).any() else 0.0,
           "p99_ttft_ms": float(np.nanquantile(ttft, 0.99) * 1e3), "p99_tpot_ms": float(np.nanquantile(tpot, 0.99) * 1e3) if np.isfinite(tpot).any() else 0.0,
           "sent_rps": (len(win) - 1) / span if span > 0 else float("inf")}
    se = math.hypot(_batch_se(first), _batch_se(last)) * 1e3
    rise = float(np.nanmean(last) - np.nanmean(first)) * 1e3
    res["ttft_rise_ms"], res["ttft_rise_se_ms"] = rise, se
    res["steady"] = bool(rise <= max(GROWTH * slo_ttft_s * 1e3, 3.0 * se))
    res["meets_slos"] = bool(res["ttft_ms"] <= slo_ttft_s * 1e3 and res["steady"] and res["tpot_ms"] <= slo_tpot_s * 1e3)
    return res


def _batch_se(x: np.ndarray, batches: int = 10) -> float:
    """Standard error of the mean of ``x`` (in order) from the spread of its batch means."""
    x = x[np.isfinite(x)]
    if len(x) < 2 * batches:
        return float(np.std(x) / math.sqrt(max(len(x), 1)))
    means = np.array([b.mean() for b in np.array_split(x, batches)])
    return float(means.std(ddof=1) / math.sqrt(batches))


def sustained_rate(run, planned_rps: float, slo_ttft_s: float, slo_tpot_s: float, ttft_stat: str = "mean",
                   rel_tol: float = 0.02, max_runs: int = 16, tpot_stat: str = "mean") -> dict:
    """The largest rate ``run(rate) -> Requests`` sustains (module docstring), starting from
    ``planned_rps``; also the steady metrics at the planned rate."""
    seen: dict = {}

    def ok(rate: float) -> bool:
        if rate not in seen:
            seen[rate] = steady(run(rate), slo_ttft_s, slo_tpot_s, ttft_stat, tpot_stat)
        return seen[rate]["meets_slos"]

    step = 1.25
    at_planned = ok(planned_rps)
    lo, hi = (planned_rps, planned_rps * step) if at_planned else (planned_rps / step, planned_rps)
    while len(seen) < max_runs // 2:
        if at_planned and ok(hi):
            lo, hi = hi, hi * step
        elif not at_planned and not ok(lo):
            lo, hi = lo / step, lo
        else:
            break
    while hi - lo > rel_tol * lo and len(seen) < max_runs:
        mid = np.sqrt(lo * hi)
        lo, hi = (mid, hi) if ok(mid) else (lo, mid)
    sustained = lo if ok(lo) else 0.0
    return {"planned_rate_rps": float(planned_rps), "sustained_rate_rps": float(sustained),
            "planned_over_sustained": float(planned_rps / sustained) if sustained > 0 else float("inf"),
            "at_planned": seen[planned_rps], "runs": len(seen)}


REFINE = 0.10  # planned / sustained off by more than this: the closed form cannot say; simulation ranks
REFINE_CANDIDATES = 4  # the best and the next runners-up simulated when it cannot


PREFILL_KEYS = ("prefill_instances", "prefill_dies", "prefill_tp")


def refine_candidates(table, top: int = REFINE_CANDIDATES) -> list:
    """The deployments simulation ranks when the closed form cannot: the best of each distinct
    prefill side (instances, dies, attention TP), in the plan's order, ``top`` of them. What a
    closed form misses there (a heavy tail's long prompt holding a pass, stragglers) is the
    prefill side's, so the candidates differ in it; decode options on the same prefill side
    would be sustained at the same rate. Of the best's shape (a co-located or AFD row has no
    prefill side of its own to differ in)."""
    served = table[table["goodput_rps"] > 0]
    if len(served) and "shape" in served:
        served = served[served["shape"] == served["shape"].iloc[0]]
    return [r for _, r in served.drop_duplicates(list(PREFILL_KEYS)).head(top).iterrows()]


def check_verify_prompts(prompts, flag: str = "--verify-prompts") -> int:
    """The requests a --verify simulation runs at least: a whole number from 1 to MAX_REQUESTS."""
    from ..errors import whole_number
    from .requests import MAX_REQUESTS

    return whole_number(prompts, flag, 1, MAX_REQUESTS)


def verify_plan(result, prompts: int = 4000, top: int = REFINE_CANDIDATES) -> dict | None:
    """The best deployment simulated: at its planned rate (the closed form's TTFT and TPOT
    beside the simulation's mean, p90 and p99 over the steady window), and the largest rate it
    sustains within the SLOs, by bisection (cmperf/simulate/sustain.py, docs/model.md §12.5).
    Where the two differ by more than REFINE, or the planned rate misses the SLOs in simulation
    (heavy tails, DP stragglers: what no closed form here holds), the planner's top candidates are ranked by the rate each sustains in
    simulation (seed 0), the first is checked on another seed of the family (seed 1), and the
    planned rate is then the smaller of its two sustained rates (``row``: the deployment the
    plan prints, at that rate)."""
    from . import Traffic, simulate
    from .deployment import from_plan_row as deployment_of

    prompts = check_verify_prompts(prompts, "verify_plan(prompts=...)")
    b = result.best
    if b is None:
        return None
    hw, _ = result.specs.views()
    dpp = int(hw.chip.dies_per_package)
    w = result.workload

    def search(row, seed, start=None):
        dep = deployment_of(row, dpp)
        e2e = float(row["ttft_ms"]) / 1e3 + w.output.mean * float(row["tpot_ms"]) / 1e3
        n = run_length(float(row["goodput_rps"]), w.slo.ttft_s, e2e, prompts)

        def run(rate):
            return simulate(result.specs, w, dep, Traffic(rate_rps=float(rate), num_prompts=n), seed=seed).requests

        return dep, n, sustained_rate(run, float(start or row["goodput_rps"]), w.slo.ttft_s, w.slo.tpot_s, w.slo.ttft_stat,
                                      tpot_stat=w.slo.tpot_stat)

    planned = float(b["goodput_rps"])
    dep, n, found = search(b, 0)
    refined = None
    missed = not found["at_planned"]["meets_slos"]  # the plan promises a rate its own simulation does not serve
    if (missed or abs(found["planned_over_sustained"] - 1.0) > REFINE) and w.arrival_rate_per_s is None:
        rows = refine_candidates(result.table, top)
        tried = [(row, *search(row, 0)) for row in rows]
        row, dep, n, best = max(tried, key=lambda x: (x[3]["sustained_rate_rps"], -float(x[0]["npus"])))
        refined = {"closed_form_rate_rps": planned, "tolerance": REFINE, "closed_form_deployment": deployment_of(b, dpp).describe(),
                   "candidates": [{"deployment": d.describe(), "closed_form_rate_rps": float(r["goodput_rps"]),
                                   "simulated_rate_rps": f["sustained_rate_rps"]} for r, d, _, f in tried]}
        # the first checked on another seed of the family: the rate both seeds sustain is planned (a heavy
        # tail's sustained rate moves between seeds: the few longest prompts set a run's mean TTFT)
        b = row
        _, n, found = search(row, 1, best["sustained_rate_rps"])
        refined["sustained_by_seed_rps"] = [best["sustained_rate_rps"], found["sustained_rate_rps"]]
        planned = min(refined["sustained_by_seed_rps"])
        if planned <= 0:
            planned = best["sustained_rate_rps"] or float(b["goodput_rps"])
    sim = simulate(result.specs, w, dep, Traffic(rate_rps=planned, num_prompts=n), seed=0, warmup=0.1)
    m = sim.metrics
    st = steady(sim.requests, w.slo.ttft_s, w.slo.tpot_s, w.slo.ttft_stat, w.slo.tpot_stat)
    return {"deployment": dep.describe(), "rate_rps": planned, "requests": n,
            "planned_rate_rps": planned, "sustained_rate_rps": found["sustained_rate_rps"],
            "planned_over_sustained": planned / found["sustained_rate_rps"] if found["sustained_rate_rps"] > 0 else float("inf"),
            "meets_slos_at_planned": st["meets_slos"], "refined_by_simulation": refined,
            "row": {k: (v.item() if hasattr(v, "item") else v) for k, v in dict(b).items() if not str(k).startswith("_")},
            "closed_form": {"ttft_ms": float(b["ttft_ms"]), "tpot_ms": float(b["tpot_ms"]), "goodput_rps": float(b["goodput_rps"])},
            "simulated": {**{k: m[k] for k in ("mean_ttft_ms", "median_ttft_ms", "p90_ttft_ms", "p99_ttft_ms", "mean_tpot_ms",
                                               "p90_tpot_ms", "p99_tpot_ms", "request_throughput_rps", "goodput_rps")},
                          "steady": st}}
