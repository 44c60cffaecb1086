"""Model loading and scale-out (paper §4.4, Table 2; docs/model.md §9.6).

A new instance needs the model's weights in every die's HBM. One copy of the model (all its
weights once, in the precision it is served in) comes from the source — object storage or
the DRAM pool (cmperf/cost/pool.py) — and the dies then fill their own HBM with their
share, replicated parts included, each at its own read rate:

    t_up = model bytes / source rate + weights per die / die read rate

How fast a deployment follows a load change: one more instance adds its share of the
deployment's rate after t_up, so one instance at a time the rate can grow by
``adds_rps / t_up`` per second.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..cost.pool import model_load_s, pool_read_rate
from ..schedule.memory import weight_bytes

SOURCES = ("pool", "object_storage")


def model_bytes(m, mtp_on: bool = True) -> float:
    """One copy of every weight, in the served precision: the weights of a single die that
    held the whole model (EP 1, TP 1, no redundant experts, one shared copy)."""
    shared = 1.0 if m.moe is not None and m.moe.shared_experts else 0.0
    one = {"ep": np.array([1.0]), "tp": np.array([1.0]), "attn_tp": np.array([1.0]), "mtp": np.array([float(mtp_on)]),
           "redundant_experts": np.array([0.0]), "shared_copies": np.array([shared])}
    return float(weight_bytes(m, one, "decode")[0])


def bring_up_s(hw, m, dies, weights_per_die_B, source: str) -> np.ndarray:
    """Time to load a new instance of ``dies`` dies from ``source`` (module docstring)."""
    copy = model_load_s(hw, model_bytes(m), dies, source)
    rate, _ = pool_read_rate(hw)
    return copy + np.asarray(weights_per_die_B, dtype=float) / rate


def bring_up_table(hw, m, best: dict, instances: dict) -> pd.DataFrame:
    """Per instance kind of the chosen plan: bytes, bring-up time from each source, the rate
    one more instance adds and how fast the deployment can grow (module docstring)."""
    rows = []
    kinds = [("decode", best["decode_dies"], best["decode_instances"], best["decode_max_rps"])]
    if best["shape"] != "colocated":
        kinds.insert(0, ("prefill", best["prefill_dies"], best["prefill_instances"], best["prefill_max_rps"]))
    for kind, dies, count, rate in kinds:
        w = _weights_per_die(best, kind, instances)
        adds = rate / count if count else 0.0
        row = {"instance": kind if kind == "prefill" or best["shape"] == "pd" else f"{kind} ({best['shape']})",
               "dies": dies, "model_bytes": model_bytes(m), "weights_per_die_bytes": w, "adds_rps": adds}
        for src in SOURCES:
            t = float(bring_up_s(hw, m, dies, w, src))
            row[f"from_{src}_s"] = t
            row[f"growth_rps_per_min_{src}"] = adds / t * 60.0
        rows.append(row)
    return pd.DataFrame(rows)


def _weights_per_die(best: dict, kind: str, instances: dict) -> float:
    """The most weight bytes one die of the instance holds (the one that loads longest)."""
    if kind == "prefill":
        t = instances["prefill"]
        pick = (t["dies"] == best["prefill_dies"]) & (t["attn_tp"] == best.get("prefill_tp", t["attn_tp"]))
        return float(t.loc[pick, "weights_per_die_bytes"].iloc[0])
    if best["shape"] == "afd":
        t = instances["afd"]
        row = t[(t["attention_dies"] == best["attention_dies"]) & (t["expert_dies"] == best["expert_dies"])].iloc[0]
        return float(max(row["attention_weights_per_die_bytes"], row["expert_weights_per_die_bytes"]))
    t = instances["decode"]  # a co-located instance holds the weights of the decode layout it runs
    pick = (t["dies"] == best["decode_dies"]) & (t["tp"] == best.get("decode_tp", 1.0))
    return float(t.loc[pick, "weights_per_die_bytes"].iloc[0])
