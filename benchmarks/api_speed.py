"""Speed of the Python API: one warm ``predict()`` call (docs/api.md).

    python benchmarks/api_speed.py              # 1,000 calls after a warm-up
    python benchmarks/api_speed.py --calls 200

The call is the README's: ``from cmperf import predict; predict("decode", {"batch": B})`` with
the defaults (no specs given: CloudMatrix384, DeepSeek-R1, read once per process), B walking
1..256 so that no two consecutive calls are the same question. Printed: the first call (specs
read, the cost model's modules imported), then CPU and wall time per warm call, their median
over blocks of 100 calls, and the same with the specs passed in (``load_specs()`` once); the
same calls on the uncached path (``cmperf.specs.view.uncached``: nothing a call derived is kept,
the cost of a question whose instance and stage constants are all new); a warm prefill call. The
target (issue 24): a warm call in at most 1 ms of CPU. ``--phases``: where a warm decode call's
CPU time goes, phase by phase (each phase's functions timed from outside; a warm call's cost
model is a replay of its trace, cmperf/schedule/replay.py, and the normal path's phases then
read 0; the rest of predict() is its grid and table bookkeeping). Function by function:
``python -m cProfile -s tottime benchmarks/api_speed.py --calls 200``.
"""

from __future__ import annotations

import argparse
import statistics
import time


def per_call(fn, calls: int, block: int = 100) -> tuple[float, float]:
    """(median CPU s, median wall s) per call over blocks of ``block`` calls."""
    cpu, wall = [], []
    for start in range(0, calls, block):
        n = min(block, calls - start)
        c, w = time.process_time(), time.perf_counter()
        for i in range(n):
            fn(1 + (start + i) % 256)
        cpu.append((time.process_time() - c) / n)
        wall.append((time.perf_counter() - w) / n)
    return statistics.median(cpu), statistics.median(wall)


PHASES = [  # (label, module, function): timed from outside, in the order a call runs them
    ("inputs: stack defaults, instance", "cmperf.deployment", "with_instance"),
    ("grid: product, defaults", "cmperf.predict", "make_grid"),
    ("grid: MTP, expert layout", "cmperf.deployment", "resolve"),
    ("validation", "cmperf.predict", "validate"),
    ("cost model: replayed (one-row trace)", "cmperf.schedule.replay", "evaluate"),
    ("cost model: one table timed", "cmperf.schedule.common", "timed_parts"),
    ("cost model: ops, schedules, pipelines", "cmperf.predict", "decode"),
    ("memory", "cmperf.predict", "decode_memory"),
    ("bands", "cmperf.predict", "add_bands"),
    ("output checks", "cmperf.predict", "output_problems"),
]


def phases(calls: int) -> None:
    """CPU time per warm decode call of each phase of :data:`PHASES` (the cost model's table
    taken out of the schedules' line)."""
    import importlib

    from cmperf import predict
    import cmperf.predict

    spent = {label: 0.0 for label, _, _ in PHASES}

    def timed(label, fn):
        def run(*a, **k):
            t = time.process_time()
            try:
                return fn(*a, **k)
            finally:
                spent[label] += time.process_time() - t
        return run

    for label, module, name in PHASES:
        mod = importlib.import_module(module)
        if name == "decode":
            cmperf.predict.RUN["decode"] = timed(label, cmperf.predict.RUN["decode"])
        else:
            setattr(mod, name, timed(label, getattr(mod, name)))
    for b in range(1, 21):
        predict("decode", {"batch": b})
    spent.update((k, 0.0) for k in spent)
    t = time.process_time()
    for i in range(calls):
        predict("decode", {"batch": 1 + i % 256})
    total = (time.process_time() - t) / calls
    each = {k: v / calls for k, v in spent.items()}
    each["cost model: ops, schedules, pipelines"] -= each["cost model: one table timed"]
    print(f"a warm decode call, {total * 1e3:.2f} ms CPU ({calls:,} calls, each phase timed from outside):")
    for label, v in each.items():
        print(f"  {label:40s} {v * 1e3:6.3f} ms  {v / total:5.1%}")
    rest = total - sum(each.values())
    print(f"  {'the rest of predict() (grid, table)':40s} {rest * 1e3:6.3f} ms  {rest / total:5.1%}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=1000, help="warm calls timed")
    ap.add_argument("--phases", action="store_true", help="only: where a warm decode call's time goes")
    args = ap.parse_args()
    if args.phases:
        phases(args.calls)
        return

    t = time.perf_counter()
    from cmperf import load_specs, predict

    r = predict("decode", {"batch": 64})
    first = time.perf_counter() - t
    print(f"first call (imports + specs + prediction): {first * 1e3:7.1f} ms   TPOT {r.columns['tpot_ms'][0]:.2f} ms")
    for _ in range(20):  # warm-up
        predict("decode", {"batch": 64})
    cpu, wall = per_call(lambda b: predict("decode", {"batch": b}), args.calls)
    print(f'predict("decode", {{"batch": B}}):          {cpu * 1e3:7.2f} ms CPU, {wall * 1e3:7.2f} ms wall per call '
          f"(median of blocks of 100; {args.calls:,} calls)")
    specs = load_specs()
    cpu_s, wall_s = per_call(lambda b: predict("decode", {"batch": b}, specs), args.calls)
    print(f'predict("decode", {{"batch": B}}, specs):   {cpu_s * 1e3:7.2f} ms CPU, {wall_s * 1e3:7.2f} ms wall per call')
    from cmperf.specs.view import uncached

    with uncached():
        cpu_u, wall_u = per_call(lambda b: predict("decode", {"batch": b}, specs), min(args.calls, 300))
    print(f'the same, uncached (nothing kept):          {cpu_u * 1e3:7.2f} ms CPU, {wall_u * 1e3:7.2f} ms wall per call')
    cpu_p, wall_p = per_call(lambda b: predict("prefill", {"prompt_len": 16 * b}, specs), args.calls)
    print(f'predict("prefill", {{"prompt_len": P}}):    {cpu_p * 1e3:7.2f} ms CPU, {wall_p * 1e3:7.2f} ms wall per call')
    t = time.perf_counter()
    grid = predict("decode", {"batch": list(range(1, 257))}, specs)
    once = time.perf_counter() - t
    print(f"the same 256 batches in one vectorised call: {once * 1e3:7.1f} ms ({once / len(grid.columns) * 1e3:.3f} ms a row)")
    print(f"target <= 1 ms CPU a warm call:            {'met' if cpu <= 1e-3 else 'MISSED'}")


if __name__ == "__main__":
    main()
