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


# --------------------------------------------------------------------------- greedy passes whose time depends on what they carry
COUNT_GRID = np.linspace(0.0, 1.0, 17)  # a pass of k = 1 + (K - 1) u prompts on this grid of u: where its time is given
_GREEDY_Z = np.linspace(-4.5, 4.5, 25)  # standard normal points of the count's law (Wilson–Hilferty: a gamma law)
_GREEDY_W = np.exp(-0.5 * _GREEDY_Z ** 2) / np.exp(-0.5 * _GREEDY_Z ** 2).sum()
_NEWTON_STEPS = 12  # 3-7 reach 1e-4 of the mean count on the cases of docs/model.md §9.3


def _count_time(k, prompts, count_s):
    """The pass of ``k`` prompts (rows of ``k``): linear between the ``COUNT_GRID`` points
    ``1 + (prompts - 1) u`` where ``count_s`` holds its time."""
    m = len(COUNT_GRID) - 1
    p = np.clip((k - 1.0) / np.maximum(prompts - 1.0, 1e-12)[:, None], 0.0, 1.0) * m
    i = np.minimum(p.astype(int), m - 1)
    w = p - i
    rows = np.arange(len(prompts))[:, None]
    return count_s[rows, i] * (1.0 - w) + count_s[rows, i + 1] * w


def _count_law(mean, var):
    """Points of the waiting count X at a pass start (equal weights ``_GREEDY_W``): a gamma law
    of that mean and variance by the Wilson–Hilferty cube, X = m (1 - h + z √h)³, h = var / (9 m²)
    (right-skewed like a backlog; Poisson-like at a small mean), at least one prompt."""
    h = var / (9.0 * mean * mean)
    x = mean[:, None] * np.maximum(1.0 - h[:, None] + _GREEDY_Z[None, :] * np.sqrt(h)[:, None], 0.0) ** 3
    return np.maximum(x, 1.0)


def _greedy_step(mean, var, lam, K, count_s):
    """One pass of the chain on the law (mean, var): (X, k, t, E[X'], Var[X'])."""
    X = _count_law(mean, var)
    k = np.minimum(K[:, None], X)
    t = _count_time(k, K, count_s)
    nxt = X - k + lam[:, None] * t  # E[X' | X]: the leftover and what arrives during the pass
    idle = np.exp(-lam[:, None] * t) * (X <= K[:, None])  # none came and none was left: the next pass carries 1
    e = (nxt + idle) @ _GREEDY_W
    v = ((nxt - e[:, None]) ** 2) @ _GREEDY_W + (lam[:, None] * t) @ _GREEDY_W  # + the arrivals' Poisson spread
    return X, k, t, e, v


def greedy_passes(rate_per_instance, prompts, count_s) -> dict:
    """The passes of a prefill instance that starts one the moment it is free and a prompt
    waits, taking up to ``prompts`` K of what waits (the engine's and SGLang's scheduler), when
    a pass of k prompts lasts t(k) (``count_s``: rows of t at ``COUNT_GRID``; docs/model.md
    §9.3). At a pass start X wait; the pass carries k = min(K, X) and lasts t(k); the next
    starts with X' = X - k + Poisson(λ t(k)) (1 after an idle gap when that is 0). A long pass
    gathers a long next one: linearised, X' - m ≈ a (X - m) + noise, a = λ t'(m), so the count
    spreads 1 / (1 - a²) times Poisson's, and near capacity a is 0.85-1. Its stationary law is
    closed on two moments: X gamma-distributed with mean m and variance v solving m = E[X'],
    v = Var[X'] (Newton's method on the pair; within 1-2 % of the exact chain's wait and pass,
    ``benchmarks/greedy_chain.py``). Per row: ``mean_s`` E[t], ``period_s`` E[t²] / E[t] (a
    random arrival's residual is half of it), ``seen_s`` E[k t] / E[k] (the pass a prompt rides),
    ``busy`` E[t] / E[cycle] (a cycle: the pass and the idle gap after it, 1/λ when it finds
    none), ``left_s`` E[(X - k) t] / (λ E[cycle]) (the passes a prompt waits out when the one
    it could join is full), ``prompts`` E[k]. Rows broadcast over the rate."""
    count_s = np.atleast_2d(np.asarray(count_s, dtype=float))
    n = count_s.shape[0]
    lam = np.maximum(np.broadcast_to(np.asarray(rate_per_instance, dtype=float), (n,)).astype(float), 1e-300)
    K = np.maximum(np.broadcast_to(np.asarray(prompts, dtype=float), (n,)).astype(float), 1.0)
    m = np.maximum(lam * count_s[:, 0], 1.0)
    v = m.copy()
    live = np.arange(n)
    for _ in range(_NEWTON_STEPS):
        if not live.size:
            break
        a, b, L, k_, c = m[live], v[live], lam[live], K[live], count_s[live]
        *_, e, w = _greedy_step(a, b, L, k_, c)
        g1, g2 = e - a, w - b
        done = (np.abs(g1) <= 1e-3 * a) & (np.abs(g2) <= 1e-2 * b)
        da, db = 1e-4 * a, 1e-4 * b
        *_, ea, wa = _greedy_step(a + da, b, L, k_, c)
        *_, eb, wb = _greedy_step(a, b + db, L, k_, c)
        j11, j12, j21, j22 = (ea - e) / da - 1.0, (eb - e) / db, (wa - w) / da, (wb - w) / db - 1.0
        det = j11 * j22 - j12 * j21
        with np.errstate(divide="ignore", invalid="ignore"):
            s1, s2 = (-g1 * j22 + g2 * j12) / det, (g1 * j21 - g2 * j11) / det
        bad = ~(np.isfinite(s1) & np.isfinite(s2))
        s1, s2 = np.where(bad, g1, s1), np.where(bad, g2, s2)  # a singular Jacobian: a plain iteration
        # neither moment falls below half its value in a step (the law stays a law)
        f = np.ones(len(live))
        for _ in range(30):
            shrink = (a + f * s1 < 0.5 * a) | (b + f * s2 < 0.5 * b)
            if not shrink.any():
                break
            f = np.where(shrink, 0.5 * f, f)
        m[live] = np.where(done, a, np.maximum(a + f * s1, 1.0))
        v[live] = np.where(done, b, np.maximum(b + f * s2, 1e-6))
        live = live[~done]
    X, k, t, *_ = _greedy_step(m, v, lam, K, count_s)
    idle = np.exp(-lam[:, None] * t) * (X <= K[:, None]) / lam[:, None]
    Et, Ek = t @ _GREEDY_W, k @ _GREEDY_W
    cycle = Et + idle @ _GREEDY_W
    return {"mean_s": Et, "period_s": (t * t) @ _GREEDY_W / Et, "seen_s": (k * t) @ _GREEDY_W / Ek,
            "busy": Et / cycle, "left_s": ((X - k) * t) @ _GREEDY_W / (lam * cycle), "prompts": Ek}
