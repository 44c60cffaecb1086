"""``cmperf simulate`` on every shipped system x model, from their own defaults (docs/model.md §12).

    python benchmarks/simulate_matrix.py                      # every system x every model
    python benchmarks/simulate_matrix.py h800-cluster gb200-nvl72   # these systems, every model

Each pair is simulated as ``cmperf simulate --hardware SYSTEM --model MODEL --num-prompts 200
--format json`` (the system's default deployment for the model, at the rate the planner's
closed form promises for it; in this one process, as the suite's ``cli`` fixture runs it) and
held to what the suite holds its pairs to (tests/helpers.py ``check_default_simulate``): every
request completes with finite, positive metrics within 1.5x the default SLOs, or one line says
why the pair cannot run; never a traceback. Printed per pair: the outcome, the deployment,
the rate, mean TTFT and TPOT and the CPU seconds it took. Exit 1 when any pair fails.

tests/test_deployment.py simulates every system with its own model; this is the exhaustive walk.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO / "benchmarks"))


def main() -> int:
    from helpers import SIMULATED_PROMPTS, check_default_simulate
    from plan_matrix import run_cli

    from cmperf.specs.loader import list_builtin

    systems = sys.argv[1:] or [n for n, _ in list_builtin("system")]
    models = [n for n, _ in list_builtin("model")]
    failed, total = [], time.process_time()
    print(f"{'system':<20} {'model':<20} {'exit':>4} {'deployment':<44} {'rate/s':>8} {'TTFT ms':>8} {'TPOT ms':>8} {'CPU s':>6}")
    for system in systems:
        for model in models:
            t = time.process_time()
            code, out, err = run_cli("simulate", "--hardware", system, "--model", model,
                                     "--num-prompts", SIMULATED_PROMPTS, "--format", "json")
            took = time.process_time() - t
            try:
                m = check_default_simulate(code, out, err, model)
            except AssertionError as e:
                failed.append((system, model))
                print(f"{system:<20} {model:<20} FAIL {str(e)[:200]}")
                continue
            if m is None:
                print(f"{system:<20} {model:<20} {code:>4} {'-':<44} {'-':>8} {'-':>8} {'-':>8} {took:6.2f}  {err.strip()[-90:]}")
            else:
                s = json.loads(out)["settings"]
                rate = s["traffic"].split(" at ")[-1].split(" ")[0]
                print(f"{system:<20} {model:<20} {code:>4} {s['deployment'][:44]:<44} {float(rate):>8.2f} "
                      f"{m['mean_ttft_ms']:>8,.0f} {m['mean_tpot_ms']:>8.1f} {took:6.2f}")
    print(f"{len(systems) * len(models)} pairs, {len(failed)} failed, {time.process_time() - total:.1f} s of CPU")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
