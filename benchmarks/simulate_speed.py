"""Speed of the request-level simulation at every size, and of planning at scale (issue 22's targets).

    python benchmarks/simulate_speed.py                # 2,000 requests end to end; 100,000 in process; plan 100,000 NPUs
    python benchmarks/simulate_speed.py --requests 20000 --no-plan

Targets (a quiet 2-core machine): ``cmperf simulate --num-prompts 2000`` end to end (a fresh
process: imports, specs, the step-time grids, the run, the report) in <= 0.5 s, its fixed part
(the same command at 20 requests) no more than a ``cmperf predict decode``, with a rate given and
at the default rate (which runs the planner's closed form); 100,000 requests on
the paper's PD deployment (6 x 32 + 1 x 320 dies) in < 10 s; ``cmperf plan --npus 100000`` in
<= 10 s. Printed: wall and CPU seconds, best of --repeat (on a busy machine CPU is the fairer
figure), each command twice:

    warm   cmperf's caches (~/.cache/cmperf: the spec cache, the answer cache) hold what the
           command reads, as on every run but a machine's first: a warm-up run fills them
    cold   an empty cache folder for every run (the first run ever, which also fills it)

Every process runs with compiled bytecode (as an installed package has it: a private
PYTHONPYCACHEPREFIX, warmed up first), so the figures do not depend on whether this checkout
has __pycache__ folders or the environment sets PYTHONDONTWRITEBYTECODE.
"""

from __future__ import annotations

import argparse
import math
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent  # the checkout measured, in process and in every child process
sys.path.insert(0, str(ROOT))


def _cli(env: dict, *args) -> tuple[float, float]:
    """(wall, CPU) seconds of one fresh ``cmperf`` process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    subprocess.run([sys.executable, "-m", "cmperf.cli", *args], check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL, env=env, cwd=ROOT)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def _warm_and_cold(base: dict, top: str, repeat: int, commands: list) -> list:
    """Per command, the best (wall, CPU) of ``repeat`` runs with the caches warm and of
    ``repeat`` runs with an empty cache each; the commands run in turn in every round, so that
    a machine whose load drifts weighs on all of them alike."""
    warm = {**base, "XDG_CACHE_HOME": os.path.join(top, "warm")}
    for args in commands:
        _cli(warm, *args)  # fills the caches (and the bytecode)
    best = [[(math.inf, math.inf)] * 2 for _ in commands]
    for _ in range(repeat):
        for i, args in enumerate(commands):
            w = _cli(warm, *args)
            c = _cli({**base, "XDG_CACHE_HOME": tempfile.mkdtemp(dir=top)}, *args)
            best[i] = [tuple(map(min, best[i][0], w)), tuple(map(min, best[i][1], c))]  # wall and CPU each at its best
    return best


def _line(what: str, warm, cold, target: str) -> str:
    return (f"{what}: warm {warm[0]:.2f} s wall, {warm[1]:.2f} s CPU; cold cache {cold[0]:.2f} s wall, "
            f"{cold[1]:.2f} s CPU ({target})")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=100_000)
    ap.add_argument("--rate", type=float, default=140.0, help="Poisson requests/s (the paper's deployment carries ~150)")
    ap.add_argument("--npus", type=int, default=100_000)
    ap.add_argument("--no-plan", action="store_true")
    ap.add_argument("--repeat", type=int, default=3, help="runs of each command (the best is printed)")
    args = ap.parse_args()

    rate = ["--request-rate", f"{args.rate:g}", "--format", "json"]
    with tempfile.TemporaryDirectory(prefix="simulate_speed-") as top:
        base = {k: v for k, v in os.environ.items() if k not in ("PYTHONDONTWRITEBYTECODE", "CMPERF_NO_CACHE")}
        base["PYTHONPYCACHEPREFIX"] = os.path.join(top, "bytecode")
        base["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])
        print(f"cmperf of {ROOT}; bytecode compiled; best of {args.repeat}", flush=True)
        runs = [("cmperf predict decode", ("predict", "decode"), "the reference"),
                ("cmperf simulate, 20 requests, --request-rate given (the fixed part)",
                 ("simulate", "--num-prompts", "20", *rate), "target: <= predict's"),
                ("cmperf simulate, 2,000 requests end to end", ("simulate", "--num-prompts", "2000", *rate),
                 "target <= 0.5 s"),
                ("cmperf simulate, 20 requests at the default rate (the planner's closed form for the deployment: "
                 "from the answer cache when warm; cold, it loads the planner, pandas and SciPy)",
                 ("simulate", "--num-prompts", "20", "--format", "json"), "target: <= predict's")]
        for (what, _, target), (warm, cold) in zip(runs, _warm_and_cold(base, top, args.repeat, [r[1] for r in runs])):
            print(_line(what, warm, cold, target), flush=True)

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
