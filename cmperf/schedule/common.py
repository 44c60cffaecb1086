"""Pieces shared by the phase schedules: timing a list of ops, and the record of what was
timed (for ``--breakdown``)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..cost.roofline import Op, OpTime, op_time


@dataclass
class Part:
    """One operator as scheduled: which section and stream, how often per step."""

    section: str
    stream: str
    calls: object  # calls per step (scalar or array): layers x microbatches
    t: OpTime


@dataclass
class Section:
    """How the ops of one section combine into its time (the overlap rule, in words)."""

    name: str
    rule: str
    time_s: np.ndarray  # time of one instance of the section
    count: object  # instances per step


@dataclass
class Schedule:
    parts: list[Part] = field(default_factory=list)
    sections: list[Section] = field(default_factory=list)
    streams: dict = field(default_factory=dict)  # section -> (stream A, stream B) per microbatch

    def add_ops(self, section: str, stream: str, ops: list[Op], hw, share, calls) -> np.ndarray:
        """Time ``ops`` with ``share`` of the cores, record them, return their summed time."""
        total = 0.0
        for op in ops:
            t = op_time(op, hw, share)
            self.parts.append(Part(section, stream, calls, t))
            total = total + t.time_s
        return np.asarray(total, dtype=float)

    def total_s(self) -> np.ndarray:
        return sum(np.asarray(s.time_s) * s.count for s in self.sections)


def hbm_bound_s(parts: list[Part], hw, share=1.0) -> np.ndarray:
    """Time to move every HBM byte of ``parts`` (one instance each) at the die's achievable
    bandwidth: overlapped streams share one HBM (docs/model.md §5.2)."""
    bytes_ = sum(p.t.hbm_bytes for p in parts)
    return bytes_ / (hw.chip.die.hbm_bandwidth_Bps * hw.chip.efficiency.memory_bandwidth * share)


def select(choice: np.ndarray, one, two):
    """Per-row choice between the 1- and 2-microbatch variant of a quantity."""
    return np.where(choice == 2, two, one)
