"""The measured GPU tables (aiconfigurator) and their fits (cmperf/calibration/tables.py,
docs/calibration.md "Measured GPU tables (aiconfigurator)"): on the committed extracts and on
synthetic tables whose constants are known by hand; the 82 MB wheel is never needed."""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from cmperf.calibration import tables as T

PLATFORMS = sorted(T.PLATFORMS)
SIZES = 2.0 ** np.arange(8, 31)  # 256 B ... 1 GiB, as the tables' message sizes
# the all-reduce group sizes a platform's tables measured (the others: 2, 4 and 8 GPUs): GB200 no
# 8-GPU rows; GB300 4 GPUs a tray, SGLang's and TRT-LLM's rows over 2 and 4 trays too
GROUP_SIZES = {"gb200": {2, 4}, "gb300": {2, 4, 8, 16}}


@pytest.fixture(scope="module")
def fits():
    out = io.StringIO()
    return T.report(PLATFORMS, out=out), out.getvalue()


def test_alpha_beta_recovered_from_a_synthetic_table():
    # t = 5 us + x / 400 GB/s: at x = 400 kB, 5 + 1 = 6 us; at 4 GB, 10,005 us (by hand)
    a, B = 5e-6, 400e9
    t = a + SIZES / B
    assert a + 4e5 / B == pytest.approx(6e-6) and a + 4e9 / B == pytest.approx(10.005e-3)
    line = T.fit_line(SIZES, t)
    assert line.a == pytest.approx(a, rel=1e-9) and line.B == pytest.approx(B, rel=1e-9)
    assert np.nanmax(np.abs(T.held_out(SIZES, t, SIZES))) < 1e-9  # exact data: nothing to miss held out


def test_alpha_beta_never_negative():
    # times that fall with size: no positive slope fits, so the line is a floor alone
    t = 1e-5 - SIZES * 1e-18
    line = T.fit_line(SIZES, t)
    assert line.a > 0 and np.isinf(line.B)
    assert np.all(np.diff(line(SIZES)) >= 0)


def test_two_protocols_recovered_from_a_synthetic_table():
    # min(3 us + x / 100 GB/s, 20 us + x / 500 GB/s): they cross where
    # x (1/1e11 - 1/5e11) = 17 us, x = 17e-6 / 8e-12 = 2.125 MB (by hand)
    small, large = T.Line(3e-6, 100e9), T.Line(20e-6, 500e9)
    assert small(2.125e6) == pytest.approx(large(2.125e6))
    t = np.minimum(small(SIZES), large(SIZES))
    two = T.fit_protocols(SIZES, t)
    for got, want in ((two.small, small), (two.large, large)):
        assert got.a == pytest.approx(want.a, rel=1e-6) and got.B == pytest.approx(want.B, rel=1e-6)
    assert np.nanmax(np.abs(T.held_out(SIZES, t, SIZES, T.fit_protocols))) < 1e-6


def test_attention_line_recovered_from_a_synthetic_table():
    rng = np.random.default_rng(0)
    X = np.column_stack([rng.integers(1, 4096, 60).astype(float), rng.uniform(1e-6, 1e-3, 60)])
    t = 10e-6 + 50e-9 * X[:, 0] + 1.2 * X[:, 1]
    fit = T.fit_attention(X, t)
    assert (fit.a, fit.r, fit.c) == pytest.approx((10e-6, 50e-9, 1.2), rel=1e-9)


def test_ring_bytes_by_hand():
    # 1,024 BF16 elements over 8 GPUs: 2 x 7/8 x 2,048 B = 3,584 B per GPU
    assert T.allreduce_bytes(1024, 2, 8) == pytest.approx(3584.0)
    assert T.allreduce_bytes(1024, 2, 2) == pytest.approx(2048.0)


def test_extracts_say_their_source():
    for p in PLATFORMS:
        df, meta = T.read_extract(p)
        text = meta["path"].read_text()
        assert meta["package"] == "aiconfigurator-core" and meta["version"] == "0.12.0"
        assert "sha256 " in text and f"system '{T.PLATFORMS[p][0]}'" in text
        assert set(df["file"]) <= set(meta["files"]) and meta["files"]
        assert len(df) <= 750  # a small extract, not the tables
        assert set(df["kind"]) == {"all_reduce", "context_attention", "generation_attention", "context_mla",
                                   "generation_mla"}
        assert (df["latency_ms"] > 0).all()


def test_more_bytes_never_cost_less(fits):
    results, _ = fits
    x = np.logspace(2, 10, 200)
    for coll, _att in results.values():
        for _, r in coll.iterrows():
            for model in (T.Line(r.a_s, r.B_Bps),
                          T.Protocols(T.Line(r.a_small_s, r.B_small_Bps), T.Line(r.a_large_s, r.B_large_Bps))):
                assert np.all(np.diff(model(x)) >= 0), (r.impl, r.num_gpus)


def test_fitted_collective_not_below_its_measured_floor(fits):
    """At the smallest size measured, a fitted all-reduce is never below the measured time by
    more than its own held-out error (the floor is the row the per-call floor rests on)."""
    results, _ = fits
    for p, (coll, _att) in results.items():
        for _, r in coll.iterrows():
            line = T.Line(r.a_s, r.B_Bps)
            two = T.Protocols(T.Line(r.a_small_s, r.B_small_Bps), T.Line(r.a_large_s, r.B_large_Bps))
            assert line(r.x_min_B) >= r.floor_measured_s * (1 - r.held_out_max), (p, r.impl, r.num_gpus)
            assert two(r.x_min_B) >= r.floor_measured_s * (1 - r.two_held_out_max), (p, r.impl, r.num_gpus)


def test_report_on_the_committed_extracts(fits):
    results, text = fits
    for p in PLATFORMS:
        assert f"== {p} ({T.PLATFORMS[p][1]}): aiconfigurator-core 0.12.0" in text
    for name in ("comm/nccl/2.29.2/nccl_perf.parquet", "comm/vllm/0.24.0/custom_allreduce_perf.parquet",
                 "comm/sglang/0.5.14/custom_allreduce_perf.parquet", "comm/trtllm/1.3.0rc20/custom_allreduce_perf.parquet",
                 "attention/vllm/0.24.0/context_attention_perf.parquet",
                 "attention/vllm/0.24.0/generation_attention_perf.parquet",
                 "mla/sglang/0.5.14/context_mla_perf.parquet", "mla/sglang/0.5.14/generation_mla_perf.parquet"):
        assert name in text
    for p, (coll, att) in results.items():
        assert set(coll["num_gpus"]) == GROUP_SIZES.get(p, {2, 4, 8})
        # the numbers docs/calibration.md records: held-out medians within the 10 % target
        assert coll["two_held_out_median"].median() <= 0.10, p
        assert coll["held_out_median"].median() <= 0.15, p
        assert set(att["kind"]) == {"context_attention", "generation_attention", "context_mla", "generation_mla"}
        gqa = att["kind"].str.endswith("_attention")
        assert (att[gqa]["held_out_median"] <= 0.10).all(), p
        assert (att[~gqa]["held_out_median"] <= 0.25).all(), p  # MLA: outside the target (docs say why)


def test_docs_quote_the_fits(fits):
    """Bookkeeping (benchmarks/mutation.py BOOKKEEPING): docs/calibration.md quotes every line
    of the two tables ``python -m cmperf.calibration.tables --markdown`` prints."""
    results, _ = fits
    doc = (Path(__file__).resolve().parent.parent / "docs" / "calibration.md").read_text()
    order = {p: results[p] for p in ("h100", "h200", "b200", "gb200", "gb300")}
    for table in T.markdown(order):
        missing = [line for line in table.splitlines() if line not in doc]
        assert not missing, missing[:3]


def test_extract_reads_a_wheel(tmp_path):
    """The extraction on a miniature wheel of the same layout (two all-reduce tables and one
    attention table), written and read back."""
    pytest.importorskip("pyarrow")
    base = f"{T.PACKAGE}/systems/data/h100_sxm/"
    nccl = pd.DataFrame({"op_name": ["all_reduce", "all_reduce", "all_gather"], "nccl_dtype": ["half", "int8", "half"],
                         "num_gpus": [8, 8, 8], "message_size": [1024, 1024, 1024], "latency": [0.016, 0.015, 0.01]})
    custom = pd.DataFrame({"backend": ["vllm_graph", "vllm_eager"], "allreduce_dtype": ["bfloat16"] * 2,
                           "num_gpus": [2, 2], "message_size": [2 ** 20, 2 ** 20], "latency": [0.012, 0.02]})
    shape = {k: [v, v] for k, v in T.ATTENTION_SHAPE.items()}
    gen = pd.DataFrame({**shape, "kernel_source": ["vllm_flash_attn_fa3"] * 2, "batch_size": [8, 8], "isl": [1, 1],
                        "step": [1023, 4095], "latency": [0.0186, 0.0653]})
    gen.loc[1, "head_dim"] = 64  # another shape: not kept
    wheel = tmp_path / "aiconfigurator_core-0.12.0-cp311-abi3-manylinux_2_28_x86_64.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        z.writestr("aiconfigurator_core-0.12.0.dist-info/METADATA", "Metadata-Version: 2.4\nName: aiconfigurator-core\n"
                   "Version: 0.12.0\n")
        for rel, df in (("comm/nccl/2.29.2/nccl_perf.parquet", nccl),
                        ("comm/vllm/0.24.0/custom_allreduce_perf.parquet", custom),
                        ("attention/vllm/0.24.0/generation_attention_perf.parquet", gen)):
            buf = io.BytesIO()
            df.to_parquet(buf)
            z.writestr(base + rel, buf.getvalue())
            z.writestr(base + "/".join(rel.split("/")[:3]) + "/collection_meta.yaml", "schema_version: 1\n")
    df, meta = T.extract(wheel, "h100")
    assert meta["files"] == ["comm/nccl/2.29.2/nccl_perf.parquet", "comm/vllm/0.24.0/custom_allreduce_perf.parquet",
                             "attention/vllm/0.24.0/generation_attention_perf.parquet"]
    assert len(df) == 3  # FP16 all-reduce, the graph row, the 64/8/128 shape
    T.write_extract(df, meta, tmp_path / "h100.csv")
    back, info = T.read_extract("h100", tmp_path)
    assert (info["package"], info["version"], info["files"]) == ("aiconfigurator-core", "0.12.0", meta["files"])
    gen_row = back[back["kind"] == "generation_attention"].iloc[0]
    assert (gen_row["kv_len"], gen_row["batch"], gen_row["latency_ms"]) == (1024, 8, 0.0186)
    ar = back[back["kind"] == "all_reduce"].set_index("backend")
    assert ar.loc["nccl", "elem_B"] == 2 and ar.loc["vllm", "message_elems"] == 2 ** 20
