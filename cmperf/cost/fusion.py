"""Fused kernels (docs/model.md §2.9): a serving stack runs some adjacent kernels as one
(stacks/*.yaml ``fusion``: CloudMatrix-Infer's MLAProlog and fused MoE, FlashInfer's fused
add + RMSNorm). A fused group is one kernel:

    launches   = the largest of its members' (one launch)
    HBM bytes  = sum of its members' - the bytes each member after the first would read of
                 what the member before it handed over (``Op.in_B``: kept on chip)
    work       = the sum of its members' FLOPs, element operations and GEMM tiles

so its roofline time max(sum of terms) + one launch is never more than the members' times
summed (max of sums <= sum of maxes; fewer bytes and launches), and an intermediate that
only the group reads is still counted as written once (a conservative bound). It is named
after its member with the most FLOPs (the GEMM it is folded into: ``mla_prolog``), else its
members joined by ``+`` (``residual_add+rmsnorm``)."""

from __future__ import annotations

from dataclasses import replace
from functools import lru_cache

import numpy as np

from ..specs.view import KEEP
from .roofline import Gemm, Op, broadcast, maximum, number


def _total(ops, field):
    return sum(number(getattr(o, field)) for o in ops)


def merge(ops: list[Op]) -> Op:
    """One kernel doing the work of ``ops`` (adjacent, in dataflow order; none a collective)."""
    host = max(ops, key=lambda o: float(np.max(np.asarray(o.flops, dtype=float))))
    if not np.any(np.asarray(host.flops, dtype=float) > 0):
        host = ops[0]
    gemms = []
    for o in ops:
        if o.gemm is not None:
            gemms += [o.gemm] if isinstance(o.gemm, Gemm) else list(o.gemm)
    name = host.name if np.any(np.asarray(host.flops, dtype=float) > 0) else "+".join(o.name for o in ops)
    saved = sum(number(o.in_B) for o in ops[1:])
    return replace(host, name=name, flops=_total(ops, "flops"), outputs=_total(ops, "outputs"),
                   vector_ops=_total(ops, "vector_ops"), hbm_bytes=np.maximum(_total(ops, "hbm_bytes") - saved, 0.0),
                   weight_bytes=_total(ops, "weight_bytes"),
                   launches=maximum(*broadcast(*(np.asarray(o.launches, dtype=float) for o in ops))),
                   gemm=None if not gemms else (gemms[0] if len(gemms) == 1 else tuple(gemms)),
                   in_B=ops[0].in_B)


def fuse(ops: list[Op], groups) -> list[Op]:
    """``ops`` with every run of adjacent ops whose names are a fusion group (in its order)
    merged into one; the longest group first where several start at an op."""
    if not groups:
        return list(ops)
    match = fusion_runs if KEEP["on"] else fusion_runs.__wrapped__
    runs = match(tuple((o.name, o.tier is None) for o in ops), tuple(tuple(g) for g in groups))
    return [ops[i] if n == 1 else merge(ops[i:i + n]) for i, n in runs]


@lru_cache(maxsize=4096)
def fusion_runs(ops: tuple, groups: tuple) -> tuple:
    """(start, length) of each kernel :func:`fuse` makes of ``ops`` ((name, local) pairs; a
    collective, on a network tier, is never fused): they depend on the names alone, so each
    sequence of kernels is matched against the groups once."""
    ordered = sorted(groups, key=len, reverse=True)
    out, i = [], 0
    while i < len(ops):
        for g in ordered:
            run = ops[i:i + len(g)]
            if tuple(name for name, _ in run) == g and all(local for _, local in run):
                out.append((i, len(g)))
                i += len(g)
                break
        else:
            out.append((i, 1))
            i += 1
    return tuple(out)
