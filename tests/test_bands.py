"""Prediction bands per system, and cross-validation folds that do not predict
(docs/calibration.md#prediction-bands, #cross-validation).

What is pinned here, and from where:
- the stored bands against the errors they name (parsed from the file: a parse that finds
  nothing fails) and against every band row's in-sample error, recomputed here from each
  platform's reference file at the shipped values (a re-fit without re-writing the bands,
  or a hand-narrowed band, fails);
- which bands are floors: every system calibrated from micro-benchmarks only, a model other
  than the calibrated one, and the no-evidence band (the widest calibrated one);
- predict, afd and compare carry the system's own band;
- a fold whose remaining rows leave a parameter at a search bound or unidentified is
  flagged and gives no held-out error (the H20 and H100 files: each parameter moved by one
  group only; a fraction of a second each), and a parameter no row moves keeps its spec value;
- known misses are reported, not fitted to (moving one's published value moves no fitted value).
"""

import json
import re

import numpy as np
import pytest

from cmperf.bands import BANDS_FILE, NO_EVIDENCE, band_for, load_bands
from cmperf.calibration.reference import REFERENCE_DIR, builtin_references, load_reference
from cmperf.specs.loader import list_builtin

SIGNED_PCT = re.compile(r"([+-]\d+(?:\.\d+)?) %")


def _reference_of(system):
    return {load_reference(p).hardware: p for p in builtin_references()}.get(system)


def test_every_reference_file_has_its_systems_band():
    """Each platform with a reference file is calibrated in the bands file, from that file and
    on its model; every other shipped system is named as having no evidence."""
    bands = load_bands()
    refs = [load_reference(p) for p in builtin_references()]
    assert {r.hardware for r in refs} == set(bands["systems"])
    for p, r in zip(builtin_references(), refs):
        entry = bands["systems"][r.hardware]
        assert (entry["reference"], entry["model"]) == (p.name, r.model)
    shipped = {name for name, _ in list_builtin("system")}
    assert set(bands[NO_EVIDENCE]["systems"]) == shipped - set(bands["systems"])
    assert "atlas-800t-a2" in bands[NO_EVIDENCE]["systems"]


def test_stored_band_is_never_narrower_than_the_errors_it_names():
    """Every band of every system (and the no-evidence band's own rule) is at least the largest
    error its source names; the source must name some (the parse cannot pass vacuously)."""
    bands = load_bands()
    checked = 0
    for system, entry in bands["systems"].items():
        for phase in ("decode", "prefill"):
            band = entry[phase]
            errors = [abs(float(x)) for x in SIGNED_PCT.findall(band.source)]
            assert errors, (system, phase, band.source)
            assert 100 * band.relative >= max(errors) - 1e-9, (system, phase)
            assert 100 * band.relative <= max(errors) + 0.5 + 1e-9, (system, phase)  # rounded up to 0.5 %, no more
            checked += 1
    assert checked == 2 * len(bands["systems"]) >= 12
    widest = max(e[ph].relative for e in bands["systems"].values() for ph in ("decode", "prefill"))
    for phase in ("decode", "prefill"):
        assert bands[NO_EVIDENCE][phase].relative == widest and bands[NO_EVIDENCE][phase].floor


def _band_rows(ref, res):
    """The rows a band covers (docs/calibration.md#prediction-bands), written out here: with
    end-to-end rows, each phase's TPOT / per-layer rows and prefill throughput / TTFT rows;
    otherwise every relative evidence row."""
    ev = res[(res["kind"] == "evidence") & (res["unit"] == "%")]
    phase = {r.id: r.phase for r in ref.rows}
    if any(phase[i] in ("decode", "prefill") for i in ev["id"]):
        return {"decode": ev[ev["id"].map(phase).eq("decode") & ev["metric"].isin(["tpot_ms", "layer_us"])],
                "prefill": ev[ev["id"].map(phase).eq("prefill") & ev["metric"].isin(["throughput_per_npu", "ttft_ms"])]}
    return {"decode": ev, "prefill": ev}


@pytest.mark.parametrize("path", builtin_references(), ids=lambda p: p.stem)
def test_stored_band_covers_every_in_sample_error(path):
    """Re-evaluated at the shipped values, no row a band covers misses by more than the band:
    a re-fit that worsens a row without re-writing the bands fails here."""
    from cmperf.calibration.validate import evaluate

    ref = load_reference(path)
    res = evaluate(ref)
    for phase, rows in _band_rows(ref, res).items():
        assert len(rows), (path.name, phase)
        band = band_for(phase, ref.hardware, ref.model)
        assert 100 * band.relative >= rows["error"].abs().max() - 1e-9, (path.name, phase)


def test_only_end_to_end_evidence_makes_a_band_more_than_a_floor():
    for name, _ in list_builtin("system"):
        ref = _reference_of(name)
        model = load_reference(ref).model if ref else "deepseek-v3"
        for phase in ("decode", "prefill", "afd"):
            assert band_for(phase, name, model).floor == (name != "cloudmatrix384"), (name, phase)
    # another model on the CloudMatrix384 inherits its band, as a floor
    own, other = band_for("decode", "cloudmatrix384", "deepseek-r1"), band_for("decode", "cloudmatrix384", "kimi-k2")
    assert other.relative == own.relative and other.floor and not own.floor
    assert band_for("decode", "my-own-cluster") == load_bands()[NO_EVIDENCE]["decode"]


def _half(t, col, i=0):
    return (t[f"{col}_hi"].iat[i] - t[f"{col}_lo"].iat[i]) / 2 / t[col].iat[i]


def test_predict_attaches_the_systems_own_band(specs):
    from cmperf.predict import load_specs, predict

    cm = predict("decode", {}, specs).table
    b = band_for("decode", "cloudmatrix384", "deepseek-r1").relative
    assert cm["tpot_ms_lo"].iat[0] == pytest.approx(cm["tpot_ms"].iat[0] * (1 - b))
    assert cm["throughput_per_npu_hi"].iat[0] == pytest.approx(cm["throughput_per_npu"].iat[0] / (1 - b))
    assert not cm["band_floor"].iat[0]
    h100 = predict("decode", {"dies": 72, "ep": 72, "redundant_experts": 32, "shared_copies": 72, "mtp": 0},
                   load_specs("h100-cluster", "deepseek-v3")).table
    bh = band_for("decode", "h100-cluster", "deepseek-v3").relative
    assert _half(h100, "tpot_ms") == pytest.approx(bh) and bh != b and bool(h100["band_floor"].iat[0])
    afd = predict("afd", {}, specs).table  # AFD decodes: decode's band
    assert _half(afd, "tpot_ms") == pytest.approx(b) and "band_floor" in afd.columns
    pre = predict("prefill", {}, specs).table
    assert _half(pre, "ttft_ms") == pytest.approx(band_for("prefill", "cloudmatrix384").relative)


def test_predict_table_marks_a_floor(cli):
    code, out, err = cli("predict", "decode")
    assert code == 0, err and "±" in out and "(floor)" not in out
    code, out, err = cli("predict", "decode", "--hardware", "atlas-800t-a2", "--dies", "64", "--ep", "64")
    assert code == 0, err
    assert re.search(r"tpot_ms\s*│[^│]*± [^│]*\(floor\)", out), out
    code, out, err = cli("predict", "decode", "--format", "json")
    assert json.loads(out)["band_floor"] is False


def test_compare_rows_carry_each_systems_own_band():
    from cmperf.compare import compare

    for phase in ("decode", "prefill"):
        t = compare(phase).table.set_index("system")
        lat = {"decode": "tpot_ms", "prefill": "ttft_ms"}[phase]
        for system, r in t.iterrows():
            band = band_for(phase, system, r["model"])
            assert (r[f"{lat}_hi"] - r[f"{lat}_lo"]) / 2 / r[lat] == pytest.approx(band.relative), (phase, system)
            assert r["band_floor"] == band.floor, (phase, system)
        assert not t.loc["cloudmatrix384", "band_floor"] and t.loc["h100-cluster", "band_floor"]
        cm, h100 = (_ratio(t.loc[s], lat) for s in ("cloudmatrix384", "h100-cluster"))
        assert h100 != pytest.approx(cm)


def _ratio(r, lat):
    return (r[f"{lat}_hi"] - r[f"{lat}_lo"]) / 2 / r[lat]


# --------------------------------------------------------------------------- folds that do not predict
@pytest.fixture(scope="module")
def h20_cv():
    from cmperf.calibration.crossval import cross_validate

    return cross_validate(load_reference(REFERENCE_DIR / "h20-cluster-microbenchmarks.yaml"))


def test_a_fold_with_an_unidentified_parameter_is_flagged_not_scored(h20_cv):
    """H20: FlashMLA alone moves the attention efficiency and the PCIe rows alone the IB rate;
    leaving either group out leaves its parameter free, so neither fold predicts."""
    g = h20_cv.groups.set_index("group")
    assert not g["predicts"].any()
    assert g["held_out_max_abs_error"].isna().all() and g["held_out_mean_abs_error"].isna().all()
    assert h20_cv.rows["held_out_error"].isna().all() and h20_cv.rows["in_sample_error"].notna().all()
    flags = {(f.group, f.parameter) for f in h20_cv.flags.itertuples()}
    assert flags == {("FlashMLA", "chip.efficiency.attention_compute"),
                     ("HybridEP-PCIe", "system.tiers.ib.bandwidth_Bps")}
    assert (h20_cv.flags["objective_rise"] < 1e-4).all()
    p = h20_cv.parameters.set_index("parameter")
    assert np.isnan(p.loc["chip.efficiency.attention_compute", "without FlashMLA"])
    assert p.loc["chip.efficiency.attention_compute", "without HybridEP-PCIe"] == pytest.approx(
        p.loc["chip.efficiency.attention_compute", "full fit"], rel=0.01)


def test_a_fold_at_a_search_bound_is_flagged():
    """H100 without its cuBLASLt rows: the kernel launch runs to the top of its range (and the
    GEMM efficiency is free): that fold is not a prediction of the GEMM rows."""
    from cmperf.calibration.crossval import cross_validate

    cv = cross_validate(load_reference(REFERENCE_DIR / "h100-cluster-microbenchmarks.yaml"))
    f = cv.flags.set_index(["group", "parameter"])
    assert f.loc[("cuBLASLt", "chip.latency.kernel_launch_s"), "bound"] == "upper"
    assert "search bound" in f.loc[("cuBLASLt", "chip.latency.kernel_launch_s"), "why"]
    assert ("cuBLASLt", "chip.efficiency.matmul_compute") in f.index
    assert not cv.groups.set_index("group").loc["cuBLASLt", "predicts"]


def test_a_fold_that_predicts_is_scored():
    """B200: every DeepEP/HybridEP group moves the one NVLink rate, so each fold predicts."""
    from cmperf.calibration.crossval import cross_validate

    cv = cross_validate(load_reference(REFERENCE_DIR / "b200-cluster-microbenchmarks.yaml"))
    assert cv.groups["predicts"].all() and cv.flags.empty
    assert cv.groups["held_out_max_abs_error"].notna().all() and (cv.groups["held_out_max_abs_error"] > 0).all()


def test_a_parameter_no_row_moves_keeps_its_spec_value():
    """A GEMM efficiency added to the H20 file (it has no GEMM row) is not given a grid value:
    the fit keeps the spec file's, and fits the others as before."""
    from cmperf.calibration.fit import fit_result
    from cmperf.calibration.reference import FitParam
    from cmperf.calibration.validate import specs_for

    ref = load_reference(REFERENCE_DIR / "h20-cluster-microbenchmarks.yaml")
    extra = ref.model_copy(update={"fit": [*ref.fit, FitParam(path="chip.efficiency.matmul_compute", lo=0.3, hi=1.0,
                                                              log=False, meaning="no row reads it")]})
    specs = specs_for(ref)
    plain, more = fit_result(ref, specs), fit_result(extra, specs)
    assert more.kept == ("chip.efficiency.matmul_compute",) and "chip.efficiency.matmul_compute" not in more.values
    assert more.values == pytest.approx(plain.values)


def test_known_misses_are_reported_not_fitted():
    """Moving a known-miss row's published value moves no fitted value (H100: HY-C16)."""
    from cmperf.calibration.fit import fit_result
    from cmperf.calibration.validate import specs_for

    ref = load_reference(REFERENCE_DIR / "h100-cluster-microbenchmarks.yaml")
    miss = next(r for r in ref.rows if r.known_miss)
    moved = ref.model_copy(update={"rows": [r.model_copy(update={"paper": r.paper * 3}) if r.id == miss.id else r
                                            for r in ref.rows]})
    specs = specs_for(ref)
    assert fit_result(moved, specs).values == pytest.approx(fit_result(ref, specs).values)


def test_validate_cross_validate_says_which_folds_do_not_predict(cli):
    f = str(REFERENCE_DIR / "h20-cluster-microbenchmarks.yaml")
    code, out, err = cli("validate", f, "--cross-validate")
    assert code == 0, err
    assert "not a prediction" in out and "without FlashMLA: chip.efficiency.attention_compute not identified" in out
    code, out, err = cli("validate", f, "--cross-validate", "--format", "json")
    data = json.loads(out)
    assert all(g["predicts"] is False and g["held_out_max_abs_error"] is None
               for g in data["cross_validation"]["groups"])
    assert {f["parameter"] for f in data["cross_validation"]["not_identified"]} == {
        "chip.efficiency.attention_compute", "system.tiers.ib.bandwidth_Bps"}
    code, out, err = cli("validate", f, "--cross-validate", "--format", "csv")
    assert "# table: cross_validation_not_identified" in out and "# table: cross_validation_groups" in out


def test_bands_file_errors_name_the_field(tmp_path):
    from cmperf.errors import SpecError

    text = BANDS_FILE.read_text()
    bad = tmp_path / "bands.yaml"
    bad.write_text(text.replace("floor: true, source", "floor: maybe, source", 1))
    with pytest.raises(SpecError, match=r"floor: expected true or false"):
        load_bands(bad)
    bad.write_text(re.sub(r"relative: [0-9.]+", "relative: 1.5", text, count=1))  # the first: cloudmatrix384 decode
    with pytest.raises(SpecError, match=r"systems.cloudmatrix384.decode.relative: expected a number"):
        load_bands(bad)
