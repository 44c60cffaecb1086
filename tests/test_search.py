"""cmperf search: SLO-constrained design-space search (README.md, "Search")."""

import io
import json
import sys

import numpy as np
import pandas as pd
import pytest

from cmperf.errors import ConfigError, SpecError
from cmperf.predict import predict
from cmperf.defaults import DECODE_DEFAULTS
from cmperf.search import (SEARCH_COLUMNS, check_sweeps, chunks, evaluate, grid_axes, pareto_mask, parse_list,
                           parse_sweeps, search)

BATCHES = list(range(1, 257))
UB = "system.tiers.ub.bandwidth_Bps"


@pytest.fixture(scope="module")
def by_slo():
    from cmperf.predict import load_specs

    specs = load_specs()
    return {slo: search("decode", {"batch": BATCHES, "microbatches": [1, 2], "prompt_len": 4096}, slo, specs)
            for slo in (15, 30, 50)}


def test_chosen_batch_grows_with_the_slo_and_meets_it(by_slo):
    best = {slo: r.best for slo, r in by_slo.items()}
    assert all(b is not None for b in best.values())
    for slo, b in best.items():
        assert b["tpot_ms"] <= slo and bool(b["fits"]) and b["prompt_len"] == 4096
    assert best[15]["batch"] < best[30]["batch"] < best[50]["batch"]
    assert best[15]["throughput_per_npu"] < best[30]["throughput_per_npu"] < best[50]["throughput_per_npu"]


def test_top_n_is_every_qualifying_row_sorted_by_throughput(by_slo):
    r = by_slo[30]
    t = r.table
    ok = t[t["fits"] & (t["tpot_ms"] <= 30)]
    assert (r.table["meets_slo"] == (t["fits"] & (t["tpot_ms"] <= 30))).all()
    top = r.top
    assert len(top) == min(10, len(ok)) and list(top["rank"]) == list(range(1, len(top) + 1))
    assert top["throughput_per_npu"].is_monotonic_decreasing
    assert top["throughput_per_npu"].iat[0] == ok["throughput_per_npu"].max()


def test_pareto_frontier_is_the_non_dominated_set(by_slo):
    r = by_slo[50]
    fit = r.table[r.table["fits"]]
    lat, thr = fit["tpot_ms"].to_numpy(), fit["throughput_per_npu"].to_numpy()
    le, ge = lat[None, :] <= lat[:, None], thr[None, :] >= thr[:, None]
    dominated = (le & ge & ((lat[None, :] < lat[:, None]) | (thr[None, :] > thr[:, None]))).any(axis=1)
    assert (fit["on_pareto"].to_numpy() == ~dominated).all()
    p = r.pareto
    assert p["tpot_ms"].is_monotonic_increasing and p["throughput_per_npu"].is_monotonic_increasing
    assert np.allclose(p["tokens_per_s_per_user"], 1000 / p["tpot_ms"])
    assert not r.table.loc[~r.table["fits"], "on_pareto"].any()


def test_pareto_mask_ties_and_random_points():
    rng = np.random.default_rng(0)
    lat, thr = rng.integers(0, 20, 300).astype(float), rng.integers(0, 20, 300).astype(float)
    mask = pareto_mask(lat, thr)
    for i in range(len(lat)):  # brute force over 300 test points
        beaten = ((lat <= lat[i]) & (thr >= thr[i]) & ((lat < lat[i]) | (thr > thr[i]))).any()  # Pareto-dominated
        assert not (mask[i] and beaten)
        if not beaten:  # non-dominated: on the frontier unless an identical point came first
            same = np.flatnonzero((lat == lat[i]) & (thr == thr[i]))
            assert mask[same].sum() == 1
    assert pareto_mask(np.array([]), np.array([])).size == 0


def test_grid_of_one_equals_predict(specs):
    values = {"batch": 64, "microbatches": 2, "mtp_k": 2}
    r = search("decode", values, 1000, specs)
    p = predict("decode", values, specs).table
    assert len(r.table) == 1
    pd.testing.assert_frame_equal(r.table[p.columns], p, check_dtype=False)


def test_swept_field_equals_set_override(specs):
    from cmperf.predict import load_specs

    r = search("decode", {"batch": 96}, 1000, specs, sweeps={UB: [50e9]})
    p = predict("decode", {"batch": 96}, load_specs(sets=[f"{UB}=50e9"])).table
    assert r.table["tpot_ms"].iat[0] == pytest.approx(p["tpot_ms"].iat[0], rel=1e-12)
    assert r.table[UB].iat[0] == 50e9


def test_chunked_evaluation_equals_one_call(specs):
    values = {"batch": [8, 16, 24, 32], "mtp": [1, 0], "mtp_k": [1, 2], "dies": [64, 128, 320],
              "redundant_experts": 32, "shared_copies": 32}
    one = evaluate("decode", values, specs, {UB: [135e9, 270e9]}, chunk_rows=10**6)
    seen = []
    many = evaluate("decode", values, specs, {UB: [135e9, 270e9]}, on_chunk=lambda d, t: seen.append((d, t)),
                    chunk_rows=5)
    pd.testing.assert_frame_equal(one.table, many.table)
    assert len(many.invalid) == len(one.invalid) > 0  # EP 128 does not divide the 320 expert instances
    assert len(seen) > 3 and seen[-1][0] == seen[-1][1] == 4 * 3 * 3 * 2  # MTP off: one mtp_k only


def test_chunks_cover_the_product_in_order():
    axes = [("a", [1, 2, 3]), ("b", list(range(10))), ("c", [0]), ("d", [5, 6])]
    parts = chunks(axes, rows=7)
    rows = [r for p in parts for r in pd.MultiIndex.from_product([v for _, v in p]).tolist()]
    assert rows == pd.MultiIndex.from_product([v for _, v in axes]).tolist()
    assert max(np.prod([len(v) for _, v in p]) for p in parts) <= 7


def test_mtp_off_is_not_evaluated_once_per_k():
    blocks = grid_axes("decode", {"mtp": [1, 0], "mtp_k": [1, 2, 3]})
    assert [dict(b)["mtp_k"] for b in blocks] == [[1, 2, 3], [1]]


@pytest.mark.parametrize("text,expected", [("8,16,32", [8, 16, 32]), ("8:32:8", [8, 16, 24, 32]), ("1:3", [1, 2, 3]),
                                           ("1,4:8:2", [1, 4, 6, 8]), ("0.5:1.0:0.25", [0.5, 0.75, 1.0]),
                                           ("100e9:300e9:100e9", [100e9, 200e9, 300e9])])
def test_parse_list(text, expected):
    assert parse_list(text, "--x") == expected


@pytest.mark.parametrize("text", ["8:", "8:4", "1:5:0", "a", "1,,2", "1.5", "1:2:3:4"])
def test_parse_list_errors(text):
    with pytest.raises(ConfigError, match="--x"):
        parse_list(text, "--x", integer=True)


def test_sweep_paths_are_checked():
    with pytest.raises(SpecError, match="--sweep system.no_such"):
        check_sweeps(parse_sweeps(["system.no_such=1,2"]), "cloudmatrix384", "deepseek-r1")
    with pytest.raises(SpecError, match="--sweep"):
        check_sweeps(parse_sweeps([f"{UB}=-1,2"]), "cloudmatrix384", "deepseek-r1")
    with pytest.raises(ConfigError, match="expected KEY.PATH"):
        parse_sweeps(["system.tiers.ub.bandwidth_Bps"])
    with pytest.raises(ConfigError, match="--set"):
        check_sweeps(parse_sweeps([f"{UB}=1e9"]), "cloudmatrix384", "deepseek-r1", [f"{UB}=2e9"])


def test_bad_slo_and_top(specs):
    for slo in (0, -5, float("nan")):
        with pytest.raises(ConfigError, match="positive"):
            search("decode", {"batch": 8}, slo, specs)
    with pytest.raises(ConfigError, match="--top"):
        search("decode", {"batch": 8}, 50, specs, top=0)


# --------------------------------------------------------------------------- CLI
def test_cli_csv_round_trips_with_documented_columns(cli, tmp_path):
    out = tmp_path / "d.csv"
    code, stdout, err = cli("search", "decode", "--tpot-slo", "30", "--batch", "8:64:8", "--mtp-k", "1,2",
                            "--sweep", f"{UB}=135e9,270e9", "--out", out, "--format", "csv", "--top", "3")
    assert code == 0, err
    t = pd.read_csv(out, comment="#")  # after the provenance lines
    assert len(t) == 8 * 2 * 2 * 2  # batch x microbatches x mtp_k x UB bandwidth
    inputs = ["phase", *DECODE_DEFAULTS, UB]
    outputs = ["microbatches_used", "iteration_ms", "tpot_ms", "layer_us", "throughput_per_npu", "tokens_per_s_per_user",
               "tokens_per_s_per_tflops", "memory_per_die_bytes", "max_batch_per_npu", "fits"]
    assert set(inputs) | set(outputs) | set(SEARCH_COLUMNS) <= set(t.columns)
    assert t["fits"].dtype == bool and t["meets_slo"].dtype == bool and t["on_pareto"].dtype == bool
    assert sorted(t["rank"].dropna().astype(int)) == [1, 2, 3]
    assert (t["slo_ms"] == 30).all() and (t.loc[t["meets_slo"], "tpot_ms"] <= 30).all()
    top = pd.read_csv(io.StringIO(stdout), comment="#")  # --format csv prints the top-N, same columns
    assert list(top.columns) == list(t.columns) and list(top["rank"]) == [1, 2, 3]
    best = t.loc[t["rank"] == 1].iloc[0]
    assert best["throughput_per_npu"] == t.loc[t["meets_slo"], "throughput_per_npu"].max()


def test_cli_json_has_only_data_on_stdout(cli):
    code, out, err = cli("search", "decode", "--tpot-slo", "50", "--batch", "16,96,250", "--format", "json")
    assert code == 0, err
    data = json.loads(out)
    assert data["summary"]["configurations"] == 6 and data["summary"]["latency"] == "tpot_ms"
    assert data["top"][0]["rank"] == 1 and data["top"][0]["tpot_ms"] <= 50
    assert len(data["pareto"]) == data["summary"]["pareto_points"]


def test_cli_sweep_over_invalid_field_is_a_clear_error(cli):
    code, out, err = cli("search", "decode", "--tpot-slo", "50", "--sweep", "system.no_such=1,2")
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("cmperf: error: --sweep system.no_such")
    assert "Traceback" not in err


@pytest.mark.parametrize("args,match", [(["--tpot-slo", "0"], "positive"), (["--tpot-slo", "50", "--batch", "8:x"], "--batch"),
                                        (["--tpot-slo", "50", "--microbatches", "3"], "microbatches"),
                                        (["--tpot-slo", "50", "--top", "0"], "--top"),
                                        (["--tpot-slo", "50", "--out", "/no/such/dir/x.csv"], "does not exist"),
                                        (["--tpot-slo", "50", "--dies", "7", "--redundant-experts", "32",
                                          "--shared-copies", "32"], "invalid")])
def test_cli_bad_input_exit_2(cli, args, match):
    code, out, err = cli("search", "decode", *args)
    assert code == 2 and err.startswith("cmperf: error:") and match in err, err


def test_cli_invalid_points_are_dropped_and_counted(cli):
    code, out, err = cli("search", "decode", "--tpot-slo", "50", "--batch", "32,64", "--dies", "64,128,320",
                         "--redundant-experts", "32", "--shared-copies", "32", "--format", "json")
    assert code == 0, err
    s = json.loads(out)["summary"]
    assert s["dropped_invalid"] == 4 and s["evaluated"] == 8  # EP128 does not divide 320 expert instances
    assert "dropped 4 of 12 configurations as invalid" in err


def test_cli_nothing_meets_the_slo(cli, tmp_path):
    out = tmp_path / "none.csv"
    code, stdout, err = cli("search", "decode", "--tpot-slo", "1", "--batch", "8,16", "--format", "json", "--out", out)
    assert code == 1
    assert "no configuration meets --tpot-slo 1 ms" in err and "fastest that fits" in err
    data = json.loads(stdout)
    assert data["top"] == [] and data["message"] and out.exists()


def test_cli_prefill_search(cli):
    code, out, err = cli("search", "prefill", "--ttft-slo", "2000", "--tokens-per-npu", "4096:32768:4096",
                         "--format", "json")
    assert code == 0, err
    data = json.loads(out)
    assert data["summary"]["latency"] == "ttft_ms"
    assert all(r["ttft_ms"] <= 2000 and r["fits"] for r in data["top"])


def test_cli_plot_writes_png(cli, tmp_path):
    pytest.importorskip("matplotlib")
    png, csv = tmp_path / "s.png", tmp_path / "s.csv"
    code, out, err = cli("search", "decode", "--tpot-slo", "30", "--batch", "8:128:8", "--plot", png, "--out", csv)
    assert code == 0, err
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 20_000
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no temporary left behind
    # report: re-rank the saved search under a tighter SLO without re-running the grid
    code, out, err = cli("search", "report", csv, "--slo", "20", "--format", "json")
    assert code == 0, err
    data = json.loads(out)
    assert data["summary"]["slo_ms"] == 20 and all(r["tpot_ms"] <= 20 for r in data["top"])


def test_cli_plot_without_matplotlib_is_a_clear_error(cli, monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib now raises ImportError
    code, out, err = cli("search", "decode", "--tpot-slo", "30", "--batch", "8", "--plot", tmp_path / "x.png")
    assert code == 2 and "pip install 'cmperf[plot]'" in err
    assert not (tmp_path / "x.png").exists()


def test_search_module_keeps_cli_start_light():
    import subprocess

    code = ("import sys, cmperf.cli; heavy = [m for m in ('matplotlib', 'cmperf.search', 'cmperf.plots', 'rich.progress') "
            "if m in sys.modules]; print(heavy)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
