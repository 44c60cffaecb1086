"""Reports keep their provenance and say what they hold; an override that changes nothing is
named (issue 11, items 4-6).

- ``predict --set`` of a field that enters no output prints one warning naming it; the claim
  is checked against the physics: the warned prediction equals the one without the override.
- CSV reports start with ``# key: value`` lines (cmperf version, command, hardware, model,
  every --set and --sweep); ``search report FILE`` re-ranks with them and needs no flags.
- ``predict --breakdown -f csv`` holds the summary, ``validate --sensitivity -f csv`` the
  sensitivity table; JSON reads ``microbatches: "auto"`` when auto was asked.
- The command line's predict path never imports pandas; the Python API still returns
  DataFrames.
"""

import io
import itertools
import json
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from cmperf.columns import Columns, product
from cmperf.predict import inert_fields, load_specs, predict
from cmperf.report import read_provenance

D2D = "system.tiers.die_to_die.latency_s"
HBM = "chip.die.hbm_bandwidth_Bps"


def _warnings(err):
    return [line for line in err.splitlines() if line.startswith("cmperf: warning:")]


# --------------------------------------------------------------------------- inert overrides
def test_inert_set_is_named_once_and_really_changes_nothing(cli):
    """CloudMatrix384's decode runs EP over UB and its attention is data-parallel: nothing
    crosses the die-to-die link alone, so a one-millisecond die-to-die latency changes no output."""
    code, out, err = cli("predict", "decode", "--set", f"{D2D}=1e-3", "--format", "json")
    assert code == 0, err
    warned = _warnings(err)
    assert len(warned) == 1 and f"--set {D2D}" in warned[0] and "changes no output" in warned[0]
    _, plain, _ = cli("predict", "decode", "--format", "json")
    a, b = json.loads(out), json.loads(plain)
    assert a["tpot_ms"] == b["tpot_ms"] and a["throughput_per_npu"] == b["throughput_per_npu"]


def test_a_set_that_matters_is_not_named(cli):
    code, out, err = cli("predict", "decode", "--set", f"{HBM}=3.2e12", "--set", f"{D2D}=1e-3", "--format", "json")
    assert code == 0, err
    warned = _warnings(err)
    assert len(warned) == 1 and D2D in warned[0] and HBM not in warned[0]
    _, plain, _ = cli("predict", "decode", "--format", "json")
    assert json.loads(out)["tpot_ms"] < json.loads(plain)["tpot_ms"]  # twice the HBM bandwidth: faster


def test_inert_fields_groups_rows_by_the_other_inputs():
    """Hand-made table: x changes no output; y changes out at a=1 only; z never varies with
    a fixed (no evidence: not named); w leaves an all-NaN output NaN (NaN = NaN here)."""
    t = Columns({"a": [0, 0, 1, 1], "x": [1.0, 2.0, 1.0, 2.0], "out": [5.0, 5.0, 7.0, 7.0], "nan": [np.nan] * 4})
    assert inert_fields(t, ["a", "x"], ["x"], ["out", "nan"]) == ["x"]
    t = Columns({"a": [0, 0, 1, 1], "y": [1.0, 2.0, 1.0, 2.0], "out": [5.0, 5.0, 7.0, 8.0]})
    assert inert_fields(t, ["a", "y"], ["y"], ["out"]) == []
    t = Columns({"a": [0, 1], "z": [1.0, 2.0], "out": [5.0, 5.0]})
    assert inert_fields(t, ["a", "z"], ["z"], ["out"]) == []
    t = Columns({"w": [1.0, 2.0], "out": [np.nan, 3.0]})
    assert inert_fields(t, ["w"], ["w"], ["out"]) == []  # NaN in one row only: it changed


def test_search_names_an_inert_sweep_only(cli):
    code, out, err = cli("search", "decode", "--tpot-slo", "60", "--batch", "8,64", "--sweep", f"{D2D}=1e-6,1e-3",
                         "--sweep", f"{HBM}=1.6e12,3.2e12", "--format", "json")
    assert code == 0, err
    assert json.loads(out)["inert_sweeps"] == [D2D]


def test_hw_show_marks_the_fields_the_model_does_not_use(cli):
    code, out, err = cli("hw", "show", "cloudmatrix384", "--format", "json")
    assert code == 0, err
    used = {r["field"]: r["used"] for r in json.loads(out) if "field" in r}
    assert used[D2D] is False and used["system.tiers.ub.latency_s"] is True and used[HBM] is True
    assert used["chip.die.peak_flops_per_s.int8"] is True  # DeepSeek-R1 runs W8A8 on the 910C
    assert next(r for r in json.loads(out) if r.get("field") == D2D)["note"].startswith("NOT USED")


# --------------------------------------------------------------------------- provenance
def test_search_csv_records_its_specs_and_report_reranks_without_flags(cli, tmp_path):
    out = tmp_path / "s.csv"
    sweep = f"{HBM}=1.6e12,2.4e12"
    code, stdout, err = cli("search", "decode", "--tpot-slo", "45", "--batch", "8:128:8", "--set", "model.precision.kv_cache=int8",
                            "--sweep", sweep, "--out", out, "--format", "json", "--top", "5")
    assert code == 0, err
    searched = json.loads(stdout)
    prov, n = read_provenance(out)
    assert prov["cmperf"] and prov["hardware"] == "cloudmatrix384" and prov["model"] == "deepseek-r1"
    assert prov["set"] == ["model.precision.kv_cache=int8"] and prov["sweep"] == [sweep] and n == 6
    code, again, err = cli("search", "report", out, "--format", "json")
    assert code == 0, err
    report = json.loads(again)
    key = ["batch", "microbatches", HBM, "tpot_ms", "throughput_per_npu"]
    assert [[r[k] for k in key] for r in report["top"]] == [[r[k] for k in key] for r in searched["top"]]
    assert report["provenance"]["set"] == ["model.precision.kv_cache=int8"]
    assert report["provenance"]["sweep"] == [sweep]


def test_search_report_draws_with_the_recorded_specs(cli, tmp_path):
    """DeepSeek-V3 computes in FP8, which the Ascend 910C lacks: only with the recorded --set
    can the report re-evaluate the plotted configuration."""
    pytest.importorskip("matplotlib")
    out, png = tmp_path / "s.csv", tmp_path / "s.png"
    code, _, err = cli("search", "decode", "--tpot-slo", "45", "--batch", "8:64:8", "--model", "deepseek-v3",
                       "--set", "model.precision.matmul=int8", "--out", out)
    assert code == 0, err
    assert read_provenance(out)[0]["model"] == "deepseek-v3"
    code, _, err = cli("search", "report", out, "--plot", png)
    assert code == 0, err
    assert png.stat().st_size > 0


def test_csv_provenance_lines_round_trip(tmp_path):
    from cmperf.report import provenance, write_csv

    prov = provenance("predict decode", "cloudmatrix384", "deepseek-r1", ["model.name=a: b=c"], ["x.y=1,2"])
    path = tmp_path / "r.csv"
    write_csv([{"a": 1, "b": "x#y"}], path, prov)
    back, n = read_provenance(path)
    assert back == prov and n == 6
    assert pd.read_csv(path, skiprows=n).to_dict(orient="records") == [{"a": 1, "b": "x#y"}]


# --------------------------------------------------------------------------- complete outputs
def test_json_reads_auto_microbatches(cli):
    _, out, _ = cli("predict", "decode", "--format", "json")
    d = json.loads(out)
    assert d["microbatches"] == "auto" and d["microbatches_used"] in (1, 2)
    _, out, _ = cli("predict", "decode", "--microbatches", "1", "--format", "json")
    assert json.loads(out)["microbatches"] == 1


def _sections(text):
    """{table name: DataFrame} of a multi-table CSV report."""
    parts, name, lines = {}, None, []
    for line in io.StringIO(text):
        if line.startswith("# table: "):
            if name:
                parts[name] = pd.read_csv(io.StringIO("".join(lines)))
            name, lines = line[len("# table: "):].strip(), []
        elif name and line.strip():
            lines.append(line)
    parts[name] = pd.read_csv(io.StringIO("".join(lines)))
    return parts


def test_breakdown_csv_holds_the_summary(cli):
    code, out, err = cli("predict", "decode", "--batch", "8", "--breakdown", "--format", "csv")
    assert code == 0, err
    parts = _sections(out)
    assert set(parts) == {"summary", "operators", "sections"}
    _, js, _ = cli("predict", "decode", "--batch", "8", "--format", "json")
    assert parts["summary"]["tpot_ms"].iat[0] == pytest.approx(json.loads(js)["tpot_ms"])
    assert parts["sections"]["total_ms"].sum() == pytest.approx(parts["summary"]["iteration_ms"].iat[0], rel=1e-9)
    assert len(parts["operators"]) > 10


def test_sensitivity_csv_holds_the_sensitivity_table(cli):
    code, out, err = cli("validate", "cmperf/reference/cloudmatrix384-paper.yaml", "--sensitivity", "--format", "csv")
    assert code == 0, err
    parts = _sections(out)
    assert set(parts) == {"rows", "sensitivity"}
    assert "parameter" in parts["sensitivity"] and len(parts["sensitivity"]) > 3
    assert read_provenance(io.StringIO(out))[0]["hardware"] == "cloudmatrix384"


# --------------------------------------------------------------------------- start-up
def test_cli_predict_never_imports_pandas():
    code = ("import sys; sys.argv = ['cmperf', 'predict', 'decode', '--format', 'json']\n"
            "from cmperf.cli import main\n"
            "try:\n    main()\nexcept SystemExit:\n    pass\n"
            "sys.stderr.write(str([m for m in ('pandas', 'matplotlib', 'cmperf.search') if m in sys.modules]))")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert res.stderr.strip().endswith("[]"), res.stderr
    assert json.loads(res.stdout)["phase"] == "decode"


def test_columns_product_is_itertools_order_and_the_api_returns_dataframes(specs):
    cols = product({"a": [1, 2, 3], "b": [0.5, 1.5], "c": ["x", "default"]})
    assert [tuple(r.values()) for r in cols.records()] == list(itertools.product([1, 2, 3], [0.5, 1.5], ["x", "default"]))
    r = predict("decode", {"batch": [8, 96]}, specs)
    assert isinstance(r.table, pd.DataFrame) and isinstance(r.invalid, pd.DataFrame)
    pd.testing.assert_frame_equal(r.table, pd.DataFrame(r.columns.records()), check_dtype=False)
    ops, sections = r.breakdown(1)
    assert isinstance(ops, pd.DataFrame) and len(ops) > 10
