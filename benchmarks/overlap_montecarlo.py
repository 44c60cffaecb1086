"""Monte Carlo check of the decode pipeline's closed form (cmperf/schedule/pipeline.py).

    python benchmarks/overlap_montecarlo.py                      # 320 dies, 300 layers
    python benchmarks/overlap_montecarlo.py --dies 64 --layers 1000 --seed 1

What it checks. A decode MoE layer is two stages A -> B on two streams; A ends in the
dispatch barrier and B in the combine barrier, and at a barrier every die waits for the
slowest. The model replaces the random per-die times by their means plus an expected wait
per barrier, W = cv x (A_load + B_load) x E[max of N standard normals]
(cmperf/cost/collectives.py), and gives the time per layer

    one microbatch (serial):   A + B + W
    two microbatches (overlap): max(2A, 2B, A + B + W)

Here N dies run L layers with random times instead: per die, layer, stage and microbatch,
A takes ``A_fixed + A_load x (1 + cv z)`` and B ``B_fixed + B_load x (1 + cv z)``, z
standard normal, clipped at 0.

  serial:  every die runs A; the dispatch barrier completes when the slowest die's A ends;
           every die runs B; the combine barrier completes when the slowest B ends; next layer.
  overlap: stream A of a die runs A(mb0), A(mb1), back to back, but A(mb b) of layer l+1
           not before the combine barrier of mb b in layer l; stream B runs B(mb0), B(mb1),
           B(mb b) not before the dispatch barrier of mb b (the slowest die's A(mb b) end);
           the combine barrier of mb b completes at the slowest die's B(mb b) end.

The time per layer is the average over the layers after a warm-up (a fifth of them).

How to read the output. One row per case: the stage means A = A_fixed + A_load and
B = B_fixed + B_load (the load parts in brackets), cv, the closed-form wait W, then for
each schedule the Monte Carlo time per layer, the closed form and their ratio MC / closed.
The serial ratio should be 1 within sampling noise (a few 0.1 %): there the closed form is
exact in expectation. The overlap ratio is >= 1 up to that noise: the expected-value form
is a lower bound. Where the waits bind (the balanced rows) it is within half a per cent.
Where a stream binds it is exceeded more: a die's stream no longer starts each layer
together with the others, and the busiest die of the moment sets the pace through the
barriers, so the excess grows with cv and as the chain A + B + W nears 2A (at 320 dies:
about 0.5 % at cv 0.05, 2 % at 0.1, 6-7 % at 0.2 with the chain within 3-4 % of the stream).
The last column, "engine", is 'exact' when cmperf.schedule.pipeline.pipeline() on the same
mean stage times and waits reproduces both closed forms to 1e-9 relative.
"""

from __future__ import annotations

import argparse
import time
from types import SimpleNamespace

import numpy as np

from cmperf.cost.collectives import expected_max_normal
from cmperf.schedule.pipeline import Stage, pipeline

# (A_fixed, A_load, B_fixed, B_load) in us; each runs with every cv of CVS
SHAPES = {
    "A-bound": (300.0, 300.0, 150.0, 150.0),
    "B-bound": (150.0, 150.0, 300.0, 300.0),
    "A ~ A+B+W": (250.0, 250.0, 150.0, 150.0),  # 2A = 1000; at 320 dies the chain overtakes it near cv 0.17
    "balanced": (200.0, 200.0, 200.0, 200.0),  # 2A = 2B: wait-bound for any cv > 0
    "balanced, all load": (40.0, 360.0, 40.0, 360.0),
}
CVS = (0.0, 0.05, 0.1, 0.2)


def stage_times(rng, fixed, load, cv, dies):
    """One random time per die for a stage: fixed + load x (1 + cv z), at least 0."""
    return np.maximum(fixed + load * (1.0 + cv * rng.standard_normal(dies)), 0.0)


def simulate(a_fixed, a_load, b_fixed, b_load, cv, microbatches, dies=320, layers=300, warm=None, seed=0):
    """Average time per layer, after ``warm`` layers (default a fifth), of ``dies`` dies
    running ``layers`` layers of A -> dispatch barrier -> B -> combine barrier with one or
    two microbatches (module docstring)."""
    rng = np.random.default_rng(seed)
    warm = layers // 5 if warm is None else warm
    if microbatches == 1:
        combine = 0.0  # all dies start a layer together at the previous combine barrier
        done = []
        for _ in range(layers):
            dispatch = np.max(combine + stage_times(rng, a_fixed, a_load, cv, dies))
            combine = np.max(dispatch + stage_times(rng, b_fixed, b_load, cv, dies))
            done.append(combine)
    elif microbatches == 2:
        free_a = np.zeros(dies)  # when each die's stream A is free
        free_b = np.zeros(dies)
        combine = [0.0, 0.0]  # combine barrier of each microbatch in the previous layer
        dispatch = [0.0, 0.0]
        done = []
        for _ in range(layers):
            for b in range(2):
                free_a = np.maximum(combine[b], free_a) + stage_times(rng, a_fixed, a_load, cv, dies)
                dispatch[b] = free_a.max()
            for b in range(2):
                free_b = np.maximum(dispatch[b], free_b) + stage_times(rng, b_fixed, b_load, cv, dies)
                combine[b] = free_b.max()
            done.append(max(combine))
    else:
        raise ValueError("microbatches must be 1 or 2")
    return (done[-1] - done[warm - 1]) / (layers - warm) if warm else done[-1] / layers


def closed_form(a, b, w):
    """Time per layer of the expected-value model: (one microbatch, two)."""
    return a + b + w, max(2 * a, 2 * b, a + b + w)


def fake_op(t):
    """What pipeline() reads of an op: its time and its pool times (none here)."""
    return SimpleNamespace(time_s=t, pool_compute_s=0.0, pool_vector_s=0.0, memory_s=0.0, network_s=0.0)


def engine(a, b, w_dispatch, w_combine):
    """pipeline()'s period for the decode layer: (one microbatch on one lane, two on two)."""
    one = pipeline([Stage("A", "serial", [fake_op(a)], w_dispatch), Stage("B", "serial", [fake_op(b)], w_combine)], 1)
    two = pipeline([Stage("A", "attn", [fake_op(a)], w_dispatch), Stage("B", "moe", [fake_op(b)], w_combine)], 2)
    return float(one.period_s), float(two.period_s)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dies", type=int, default=320, help="dies in the barrier group (N)")
    ap.add_argument("--layers", type=int, default=300, help="layers simulated; the first fifth is warm-up")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    t0 = time.perf_counter()
    emax = float(expected_max_normal(args.dies))
    print(f"{args.dies} dies, {args.layers} layers ({args.layers // 5} warm-up), seed {args.seed}; "
          f"E[max of {args.dies} std normals] = {emax:.3f}; times in us\n")
    head = (f"{'case':<20} {'A (load)':>11} {'B (load)':>11} {'cv':>5} {'W':>6} | "
            f"{'MC ser':>7} {'closed':>7} {'ratio':>6} | {'MC ovl':>7} {'closed':>7} {'ratio':>6} | engine")
    print(head)
    print("-" * len(head))
    worst = {"serial": 0.0, "overlap": 0.0}
    for name, (af, al, bf, bl) in SHAPES.items():
        for cv in CVS:
            a, b = af + al, bf + bl
            w_dispatch, w_combine = cv * al * emax, cv * bl * emax
            w = w_dispatch + w_combine
            serial, overlap = closed_form(a, b, w)
            mc = [simulate(af, al, bf, bl, cv, n, args.dies, args.layers, seed=args.seed) for n in (1, 2)]
            eng = engine(a, b, w_dispatch, w_combine)
            exact = np.allclose(eng, (serial, overlap), rtol=1e-9, atol=0.0)
            r1, r2 = mc[0] / serial, mc[1] / overlap
            worst["serial"] = max(worst["serial"], abs(r1 - 1))
            worst["overlap"] = max(worst["overlap"], abs(r2 - 1))
            print(f"{name:<20} {a:>4.0f} ({al:>4.0f}) {b:>4.0f} ({bl:>4.0f}) {cv:>5.2f} {w:>6.1f} | "
                  f"{mc[0]:>7.1f} {serial:>7.1f} {r1:>6.3f} | {mc[1]:>7.1f} {overlap:>7.1f} {r2:>6.3f} | "
                  f"{'exact' if exact else 'DIFFERS ' + repr(eng)}")
    print(f"\nlargest |MC / closed - 1|: serial {worst['serial']:.1%}, overlap {worst['overlap']:.1%}"
          f"  ({time.perf_counter() - t0:.1f} s)")


if __name__ == "__main__":
    main()
