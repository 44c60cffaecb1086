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

**Maximum rate under a budget.** The wait statistic rises with λ, so the largest λ whose
statistic plus a fixed time (prefill compute, KV transfer) stays within the budget (a TTFT SLO)
is the root of ``excess(λ) = statistic + fixed - budget`` on ``[0, c/E[S])``, bracketed by a
rate that meets the budget (``lo``, excess ≤ 0) and one that misses it (``hi``, at first the
capacity, where the wait is infinite). ``largest_rate`` narrows every bracket at once by the
Illinois variant of regula falsi applied to ``excess(λ)·(1 - λ·E[S]/c)``: the same sign, but
finite and smooth up to the capacity (the wait grows like ``1/(c/E[S] - λ)``, which the
headroom cancels), so the secant through both ends is a good step; the end kept twice in a
row has its value halved, so neither end sticks; a step is at least half the final width from
either end (a secant that lands on the root from one side closes the bracket next); after three steps in a row that did not
halve a bracket it is halved; while ``hi`` is still the capacity (where the value is not
evaluated) the next rate leaves a fiftieth of the headroom to the capacity (a queue of ``c``
servers meets a budget at a headroom of order ``1/√c``). About ten steps instead of
bisection's 40, each evaluating only the brackets still open, until every bracket is 2⁻⁴⁰ of
its capacity wide; the rate returned is the end that meets the budget.

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

_RELATIVE_WIDTH = 2.0 ** -40  # a bracket's final width, of its capacity: far below every other error of the plan
_HEADROOM_STEP = 0.02  # while hi is the capacity: the next rate leaves this share of the headroom
_SLOW_STEPS = 3  # steps in a row that do not halve a bracket before it is halved
_MAX_STEPS = 200  # four steps per halving at the worst: 160 reach the width from any bracket


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


def largest_rate(excess, upper):
    """The largest rate in [0, ``upper``) at which ``excess(rate, idx) <= 0``, for every
    configuration at once (module docstring: Illinois regula falsi on the excess times the
    headroom ``1 - rate/upper``, with halving safeguards). ``excess(rate, idx)`` gives, for
    the configurations ``idx`` (indices into the flattened ``upper``) at the rates ``rate``,
    the statistic minus its budget: non-decreasing in the rate, possibly infinite near
    ``upper``; NaN counts as a miss. 0 where even a rate of 0 misses; the rate returned always
    meets the budget."""
    up = np.array(upper, dtype=float)
    shape, up = up.shape, up.ravel()
    everyone = np.arange(up.size)
    lo, glo = np.zeros(up.size), np.asarray(excess(np.zeros(up.size), everyone), dtype=float)
    hi, ghi = up.copy(), np.full(up.size, np.nan)  # at the capacity: the limit, not evaluated
    kept = np.zeros(up.size, dtype=np.int8)  # the end kept by the last step: -1 lo, +1 hi
    slow = np.zeros(up.size, dtype=np.int8)  # steps in a row that did not halve the bracket
    live = np.flatnonzero(glo <= 0)
    tol = up * _RELATIVE_WIDTH
    for _ in range(_MAX_STEPS):
        i = live[hi[live] - lo[live] > tol[live]]
        if i.size == 0:
            break
        a, b, ga, gb = lo[i], hi[i], glo[i], ghi[i]
        width = b - a
        with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
            secant = a - ga * width / (gb - ga)
        good = np.isfinite(secant) & (slow[i] < _SLOW_STEPS) & (secant >= a) & (secant <= b)
        # a secant step at least half the final width from either end: one that lands on the
        # root (from one side, as regula falsi does) then closes the bracket on the next step;
        # while hi is the capacity, a fiftieth of the headroom left (a queue of many servers
        # meets its budget close to the capacity: headroom ~ 1/sqrt(c))
        step = np.minimum(np.maximum(secant, a + 0.5 * tol[i]), b - 0.5 * tol[i])
        x = np.where(good, step, np.where(np.isnan(gb), b - _HEADROOM_STEP * width, a + 0.5 * width))
        fx = np.asarray(excess(x, i), dtype=float)
        meets = fx <= 0
        with np.errstate(invalid="ignore"):  # the excess times the headroom: finite up to the capacity
            gx = np.where(np.isfinite(fx), fx * (1.0 - x / up[i]), np.where(meets, -np.inf, np.inf))
        # Illinois: the end kept a second time in a row has its value halved (its sign unchanged)
        ghi[i] = np.where(meets, np.where(kept[i] == 1, gb * 0.5, gb), gx)
        glo[i] = np.where(meets, gx, np.where(kept[i] == -1, ga * 0.5, ga))
        lo[i], hi[i] = np.where(meets, x, a), np.where(meets, b, x)
        kept[i] = np.where(meets, 1, -1)
        slow[i] = np.where(hi[i] - lo[i] > 0.5 * width, slow[i] + 1, 0)
    return np.where(glo <= 0, lo, 0.0).reshape(shape)[()]


def max_rate_per_s(servers, mean_service_s, service_scv, *, budget_s, fixed_s=0.0, q=None):
    """The largest arrival rate (requests/s) at which the wait statistic — the mean when
    ``q`` is None, else the q-quantile — plus ``fixed_s`` stays ≤ ``budget_s``: the root on
    λ in [0, c/E[S]) (:func:`largest_rate`); the rate returned meets the budget. 0 when even
    λ → 0 misses it (``fixed_s > budget_s``). Broadcasts over arrays."""
    args = (servers, mean_service_s, service_scv, budget_s, fixed_s, 0.0 if q is None else q)
    c, s, scv, budget, fixed, quantile = np.broadcast_arrays(*(np.asarray(v, dtype=float) for v in args))
    shape = c.shape
    c, s, scv, allowed, quantile = (x.ravel() for x in (c, s, scv, budget - fixed, quantile))

    def excess(rate, i):
        wait = mean_wait_s(rate, c[i], s[i], scv[i]) if q is None else wait_quantile_s(rate, c[i], s[i], scv[i], quantile[i])
        return wait - allowed[i]

    return largest_rate(excess, (c / s).reshape(shape))
