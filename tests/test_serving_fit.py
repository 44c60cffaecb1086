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
                    {"path": "stack.b", "lo": 0.1, "hi": 2.0, "meaning": "b"}]}  # log ranges of 20: 3 % steps at the end


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
