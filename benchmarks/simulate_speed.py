"""Speed of the request-level simulation and of planning at scale (issue 16's targets).

    python benchmarks/simulate_speed.py                # simulate 100,000 requests; plan 100,000 NPUs
    python benchmarks/simulate_speed.py --requests 20000

Targets (2-core machine): ``cmperf simulate`` of 100,000 requests on the paper's PD deployment
of 256 NPUs (6 x 32 + 1 x 320 dies) in <= 10 s, i.e. >= 10^4 simulated requests/s (a Rust
scheduler replay elsewhere does ~770 requests/s), and ``cmperf plan --npus 100000`` in <= 10 s.
Figures are wall times of the Python API in this process (specs loaded once, before).
"""

from __future__ import annotations

import argparse
import time


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=100_000)
    ap.add_argument("--rate", type=float, default=140.0, help="Poisson requests/s (the paper's deployment carries ~150)")
    ap.add_argument("--npus", type=int, default=100_000)
    args = ap.parse_args()

    from cmperf.plan import plan
    from cmperf.predict import load_specs
    from cmperf.simulate import Traffic, simulate

    specs = load_specs()
    t = time.perf_counter()
    res = simulate(specs, traffic=Traffic(rate_rps=args.rate, num_prompts=args.requests))
    wall = time.perf_counter() - t
    m = res.metrics
    print(f"simulate: {args.requests:,} requests on {res.settings['deployment']} at {args.rate:g}/s: {wall:.2f} s wall "
          f"({args.requests / wall:,.0f} simulated requests/s; target >= 10,000); mean TTFT {m['mean_ttft_ms']:,.0f} ms, "
          f"p99 TPOT {m['p99_tpot_ms']:.1f} ms")
    t = time.perf_counter()
    p = plan(npus=args.npus)
    wall = time.perf_counter() - t
    print(f"plan --npus {args.npus:,}: {wall:.2f} s wall (target <= 10 s); best {p.best['goodput_rps']:,.0f} requests/s "
          f"on {p.best['npus']:,.0f} NPUs")


if __name__ == "__main__":
    main()
