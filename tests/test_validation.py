"""CI gate: the shipped reference rows (the CloudMatrix384 paper) all pass, one hardware
file serves every row, and the shipped fitted values are what the documented fit produces."""

import json

import pytest

from cmperf.validate import evaluate, fitted_parameters, load_reference

TARGETS = {  # row -> (published value, the tolerance the issue sets)
    "P1": (6688, 0.10), "P2": (5655, 0.10), "P1-eff": (4.45, 0.10), "P2-eff": (3.76, 0.10),
    "D1": (49.4, 0.10), "D1-thr": (1943, 0.10), "D1-eff": (1.29, 0.10), "D2": (14.9, 0.10), "D2-thr": (538, 0.10),
    "L1": (1260, 0.15), "L2": (874, 0.15), "L3-A": (600, 0.15), "L3-B": (600, 0.15),
}
TABLE7 = {"D": [116, 131, 133, 141, 152, 152], "C": [118, 132, 146, 150, 150, 149]}


@pytest.fixture(scope="module")
def results(specs):
    return evaluate(load_reference(), specs).set_index("id")


def test_every_shipped_row_passes(results):
    failed = results[~results["pass"]]
    assert failed.empty, failed[["predicted", "paper", "error_pct"]].to_string()


@pytest.mark.parametrize("row", sorted(TARGETS))
def test_headline_rows_within_issue_tolerance(results, row):
    paper, tol = TARGETS[row]
    assert results.loc[row, "paper"] == paper
    assert results.loc[row, "predicted"] == pytest.approx(paper, rel=tol)


@pytest.mark.parametrize("kind", ["D", "C"])
def test_table7_trend_with_ep(results, kind):
    eps = [8, 16, 32, 64, 128, 256]
    pred = [results.loc[f"T7-{kind}{e}", "predicted"] for e in eps]
    for p, paper in zip(pred, TABLE7[kind]):
        assert p == pytest.approx(paper, rel=0.15)
    # the latency grows with EP, as measured (EP8 -> EP256: +31 % dispatch, +26 % combine)
    assert pred[-1] / pred[0] == pytest.approx(TABLE7[kind][-1] / TABLE7[kind][0], rel=0.10)


def test_efficiencies_come_from_tables_8_to_10(specs):
    eff = specs.hardware.chip.efficiency
    assert eff.attention_compute.value == 0.654 and "Table 8" in eff.attention_compute.source
    assert eff.memory_bandwidth.value == pytest.approx(1346 / 1600, abs=5e-4) and "Table 9" in eff.memory_bandwidth.source
    table10 = [0.794, 0.774, 0.827, 0.811, 0.796, 0.779]
    assert eff.matmul_compute.value == pytest.approx(sum(table10) / 6, abs=5e-4) and "Table 10" in eff.matmul_compute.source


def test_fitted_parameters_are_few_and_sourced(specs):
    fitted = fitted_parameters(specs)
    assert 1 <= len(fitted) <= 6
    assert all("docs/calibration.md" in s for s in fitted["source"])


def test_shipped_values_are_the_fit_output(specs):
    from cmperf.calibrate import fit
    from cmperf.validate import spec_value

    values = fit(load_reference(), specs)
    for path, v in values.items():
        assert spec_value(specs, path) == pytest.approx(v, rel=0.02), path


def test_validate_command_exit_codes(cli, tmp_path):
    code, out, err = cli("validate", "--format", "json")
    assert code == 0, err
    data = json.loads(out)
    assert data["summary"]["failed"] == 0 and len(data["fitted_parameters"]) >= 1
    # a user's own reference file in the same format; a failing row exits 1
    own = tmp_path / "mine.yaml"
    own.write_text("name: mine\nsource: my cluster\nrows:\n"
                   "  - {id: X, description: d, where: lab, phase: decode, metric: tpot_ms, paper: 1.0, tolerance: 0.05,"
                   " scenario: {batch: 8}}\n")
    code, out, err = cli("validate", own)
    assert code == 1 and "FAIL" in out


def test_sensitivity_lists_parameters(cli):
    code, out, err = cli("validate", "--sensitivity", "--format", "json")
    assert code == 0, err
    sens = json.loads(out)["sensitivity"]
    params = {r["parameter"] for r in sens}
    assert "chip.die.hbm_bandwidth_Bps" in params and "chip.die.vector_ops_per_s" in params
    assert all(r["max_abs_change_pct"] >= 0 for r in sens)
