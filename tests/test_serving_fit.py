"""The serving fit's bookkeeping (cmperf/calibration/serving.py): a run is reported at the fit
that did NOT see it, a run marked ``not_fitted`` never enters any fit, and the fit finds the
constants of a known response. The simulation is replaced by an analytic response here (the
real one takes minutes; `python -m cmperf.calibration --stack sglang-ascend` runs it)."""

from __future__ import annotations

import numpy as np
import pytest

from cmperf.calibration import serving

X0, Y0 = 0.02, 0.5  # the constants the analytic runs are generated with


def _ref(perturbed: dict[str, float], not_fitted=()):
    rows = []
    for i in range(4):
        rid = f"R{i}"
        measured = {"output_throughput_tps": 100.0, "mean_tpot_ms": 100.0, "mean_ttft_ms": 100.0}
        measured["mean_tpot_ms"] *= perturbed.get(rid, 1.0)
        row = {"id": rid, "measured": measured}
        if rid in not_fitted:
            row["not_fitted"] = "a reason"
        rows.append(row)
    return {"rows": rows, "stack": "x", "targets": {"output_throughput_tps": 0.15, "mean_tpot_ms": 0.15, "mean_ttft_ms": 0.25},
            "fit": [{"path": "stack.a", "lo": 5e-3, "hi": 0.1, "meaning": "a"},
                    {"path": "stack.b", "lo": 0.1, "hi": 2.0, "meaning": "b"}]}  # log ranges of 20: 0.6 % steps at the end


def _fake(ref, sweeps, seed=0, inputs=None):
    """Throughput 100 x0/x, TPOT 100 x/x0, TTFT 100 y/y0 for every run."""
    x = np.asarray(sweeps["stack.a"], dtype=float)
    y = np.asarray(sweeps["stack.b"], dtype=float)
    return {r["id"]: np.vstack([100 * X0 / x, 100 * x / X0, 100 * y / Y0]) for r in ref["rows"]}


@pytest.fixture
def fit(monkeypatch):
    monkeypatch.setattr(serving, "simulated", _fake)

    def run(ref):
        monkeypatch.setattr(serving, "load_serving", lambda path: ref)
        return serving.fit_serving("fake.yaml")
    return run


def test_the_fit_finds_the_constants_of_a_known_response(fit):
    f = fit(_ref({}))
    assert f["values"]["all runs"]["stack.a"] == pytest.approx(X0, rel=0.03)
    assert f["values"]["all runs"]["stack.b"] == pytest.approx(Y0, rel=0.03)
    assert f["rows"]["within"].all()


def test_a_run_is_reported_at_the_fit_that_did_not_see_it(fit):
    """R2's TPOT logged 30 % high: the fit to the other runs does not move toward it, so its
    held-out error is the whole -23 %; the fit to all runs is pulled toward it (in sample
    smaller), and never reported as R2's validation."""
    f = fit(_ref({"R2": 1.3}))
    rows = f["rows"].set_index(["id", "metric"])
    held = rows.loc[("R2", "mean_tpot_ms")]
    assert held["fold"] == "without R2"
    assert f["values"]["without R2"]["stack.a"] == pytest.approx(X0, rel=0.03)
    assert held["error_pct"] == pytest.approx(100 * (1 / 1.3 - 1), abs=2.5)  # the search's last step
    assert abs(held["in_sample_error_pct"]) < abs(held["error_pct"]) - 2.0
    assert f["values"]["all runs"]["stack.a"] > X0 * 1.005  # the full fit did see it


def test_a_not_fitted_run_never_enters_a_fit(fit):
    """R3 (not fitted) logged far off: no fold moves, and it is predicted by the full fit."""
    f = fit(_ref({"R3": 3.0}, not_fitted=("R3",)))
    assert "without R3" not in f["values"]
    for fold, v in f["values"].items():
        assert v["stack.a"] == pytest.approx(X0, rel=0.03), fold
    r3 = f["rows"][f["rows"]["id"] == "R3"]
    assert r3["fold"].str.startswith("not fitted").all() and r3["in_sample_error_pct"].isna().all()


def test_a_fit_section_that_is_not_stack_constants_is_a_clear_error(fit):
    from cmperf.errors import SpecError

    ref = _ref({})
    ref["fit"] = [{"path": "chip.die.vector_ops_per_s", "lo": 1.0, "hi": 2.0, "meaning": "m"}]
    with pytest.raises(SpecError, match="stack.FIELD"):
        fit(ref)


def test_a_fit_needs_three_rows_per_constant_in_every_fold(fit):
    from cmperf.errors import SpecError

    ref = _ref({})
    ref["rows"] = ref["rows"][:2]  # 2 runs: each fold keeps 3 metrics for 2 constants
    with pytest.raises(SpecError, match="one constant per three rows"):
        fit(ref)


def test_validate_serving_replays_a_file_without_a_fit(cli, tmp_path):
    """A user's serving file with no `fit:`: each run replayed at the files' values, said to be
    'nothing fitted'; the logged accept length reaches the simulation as its acceptance."""
    import json

    import yaml

    from cmperf.calibration.serving import SERVING_FILES

    raw = yaml.safe_load(SERVING_FILES[0].read_text())
    raw.pop("fit")
    raw["rows"] = [r for r in raw["rows"] if r["id"] == "LL-3.5K/1K"]
    own = tmp_path / "mine-serving.yaml"
    own.write_text(yaml.safe_dump(raw))
    code, out, err = cli("validate", "--serving", str(own), "--format", "json")
    assert code == 0, err
    rows = json.loads(out)["rows"]
    assert len(rows) == 3 and {r["fold"] for r in rows} == {"nothing fitted"}
    assert all(r["simulated"] > 0 for r in rows)


def test_a_family_fold_predicts_the_runs_it_held_out_at_constants_that_never_saw_them(fit):
    """R2 (the longest prompts) logged its TPOT 30 % high: the length fold that holds it out
    fits the others alone (the constants of the response, X0) and reports R2's whole -23 %;
    the fold that holds out the co-located R3 fits the three PD runs; the co-located run alone
    (3 metrics) cannot identify 2 constants and is said so, never fitted."""
    ref = _ref({"R2": 1.3})
    for r, ell, fam in zip(ref["rows"], (1000, 1000, 4000, 2000), ("prefill", "prefill", "prefill", "colocated")):
        r["workload"], r["deployment"] = {"prompt_len": ell}, {fam: []}
    f = fit(ref)
    g = {x["fold"]: x for x in f["group_folds"]}
    longest = g["fit without the longest prompts (4,000 tokens)"]
    assert longest["fitted"] == ["R0", "R1", "R3"] and longest["predicted"] == ["R2"]
    assert longest["values"]["stack.a"] == pytest.approx(X0, rel=0.03)
    assert longest["errors"]["R2 mean_tpot_ms"] == pytest.approx(100 * (1 / 1.3 - 1), abs=2.5)
    assert g["fit without the co-located runs"]["fitted"] == ["R0", "R1", "R2"]
    assert g["fit without the co-located runs"]["predicted"] == ["R3"]
    assert g["fit without the PD runs"]["note"].startswith("not identifiable: the other runs give 3 metrics")
    shortest = g["fit without the shortest prompts (1,000 tokens)"]
    assert shortest["fitted"] == ["R2", "R3"] and shortest["predicted"] == ["R0", "R1"]
    assert "group_folds" not in f["values"] and set(f["values"]) == {"all runs", "without R0", "without R1", "without R2", "without R3"}
    assert f["counts"] == {"fitted_runs": 4, "fitted_metrics": 12, "runs": 4, "metrics": 12}


def test_the_counts_name_the_metrics_fitted_and_those_only_predicted(fit):
    """A not-fitted run's metrics are counted apart: '... fitted to 9 metrics of 3 runs; 3
    metrics of 1 more run(s) never fitted'."""
    f = fit(_ref({}, not_fitted=("R3",)))
    line = serving.fit_counts(f, "x")
    assert "fitted to 9 metrics of 3 runs" in line and "3 metrics of 1 more run(s) never fitted" in line


def test_the_shipped_stack_constants_are_a_fresh_fit():
    """stacks/sglang-ascend.yaml holds what `python -m cmperf.calibration --stack
    sglang-ascend --write` gives from today's code and runs (written to 4 significant
    digits): a change to the cost model that moves the fit must re-write them. The fit is the
    session's one (tests/helpers.py ``shared_serving_fit``): README's `cmperf validate --serving`
    (tests/test_readme.py) reads the same answer instead of fitting again."""
    from pathlib import Path

    from helpers import shared_serving_fit

    from cmperf.predict import load_specs

    path = Path(serving.REFERENCE_DIR) / "sglang-a3-serving.yaml"
    ref = serving.load_serving(path)
    f = shared_serving_fit(path)
    stack = load_specs(ref["hardware"], ref["model"], [], ref["stack"]).stack_view()
    for p, v in f["values"]["all runs"].items():
        assert float(getattr(stack, p.split(".", 1)[1])) == pytest.approx(v, rel=1e-3), p
