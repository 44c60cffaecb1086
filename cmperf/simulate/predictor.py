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
tokens; a GEMM's tile padding makes small steps); the grid points themselves are exactly
``predict``'s rows (tested). Below the smallest batch (one request per NPU) T is the smallest
batch's: the weights are read whatever the batch. A prefill pass with fewer prompts than
attention groups costs what one prompt per group costs (the other groups idle).
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

from ..errors import ConfigError
from ..predict import Specs, predict


def geometric(lo: float, hi: float, ratio: float) -> np.ndarray:
    """lo, lo·ratio, ... up to and including hi (whole numbers, distinct)."""
    lo, hi = max(float(lo), 1.0), max(float(hi), float(lo))
    n = int(np.ceil(np.log(hi / lo) / np.log(ratio))) + 1 if hi > lo else 1
    pts = np.unique(np.round(lo * ratio ** np.arange(n)))
    return np.unique(np.append(pts[pts < hi], hi))


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
    """Values on a (x, y) grid, interpolated bilinearly (clamped at the edges)."""

    x: list  # increasing
    y: list
    v: np.ndarray  # (len(x), len(y))

    def __call__(self, x: float, y: float) -> float:
        if len(self.x) == 1:
            i, wi, xs = 0, 0.0, False
        else:
            (i, wi), xs = _interp_index(self.x, x), True
        j, wj = _interp_index(self.y, y) if len(self.y) > 1 else (0, 0.0)
        v = self.v
        i1 = i + 1 if xs else i
        j1 = j + 1 if len(self.y) > 1 else j
        a = v[i, j] + (v[i, j1] - v[i, j]) * wj
        b = v[i1, j] + (v[i1, j1] - v[i1, j]) * wj
        return float(a + (b - a) * wi)


@dataclass
class DecodePredictor:
    """Iteration time of one decode (or AFD, or co-located) instance."""

    npus: float
    step_s: Grid2 | None  # T_d(b, L)
    chunk_step_s: list | None  # co-located: [(c, Grid2)] per chunk size, c ascending
    kv_tokens_per_rank: float  # KV tokens one DP-attention rank can hold
    max_batch_per_npu: float  # the memory limit at the reference KV length

    def step(self, batch_per_npu: float, kv: float, chunk_per_npu: float = 0.0) -> float:
        b = max(batch_per_npu, 1.0)
        if self.chunk_step_s is None or chunk_per_npu <= 0:
            return self.step_s(b, kv)
        cs = [c for c, _ in self.chunk_step_s]
        if chunk_per_npu <= cs[0]:
            return self.chunk_step_s[0][1](b, kv) if cs[0] == chunk_per_npu else \
                self.step_s(b, kv) + (self.chunk_step_s[0][1](b, kv) - self.step_s(b, kv)) * chunk_per_npu / cs[0]
        i, w = _interp_index(np.asarray(cs), chunk_per_npu)
        lo, hi = self.chunk_step_s[i][1](b, kv), self.chunk_step_s[i + 1][1](b, kv)
        return lo + (hi - lo) * w


@dataclass
class PrefillPredictor:
    """Pass time and KV transfer time of one prefill instance."""

    npus: float
    groups: int  # attention TP groups: a pass is as slow as one prompt per group at least
    pass_s: Grid2  # T_p(t, P)
    transfer_s: Grid2  # X_p(t, P)
    min_tokens_per_npu: Any  # callable P -> the smallest valid tokens per NPU (one prompt per group)

    def times(self, tokens: float, p_eff: float) -> tuple[float, float]:
        t = max(tokens / self.npus, self.min_tokens_per_npu(p_eff))
        return self.pass_s(t, p_eff), self.transfer_s(t, p_eff)


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
                     chunks: tuple = (), ref_kv: float | None = None, sweeps: Mapping[str, list] | None = None):
    """The grid of one decode instance's iteration time (module docstring). ``instance``: the
    predict inputs of the instance (dies, ep, tp, layout, MTP, ...), ``max_batch`` the largest
    batch per NPU it may run, ``max_kv`` the longest KV it may attend. With ``sweeps`` (spec
    paths that change step times only, e.g. a stack's host constants; n points taken
    together), a list of n predictors from one vectorised evaluation."""
    npus_key = "attention_dies" if phase == "afd" else "dies"
    hw, _ = specs.views()
    dpp = float(hw.chip.dies_per_package)
    npus = float(instance[npus_key]) / dpp
    bs = geometric(1.0, max(max_batch, 1.0), 1.25)
    ls = geometric(16.0, max(max_kv, 16.0), 1.5)
    base = {k: v for k, v in instance.items() if k not in ("batch", "kv_len", "chunk_tokens")}
    rows = [{**base, "batch": float(b), "kv_len": float(L), "prompt_len": max(int(L), 1), "output_len": 1}
            for b in bs for L in ls]
    n, shape = points(sweeps), (len(bs), len(ls))
    cols = _rows(phase, rows, specs, f"the {phase} instance {dict(base)}", sweeps)
    steps = [Grid2(list(bs), list(ls), v / 1e3) for v in _per_point(cols, "iteration_ms", shape, n)]
    chunk = [None] * n
    if chunks:
        chunk = [[] for _ in range(n)]
        for c in sorted(chunks):
            rc = [{**r, "chunk_tokens": float(c)} for r in rows]
            cc = _rows(phase, rc, specs, f"the co-located instance {dict(base)} with a {c:g}-token chunk", sweeps)
            for i, v in enumerate(_per_point(cc, "iteration_ms", shape, n)):
                chunk[i].append((float(c), Grid2(list(bs), list(ls), v / 1e3)))
    ref = float(ref_kv or max_kv)
    mem = _rows(phase, [{**base, "batch": 1.0, "kv_len": ref, "prompt_len": max(int(ref), 1), "output_len": 1}], specs,
                f"the {phase} instance")
    max_b = float(mem["max_batch_per_npu"].iat[0])
    ranks = _ranks(phase, instance, dpp)
    kv_rank = max_b * npus / ranks * ref
    out = [DecodePredictor(npus=npus, step_s=st, chunk_step_s=ch, kv_tokens_per_rank=kv_rank, max_batch_per_npu=max_b)
           for st, ch in zip(steps, chunk)]
    return out if sweeps else out[0]


def _ranks(phase: str, instance: Mapping[str, Any], dpp: float) -> int:
    """DP-attention ranks of a decode instance: its attention dies over the TP degree."""
    if phase == "afd":
        return int(instance["attention_dies"])
    return int(instance["dies"]) // int(instance.get("tp", 1) or 1)


def prefill_predictor(specs: Specs, instance: Mapping[str, Any], max_tokens: float, prompts: np.ndarray,
                      cached: float = 0.0, sweeps: Mapping[str, list] | None = None):
    """The grids of one prefill instance's pass and KV transfer (module docstring); with
    ``sweeps``, a list of one predictor per point (as :func:`decode_predictor`)."""
    hw, _ = specs.views()
    dpp = float(hw.chip.dies_per_package)
    dies = float(instance["dies"])
    npus = dies / dpp
    tp = float(instance.get("attn_tp", 1) or 1)
    groups = max(int(dies // tp), 1)
    p_lo, p_hi = max(float(np.min(prompts)), 16.0), max(float(np.max(prompts)), 16.0)
    ps = geometric(p_lo, p_hi, 1.4)

    def min_tokens(P: float) -> float:  # one prompt's computed tokens per attention TP group
        return (max(P - cached, 1.0)) * dpp / tp

    t_hi = max(max_tokens / npus, min_tokens(p_hi))
    ts = geometric(min_tokens(p_lo), t_hi, 1.3)
    base = {k: v for k, v in instance.items() if k not in ("tokens_per_npu", "prompt_len")}
    rows, keep = [], []
    for t in ts:
        for P in ps:
            rows.append({**base, "tokens_per_npu": float(max(t, min_tokens(P))), "prompt_len": int(round(P)),
                         **({"cached_len": int(min(cached, P - 1))} if cached else {})})
    cols = _rows("prefill", rows, specs, f"the prefill instance {dict(base)}", sweeps)
    shape, n = (len(ts), len(ps)), points(sweeps)
    out = [PrefillPredictor(npus=npus, groups=groups,
                            pass_s=Grid2(list(ts), list(ps), f / 1e3),  # pool loads included
                            transfer_s=Grid2(list(ts), list(ps), x / 1e3), min_tokens_per_npu=min_tokens)
           for f, x in zip(_per_point(cols, "forward_ms", shape, n), _per_point(cols, "kv_transfer_ms", shape, n))]
    return out if sweeps else out[0]
