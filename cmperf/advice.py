"""Notes on answers that are right but surprising: a model whose dtype lands on a slow path of
the chip (issue 24: DeepSeek-R1's INT8 GEMMs on GB300, whose INT8 peak is 0.165 POPS against
5 PFLOPS of FP8 and 2.5 of BF16), each with the fix.

A compute dtype ``d`` of the model (the fields the chip must run natively, predict._needed_dtypes)
is on a slow path when the chip runs a dtype at least as wide as ``d`` faster:

    slow(d)  <=>  there is e with bits(e) >= bits(d) and peak(e) > peak(d)

The fix named is the fastest dtype of the same width, if it beats ``d``, else the fastest wider
one (a --set of the model's precision, or a checkpoint in that dtype). A peak outside the range
of any real part (specs/plausible.py, already warned about) is no path to advise on.
"""

from __future__ import annotations


def slow_dtype_notes(specs) -> list[str]:
    """One note per model dtype on a slow path of ``specs``' chip (module docstring)."""
    from .predict import _needed_dtypes
    from .report import human
    from .specs.dtypes import DTYPE_BITS, dtypes_of
    from .specs.plausible import is_plausible

    hw, m = specs.views()
    peaks = hw.chip.die.peak_flops_per_s
    import numpy as np

    have = {d: getattr(peaks, d) for d in dtypes_of(peaks)}
    if any(np.ndim(v) for v in have.values()):
        return []  # a swept peak: no single answer to note
    have = {d: float(v) for d, v in have.items() if is_plausible(f"chip.die.peak_flops_per_s.{d}", float(v))}
    notes = []
    for field, d in _needed_dtypes(m).items():
        if d not in have:
            continue
        faster = {e: p for e, p in have.items() if DTYPE_BITS[e] >= DTYPE_BITS[d] and p > have[d]}
        if not faster:
            continue
        same = {e: p for e, p in faster.items() if DTYPE_BITS[e] == DTYPE_BITS[d]}
        fix = max(same or faster, key=lambda e: (same or faster)[e])
        wider = max(faster, key=faster.get)
        notes.append(f"model {m.name} computes {field} in {d} on chip {hw.chip.name} at {human(have[d], 'FLOP/s')}, "
                     f"below its {wider} {human(faster[wider], 'FLOP/s')}: a slow path; the fix: "
                     f"--set model.precision.{field}={fix} ({human(have[fix], 'FLOP/s')}), or a checkpoint in {fix}")
    return notes
