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

import numpy as np
import pandas as pd

from ..predict import Specs, predict


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
    fits = table[table["fits"]] if len(table) else table
    groups = fits.groupby(list(keys), sort=True) if len(fits) else []
    dies, names, batch, tpot, cap, step = [], [], [], [], [], []
    for key, t in groups:
        key = key if isinstance(key, tuple) else (key,)
        t = t.sort_values("batch")
        b = t["batch"].to_numpy(dtype=float)
        s = t["tpot_ms"].to_numpy(dtype=float) / 1e3
        names.append({k: float(v) for k, v in zip(keys, key)})
        dies.append(sum(names[-1][c] for c in size))
        batch.append(b)
        tpot.append(s)
        step.append(t["iteration_ms"].to_numpy(dtype=float) / 1e3)
        cap.append(b * (float(t[request_dies].iat[0]) / dies_per_npu) / (output_tokens * s))
    return DecodeCurves(dies=np.asarray(dies, dtype=float), keys=names, batch=batch, tpot_s=tpot, capacity_rps=cap,
                        step_s=step)


def prompts_per_pass(tokens_per_npu, npus, computed_tokens) -> np.ndarray:
    """Whole prompts one forward pass (or iteration) of an instance completes."""
    return np.floor(np.asarray(tokens_per_npu, dtype=float) * npus / computed_tokens + 1e-9)
