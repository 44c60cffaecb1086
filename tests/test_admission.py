"""A PD decode instance admits a request only where its rank can hold every running request's
whole context (docs/model.md §12.3): the sum over the rank's requests of prompt + output, plus
the new one's, within the rank's KV tokens. Admitting on the rank's KV *now* left the running
requests' growth unreserved: 600 requests of 512 + 16,000 tokens decoded at once where the
memory holds 512 whole contexts, ~15 % over. By hand, the hostile case as a structural bound,
and nothing moved where capacity does not bind."""

from __future__ import annotations

import math

import numpy as np
import pytest

import cmperf.simulate as sim
from cmperf.plan.workload import SLO, Workload, fixed
from cmperf.predict import load_specs
from cmperf.simulate import DeploymentSpec, InstanceGroup, Traffic, simulate
from cmperf.simulate.engine import DecodeInstance, PrefillInstance, Requests, Simulation, Stats

SLOS = SLO(ttft_s=2.0, tpot_s=0.05)


class _Step:
    """A decode step by hand: 10 ms whatever the batch and KV."""

    npus = 1.0

    def __init__(self, kv_tokens_per_rank: float):
        self.kv_tokens_per_rank = kv_tokens_per_rank

    def step(self, batch_per_npu, kv, chunk_per_npu=0.0):
        return 0.010


class _Pass:
    """A prefill pass by hand: 1 ms whatever it holds, its KV sent in no time."""

    def times(self, tokens, c_eff, C_eff=0.0, prompts=1, pool_B=0.0, blocks=0.0, kv_B=0.0, write_B=0.0, write_blocks=0.0):
        return 0.001, 0.0


def _at_once(first: np.ndarray, finish: np.ndarray) -> int:
    """The most requests decoding at one time (from first token to finish; one leaving as
    another joins at the same instant is not both)."""
    ev = sorted([(t, 1) for t in first] + [(t, -1) for t in finish], key=lambda e: (e[0], e[1]))
    n = best = 0
    for _, d in ev:
        n += d
        best = max(best, n)
    return best


def _run_by_hand(n_requests: int, ranks: int, kv_per_rank: float):
    """``n_requests`` of 1,000-token prompts and 1,001-token outputs (1,000 decode steps at one
    token a step: whole context 2,001), all sent at 0, one 1 ms prefill pass."""
    req = Requests(arrival_s=np.zeros(n_requests), prompt=np.full(n_requests, 1000.0), output=np.full(n_requests, 1001.0),
                   cached=np.zeros(n_requests), steps=np.full(n_requests, 1000))
    stats = Stats()
    dec = DecodeInstance(0, _Step(kv_per_rank), ranks, 1.0, math.inf, "round_robin", req, stats)
    pre = PrefillInstance(0, _Pass(), math.inf, math.inf)
    Simulation(req, [pre], [dec], math.inf, stats).run()
    return req, dec


@pytest.mark.parametrize("N", [1, 4])
def test_a_rank_holding_n_whole_contexts_decodes_n_at_once_by_hand(N):
    """One rank holding exactly N whole contexts (N x 2,001 KV tokens), 3N requests at once:
    N decode at a time, in three waves of 1,000 steps of 10 ms. The first request's pass (it
    alone: the others are sent while it runs) ends at 1 ms, it is admitted then; the other
    N - 1 arrive with the second pass at 2 ms and join at the first step's end, 11 ms. Each
    leaves after its 1,000 steps (10 s), and the next in line takes its place at once: first
    tokens at 0.001 and 0.011 s, 10.001 and 10.011 s, 20.001 and 20.011 s. (Admitting on the
    rank's KV now, 1,000 tokens a prompt, would have taken 7 of the 12 with N = 4, their KV
    reaching 14,000 tokens where the rank holds 8,004.)"""
    req, dec = _run_by_hand(3 * N, 1, N * 2001.0)
    assert _at_once(req.first_token_s, req.finish_s) == N
    waves = np.concatenate([[t0 + 0.001] + [t0 + 0.011] * (N - 1) for t0 in (0.0, 10.0, 20.0)])
    assert np.sort(req.first_token_s) == pytest.approx(waves)
    assert np.sort(req.finish_s) == pytest.approx(waves + 10.0)
    # the most KV: the first's last step (1,000 + 1,000 tokens), the N - 1 a step behind it
    assert dec.peak_kv == pytest.approx(2000.0 + (N - 1) * 1999.0)


def test_one_token_less_and_the_rank_takes_one_request_less():
    """4 x 2,001 - 1 KV tokens hold 3 whole contexts: 3 at a time, four waves for 12, the last
    done at 0.011 + 4 x 10 s."""
    req, _ = _run_by_hand(12, 1, 4 * 2001.0 - 1.0)
    assert _at_once(req.first_token_s, req.finish_s) == 3
    assert np.nanmax(req.finish_s) == pytest.approx(0.011 + 4 * 10.0)


def test_an_empty_rank_takes_a_request_longer_than_it_holds():
    """A rank of 1,500 KV tokens cannot hold one 2,001-token context, but an empty rank takes
    any request (else it would never run): two requests run one after the other."""
    req, _ = _run_by_hand(2, 1, 1500.0)
    assert _at_once(req.first_token_s, req.finish_s) == 1
    assert np.sort(req.finish_s) == pytest.approx([10.001, 20.001])


def test_every_rank_holds_its_own_n():
    """Two ranks each holding 3 whole contexts, 12 requests at once: 6 decode at a time, two
    waves, the last done at 0.011 + 2 x 10 s."""
    req, _ = _run_by_hand(12, 2, 3 * 2001.0)
    assert _at_once(req.first_token_s, req.finish_s) == 6
    assert np.nanmax(req.finish_s) == pytest.approx(0.011 + 2 * 10.0)


@pytest.fixture(scope="module")
def specs():
    return load_specs("cloudmatrix384", "deepseek-r1")


def _spy(monkeypatch, kv_tokens_per_rank=None):
    """The decode predictors the simulation builds (and, given, their ranks' KV tokens replaced)."""
    made = []
    real = sim.decode_predictor

    def wrapped(*a, **k):
        p = real(*a, **k)
        if kv_tokens_per_rank is not None:
            p.kv_tokens_per_rank = kv_tokens_per_rank
        made.append(p)
        return p

    monkeypatch.setattr(sim, "decode_predictor", wrapped)
    return made


def test_long_outputs_never_over_fill_a_decode_rank(specs, monkeypatch):
    """The hostile case: 600 requests of 512-token prompts and 16,000-token outputs, all at
    once, on one 32-die decode instance of CloudMatrix384 (DeepSeek-R1). Over the whole run no
    rank's KV (each running request's prompt + the tokens it has emitted) exceeds what the rank
    holds, and at most as many decode at once as the ranks hold whole contexts of 16,512 tokens
    (fewer than 600: the memory binds, so the bound is tested where it matters)."""
    made = _spy(monkeypatch)
    wl = Workload(prompt=fixed(512), output=fixed(16000), prefix_hit=0.0, slo=SLOS)
    dep = DeploymentSpec(prefill=[InstanceGroup(1, {"dies": 16})], decode=[InstanceGroup(1, {"dies": 32, "tp": 1})])
    res = simulate(specs, wl, dep, Traffic(rate_rps=math.inf, num_prompts=600))
    cap = made[0].kv_tokens_per_rank
    fits = 32 * math.floor(cap / 16512.0)
    assert fits < 600
    r = res.requests
    assert np.isfinite(r.finish_s).all()
    assert res.metrics["decode_peak_kv_share"] <= 1.0
    assert 0.9 * fits <= _at_once(r.first_token_s, r.finish_s) <= fits  # and it did fill up
    assert res.metrics["preemptions"] == 0


@pytest.mark.parametrize("case", ["pd", "colocated"])
def test_where_capacity_does_not_bind_nothing_moves(specs, monkeypatch, case):
    """Short contexts (1,024 + 128 tokens) well within every rank's KV: the run is bit-identical
    to the same run with 1e15 KV tokens per rank, PD and co-located (the admission rule changes
    nothing it should not)."""
    wl = Workload(prompt=fixed(1024), output=fixed(128), prefix_hit=0.0, slo=SLOS)
    if case == "pd":
        dep = DeploymentSpec(prefill=[InstanceGroup(2, {"dies": 32, "attn_tp": 4})], decode=[InstanceGroup(1, {"dies": 64})])
    else:
        dep = DeploymentSpec(decode=[InstanceGroup(1, {"dies": 32})], colocated=True)
    traffic = Traffic(rate_rps=30.0, num_prompts=800)
    base = simulate(specs, wl, dep, traffic, seed=3)
    assert 0 < base.metrics["decode_peak_kv_share"] < 0.5
    _spy(monkeypatch, 1e15)
    free = simulate(specs, wl, dep, traffic, seed=3)
    for name in ("send_s", "first_token_s", "finish_s", "kv_arrive_s"):
        np.testing.assert_array_equal(getattr(base.requests, name), getattr(free.requests, name))
    keys = set(base.metrics) - {"decode_peak_kv_share"}
    assert {k: base.metrics[k] for k in keys} == {k: free.metrics[k] for k in keys}
