"""``plan --export`` on every shipped system, whole, at its defaults (docs/export.md).

    python benchmarks/export_matrix.py            # every system, its default model, stack and shapes
    python benchmarks/export_matrix.py --npus 64  # a smaller budget

For each system: the plan of the default workload, its export into a temporary directory,
and ``deployment.yaml`` evaluated again (what ``plan --deployment`` runs); printed per system:
the best shape, the files written, and whether the numbers came back (goodput, TTFT, TPOT,
NPUs within 1e-9). Exit 1 when any does not. tests/test_export.py runs the same walk cheaply
(16 NPUs, PD); this is the exhaustive one (about 25 s on a quiet 2-core machine).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--npus", type=int, default=None, help="NPU budget (default: each whole system)")
    args = ap.parse_args()

    from cmperf.export import context, from_plan, write
    from cmperf.plan import default_workload
    from cmperf.plan.planner import evaluate, plan
    from cmperf.simulate.deployment import from_file
    from cmperf.specs.loader import list_builtin

    w = default_workload()
    failed = 0
    for system, _ in list_builtin("system"):
        t = time.perf_counter()
        p = plan(w, hardware=system, npus=args.npus)
        if p.best is None:
            print(f"{system:20s} no deployment: {p.message}")
            continue
        with tempfile.TemporaryDirectory() as d:
            written = write(d, from_plan(p.best), context(p.specs, w.slo))
            ev = evaluate(p.specs, p.workload, from_file(str(Path(d) / "deployment.yaml")))
        off = [k for k in ("goodput_rps", "ttft_ms", "tpot_ms", "npus")
               if abs(ev[k] - p.best[k]) > 1e-9 * max(1.0, abs(p.best[k]))]
        failed += bool(off)
        print(f"{system:20s} {p.best['shape']:9s} {p.specs.model.name:14s} {time.perf_counter() - t:5.1f} s  "
              f"{'round-trips' if not off else 'DIFFERS in ' + ', '.join(off)}  "
              f"{' '.join(Path(f).name for f in written)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
