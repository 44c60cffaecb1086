"""A small discrete-event simulation of the queue cmperf/plan/queueing.py models: Poisson
arrivals, ``c`` identical servers, first come first served, service times from a sampler.

With FCFS and identical servers a customer starts at the later of its arrival and the
earliest time a server frees up (Kiefer–Wolfowitz), so a heap of the servers' free times is
the whole state: one pop and one push per customer. Used by tests/test_queueing.py to check
the M/G/c approximations against the queue itself, not against their own formulas.
"""

from __future__ import annotations

import heapq

import numpy as np


def service_sampler(kind: str, mean_s: float, scv: float = 1.0):
    """A function ``(rng, n) -> n service times`` with mean ``mean_s``: ``deterministic``
    (scv 0), ``exponential`` (scv 1) or ``lognormal`` with squared coefficient of variation
    ``scv`` (σ² = ln(1 + scv), μ = ln(mean) - σ²/2)."""
    if kind == "deterministic":
        return lambda rng, n: np.full(n, float(mean_s))
    if kind == "exponential":
        return lambda rng, n: rng.exponential(mean_s, n)
    if kind == "lognormal":
        sigma2 = np.log1p(scv)
        mu = np.log(mean_s) - 0.5 * sigma2
        return lambda rng, n: rng.lognormal(mu, np.sqrt(sigma2), n)
    raise ValueError(f"unknown service kind {kind!r}")


def simulate_waits(arrival_rate_per_s: float, servers: int, sampler, *, customers: int, seed: int,
                   warmup_fraction: float = 0.1) -> np.ndarray:
    """Times in queue (s) of ``customers`` arrivals, the first ``warmup_fraction`` of them
    dropped (the queue starts empty)."""
    rng = np.random.default_rng(seed)
    arrivals = np.cumsum(rng.exponential(1.0 / arrival_rate_per_s, customers)).tolist()
    services = sampler(rng, customers).tolist()
    free = [0.0] * servers  # a heap of the times each server becomes free
    waits = [0.0] * customers
    for i, (t, s) in enumerate(zip(arrivals, services)):
        start = free[0] if free[0] > t else t
        heapq.heapreplace(free, start + s)
        waits[i] = start - t
    return np.asarray(waits[int(warmup_fraction * customers):])


def simulate_batched_ttft(arrival_rate_per_s: float, instances: int, prompts_per_pass: int, pass_s: float, *,
                          customers: int, seed: int, warmup: float = 0.1) -> np.ndarray:
    """The prefill side as it runs, not as the planner approximates it: Poisson arrivals,
    ``instances`` identical instances, each running passes of ``pass_s`` that take up to
    ``prompts_per_pass`` waiting requests (first come first served) and return them all at the
    pass's end; an idle instance starts a pass as soon as one request waits. Returns each
    request's time from arrival to the end of its pass (TTFT without the KV transfer), the
    first ``warmup`` share dropped."""
    rng = np.random.default_rng(seed)
    arrivals = np.cumsum(rng.exponential(1.0 / arrival_rate_per_s, customers))
    free = [(0.0, i) for i in range(instances)]
    ttft = np.empty(customers)
    p = 0
    while p < customers:
        f, i = heapq.heappop(free)
        start = max(f, arrivals[p])
        q = min(p + prompts_per_pass, int(np.searchsorted(arrivals, start, side="right")))
        end = start + pass_s
        ttft[p:q] = end - arrivals[p:q]
        p = q
        heapq.heappush(free, (end, i))
    return ttft[int(warmup * customers):]
