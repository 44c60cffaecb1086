"""What the released SGLang-on-A3 logs bound (issue 31, docs/calibration.md#serving-evidence,
"what the logs bound"): DERIVED from serving-reference §1.2-§1.3 by
cmperf.calibration.serving's two bounds. The HT run's first wave needs a prompt rate that no
pass-time law lets the LL runs' instances stay below, at the same 3.5K prompts: a pass of the
HT's 8 prompts per instance cannot take less time than one of the LL's 4, so its rate per
prompt at most doubles."""

from __future__ import annotations

import pytest

from cmperf.calibration.serving import burst_rate_needed_tps, wave_rate_allowed_tps

PREFILL_NPUS = 16  # 2 prefill instances x 8 cards (serving-reference §1.1)
HT_PROMPT = 11_202_837 / 3328  # the HT log's total input tokens / prompts


def test_ht_first_wave_needs_more_than_twice_what_the_ll_runs_allow():
    ht = burst_rate_needed_tps(832, 3328, 29.78793, HT_PROMPT)  # P99 TTFT 29,787.93 ms
    assert ht / PREFILL_NPUS == pytest.approx(5643, rel=1e-3)  # prompt tokens/s per prefill NPU
    # LL-3.5K/1K: 32 prompts at once, median TTFT 2,205.10 ms, passes of 2 instances x 2 ranks x 2 prompts
    ll = wave_rate_allowed_tps(32, 2.20510, 3500, 8)
    assert ll / PREFILL_NPUS == pytest.approx(2381, rel=1e-3)
    assert ht > 2 * ll  # no nondecreasing pass time T(8) >= T(4) reconciles them (ratio 2.37)
    assert ht / ll == pytest.approx(2.37, abs=0.01)


def test_the_latency_the_ll_runs_would_have_to_carry_outside_the_prefill_queue():
    """The least latency outside the prefill queue and pass (a transfer, a handshake) that makes
    the LL runs' median consistent with half the HT's rate: ~0.35 s at 3.5K prompts, ~2.0 s at
    6K (at the HT's rate per token, which 6K's longer attention only lowers)."""
    ht = burst_rate_needed_tps(832, 3328, 29.78793, HT_PROMPT)
    for median_s, prompt, want in ((2.20510, 3500, 0.345), (5.14699, 6000, 1.958)):
        latency = median_s - (32 / 2 + 8) * prompt / (ht / 2)
        assert latency == pytest.approx(want, abs=0.01)
        assert wave_rate_allowed_tps(32, median_s, prompt, 8, latency) == pytest.approx(ht / 2, rel=1e-9)
