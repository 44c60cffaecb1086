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
members joined by ``+`` (``residual_add+rmsnorm``); its kind (engine, dtype, FLOP kind) is
that member's.

The merge works on a stage's ops before their table is made (cmperf/cost/roofline.py
``OpRows``): each fused run's values are added into one, the others kept."""

from __future__ import annotations

import functools
from functools import lru_cache

import numpy as np

from ..specs.view import KEEP
from .roofline import LISTS, NUMERIC, OpRows

SUMMED = tuple(NUMERIC.index(f) for f in ("flops", "outputs", "vector_ops", "weight_bytes"))
FLOPS, HBM, IN_B, LAUNCHES = (NUMERIC.index(f) for f in ("flops", "hbm_bytes", "in_B", "launches"))


def fuse(rows: OpRows, groups, parts: list[int]) -> tuple[OpRows, list[int]]:
    """The ops ``rows`` (of stages of ``parts`` ops each, in order) with every run of adjacent
    ops of one stage whose names are a fusion group (in its order) merged into one kernel, the
    longest group first where several start at an op; and the kernels each stage is left with."""
    if not groups:
        return rows, parts
    match = fusion_runs if KEEP["on"] else fusion_runs.__wrapped__
    key, runs, sizes, at = tuple(tuple(g) for g in groups), [], [], 0
    for n in parts:
        own = match(tuple(zip(rows.names[at:at + n], (t is None for t in rows.tiers[at:at + n]))), key)
        runs += [(at + i, k) for i, k in own]
        sizes.append(len(own))
        at += n
    if len(runs) == len(rows):  # nothing fused
        return rows, parts
    return merge(rows, runs), sizes


def merge(rows: OpRows, runs) -> OpRows:
    """The kernels ``runs`` ((start, length) of each) make of the ops ``rows`` (adjacent, in
    dataflow order; none a collective): a fused run's values added one after another, the rest
    its host's (the member with the most FLOPs)."""
    values, hosts, names, gemms = [], [], [], []
    for i, n in runs:
        if n == 1:
            values.append(rows.values[i])
            hosts.append(i)
            names.append(rows.names[i])
            gemms.append(rows.gemms[i])
            continue
        members = rows.values[i:i + n]
        peak = [float(np.max(v[FLOPS])) for v in members]
        j = i + int(np.argmax(peak))
        host = j if peak[j - i] > 0 else i
        out = list(rows.values[host])
        for f in SUMMED:
            out[f] = _sum(v[f] for v in members)
        out[HBM] = np.maximum(_sum(v[HBM] for v in members) - _sum(v[IN_B] for v in members[1:]), 0.0)
        out[LAUNCHES] = functools.reduce(np.maximum, (v[LAUNCHES] for v in members))
        out[IN_B] = members[0][IN_B]
        values.append(tuple(out))
        hosts.append(host)
        names.append(rows.names[host] if peak[host - i] > 0 else "+".join(rows.names[i:i + n]))
        run = [g for k in range(i, i + n) if rows.gemms[k] is not None for g in rows.gemms[k]]
        gemms.append(tuple(run) if run else None)
    return OpRows(names, *([getattr(rows, f)[h] for h in hosts] for f in LISTS[1:-1]), gemms, values)


def _sum(values):
    """The values added one after another (as Python's ``sum`` does, without its 0 + first)."""
    it = iter(values)
    out = next(it)
    for v in it:
        out = out + v
    return out


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
