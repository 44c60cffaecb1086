"""A prefill pass's time between the plan's budgets, three ways (docs/model.md §12.5): the cost
model itself at every whole prompt (``predict``), the plan's line between its budgets (2x apart
in tokens per NPU: ``shapes.PREFILL_PROMPTS_PER_NPU``), and the simulation's pass
(``simulate.predictor.prefill_predictor``: linear on a 1.3-ratio grid that ends at the budget,
and, where every prompt has one computed length, exact at every pass of whole prompts — before
that, the same pass was timed differently under different budgets, up to 8 % off the cost model).

A greedy pass carries what waited, not its budget, so between the budgets is where the passes
of a loaded instance are timed; where the cost model steps (a GEMM's waves) the three differ.

    PYTHONPATH=$PWD python benchmarks/pass_staircase.py [--hardware h200-cluster] [--dies 8] [--prompt 2048]
        [--budgets 16,32,64] [--from 8] [--to 32]
"""

from __future__ import annotations

import argparse

import numpy as np


def main():
    from cmperf.predict import load_specs, predict, system_model
    from cmperf.simulate.predictor import prefill_predictor

    ap = argparse.ArgumentParser()
    ap.add_argument("--hardware", default="h200-cluster")
    ap.add_argument("--model", default=None)
    ap.add_argument("--dies", type=int, default=8)
    ap.add_argument("--prompt", type=int, default=2048)
    ap.add_argument("--budgets", default="16,32,64", help="prompts per pass of the simulated budgets")
    ap.add_argument("--from", dest="lo", type=int, default=8)
    ap.add_argument("--to", dest="hi", type=int, default=32)
    a = ap.parse_args()
    specs = load_specs(a.hardware, a.model or system_model(a.hardware))
    dpp = int(specs.views()[0].chip.dies_per_package)
    npus = a.dies / dpp
    inst = {"dies": a.dies, "ep": a.dies}
    per_prompt = a.prompt / npus  # tokens per NPU a prompt adds
    ks = np.arange(a.lo, a.hi + 1)
    true = predict("prefill", rows=[{**inst, "tokens_per_npu": float(k * per_prompt), "prompt_len": a.prompt} for k in ks],
                   specs=specs, strict=False).columns["forward_ms"].to_numpy(dtype=float)
    from cmperf.plan.shapes import PREFILL_PROMPTS_PER_NPU

    rows_tok = np.array([p * a.prompt for p in PREFILL_PROMPTS_PER_NPU], dtype=float)  # the plan's budgets, tokens per NPU
    cols = predict("prefill", rows=[{**inst, "tokens_per_npu": float(x), "prompt_len": a.prompt} for x in rows_tok],
                   specs=specs, strict=False).columns  # the budgets that fit
    rows_tok, rows_ms = cols["tokens_per_npu"].to_numpy(dtype=float), cols["forward_ms"].to_numpy(dtype=float)
    line = np.interp(ks * per_prompt, rows_tok, rows_ms)
    budgets = [int(b) for b in a.budgets.split(",")]
    sims = {}
    for b in budgets:
        pred = prefill_predictor(specs, inst, b * a.prompt, np.array([float(a.prompt)]))
        sims[b] = [pred.times(float(k * a.prompt), float(a.prompt), prompts=int(k))[0] * 1e3 if k <= b else float("nan") for k in ks]
    print(f"# {a.hardware} {a.dies} dies, {a.prompt}-token prompts: pass of k prompts (ms)")
    print("k  tokens/NPU  predict  plan-line  " + "  ".join(f"sim@K={b}" for b in budgets))
    for j, k in enumerate(ks):
        print(f"{k:<3d}{k * per_prompt:>10.0f}{true[j]:>9.1f}{line[j]:>11.1f}  " + "  ".join(f"{sims[b][j]:>8.1f}" for b in budgets))


if __name__ == "__main__":
    main()
