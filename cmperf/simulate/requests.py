"""The requests of a simulated run and how they arrive (docs/model.md §12.1).

Lengths come from the same workload the planner reads (cmperf/plan/workload.py): a fixed
length, a log-normal given by its mean and p90, an exponential, or a trace's samples (drawn
in the trace's order, repeated when more requests are asked than it holds). Arrivals follow
bench_serving: a request rate (Poisson; gamma with a coefficient of variation above 1 for
bursty clients) or ``inf`` (all ready at once), and optionally a maximum concurrency, the
client sending a request only when fewer than that many are in flight (a closed loop).
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass

import numpy as np

from ..errors import ConfigError
from ..plan.workload import Workload, check_arrivals, sample_lengths

MAX_REQUESTS = 10_000_000
MIN_RATE_RPS = 1e-6  # one request per 11.6 days: below it no run of requests is a benchmark (and gaps overflow)
BURSTINESS = (1e-3, 100.0)  # CV of the gaps: 1e-3 is all but periodic (gamma shape 1e6); 100 one burst
MAX_SEED = 2**63 - 1


def check_seed(seed: int, flag: str = "--seed") -> int:
    """A random seed numpy takes: a whole number from 0 to 2^63 - 1."""
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or not 0 <= seed <= MAX_SEED:
        raise ConfigError(f"{flag} {seed}: expected a whole number from 0 to 2^63 - 1")
    return seed


def check_warmup(warmup: float, num_prompts: int, flag: str = "--warmup") -> float:
    """A warm-up share that leaves at least one request in the statistics: 0 <= w < 1."""
    if not (math.isfinite(warmup) and 0 <= warmup < 1):
        raise ConfigError(f"{flag} {warmup:g}: expected the share of the first requests left out, from 0 to below 1")
    if int(warmup * num_prompts) >= num_prompts:
        raise ConfigError(f"{flag} {warmup:g}: leaves none of the {num_prompts:,} requests in the statistics")
    return warmup


@dataclass(frozen=True)
class Traffic:
    rate_rps: float | None = None  # requests per second; None or inf: all at once
    burstiness: float = 1.0  # coefficient of variation of the gaps (1: Poisson)
    max_concurrency: int | None = None  # requests in flight at most (bench_serving --max-concurrency)
    num_prompts: int = 1000
    arrivals_s: tuple | None = None  # a trace's arrival times (replayed, repeated after its span when more requests are asked)

    def __post_init__(self):
        if self.rate_rps is not None and not (self.rate_rps >= MIN_RATE_RPS):
            raise ConfigError(f"--request-rate {self.rate_rps:g}: expected requests/s of at least {MIN_RATE_RPS:g}, or inf")
        if not (math.isfinite(self.burstiness) and BURSTINESS[0] <= self.burstiness <= BURSTINESS[1]):
            raise ConfigError(f"--burstiness {self.burstiness:g}: expected a coefficient of variation from "
                              f"{BURSTINESS[0]:g} to {BURSTINESS[1]:g} (1: Poisson)")
        if self.max_concurrency is not None and not (1 <= self.max_concurrency <= MAX_REQUESTS):
            raise ConfigError(f"--max-concurrency {self.max_concurrency}: expected 1 to {MAX_REQUESTS:,}")
        if not (1 <= self.num_prompts <= MAX_REQUESTS):
            raise ConfigError(f"--num-prompts {self.num_prompts}: expected 1 to {MAX_REQUESTS:,}")
        if self.arrivals_s is not None:
            check_arrivals(self.arrivals_s, "Traffic(arrivals_s=...)")
        if (self.rate_rps is None or math.isinf(self.rate_rps)) and self.max_concurrency is None:
            pass  # every request at t = 0: bench_serving's --request-rate inf without a concurrency limit

    def describe(self) -> str:
        if self.arrivals_s is not None:
            return f"{self.num_prompts} requests at the trace's arrival times"
        rate = "inf" if self.rate_rps is None or math.isinf(self.rate_rps) else f"{self.rate_rps:g} requests/s"
        shape = "" if self.burstiness == 1.0 else f" (burstiness {self.burstiness:g})"
        conc = f", at most {self.max_concurrency} in flight" if self.max_concurrency else ""
        return f"{self.num_prompts} requests at {rate}{shape}{conc}"


def hit_shares(h: float, k: float, n: int, rng: np.random.Generator) -> np.ndarray:
    """Each request's share of its prompt found cached: Beta(k h, k (1 - h)), mean h, variance
    h (1 - h) / (k + 1) (k = 2: uniform on (0, 1) at h = 1/2; k = inf: every request h). Real
    reuse is per request: a conversation's later turns hit their history, a first turn only a
    system prompt (serving-reference §4.1: 37-64 % of Mooncake's blocks repeat); the spread k is
    an ASSUMPTION (no trace publishes per-request hit shares).

    Drawn by inverse transform from uniforms of a stream of their own (spawned from ``rng``,
    which it leaves where it was): the arrivals and lengths are those of a run without hits,
    and a request's share never falls as h rises (Beta(k h, k (1 - h)) grows stochastically
    with h), so runs at several h compare the same requests (docs/model.md §12.2)."""
    if h <= 0 or not math.isfinite(k):
        return np.full(n, float(h))
    from scipy.special import betaincinv

    u = rng.spawn(1)[0].random(n)
    return betaincinv(k * h, k * (1.0 - h), u)


def make_requests(workload: Workload, traffic: Traffic, rng: np.random.Generator):
    """(prompt, output, cached) tokens of each request."""
    n = traffic.num_prompts
    prompt = sample_lengths(workload.prompt, n, rng)
    output = sample_lengths(workload.output, n, rng)
    if workload.cached_samples is not None:
        cached = np.resize(np.asarray(workload.cached_samples, dtype=float), n)
    else:
        block = max(workload.block_tokens, 1.0)
        cached = np.floor(hit_shares(workload.prefix_hit, workload.hit_concentration, n, rng) * prompt / block) * block
    cached = np.minimum(cached, prompt - 1)
    return prompt, output, cached
