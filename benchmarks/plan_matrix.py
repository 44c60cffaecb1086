"""``cmperf plan`` on every shipped system x model, from their own defaults (docs/model.md §9).

    python benchmarks/plan_matrix.py                      # every system x every model
    python benchmarks/plan_matrix.py h800-cluster gb200-nvl72   # these systems, every model

Each pair is planned as ``cmperf plan --hardware SYSTEM --model MODEL --format json`` (in this
one process, as the suite's ``cli`` fixture runs it) and held to what the suite holds its
pairs to (tests/helpers.py ``check_default_plan``): a deployment within the NPU budget that
meets the default SLOs (exit 0), or one line saying why there is none (exit 1); never a
traceback. Printed per pair: the outcome, the best shape, NPUs, goodput and the CPU seconds it
took. Exit 1 when any pair fails.

tests/test_deployment.py plans a representative part of the matrix (every system with its own
model, every model on two systems: ``PLANNED`` there); this is the exhaustive walk, 168 plans.
The last line prints their CPU seconds in this process: 119-129 s on the shared 2-core machine
(load ~2-3) after the planfast change, 178-204 s before it, back to back; ``plan_snapshot.py``
holds such a change to the same answers. What is left is the routed stacks' greedy chain
(queueing.greedy_instance in each rate search, ~45 %) and the cost model's predicts of the
instance options (~40 %, most of it fixed cost per predict: a plan makes ~12, one per phase and
TP degree); docs/model.md §9.3.
"""

from __future__ import annotations

import contextlib
import io
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))


def run_cli(*args) -> tuple[int, str, str]:
    """The command line in this process: (exit code, stdout, stderr)."""
    from cmperf.cli import main

    out, err = io.StringIO(), io.StringIO()
    argv, sys.argv = sys.argv, ["cmperf", *map(str, args)]
    code = 0
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            main()
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    finally:
        sys.argv = argv
    return code, out.getvalue(), err.getvalue()


def walk(command, check, header: str, describe) -> int:
    """Every system (the command line's, else every shipped one) x every model: ``command(system,
    model)`` the CLI arguments, ``check(code, out, err, model)`` its check (an AssertionError a
    failure; None: the pair says why it cannot run), ``describe(result, out, code)`` the row's
    columns after ``header``'s first three. Prints a row per pair and the total CPU; 1 when any
    pair fails."""
    from cmperf.specs.loader import list_builtin

    systems = sys.argv[1:] or [n for n, _ in list_builtin("system")]
    models = [n for n, _ in list_builtin("model")]
    failed, total = [], time.process_time()
    print(header)
    for system in systems:
        for model in models:
            t = time.process_time()
            code, out, err = run_cli(*command(system, model))
            took = time.process_time() - t
            try:
                result = check(code, out, err, model)
            except AssertionError as e:
                failed.append((system, model))
                print(f"{system:<20} {model:<20} FAIL {str(e)[:200]}")
                continue
            cols = describe(result, out, code) if result is not None else f"{code:>4} -"
            print(f"{system:<20} {model:<20} {cols} {took:6.2f}" + ("" if result is not None else f"  {err.strip()[-90:]}"))
    print(f"{len(systems) * len(models)} pairs, {len(failed)} failed, {time.process_time() - total:.1f} s of CPU")
    return 1 if failed else 0


def main() -> int:
    from helpers import check_default_plan

    return walk(lambda s, m: ("plan", "--hardware", s, "--model", m, "--format", "json"), check_default_plan,
                f"{'system':<20} {'model':<20} {'exit':>4} {'shape':<10} {'NPUs':>7} {'goodput/s':>10} {'CPU s':>6}",
                lambda best, out, code: f"{code:>4} {best['shape']:<10} {best['npus']:>7,.0f} {best['goodput_rps']:>10,.1f}")


if __name__ == "__main__":
    sys.exit(main())
