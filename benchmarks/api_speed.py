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
target (issue 24): a warm call in at most 1 ms of CPU. Where the time goes:
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=1000, help="warm calls timed")
    args = ap.parse_args()

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
