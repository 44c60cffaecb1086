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
