"""The data the figures are drawn from (cmperf/plots.py), not their pixels: one Pareto frontier
per swept value, each its own points' frontier and ordered as the physics orders them; achievable
roofs below the peaks by exactly the chip's efficiencies; the compare bars and settings; the plan's
lines and operating point. Each figure is also drawn once (Agg) to check it is written."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

pytest.importorskip("matplotlib")

from cmperf import plots  # noqa: E402
from cmperf.predict import load_specs  # noqa: E402
from cmperf.search import search  # noqa: E402

UB = "system.tiers.ub.bandwidth_Bps"
HBM = "chip.die.hbm_bandwidth_Bps"
UB_VALUES = [50e9, 135e9, 270e9]
HARDWARE = Path(__file__).resolve().parent.parent / "hardware"
PNG = b"\x89PNG\r\n\x1a\n"


def _value(path: str, *keys):
    """A sourced number as the YAML file writes it (YAML 1.1 reads 1.6e12 without a sign as text)."""
    node = yaml.safe_load((HARDWARE / path).read_text())
    for k in keys:
        node = node[k]
    return float(node["value"])


@pytest.fixture(scope="module")
def swept():
    values = {"batch": list(range(8, 257, 8)), "microbatches": [1, 2]}
    return search("decode", values, 50.0, load_specs(), {UB: UB_VALUES}, top=5)


# --------------------------------------------------------------------------- one frontier per swept value
def _dominated(lat, thr, i) -> bool:
    """Some other point is at least as good in both and better in one (brute force)."""
    better = (lat <= lat[i]) & (thr >= thr[i]) & ((lat < lat[i]) | (thr > thr[i]))
    return bool(better.any())


def test_one_frontier_per_swept_value_each_of_its_own_points(swept):
    groups = plots.sweep_frontiers(swept)
    assert [g.values[UB] for g in groups] == UB_VALUES
    t = swept.table
    for g in groups:
        mine = t[(t[UB] == g.values[UB]) & t["fits"]]
        assert len(g.points) == len(mine) > 0
        lat, thr = mine["tpot_ms"].to_numpy(float), mine["throughput_per_npu"].to_numpy(float)
        on = {(a, b) for a, b in zip(g.frontier["tpot_ms"], g.frontier["throughput_per_npu"])}
        for i in range(len(mine)):  # the frontier is exactly the points of this value nothing dominates
            assert ((lat[i], thr[i]) in on) == (not _dominated(lat, thr, i))
        assert (np.diff(g.frontier["tpot_ms"].to_numpy()) >= 0).all()
        ok = mine[mine["tpot_ms"] <= 50.0]
        assert g.best["throughput_per_npu"] == ok["throughput_per_npu"].max()


def test_more_ub_bandwidth_never_lowers_the_frontier(swept):
    """Each configuration runs no slower on a faster fabric, so at every TPOT the best throughput
    of the higher bandwidth's frontier is at least the lower one's; and 50 GB/s is slower somewhere."""
    groups = plots.sweep_frontiers(swept)
    lo = max(g.frontier["tpot_ms"].min() for g in groups)
    hi = min(g.frontier["tpot_ms"].max() for g in groups)
    x = np.linspace(lo, hi, 400)

    def best_under(f, xs):  # brute force: the largest throughput with TPOT <= x
        lat, thr = f["tpot_ms"].to_numpy(float), f["throughput_per_npu"].to_numpy(float)
        return np.array([thr[lat <= v].max() if (lat <= v).any() else 0.0 for v in xs])

    curves = [best_under(g.frontier, x) for g in groups]
    for g, c in zip(groups, curves):
        assert np.array_equal(plots.frontier_at(g.frontier, "tpot_ms", x), c)
    for slow, fast in zip(curves, curves[1:]):
        assert (fast >= slow * (1 - 1e-12)).all()
    assert (curves[1] > curves[0] * 1.01).any()  # the sweep matters: 50 GB/s binds somewhere


def test_without_a_sweep_the_one_frontier_is_the_search_frontier():
    r = search("decode", {"batch": list(range(8, 129, 8))}, 50.0, load_specs(), top=3)
    (g,) = plots.sweep_frontiers(r)
    assert g.values == {}
    pd.testing.assert_frame_equal(g.frontier[["tpot_ms", "throughput_per_npu"]],
                                  r.pareto[["tpot_ms", "throughput_per_npu"]], check_dtype=False)


def test_swept_search_figure_is_written(swept, tmp_path):
    from cmperf.search import breakdown

    specs = load_specs()
    ops, _ = breakdown(swept, specs)
    png = tmp_path / "s.png"
    plots.search_figure(swept, ops, specs, png, "test")
    assert png.read_bytes()[:8] == PNG


# --------------------------------------------------------------------------- achievable roofs
def test_achievable_roofs_are_the_peaks_times_the_efficiencies():
    """Ascend 910C, DeepSeek-R1 in W8A8: INT8 matmuls at matmul_compute, BF16 attention at
    attention_compute, both under HBM x memory_bandwidth (the numbers of ascend-910c.yaml)."""
    chip = "ascend-910c.yaml"
    peak8, peak16 = _value(chip, "die", "peak_flops_per_s", "int8"), _value(chip, "die", "peak_flops_per_s", "bf16")
    hbm, mem = _value(chip, "die", "hbm_bandwidth_Bps"), _value(chip, "efficiency", "memory_bandwidth")
    mm, attn = _value(chip, "efficiency", "matmul_compute"), _value(chip, "efficiency", "attention_compute")
    r = {x.label: x for x in plots.roofs(load_specs(), pd.Series(dtype=float), [])}
    assert r["INT8 peak"].flops_per_s == peak8 and r["INT8 peak"].hbm_Bps == hbm and not r["INT8 peak"].achievable
    assert r["BF16 peak"].flops_per_s == peak16
    assert r["INT8 matmul achievable"].flops_per_s == pytest.approx(peak8 * mm, rel=1e-12)
    assert r["BF16 attention achievable"].flops_per_s == pytest.approx(peak16 * attn, rel=1e-12)
    for a in (r["INT8 matmul achievable"], r["BF16 attention achievable"]):
        assert a.hbm_Bps == pytest.approx(hbm * mem, rel=1e-12)
        peak = r[f"{a.dtype.upper()} peak"]
        # below the peak roof by exactly the efficiency: memory's under both ridges, compute's over both
        low, high = min(a.ridge, peak.ridge) / 10, max(a.ridge, peak.ridge) * 10
        assert a.at(low) / peak.at(low) == pytest.approx(mem, rel=1e-12)
        assert a.at(high) / peak.at(high) == pytest.approx(a.compute_efficiency, rel=1e-12)


def test_achievable_roof_takes_the_dtype_own_efficiency_and_the_swept_bandwidth():
    """GB200 with FP4 matmuls: the FP4 GEMM efficiency of matmul_by_dtype (0.7616), not
    matmul_compute (0.603); a swept HBM bandwidth moves both slopes."""
    specs = load_specs("gb200-nvl72", "deepseek-r1", ["model.precision.matmul=fp4"])
    fp4 = _value("gb200.yaml", "die", "peak_flops_per_s", "fp4")
    own = float(yaml.safe_load((HARDWARE / "gb200.yaml").read_text())["efficiency"]["matmul_by_dtype"]["fp4"]["compute"]["value"])
    mem = _value("gb200.yaml", "efficiency", "memory_bandwidth")
    r = {x.label: x for x in plots.roofs(specs, pd.Series({HBM: 4e12}), [HBM])}
    assert r["FP4 matmul achievable"].flops_per_s == pytest.approx(fp4 * own, rel=1e-12)
    assert r["FP4 peak"].hbm_Bps == 4e12 and r["FP4 matmul achievable"].hbm_Bps == pytest.approx(4e12 * mem)


# --------------------------------------------------------------------------- compare
@pytest.fixture(scope="module")
def comparisons():
    from cmperf.compare import compare

    return {ph: compare(ph, ["cloudmatrix384", "h800-cluster"]) for ph in ("decode", "prefill")}


@pytest.mark.parametrize("phase,latency", [("decode", "tpot_ms"), ("prefill", "ttft_ms")])
def test_compare_bars_show_throughput_per_tflops_and_latency_with_bands(comparisons, phase, latency, tmp_path):
    cmp = comparisons[phase]
    t = cmp.table
    thr, per, lat = plots.compare_bars(cmp)
    assert list(thr["value"]) == list(t["throughput_per_npu"]) and list(lat["value"]) == list(t[latency])
    assert list(lat["lo"]) == list(t[f"{latency}_lo"]) and list(lat["hi"]) == list(t[f"{latency}_hi"])
    assert ("TPOT" if phase == "decode" else "TTFT") in lat["title"]
    # tokens/s per TFLOPS = throughput / the chip's peak: the same relative band
    np.testing.assert_allclose(per["value"], t["throughput_per_npu"] / t["npu_peak_TFLOPS"], rtol=1e-12)
    np.testing.assert_allclose(per["hi"] / per["value"], thr["hi"] / thr["value"], rtol=1e-12)
    np.testing.assert_allclose(per["lo"] / per["value"], thr["lo"] / thr["value"], rtol=1e-12)
    for _, row in t.iterrows():
        text = plots.compare_settings(phase, row)
        assert f"{row['dies']:,.0f} dies" in text and f"EP{row['ep']:,.0f}" in text and str(row["dtype"]).upper() in text
        if phase == "decode":
            assert f"batch {row['batch']:,.0f}/NPU" in text and f"kv_len {row['kv_len']:,.0f}" in text and "MTP" in text
        else:
            assert f"{row['tokens_per_npu']:,.0f} tokens/NPU" in text and f"attention TP{row['attn_tp']:,.0f}" in text
    png = tmp_path / "c.png"
    plots.compare_figure(cmp, png)
    assert png.read_bytes()[:8] == PNG


def test_banded_numbers_keep_three_digits_and_the_band_to_the_same_decimals():
    assert plots._banded(1915.7, 1773.8, 2082.3) == "1,916 ± 154"
    assert plots._banded(50.11, 46.10, 54.12) == "50.1 ± 4.0"
    assert plots._banded(1.2738, 1.1794, 1.3831) == "1.27 ± 0.10"


# --------------------------------------------------------------------------- plan
@pytest.fixture(scope="module")
def planned():
    from cmperf.plan import plan

    return plan(shape_names=["pd", "colocated"])


def test_plan_lines_one_per_shape_and_the_chosen_rate_meets_both_slos(planned, tmp_path):
    from cmperf.plan.planner import curves

    best, slo = planned.best, planned.workload.slo
    rates = np.linspace(0, best["goodput_rps"] * 1.5, 61)
    lines = plots.plan_lines(planned, rates)
    shapes = list(dict.fromkeys(planned.table["shape"]))
    assert [ln["shape"] for ln in lines][:len(shapes)] == shapes  # best shape first
    assert {ln["shape"] for ln in lines} == {"pd", "colocated"}  # an asked shape without a deployment is named
    first = lines[0]
    assert first["rate_rps"] == best["goodput_rps"] and first["at_ttft_ms"] == best["ttft_ms"]
    assert first["at_ttft_ms"] <= slo.ttft_s * 1e3 * (1 + 1e-9) and first["at_tpot_ms"] <= slo.tpot_s * 1e3
    # the lines are the planner's curves; past the largest rate within the SLOs one of them is broken
    c = curves(planned, planned.table.iloc[0], rates)
    np.testing.assert_allclose(first["ttft_ms"], np.where(np.isfinite(c["ttft_s"]), c["ttft_s"] * 1e3, np.nan))
    past = rates > best["max_rps"] * 1.01
    over = (np.nan_to_num(first["ttft_ms"], nan=np.inf)[past] > slo.ttft_s * 1e3) | \
           (np.nan_to_num(first["tpot_ms"], nan=np.inf)[past] > slo.tpot_s * 1e3)
    assert over.all()
    png = tmp_path / "p.png"
    plots.plan_figure(planned, png)
    assert png.read_bytes()[:8] == PNG


def test_plan_sweep_series_takes_the_swept_field_as_x_and_one_series_per_other_value(tmp_path):
    from cmperf.plan.workload import SLO

    rows = [{"rate": "max", "prefix_hit": h, UB: v, "shape": "pd", "goodput_rps": 100 * (1 + float(h)) + v / 1e9,
             "binding": "prefill TTFT", "ttft_ms": 2000.0, "tpot_ms": 40.0}
            for h in ("0", "0.5") for v in (270e9, 50e9, 135e9)]
    table = pd.DataFrame(rows)
    x, series = plots.plan_sweep_series(table, [UB, "prefix_hit", "rate"])
    assert x == UB and [label for label, _ in series] == ["prefix_hit = 0", "prefix_hit = 0.5"]
    for _, part in series:
        assert list(part[UB]) == [50e9, 135e9, 270e9]
    x, series = plots.plan_sweep_series(table[table[UB] == 50e9], [UB, "prefix_hit", "rate"])
    assert x == "prefix_hit" and len(series) == 1
    png = tmp_path / "ps.png"
    plots.plan_sweep_figure(table, [UB, "prefix_hit", "rate"], SLO(2.0, 0.05), "t", png)
    assert png.read_bytes()[:8] == PNG


def test_cli_plan_sweep_plot_writes_a_png(cli, tmp_path):
    """--plot with --sweep drew nothing before (the sweep path ignored it)."""
    png = tmp_path / "plan.png"
    code, out, err = cli("plan", "--shapes", "pd", "--sweep", f"{UB}=50e9,270e9", "--plot", png, "--format", "json")
    assert code == 0, err
    assert png.read_bytes()[:8] == PNG
