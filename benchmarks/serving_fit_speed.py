"""Speed of the serving stack's fit (docs/calibration.md#serving-evidence).

    python benchmarks/serving_fit_speed.py

Prints the wall time of one replay of every run (step-time grids + engine), of one batch of
points in a single vectorised simulate call per run, and of the whole leave-one-run-out fit
(``fit_serving``: all runs + one fold per fitted run), with the points it simulated.
"""

from __future__ import annotations

import time


def main() -> None:
    from cmperf.calibration.serving import SERVING_FILES, fit_serving, load_serving, simulated

    for path in SERVING_FILES:
        ref = load_serving(path)
        t = time.perf_counter()
        simulated(ref)
        one = time.perf_counter() - t
        params = ref.get("fit") or []
        if not params:
            print(f"{path.name}: replay {one:.1f} s (nothing to fit)")
            continue
        n = 8
        sweeps = {p["path"]: [p["lo"] * (p["hi"] / p["lo"]) ** (i / (n - 1)) for i in range(n)] for p in params}
        t = time.perf_counter()
        simulated(ref, sweeps)
        batch = time.perf_counter() - t
        t = time.perf_counter()
        f = fit_serving(path)
        full = time.perf_counter() - t
        print(f"{path.name}: replay of {len(ref['rows'])} runs {one:.1f} s; {n} points in one batch {batch:.1f} s "
              f"({batch / n:.2f} s per point); leave-one-run-out fit {full:.0f} s over {f['evaluations']} points")


if __name__ == "__main__":
    main()
