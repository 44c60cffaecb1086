"""The statistic an SLO bounds (issue 31 item 6): mean, p50, p90 or p99 of the requests'
TTFT and TPOT, said and chosen in plan, simulate and search (docs/model.md §9.3)."""

from __future__ import annotations

import numpy as np
import pytest

from cmperf.plan.planner import alignment_s
from cmperf.plan.workload import SLO, Workload, fixed
from cmperf.simulate.engine import Requests
from helpers import one_line_error


def test_the_alignment_quantile_is_the_busy_residuals():
    """Busy with probability rho, the residual uniform on (0, T): P(A > t) = rho (1 - t / T),
    so the q-quantile is T (1 - (1 - q) / rho)+ — by hand at T = 1 s."""
    assert alignment_s(1.0, 1.0, "p90") == pytest.approx(0.9)
    assert alignment_s(1.0, 1.0, "p99") == pytest.approx(0.99)
    assert alignment_s(0.5, 1.0, "p50") == pytest.approx(0.0)  # idle half the time: the median waits nothing
    assert alignment_s(0.8, 1.0, "p50") == pytest.approx(1 - 0.5 / 0.8)
    assert alignment_s(0.5, 1.0, "mean") == pytest.approx(0.25)
    rho = np.linspace(0.05, 1.0, 20)
    assert np.all(alignment_s(rho, 1.0, "p50") <= alignment_s(rho, 1.0, "p90"))
    assert np.all(alignment_s(rho, 1.0, "p90") <= alignment_s(rho, 1.0, "p99"))


def test_a_stricter_statistic_never_plans_more_rate():
    """The p99 of a latency is at least its p90, at least its p50: a deployment that meets an
    SLO on the p99 meets it on the p90, so the planned goodput never rises with the quantile."""
    from cmperf.plan.planner import plan

    rates = {}
    for stat in ("p50", "p90", "p99"):
        w = Workload(prompt=fixed(4096), output=fixed(256), prefix_hit=0.0, slo=SLO(2.0, 0.05, stat, stat))
        rates[stat] = plan(w, npus=32, shape_names=["pd"]).best["goodput_rps"]
    assert rates["p50"] >= rates["p90"] >= rates["p99"] > 0
    assert rates["p50"] > rates["p99"]  # the queue's tail is not free


def _run(ttft_s, tpot_s):
    n = len(ttft_s)
    send = np.arange(n, dtype=float)
    first = send + np.asarray(ttft_s, dtype=float)
    out = np.full(n, 11.0)
    return Requests(arrival_s=send, prompt=np.ones(n), output=out, cached=np.zeros(n), steps=np.ones(n, dtype=int),
                    send_s=send, first_token_s=first, finish_s=first + 10 * np.asarray(tpot_s, dtype=float))


def test_the_steady_window_is_held_to_the_slos_statistic():
    """Over the window (requests 10 % ... 90 %), TTFT 1 s for all but every tenth at 3 s; TPOT
    40 ms but every tenth at 80 ms: the mean and the p50 meet 2 s / 50 ms, the p99 misses both."""
    from cmperf.simulate.sustain import steady

    n = 2000
    slow = np.arange(n) % 10 == 0
    run = _run(np.where(slow, 3.0, 1.0), np.where(slow, 0.080, 0.040))
    for stat, ttft_ms, meets in (("mean", 1200.0, True), ("p50", 1000.0, True), ("p99", 3000.0, False)):
        st = steady(run, 2.0, 0.05, stat, stat)
        assert st["ttft_ms"] == pytest.approx(ttft_ms, rel=1e-3), stat
        assert st["meets_slos"] is meets, stat
    tpot_only = steady(run, 10.0, 0.05, "mean", "p99")
    assert tpot_only["tpot_ms"] == pytest.approx(80.0) and not tpot_only["meets_slos"]


def test_the_flags_say_the_statistic_and_refuse_others(cli):
    code, out, err = cli("simulate", "--num-prompts", "60", "--slo-stat", "p99")
    assert code == 0, err
    assert "TTFT p99" in out and "TPOT p99" in out
    one_line_error(*cli("plan", "--slo-stat", "p95")[::2], "--slo-stat", "p95", "p99")
    one_line_error(*cli("simulate", "--slo-stat", "median")[::2], "--slo-stat", "median")
    line = one_line_error(*cli("search", "decode", "--batch", "8", "--tpot-slo", "50", "--slo-stat", "p90")[::2],
                          "--slo-stat", "p90")
    assert "mean" in line


def test_an_slo_statistic_outside_the_four_is_refused_in_the_api():
    from cmperf.errors import ConfigError

    with pytest.raises(ConfigError, match="p95"):
        SLO(2.0, 0.05, "p95")
