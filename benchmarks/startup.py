"""Start-up of the command line: a cold ``cmperf predict decode`` against a bare
``python -c "import numpy"`` on the same machine, in the same run.

    python benchmarks/startup.py                 # 9 pairs after one warm-up pair
    python benchmarks/startup.py --runs 15 --max-ratio 3

Each run is a new process (the interpreter starts, imports and exits); the two commands run
in turn, A B A B ..., so that a machine that speeds up or slows down touches both alike. The
figure is the median wall time of each and their ratio (target, issue 11: at most 3). The
time of ``import numpy`` is the floor any numpy program pays; the rest is cmperf's own
imports (typer, rich; never pandas on this path; PyYAML and pydantic only when a spec file
is new or edited: cmperf/specs/cache.py), reading the specs, the prediction and the table.
The first (warm-up) run fills the spec cache, as a user's first run does. ``python -X importtime -m cmperf.cli predict decode`` shows
where it goes. Measure a regular install (``pip install .``): an editable one (``pip install
-e``) puts its own finder in front of every import and adds about a tenth.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path


def cmperf_command() -> list[str]:
    """The installed ``cmperf`` script next to this interpreter, else ``python -m cmperf.cli``."""
    script = Path(sys.executable).parent / "cmperf"
    if script.is_file():
        return [str(script)]
    found = shutil.which("cmperf")
    return [found] if found else [sys.executable, "-m", "cmperf.cli"]


def wall(cmd: list[str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    return time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=9, help="timed pairs (after one warm-up pair)")
    ap.add_argument("--max-ratio", type=float, default=None, help="exit 1 when the median ratio is above this")
    args = ap.parse_args()

    a_cmd = [*cmperf_command(), "predict", "decode"]
    b_cmd = [sys.executable, "-c", "import numpy"]
    wall(a_cmd), wall(b_cmd)  # warm the file cache
    a, b = [], []
    for _ in range(args.runs):
        a.append(wall(a_cmd))
        b.append(wall(b_cmd))
    ratios = [x / y for x, y in zip(a, b)]
    ma, mb = statistics.median(a), statistics.median(b)
    print(f"cmperf predict decode     median {ma * 1e3:6.1f} ms  (min {min(a) * 1e3:.1f}, max {max(a) * 1e3:.1f})")
    print(f'python -c "import numpy"  median {mb * 1e3:6.1f} ms  (min {min(b) * 1e3:.1f}, max {max(b) * 1e3:.1f})')
    print(f"ratio of medians {ma / mb:.2f}; median of pairwise ratios {statistics.median(ratios):.2f} "
          f"({args.runs} pairs)")
    if args.max_ratio is not None and ma / mb > args.max_ratio:
        print(f"above the target ratio {args.max_ratio:g}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
