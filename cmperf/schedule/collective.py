"""Expert-parallel dispatch / combine on their own: the operator micro-benchmarks of paper
Table 7 and DeepEP (``tokens`` per rank, top-k routing over ``ep`` dies, all cores), timed by
the same ops and placement as the MoE layers (docs/model.md §4.2): ``dispatch_us`` over the
system's decode route (low-latency kernels), ``dispatch_normal_us`` over its prefill route.
``comm_sms``: the SMs the kernels run on, where the route has an SM cost per (token, rank)
(0: not SM-limited)."""

from __future__ import annotations

import numpy as np

from ..cost.collectives import route_of
from ..cost.ops import combine_message_B, dispatch_message_B, distinct_reached, moe_ops, placement
from ..cost.roofline import op_time


def distinct_destinations(route, ep, k) -> np.ndarray:
    """Expected distinct destinations of a token routed to ``k`` uniformly placed experts:
    domains of the route's inner tier when the EP group spans several, else dies."""
    ep = np.asarray(ep, dtype=float)
    D = np.minimum(np.asarray(route.inner_dies, dtype=float), ep)
    return distinct_reached(np.where((len(route.tiers) > 1) & (ep > D), ep / D, ep), k)


def collective(hw, m, g) -> dict:
    T = np.asarray(g["tokens"], dtype=float)
    pl = placement(m, T, g["ep"], g["redundant_experts"], g["shared_copies"], g["expert_imbalance"],
                   hw.chip.efficiency.matmul_tile_rows)
    k = m.moe.experts_per_token
    out = {}
    for phase, suffix in (("decode", ""), ("prefill", "_normal")):
        route = route_of(hw, phase)
        _, dispatch, _, combine = moe_ops(m, T, g["ep"], pl, route, comm_units=g["comm_sms"])
        td, tc = op_time(dispatch, hw), op_time(combine, hw)
        out[f"dispatch{suffix}_us"] = td.time_s * 1e6
        out[f"combine{suffix}_us"] = tc.time_s * 1e6
        # the paper's and DeepEP's low-latency bandwidth column: tokens x top-k messages / time
        out[f"dispatch{suffix}_GBps"] = T * k * dispatch_message_B(m, route.message) / td.time_s / 1e9
        out[f"combine{suffix}_GBps"] = T * k * combine_message_B(m) / tc.time_s / 1e9
        # DeepEP's normal-kernel "bottleneck bandwidth": one copy per distinct destination
        # (node over the outer tier, or GPU inside one domain), the local one included
        per_token = distinct_destinations(route, g["ep"], k)
        out[f"dispatch{suffix}_bottleneck_GBps"] = T * per_token * dispatch_message_B(m, route.message) / td.time_s / 1e9
        out[f"combine{suffix}_bottleneck_GBps"] = T * per_token * combine_message_B(m) / tc.time_s / 1e9
    return {
        **out,
        "_schedules": None,
        "_choice": np.ones_like(T),
    }
