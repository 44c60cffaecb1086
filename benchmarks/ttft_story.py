"""Closed form against simulation, mean TTFT, for fixed and log-normal prompt lengths
(docs/model.md §12.5): the harness of tests/test_simulate_story.py (the plan's best PD
deployment simulated at a share of its planned rate, with the pass budget the plan chose at
that rate; the steady window), over the cases of §12.5's table.

Each row also sets every term of the closed form (§9.3) beside the engine's own events over the
steady window: the wait before a request's pass (closed: queue + alignment), its pass, its KV
transfer and its wait for the decode step it joins (the simulation's timestamps), and the
passes themselves: prompts per pass (mean, and as a request sees it), the mean pass, and the
coefficient of variation of the gaps between pass starts (0: the instances stagger evenly; above
1: they start in clusters). ``--prompts N`` runs N requests instead of the test's 1,500-6,000
(the instances' phases relax over thousands of passes, §12.5).

    PYTHONPATH=$PWD python benchmarks/ttft_story.py [--seeds 1,2] [--loads 0.2,0.5,0.7,0.9] [--prompts N]
"""

from __future__ import annotations

import argparse
import json
import time

CASES = [  # system, model, NPUs, prompt, output
    ("cloudmatrix384", "deepseek-r1", 64, "2048", "64"),
    ("cloudmatrix384", "deepseek-r1", 64, "2048:4096", "64"),
    ("h100-cluster", "llama-3.1-70b", 16, "1024", "256"),
    ("h100-cluster", "llama-3.1-70b", 16, "1024:2048", "256"),
    ("h800-cluster", "deepseek-v3", 64, "1024", "64"),
    ("h800-cluster", "deepseek-v3", 64, "1024:2048", "64"),
    # the other fixed-length rows of §12.5's table
    ("cloudmatrix384", "deepseek-r1", 384, "4096", "256"),
    ("cloudmatrix384", "deepseek-r1", 64, "4096", "256"),
    ("h100-cluster", "llama-3.1-70b", 16, "4096", "128"),
    ("h200-cluster", None, 16, "2048", "64"),
]


def _terms(req, n):
    """The steady window's mean wait, pass, transfer and join (ms) and its passes' statistics."""
    import numpy as np

    from cmperf.simulate.sustain import WINDOW

    order = np.argsort(req.send_s, kind="stable")
    win = order[int(WINDOW[0] * n):max(int(WINDOW[1] * n), int(WINDOW[0] * n) + 1)]
    ms = lambda a, b: float(np.mean((a - b)[win]) * 1e3)  # noqa: E731
    starts, first, count = np.unique(req.prefill_start_s, return_index=True, return_counts=True)
    lo, hi = req.send_s[win].min(), req.send_s[win].max()
    inside = (starts >= lo) & (starts <= hi)
    gaps = np.diff(starts[inside])
    return {"sim_wait_ms": ms(req.prefill_start_s, req.send_s), "sim_pass_ms": ms(req.prefill_end_s, req.prefill_start_s),
            "sim_kv_ms": ms(req.kv_arrive_s, req.prefill_end_s), "sim_join_ms": ms(req.first_token_s, req.kv_arrive_s),
            "prompts_per_pass": float(count[inside].mean()),
            "prompts_per_pass_seen": float(count[np.searchsorted(starts, req.prefill_start_s[win])].mean()),
            "mean_pass_ms": float(np.mean((req.prefill_end_s - req.prefill_start_s)[first[inside]]) * 1e3),
            "start_gap_cv": float(gaps.std() / gaps.mean()) if len(gaps) > 1 else 0.0}


def run_case(case, loads, seeds, prompts=None):
    from cmperf.plan.planner import plan
    from cmperf.plan.workload import SLO, Workload, parse_lengths
    from cmperf.predict import load_specs, system_model
    from cmperf.simulate import Traffic, simulate
    from cmperf.simulate.deployment import from_plan_row
    from cmperf.simulate.sustain import steady

    hwn, model, npus, P, O = case
    specs = load_specs(hwn, model) if model else load_specs(hwn, system_model(hwn))
    dpp = int(specs.views()[0].chip.dies_per_package)
    w = Workload(prompt=parse_lengths(P, "--prompt-len"), output=parse_lengths(O, "--output-len"), prefix_hit=0.0,
                 slo=SLO(ttft_s=2.0, tpot_s=0.05))
    best = plan(w, specs=specs, npus=npus, shape_names=("pd",)).best
    dep = from_plan_row(best, dpp)
    out = []
    for load in loads:
        rate = load * float(best["goodput_rps"])
        wr = Workload(**{**w.__dict__, "arrival_rate_per_s": rate})
        row = plan(wr, specs=specs, npus=npus, shape_names=("pd",), deployment=dep).best
        n = prompts or int(min(max(1500, rate * 60), 6000))
        for seed in seeds:
            res = simulate(specs, wr, from_plan_row(row, dpp), Traffic(rate_rps=rate, num_prompts=n), seed=seed)
            st = steady(res.requests, 2.0, 0.05)
            out.append({"case": f"{hwn} {npus} {model} {P}/{O}", "deployment": f"{int(best['prefill_instances'])}x{int(best['prefill_dies'])}"
                        f"+{int(best['decode_instances'])}x{int(best['decode_dies'])}", "load": load, "seed": seed,
                        "closed_ms": float(row["ttft_ms"]), "sim_ms": st["ttft_ms"],
                        "err": float(row["ttft_ms"]) / st["ttft_ms"] - 1.0, "pass_ms": float(row["ttft_prefill_ms"]),
                        "prefill_tokens_per_npu": float(row["prefill_tokens_per_npu"]),
                        "closed_wait_ms": float(row["ttft_queue_ms"] + row["ttft_align_ms"]),
                        "closed_kv_ms": float(row["ttft_kv_transfer_ms"]), "closed_join_ms": float(row["ttft_decode_join_ms"]),
                        **_terms(res.requests, n)})
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", default="1")
    ap.add_argument("--loads", default="0.2,0.5,0.7,0.9")
    ap.add_argument("--cases", default="", help="indices into CASES, comma-separated (default all)")
    ap.add_argument("--prompts", type=int, default=None, help="requests per run (default: the test's 1,500-6,000)")
    a = ap.parse_args()
    seeds = [int(s) for s in a.seeds.split(",")]
    loads = [float(x) for x in a.loads.split(",")]
    cases = [CASES[int(i)] for i in a.cases.split(",")] if a.cases else CASES
    for c in cases:
        t = time.perf_counter()
        rows = run_case(c, loads, seeds, a.prompts)
        for r in rows:
            print(json.dumps({k: round(v, 4) if isinstance(v, float) else v for k, v in r.items()}), flush=True)
        print(f"# {c}: {time.perf_counter() - t:.0f} s", flush=True)


if __name__ == "__main__":
    main()
