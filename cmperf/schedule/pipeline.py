"""The microbatch pipeline of a stack of identical layers (docs/model.md §5).

A layer is a chain of **stages**; each stage runs on a **lane** (a stream and the cores it
owns: decode's attention and MoE streams, prefill's compute and communication engines)
and may end in a barrier whose expected **wait** (cmperf/cost/collectives.py) delays the
next stage of the same microbatch but holds no lane. With ``n`` microbatches every lane
runs its stages in order, each stage for microbatch 0, then 1; microbatch b's stage i
starts when its stage i-1 (plus that barrier's wait) and the lane's previous task are done;
a microbatch's first stage of layer l+1 follows its last stage of layer l.

This is a max-plus system; ``pipeline`` simulates it layer by layer (vectorised over the
grid) until it repeats, which gives the steady-state time per layer ``period`` and the
fill and drain of the whole stack. For decode's two stages A -> B with waits W (A's lane
and B's lane distinct) the steady state is, in closed form,

    one microbatch:  A + B + W
    two:             max(2A, 2B, A + B + W)

the two streams' work, or one microbatch's trip through the layer with its waits, whichever
is longer: a wait is hidden while it fits in the slack of the busier stream. A Monte Carlo
of 320 dies with random per-die times (benchmarks/overlap_montecarlo.py) matches the
serial form within 0.2 % and lands above the overlapped one by under 0.5 % at the fitted
spread (cv 0.05), ~2 % at cv 0.1 and up to ~7 % at cv 0.2 when one stream binds (the
expected maximum of a sum exceeds the sum of the expected maxima).

Pools the lanes share (HBM, the UB port, and any cores two lanes both use) bound the
period from below: a layer cannot take less than the work each pool must do in it,

    period >= n x sum over stages of (pool time of the stage at the whole die's rate)

so ``max(lane work, chain, pools) <= period <= n x (sum of stage times + waits)``.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

import numpy as np

from ..cost.roofline import OpTimes, broadcast, maximum, sum_ops

POOLS = ("pool_compute_s", "pool_vector_s", "memory_s", "network_s")
WARM_LAYERS = 4  # layers simulated; the steady state is reached after one or two


@dataclass
class Stage:
    """One stage of a layer: the ops one microbatch runs on ``lane`` (tables of them), and
    the barrier wait that follows them (0 when the stage ends in no barrier)."""

    name: str
    lane: str
    ops: list[OpTimes]
    wait_s: object = 0.0

    @property
    def time_s(self) -> np.ndarray:
        return sum_ops(self.ops)


@dataclass
class Pipeline:
    n: int
    stages: list[Stage]
    period_s: np.ndarray  # steady-state time of one layer
    ends_s: list = field(repr=False, default_factory=list)  # end of layer k (k = 0..len - 1)
    pool_floor_s: np.ndarray = 0.0

    def total_s(self, layers) -> np.ndarray:
        """Time of ``layers`` consecutive layers, fill and drain included."""
        layers = np.asarray(layers, dtype=float)
        simulated = len(self.ends_s) - 1
        if layers.ndim == 0 and all(np.ndim(e) == 0 for e in self.ends_s):  # one row: the layer's end itself
            warm = self.ends_s[int(min(layers, simulated))]
        else:
            k = np.minimum(layers, simulated).astype(int)
            warm = np.choose(k, np.broadcast_arrays(*self.ends_s))
        return warm + np.maximum(layers - simulated, 0.0) * self.period_s

    def lane_s(self, lane: str) -> np.ndarray:
        """One microbatch's time on ``lane`` (its stages' busy time and latency)."""
        return np.asarray(sum(s.time_s for s in self.stages if s.lane == lane), dtype=float)

    @property
    def wait_s(self) -> np.ndarray:
        """One microbatch's barrier waits per layer."""
        return np.asarray(sum(np.asarray(s.wait_s, dtype=float) for s in self.stages), dtype=float)


def pipeline(stages: list[Stage], n: int) -> Pipeline:
    """Steady state and warm-up of ``stages`` with ``n`` microbatches (module docstring).
    One row's times (numbers) are simulated in Python's floats, a grid's as arrays: the same
    max-plus steps, the same IEEE sums and maxima (:func:`largest`: NaN kept, as numpy's)."""
    times = [s.time_s for s in stages]
    waits = [s.wait_s for s in stages]
    tables = [t for s in stages for t in s.ops]
    pools = [sum_ops(tables, p) for p in POOLS]
    one = all(type(x) is np.float64 or type(x) is float for x in (*times, *waits, *pools))
    if one:  # one row
        times, waits, pools = ([float(x) for x in xs] for xs in (times, waits, pools))
        zero, mx = 0.0, largest
    else:
        waits = [np.asarray(w, dtype=float) for w in waits]
        zero, mx = np.zeros(np.broadcast_shapes(*(np.shape(x) for x in (*times, *waits)))), np.maximum
    lane_free = {s.lane: zero for s in stages}
    ready = [zero] * n  # when microbatch b may start its next stage
    ends = [zero]
    for _ in range(WARM_LAYERS):
        for stage, t, w in zip(stages, times, waits):
            for b in range(n):
                end = mx(ready[b], lane_free[stage.lane]) + t
                lane_free[stage.lane] = end
                ready[b] = end + w
        ends.append(functools.reduce(mx, ready) if n > 1 else ready[0])
    if one:
        floor = n * functools.reduce(largest, [*pools, zero])
    else:
        floor = n * maximum(*broadcast(*pools, zero))
    period = mx(ends[-1] - ends[-2], floor)
    ends = [mx(e, k * floor) for k, e in enumerate(ends)]
    if one:
        period, floor, ends = np.float64(period), np.float64(floor), [np.float64(e) for e in ends]
    return Pipeline(n=n, stages=stages, period_s=period, ends_s=ends, pool_floor_s=floor)


def largest(a: float, b: float) -> float:
    """max(a, b) of two floats as ``np.maximum`` takes it: NaN if either is NaN."""
    return a if a >= b else b if b > a else a + b
