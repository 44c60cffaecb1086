"""Speed of the serving stack's fit (docs/calibration.md#serving-evidence).

    python benchmarks/serving_fit_speed.py

Prints the time of one replay of every run (step-time grids + engine), of one batch of
points in a single vectorised simulate call per run, and of the whole leave-one-run-out fit
(``fit_serving``: all runs + one fold per fitted run), with the points it simulated: wall and
CPU seconds (on a machine shared with other work CPU is the fairer figure).
"""

from __future__ import annotations

import time


def _timed(fn):
    t, c = time.perf_counter(), time.process_time()
    out = fn()
    return out, time.perf_counter() - t, time.process_time() - c


def main() -> None:
    from cmperf.calibration.serving import SERVING_FILES, fit_serving, load_serving, simulated

    for path in SERVING_FILES:
        ref = load_serving(path)
        _, one, one_cpu = _timed(lambda: simulated(ref))
        params = ref.get("fit") or []
        if not params:
            print(f"{path.name}: replay {one:.1f} s ({one_cpu:.1f} s CPU; nothing to fit)")
            continue
        n = 8
        sweeps = {p["path"]: [p["lo"] * (p["hi"] / p["lo"]) ** (i / (n - 1)) for i in range(n)] for p in params}
        _, batch, batch_cpu = _timed(lambda: simulated(ref, sweeps))
        f, full, full_cpu = _timed(lambda: fit_serving(path))
        print(f"{path.name}: replay of {len(ref['rows'])} runs {one:.1f} s ({one_cpu:.1f} s CPU); {n} points in one "
              f"batch {batch:.1f} s ({batch_cpu:.1f} s CPU, {batch_cpu / n:.2f} s per point); leave-one-run-out fit "
              f"{full:.1f} s ({full_cpu:.1f} s CPU) over {f['evaluations']} points")


if __name__ == "__main__":
    main()
