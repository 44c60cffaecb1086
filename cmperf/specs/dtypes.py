"""Bytes per element of each dtype a spec may name, apart from the schema (:mod:`.schema`
imports pydantic; the cost model needs only this table): a bf16 element is 2 bytes, an fp4
or int4 element half of one. ``int4`` is a storage format of weights (W4A8: 4-bit weights
dequantised into INT8 GEMMs), unless a chip gives it a peak of its own."""

from __future__ import annotations

from typing import Any

DTYPE_BYTES: dict[str, float] = {"bf16": 2, "fp16": 2, "fp8": 1, "int8": 1, "fp4": 0.5, "int4": 0.5}


def dtypes_of(peak: Any) -> list[str]:
    """The dtypes a chip's ``peak_flops_per_s`` gives a peak for, widest first (DTYPE_BYTES
    order); ``peak`` is the validated section or its :class:`.view.SpecView`."""
    return [d for d in DTYPE_BYTES if getattr(peak, d, None) is not None]
