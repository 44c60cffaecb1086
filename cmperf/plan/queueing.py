"""Waiting for a free prefill instance: the M/G/c queue (docs/model.md §9.3.1).

Requests arrive at random (a Poisson stream of rate ``λ`` per second) and queue, first come
first served, for ``c`` identical servers (prefill instances, each working on one request at a
time). A request's service time has mean ``E[S]`` and squared coefficient of variation
``scv = Var[S] / E[S]²`` (0 for a fixed prompt length, 1 for exponential, above 1 for a long
tail of prompt lengths). The offered load is ``a = λ·E[S]`` (busy servers on average), the
utilisation ``ρ = a / c``; the queue is stable only when ``ρ < 1``.

**Probability of waiting (Erlang C, exact for M/M/c).** With ``π_c = e^(-a)·a^c / c!`` and
``Q(c, a) = Σ_{k<c} e^(-a)·a^k/k!`` (the regularized upper incomplete gamma function, the
probability that a Poisson(a) count is below c),

    1/C(c, a) = 1 + (1 - ρ)·Q(c, a)/π_c,

and C = 1 when ``a ≥ c``. cmperf evaluates it in log space, ``ln C = -ln(1 + e^x)`` with
``x = ln(1 - ρ) + ln Q - ln π_c`` and ``ln π_c = c·ln a - a - lnΓ(c+1)``, from SciPy's
``gammaincc`` and ``gammaln`` (uniform asymptotic expansions: accurate at any ``c``, in
constant time per configuration, vectorised): no overflow at any ``c``; a non-integer ``c``
gets the usual gamma-function extension.

**Mean wait (Allen–Cunneen).** The exact M/M/c mean wait scaled by the variability of the
arrivals and the service, ``(c_a² + scv)/2`` with ``c_a² = 1`` for Poisson arrivals:

    W_q ≈ C(c, a) / (c/E[S] - λ) · (1 + scv)/2        (∞ when ρ ≥ 1)

**Wait quantile.** The M/M/c wait is 0 with probability ``1 - C`` and otherwise exponential
with rate ``c/E[S] - λ``; the same ``(1 + scv)/2`` stretches its time axis:

    P(W > t) ≈ C·exp(-(c/E[S] - λ)·t / ((1 + scv)/2)),
    t_q = (1 + scv)/2 · ln(C / (1 - q)) / (c/E[S] - λ)   (0 when C ≤ 1 - q)

**Maximum rate under a budget.** ``max_rate_per_s`` bisects λ on ``(0, c/E[S])`` a fixed 40
times, all configurations at once: the wait statistic rises with λ, so the largest λ whose
statistic plus a fixed time (prefill compute, KV transfer) stays within the budget (a TTFT SLO)
is found to 2⁻⁴⁰ of the capacity ``c/E[S]``.

**Assumptions and where they break.** Poisson arrivals (independent users; bursty or
synchronised clients wait longer), FCFS, one request per server at a time and servers that
work independently (a batched pass that serves several prompts together is the caller's
mapping onto ``c`` and ``E[S]``, not modelled here), identical servers, no abandonment,
steady state (after a load step the queue needs a time growing like ``1/(1 - ρ)²`` service
times to settle). The mean is exact for M/M/c (``scv = 1``) and for M/G/1
(Pollaczek–Khinchine), and exact in heavy traffic (ρ → 1); the quantile is exact for M/M/c.
Against an event simulation of the same queue (``tests/queue_sim.py``; c ∈ {1, 4, 16, 64},
ρ ∈ {0.5, 0.8, 0.9}, 4 million customers per case), where the mean wait is at least
0.02·E[S]: the mean is within -12 %…+1 % for deterministic service (too low at moderate ρ,
where C itself is too high but the (1 + scv)/2 = 1/2 shrinks the wait too much) and within
+1 %…+23 % for lognormal service with scv 2 at c > 1 (too high: a two-moment formula cannot
see that the rare long jobs of a heavy tail leave the other servers free; for heavier tails
no two-moment formula is accurate at c > 1, Gupta et al., Queueing Syst. 64, 2010); the p90
within -27 %…+6 % (scv 0) and -4 %…+41 % (lognormal scv 2). The error shrinks as ρ → 1 and
is largest at small c (4–16) with ρ near 0.5, where the waits are short next to a service
time.
"""

from __future__ import annotations

import numpy as np

_BISECTION_STEPS = 40  # 2^-40 of the capacity: far below every other error of the plan


def _log_erlang_c(servers, offered_load) -> np.ndarray:
    """ln C(c, a), in log space (module docstring); 0 when a ≥ c, -inf when a = 0."""
    from scipy.special import gammaincc, gammaln  # imported where a plan queues: SciPy costs ~0.3 s to load

    c, a = np.broadcast_arrays(np.asarray(servers, dtype=float), np.asarray(offered_load, dtype=float))
    out = np.zeros(c.shape)
    out[a <= 0] = -np.inf
    live = (a > 0) & (a < c)
    if np.any(live):
        cl, al = c[live], a[live]
        log_pmf = cl * np.log(al) - al - gammaln(cl + 1.0)  # ln π_c
        with np.errstate(divide="ignore"):
            x = np.log((cl - al) / cl) + np.log(gammaincc(cl, al)) - log_pmf
        out[live] = -np.logaddexp(0.0, x)
    return out


def erlang_c(servers, offered_load):
    """Probability that an arrival waits in M/M/c: ``C(c, a)`` with ``a = λ·E[S]``; 1 when
    ``a ≥ c``, 0 when ``a = 0``. Broadcasts over arrays; ``servers ≥ 1``."""
    return np.exp(_log_erlang_c(servers, offered_load))[()]


def _wait_scale_s(arrival_rate_per_s, servers, mean_service_s, service_scv):
    """(ln C, (1+scv)/2 / (c/E[S] - λ), stable) broadcast together; the scale is inf when unstable."""
    lam, c, s, scv = np.broadcast_arrays(
        *(np.asarray(v, dtype=float) for v in (arrival_rate_per_s, servers, mean_service_s, service_scv))
    )
    a = lam * s
    stable = a < c
    gap = np.where(stable, c - a, 1.0)
    scale = np.where(stable, 0.5 * (1.0 + scv) * s / gap, np.inf)
    return _log_erlang_c(c, a), scale, stable


def mean_wait_s(arrival_rate_per_s, servers, mean_service_s, service_scv):
    """Mean time in queue of M/G/c, Allen–Cunneen: ``C/(c/E[S] - λ)·(1 + scv)/2`` seconds;
    inf when ``ρ = λ·E[S]/c ≥ 1``. Broadcasts over arrays."""
    log_c, scale, stable = _wait_scale_s(arrival_rate_per_s, servers, mean_service_s, service_scv)
    return np.where(stable, np.exp(log_c) * np.where(stable, scale, 0.0), np.inf)[()]


def wait_quantile_s(arrival_rate_per_s, servers, mean_service_s, service_scv, q):
    """The q-quantile (0 < q < 1) of the time in queue: ``(1+scv)/2·ln(C/(1-q))/(c/E[S] - λ)``
    seconds, 0 when ``C ≤ 1 - q``, inf when ``ρ ≥ 1``. Broadcasts over arrays."""
    log_c, scale, stable = _wait_scale_s(arrival_rate_per_s, servers, mean_service_s, service_scv)
    excess = np.maximum(log_c - np.log1p(-np.asarray(q, dtype=float)), 0.0)
    return np.where(stable, excess * np.where(stable, scale, 0.0), np.inf)[()]


def largest_rate(meets, upper):
    """The largest rate in [0, ``upper``) at which ``meets(rate)`` holds — a test that is true
    below a threshold and false above it — by 40 halvings over all configurations at once;
    0 where even a rate of 0 fails."""
    lo = np.zeros(np.shape(upper))
    hi = np.array(upper, dtype=float)
    for _ in range(_BISECTION_STEPS):
        mid = 0.5 * (lo + hi)
        ok = meets(mid)
        lo, hi = np.where(ok, mid, lo), np.where(ok, hi, mid)
    return np.where(meets(np.zeros_like(lo)), lo, 0.0)[()]


def max_rate_per_s(servers, mean_service_s, service_scv, *, budget_s, fixed_s=0.0, q=None):
    """The largest arrival rate (requests/s) at which the wait statistic — the mean when
    ``q`` is None, else the q-quantile — plus ``fixed_s`` stays ≤ ``budget_s``. Bisection on
    λ in (0, c/E[S]) (:func:`largest_rate`); the rate returned meets the budget. 0 when even
    λ → 0 misses it (``fixed_s > budget_s``). Broadcasts over arrays."""
    args = (servers, mean_service_s, service_scv, budget_s, fixed_s, 0.0 if q is None else q)
    c, s, scv, budget, fixed, quantile = np.broadcast_arrays(*(np.asarray(v, dtype=float) for v in args))

    def wait(rate):
        return mean_wait_s(rate, c, s, scv) if q is None else wait_quantile_s(rate, c, s, scv, quantile)

    return largest_rate(lambda rate: wait(rate) <= budget - fixed, c / s)
