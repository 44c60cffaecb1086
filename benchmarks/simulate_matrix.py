"""``cmperf simulate`` on every shipped system x model, from their own defaults (docs/model.md §12).

    python benchmarks/simulate_matrix.py                      # every system x every model
    python benchmarks/simulate_matrix.py h800-cluster gb200-nvl72   # these systems, every model

Each pair is simulated as ``cmperf simulate --hardware SYSTEM --model MODEL --num-prompts 200
--format json`` (the system's default deployment for the model, at the rate the planner's
closed form promises for it; in this one process, as the suite's ``cli`` fixture runs it) and
held to what the suite holds its pairs to (tests/helpers.py ``check_default_simulate``): every
request completes with finite, positive metrics within 10 % of the default SLOs, or one line says
why the pair cannot run; never a traceback. Printed per pair: the outcome, the deployment,
the rate, mean TTFT and TPOT and the CPU seconds it took. Exit 1 when any pair fails.

tests/test_deployment.py simulates every system with its own model; this is the exhaustive walk.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO / "benchmarks"))


def main() -> int:
    from helpers import SIMULATED_PROMPTS, check_default_simulate
    from plan_matrix import walk

    def describe(m, out, code) -> str:
        s = json.loads(out)["settings"]
        rate = float(s["traffic"].split(" at ")[-1].split(" ")[0])
        return f"{code:>4} {s['deployment'][:44]:<44} {rate:>8.2f} {m['mean_ttft_ms']:>8,.0f} {m['mean_tpot_ms']:>8.1f}"

    return walk(lambda s, m: ("simulate", "--hardware", s, "--model", m, "--num-prompts", SIMULATED_PROMPTS,
                              "--format", "json"), check_default_simulate,
                f"{'system':<20} {'model':<20} {'exit':>4} {'deployment':<44} {'rate/s':>8} {'TTFT ms':>8} {'TPOT ms':>8} "
                f"{'CPU s':>6}", describe)


if __name__ == "__main__":
    sys.exit(main())
