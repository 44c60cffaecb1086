"""The machines of issue 18 (hardware/*.yaml): Ascend 950PR / 950DT / 960 with the Atlas 950 and
960 SuperPoDs and Atlas 350 card servers, H200, GB300 NVL72, MI300X / MI355X; the dtypes they
add (MXFP8, MXFP4, HiF8) and how a dtype a chip lacks is adapted.

Published anchors come from ../shared/reference/next-hardware-and-models.md: the SuperPoD and rack
totals the vendors and their restatements quote (8 EF FP8, 1,152 TB, 16.3 PB/s; 20 TB, 576 TB/s,
1.08 EF, 130 TB/s), each checked against the per-chip numbers the files hold, with the stated
tolerance. The dtype bytes are the OCP MX layout worked out by hand. Structural checks: more HBM
bandwidth never slows decode (950DT against 950PR, H200 against H100), and a memory-bound GEMM
in a microscaled dtype moves its scales too."""

import json
import math
from pathlib import Path

import numpy as np
import pytest
import yaml

from cmperf.predict import load_specs, predict
from cmperf.specs.dtypes import DTYPE_BITS, DTYPE_BYTES, closest_dtype, dtypes_of

REPO = Path(__file__).resolve().parent.parent
LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
NEW_CHIPS = ["ascend-950pr", "ascend-950dt", "ascend-960", "h200", "gb300", "mi300x", "mi355x"]
NEW_SYSTEMS = ["atlas-950-superpod", "atlas-960-superpod", "atlas-350-cluster", "h200-cluster", "gb300-nvl72",
               "mi300x-cluster", "mi355x-cluster"]


def raw(name):
    """A hardware file read with a plain YAML parser (numbers as the file writes them)."""
    return yaml.load((REPO / "hardware" / f"{name}.yaml").read_text(), Loader=LOADER)


def num(sourced):
    return float(sourced["value"])


def show(name):
    """What ``cmperf hw show NAME`` prints (cmperf/facts.py), keyed by (section, quantity); the
    command itself runs on every shipped file in tests/test_facts.py."""
    from cmperf.facts import chip_facts, system_facts
    from cmperf.specs.loader import load_chip, load_hardware

    rows = chip_facts(load_chip(name)[0]) if name in NEW_CHIPS else system_facts(load_hardware(name))
    return {(r["section"], r["quantity"]): r for r in rows}


# --------------------------------------------------------------------------- dtypes
def test_microscaled_bytes_carry_one_e8m0_scale_per_32_elements():
    """OCP MX v1.0: 32 elements share one 8-bit power-of-two scale (gpt-oss's MXFP4: 'FP4 e2m1 +
    power-of-two scale per 32 values')."""
    assert DTYPE_BYTES["mxfp4"] == 0.5 + 1 / 32 == 0.53125
    assert DTYPE_BYTES["mxfp8"] == 1 + 1 / 32 == 1.03125
    assert DTYPE_BYTES["hif8"] == 1  # HiFloat8: one byte, no block scale
    assert DTYPE_BITS["mxfp4"] == DTYPE_BITS["fp4"] == 4 and DTYPE_BITS["mxfp8"] == DTYPE_BITS["hif8"] == 8


def test_the_schema_names_every_dtype_of_the_table():
    import typing

    from cmperf.specs.schema import Dtype, PeakFlops

    assert set(typing.get_args(Dtype)) == set(DTYPE_BYTES) == set(PeakFlops.model_fields)


@pytest.mark.parametrize("want, chip, runs", [
    ("fp8", "ascend-910c", "int8"),  # the paper's W8A8: same width, the only 8-bit dtype
    ("mxfp4", "gb300", "fp4"),  # same width, same kind (float)
    ("fp4", "ascend-950dt", "mxfp4"),  # the 950's 4-bit format
    ("mxfp4", "h200", "fp8"),  # no 4-bit: the narrowest wider width, a float before INT8
    ("mxfp8", "h200", "fp8"),
    ("hif8", "gb300", "fp8"),  # unscaled float before INT8
    ("mxfp8", "ascend-910c", "int8"),
    ("int8", "ascend-950dt", "int8"),  # present: itself
    ("bf16", "ascend-950dt", "bf16"),
])
def test_a_dtype_the_chip_lacks_runs_as_its_closest(want, chip, runs):
    have = [d for d in DTYPE_BYTES if d in raw(chip)["die"]["peak_flops_per_s"]]  # widest first
    assert closest_dtype(want, have) == runs


def test_an_fp4_model_file_runs_as_mxfp4_on_the_950_with_a_note(tmp_path):
    text = (REPO / "models" / "deepseek-v3.yaml").read_text()
    assert "\n  matmul: fp8\n" in text
    (tmp_path / "v3-fp4.yaml").write_text(text.replace("name: deepseek-v3", "name: v3-fp4")
                                          .replace("\n  matmul: fp8\n", "\n  matmul: fp8\n  experts: fp4\n", 1))
    specs = load_specs("atlas-950-superpod", str(tmp_path / "v3-fp4.yaml"))
    assert specs.model.precision.experts == "mxfp4"
    assert len(specs.notes) == 1 and "fp4 -> mxfp4" in specs.notes[0] and "ascend-950dt" in specs.notes[0]


def test_a_narrow_float_kv_cache_needs_the_chip_to_run_it(cli):
    """An MXFP8 / HiF8 cache is read by attention kernels in that format: refused in one line on
    the 910C (it names the field and the chip's closest), accepted on the 950."""
    code, _, err = cli("predict", "decode", "--set", "model.precision.kv_cache=mxfp8")
    assert code == 2 and "kv_cache = mxfp8" in err and "ascend-910c" in err and "kv_cache=int8" in err
    assert len(err.strip().splitlines()) == 1
    code, out, err = cli("predict", "decode", "--hardware", "atlas-950-superpod", "--set", "model.precision.kv_cache=hif8",
                         "--format", "json")
    assert code == 0, err
    r8 = json.loads(out)
    code, out, _ = cli("predict", "decode", "--hardware", "atlas-950-superpod", "--format", "json")
    bf16 = json.loads(out)  # deepseek-v3's file: a BF16 cache
    assert r8["kv_cache_per_die_bytes"] / r8["batch"] == pytest.approx(bf16["kv_cache_per_die_bytes"] / bf16["batch"] / 2, rel=1e-9)


def test_a_memory_bound_microscaled_gemm_moves_its_scales():
    """M 16 x N 16384 x K 16384 on the 950DT is HBM-bound (2 M N K = 8.6 GFLOP: ~11 us at the
    FP8 peak x efficiency; the 268 MB of weights: ~80 us): in MXFP8 it reads the 1/32 of scale
    bytes too. Time ratio = bytes ratio = (M K + K N) 1.03125 + 2 M N over (M K + K N) + 2 M N."""
    m, n, k = 16, 16384, 16384
    s = load_specs("atlas-950-superpod")
    t = {dt: float(predict("gemm", {"m": m, "n": n, "k": k, "groups": 1, "dtype": dt}, s).table["gemm_us"].iloc[0])
         for dt in ("fp8", "mxfp8", "hif8", "mxfp4")}
    ratio = ((m * k + k * n) * 1.03125 + 2 * m * n) / ((m * k + k * n) + 2 * m * n)
    launch = num(raw("ascend-950dt")["latency"]["kernel_launch_s"]) * 1e6
    assert (t["mxfp8"] - launch) / (t["fp8"] - launch) == pytest.approx(ratio, rel=1e-6)
    assert t["hif8"] == t["fp8"]  # one byte, no scale
    mx4 = ((m * k + k * n) * 0.53125 + 2 * m * n) / ((m * k + k * n) + 2 * m * n)
    assert (t["mxfp4"] - launch) / (t["fp8"] - launch) == pytest.approx(mx4, rel=1e-6)


# --------------------------------------------------------------------------- every file loads and shows
@pytest.mark.parametrize("name", NEW_CHIPS + NEW_SYSTEMS)
def test_each_new_file_shows_with_its_confidence(name):
    rows = show(name)
    section = "chip" if name in NEW_CHIPS else "topology"
    assert rows[(section, "confidence")]["value"] == raw(name)["confidence"]


def test_announced_and_claimed_machines_are_low_confidence_in_hw_list(cli):
    code, out, err = cli("hw", "list", "--format", "json")
    assert code == 0, err
    rows = {r["name"]: r for r in json.loads(out)}
    for name in ("ascend-950dt", "ascend-960", "atlas-950-superpod", "atlas-960-superpod", "gb300", "gb300-nvl72",
                 "mi355x", "mi355x-cluster"):
        assert rows[name]["confidence"] == "low", name
    for name in ("ascend-950dt", "ascend-960", "atlas-950-superpod", "atlas-960-superpod"):
        assert "announced" in raw(name)["description"], name


def test_the_950_counts_one_die_per_package_as_its_peaks_and_ub_ports_are_per_chip():
    """docs/specs.md#ascend-950: the 950's peaks, HBM and 72 UB lanes are documented per chip,
    so one package is one rank; its system's die count equals its NPU count (CloudMatrix384:
    two per 910C, whose dies are devices with their own HBM)."""
    for chip in ("ascend-950pr", "ascend-950dt", "ascend-960"):
        assert num(raw(chip)["dies_per_package"]) == 1
    assert num(raw("ascend-910c")["dies_per_package"]) == 2


# --------------------------------------------------------------------------- published totals, by hand
def test_atlas_950_superpod_totals_are_the_keynotes():
    """8,192 x 950DT (next §1.2): 8 EF FP8, 16 EF FP4, 1,152 TB, 16.3 PB/s. 8,192 x 973 TFLOPS =
    7.971 EF; 8,192 x 1,946 = 15.94 EF (0.4 % under the rounded keynote figures); 8,192 x 144 GB
    = 1,179,648 GB = 1,152 x 1,024 GB (the keynote's TB counts 1,024 GB); 8,192 x 2 x 1,008 GB/s =
    16.5 PB/s (1.3 % over 16.3)."""
    rows = show("atlas-950-superpod")
    assert rows[("topology", "chips")]["value"] == 8192 == rows[("topology", "dies")]["value"]
    assert rows[("totals", "HBM")]["value"] == 8192 * 144e9 == 1152 * 1024e9
    assert rows[("totals", "dense FP8")]["value"] == pytest.approx(8e18, rel=0.005)
    assert rows[("totals", "dense MXFP4")]["value"] == pytest.approx(16e18, rel=0.005)
    assert rows[("totals", "dense BF16")]["value"] == 8192 * 486e12
    ub = raw("atlas-950-superpod")["tiers"]["ub"]
    assert 8192 * 2 * num(ub["nominal_Bps"]) == pytest.approx(16.3e15, rel=0.015)
    assert num(ub["nominal_Bps"]) == 72 * 112e9 / 8  # 72 lanes x 112 Gbps = 1,008 GB/s each way, 2,016 both
    assert num(ub["bandwidth_Bps"]) == pytest.approx(18 * 53e9 * 0.85, rel=1e-6)  # MSM's 53 GB/s x4 links at 0.85
    assert num(ub["domain_chips"]) == 8192


def test_atlas_960_superpod_totals_are_the_keynotes():
    """15,488 x Ascend 960: 30 EF FP8, 60 EF FP4, 34 PB/s (next §1.2, CLAIM)."""
    rows = show("atlas-960-superpod")
    assert rows[("topology", "chips")]["value"] == 15488
    assert rows[("totals", "dense FP8")]["value"] == pytest.approx(30e18, rel=0.001)
    assert rows[("totals", "dense MXFP4")]["value"] == pytest.approx(60e18, rel=0.001)
    assert 15488 * 2 * num(raw("atlas-960-superpod")["tiers"]["ub"]["nominal_Bps"]) == pytest.approx(34e15, rel=0.005)
    assert rows[("totals", "HBM")]["value"] == 15488 * 288e9


def test_gb300_nvl72_rack_totals_are_the_published_ones():
    """72 GPUs (next §1.4, CLAIM): 20 TB HBM (72 x 279 GB = 20.09 TB), 576 TB/s (72 x 8), FP4
    1.08-1.1 EF (72 x 15 = 1.08), FP8 360 PF, BF16 180 PF, NVLink 130 TB/s (72 x 1.8 = 129.6)."""
    rows = show("gb300-nvl72")
    assert rows[("topology", "chips")]["value"] == 72
    assert rows[("totals", "HBM")]["value"] == pytest.approx(20e12, rel=0.005)
    assert rows[("totals", "HBM bandwidth")]["value"] == pytest.approx(576e12, rel=1e-9)
    assert 1.08e18 <= rows[("totals", "dense FP4")]["value"] * (1 + 1e-9) and rows[("totals", "dense FP4")]["value"] <= 1.1e18
    assert rows[("totals", "dense FP8")]["value"] == pytest.approx(360e15, rel=1e-9)
    assert rows[("totals", "dense BF16")]["value"] == pytest.approx(180e15, rel=1e-9)
    assert 72 * 2 * num(raw("gb300-nvl72")["tiers"]["nvlink"]["nominal_Bps"]) == pytest.approx(130e12, rel=0.005)


def test_950_peaks_are_the_whitepapers_cube_figures():
    """Cube-only peaks of the whitepaper's bins (next §1.1): 950DT 36 cores 1,946 / 973 / 486,
    950PR 32 cores 1,730 / 865 / 432 (MXFP4 / FP8 / BF16); HiF8, MXFP8 and INT8 at the FP8 rate."""
    for chip, cores, (fp4, fp8, bf16), hbm, bw in (("ascend-950dt", 36, (1946, 973, 486), 144e9, 4e12),
                                                   ("ascend-950pr", 32, (1730, 865, 432), 128e9, 1.6e12)):
        d = raw(chip)["die"]
        p = {k: num(v) / 1e12 for k, v in d["peak_flops_per_s"].items()}
        assert (p["mxfp4"], p["fp8"], p["bf16"]) == (fp4, fp8, bf16)
        assert p["hif8"] == p["mxfp8"] == p["int8"] == fp8 and "fp4" not in p
        assert num(d["matrix_units"]) == cores and num(d["vector_units"]) == 2 * cores
        assert (num(d["hbm_capacity_B"]), num(d["hbm_bandwidth_Bps"])) == (hbm, bw)


def test_h200_is_the_h100_die_with_more_hbm():
    h100, h200 = raw("h100")["die"], raw("h200")["die"]
    assert {k: num(v) for k, v in h200["peak_flops_per_s"].items()} == {k: num(v) for k, v in h100["peak_flops_per_s"].items()}
    assert num(h200["matrix_units"]) == num(h100["matrix_units"])
    assert (num(h200["hbm_capacity_B"]), num(h200["hbm_bandwidth_Bps"])) == (141e9, 4.8e12)


def test_mi355x_peaks_halve_with_each_width_from_the_fp4_maximum():
    """Tom's '20.1 PF maximum' FP4 read as the sparse figure: 10.05 dense, 5.025 FP8, 2.51 BF16."""
    p = {k: num(v) for k, v in raw("mi355x")["die"]["peak_flops_per_s"].items()}
    assert p["fp4"] == 20.1e15 / 2 and p["fp8"] == p["fp4"] / 2 and p["bf16"] == p["fp8"] / 2


# --------------------------------------------------------------------------- proxies follow their source
def test_the_ascend_proxies_track_the_910c_fit():
    """The 950 / 960 files take CloudMatrix384's fitted launch, message cost and spread, and its
    fitted vector rate per AI Vector core times their own vector cores: re-fitting the paper
    must not leave them stale."""
    c910, cm = raw("ascend-910c"), raw("cloudmatrix384")
    per_core = num(c910["die"]["vector_ops_per_s"]) / num(c910["die"]["vector_units"])
    for chip in ("ascend-950pr", "ascend-950dt", "ascend-960"):
        d = raw(chip)
        assert num(d["die"]["vector_ops_per_s"]) == pytest.approx(per_core * num(d["die"]["vector_units"]), rel=0.005), chip
        assert num(d["latency"]["kernel_launch_s"]) == pytest.approx(num(c910["latency"]["kernel_launch_s"]), rel=0.005)
        for f in ("matmul_compute", "attention_compute", "memory_bandwidth"):
            assert num(d["efficiency"][f]) == num(c910["efficiency"][f]), (chip, f)
    for system in ("atlas-950-superpod", "atlas-960-superpod", "atlas-350-cluster"):
        for f in ("message_issue_s", "step_time_cv"):
            assert num(raw(system)["collectives"][f]) == pytest.approx(num(cm["collectives"][f]), rel=0.005), (system, f)


def test_gb300_takes_the_gb200_fit():
    gb200, gb300 = raw("gb200"), raw("gb300")
    for f in ("matmul_compute", "memory_bandwidth", "attention_compute"):
        assert num(gb300["efficiency"][f]) == num(gb200["efficiency"][f]), f
    assert num(gb300["efficiency"]["matmul_by_dtype"]["fp4"]["compute"]) == num(gb200["efficiency"]["matmul_by_dtype"]["fp4"]["compute"])
    assert num(gb300["latency"]["kernel_launch_s"]) == num(gb200["latency"]["kernel_launch_s"])
    assert num(raw("gb300-nvl72")["tiers"]["nvlink"]["bandwidth_Bps"]) == num(raw("gb200-nvl72")["tiers"]["nvlink"]["bandwidth_Bps"])


@pytest.mark.parametrize("name", ["h200-cluster", "mi300x-cluster"])
def test_new_platform_values_are_their_micro_benchmark_fit(name):
    """The H200 and MI300X shipped fitted values are what their own micro-benchmark files give
    (re-fit here), and the MI355X, which has no row of its own, holds the MI300X's (the file's
    proxies)."""
    from cmperf.calibration.fit import fit
    from cmperf.calibration.reference import REFERENCE_DIR, load_reference
    from cmperf.calibration.validate import spec_value, specs_for

    ref = load_reference(REFERENCE_DIR / f"{name}-microbenchmarks.yaml")
    specs = specs_for(ref)
    fitted = fit(ref, specs)
    for path, v in fitted.items():
        assert spec_value(specs, path) == pytest.approx(v, rel=0.02), (name, path)
    for proxy in ref.proxies:
        other = load_specs(proxy, ref.model)
        for path, v in fitted.items():
            assert spec_value(other, path) == pytest.approx(spec_value(specs, path), rel=1e-9), (proxy, path)


def test_mi355x_has_the_no_evidence_band_and_h200_its_own():
    from cmperf.bands import band_for, load_bands

    bands = load_bands()
    none = bands["no_evidence"]
    for system in ("mi355x-cluster", "atlas-950-superpod", "atlas-960-superpod", "atlas-350-cluster", "gb300-nvl72"):
        assert system in none["systems"] and band_for("decode", system) == none["decode"]
    for system in ("h200-cluster", "mi300x-cluster"):
        b = band_for("decode", system, "deepseek-v3")
        assert system in bands["systems"] and b.floor and 0 < b.relative < 0.3


# --------------------------------------------------------------------------- structure
GRID = {"batch": [1, 8, 32, 96], "kv_len": [1024, 4096, 16384]}


def test_950dt_memory_never_slows_decode_on_the_950pr():
    """The Atlas 350 cards with the 950DT's HBM (144 GB at 4 TB/s) and everything else the
    950PR's: decode never slower, and faster where it is memory-bound (batch 1: by more than
    half the 2.5x bandwidth ratio's gain, after fixed costs)."""
    g = {"dies": 16, "ep": 16, **GRID}
    pr = predict("decode", g, load_specs("atlas-350-cluster")).table
    dt = predict("decode", g, load_specs("atlas-350-cluster", sets=["chip.die.hbm_bandwidth_Bps=4e12",
                                                                    "chip.die.hbm_capacity_B=144e9"])).table
    ratio = pr["tpot_ms"].to_numpy() / dt["tpot_ms"].to_numpy()
    assert (ratio >= 1 - 1e-12).all() and ratio.max() > 1.5


def test_the_950dt_is_never_slower_than_the_950pr():
    """Field by field the 950DT has at least the 950PR's (more cores, peaks, HBM and bandwidth,
    the same links): on the same system both phases are never slower."""
    pr, dt = raw("ascend-950pr")["die"], raw("ascend-950dt")["die"]
    for f in ("matrix_units", "vector_units", "vector_ops_per_s", "hbm_capacity_B", "hbm_bandwidth_Bps"):
        assert num(dt[f]) >= num(pr[f]), f
    assert all(num(dt["peak_flops_per_s"][k]) >= num(v) for k, v in pr["peak_flops_per_s"].items())
    sets = [f"chip.die.{f}={num(dt[f]):.10g}" for f in ("matrix_units", "vector_units", "vector_ops_per_s",
                                                          "hbm_capacity_B", "hbm_bandwidth_Bps")]
    sets[:2] = [f"chip.die.matrix_units={int(num(dt['matrix_units']))}", f"chip.die.vector_units={int(num(dt['vector_units']))}"]
    sets += [f"chip.die.peak_flops_per_s.{k}={num(v):.10g}" for k, v in dt["peak_flops_per_s"].items()]
    as_dt = load_specs("atlas-350-cluster", sets=sets)
    for phase, g, col in (("decode", {"dies": 16, "ep": 16, **GRID}, "tpot_ms"),
                          ("prefill", {"dies": 16, "ep": 16, "prompt_len": [1024, 4096], "tokens_per_npu": [4096, 16384]}, "ttft_ms")):
        a = predict(phase, g, load_specs("atlas-350-cluster")).table[col].to_numpy()
        b = predict(phase, g, as_dt).table[col].to_numpy()
        assert (b <= a * (1 + 1e-12)).all(), phase


def test_h200_decodes_faster_than_h100_at_the_same_instance():
    """Same GH100 compute, 4.8 against 3.35 TB/s: decode is never slower on the shipped files
    (whose fitted GEMM efficiencies differ by 2 %) and at most the achievable HBM ratio faster,
    (4.8 x 0.8646) / (3.35 x 0.8866) = 1.397."""
    g = {"dies": 16, "ep": 16, "mtp": 0, **GRID}
    for model in ("deepseek-v3", "deepseek-r1"):
        h100 = predict("decode", g, load_specs("h100-cluster", model)).table["tpot_ms"].to_numpy()
        h200 = predict("decode", g, load_specs("h200-cluster", model)).table["tpot_ms"].to_numpy()
        ratio = h100 / h200
        achievable = (4.8e12 * num(raw("h200")["efficiency"]["memory_bandwidth"])) / (
            3.35e12 * num(raw("h100")["efficiency"]["memory_bandwidth"]))
        assert achievable == pytest.approx(1.397, abs=0.001)
        assert (ratio >= 1).all() and (ratio <= achievable + 1e-9).all() and ratio.max() > 1.1, model


def test_gb300_int8_is_the_claimed_cut():
    """VERDA: GB300 INT8 0.165 POPS against 5 PF FP8: an INT8 model's GEMMs run at that rate
    (the file's dtype is kept, not adapted: the chip has INT8)."""
    specs = load_specs("gb300-nvl72", "deepseek-r1")
    assert specs.model.precision.matmul == "int8" and not specs.notes
    p = specs.hardware.chip.die.peak_flops_per_s
    assert p.int8.value / p.fp8.value == pytest.approx(0.033, abs=0.001)


# --------------------------------------------------------------------------- defaults and compare
@pytest.mark.parametrize("system", NEW_SYSTEMS)
@pytest.mark.parametrize("model", ["deepseek-v3", "deepseek-r1"])
def test_each_new_system_predicts_both_phases_with_no_flags(system, model):
    for phase, col in (("decode", "tpot_ms"), ("prefill", "ttft_ms")):
        row = predict(phase, {}, load_specs(system, model)).table.iloc[0]
        assert 0 < row[col] < 1e6 and row["throughput_per_npu"] > 0 and bool(row["fits"]), (system, model, phase)


def test_compare_across_generations_prints_one_table_with_confidence(cli):
    systems = ["cloudmatrix384", "atlas-950-superpod", "gb300-nvl72", "h200-cluster"]
    code, out, err = cli("compare", "decode", "--hardware", ",".join(systems), "--model", "deepseek-v3", "--format", "json")
    assert code == 0 and "Traceback" not in err, err
    rows = json.loads(out)
    rows = rows["rows"] if isinstance(rows, dict) else rows
    assert [r["system"] for r in rows] == systems
    assert [r["confidence"] for r in rows] == ["high", "low", "low", "medium"]
    assert all(r["tpot_ms"] > 0 and math.isfinite(r["tpot_ms"]) for r in rows)
    code, out, err = cli("compare", "decode", "--hardware", ",".join(systems), "--model", "deepseek-v3")
    assert code == 0 and out.count("confidence") == 1 and all(s in out for s in systems)



def test_a_decode_curve_is_read_on_its_rising_branch():
    """A TPOT step (a GEMM wave, a microbatch switch) can make a larger batch serve fewer
    requests: the Atlas 950 SuperPoD's 64 + 16-die AFD instance of DeepSeek-R1 serves 496 req/s
    at batch 96 (48.4 ms) and 480 at batch 104 (54.1 ms), and the planner once read TPOT 57 ms
    off the falling branch, above its 50 ms SLO. By hand, a curve of batches 1, 2, 3, 4 at 10,
    20, 30, 40 ms that serves 1, 3, 2, 4 requests/s: 2.5 req/s is first reached between batch 1
    and 2 (f = (2.5 - 1) / (3 - 1) = 0.75): batch 1.75 at 17.5 ms, not on the 3 -> 2 branch
    (batch 2.5, 25 ms); 3.5 req/s between batch 3 and 4 (f = 0.75); below the curve the smallest
    batch, above it the largest (as np.interp)."""
    from cmperf.plan.instances import DecodeCurves

    c = DecodeCurves(dies=np.array([8.0]), keys=[{"dies": 8.0}], batch=[np.array([1.0, 2.0, 3.0, 4.0])],
                     tpot_s=[np.array([0.01, 0.02, 0.03, 0.04])], capacity_rps=[np.array([1.0, 3.0, 2.0, 4.0])])
    batch, tpot = c.at_rate(np.zeros(4, dtype=int), np.array([2.5, 0.5, 5.0, 3.5]))
    assert batch.tolist() == pytest.approx([1.75, 1.0, 4.0, 3.75]) and tpot.tolist() == pytest.approx([0.0175, 0.01, 0.04, 0.0375])
    mono = DecodeCurves(dies=np.array([8.0]), keys=[{"dies": 8.0}], batch=[np.array([1.0, 2.0, 4.0])],
                        tpot_s=[np.array([0.01, 0.02, 0.03])], capacity_rps=[np.array([1.0, 2.0, 3.0])])
    rates = np.linspace(0.0, 4.0, 17)  # a rising curve reads as np.interp
    assert mono.at_rate(np.zeros(17, dtype=int), rates)[1] == pytest.approx(np.interp(rates, [1.0, 2.0, 3.0], [0.01, 0.02, 0.03]))
