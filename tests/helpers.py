"""Assertions shared by the CLI tests."""


def one_line_error(code, err, *names):
    """A bad input ends in exit 2 and one line on stderr naming each of ``names``; no traceback."""
    assert code == 2, err
    assert "Traceback" not in err
    lines = [line for line in err.strip().splitlines() if line.strip()]
    assert len(lines) == 1, err
    for name in names:
        assert name in lines[0], (name, lines[0])
    return lines[0]


def check_default_plan(code, out, err, model=None):
    """`cmperf plan --hardware S --model M --format json` with no other flag: a deployment
    (exit 0) whose NPUs stay within the budget and whose latencies meet the default SLOs
    (TTFT <= 2 s, TPOT <= 50 ms), or one line saying why there is none (exit 1); never a
    traceback. Returns the best deployment (None on exit 1). Shared by
    tests/test_deployment.py and benchmarks/plan_matrix.py."""
    import json

    assert "Traceback" not in err and code in (0, 1), (model, err)
    if code == 1:
        assert len([line for line in err.splitlines() if not line.startswith("cmperf: note:")]) == 1, err
        return None
    data = json.loads(out)
    best, budget = data["best"], data["settings"]["npus"]
    assert 0 < best["npus"] <= budget and best["goodput_rps"] > 0, (model, best)
    assert best["ttft_ms"] <= 2000 * (1 + 1e-9) and best["tpot_ms"] <= 50 * (1 + 1e-9), (model, best)
    return best


SIMULATED_PROMPTS = 200  # requests a matrix simulation runs (the default rate, the system's own deployment)


def check_default_simulate(code, out, err, model=None):
    """`cmperf simulate --hardware S --model M --num-prompts 200 --format json` with no other
    flag (the system's default deployment for the model at the rate the planner's closed form
    promises for it): every request completes with finite, positive latencies and throughput,
    and the run meets the default SLOs it was planned for within 10 % (mean TTFT <= 2 s and
    mean TPOT <= 50 ms: 200 requests measure no steady state; over the 168 pairs the worst is
    2,003 ms and 44 ms, h20-cluster, and the bug this found ran 3.5 s); or one line saying why it cannot
    run (exit 1 or 2); never a traceback. Returns the metrics (None when it cannot run).
    Shared by tests/test_deployment.py and benchmarks/simulate_matrix.py."""
    import json
    import math

    assert "Traceback" not in err and code in (0, 1, 2), (model, err)
    if code != 0:
        assert len([line for line in err.splitlines() if not line.startswith("cmperf: note:")]) == 1, err
        return None
    m = json.loads(out)
    assert m["completed"] == SIMULATED_PROMPTS, (model, m["completed"])
    for k in ("mean_ttft_ms", "mean_tpot_ms", "output_throughput_tps", "request_throughput_rps"):
        assert math.isfinite(m[k]) and m[k] > 0, (model, k, m[k])
    assert m["mean_ttft_ms"] <= 1.1 * 2000 and m["mean_tpot_ms"] <= 1.1 * 50, (model, m["mean_ttft_ms"], m["mean_tpot_ms"])
    return m


def shared_serving_fit(path):
    """The leave-one-run-out fit of a serving file (``fit_serving``, ~10-15 s of CPU), computed
    once per test session: through the answer cache ``cmperf validate --serving`` keeps it in
    (cmperf/cli/validate.py ``_fit_serving_cached``, keyed by the file, its specs and the code),
    which is the session's own folder (tests/conftest.py, shared by the pytest-xdist workers).
    A lock on a file of that folder makes a second worker that asks while the first computes
    wait for its entry instead of fitting again; every value is the fresh fit's (a cached
    entry is the fit's JSON: floats read back exactly)."""
    import fcntl
    import os
    import tempfile
    from pathlib import Path

    from cmperf.cli.validate import _fit_serving_cached

    folder = Path(os.environ.get("XDG_CACHE_HOME") or tempfile.gettempdir())
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / "cmperf-test-servingfit.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            return _fit_serving_cached(path)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
