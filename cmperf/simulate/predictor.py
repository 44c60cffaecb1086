"""Step times of one instance, from the one cost model (docs/model.md §12.2).

A simulation never calls ``predict`` per step: each instance's step time is evaluated once, as
one vectorised ``predict`` over a grid, and interpolated between grid points:

    decode instance      iteration time T_d(b, L): b requests per NPU, L mean KV tokens attended
    co-located instance  T_c(b, L, c): the same iteration carrying c prompt tokens per NPU
    prefill instance     pass time T_p(t, P) and its KV transfer X_p(t, P): t prompt tokens per
                         NPU, P the token-weighted mean prompt length (so that the pass's causal
                         attention, sum_i P_i (P_i + 1) / 2, is t (P + 1) / 2 per NPU)

The grids are geometric in each axis (ratio ~1.25-1.5) and T is interpolated linearly in b,
L, c and t, where the cost model is close to linear (weight reads and KV reads scale with the
tokens; a GEMM's tile padding makes small steps); where every prompt has one computed length,
the t axis also holds every pass of whole prompts (the steps of a GEMM's waves are then timed
exactly, whatever the budget); the grid points themselves are exactly
``predict``'s rows (tested). Below the smallest batch (one request per NPU) T is the smallest
batch's: the weights are read whatever the batch. A pass (a prefill pass, or a co-located
iteration's prompt chunk) is timed at no fewer tokens per NPU than its most-loaded attention
group computes (:func:`pass_tokens_per_npu`): a group computes its own prompts' attention and
dense layers on its own dies, and the pass waits for it (the other groups idle).
"""

from __future__ import annotations

import math
from bisect import bisect_right
from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

from ..cost.pool import pass_with_pool_s, pool_read_s, pool_write_s
from ..errors import ConfigError
from ..predict import Specs, predict


def geometric(lo: float, hi: float, ratio: float) -> np.ndarray:
    """lo, lo·ratio, ... up to and including hi (whole numbers, distinct)."""
    lo, hi = max(float(lo), 1.0), max(float(hi), float(lo))
    n = int(np.ceil(np.log(hi / lo) / np.log(ratio))) + 1 if hi > lo else 1
    pts = np.unique(np.round(lo * ratio ** np.arange(n)))
    return np.unique(np.append(pts[pts < hi], hi))


WHOLE_PROMPT_POINTS = 256  # at most this many exact pass sizes; a larger budget: the geometric grid alone


def whole_prompt_tokens(per_prompt: float, lo: float, hi: float) -> np.ndarray:
    """Tokens per NPU of a pass of k whole prompts, ``per_prompt`` each, from ``lo`` (one prompt
    per attention group) to ``hi`` (the budget): the cost model steps between them (a GEMM's
    waves: h200-cluster's 8-GPU pass of 2,048-token prompts jumps ~40 ms every 4 prompts), so a
    line between geometric points misses the step by up to 8 %, differently under each budget.
    Empty when there are more than WHOLE_PROMPT_POINTS of them."""
    if not per_prompt > 0:
        return np.empty(0)
    k_lo, k_hi = math.ceil(lo / per_prompt - 1e-9), math.floor(hi / per_prompt + 1e-9)
    if k_hi - k_lo + 1 > WHOLE_PROMPT_POINTS:
        return np.empty(0)
    return np.round(np.arange(max(k_lo, 1), k_hi + 1) * per_prompt, 6)


def pass_tokens_per_npu(tokens: float, npus: float, group_tokens: float, group_dies: float,
                        dies_per_npu: float) -> float:
    """The prompt tokens per NPU a pass is timed at: ``tokens`` computed in all, spread over the
    instance's ``npus``, but no fewer than its most-loaded attention group's, ``group_tokens``
    over that group's ``group_dies`` (data-parallel attention: a group computes its own prompts'
    attention and dense layers; every group waits for it at the MoE layers):

        t = max(tokens / npus, group_tokens * dies_per_npu / group_dies)

    A PD prefill pass takes for ``group_tokens`` one prompt (a pass costs what one prompt per
    group costs); a co-located iteration its hot rank's tokens in the chunk (docs/model.md §12.3).
    The cost model then times every group at t, the MoE layers too: an upper bound where groups
    carry fewer tokens than the hot one."""
    return max(tokens / npus, group_tokens * dies_per_npu / group_dies)


def _interp_index(axis: np.ndarray, x: float) -> tuple[int, float]:
    """(i, w): x = axis[i] (1 - w) + axis[i + 1] w, clamped to the axis."""
    if x <= axis[0]:
        return 0, 0.0
    if x >= axis[-1]:
        return len(axis) - 2, 1.0
    i = bisect_right(axis, x) - 1
    return i, (x - axis[i]) / (axis[i + 1] - axis[i])


@dataclass
class Grid2:
    """Values on a (x, y) grid, interpolated bilinearly (clamped at the edges). Read as Python
    floats (axes and values, made once): an engine calls it a few times per event, and a numpy
    scalar is slower to index and to compute with (the same values, the same IEEE arithmetic)."""

    x: list  # increasing
    y: list
    v: np.ndarray  # (len(x), len(y))

    def __post_init__(self):
        self.x, self.y = [float(a) for a in self.x], [float(a) for a in self.y]
        self._v = np.asarray(self.v, dtype=float).tolist()
        self._x_at, self._x_index = None, None  # the last x and its (i, w): a boundary reads one batch at several KV

    def __call__(self, x: float, y: float) -> float:
        return self.at(x, y)

    def at(self, x: float, y: float) -> float:
        """The value at (x, y) (a method: Python calls an instance through its type's slot, slower)."""
        if len(self.x) == 1:
            i = i1 = 0
            wi = 0.0
        else:
            if x != self._x_at:
                self._x_at, self._x_index = x, _interp_index(self.x, x)
            i, wi = self._x_index
            i1 = i + 1
        if len(self.y) == 1:
            j = j1 = 0
            wj = 0.0
        else:
            j, wj = _interp_index(self.y, y)
            j1 = j + 1
        vi, vi1 = self._v[i], self._v[i1]
        a = vi[j] + (vi[j1] - vi[j]) * wj
        b = vi1[j] + (vi1[j1] - vi1[j]) * wj
        return float(a + (b - a) * wi)


def pool_traffic_s(read_s, write_s, share: float, pool_B: float, blocks: float, write_B: float,
                   write_blocks: float) -> tuple[float, float]:
    """(read, write-back) time of a batch's pool traffic: its cached prefixes' ``pool_B`` bytes
    in ``blocks`` blocks and its new blocks, each die its share of ``share`` dies (the dies of
    the groups, or ranks, the batch occupies); 0 without a pool (``read_s`` / ``write_s``
    None) or without traffic."""
    read = float(read_s(pool_B / share, blocks / share)) if pool_B > 0 and read_s is not None else 0.0
    write = float(write_s(write_B / share, write_blocks / share)) if write_B > 0 and write_s is not None else 0.0
    return read, write


@dataclass
class DecodePredictor:
    """Iteration time of one decode (or AFD, or co-located) instance."""

    npus: float
    step_s: Grid2 | None  # T_d(b, L)
    chunk_step_s: list | None  # co-located: [(c, Grid2)] per chunk size, c ascending
    kv_tokens_per_rank: float  # KV tokens one DP-attention rank can hold
    max_batch_per_npu: float  # the memory limit at the reference KV length
    inputs: dict = None  # the instance's full predict inputs (as predict resolved them)
    dies_per_rank: float = 1.0  # the dies one DP-attention rank reads a prompt's cached prefix over
    pool_read_s: Any = None  # co-located with a pool: callable (bytes per die, blocks per die) -> read time
    pool_write_s: Any = None  # ... and the write-back's time (none: no pool)

    def __post_init__(self):
        self._chunks = [float(c) for c, _ in self.chunk_step_s or ()]

    def step(self, batch_per_npu: float, kv: float, chunk_per_npu: float = 0.0) -> float:
        b = max(batch_per_npu, 1.0)
        if self.chunk_step_s is None or chunk_per_npu <= 0:
            return self.step_s.at(b, kv)
        cs = self._chunks
        if chunk_per_npu <= cs[0]:
            return self.chunk_step_s[0][1].at(b, kv) if cs[0] == chunk_per_npu else \
                self.step_s.at(b, kv) + (self.chunk_step_s[0][1].at(b, kv) - self.step_s.at(b, kv)) * chunk_per_npu / cs[0]
        i, w = _interp_index(cs, chunk_per_npu)
        lo, hi = self.chunk_step_s[i][1].at(b, kv), self.chunk_step_s[i + 1][1].at(b, kv)
        return lo + (hi - lo) * w


@dataclass
class PrefillPredictor:
    """Pass time and KV transfer time of one prefill instance, for a batch of prompts each with
    its own cached prefix (module docstring): the compute on a grid, the pool's reads and the KV
    sent to decode from the batch's own bytes and blocks."""

    npus: float
    dies: float
    groups: int  # attention TP groups: a pass is as slow as one prompt per group at least
    tp: float
    compute_s: list  # [(C, Grid2 over (t, c))]: the pass without its pool read, per cached-prefix level C
    pool_read_s: Any  # callable (bytes per die, blocks per die) -> the pool read's time (cmperf/cost/pool.py)
    send_s: Any  # callable bytes per die -> the KV transfer's time (cmperf/schedule/prefill.py)
    inputs: dict = None  # the instance's full predict inputs (as predict resolved them)
    pool_write_s: Any = None  # callable (bytes per die, blocks per die) -> the write-back's time (none: no pool)

    def __post_init__(self):
        self._levels = [float(c) for c, _ in self.compute_s]
        self._times = _memoised(self._pass_times)

    def times(self, tokens: float, c_eff: float, C_eff: float = 0.0, prompts: int = 1, pool_B: float = 0.0,
              blocks: float = 0.0, kv_B: float = 0.0, write_B: float = 0.0, write_blocks: float = 0.0) -> tuple[float, float]:
        """(pass, KV transfer) of a batch: ``tokens`` computed in all, ``c_eff`` = sum c_i^2 /
        sum c_i and ``C_eff`` = sum c_i C_i / sum c_i (the batch's causal attention over its
        prefixes, sum c_i (C_i + (c_i + 1) / 2), is then tokens (C_eff + (c_eff + 1) / 2)), its
        ``prompts``, their cached prefixes' ``pool_B`` bytes in ``blocks`` blocks and their whole
        KV, ``kv_B`` bytes, and the new blocks written back, ``write_B`` bytes in ``write_blocks``
        (overlapped with the pass: :func:`cmperf.cost.pool.pass_with_pool_s`). A die reads,
        writes and sends its share: the batch's over the dies of the groups it occupies.
        Memoised: a run's passes repeat a few batches where prompts have one length."""
        return self._times(tokens, c_eff, C_eff, prompts, pool_B, blocks, kv_B, write_B, write_blocks)

    def _pass_times(self, tokens, c_eff, C_eff, prompts, pool_B, blocks, kv_B, write_B, write_blocks):
        t = pass_tokens_per_npu(tokens, self.npus, max(c_eff, 1.0), self.tp, self.dies / self.npus)
        levels = self.compute_s
        if len(levels) == 1 or C_eff <= levels[0][0]:
            comp = levels[0][1].at(t, c_eff)
        else:
            i, w = _interp_index(self._levels, C_eff)
            comp = levels[i][1].at(t, c_eff) * (1 - w) + levels[i + 1][1].at(t, c_eff) * w
        share = min(float(prompts), float(self.groups)) * self.tp
        pool, write = pool_traffic_s(self.pool_read_s, self.pool_write_s, share, pool_B, blocks, write_B, write_blocks)
        return float(pass_with_pool_s(comp, pool, write)), self.send_s(kv_B / share)


def _rows(phase: str, rows: list[dict], specs: Specs, what: str, sweeps: Mapping[str, list] | None = None):
    """``predict``'s columns for ``rows``; with ``sweeps`` (spec path -> the values of each of
    n points, taken together), every row at every point, the points fastest."""
    r = predict(phase, rows=rows, specs=specs, strict=False, sweeps=sweeps or None, zip_sweeps=bool(sweeps))
    if len(r.invalid_columns):
        reason = str(r.invalid_columns["reason"].iat[0])
        raise ConfigError(f"{what}: {reason}")
    return r.columns


def points(sweeps: Mapping[str, list] | None) -> int:
    """Points of a zipped sweep (1 without one)."""
    return len(next(iter(sweeps.values()))) if sweeps else 1


def _per_point(cols, column: str, shape: tuple, n: int) -> list[np.ndarray]:
    """A column of a swept ``_rows`` call as one array of ``shape`` per point."""
    v = cols[column].to_numpy(dtype=float).reshape(-1, n)
    return [v[:, i].reshape(shape) for i in range(n)]


def decode_predictor(specs: Specs, instance: Mapping[str, Any], max_batch: float, max_kv: float, phase: str = "decode",
                     chunks: tuple = (), ref_kv: float | None = None, chunk_prompt: float | None = None,
                     sweeps: Mapping[str, list] | None = None, pool_readers: float | None = None):
    """The grid of one decode instance's iteration time (module docstring). ``instance``: the
    predict inputs of the instance (dies, ep, tp, layout, MTP, ...; what it leaves unset, predict
    derives, read back as ``DecodePredictor.inputs``), ``max_batch`` the largest batch per NPU it
    may run, ``max_kv`` the longest KV it may attend; ``chunks``: the chunk sizes (prompt tokens
    per NPU) of a co-located instance's grid, its prompts of ``chunk_prompt`` tokens
    (token-weighted mean; default the KV length). One ``predict`` call: the memory row at the
    reference KV, the step grid and every chunk's grid. With ``sweeps`` (spec paths that change
    step times only, e.g. a stack's host constants; n points taken together), a list of n
    predictors from the same one vectorised evaluation. ``pool_readers``: the dies that read the
    pool at once (a co-located deployment's, which read their prompts' cached prefixes; default
    the instance's own)."""
    npus_key = "attention_dies" if phase == "afd" else "dies"
    hw, _ = specs.views()
    dpp = float(hw.chip.dies_per_package)
    npus = float(instance[npus_key]) / dpp
    bs = geometric(1.0, max(max_batch, 1.0), 1.25)
    ls = geometric(16.0, max(max_kv, 16.0), 1.5)
    base = {k: v for k, v in instance.items() if k not in ("batch", "kv_len", "chunk_tokens")}
    ref = float(ref_kv or max_kv)
    rows = [{**base, "batch": float(b), "kv_len": float(L), "prompt_len": max(int(L), 1), "output_len": 1}
            for b in bs for L in ls]
    cs = sorted(float(c) for c in chunks)
    every = ([{**base, "batch": 1.0, "kv_len": ref, "prompt_len": max(int(ref), 1), "output_len": 1}] + rows
             + [{**r, "chunk_tokens": c, **({"prompt_len": max(int(chunk_prompt), 1)} if chunk_prompt else {})}
                for c in cs for r in rows])
    what = f"the {'co-located' if cs else phase} instance of {float(instance[npus_key]):g} {npus_key.replace('_', ' ')}"
    cols = _rows(phase, every, specs, what, sweeps)
    n = len(rows)
    first = cols.record(0)  # the memory row (at the first point: host constants move no memory)
    inputs = {k: first[k] for k in INPUTS[phase] if k in first and not (isinstance(first[k], float) and math.isnan(first[k]))}
    max_b = float(first["max_batch_per_npu"])
    ranks = _ranks(phase, inputs, dpp)
    kv_rank = max_b * npus / ranks * ref
    # a co-located instance reads its prompts' cached prefixes from the pool and writes their new
    # blocks back as a prefill instance does, ``pool_readers`` dies at the pool at once
    dies = float(instance[npus_key])
    readers = float(pool_readers or dies)
    pool = {"dies_per_rank": dies / ranks, "pool_read_s": _pool_fn(hw, pool_read_s, readers),
            "pool_write_s": _pool_fn(hw, pool_write_s, readers)} if cs else {}
    out = []
    for it in _per_point(cols, "iteration_ms", (len(every),), points(sweeps)):
        it = it / 1e3
        step = Grid2(list(bs), list(ls), it[1:1 + n].reshape(len(bs), len(ls)))
        chunk = [(c, Grid2(list(bs), list(ls), it[1 + n * (j + 1):1 + n * (j + 2)].reshape(len(bs), len(ls))))
                 for j, c in enumerate(cs)] or None
        out.append(DecodePredictor(npus=npus, step_s=step, chunk_step_s=chunk, kv_tokens_per_rank=kv_rank,
                                   max_batch_per_npu=max_b, inputs=inputs, **pool))
    return out if sweeps else out[0]


INPUTS = {  # the predict inputs that make up an instance (read back from a row)
    "decode": ("dies", "ep", "tp", "microbatches", "mtp", "mtp_k", "mtp_acceptance", "expert_imbalance",
               "redundant_experts", "shared_copies", "attention_share"),
    "afd": ("attention_dies", "expert_dies", "microbatches", "mtp", "mtp_k", "mtp_acceptance", "expert_imbalance",
            "redundant_experts", "shared_copies"),
    "prefill": ("dies", "ep", "attn_tp", "microbatches", "mtp", "expert_imbalance", "redundant_experts", "shared_copies"),
}


def resolved(phase: str, inputs: Mapping[str, Any], specs: Specs) -> dict:
    """The full predict inputs of an instance (what the deployment defaults derive for what
    ``inputs`` leave unset): one predict row, read back."""
    row = predict(phase, dict(inputs), specs).columns.record(0)
    return {k: row[k] for k in INPUTS[phase] if k in row and not (isinstance(row[k], float) and math.isnan(row[k]))}


def _ranks(phase: str, instance: Mapping[str, Any], dpp: float) -> int:
    """DP-attention ranks of a decode instance: its attention dies over the TP degree."""
    if phase == "afd":
        return int(instance["attention_dies"])
    return int(instance["dies"]) // int(instance.get("tp", 1) or 1)


def _pool_fn(hw, fn, dies: float):
    """(bytes per die, blocks per die) -> ``fn``'s time with ``dies`` dies at the pool at once,
    or None on a system without a pool (cmperf/cost/pool.py)."""
    if hw.system.memory_pool is None:
        return None
    return _memoised(lambda B, n: float(fn(hw, B, n, dies)))


def _memoised(fn, most: int = 4096):
    """``fn`` of numbers, each call's value computed once (up to ``most`` kept): a run's passes
    repeat a few sizes, and a cost-model function reads the specs, some µs a call."""
    seen: dict = {}

    def once(*args):
        v = seen.get(args)
        if v is None:
            if len(seen) >= most:
                seen.clear()
            v = seen[args] = fn(*args)
        return v

    return once


def prefill_predictor(specs: Specs, instance: Mapping[str, Any], max_tokens: float, computed: np.ndarray,
                      cached: np.ndarray | None = None, sweeps: Mapping[str, list] | None = None):
    """The grids of one prefill instance's pass (module docstring): axes t (computed tokens per
    NPU), c (the batch's computed-weighted mean computed length) and C (its computed-weighted
    mean cached prefix, a few levels from 0 to the longest), each row ``predict``'s at
    prompt_len c + C, cached_len C, less the row's own pool read (a batch's is from its own
    bytes: :meth:`PrefillPredictor.times`). With ``sweeps``, a list of one predictor per point
    (as :func:`decode_predictor`)."""
    from ..schedule.prefill import kv_send_s

    hw, _ = specs.views()
    dpp = float(hw.chip.dies_per_package)
    dies = float(instance["dies"])
    npus = dies / dpp
    tp = float(instance.get("attn_tp", 1) or 1)
    groups = max(int(dies // tp), 1)
    computed = np.asarray(computed, dtype=float)
    cached = np.zeros_like(computed) if cached is None else np.asarray(cached, dtype=float)
    cs = geometric(max(float(np.min(computed)), 16.0), max(float(np.max(computed)), 16.0), 1.4)
    c_max = float(np.max(cached)) if len(cached) else 0.0
    levels = [0.0] + ([float(x) for x in geometric(min(256.0, c_max), c_max, 2.0)] if c_max >= 1 else [])

    def min_tokens(c: float) -> float:  # a pass of one prompt per attention TP group
        return pass_tokens_per_npu(0.0, npus, max(c, 1.0), tp, dpp)

    t_hi = max(max_tokens / npus, min_tokens(cs[-1]))
    ts = geometric(min_tokens(cs[0]), t_hi, 1.3)
    if len(cs) == 1:  # one computed length: a pass carries whole prompts, each timed exactly
        ts = np.union1d(ts, whole_prompt_tokens(cs[0] / npus, min_tokens(cs[0]), t_hi))
    base = {k: v for k, v in instance.items() if k not in ("tokens_per_npu", "prompt_len", "cached_len")}
    rows = [{**base, "tokens_per_npu": float(max(t, min_tokens(c))), "prompt_len": int(round(c + C)),
             **({"cached_len": int(round(C))} if C >= 1 else {})}
            for C in levels for t in ts for c in cs]
    cols = _rows("prefill", rows, specs, f"the prefill instance of {dies:g} dies (attention TP {tp:g})", sweeps)
    shape, n = (len(levels), len(ts), len(cs)), points(sweeps)
    # the pass without its own pool traffic (a batch's is from its own bytes): the read, and the
    # write-back's part the pass did not hide
    comps = [(f - p - w) / 1e3 for f, p, w in zip(_per_point(cols, "forward_ms", shape, n), _per_point(cols, "pool_load_ms", shape, n),
                                                  _per_point(cols, "pool_write_wait_ms", shape, n))]
    readers = float(instance.get("pool_readers", dies) or dies)
    first = cols.record(0)
    inputs = {k: first[k] for k in INPUTS["prefill"] if k in first and not (isinstance(first[k], float) and math.isnan(first[k]))}
    out = [PrefillPredictor(
        inputs=inputs, npus=npus, dies=dies, groups=groups, tp=tp,
        compute_s=[(C, Grid2(list(ts), list(cs), comp[j])) for j, C in enumerate(levels)],
        pool_read_s=_pool_fn(hw, pool_read_s, readers), pool_write_s=_pool_fn(hw, pool_write_s, readers),
        send_s=_memoised(lambda B: float(kv_send_s(hw, B)))) for comp in comps]
    return out if sweeps else out[0]
