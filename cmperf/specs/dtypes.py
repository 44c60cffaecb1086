"""Bytes per element of each dtype a spec may name, apart from the schema (:mod:`.schema`
imports pydantic; the cost model needs only this table), and the dtype a chip runs in place
of one it lacks.

A bf16 element is 2 bytes, an fp4 or int4 element half of one. ``int4`` is a storage format
of weights (W4A8: 4-bit weights dequantised into INT8 GEMMs), unless a chip gives it a peak
of its own. ``fp8`` is the block-scaled FP8 DeepSeek serves (one FP32 scale per 128 x 128
weight block, 128 activations: < 0.1 % of the bytes, not counted), ``fp4`` NVIDIA's FP4
(its scales not counted either, as the published GB200 figures do).

The OCP microscaling formats carry their scales inside the element count: one 8-bit E8M0
(power-of-two) scale per block of 32 elements (OCP Microscaling Formats (MX) v1.0; gpt-oss's
MXFP4: "FP4 e2m1 + power-of-two scale per 32 values"), so

    mxfp8   1 B + 1 B / 32   = 1.03125 B per element
    mxfp4   0.5 B + 1 B / 32 = 0.53125 B per element

``hif8`` is HiSilicon's HiFloat8 (Ascend 950), an 8-bit float with tapered precision and no
block scale: 1 B. (The Ascend 960's HiF4 is announced without its layout: no entry.)
"""

from __future__ import annotations

from typing import Any, Iterable

MX_BLOCK = 32  # elements per E8M0 scale of the OCP MX formats
MX_SCALE_B = 1.0  # one 8-bit E8M0 scale

# widest element first (same width: floats, then block-scaled floats, then integers)
DTYPE_BYTES: dict[str, float] = {
    "bf16": 2, "fp16": 2,
    "fp8": 1, "hif8": 1, "mxfp8": 1 + MX_SCALE_B / MX_BLOCK, "int8": 1,
    "fp4": 0.5, "mxfp4": 0.5 + MX_SCALE_B / MX_BLOCK, "int4": 0.5,
}
# bits of one element's value, its scale overhead apart: the width two dtypes share
DTYPE_BITS: dict[str, int] = {"bf16": 16, "fp16": 16, "fp8": 8, "hif8": 8, "mxfp8": 8, "int8": 8,
                              "fp4": 4, "mxfp4": 4, "int4": 4}
INTEGER = frozenset({"int8", "int4"})
MICROSCALED = frozenset({"mxfp8", "mxfp4"})
# floating-point formats narrower than 16 bits: a KV cache stored in one is read by attention
# kernels in that format, so the chip must run it natively
NARROW_FLOATS = tuple(d for d in DTYPE_BYTES if DTYPE_BITS[d] < 16 and d not in INTEGER)


def dtypes_of(peak: Any) -> list[str]:
    """The dtypes a chip's ``peak_flops_per_s`` gives a peak for, widest first (DTYPE_BYTES
    order); ``peak`` is the validated section or its :class:`.view.SpecView`."""
    return [d for d in DTYPE_BYTES if getattr(peak, d, None) is not None]


def closest_dtype(dtype: str, have: Iterable[str]) -> str:
    """The dtype of ``have`` (a chip's, widest first) that runs ``dtype`` best: the same
    element width first (FP8 -> INT8 on Ascend, the paper's W8A8; MXFP4 -> FP4 on Blackwell;
    FP4 -> MXFP4 on the Ascend 950), else the narrowest wider width (MXFP4 -> FP8 on Hopper),
    else the widest; among one width, the same kind (float or integer), then the same
    scaling (microscaled or not), then the table's order."""
    have = list(have)
    bits = DTYPE_BITS[dtype]

    def rank(d):
        return ((d in INTEGER) != (dtype in INTEGER), (d in MICROSCALED) != (dtype in MICROSCALED), have.index(d))

    same = [d for d in have if DTYPE_BITS[d] == bits]
    if same:
        return min(same, key=rank)
    wider = [d for d in have if DTYPE_BITS[d] > bits]
    if wider:
        narrowest = min(DTYPE_BITS[d] for d in wider)
        return min((d for d in wider if DTYPE_BITS[d] == narrowest), key=rank)
    return have[0]
