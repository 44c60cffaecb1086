"""Values no real part has (docs/specs.md, "Plausible ranges"): a spec value outside the range
its field's class spans on any accelerator, link or memory built or announced gets one warning
line naming the field and the range; the prediction still runs (a what-if may go past what
exists on purpose). What is impossible, not merely implausible (a tier faster than its
nominal rate, a domain larger than the system, a KV transfer inside one package), is an
error of the schema instead (:func:`.schema.system_reference_problems`).

The ranges are wide: an order of magnitude or more beyond the largest and smallest shipped
value of the class, so that only a typo (a missing exponent, a value in the wrong unit) or a
deliberately absurd what-if reaches them.
"""

from __future__ import annotations

import re
from typing import Any, Iterable

# (pattern on the dotted path, low, high, what the range is)
RANGES: list[tuple[str, float, float, str]] = [
    (r"^chip\.efficiency\.(matmul_compute|attention_compute|memory_bandwidth)$", 0.05, 1.0,
     "an achievable fraction of a peak: 0.05 to 1"),
    (r"^chip\.efficiency\.matmul_by_dtype\.\w+\.compute$", 0.05, 1.0, "an achievable fraction of a peak: 0.05 to 1"),
    (r"^chip\.die\.peak_flops_per_s\.\w+$", 1e11, 1e17, "a die's dense peak: 100 GFLOP/s to 100 PFLOP/s"),
    (r"^chip\.die\.vector_ops_per_s$", 1e10, 1e16, "a die's vector rate: 10 G to 10 P operations/s"),
    (r"^chip\.die\.hbm_bandwidth_Bps$", 1e10, 1e14, "a die's HBM bandwidth: 10 GB/s to 100 TB/s (HBM3e: 8 TB/s per GPU)"),
    (r"^chip\.die\.hbm_capacity_B$", 1e9, 1e13, "a die's HBM: 1 GB to 10 TB"),
    (r"^chip\.efficiency\.matmul_stream_Bps$", 1e9, 1e13, "one matrix unit's operand stream: 1 GB/s to 10 TB/s"),
    (r"^chip\.latency\.kernel_launch_s$", 0.0, 1e-3, "a kernel's fixed cost: 0 to 1 ms"),
    (r"^chip\.latency\.iteration_overhead_s$", 0.0, 1.0, "a step's fixed cost: 0 to 1 s"),
    (r"^system\.tiers\.[^.]+\.(bandwidth_Bps|nominal_Bps)$", 1e8, 1e13,
     "a network tier per die, chip or node: 100 MB/s to 10 TB/s (NVLink 5: 900 GB/s per direction)"),
    (r"^system\.tiers\.[^.]+\.latency_s$", 1e-8, 1e-2, "a tier's one-way latency: 10 ns to 10 ms"),
    (r"^system\.collectives\.message_issue_s$", 0.0, 1e-4, "one message's issue time: 0 to 100 us"),
    (r"^system\.collectives\.step_time_cv$", 0.0, 1.0, "the spread of a die's step time (std/mean): 0 to 1"),
    (r"^system\.collectives\.call_floor_s\.[^.]+\.[^.]+$", 0.0, 1e-3, "one collective call's floor: 0 to 1 ms"),
    (r"^system\.memory_pool\.reads\.[^.]+\.bandwidth_Bps$", 1e8, 1e13, "a pool read per die: 100 MB/s to 10 TB/s"),
    (r"^system\.memory_pool\.reads\.[^.]+\.latency_s$", 1e-8, 1e-1, "a pool block's fetch: 10 ns to 100 ms"),
    (r"^system\.memory_pool\.writes\.[^.]+\.bandwidth_Bps$", 1e8, 1e13, "a pool write per die: 100 MB/s to 10 TB/s"),
    (r"^system\.memory_pool\.writes\.[^.]+\.latency_s$", 1e-8, 1e-1, "a pool block's write: 10 ns to 100 ms"),
    (r"^system\.memory_pool\.object_storage_Bps$", 1e6, 1e12, "an object-storage bucket: 1 MB/s to 1 TB/s"),
]
_COMPILED = [(re.compile(p), lo, hi, what) for p, lo, hi, what in RANGES]


def _numbers(d: Any, prefix: str) -> Iterable[tuple[str, float]]:
    """(dotted path, number) of every numeric field of a spec's plain data."""
    if isinstance(d, dict):
        if "value" in d and "source" in d:
            v = d["value"]
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                yield prefix[:-1], float(v)
            return
        for k, v in d.items():
            yield from _numbers(v, f"{prefix}{k}.")
    elif isinstance(d, (int, float)) and not isinstance(d, bool):
        yield prefix[:-1], float(d)


def implausible(chip: dict, system: dict) -> list[str]:
    """One line per value of the chip's and the system's plain data (``model_dump``) outside
    its class's range: the field, its value and the range."""
    out = []
    for path, v in [*_numbers(chip, "chip."), *_numbers(system, "system.")]:
        for pattern, lo, hi, what in _COMPILED:
            if pattern.search(path) and not lo <= v <= hi:
                out.append(f"{path} = {v:g} is outside the range of any real part ({what}); predicted anyway")
                break
    return out


def is_plausible(path: str, value: float) -> bool:
    """Whether ``value`` of the field at dotted ``path`` lies in its class's range (True for
    a field no range covers)."""
    for pattern, lo, hi, _ in _COMPILED:
        if pattern.search(path):
            return lo <= value <= hi
    return True
