"""Measured GPU tables as evidence (issue 32 item 1; docs/calibration.md, "Measured GPU
tables (aiconfigurator)").

NVIDIA's aiconfigurator (Apache-2.0) ships per-GPU, per-backend-version tables of measured
kernel times inside its ``aiconfigurator_core`` wheel (``systems/data/<system>/<kind>/<backend>/
<version>/*.parquet``). This module

1. **extracts** (``python -m cmperf.calibration.tables --wheel PATH [--platform h100]``) a
   small set of rows from the wheel (a zip, read with :mod:`zipfile`; the Parquet files with
   pandas/pyarrow) and writes them to ``cmperf/reference/measured-tables/<platform>.csv``,
   with a header comment naming the package, its version, the wheel's SHA-256 and every file
   read. The extract is committed: tests and CI read it, never the wheel (82 MB, not a
   dependency of cmperf);
2. **fits** on the extract (numpy and pandas only), and prints a report:

   - per platform, collective implementation and group size: an alpha-beta line
     ``t = a + x / B`` for the all-reduce, where ``x`` is cmperf's own network bytes of a ring
     all-reduce of ``S`` bytes, ``2 (n - 1) / n x S`` (cmperf/cost/ops.py ``tp_allreduce_op``),
     so ``B`` reads as a tier's ``bandwidth_Bps`` (bus bandwidth) and ``a`` as its per-call
     floor (``collectives.call_floor_s``); and the faster of two such lines (a low-latency and
     a high-bandwidth algorithm, :class:`Protocols`);
   - per platform and phase (context = prefill, generation = decode): measured time / cmperf's
     own time of the attention core for the same shape (the ops of cmperf/cost/ops.py timed by
     cmperf/cost/roofline.py on the platform's spec, its efficiencies), and the fit
     ``t = a + r x tokens + c x t_busy`` (:class:`AttentionLine`): ``a`` the kernel's fixed
     time (compare ``kernel_launch_s``), ``r`` a cost per query token the core's FLOPs and
     bytes leave out, ``c`` a multiple of cmperf's roofline busy time; where the roofline term
     dominates, the spec efficiency of the bound term over measured / busy is the efficiency
     the table implies;

   each with its leave-one-size-out error (the fit without every row of one message size, or
   one sequence length, predicting them). Errors are relative: predicted / measured - 1.

What the tables are, read from the wheel (not documented there, inferred and said plainly):
``latency`` is in milliseconds; an all-reduce's ``message_size`` counts elements of its dtype
(NCCL's FP16 rows take 1.5-2x its INT8 rows of the same ``message_size``, and FP16 at 2 bytes
per element gives a 445 GB/s bus bandwidth at 8 GPUs, the NVLink4 line rate 450; at 1 byte it
would be 222); a generation row's ``step`` is the cached tokens before the new one (its
``isl`` is 1): it attends ``step + 1`` keys.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import itertools
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

TABLE_DIR = Path(__file__).resolve().parent.parent / "reference" / "measured-tables"
PACKAGE = "aiconfigurator_core"

# cmperf platform -> (aiconfigurator system directory, cmperf hardware system)
PLATFORMS = {
    "h100": ("h100_sxm", "h100-cluster"),
    "h200": ("h200_sxm", "h200-cluster"),
    "b200": ("b200_sxm", "b200-cluster"),
    "gb200": ("gb200", "gb200-nvl72"),
    "gb300": ("gb300", "gb300-nvl72"),
}

# All-reduce tables read: (backend, version, file, column naming the implementation, the rows
# kept). The newest version of each backend in the 0.12.0 wheel, CUDA-graph rows only (an
# eager call adds the host's launch, which cmperf counts apart: cmperf/cost/host.py). GB300 alone
# also has vLLM 0.27.0 (the only vLLM there with 8- and 16-GPU rows): not read, every platform's
# vLLM rows are 0.24.0's, the version stacks/vllm.yaml names.
COMM_TABLES = (
    ("nccl", "2.29.2", "nccl_perf.parquet", None, {"op_name": "all_reduce", "nccl_dtype": "half"}),
    ("vllm", "0.24.0", "custom_allreduce_perf.parquet", "backend", {"backend": "vllm_graph"}),
    ("sglang", "0.5.14", "custom_allreduce_perf.parquet", "backend", {"backend": "sglang_graph"}),
    ("trtllm", "1.3.0rc20", "custom_allreduce_perf.parquet", "implementation", {"implementation": "trtllm"}),
)
ELEMENT_B = {"half": 2, "bfloat16": 2, "int8": 1, "fp8": 1, "float": 4}

# Attention tables read: vLLM 0.24.0 (FlashAttention-3 on Hopper, FlashInfer's TRT-LLM kernels
# on Blackwell), the shape of Llama-3.1-70B at TP 1 (64 query heads, 8 KV heads, head dim 128:
# cmperf's models/llama-3.1-70b.yaml), BF16 activations and cache, no window.
ATTENTION_BACKEND = ("vllm", "0.24.0")
ATTENTION_MODEL = "llama-3.1-70b"
ATTENTION_SHAPE = {"num_heads": 64, "num_key_value_heads": 8, "head_dim": 128, "window_size": 0,
                   "attn_dtype": "bfloat16", "kv_cache_dtype": "bfloat16", "beam_width": 1}
ATTENTION_KERNELS = {  # per phase: the kernel kept where a table holds several
    "context": ("vllm_flash_attn_fa3", "vllm_flashinfer_trtllmprefill"),
    "generation": ("vllm_flash_attn_fa3", "vllm_flashinfer_trtllmdecode"),
}

INTEGER_COLUMNS = ["num_gpus", "message_elems", "elem_B", "batch", "isl", "kv_len", "heads", "kv_heads", "head_dim"]
# MLA tables read: SGLang 0.5.14 (FlashAttention-3's MLA path on Hopper, TRT-LLM's MLA kernel on
# Blackwell), DeepSeek-V3's shape at TP 1 (128 heads; cmperf's models/deepseek-v3.yaml), BF16
# activations and cache; every fourth power of two of the batch (the tables step by 2x).
MLA_BACKEND = ("sglang", "0.5.14")
MLA_MODEL = "deepseek-v3"
MLA_SHAPE = {"num_heads": 128, "tp_size": 1, "mla_dtype": "bfloat16", "kv_cache_dtype": "bfloat16"}
MLA_BATCHES = (1, 4, 16, 64, 256, 1024)

# the model whose shape each attention kind's rows have
KIND_MODEL = {"context_attention": ATTENTION_MODEL, "generation_attention": ATTENTION_MODEL,
              "context_mla": MLA_MODEL, "generation_mla": MLA_MODEL}

COLUMNS = ["kind", "backend", "version", "impl", "file", "num_gpus", "message_elems", "elem_B",
           "batch", "isl", "kv_len", "heads", "kv_heads", "head_dim", "latency_ms"]


# --------------------------------------------------------------------------- extraction
def _parquet(z: zipfile.ZipFile, name: str) -> pd.DataFrame:
    return pd.read_parquet(io.BytesIO(z.read(name)))


def _select(df: pd.DataFrame, where: dict) -> pd.DataFrame:
    keep = np.ones(len(df), dtype=bool)
    for col, value in where.items():
        keep &= (df[col] == value).to_numpy()
    return df[keep]


def package_of(z: zipfile.ZipFile) -> tuple[str, str]:
    """(name, version) from the wheel's METADATA."""
    meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
    fields = dict(line.split(": ", 1) for line in z.read(meta).decode().splitlines() if ": " in line)
    return fields["Name"], fields["Version"]


def extract(wheel: str | Path, platform: str) -> tuple[pd.DataFrame, dict]:
    """The rows of ``platform`` this module uses, read from the wheel, and where they came
    from (package, version, the wheel's SHA-256, the files read)."""
    system = PLATFORMS[platform][0]
    wheel = Path(wheel)
    base = f"{PACKAGE}/systems/data/{system}/"
    rows, files = [], []
    with zipfile.ZipFile(wheel) as z:
        name, version = package_of(z)
        names = set(z.namelist())
        for backend, ver, fname, impl_col, where in COMM_TABLES:
            rel = f"comm/{backend}/{ver}/{fname}"
            if base + rel not in names:
                continue
            df = _select(_parquet(z, base + rel), where)
            files.append(rel)
            dtype_col = "nccl_dtype" if "nccl_dtype" in df else "allreduce_dtype"
            rows.append(pd.DataFrame({
                "kind": "all_reduce", "backend": backend, "version": ver,
                "impl": df[impl_col] if impl_col else backend, "file": rel,
                "num_gpus": df["num_gpus"], "message_elems": df["message_size"],
                "elem_B": df[dtype_col].map(ELEMENT_B), "latency_ms": df["latency"]}))
        for (backend, ver), table, shape in ((ATTENTION_BACKEND, "attention", ATTENTION_SHAPE), (MLA_BACKEND, "mla", MLA_SHAPE)):
            for phase in ("context", "generation"):
                rel = f"{table}/{backend}/{ver}/{phase}_{table}_perf.parquet"
                if base + rel not in names:
                    continue
                df = _select(_parquet(z, base + rel), shape)
                if table == "attention":  # the kernel kept where the table holds several
                    df = df[df["kernel_source"].isin(ATTENTION_KERNELS[phase])]
                    heads = {"heads": df["num_heads"], "kv_heads": df["num_key_value_heads"], "head_dim": df["head_dim"]}
                else:  # every fourth power of two of the batch; a shape collected twice: its median
                    df = df[df["batch_size"].isin(MLA_BATCHES)]
                    df = df.groupby(["kernel_source", "batch_size", "isl", "step"], as_index=False)["latency"].median()
                    heads = {"heads": shape["num_heads"]}
                files.append(rel)
                kv = df["isl"] if phase == "context" else df["step"] + 1
                rows.append(pd.DataFrame({
                    "kind": f"{phase}_{table}", "backend": backend, "version": ver, "impl": df["kernel_source"],
                    "file": rel, "batch": df["batch_size"], "isl": df["isl"], "kv_len": kv, **heads,
                    "latency_ms": df["latency"]}))
        for rel in sorted({f"{'/'.join(f.split('/')[:3])}/collection_meta.yaml" for f in files}):
            if base + rel not in names:
                raise ValueError(f"{wheel.name}: {base + rel} missing (the version of a table is read from it)")
    out = pd.concat(rows, ignore_index=True).reindex(columns=COLUMNS)
    for col in INTEGER_COLUMNS:  # blank where a kind has none, never rounded by the float format
        out[col] = out[col].astype("Int64")
    out = out.sort_values(["kind", "backend", "impl", "num_gpus", "message_elems", "batch", "isl", "kv_len"],
                          na_position="first", kind="stable").reset_index(drop=True)
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    meta = {"package": name, "version": version, "wheel": wheel.name, "sha256": digest,
            "system": system, "base": base, "files": files}
    return out, meta


def write_extract(df: pd.DataFrame, meta: dict, path: str | Path) -> Path:
    """The extract as CSV behind a ``#`` header giving its source."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    head = [f"# Measured kernel tables extracted by cmperf/calibration/tables.py (docs/calibration.md,",
            f"# 'Measured GPU tables (aiconfigurator)'). Source: {meta['package']} {meta['version']} "
            f"(NVIDIA aiconfigurator, Apache-2.0),",
            f"# wheel {meta['wheel']} sha256 {meta['sha256']}, system '{meta['system']}'.",
            "# latency_ms: milliseconds per call (per layer for attention); message_elems: elements of elem_B bytes;",
            "# kv_len: keys each query attends at most (context: isl; generation: step + 1).",
            f"# Files read (under {meta['base']}):"]
    head += [f"#   {f}" for f in meta["files"]]
    text = "\n".join(head) + "\n" + df.to_csv(index=False, float_format="%.6g", lineterminator="\n")
    path.write_text(text)
    return path


def read_extract(platform: str, directory: str | Path = TABLE_DIR) -> tuple[pd.DataFrame, dict]:
    """A committed extract and its header (package, version, wheel, files)."""
    path = Path(directory) / f"{platform}.csv"
    lines = path.read_text().splitlines()
    header = [ln[1:].strip() for ln in lines if ln.startswith("#")]
    source = next(h for h in header if "Source: " in h)
    package, version = source.split("Source: ", 1)[1].split(" (", 1)[0].split(" ")
    files = [h for h in header if h.endswith(".parquet")]
    df = pd.read_csv(path, comment="#")
    return df, {"package": package, "version": version, "files": files, "path": path}


# --------------------------------------------------------------------------- fits
def fit_terms(X, t) -> np.ndarray:
    """Non-negative coefficients ``c`` of ``t = X c``, least squares in relative error (each
    row's residual ``(X c) / t - 1``, linear in ``c``): the unconstrained solution on every
    subset of the columns (the others 0), the best of those with no negative coefficient
    (exact for the two or three terms used here)."""
    X, t = np.asarray(X, dtype=float), np.asarray(t, dtype=float)
    A = X / t[:, None]
    one = np.ones_like(t)
    best = None
    for k in range(X.shape[1], 0, -1):
        for cols in itertools.combinations(range(X.shape[1]), k):
            sol = np.linalg.lstsq(A[:, cols], one, rcond=None)[0]
            if (sol < 0).any():
                continue
            c = np.zeros(X.shape[1])
            c[list(cols)] = sol
            sse = float(np.sum((A @ c - 1.0) ** 2))
            if best is None or sse < best[0] - 1e-15:
                best = (sse, c)
    return best[1] if best is not None else np.zeros(X.shape[1])


@dataclass
class Line:
    """``t = a + x / B`` (``B`` infinite where the fit found no slope): one latency floor and
    one bandwidth, the shape of a collective in cmperf (per-call floor + bytes / tier
    bandwidth, cmperf/cost/roofline.py)."""

    a: float
    B: float

    def __call__(self, x) -> np.ndarray:
        x = np.asarray(x, dtype=float)
        return self.a + (x / self.B if np.isfinite(self.B) else 0.0 * x)


def fit_line(x, t) -> Line:
    """The :class:`Line` of rows (``x``, ``t``), ``a >= 0`` and ``B > 0``, least squares in
    relative error, as :func:`fit_terms` but in closed form (the leave-one-out searches fit
    tens of thousands of lines): the 2 x 2 normal equations on unit-norm columns, else the
    better one-term fit."""
    x, t = np.asarray(x, dtype=float), np.asarray(t, dtype=float)
    u, v = 1.0 / t, x / t
    nu, nv = np.sqrt(u @ u), np.sqrt(v @ v)
    if nv == 0:
        return Line(float(u.sum() / (u @ u)), float("inf"))
    p, q = u / nu, v / nv
    pq, p1, q1 = p @ q, p.sum(), q.sum()
    det = 1.0 - pq * pq
    if det > 1e-14:
        a, inv = (p1 - pq * q1) / det / nu, (q1 - pq * p1) / det / nv
        if a >= 0 and inv >= 0:
            return Line(float(a), float(1.0 / inv) if inv > 0 else float("inf"))
    a_only, inv_only = u.sum() / (u @ u), v.sum() / (v @ v)  # one-term fits (both positive)
    if np.sum((a_only * u - 1) ** 2) <= np.sum((inv_only * v - 1) ** 2):
        return Line(float(a_only), float("inf"))
    return Line(0.0, float(1.0 / inv_only))


@dataclass
class Protocols:
    """The faster of two lines, ``t = min(a1 + x / B1, a2 + x / B2)``: a library that picks,
    per message size, the faster of a low-latency and a high-bandwidth algorithm (NCCL's
    LL / Simple protocols, a custom all-reduce's one-shot and two-shot kernels, then NCCL).
    Never decreasing in ``x``: the smaller of two increasing lines."""

    small: Line
    large: Line

    def __call__(self, x) -> np.ndarray:
        return np.minimum(self.small(x), self.large(x))


def fit_protocols(x, t, min_rows: int = 3) -> Protocols:
    """The :class:`Protocols` of rows (``x``, ``t``): one line fitted below a split of the
    sorted sizes, one above (at least ``min_rows`` sizes each), the split that gives their
    minimum the least squared relative error."""
    x, t = np.asarray(x, dtype=float), np.asarray(t, dtype=float)
    sizes = np.unique(x)
    best = None
    for k in range(min_rows, len(sizes) - min_rows + 1):
        lo = x < sizes[k]
        p = Protocols(fit_line(x[lo], t[lo]), fit_line(x[~lo], t[~lo]))
        sse = float(np.sum((p(x) / t - 1.0) ** 2))
        if best is None or sse < best[0]:
            best = (sse, p)
    if best is None:
        line = fit_line(x, t)
        return Protocols(line, line)
    return best[1]


def held_out(x, t, key, fit=fit_line) -> np.ndarray:
    """Leave one value of ``key`` out: per row, the relative error of ``fit`` (a callable of
    ``x``, ``t`` returning a model) on the rows of every other value of ``key`` (a message
    size, a sequence length)."""
    x, t, key = (np.asarray(v) for v in (x, t, key))
    err = np.full(len(t), np.nan)
    for k in np.unique(key):
        out = key == k
        if (~out).sum() < 2:
            continue
        model = fit(x[~out], t[~out])
        err[out] = model(x[out]) / t[out] - 1.0
    return err


def allreduce_bytes(elems, elem_B, n) -> np.ndarray:
    """cmperf's network bytes per die of a ring all-reduce of ``elems`` elements over ``n``
    dies (cmperf/cost/ops.py ``tp_allreduce_op``): 2 (n - 1) / n of the buffer."""
    n = np.asarray(n, dtype=float)
    return 2 * (n - 1) / n * np.asarray(elems, dtype=float) * np.asarray(elem_B, dtype=float)


def collective_fits(df: pd.DataFrame) -> pd.DataFrame:
    """Per all-reduce implementation and group size: the alpha-beta line (the shape cmperf's
    collectives have) and the two-protocol minimum (:class:`Protocols`), each with its
    errors in sample and with one message size held out, and the measured smallest-size
    time."""
    ar = df[df["kind"] == "all_reduce"]
    out = []
    for (backend, version, impl, n), g in ar.groupby(["backend", "version", "impl", "num_gpus"], sort=True):
        x = allreduce_bytes(g["message_elems"], g["elem_B"], n)
        t = g["latency_ms"].to_numpy() * 1e-3
        line, two = fit_line(x, t), fit_protocols(x, t)
        err = np.abs(held_out(x, t, g["message_elems"]))
        err2 = np.abs(held_out(x, t, g["message_elems"], fit_protocols))
        first = np.argmin(g["message_elems"].to_numpy())
        out.append({"backend": backend, "version": version, "impl": impl, "num_gpus": int(n), "rows": len(g),
                    "a_s": line.a, "B_Bps": line.B, "floor_measured_s": float(t[first]), "x_min_B": float(x[first]),
                    "in_sample_median": float(np.median(np.abs(line(x) / t - 1))),
                    "held_out_median": float(np.nanmedian(err)), "held_out_max": float(np.nanmax(err)),
                    "a_small_s": two.small.a, "B_small_Bps": two.small.B, "a_large_s": two.large.a,
                    "B_large_Bps": two.large.B,
                    "two_held_out_median": float(np.nanmedian(err2)), "two_held_out_max": float(np.nanmax(err2)),
                    "file": g["file"].iloc[0]})
    return pd.DataFrame(out)


def attention_model_s(df: pd.DataFrame, platform: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, dict]:
    """cmperf's own times of the attention core for each attention row of ``df``: the busy
    time (compute, softmax and HBM per the roofline), the launch latency and the bound, from
    cmperf/cost/ops.py's ops of the kind's model (:data:`KIND_MODEL`: GQA, or absorbed MLA in
    decode and MHA-like MLA in prefill) on the platform's hardware file (docs/model.md §2, §3),
    with the spec's efficiencies."""
    from ..cost import ops, roofline
    from ..predict import load_specs

    busy = np.full(len(df), np.nan)
    latency = np.full(len(df), np.nan)
    bound = np.full(len(df), "", dtype=object)
    for kind in df["kind"].unique():
        sel = (df["kind"] == kind).to_numpy()
        hw, m = load_specs(PLATFORMS[platform][1], KIND_MODEL[kind]).views()
        a = m.attention
        g = df[sel]
        if kind.endswith("_attention") and not ((g["heads"] == a.num_heads) & (g["kv_heads"] == a.num_kv_heads)
                                                & (g["head_dim"] == a.head_dim)).all():
            raise ValueError(f"{platform}: attention rows are not the shape of {KIND_MODEL[kind]}")
        if kind.endswith("_mla") and not (g["heads"] == a.num_heads).all():
            raise ValueError(f"{platform}: MLA rows are not the shape of {KIND_MODEL[kind]}")
        b = g["batch"].to_numpy(dtype=float)
        L = g["kv_len"].to_numpy(dtype=float)
        if kind.startswith("context"):
            core = ops.attention_prefill_ops(m, b * L, L, 1.0, tier="nvlink")
        else:
            core = ops.attention_decode_ops(m, b, b, L, 1.0)
        core = next(o for o in core if o.name == "attention_core")
        t = roofline.op_times(roofline.columns([core]), hw)
        busy[sel] = np.asarray(t.busy_s)[0]
        latency[sel] = np.broadcast_to(np.asarray(t.latency_s)[0], b.shape)
        bound[sel] = np.asarray(t.bound())[0]
    eff = hw.chip.efficiency
    spec = {"attention_compute": float(eff.attention_compute), "memory_bandwidth": float(eff.memory_bandwidth),
            "kernel_launch_s": float(hw.chip.latency.kernel_launch_s)}
    return busy, latency, bound, spec


@dataclass
class AttentionLine:
    """``t = a + r x rows + c x t_busy``: a fixed time per call, a cost per query row (token)
    beyond the core's FLOPs and bytes, and a multiple of cmperf's roofline busy time."""

    a: float
    r: float
    c: float

    def __call__(self, X) -> np.ndarray:
        X = np.asarray(X, dtype=float)
        return self.a + self.r * X[:, 0] + self.c * X[:, 1]


def fit_attention(X, t) -> AttentionLine:
    """The :class:`AttentionLine` of rows ``X`` (query rows, cmperf busy seconds) and times ``t``,
    non-negative, least squares in relative error (:func:`fit_terms`)."""
    X = np.asarray(X, dtype=float)
    a, r, c = fit_terms(np.column_stack([np.ones(len(X)), X]), t)
    return AttentionLine(float(a), float(r), float(c))


def attention_fits(df: pd.DataFrame, platform: str) -> pd.DataFrame:
    """Per attention phase: measured / cmperf's time (the attention core's busy time plus its
    launch, at the spec's efficiencies), the :class:`AttentionLine` and its held-out errors
    (one sequence length left out), and the efficiency the rows imply where the roofline term
    is at least 90 % of the fitted time."""
    att = df[df["kind"].isin(list(KIND_MODEL))].reset_index(drop=True)
    if att.empty:
        return pd.DataFrame()
    busy, latency, bound, spec = attention_model_s(att, platform)
    out = []
    for kind, g in att.groupby("kind", sort=False):
        i = g.index.to_numpy()
        t = g["latency_ms"].to_numpy() * 1e-3
        X = np.column_stack([(g["batch"] * g["isl"]).to_numpy(dtype=float), busy[i]])
        ratio = t / (busy[i] + latency[i])
        fit = fit_attention(X, t)
        err = np.abs(held_out(X, t, g["kv_len"], fit_attention))
        roof = fit.c * busy[i] >= 0.9 * fit(X)
        main = pd.Series(bound[i][roof] if roof.any() else bound[i]).value_counts().index[0]
        spec_eff = spec["memory_bandwidth"] if main == "memory" else spec["attention_compute"]
        roof_ratio = float(np.median(t[roof] / busy[i][roof])) if roof.any() else float("nan")
        out.append({"kind": kind, "backend": g["backend"].iloc[0], "version": g["version"].iloc[0],
                    "impl": ",".join(sorted(g["impl"].unique())), "rows": len(g),
                    "ratio_median": float(np.median(ratio)), "ratio_min": float(ratio.min()),
                    "ratio_max": float(ratio.max()),
                    "a_s": fit.a, "r_s": fit.r, "c": fit.c, "kernel_launch_s": spec["kernel_launch_s"],
                    "roof_rows": int(roof.sum()), "roof_bound": main, "roof_ratio": roof_ratio,
                    "spec_efficiency": spec_eff, "implied_efficiency": spec_eff / roof_ratio,
                    "in_sample_median": float(np.median(np.abs(fit(X) / t - 1))),
                    "held_out_median": float(np.nanmedian(err)), "held_out_max": float(np.nanmax(err)),
                    "file": g["file"].iloc[0]})
    return pd.DataFrame(out)


# the chip's attention_implementations key of each attention table: (the stack's kernel, phase, kind)
KIND_LINE = {"context_attention": ("prefill", "gqa"), "generation_attention": ("decode", "gqa"),
             "context_mla": ("prefill", "mla"), "generation_mla": ("decode", "mla")}


def attention_lines(att: pd.DataFrame, package: str) -> dict:
    """The chip's ``attention_implementations`` of :func:`attention_fits`' rows: the backend
    (the stack's name for its kernels: vllm, sglang) -> phase -> kind -> {call_s, row_s,
    busy_efficiency, source} (docs/model.md §11.3; 4 significant digits); ``package``: the
    extract's package and version, as its source."""
    out: dict = {}
    for _, r in att.iterrows():
        if not r.c > 0:
            raise ValueError(f"{r.kind} {r.backend}: the fit gives no busy term (c = {r.c}): not a line to ship")
        phase, kind = KIND_LINE[r.kind]
        out.setdefault(r.backend, {}).setdefault(phase, {})[kind] = {
            "call_s": float(f"{r.a_s:.4g}"), "row_s": float(f"{r.r_s:.4g}"), "busy_efficiency": float(f"{1 / r.c:.4g}"),
            "source": f"MEASURED: {package} {r.file} ({r.backend} {r.version}, {r.impl} "
                      f"rows; cmperf/reference/measured-tables): t = a + r x rows + c x cmperf's busy time fitted by "
                      f"python -m cmperf.calibration.tables, one sequence length held out: median "
                      f"{r.held_out_median:.1%}"}
    return out


def attention_yaml(lines: dict) -> str:
    """:func:`attention_lines` as the chip file's block."""
    text = ["attention_implementations:"]
    for impl, phases in lines.items():
        text.append(f"  {impl}:")
        for phase, kinds in phases.items():
            text.append(f"    {phase}:")
            for kind, v in kinds.items():
                text.append(f"      {kind}: {{call_s: {v['call_s']:.4g}, row_s: {v['row_s']:.4g}, "
                            f"busy_efficiency: {v['busy_efficiency']:.4g}, source: \"{v['source']}\"}}")
    return "\n".join(text)


# --------------------------------------------------------------------------- report
def report(platforms, directory: str | Path = TABLE_DIR, out=sys.stdout) -> dict:
    """Fit every table of each platform's extract and print, per table, its source and
    version, the constants fitted and the held-out errors; returns {platform: (collective
    fits, attention fits)}."""
    results = {}
    for p in platforms:
        df, meta = read_extract(p, directory)
        coll, att = collective_fits(df), attention_fits(df, p)
        results[p] = (coll, att)
        print(f"== {p} ({PLATFORMS[p][1]}): {meta['package']} {meta['version']}, {len(df)} rows of "
              f"cmperf/reference/measured-tables/{meta['path'].name}", file=out)
        print("  all-reduce (CUDA-graph rows), x = 2 (n-1)/n x bytes (cmperf's ring bytes per GPU; B = bus "
              "bandwidth); held out: one message size", file=out)
        print("    alpha-beta t = a + x/B  |  two protocols t = min(a1 + x/B1, a2 + x/B2)", file=out)
        for _, r in coll.iterrows():
            print(f"    {r.backend} {r.version} {r.impl} TP{r.num_gpus} ({r.rows} sizes; {r.file}): "
                  f"a = {r.a_s * 1e6:.2f} us (smallest size {r.floor_measured_s * 1e6:.2f} us), "
                  f"B = {r.B_Bps / 1e9:.0f} GB/s, held out median {r.held_out_median:.1%} max {r.held_out_max:.1%}"
                  f"  |  {r.a_small_s * 1e6:.2f} us + {r.B_small_Bps / 1e9:.0f} GB/s, "
                  f"{r.a_large_s * 1e6:.2f} us + {r.B_large_Bps / 1e9:.0f} GB/s, "
                  f"held out median {r.two_held_out_median:.1%} max {r.two_held_out_max:.1%}", file=out)
        if len(coll):
            print(f"    median over the tables of the held-out median: alpha-beta {coll.held_out_median.median():.1%}, "
                  f"two protocols {coll.two_held_out_median.median():.1%}", file=out)
        print(f"  attention ({ATTENTION_MODEL} shape at TP 1: 64 / 8 heads, head dim 128, BF16; MLA: {MLA_MODEL}, "
              "128 heads, BF16), t = a + r x tokens + c x cmperf's busy time; held out: one sequence length", file=out)
        for _, r in att.iterrows():
            print(f"    {r.kind} {r.backend} {r.version} {r.impl} ({r.rows} rows; {r.file}): measured / cmperf "
                  f"median {r.ratio_median:.2f} (range {r.ratio_min:.2f}-{r.ratio_max:.2f}); a = {r.a_s * 1e6:.2f} us "
                  f"(spec launch {r.kernel_launch_s * 1e6:.2f}), r = {r.r_s * 1e9:.1f} ns per token, c = {r.c:.3f}; "
                  f"held out median {r.held_out_median:.1%} max {r.held_out_max:.1%} (in sample "
                  f"{r.in_sample_median:.1%}); {r.roof_rows} rows roofline-dominated ({r.roof_bound}): measured / busy "
                  f"{r.roof_ratio:.2f} -> {r.roof_bound} efficiency {r.implied_efficiency:.3f} "
                  f"(spec {r.spec_efficiency:.3f})", file=out)
    return results


def markdown(results: dict) -> tuple[str, str]:
    """The all-reduce and attention tables docs/calibration.md quotes ("Measured GPU tables
    (aiconfigurator)"), from :func:`report`'s results."""
    ar = ["| platform | implementation | TP | α-β: a | B | held out median / max | "
          "two protocols: a₁ + B₁, a₂ + B₂ | held out median / max |", "|---|---|---|---|---|---|---|---|"]
    att = ["| platform | phase (kernel) | rows | measured / cmperf, median (range) | a | r per token | c | "
           "held out median / max | roofline-dominated rows: measured / busy → efficiency (spec) |",
           "|---|---|---|---|---|---|---|---|---|"]
    for p, (coll, attention) in results.items():
        for _, r in coll.iterrows():
            ar.append(f"| {p} | {r.backend} {r.version} ({r.impl}) | {r.num_gpus} | {r.a_s * 1e6:.2f} µs "
                      f"({r.floor_measured_s * 1e6:.2f}) | {r.B_Bps / 1e9:.0f} GB/s | {r.held_out_median:.1%} / "
                      f"{r.held_out_max:.0%} | {r.a_small_s * 1e6:.2f} µs + {r.B_small_Bps / 1e9:.0f} GB/s, "
                      f"{r.a_large_s * 1e6:.1f} µs + {r.B_large_Bps / 1e9:.0f} GB/s | {r.two_held_out_median:.1%} / "
                      f"{r.two_held_out_max:.0%} |")
        for _, r in attention.iterrows():
            phase = r.kind.replace("_attention", " GQA").replace("_mla", " MLA")
            att.append(f"| {p} | {phase} ({r.backend} {r.version} {r.impl}) | {r.rows} | {r.ratio_median:.2f} "
                       f"({r.ratio_min:.2f}–{r.ratio_max:.2f}) | {r.a_s * 1e6:.1f} µs (launch "
                       f"{r.kernel_launch_s * 1e6:.2f}) | {r.r_s * 1e9:.1f} ns | {r.c:.3f} | {r.held_out_median:.1%} / "
                       f"{r.held_out_max:.0%} | {r.roof_rows}: {r.roof_ratio:.2f} → {r.roof_bound} "
                       f"{r.implied_efficiency:.3f} ({r.spec_efficiency:.3f}) |")
    return "\n".join(ar), "\n".join(att)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m cmperf.calibration.tables", description=__doc__.split("\n\n")[0])
    ap.add_argument("--wheel", help="aiconfigurator_core wheel to extract from (else: fit the committed extracts)")
    ap.add_argument("--platform", action="append", choices=sorted(PLATFORMS),
                    help="platform (repeatable; default: all)")
    ap.add_argument("--out-dir", default=str(TABLE_DIR), help="where the extracts are written and read")
    ap.add_argument("--markdown", action="store_true", help="also print the tables docs/calibration.md quotes")
    ap.add_argument("--yaml", action="store_true",
                    help="also print each chip file's attention_implementations block (hardware/<chip>.yaml)")
    args = ap.parse_args(argv)
    platforms = args.platform or list(PLATFORMS)
    if args.wheel:
        for p in platforms:
            df, meta = extract(args.wheel, p)
            path = write_extract(df, meta, Path(args.out_dir) / f"{p}.csv")
            print(f"wrote {path} ({len(df)} rows from {len(meta['files'])} files of {meta['package']} "
                  f"{meta['version']})")
    results = report(platforms, args.out_dir)
    if args.markdown:
        print("\n\n".join(markdown(results)))
    if args.yaml:
        for p, (_, att) in results.items():
            _, meta = read_extract(p, args.out_dir)
            lines = attention_lines(att, f"{meta['package']} {meta['version']}")
            print(f"# hardware/{p}.yaml ({PLATFORMS[p][1]}'s chip)\n{attention_yaml(lines)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
