"""Instance options evaluated by the cost model (docs/model.md §9.2-§9.3).

Every option is a row of :func:`cmperf.predict.predict` — the prefill instance's forward
pass and KV transfer, the decode instance's TPOT at each batch, the co-located instance's
prefill chunk — so the rates a plan uses are the rates ``cmperf predict`` prints for the
same configuration. From them:

    prefill instance   prompts per pass      c = tokens per NPU x NPUs / computed tokens per prompt
                       servers               floor(c) (a pass returns all its prompts at its end)
    decode instance    capacity at batch b   X(b) = b x NPUs / (output tokens x TPOT(b))  requests/s
                       (continuous batching holds rate x output x TPOT requests: Little's law)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from ..predict import Specs, predict
from .queueing import COUNT_GRID

if TYPE_CHECKING:  # pandas is imported where a table is made (run): a simulation reads this module without it
    import pandas as pd


@dataclass
class DecodeCurves:
    """Per decode instance option (a size, or an attention/expert split): batch, TPOT and
    capacity along the batch grid (fitting rows only, batch ascending)."""

    dies: np.ndarray  # total dies of each option's instance
    keys: list[dict]  # the inputs that name each option ({"dies": 320} or {"attention_dies": .., "expert_dies": ..})
    batch: list[np.ndarray]
    tpot_s: list[np.ndarray]
    capacity_rps: list[np.ndarray]
    step_s: list[np.ndarray] | None = None  # the iteration (one decode step) at each batch

    def max_rate(self, tpot_slo_s: float) -> tuple[np.ndarray, np.ndarray]:
        """Per size: the largest request rate one instance serves with TPOT <= the SLO
        (TPOT interpolated between grid batches), and whether KV memory, not the SLO, stops
        it (the largest batch that fits is still under the SLO)."""
        rate, memory = [], []
        for t, x in zip(self.tpot_s, self.capacity_rps):
            if len(t) == 0 or t[0] > tpot_slo_s:
                rate.append(0.0)
                memory.append(False)
                continue
            memory.append(bool(t[-1] <= tpot_slo_s))
            rate.append(float(np.interp(tpot_slo_s, t, x)) if t[-1] > tpot_slo_s else float(x[-1]))
        return np.asarray(rate), np.asarray(memory)

    def step_at_tpot(self, tpot_slo_s: float) -> float:
        """The longest decode step a TPOT within the SLO allows: the SLO times the most tokens
        a step emits (MTP: the step over the TPOT) of any option; 0 without options. The same
        for any set of options of one model and MTP setting (a deployment evaluated alone)."""
        ratios = [float(np.max(s / t)) for t, s in zip(self.tpot_s, self.step_s) if len(t)]
        return tpot_slo_s * max(ratios, default=0.0)

    def at_rate(self, which: np.ndarray, rate_per_instance: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(batch per NPU, TPOT) of instances of size index ``which`` serving
        ``rate_per_instance``: the batch where the capacity curve meets the rate (Little's law);
        below the smallest batch, the smallest batch's TPOT."""
        batch = np.full(len(which), np.nan)
        tpot = np.full(len(which), np.nan)
        for k in np.unique(which):
            sel = which == k
            x = self.capacity_rps[k]
            if len(x) == 0:
                continue
            batch[sel], tpot[sel] = _first_reach(x, (self.batch[k], self.tpot_s[k]), rate_per_instance[sel])
        return batch, tpot

    def step_at_rate(self, which: np.ndarray, rate_per_instance: np.ndarray) -> np.ndarray:
        """The decode step (one iteration) of instances of size index ``which`` serving
        ``rate_per_instance``, read where :meth:`at_rate` reads the batch."""
        step = np.full(len(which), np.nan)
        for k in np.unique(which):
            sel = which == k
            if len(self.capacity_rps[k]):
                step[sel] = _first_reach(self.capacity_rps[k], (self.step_s[k],), rate_per_instance[sel])[0]
        return step


def _first_reach(x: np.ndarray, ys, rate) -> list[np.ndarray]:
    """Each of ``ys`` where the curve's capacity ``x`` (in batch order) first reaches ``rate``:
    linear between that point and the one before, clamped to the ends as np.interp. A TPOT
    step (a GEMM wave, a microbatch switch) can make a larger batch serve fewer requests; the
    rate is then served at the smaller batch, on the rising branch (np.interp on such a curve
    read the Atlas 950 SuperPoD's AFD instance at batch 112 and TPOT 57 ms for a rate batch 96
    serves at 48 ms, under the 50 ms SLO)."""
    rate = np.asarray(rate, dtype=float)
    reached = x[None, :] >= rate[:, None]
    some = reached.any(axis=1)
    i = np.where(some, reached.argmax(axis=1), len(x) - 1)
    before = np.maximum(i - 1, 0)
    span = x[i] - x[before]
    f = np.where(some & (i > 0) & (span > 0), (rate - x[before]) / np.where(span > 0, span, 1.0), 1.0)
    return [y[before] + f * (y[i] - y[before]) for y in ys]


def run(phase: str, rows: list[dict], specs: Specs) -> pd.DataFrame:
    """The valid rows of a predict over ``rows`` (invalid options are dropped: an EP degree
    that does not divide the experts, a size beyond the scale-up domain). Rows of one TP
    degree are predicted together: the tier a TP group's collectives use is chosen per
    prediction (:func:`cmperf.cost.roofline.tier_for_group`), so each row is the row
    ``cmperf predict`` gives for it alone."""
    import pandas as pd  # here: hbm_instance_tokens, which a simulation reads, needs none

    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        groups.setdefault((r.get("tp"), r.get("attn_tp")), []).append(r)
    tables = [predict(phase, rows=g, specs=specs, strict=False).table for g in groups.values()]
    tables = [t for t in tables if len(t)]
    return pd.concat(tables, ignore_index=True) if tables else pd.DataFrame()


def decode_curves(table: pd.DataFrame, dies_per_npu: int, output_tokens: float, keys=("dies", "tp"),
                  request_dies: str = "dies", size=("dies",)) -> DecodeCurves:
    """Capacity curves of the decode options in ``table``, one per distinct ``keys``; the
    batch is per NPU of the ``request_dies`` column (the dies that hold requests: all of a
    decode instance's, an AFD instance's attention dies); an option's dies are the sum of its
    ``size`` columns."""
    dies, names, batch, tpot, cap, step = [], [], [], [], [], []
    fit = table["fits"].to_numpy(dtype=bool) if len(table) else np.zeros(0, dtype=bool)
    if fit.any():
        col = lambda c: table[c].to_numpy()[fit]  # noqa: E731
        key = np.column_stack([col(c).astype(float) for c in keys])
        named = ~np.isnan(key).any(axis=1)  # as a group-by: rows without a key belong to no option
        # the options in the order of their keys; each one's rows in table order, then by batch (as sort_values)
        options, which = np.unique(key[named], axis=0, return_inverse=True)
        rows = np.flatnonzero(named)
        b_all, t_all, it_all, req = col("batch"), col("tpot_ms"), col("iteration_ms"), col(request_dies)
        for g, values in enumerate(options):
            at = rows[which.ravel() == g]
            at = at[np.argsort(b_all[at], kind="quicksort")]
            b = b_all[at].astype(float)
            s = t_all[at].astype(float) / 1e3
            names.append({k: float(v) for k, v in zip(keys, values)})
            dies.append(sum(names[-1][c] for c in size))
            batch.append(b)
            tpot.append(s)
            step.append(it_all[at].astype(float) / 1e3)
            cap.append(b * (float(req[at[0]]) / dies_per_npu) / (output_tokens * s))
    return DecodeCurves(dies=np.asarray(dies, dtype=float), keys=names, batch=batch, tpot_s=tpot, capacity_rps=cap,
                        step_s=step)


def prompts_per_pass(tokens_per_npu, npus, computed_tokens) -> np.ndarray:
    """Whole prompts one forward pass (or iteration) of an instance completes."""
    return np.floor(np.asarray(tokens_per_npu, dtype=float) * npus / computed_tokens + 1e-9)


PACKING_PROMPTS = 8192  # lengths drawn for the packing of whole prompts (passes_of_whole_prompts)
PACKING_SEED = 0  # one fixed draw: the plan is deterministic
LONE_PROMPTS = 2048  # of them, timed as passes of one prompt each (packed_passes)


def whole_prompt_passes(lengths: np.ndarray, budget_tokens: np.ndarray) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """The passes of a backlog under each token budget (docs/model.md §9.3): FCFS, a pass
    takes the next prompts while their computed tokens fit in the budget (the first one
    whatever its length), as the simulation's and SGLang's scheduler do. For each budget,
    per pass: (prompts, tokens, sum of squared prompt tokens), over the sequence ``lengths``
    (the renewal-reward view: the means over the passes are the expected full pass)."""
    c = np.asarray(lengths, dtype=float)
    cs = np.concatenate([[0.0], np.cumsum(c)])
    cs2 = np.concatenate([[0.0], np.cumsum(c * c)])
    T = np.asarray(budget_tokens, dtype=float)
    n = len(c)
    at = np.zeros(len(T), dtype=int)
    starts: list[list[int]] = [[] for _ in T]
    live = np.arange(len(T))
    while live.size:
        for j, s in zip(live, at[live]):
            starts[j].append(int(s))
        # the last prompt index whose running sum from the pass's start fits (at least one prompt)
        end = np.searchsorted(cs, cs[at[live]] + T[live] + 1e-9, side="right") - 1
        at[live] = np.maximum(end, at[live] + 1)
        live = live[at[live] < n - 1]  # a pass that would run past the draw is not counted (cut short)
    out = []
    for j in range(len(T)):
        s = np.append(np.asarray(starts[j], dtype=int), min(int(at[j]), n))  # pass k: prompts s[k] .. s[k + 1] - 1
        if len(s) > 2:
            s = s[:-1]  # the last pass, cut at the draw's end, is not a full one
        out.append((np.diff(s).astype(float), cs[s[1:]] - cs[s[:-1]], cs2[s[1:]] - cs2[s[:-1]]))
    return out


LAYOUT_KEYS = ("dies", "ep", "attn_tp", "redundant_experts", "shared_copies", "prompt_len", "cached_len", "pool_len",
               "microbatches", "mtp")


def _linear(x, xs, ys) -> np.ndarray:
    """``ys`` over ``xs`` (ascending) at ``x``: linear between points and, beyond either end, on
    the end segment's line (a pass of fewer tokens than the smallest budget: its fixed part and
    per-token slope), never below a hundredth of the smallest point's value."""
    t = np.interp(x, xs, ys)
    if len(xs) > 1:
        lo = ys[0] + (ys[1] - ys[0]) / max(xs[1] - xs[0], 1e-12) * (x - xs[0])
        hi = ys[-1] + (ys[-1] - ys[-2]) / max(xs[-1] - xs[-2], 1e-12) * (x - xs[-1])
        t = np.where(x < xs[0], np.maximum(lo, 0.01 * ys[0]), np.where(x > xs[-1], hi, t))
    return t


def count_rows(rows: list[dict], computed_tokens: float, dies_per_npu: int) -> list[dict]:
    """Each prefill row's layout at the passes of k whole prompts between one prompt and its
    budget's K, k = 1 + (K - 1) u rounded, u on ``queueing.COUNT_GRID`` (rows already predicted
    and repeats left out): where a greedy pass, which carries what waited, is timed
    (docs/model.md §9.3). The cost model steps between the budgets (2x apart) with a GEMM's waves
    (h200-cluster, 8 GPUs, 2K prompts: 9 prompts 210 ms against 186 on the line from 8 to 16)."""
    have = {(tuple(sorted((k, v) for k, v in r.items() if k != "tokens_per_npu")), float(r["tokens_per_npu"])) for r in rows}
    out = []
    for r in rows:
        npus = float(r["dies"]) / dies_per_npu
        K = float(prompts_per_pass(r["tokens_per_npu"], npus, computed_tokens))
        key = tuple(sorted((k, v) for k, v in r.items() if k != "tokens_per_npu"))
        for k in np.unique(np.rint(1.0 + (K - 1.0) * COUNT_GRID)):
            tok = float(k * computed_tokens / npus)
            if 1.0 < k < K and (key, tok) not in have:
                have.add((key, tok))
                out.append({**r, "tokens_per_npu": tok})
    return out


def packed_passes(pre: pd.DataFrame, computed, dies_per_npu: int, pre_long: pd.DataFrame | None = None,
                  pre_counts: pd.DataFrame | None = None) -> dict:
    """Per prefill row of ``pre`` (fitting rows), its budget's full pass of whole prompts
    (docs/model.md §9.3): ``prompts`` E[N], ``time_share`` E[t] / the row's pass (the pass timed
    at what it holds, not at its whole budget), ``scv`` of the pass time, ``token_share``
    E[tokens] / the budget. A pass holding tokens S of computed-weighted length Q / S is as
    slow as max(S / NPUs, one such prompt per attention TP group) tokens per NPU, its time read
    off the layout's rows (:func:`_linear` in the tokens per NPU) and, with ``pre_long`` (the
    same rows at a longer prompt length), linear in the pass's computed-weighted length between
    the two (a pass's causal attention per token is linear in it; its GEMMs do not see it).
    Fixed lengths: floor(budget / c) prompts of c, the row's own pass. ``count_share`` (rows x
    ``queueing.COUNT_GRID``): the pass of 1 + (E[N] - 1) u prompts of the mean length (its ends
    the lone prompt's pass and the full one), on the rows and ``pre_counts`` (the same layouts
    at whole prompts between them, :func:`count_rows`), for the greedy passes' law
    (:func:`cmperf.plan.queueing.greedy_instance`)."""
    tok = pre["tokens_per_npu"].to_numpy(dtype=float)
    npus = pre["dies"].to_numpy(dtype=float) / dies_per_npu
    n = len(pre)
    varying = computed.scv > 0 or computed.samples is not None
    if varying:
        from .workload import sample_lengths  # the distribution the simulation draws from

        lengths = sample_lengths(computed, PACKING_PROMPTS, np.random.default_rng(PACKING_SEED))
    else:
        lengths = np.full(1, float(computed.mean))
    budget = tok * npus
    passes = whole_prompt_passes(lengths, budget) if varying else None
    keys = [k for k in LAYOUT_KEYS if k in pre and k != "prompt_len"]
    frames = [f for f in (pre, pre_long, pre_counts) if f is not None and len(f)]
    ids = {}  # a layout's values -> its number, over the frames (numbers, not joined strings: thousands of rows)

    def label(t):
        if not keys:
            return np.zeros(len(t))
        vals = t.reindex(columns=keys).fillna(-1.0).to_numpy(dtype=float)
        return np.array([ids.setdefault(tuple(v), len(ids)) for v in vals.tolist()], dtype=float)

    for f in frames:
        label(f)
    layout = label(pre)
    fwd = pre["forward_ms"].to_numpy(dtype=float)
    length = pre["prompt_len"].to_numpy(dtype=float) - (pre["cached_len"].fillna(0.0).to_numpy(dtype=float) if "cached_len" in pre else 0.0)
    fwd_long = np.full(n, np.nan)
    long_len = np.full(n, np.nan)
    if pre_long is not None and len(pre_long):
        at = {(a, float(b)): (float(f), float(c)) for a, b, f, c in zip(
            label(pre_long), pre_long["tokens_per_npu"], pre_long["forward_ms"],
            pre_long["prompt_len"] - (pre_long["cached_len"].fillna(0.0) if "cached_len" in pre_long else 0.0))}
        for j in range(n):
            fwd_long[j], long_len[j] = at.get((layout[j], float(tok[j])), (np.nan, np.nan))
    tp = pre["attn_tp"].fillna(1.0).to_numpy(dtype=float) if "attn_tp" in pre else np.ones(n)
    have = pre_counts is not None and len(pre_counts) > 0
    c_layout = label(pre_counts) if have else np.zeros(0)
    c_tok = pre_counts["tokens_per_npu"].to_numpy(dtype=float) if have else np.zeros(0)
    c_fwd = pre_counts["forward_ms"].to_numpy(dtype=float) if have else np.zeros(0)

    def pass_ms(j, S, Q, counts=False):  # passes of S tokens (sum of squares Q) on row j's layout
        same = np.flatnonzero(layout == layout[j])
        order = same[np.argsort(tok[same])]
        x_grid, t_grid = tok[order], fwd[order]
        x = np.maximum(S / npus[j], Q / S * dies_per_npu / max(tp[j], 1.0))
        if counts and have:  # the layout's whole-prompt passes between its rows too
            extra = np.flatnonzero((c_layout == layout[j]) & (c_tok > x_grid[0]) & (c_tok < x_grid[-1]))
            xs, ts = np.concatenate([x_grid, c_tok[extra]]), np.concatenate([t_grid, c_fwd[extra]])
            at = np.argsort(xs, kind="stable")
            t = _linear(x, xs[at], ts[at])
        else:
            t = _linear(x, x_grid, t_grid)
        long_ok = np.isfinite(fwd_long[order])
        if long_ok.sum() >= 2 and np.all(long_len[order][long_ok] > length[j]):
            t_long = _linear(x, x_grid[long_ok], fwd_long[order][long_ok])
            t = np.maximum(t + (Q / S - length[j]) * (t_long - t) / (long_len[order][long_ok][0] - length[j]), 0.01 * t)
        return t

    out = {"prompts": prompts_per_pass(tok, npus, computed.mean), "time_share": np.ones(n), "scv": np.zeros(n),
           "token_share": np.ones(n), "lone_share": np.ones(n), "count_share": np.ones((n, len(COUNT_GRID)))}
    lone = lengths[:LONE_PROMPTS]
    mean_c, mean_c2 = float(np.mean(lengths)), float(np.mean(lengths * lengths))
    for j in range(n):
        out["lone_share"][j] = float(pass_ms(j, lone, lone * lone).mean()) / fwd[j]
        if varying:
            k, S, Q = passes[j]
            t = pass_ms(j, S, Q)
            mean_t = float(t.mean())
            out["prompts"][j] = float(k.mean())
            out["time_share"][j] = mean_t / fwd[j]
            out["scv"][j] = float(t.var()) / mean_t ** 2
            out["token_share"][j] = float(S.mean()) / budget[j]
        k = 1.0 + (max(out["prompts"][j], 1.0) - 1.0) * COUNT_GRID
        share = pass_ms(j, k * mean_c, k * mean_c2, counts=True) / fwd[j]
        share[0], share[-1] = out["lone_share"][j], out["time_share"][j]
        out["count_share"][j] = np.maximum.accumulate(share)  # more prompts never pass faster
    return out


def hbm_instance_tokens(specs: Specs, workload, instance: dict) -> float:
    """Distinct prefix tokens a prefill instance's free HBM holds at the workload's mean
    prompt (:func:`cmperf.cost.pool.hbm_cache_tokens`, one predict row of ``instance``'s inputs)."""
    from ..cost.pool import hbm_cache_tokens

    hw, _ = specs.views()
    inp = {k: v for k, v in instance.items() if k not in ("pool_readers", "cached_len", "prompt_len", "pool_len")}
    row = predict("prefill", {**inp, "prompt_len": max(int(round(workload.prompt.mean)), 1)}, specs).columns.record(0)
    return hbm_cache_tokens(hw, row)
