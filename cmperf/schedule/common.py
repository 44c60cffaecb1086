"""Pieces shared by the phase schedules: timing a list of ops, the load-dependent part of
a stage and its barrier wait, the one-or-two-microbatch choice, and the record of what was
timed (for ``--breakdown``)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..cost.collectives import barrier_wait_s
from ..cost.roofline import Op, OpTime, op_time
from .pipeline import Pipeline


def timed(ops: list[Op], hw, cube_share=1.0, vector_share=1.0) -> list[OpTime]:
    return [op_time(o, hw, cube_share, vector_share) for o in ops]


def wait_after(ops: list[OpTime], group, hw) -> np.ndarray:
    """Expected barrier wait at the end of ``ops``, the work a die did since the previous
    barrier: the spread of its load-dependent part across ``group`` dies (docs/model.md §4.3;
    weights, launches and barrier rounds are the same on every die)."""
    load = np.asarray(sum(o.load_s for o in ops), dtype=float)
    return barrier_wait_s(load, group, hw.system.collectives.step_time_cv)


def choose(microbatches, one, two) -> np.ndarray:
    """Microbatches used per row: the flag (1 or 2), or for auto (0) the faster schedule."""
    mb = np.asarray(microbatches)
    return np.where(mb == 1, 1, np.where(mb == 2, 2, np.where(two < one, 2, 1)))


def select(choice: np.ndarray, one, two):
    """Per-row choice between the 1- and 2-microbatch variant of a quantity."""
    return np.where(choice == 2, two, one)


def tokens_per_s_per_tflops(throughput_per_npu, hw, m) -> np.ndarray:
    """Throughput per NPU over the package's dense peak in the matmul dtype (the paper's
    normalisation: 1,504 INT8 TFLOPS per 910C)."""
    peak_package = hw.chip.dies_per_package * getattr(hw.chip.die.peak_flops_per_s, m.precision.matmul)
    return throughput_per_npu / (peak_package / 1e12)


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

    def serial(self, section: str, ops: list[OpTime], count, rule: str, extra_s=0.0) -> None:
        """Record ops that run one after another on all cores (plus a fixed ``extra_s``)."""
        t = np.asarray(sum(o.time_s for o in ops) + extra_s, dtype=float)
        self.parts += [Part(section, "serial", count, o) for o in ops]
        self.sections.append(Section(section, rule, t, count))

    def stack(self, section: str, pipe: Pipeline, layers, repeats=1, rule: str = "") -> None:
        """Record ``repeats`` runs of a stack of ``layers`` layers through a pipeline: the
        steady period per layer, then the fill and drain of each run as a section of its own."""
        layers = np.asarray(layers, dtype=float)
        for st in pipe.stages:
            self.parts += [Part(section, st.lane, layers * repeats * pipe.n, o) for o in st.ops]
        run = pipe.total_s(layers)
        self.sections.append(Section(section, rule, pipe.period_s, layers * repeats))
        self.sections.append(Section(f"{section}_fill_drain", "first and last layer of a run beyond the steady state",
                                     run - layers * pipe.period_s, repeats))

    def total_s(self) -> np.ndarray:
        return sum(np.asarray(s.time_s) * s.count for s in self.sections)
