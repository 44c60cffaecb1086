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
from operator import itemgetter

import numpy as np

from ..specs.view import KEEP
from .roofline import LISTS, NUMERIC, OpColumns, OpRows, Runs, columns, fields_of

SUMMED = tuple(NUMERIC.index(f) for f in ("flops", "outputs", "vector_ops", "weight_bytes"))
FLOPS, HBM, IN_B, LAUNCHES = (NUMERIC.index(f) for f in ("flops", "hbm_bytes", "in_B", "launches"))
ADDED = list(SUMMED) + [HBM]  # the fields a run adds member after member


def fused_table(rows: OpRows, groups, parts: list[int]) -> tuple[OpColumns, list[int]]:
    """The table (:func:`cmperf.cost.roofline.columns`) of the kernels :func:`fuse` makes of
    the ops ``rows`` (of stages of ``parts`` ops each), and the kernels each stage is left with."""
    if not groups:
        return columns(rows), parts
    plan = fusion_plan(rows, groups, parts)
    if plan is None:  # nothing fused
        return columns(rows), parts
    try:
        block = np.array(rows.values, dtype=float)  # every value a number, or all of one shape
    except ValueError:
        return columns(merge(rows, plan.runs)), plan.sizes
    block, hosts, names = merge_block(block, plan, rows.names)
    pick = itemgetter(*hosts) if len(hosts) > 1 else lambda seq: (seq[hosts[0]],)
    lists = [names] + [list(pick(getattr(rows, f))) for f in LISTS[1:-1]]
    gemms = [rows.gemms[i] if n == 1 else _run_gemms(rows.gemms, i, n) for i, n in plan.runs]
    return OpColumns(*lists, gemms, fields_of(block), block), plan.sizes


def fuse(rows: OpRows, groups, parts: list[int]) -> tuple[OpRows, list[int]]:
    """The ops ``rows`` (of stages of ``parts`` ops each, in order) with every run of adjacent
    ops of one stage whose names are a fusion group (in its order) merged into one kernel, the
    longest group first where several start at an op; and the kernels each stage is left with."""
    if not groups:
        return rows, parts
    plan = fusion_plan(rows, groups, parts)
    if plan is None:  # nothing fused
        return rows, parts
    return merge(rows, plan.runs), plan.sizes


class FusionPlan:
    """The kernels the fusion groups make of a sequence of ops (their names and whether each
    is local, in stages of ``parts`` ops): ``runs`` ((start, length) of each kernel), ``sizes``
    (kernels per stage), and for the runs of several ops (``fused``, their index in ``runs``)
    their members (``members``: one row per run, padded with its first op; ``member``: which
    entries are members), their sums (:class:`cmperf.cost.roofline.Runs`: all members; after
    the first), each's name joined, and every kernel's name where it is one op's."""

    def __init__(self, names: tuple, local: tuple, parts: tuple, groups: tuple):
        self.runs, self.sizes, at = [], [], 0
        match = fusion_runs if KEEP["on"] else fusion_runs.__wrapped__
        for n in parts:
            own = match(tuple(zip(names[at:at + n], local[at:at + n])), groups)
            self.runs += [(at + i, k) for i, k in own]
            self.sizes.append(len(own))
            at += n
        self.fused = [k for k, (_, n) in enumerate(self.runs) if n > 1]
        starts = np.array([self.runs[k][0] for k in self.fused], dtype=int)
        lengths = np.array([self.runs[k][1] for k in self.fused], dtype=int)
        self.starts = starts
        longest = int(lengths.max(initial=1))
        offsets = np.arange(longest)
        self.member = offsets < lengths[:, None]
        self.members = np.where(self.member, starts[:, None] + offsets, starts[:, None])
        self.all = Runs(starts, lengths)
        self.after_first = Runs(starts + 1, lengths - 1)
        self.names = [names[i] if n == 1 else None for i, n in self.runs]
        self.joined = ["+".join(names[i:i + n]) for i, n in (self.runs[k] for k in self.fused)]
        self.hosts = np.array([i for i, _ in self.runs], dtype=int)


def fusion_plan(rows: OpRows, groups, parts: list[int]) -> FusionPlan | None:
    """The :class:`FusionPlan` of ``rows`` (None: nothing fuses), made once per sequence of
    ops' names, stages and groups (they alone decide it)."""
    key = (tuple(rows.names), tuple(t is None for t in rows.tiers), tuple(parts), tuple(tuple(g) for g in groups))
    plan = _fusion_plan(*key) if KEEP["on"] else _fusion_plan.__wrapped__(*key)
    return plan if len(plan.runs) < len(rows) else None


@lru_cache(maxsize=1024)
def _fusion_plan(names: tuple, local: tuple, parts: tuple, groups: tuple) -> FusionPlan:
    return FusionPlan(names, local, parts, groups)


def merge_block(block: np.ndarray, plan: FusionPlan, names: list) -> tuple[np.ndarray, list[int], list[str]]:
    """:func:`merge` on the ops' values as one ``block`` (ops x fields [x rows]) by ``plan``:
    each fused run's host is its member with the most FLOPs (the first of them; its first
    member where none has any), its summed fields and HBM bytes added member after member
    (:class:`cmperf.cost.roofline.Runs`, a numpy call per member position for all runs), the
    HBM bytes less what each member after the first is handed over, the largest launch count,
    the first member's input; the other fields the host's. Returns (the kernels' block, each
    kernel's host op, each kernel's name)."""
    peak = block[:, FLOPS].reshape(len(block), -1).max(axis=1)  # each op's FLOPs (its largest row's)
    best = plan.members[np.arange(len(plan.fused)), np.where(plan.member, peak[plan.members], -np.inf).argmax(axis=1)]
    flops = peak[best] > 0
    host = np.where(flops, best, plan.starts)
    hosts = plan.hosts.copy()
    hosts[plan.fused] = host
    out_names = list(plan.names)
    for k, h, named, joined in zip(plan.fused, host.tolist(), flops.tolist(), plan.joined):
        out_names[k] = names[h] if named else joined
    out = block[hosts]
    sums = plan.all.sums(block[:, ADDED])
    out[np.ix_(plan.fused, SUMMED)] = sums[:, :len(SUMMED)]
    out[plan.fused, HBM] = np.maximum(sums[:, -1] - plan.after_first.sums(block[:, IN_B]), 0.0)
    out[plan.fused, LAUNCHES] = plan.all.sums(block[:, LAUNCHES], np.maximum)
    out[plan.fused, IN_B] = block[plan.starts, IN_B]
    return out, hosts.tolist(), out_names


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
