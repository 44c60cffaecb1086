"""Speed of the request-level simulation at every size, and of planning at scale (issue 22's targets).

    python benchmarks/simulate_speed.py                # 2,000 requests end to end; 100,000 in process; plan 100,000 NPUs
    python benchmarks/simulate_speed.py --requests 20000 --no-plan

Targets (a quiet 2-core machine): ``cmperf simulate --num-prompts 2000`` end to end (a fresh
process: imports, specs, the step-time grids, the run, the report) in <= 0.5 s, its fixed part
(the same command at 20 requests) no more than a ``cmperf predict decode``, with a rate given and
at the default rate (which runs the planner's closed form); 100,000 requests on
the paper's PD deployment (6 x 32 + 1 x 320 dies) in < 10 s; ``cmperf plan --npus 100000`` in
<= 10 s. Printed: wall and CPU seconds (on a busy machine CPU is the fairer figure).
"""

from __future__ import annotations

import argparse
import resource
import subprocess
import sys
import time


def _cli(*args) -> tuple[float, float]:
    """(wall, CPU) seconds of one fresh ``cmperf`` process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    subprocess.run([sys.executable, "-m", "cmperf.cli", *args], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=100_000)
    ap.add_argument("--rate", type=float, default=140.0, help="Poisson requests/s (the paper's deployment carries ~150)")
    ap.add_argument("--npus", type=int, default=100_000)
    ap.add_argument("--no-plan", action="store_true")
    args = ap.parse_args()

    rate = ["--request-rate", f"{args.rate:g}", "--format", "json"]
    pw, pc = min(_cli("predict", "decode") for _ in range(3))
    fw, fc = min(_cli("simulate", "--num-prompts", "20", *rate) for _ in range(3))
    sw, sc = min(_cli("simulate", "--num-prompts", "2000", *rate) for _ in range(3))
    dw, dc = min(_cli("simulate", "--num-prompts", "20", "--format", "json") for _ in range(3))
    print(f"cmperf predict decode: {pw:.2f} s wall, {pc:.2f} s CPU")
    print(f"cmperf simulate, 20 requests (the fixed part): {fw:.2f} s wall, {fc:.2f} s CPU (target: <= predict's)")
    print(f"cmperf simulate, 2,000 requests end to end: {sw:.2f} s wall, {sc:.2f} s CPU (target <= 0.5 s)")
    print(f"cmperf simulate, 20 requests at the default rate (the planner's closed form for the deployment, "
          f"pandas imported for it): {dw:.2f} s wall, {dc:.2f} s CPU (target: <= predict's)")

    from cmperf.predict import load_specs
    from cmperf.simulate import Traffic, simulate

    specs = load_specs()
    c, t = time.process_time(), time.perf_counter()
    res = simulate(specs, traffic=Traffic(rate_rps=args.rate, num_prompts=args.requests))
    wall, cpu = time.perf_counter() - t, time.process_time() - c
    m = res.metrics
    print(f"simulate: {args.requests:,} requests on {res.settings['deployment']} at {args.rate:g}/s: {wall:.2f} s wall, "
          f"{cpu:.2f} s CPU ({args.requests / wall:,.0f} simulated requests/s; target < 10 s); mean TTFT "
          f"{m['mean_ttft_ms']:,.0f} ms, p99 TPOT {m['p99_tpot_ms']:.1f} ms")
    if args.no_plan:
        return
    from cmperf.plan import plan

    t = time.perf_counter()
    p = plan(npus=args.npus)
    wall = time.perf_counter() - t
    print(f"plan --npus {args.npus:,}: {wall:.2f} s wall (target <= 10 s); best {p.best['goodput_rps']:,.0f} requests/s "
          f"on {p.best['npus']:,.0f} NPUs")


if __name__ == "__main__":
    main()
