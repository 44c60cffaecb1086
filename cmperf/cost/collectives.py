"""What a synchronising collective adds beyond its own work: waiting for the slowest die
of its group (docs/model.md §4.3).

A dispatch or combine on die d completes when every die of the group has sent its part,
so each die waits for the slowest. Dies start their work together at the previous
barrier, but their times to the next one differ: their loads differ from step to step
(tokens routed to their experts, the context lengths of their requests) and so does the
runtime's own jitter. Model a die's load-dependent time ``t_load`` since the previous
barrier as a normal variate with standard deviation ``cv x t_load``; the group then
arrives when its maximum does, on average

    wait = cv x t_load x E[max of G standard normal variates]

which grows with the load (batch, context), with its spread (``cv``) and, slowly, with
the group size G (1.0 at G = 3 ... 2.0 at 32 ... 2.9 at 320). Work that is the same on
every die (weights read, kernel launches, barrier rounds) adds no spread. The wait holds
no core: in a two-microbatch pipeline the other stream computes meanwhile
(cmperf/schedule/pipeline.py decides how much of it stays exposed).
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

from .ops import MessageFormat, Route

_X = np.linspace(-12.0, 12.0, 24001)
_PHI = np.exp(-0.5 * _X ** 2) / math.sqrt(2.0 * math.pi)
_CDF = 0.5 * (1.0 + np.frompyfunc(math.erf, 1, 1)(_X / math.sqrt(2.0)).astype(float))


@lru_cache(maxsize=256)
def _expected_max(n: int) -> float:
    if n <= 1:
        return 0.0
    density = n * _PHI * _CDF ** (n - 1)
    return float(np.trapezoid(_X * density, _X)) if hasattr(np, "trapezoid") else float(np.trapz(_X * density, _X))


def expected_max_normal(group) -> np.ndarray:
    """E[max of G independent standard normal variates], by quadrature, for each G of an
    array (non-integer G rounds up; G <= 1 gives 0)."""
    g = np.ceil(np.asarray(group, dtype=float))
    if g.ndim == 0:  # one group size (a one-row prediction's)
        return np.asarray(_expected_max(int(g)))
    values, inverse = np.unique(g, return_inverse=True)
    table = np.array([_expected_max(int(v)) for v in values])
    return table[inverse].reshape(g.shape)


def barrier_wait_s(load_s, group, cv) -> np.ndarray:
    """Expected wait for the slowest of ``group`` dies whose load-dependent time since the
    last barrier is ``load_s`` with coefficient of variation ``cv``."""
    return cv * np.maximum(np.asarray(load_s, dtype=float), 0.0) * expected_max_normal(group)


def route_of(hw, phase: str) -> Route:
    """The expert-parallel route the system uses in ``phase`` (its ``expert_parallel``
    section), with the number of dies in one domain of the route's inner tier."""
    spec = hw.system.expert_parallel[phase]
    tiers = tuple(spec.tiers)
    domain = hw.system.tiers[tiers[0]].domain_chips
    inner = np.inf if domain is None else domain * hw.chip.dies_per_package
    sm_pair = spec.sm_pair_s
    return Route(style=spec.route, tiers=tiers, inner_dies=inner, message=MessageFormat.of(spec.message),
                 chunked=spec.transfers == "chunked", sm_pair_s=0.0 if sm_pair is None else sm_pair)
