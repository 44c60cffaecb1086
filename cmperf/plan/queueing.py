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


def largest_rate(excess, upper, width: float = _RELATIVE_WIDTH):
    """The largest rate in [0, ``upper``) at which ``excess(rate, idx) <= 0``, for every
    configuration at once (module docstring: Illinois regula falsi on the excess times the
    headroom ``1 - rate/upper``, with halving safeguards). ``excess(rate, idx)`` gives, for
    the configurations ``idx`` (indices into the flattened ``upper``) at the rates ``rate``,
    the statistic minus its budget: non-decreasing in the rate, possibly infinite near
    ``upper``; NaN counts as a miss. 0 where even a rate of 0 misses; the rate returned always
    meets the budget. ``width``: the brackets' final width, of their capacity (an excess that is
    itself solved to a tolerance needs no narrower one)."""
    up = np.array(upper, dtype=float)
    shape, up = up.shape, up.ravel()
    everyone = np.arange(up.size)
    lo, glo = np.zeros(up.size), np.asarray(excess(np.zeros(up.size), everyone), dtype=float)
    hi, ghi = up.copy(), np.full(up.size, np.nan)  # at the capacity: the limit, not evaluated
    kept = np.zeros(up.size, dtype=np.int8)  # the end kept by the last step: -1 lo, +1 hi
    slow = np.zeros(up.size, dtype=np.int8)  # steps in a row that did not halve the bracket
    live = np.flatnonzero(glo <= 0)
    tol = up * width
    for _ in range(_MAX_STEPS):
        i = live[hi[live] - lo[live] > tol[live]]
        if i.size == 0:
            break
        a, b, ga, gb = lo[i], hi[i], glo[i], ghi[i]
        width = b - a
        with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
            secant = a - ga * width / (gb - ga)
        # an infinite excess below the capacity (a wait that does not settle) has no secant: halve
        good = np.isfinite(secant) & np.isfinite(gb) & (slow[i] < _SLOW_STEPS) & (secant >= a) & (secant <= b)
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


# --------------------------------------------------------------------------- one instance's greedy passes
COUNT_GRID = np.linspace(0.0, 1.0, 17)  # a pass of k = 1 + (K - 1) u prompts on this grid of u: where its time is given
_LAW_Z = np.linspace(-4.5, 4.5, 19)  # standard normal points of the waiting count's law (Wilson–Hilferty: a gamma law)
_LAW_W = np.exp(-0.5 * _LAW_Z ** 2) / np.exp(-0.5 * _LAW_Z ** 2).sum()
_NEWTON_STEPS = 12  # 0-5 from a warm start, 3-8 from cold on the cases of docs/model.md §12.5; more: a law that does not settle
_PLAIN_STEPS = 100  # the map's own iteration where Newton stalls: a last resort, only for the rows left
_SLACK = np.array([0.0, 0.0, 1e-4])[:, None]  # a count's variance settles to 1e-4 prompts²: far below one prompt
_UNIT = np.eye(3)[:, :, None]  # the Jacobian's perturbed part, one component at a time
_TWIN_AGE = 7  # a warm start not settled in this many steps has its cold start run alongside (_newton twin)
_TOL = 1e-8  # a row's terms are summed in one order whatever rows it is solved with (_over_law): they do not depend on them


def _over_law(x):
    """The mean of ``x`` (rows x the law's points) over the count's law: each row summed in the same
    order whatever rows it is with (a matrix product's BLAS sums in blocks that depend on them)."""
    return (x * _LAW_W).sum(axis=1)


def count_time(k, prompts, count_s):
    """The pass of ``k`` prompts (rows of ``k``): linear between the ``COUNT_GRID`` points
    ``1 + (prompts - 1) u`` where ``count_s`` holds its time."""
    m = len(COUNT_GRID) - 1
    p = np.minimum(np.maximum((k - 1.0) / np.maximum(prompts - 1.0, 1e-12)[:, None], 0.0), 1.0) * m
    i = np.minimum(p.astype(int), m - 1)
    w = p - i
    at = i + (np.arange(len(prompts)) * count_s.shape[1])[:, None]  # row r's point i, in the flat table
    flat = count_s.ravel()
    return flat.take(at) * (1.0 - w) + flat.take(at + 1) * w


def _count_law(mean, var):
    """Points of the waiting count X at a busy pass start (weights ``_LAW_W``): a gamma law of
    that mean and variance by the Wilson–Hilferty cube, X = m (1 - h + z √h)³, h = var / (9 m²)
    (right-skewed like a backlog), at least one prompt."""
    h = var / (9.0 * mean * mean)
    x = mean[:, None] * np.maximum(1.0 - h[:, None] + _LAW_Z[None, :] * np.sqrt(h)[:, None], 0.0) ** 3
    return np.maximum(x, 1.0)


def _upper_gamma(n, z):
    """Q(n, z), the regularised upper incomplete gamma function, by the Wilson–Hilferty cube:
    ``Φc(((z/n)^(1/3) - 1 + 1/(9n)) / √(1/(9n)))`` (within 0.003 from n = 2 on; 10x quicker than
    the series, and it runs in every step of a plan's rate search)."""
    from scipy.special import ndtr

    h = 1.0 / (9.0 * n)
    return ndtr(-((np.maximum(z, 0.0) / n) ** (1.0 / 3.0) - 1.0 + h) / np.sqrt(h))


def _renewal(rate, scv, t, tail: bool = True):
    """Arrivals of a renewal stream of ``rate`` whose gaps are gamma-distributed with squared
    coefficient of variation ``scv`` (1: Poisson; 1/n: every n-th of a Poisson stream, round
    robin over n instances), over a window of ``t`` (arrays that broadcast: a row's rate and
    scv against its windows):
    ``(P(none in t), E[(R - t)+])`` from a random point (R the forward recurrence time:
    P(R > t) = λ E[(T - t)+], E[(R - t)+] = λ/2 E[((T - t)+)²]) and ``(P(none), E[(T - t)+])``
    from an arrival (T a gap). With n = 1/scv and x = n λ t, Q the regularised upper incomplete
    gamma function: P(T > t) = Q(n, x), E[(T - t)+] = Q(n + 1, x)/λ - t Q(n, x),
    P(R > t) = Q(n + 1, x) - (x/n) Q(n, x), E[(R - t)+] = λ/2 [(1 + 1/n) Q(n + 2, x)/λ²
    - 2 t Q(n + 1, x)/λ + t² Q(n, x)]; Poisson: e^(-λt) and e^(-λt)/λ for both. ``tail``
    False: P(R > t) alone (the others None), which the chain's map asks for at every step."""
    poisson = np.abs(scv - 1.0) < 1e-12
    x = rate * t
    if np.all(poisson):
        p0 = np.exp(-x)
        return (p0, p0 / rate, p0, p0 / rate) if tail else (p0, None, None, None)
    p0 = np.exp(-x) if np.any(poisson) else 0.0  # read only where a row is Poisson
    n = np.minimum(1.0 / np.maximum(scv, 1e-9), 1e9)
    z = n * x
    Q0, Q1 = _upper_gamma(n, z), _upper_gamma(n + 1.0, z)
    p_r = np.where(poisson, p0, np.maximum(Q1 - (z / n) * Q0, 0.0))
    if not tail:
        return p_r, None, None, None
    Q2 = _upper_gamma(n + 2.0, z)
    e_r = np.maximum(0.5 * rate * ((1.0 + 1.0 / n) * Q2 / rate ** 2 - 2.0 * t * Q1 / rate + t * t * Q0), 0.0)
    e_t = np.maximum(Q1 / rate - t * Q0, 0.0)
    # Poisson rows exactly, whatever rows they are evaluated with (a row's terms depend on its inputs alone)
    return p_r, np.where(poisson, p0 / rate, e_r), np.where(poisson, p0, Q0), np.where(poisson, p0 / rate, e_t)


class _Chain:
    """The fixed-point map of :func:`greedy_instance` for rows of (rate, scv, K, count_s)."""

    def __init__(self, rate, scv, prompts, count_s):
        self.lam, self.scv, self.K, self.ts = rate, scv, prompts, count_s
        t1 = count_s[:, 0]
        self.t1 = t1
        _, _, p0, e_t = _renewal(rate, scv, t1)
        # a pass that starts after an idle gap carries the one prompt that ended it; the arrivals
        # during it count from an arrival: P(none) = P(T > t1), mean λ t1 + (scv - 1)/2 (the
        # renewal function from an arrival), at least the chance of one
        self.p0_idle, self.gap_idle = p0, e_t
        self.n_idle = np.maximum(rate * t1 + (scv - 1.0) / 2.0, 1.0 - p0)
        self.v_idle = scv * rate * t1
        self.wait_idle = np.maximum(rate * t1 * t1 / 2.0 + (scv - 1.0) * t1 / 2.0, 0.0)

    def passes(self, m, v):
        X = _count_law(m, v)
        k = np.minimum(self.K[:, None], X)
        t = count_time(k, self.K, self.ts)
        return X, k, t

    _MAP = ("lam", "scv", "K", "ts", "p0_idle", "n_idle", "v_idle")  # what sums and mix read

    def rows(self, idx) -> "_Chain":
        """The map (:meth:`sums`, :meth:`mix`) of rows ``idx`` (or of ``idx`` repeated)."""
        sub = _Chain.__new__(_Chain)
        sub.__dict__ = {k: self.__dict__[k][idx] for k in self._MAP}
        return sub

    def sums(self, m, v):
        """What the next pass start takes from a busy start of law (m, v) (rows of m, v): the
        chance that the pass is followed by a gap, and the first two moments of the count the
        next pass starts with (over the law's points, before the idle starts are mixed in:
        :meth:`mix`)."""
        L, C = self.lam[:, None], self.scv[:, None]
        X, k, t = self.passes(m, v)
        nxt = X - k + L * t  # the prompts left and those that arrive during the pass
        p_r = _renewal(L, C, t, tail=False)[0]
        idle = p_r * (X <= self.K[:, None])  # none left, none came: the next pass starts after a gap
        return _over_law(idle), _over_law(nxt), _over_law(nxt * nxt + C * L * t)

    def mix(self, p_i, sums):
        """(p_idle', m', v') from the idle share ``p_i`` and the busy starts' :meth:`sums`."""
        idle, n1, n2 = sums
        p_next = (1.0 - p_i) * idle + p_i * self.p0_idle
        s1 = (1.0 - p_i) * n1 + p_i * self.n_idle
        s2 = (1.0 - p_i) * n2 + p_i * (self.n_idle ** 2 + self.v_idle)
        # the busy starts' law, leaning to one prompt as busy starts become vanishingly rare (nearly every pass
        # followed by a gap): their share plus 1e-9 of a start of one prompt
        busy = 1.0 - p_next + 1e-9
        m2 = np.maximum((s1 + 1e-9) / busy, 1.0)
        return np.stack([p_next, m2, np.maximum((s2 + 1e-9) / busy - m2 * m2, 1e-6)])

    def __call__(self, y):
        """(p_idle, m, v) -> the next pass's (p_idle', m', v')."""
        return self.mix(y[0], self.sums(y[1], y[2]))

    def out(self, y) -> dict:
        p_i, m, v = y
        L, C = self.lam[:, None], self.scv[:, None]
        X, k, t = self.passes(m, v)
        _, e_r, _, _ = _renewal(L, C, t)
        b = 1.0 - p_i
        cycle = b * (_over_law(t + e_r * (X <= self.K[:, None]))) + p_i * (self.t1 + self.gap_idle)
        queue = b * (_over_law((X - k) * t))
        align = b * _over_law(L * t * t / 2.0) + p_i * self.wait_idle
        per = self.lam * cycle  # prompts per cycle (a pass and the gap after it)
        ek = b * _over_law(k) + p_i
        return {"queue_s": queue / per, "align_s": align / per, "own_s": (b * _over_law(k * t) + p_i * self.t1) / ek,
                "busy": (b * _over_law(t) + p_i * self.t1) / cycle, "prompts": ek, "period_s": (b * _over_law(t * t)
                + p_i * self.t1 ** 2) / (b * _over_law(t) + p_i * self.t1)}


def greedy_instance(rate, arrival_scv, prompts, count_s, state=None, thorough: bool = False) -> tuple[dict, np.ndarray]:
    """One prefill instance that starts a pass the moment it is free and a prompt waits, taking
    up to ``prompts`` K of what waits (SGLang's scheduler, the simulation's), a pass of k prompts
    lasting t(k) (``count_s``: rows of t at ``COUNT_GRID``), fed by its own stream of ``rate``
    prompts a second whose gaps have squared coefficient of variation ``arrival_scv`` (1: at
    random; 1/n: in turn over n instances) (docs/model.md §9.3).

    At a pass start X wait; the pass carries k = min(K, X), lasts t(k), and A arrive meanwhile:
    the next starts with X - k + A, or after an idle gap with the one prompt that ends it. A long
    pass gathers a long next one (near capacity the count spreads ~1 / (1 - (λ t')²) times the
    arrivals'), so its stationary law is closed on its first two moments: passes after a gap
    (share p), and busy starts with X gamma-distributed of mean m and variance v, the three
    solving p = P(gap after a pass), m = E[X' | busy], v = Var[X' | busy] (Newton's method).
    Renewal reward over a cycle (a pass and the gap after it, λ E[cycle] prompts): the wait for a
    place, ``queue_s`` E[(X - k) t] / (λ E[cycle]) (the prompts a full pass leaves behind wait it
    out), for the running pass to end, ``align_s`` E[λ t² / 2] / (λ E[cycle]) (the arrivals during
    a pass), the pass a prompt rides ``own_s`` E[k t] / E[k], ``busy`` E[t] / E[cycle], ``period_s``
    E[t²] / E[t]. ``state`` (and the second value returned): the solution of a previous call at
    nearby rates, a warm start. ``thorough``: where Newton's method fails, a second start and the
    map's own iteration (for a rate known to have a fixed point; a search's probes past the last
    one need not pay them). Rows broadcast over ``rate``."""
    count_s = np.atleast_2d(np.asarray(count_s, dtype=float))
    n = count_s.shape[0]
    lam = np.maximum(np.broadcast_to(np.asarray(rate, dtype=float), (n,)).astype(float), 1e-9)  # a prompt in 30 years: none
    scv = np.broadcast_to(np.asarray(arrival_scv, dtype=float), (n,)).astype(float)
    K = np.maximum(np.broadcast_to(np.asarray(prompts, dtype=float), (n,)).astype(float), 1.0)
    # rows that are one instance at one rate (a prefill option paired with several decode options) are solved once
    key = np.column_stack([lam, scv, K, count_s])
    _, first, back = np.unique(key, axis=0, return_index=True, return_inverse=True)
    back = back.ravel()
    if len(first) < n:
        sub = None if state is None else np.asarray(state, dtype=float)[:, first]
        out, y = greedy_instance(lam[first], scv[first], K[first], count_s[first], sub, thorough)
        return {k: v[back] for k, v in out.items()}, y[:, back]
    chain = _Chain(lam, scv, K, count_s)
    m0 = np.maximum(lam * count_s[:, -1], 1.0)
    cold = np.stack([np.exp(-lam * count_s[:, 0]), m0, m0])
    warm = state is not None and np.shape(state) == cold.shape
    y = np.where(np.all(np.isfinite(state), axis=0), np.asarray(state, dtype=float), cold) if warm else cold
    # a warm start that does not converge (from a rate past a bifurcation): from cold, run alongside it
    twin = np.where(np.all(np.isfinite(state), axis=0), cold, np.nan) if warm else None
    y, live = _newton(chain, y, np.arange(n), twin=twin)
    if thorough and live.size:  # Newton's clamped steps can cycle from one start: from a backlog of two full passes
        y[:, live] = np.stack([np.zeros(live.size), 2.0 * K[live], 4.0 * K[live] ** 2])
        y, live = _newton(chain, y, live)
    if live.size:  # the map itself, which contracts where a law settles: where mostly gaps (Newton stalls at the
        # floors), or thorough (slowly near capacity)
        slow = live if thorough else live[y[0, live] > 0.5]
        y, slow = _newton(chain, y, slow, plain=True)
        live = np.union1d(np.setdiff1d(live, live if thorough else live[y[0, live] > 0.5]), slow)
    out = chain.out(y)
    if live.size:  # no fixed point found: a backlog that does not settle, counted as unstable
        for v in out.values():
            v[live] = np.inf
        y[:, live] = np.nan
    return out, y


def _newton(chain: _Chain, y: np.ndarray, live: np.ndarray, plain: bool = False,
            twin: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Newton's method on the chain's fixed point for rows ``live`` of ``y`` (3 x rows); returns
    ``y`` and the rows that did not converge. ``plain``: iterate the map itself instead
    (``_PLAIN_STEPS``).

    ``twin`` (3 x rows, NaN where none): a second start for each row, used where the first does
    not converge: run as a row of its own (its steps those it took after the first's failure, when
    it ran second) from the moment the first has not settled in ``_TWIN_AGE`` steps, dropped when
    the first settles; a row that converges from neither start keeps the second's last point.
    Each row counts its own steps, so its iterates are the same whatever rows it is solved with;
    the loop runs as long as its slowest row (12 steps and 12 more, for a probe past the chain's
    last fixed point, were 25 passes; now 8 + 13)."""
    n = y.shape[1]
    live = asked = np.asarray(live, dtype=int)
    if twin is not None:  # rows n + r: row r's second start
        chain = chain.rows(np.concatenate([np.arange(n), np.arange(n)]))
        y = np.concatenate([y, twin], axis=1)
        second = np.all(np.isfinite(twin), axis=0)
    steps = _PLAIN_STEPS if plain else _NEWTON_STEPS
    age = np.zeros(y.shape[1], dtype=int)  # a row's steps taken
    settled = np.zeros(y.shape[1], dtype=bool)
    started = np.zeros(n, dtype=bool)  # its second start running (or run)
    while live.size:
        failed = np.zeros(0, dtype=int)
        if not plain:  # a backlog past eight full passes that would not settle: stop there (not converged)
            gone = y[1, live] > 8.0 * chain.K[live]
            failed, live = live[gone], live[~gone]
        if live.size:
            sub = chain.rows(live)
            yl = y[:, live]
            sums = sub.sums(yl[1], yl[2])
            f = sub.mix(yl[0], sums) - yl
            # settled: the idle share, and the busy law by the weight of the passes that start busy (a law
            # that almost never applies need not settle)
            weight = np.stack([np.ones(len(live)), 1.0 - yl[0], 1.0 - yl[0]])
            done = np.all(weight * np.abs(f) <= _TOL * (1.0 + np.abs(yl)) + _SLACK, axis=0)
            settled[live[done]] = True
            last = ~done & (age[live] >= steps)
            failed = np.concatenate([failed, live[last]])
            go = np.flatnonzero(~done & ~last)
            if plain:
                y[:, live[go]] = yl[:, go] + f[:, go]
            elif go.size:
                y[:, live[go]] = _newton_step(sub.rows(go), yl[:, go], f[:, go], tuple(x[go] for x in sums))
            live = live[go]
            age[live] += 1
        if twin is not None:  # second starts: of the first starts that failed or are slow; dropped when these settle
            first = live[live < n]
            spawn = np.concatenate([failed[failed < n], first[age[first] >= _TWIN_AGE]])
            spawn = spawn[second[spawn] & ~started[spawn]]
            started[spawn] = True
            live = live[~((live >= n) & settled[np.where(live >= n, live - n, 0)])]
            live = np.concatenate([live, spawn + n])
    if twin is None:
        return y, asked[~settled[asked]]
    use = np.flatnonzero(~settled[:n] & started)  # the second start's point: converged, or its last
    y[:, use] = y[:, use + n]
    return y[:, :n], asked[~(settled[asked] | (started[asked] & settled[asked + n]))]


def _newton_step(sub: _Chain, yl, f, sums):
    """Newton's step of rows ``yl`` (3 x rows) of the map ``sub``, whose residual is ``f`` and
    :meth:`_Chain.sums` ``sums`` there, clamped to keep a law a law."""
    # the Jacobian by forward differences: the idle share moves only the mix (:meth:`_Chain.mix`), the busy
    # law's mean and variance the passes (one evaluation of the map for both)
    m = yl.shape[1]
    d = 1e-6 * np.maximum(np.abs(yl), 1e-3)
    moved = np.empty((3, 3, m))  # [component, perturbed part, row]
    moved[:, 0] = sub.mix(yl[0] + d[0], sums) - (yl + d * _UNIT[0])
    both = sub.rows(np.concatenate([np.arange(m)] * 2))
    mv = both.mix(np.concatenate([yl[0]] * 2), both.sums(np.concatenate([yl[1] + d[1], yl[1]]),
                                                         np.concatenate([yl[2], yl[2] + d[2]])))
    moved[:, 1] = mv[:, :m] - (yl + d * _UNIT[1])
    moved[:, 2] = mv[:, m:] - (yl + d * _UNIT[2])
    J = ((moved - f[:, None, :]) / d[None, :, :]).transpose(2, 0, 1)
    # Newton's step where the Jacobian is regular; a plain step of the map elsewhere (an instance
    # idle after every pass: its busy law does not move the map)
    s = f.copy()
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        det = np.linalg.det(J)
        regular = np.flatnonzero(np.isfinite(det) & (np.abs(det) > 1e-12) & np.all(np.isfinite(J), axis=(1, 2)))
        if regular.size:
            s[:, regular] = np.linalg.solve(J[regular], -f.T[regular][..., None])[..., 0].T
    s = np.where(np.isfinite(s), s, f)
    # a step keeps a law a law, each part clamped: p in [0, 1], the mean within half and twice its value, the
    # variance within a tenth and four times (far out, where every pass is full, the map no longer sees the mean
    # and a free step runs away)
    yn = yl + s
    yn[0] = np.clip(yn[0], 0.0, 1.0)
    yn[1] = np.clip(yn[1], np.maximum(0.5 * yl[1], 1.0), 2.0 * yl[1])
    yn[2] = np.clip(yn[2], np.maximum(0.1 * yl[2], 1e-6), 4.0 * yl[2])
    return yn
