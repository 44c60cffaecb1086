"""One greedy prefill instance as the exact embedded Markov chain of its passes, against the
simulation (docs/model.md §12.5): what a closed form of §9.3 would have to reproduce.

An instance that starts a pass the moment it is free and a prompt waits, taking up to K of the
waiting prompts (the engine's `_start_pass`), is a bulk-service queue whose pass time t(k)
depends on the k prompts it carries. At a pass start X prompts wait (X >= 1); the pass carries
k = min(K, X) and lasts t(k); A ~ Poisson(lambda t(k)) arrive meanwhile; the next pass starts
with X' = X - k + A, or, when that is 0, with X' = 1 after an idle gap of 1/lambda on average.
Over the chain's stationary law pi (renewal reward, Little's law):

    wait (send -> pass start) = E[(X - k) t(k) + lambda t(k)^2 / 2] / (lambda E[t(k) + 1{X' = 0} / lambda])
    own pass (as a request sees it) = E[k t(k)] / E[k]

t(k) is read off the simulation's own passes (their prompts and lengths, fixed prompt
lengths), so the chain and the simulation share every cost; the rows print the chain, the
simulation's steady window and the closed form's terms side by side.

    PYTHONPATH=$PWD python benchmarks/greedy_chain.py [--seeds 1,2] [--loads 0.2,0.5,0.7,0.9]
"""

from __future__ import annotations

import argparse
import json

import numpy as np

CASES = [("h200-cluster", None, 16, "2048", "64")]  # the table's single-instance row (1 x 8 + 1 x 8)


def chain(lam: float, K: int, t: np.ndarray, states: int) -> dict:
    """The stationary chain of one greedy instance (module docstring); ``t[k]`` the pass of k prompts."""
    from scipy.stats import poisson

    X = np.arange(1, states + 1)
    k = np.minimum(K, X)
    tk = t[k]
    A = np.arange(states + 1)
    P = np.zeros((states, states))
    for i in range(states):
        pa = poisson.pmf(A, lam * tk[i])
        np.add.at(P[i], np.clip(X[i] - k[i] + A, 1, states) - 1, pa)
        P[i, -1] += 1.0 - pa.sum()
    w, v = np.linalg.eig(P.T)
    pi = np.real(v[:, np.argmin(np.abs(w - 1.0))])
    pi = pi / pi.sum()
    idle = np.where(X == k, np.exp(-lam * tk), 0.0) / lam
    return {"chain_wait_ms": float(pi @ ((X - k) * tk + lam * tk * tk / 2) / (lam * (pi @ (tk + idle)))) * 1e3,
            "chain_pass_ms": float(pi @ (k * tk) / (pi @ k)) * 1e3, "chain_prompts_per_pass": float(pi @ k),
            "chain_tail": float(pi[-1])}


def main():
    from benchmarks.ttft_story import _terms
    from cmperf.plan.planner import plan
    from cmperf.plan.workload import SLO, Workload, parse_lengths
    from cmperf.predict import load_specs, system_model
    from cmperf.simulate import Traffic, simulate
    from cmperf.simulate.deployment import from_plan_row

    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", default="1")
    ap.add_argument("--loads", default="0.2,0.5,0.7,0.9")
    a = ap.parse_args()
    for hwn, model, npus, P, O in CASES:
        specs = load_specs(hwn, model or system_model(hwn))
        dpp = int(specs.views()[0].chip.dies_per_package)
        w = Workload(prompt=parse_lengths(P, "--prompt-len"), output=parse_lengths(O, "--output-len"), prefix_hit=0.0,
                     slo=SLO(ttft_s=2.0, tpot_s=0.05))
        best = plan(w, specs=specs, npus=npus, shape_names=("pd",)).best
        dep = from_plan_row(best, dpp)
        for load in (float(x) for x in a.loads.split(",")):
            rate = load * float(best["goodput_rps"])
            wr = Workload(**{**w.__dict__, "arrival_rate_per_s": rate})
            row = plan(wr, specs=specs, npus=npus, shape_names=("pd",), deployment=dep).best
            if int(row["prefill_instances"]) != 1:
                continue
            K = int(row["_servers"])
            n = int(min(max(1500, rate * 60), 6000))
            for seed in (int(s) for s in a.seeds.split(",")):
                req = simulate(specs, wr, from_plan_row(row, dpp), Traffic(rate_rps=rate, num_prompts=n), seed=seed).requests
                _, first, count = np.unique(req.prefill_start_s, return_index=True, return_counts=True)
                dur = (req.prefill_end_s - req.prefill_start_s)[first]
                seen = np.unique(count)
                t = np.interp(np.arange(K + 1), seen, [dur[count == c].mean() for c in seen])  # the engine's t(k)
                out = {"case": f"{hwn} {npus} {P}/{O}", "load": load, "seed": seed, "prompts_per_pass_max": K,
                       "closed_wait_ms": float(row["ttft_queue_ms"] + row["ttft_align_ms"]),
                       "closed_pass_ms": float(row["ttft_prefill_ms"]),
                       **chain(rate, K, t, max(4 * K, K + 80)), **_terms(req, n)}
                print(json.dumps({k: round(v, 2) if isinstance(v, float) else v for k, v in out.items()}), flush=True)


if __name__ == "__main__":
    main()
