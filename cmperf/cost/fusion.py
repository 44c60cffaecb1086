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

The merge works on a stage's ops before their timed table is made (cmperf/cost/roofline.py
``OpRows``): each fused run's values are added into one, the others kept. Where every value
is a number or all are of one shape (a one-row prediction's), they are one block (ops x
fields [x rows]) and the runs are merged on it by numpy, a few calls for all of them
(:func:`merge_block`); otherwise value by value (:func:`merge`). Both add a run's members one
after another, in order: the same numbers."""

from __future__ import annotations

import functools
from functools import lru_cache

import numpy as np

from ..specs.view import KEEP
from .roofline import LISTS, NUMERIC, OpColumns, OpRows, columns, fields_of, run_sums

SUMMED = tuple(NUMERIC.index(f) for f in ("flops", "outputs", "vector_ops", "weight_bytes"))
FLOPS, HBM, IN_B, LAUNCHES = (NUMERIC.index(f) for f in ("flops", "hbm_bytes", "in_B", "launches"))


def fused_table(rows: OpRows, groups, parts: list[int]) -> tuple[OpColumns, list[int]]:
    """The table (:func:`cmperf.cost.roofline.columns`) of the kernels :func:`fuse` makes of
    the ops ``rows`` (of stages of ``parts`` ops each), and the kernels each stage is left with."""
    if not groups:
        return columns(rows), parts
    runs, sizes = fusion_of(rows, groups, parts)
    if len(runs) == len(rows):  # nothing fused
        return columns(rows), parts
    try:
        block = np.array(rows.values, dtype=float)  # every value a number, or all of one shape
    except ValueError:
        return columns(merge(rows, runs)), sizes
    block, hosts, names = merge_block(block, runs, rows.names)
    lists = [names] + [[getattr(rows, f)[h] for h in hosts] for f in LISTS[1:-1]]
    gemms = [rows.gemms[i] if n == 1 else _run_gemms(rows.gemms, i, n) for i, n in runs]
    return OpColumns(*lists, gemms, fields_of(block), block), sizes


def fuse(rows: OpRows, groups, parts: list[int]) -> tuple[OpRows, list[int]]:
    """The ops ``rows`` (of stages of ``parts`` ops each, in order) with every run of adjacent
    ops of one stage whose names are a fusion group (in its order) merged into one kernel, the
    longest group first where several start at an op; and the kernels each stage is left with."""
    if not groups:
        return rows, parts
    runs, sizes = fusion_of(rows, groups, parts)
    if len(runs) == len(rows):  # nothing fused
        return rows, parts
    return merge(rows, runs), sizes


def fusion_of(rows: OpRows, groups, parts: list[int]) -> tuple[list, list[int]]:
    """(start, length) of each kernel the fusion ``groups`` make of the ops ``rows`` (of stages
    of ``parts`` ops each: kernels fuse within a stage), and the kernels of each stage."""
    match = fusion_runs if KEEP["on"] else fusion_runs.__wrapped__
    key, runs, sizes, at = tuple(tuple(g) for g in groups), [], [], 0
    for n in parts:
        own = match(tuple(zip(rows.names[at:at + n], (t is None for t in rows.tiers[at:at + n]))), key)
        runs += [(at + i, k) for i, k in own]
        sizes.append(len(own))
        at += n
    return runs, sizes


def merge_block(block: np.ndarray, runs, names: list) -> tuple[np.ndarray, list[int], list[str]]:
    """:func:`merge` on the ops' values as one ``block`` (ops x fields [x rows]): the summed
    fields of every fused run added member after member (:func:`run_sums`, a numpy call per
    member position for all runs), the HBM bytes less what each member after a run's first is
    handed over, the largest launch count, the first member's input; the other fields its
    host's. Returns (the kernels' block, each kernel's host op, each kernel's name)."""
    peak = block[:, FLOPS].reshape(len(block), -1).max(axis=1)  # each op's FLOPs (its largest row's)
    hosts, out_names = [], []
    for i, n in runs:
        if n == 1:
            hosts.append(i)
            out_names.append(names[i])
            continue
        j = i + int(np.argmax(peak[i:i + n]))
        hosts.append(j if peak[j] > 0 else i)
        out_names.append(names[j] if peak[j] > 0 else "+".join(names[i:i + n]))
    out = block[hosts]
    fused = [k for k, (_, n) in enumerate(runs) if n > 1]
    starts = np.array([runs[k][0] for k in fused])
    lengths = np.array([runs[k][1] for k in fused])
    for f in SUMMED:
        out[fused, f] = run_sums(block[:, f], starts, lengths)
    handed = run_sums(block[:, IN_B], starts + 1, lengths - 1)  # what each member after the first is handed
    out[fused, HBM] = np.maximum(run_sums(block[:, HBM], starts, lengths) - handed, 0.0)
    out[fused, LAUNCHES] = run_sums(block[:, LAUNCHES], starts, lengths, np.maximum)
    out[fused, IN_B] = block[starts, IN_B]
    return out, hosts, out_names


def _run_gemms(gemms: list, i: int, n: int):
    """The GEMMs of a fused run of ``n`` ops from op ``i``, one after the other (None: none)."""
    run = [g for k in range(i, i + n) if gemms[k] is not None for g in gemms[k]]
    return tuple(run) if run else None


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
        gemms.append(_run_gemms(rows.gemms, i, n))
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
