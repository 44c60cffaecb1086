"""Expert-parallel dispatch / combine on their own: the operator micro-benchmark of paper
Table 7 (``tokens`` per rank, top-k routing over ``ep`` dies, all vector cores), timed by the
same ops and placement as the MoE layers (docs/model.md §4.2)."""

from __future__ import annotations

import numpy as np

from ..cost.ops import combine_message_B, dispatch_message_B, moe_ops, placement
from ..cost.roofline import op_time


def collective(hw, m, g) -> dict:
    T = np.asarray(g["tokens"], dtype=float)
    pl = placement(m, T, g["ep"], g["redundant_experts"], g["shared_copies"], g["expert_imbalance"],
                   hw.chip.efficiency.matmul_tile_rows)
    _, dispatch, _, combine = moe_ops(m, T, g["ep"], pl)
    td, tc = op_time(dispatch, hw), op_time(combine, hw)
    k = m.moe.experts_per_token
    return {
        "dispatch_us": td.time_s * 1e6,
        "combine_us": tc.time_s * 1e6,
        # the paper's bandwidth column: tokens x top-k messages / latency
        "dispatch_GBps": T * k * dispatch_message_B(m) / td.time_s / 1e9,
        "combine_GBps": T * k * combine_message_B(m) / tc.time_s / 1e9,
        "_schedules": None,
        "_choice": np.ones_like(T),
    }
