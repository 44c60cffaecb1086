"""Kernel micro-benchmarks replayed by the cost model (docs/model.md §3): a (grouped) GEMM
as DeepGEMM and paper Table 10 measure it, and decode attention as FlashMLA and paper
Tables 8-9 do. They time one operator with the same roofline (`op_time`) as the serving
schedules, so a platform's efficiencies can be fitted to its kernel tables alone."""

from __future__ import annotations

import numpy as np

from ..cost.ops import attention_decode_ops
from ..cost.roofline import Gemm, Op, op_time
from ..specs.dtypes import DTYPE_BYTES

OUT_BYTES = 2  # BF16 output (DeepGEMM and Table 10)


def gemm(hw, m, g) -> dict:
    """``groups`` GEMMs of ``m`` x ``k`` by ``k`` x ``n`` in ``dtype`` (BF16 out), timed tile by
    tile (docs/model.md §3: output tiles, waves over the matrix units, operand streams);
    ``layout`` contiguous or masked as DeepGEMM's grouped GEMMs. Achieved TFLOPS = 2 groups
    m n k / time, bandwidth = the bytes of A, B and C / time (DeepGEMM's definitions)."""
    rows = np.asarray(g["m"], dtype=float)
    n, k, groups = (np.asarray(g[c], dtype=float) for c in ("n", "k", "groups"))
    dtypes = np.asarray(g["dtype"]).astype(str)
    masked = np.asarray(g["layout"]).astype(str) == "masked"
    time = np.full(rows.shape, np.nan)
    flops = 2 * groups * rows * n * k
    nbytes = np.zeros(rows.shape)
    for dt in np.unique(dtypes):
        sel = dtypes == dt
        b = DTYPE_BYTES[dt]
        data = groups * (rows * k * b + k * n * b + rows * n * OUT_BYTES)
        op = Op("gemm", "cube", flops=flops, outputs=2 * groups * rows * n, dtype=dt, hbm_bytes=data,
                weight_bytes=groups * k * n * b,
                gemm=Gemm(m=rows, n=n, k=k, groups=groups, masked=masked, in_B=b, out_B=OUT_BYTES))
        t = op_time(op, hw).time_s
        time = np.where(sel, t, time)
        nbytes = np.where(sel, data, nbytes)
    return {"gemm_us": time * 1e6, "gemm_TFLOPS": flops / time / 1e12, "gemm_GBps": nbytes / time / 1e9,
            "_schedules": None, "_choice": np.ones_like(time)}


def attention(hw, m, g) -> dict:
    """Decode attention over the model's cache layout (FlashMLA: MLA, 576/512 dims): ``batch``
    requests of ``s_q`` query tokens and ``h_q`` heads over ``seq_k`` cached tokens. TFLOPS =
    the core's FLOPs / time; bandwidth = its HBM bytes (the cache read once) / time."""
    batch, s_q, h_q, seq_k = (np.asarray(g[c], dtype=float) for c in ("batch", "s_q", "h_q", "seq_k"))
    tp = m.attention.num_heads / h_q  # the kernel sees h_q of the model's heads
    core = attention_decode_ops(m, batch * s_q, batch, seq_k, tp)[1]
    t = op_time(core, hw)
    return {"attention_us": t.time_s * 1e6, "attention_TFLOPS": t.flops / t.time_s / 1e12,
            "attention_GBps": t.hbm_bytes / t.time_s / 1e9, "_schedules": None, "_choice": np.ones_like(t.time_s)}
