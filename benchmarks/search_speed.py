"""Speed of a decode design-space search over 100,000 configurations.

    python benchmarks/search_speed.py            # API: first call and best of 3
    python benchmarks/search_speed.py --cli      # also the whole command, interpreter start included

Target (README.md, "Search"): the 100,000-configuration search in under 2 s on a 2-core machine.
The grid: batch 1..250 x microbatches 1,2 x MTP k 1,2 x 5 prompt lengths x 5 output lengths x
4 UB bandwidths (a swept spec field) = 100,000 configurations.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

VALUES = {"batch": list(range(1, 251)), "microbatches": [1, 2], "mtp_k": [1, 2],
          "prompt_len": [1024, 2048, 4096, 8192, 16384], "output_len": [128, 256, 512, 1024, 2048]}
SWEEPS = {"system.tiers.ub.bandwidth_Bps": [100e9, 135e9, 200e9, 270e9]}
CLI = ["search", "decode", "--tpot-slo", "50", "--batch", "1:250", "--mtp-k", "1,2",
       "--prompt-len", "1024,2048,4096,8192,16384", "--output-len", "128,256,512,1024,2048",
       "--sweep", "system.tiers.ub.bandwidth_Bps=100e9,135e9,200e9,270e9", "--format", "json"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3, help="timed repetitions after the first call")
    ap.add_argument("--cli", action="store_true", help="also time the cmperf command end to end")
    args = ap.parse_args()

    t0 = time.perf_counter()
    from cmperf.predict import load_specs
    from cmperf.search import search

    specs = load_specs()
    t_import = time.perf_counter() - t0
    times = []
    for _ in range(1 + args.repeat):
        t = time.perf_counter()
        r = search("decode", VALUES, 50.0, specs, SWEEPS)
        times.append(time.perf_counter() - t)
    n = r.summary()["configurations"]
    assert n >= 100_000, n
    best = min(times[1:]) if args.repeat else times[0]
    print(f"configurations:        {n:,} ({r.summary()['dropped_invalid']:,} invalid, "
          f"{r.summary()['meet_slo']:,} meet TPOT <= 50 ms)")
    print(f"imports + specs:       {t_import:.2f} s")
    print(f"first search:          {times[0]:.2f} s  ({n / times[0]:,.0f} configurations/s)")
    print(f"best of {args.repeat}:             {best:.2f} s  ({n / best:,.0f} configurations/s)")
    print(f"target < 2 s:          {'met' if times[0] < 2.0 else 'MISSED'}")
    if args.cli:
        exe = Path(sys.executable).with_name("cmperf")
        cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "cmperf.cli"]
        t = time.perf_counter()
        subprocess.run([*cmd, *CLI], check=True, stdout=subprocess.DEVNULL)
        wall = time.perf_counter() - t
        print(f"cmperf {' '.join(CLI[:4])} ... (whole command, cold start): {wall:.2f} s")


if __name__ == "__main__":
    main()
