"""`cmperf compare decode|prefill`: one workload on several systems, each at its own parallel
configuration (cmperf/reference/setups.yaml: the deployments of the CloudMatrix384 paper's
Tables 3-4).

What is pinned here, and from where:
- the set-ups each system runs (EP320 / EP128 / EP72 decode, 32-die prefill), from setups.yaml
  and hardware-reference §7 (DeepSeek profile-data, SGLang's 96 x H100 blog);
- tokens/s per TFLOPS = tokens/s per NPU / the chip's dense peak in the dtype it computes in,
  with the peaks written out from the datasheets the hardware files cite (910C: 2 dies x 752
  INT8 TFLOPS = the paper's 1,504 divisor; H800/H100: 1,979 dense FP8 = INT8 TFLOPS);
- CloudMatrix384's rows against the paper's published Table 3-4 values, within the held-out
  bands the README states (decode +-8 %, prefill +-2.5 %);
- physical structure: more scale-out bandwidth never slows a system down, and speeds up
  the ones whose dispatch/combine are bound by it; CloudMatrix384's are message-bound, so a
  faster UB link changes nothing (README);
- the error paths: exit 2, one line on stderr naming the offending thing, no traceback.
"""

import csv
import io
import json
from pathlib import Path

import pytest
import yaml
from helpers import one_line_error

REPO = Path(__file__).resolve().parent.parent
LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
SETUPS = ("cloudmatrix384", "h800-cluster", "h100-cluster")

# Dense peaks per package in the dtype each default set-up computes in (TFLOPS), as the
# datasheets say: 910C 2 dies x 752 INT8 (paper Tables 3-4 divide by ~1,504); H800 and H100
# 1,979 dense FP8 (NVIDIA 3,958 sparse / 2).
PEAK_TFLOPS = {"cloudmatrix384": 1504.0, "h800-cluster": 1979.0, "h100-cluster": 1979.0}
CHIP = {"cloudmatrix384": "ascend-910c", "h800-cluster": "h800", "h100-cluster": "h100"}
MODEL = {"cloudmatrix384": "deepseek-r1", "h800-cluster": "deepseek-v3", "h100-cluster": "deepseek-v3"}
DTYPE = {"cloudmatrix384": "int8", "h800-cluster": "fp8", "h100-cluster": "fp8"}
# (dies, EP) per phase: paper D1 EP320 / P1 32 dies; DeepSeek profile-data decode EP128,
# prefill EP32; SGLang decode 9 nodes EP72, prefill 4 nodes EP32
DIES = {"decode": {"cloudmatrix384": 320, "h800-cluster": 128, "h100-cluster": 72},
        "prefill": {"cloudmatrix384": 32, "h800-cluster": 32, "h100-cluster": 32}}
BAND = {"decode": 0.08, "prefill": 0.035}  # README: held-out error of decode / prefill


def _data_lines(text):
    """The CSV lines after the '# key: value' provenance lines."""
    return [line for line in io.StringIO(text) if not line.startswith("# ")]


def _json(cli, *args):
    code, out, err = cli("compare", *args, "--format", "json")
    assert code == 0, err
    return {r["system"]: r for r in json.loads(out)}


@pytest.fixture(scope="module")
def default_rows():
    """Both phases' default comparison through the same code as the CLI (the CLI itself is
    exercised below): system -> row."""
    from cmperf.compare import compare

    return {ph: {r["system"]: r for r in compare(ph).table.to_dict(orient="records")} for ph in ("decode", "prefill")}


# --------------------------------------------------------------------------- default set-ups
def _check_default_rows(phase, rows):
    assert list(rows) == list(SETUPS)
    for system, r in rows.items():
        assert (int(r["dies"]), int(r["ep"])) == (DIES[phase][system], DIES[phase][system])
        assert (r["chip"], r["model"], r["dtype"]) == (CHIP[system], MODEL[system], DTYPE[system])
        assert float(r["npu_peak_TFLOPS"]) == pytest.approx(PEAK_TFLOPS[system], rel=1e-9)
        assert float(r["tokens_per_s_per_tflops"]) == pytest.approx(
            float(r["throughput_per_npu"]) / PEAK_TFLOPS[system], rel=1e-9)
        assert float(r["throughput_per_npu_lo"]) < float(r["throughput_per_npu"]) < float(r["throughput_per_npu_hi"])
        assert float(r["memory_per_die_bytes"]) > 0 and str(r["fits"]) in ("True", "False")
        assert r["bound"].split(" (")[0] and "% of op time" in r["bound"]
        assert r["confidence"] in ("high", "medium", "low") and r["setup_source"]


def test_compare_decode_table_and_json(cli):
    code, out, err = cli("compare", "decode")
    assert code == 0, err
    for system in SETUPS:
        assert system in out and CHIP[system] in out and f" {DIES['decode'][system]} " in out
    assert "tokens/s/TFLOPS" in out and "1,504" in out and "1,979" in out
    rows = _json(cli, "decode")
    _check_default_rows("decode", rows)
    assert [rows[s]["batch"] for s in SETUPS] == [96, 128, 256]  # D1; profile-data; SGLang


def test_compare_prefill_table_csv_and_out_file(cli, tmp_path):
    code, out, err = cli("compare", "prefill")
    assert code == 0, err
    assert all(system in out for system in SETUPS) and "ttft_ms" in out
    out_file = tmp_path / "cmp.csv"
    code, out, err = cli("compare", "prefill", "--format", "csv", "--out", out_file)
    assert code == 0, err
    rows = {r["system"]: r for r in csv.DictReader(_data_lines(out))}
    _check_default_rows("prefill", rows)
    assert all(int(rows[s]["tokens_per_npu"]) == 16384 and int(rows[s]["prompt_len"]) == 4096 for s in SETUPS)
    assert [int(rows[s]["attn_tp"]) for s in SETUPS] == [4, 1, 1]
    assert list(csv.DictReader(_data_lines(out_file.read_text()))) == list(rows.values())


def test_cloudmatrix_rows_match_the_papers_tables_3_and_4(default_rows):
    """Paper Table 4 (D1): 1,943 tokens/s per NPU, 1.29 tokens/s/TFLOPS, TPOT 49.4 ms; Table 3
    (P1): 6,688 tokens/s per NPU, 4.45 tokens/s/TFLOPS. Within the README's held-out bands."""
    d, p = default_rows["decode"]["cloudmatrix384"], default_rows["prefill"]["cloudmatrix384"]
    assert d["throughput_per_npu"] == pytest.approx(1943, rel=BAND["decode"])
    assert d["tokens_per_s_per_tflops"] == pytest.approx(1.29, rel=BAND["decode"])
    assert d["tpot_ms"] == pytest.approx(49.4, rel=BAND["decode"])
    assert p["throughput_per_npu"] == pytest.approx(6688, rel=BAND["prefill"])
    assert p["tokens_per_s_per_tflops"] == pytest.approx(4.45, rel=BAND["prefill"])


@pytest.mark.parametrize("phase,system", [
    ("decode", "cloudmatrix384"), ("decode", "h800-cluster"),
    pytest.param("decode", "h100-cluster"),
    ("prefill", "cloudmatrix384"), ("prefill", "h800-cluster"), ("prefill", "h100-cluster")])
def test_published_deployments_fit_in_hbm(default_rows, phase, system):
    """Every default set-up is a deployment that ran on its hardware, so it fits."""
    assert default_rows[phase][system]["fits"]


def test_h100_decode_setup_is_sglangs_run_without_mtp(default_rows):
    assert default_rows["decode"]["h100-cluster"]["mtp"] == 0


def test_plot_writes_a_png(cli, tmp_path):
    pytest.importorskip("matplotlib")
    png = tmp_path / "cmp.png"
    code, out, err = cli("compare", "decode", "--hardware", "cloudmatrix384,h800-cluster", "--plot", png)
    assert code == 0, err
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_plot_into_a_missing_directory_is_an_error(cli, tmp_path):
    code, out, err = cli("compare", "decode", "--plot", tmp_path / "no" / "such" / "dir.png")
    one_line_error(code, err, "--plot")


# --------------------------------------------------------------------------- subsets and overrides
def test_hardware_subset_keeps_the_given_order(cli):
    rows = _json(cli, "decode", "--hardware", "h800-cluster,cloudmatrix384")
    assert list(rows) == ["h800-cluster", "cloudmatrix384"]


def test_with_and_set_reach_only_the_named_system(cli, default_rows):
    base = default_rows["decode"]
    rows = _json(cli, "decode", "--hardware", "cloudmatrix384,h800-cluster",
                 "--with", "h800-cluster:batch=64", "--set", "h800-cluster:chip.die.hbm_bandwidth_Bps=6.7e12")
    assert rows["h800-cluster"]["batch"] == 64
    moved = rows["h800-cluster"]["throughput_per_npu"] / base["h800-cluster"]["throughput_per_npu"]
    assert abs(moved - 1) > 1e-3
    for k in ("batch", "throughput_per_npu", "tpot_ms", "memory_per_die_bytes"):
        assert rows["cloudmatrix384"][k] == pytest.approx(base["cloudmatrix384"][k], rel=1e-12)


def test_an_unsetup_system_runs_with_model_and_with(cli):
    """The documented way to compare a system the set-ups do not cover: --model and
    --with SYSTEM:key=value. GB200 NVL72: one 72-GPU NVLink domain, 288 routed + 72 shared = 5
    experts per GPU; its dense FP8 peak is 5,000 TFLOPS (NVIDIA: 10 PFLOPS sparse)."""
    rows = _json(cli, "decode", "--hardware", "gb200-nvl72", "--model", "deepseek-v3",
                 "--with", "gb200-nvl72:dies=72", "--with", "gb200-nvl72:shared_copies=72")
    r = rows["gb200-nvl72"]
    assert (r["dies"], r["ep"], r["dtype"], r["chip"]) == (72, 72, "fp8", "gb200")
    assert r["tokens_per_s_per_tflops"] == pytest.approx(r["throughput_per_npu"] / 5000.0, rel=1e-9)


def test_model_for_every_system_changes_the_dtype_and_its_peak(cli):
    """DeepSeek-R1 (INT8 W8A8) on the H800: the peak is then the INT8 one (1,979 TOPS, the FP8
    rate on Hopper) and the dtype column says int8."""
    r = _json(cli, "decode", "--hardware", "h800-cluster", "--model", "deepseek-r1")["h800-cluster"]
    assert (r["model"], r["dtype"]) == ("deepseek-r1", "int8")
    assert r["npu_peak_TFLOPS"] == pytest.approx(1979.0)


def test_config_file_replaces_the_setups(cli, tmp_path):
    cfg = tmp_path / "mine.yaml"
    cfg.write_text(yaml.safe_dump({
        "name": "mine", "source": "test set-up: one H20 node",
        "systems": {"h20-cluster": {"model": "deepseek-v3",
                                    "decode": {"batch": 32, "kv_len": 4096, "dies": 16, "ep": 16,
                                               "redundant_experts": 0, "shared_copies": 16},
                                    "prefill": {"tokens_per_npu": 8192, "dies": 16, "ep": 16, "attn_tp": 1}}}}))
    for phase in ("decode", "prefill"):
        rows = _json(cli, phase, "--config", cfg)
        assert list(rows) == ["h20-cluster"]
        r = rows["h20-cluster"]
        assert (r["dies"], r["ep"], r["chip"], r["dtype"]) == (16, 16, "h20", "fp8")
        # H20: 296 dense FP8 TFLOPS (third-party tables; the H100's 1,979 / 6.68)
        assert r["tokens_per_s_per_tflops"] == pytest.approx(r["throughput_per_npu"] / 296.0, rel=1e-9)


def test_peak_is_the_peak_of_the_dtype_shown(default_rows):
    """The table puts `dtype` and `peak TFLOPS` side by side: the peak must be the chip's peak
    in that dtype (read from the chip's file). For the default set-ups it is."""
    for rows in default_rows.values():
        for r in rows.values():
            chip = yaml.load((REPO / "hardware" / f"{r['chip']}.yaml").read_text(), Loader=LOADER)
            peak = float(chip["die"]["peak_flops_per_s"][r["dtype"]]["value"]) * chip["dies_per_package"]["value"]
            assert r["npu_peak_TFLOPS"] == pytest.approx(peak / 1e12, rel=1e-9)


def test_peak_matches_the_dtype_shown_for_fp4_experts(cli, tmp_path):
    model = tmp_path / "dsv3-fp4.yaml"
    model.write_text((REPO / "models" / "deepseek-v3.yaml").read_text().replace(
        "  kv_cache: bf16", "  kv_cache: bf16\n  experts: fp4"))
    cfg = tmp_path / "b200.yaml"
    cfg.write_text(yaml.safe_dump({"name": "fp4", "source": "test: FP4 experts under FP8 attention on B200",
                                   "systems": {"b200-cluster": {"model": str(model), "decode": {
                                       "batch": 64, "kv_len": 4096, "dies": 16, "ep": 16, "redundant_experts": 0,
                                       "shared_copies": 16}}}}))
    r = _json(cli, "decode", "--config", cfg)["b200-cluster"]
    peaks = {"fp8": 4500.0, "fp4": 9000.0}  # B200 dense (NVIDIA: 9 / 18 PFLOPS sparse)
    assert r["npu_peak_TFLOPS"] == pytest.approx(peaks[r["dtype"]])


# --------------------------------------------------------------------------- structure
def _throughput(cli, system, *sets):
    args = [a for s in sets for a in ("--set", f"{system}:{s}")]
    return _json(cli, "decode", "--hardware", system, *args)[system]["throughput_per_npu"]


def _tier_bw(system, tier):
    raw = yaml.load((REPO / "hardware" / f"{system}.yaml").read_text(), Loader=LOADER)
    return float(raw["tiers"][tier]["bandwidth_Bps"]["value"])


def test_scale_out_bandwidth_speeds_up_nvidia_decode(cli, default_rows):
    """DeepEP's low-latency decode sends the tokens for all but 7 of the EP-1 peers over
    InfiniBand (one 400G NIC per GPU): twice the IB bandwidth is more tokens/s per GPU; twice
    NVLink, which carries 7/(EP-1) of them, never less, and less gain than IB."""
    for system in ("h800-cluster", "h100-cluster"):
        base = default_rows["decode"][system]["throughput_per_npu"]
        ib2 = _throughput(cli, system, f"system.tiers.ib.bandwidth_Bps={2 * _tier_bw(system, 'ib')}")
        assert ib2 > 1.05 * base, system
    nv2 = _throughput(cli, system, f"system.tiers.nvlink.bandwidth_Bps={2 * _tier_bw(system, 'nvlink')}")
    assert base * (1 - 1e-9) <= nv2 < ib2


def test_faster_ub_does_not_help_message_bound_cloudmatrix_decode(cli, default_rows):
    """README: 'UB 2x faster: ~no change, dispatch/combine are message-bound'."""
    base = default_rows["decode"]["cloudmatrix384"]["throughput_per_npu"]
    fast = _throughput(cli, "cloudmatrix384", f"system.tiers.ub.bandwidth_Bps={2 * _tier_bw('cloudmatrix384', 'ub')}")
    assert base * (1 - 1e-9) <= fast <= base * 1.01


# --------------------------------------------------------------------------- errors
def test_unknown_system_is_named(cli):
    code, _, err = cli("compare", "decode", "--hardware", "no-such-system,cloudmatrix384")
    one_line_error(code, err, "no-such-system")
    code, _, err = cli("compare", "prefill", "--hardware", "no-such-system", "--model", "deepseek-v3")
    one_line_error(code, err, "no-such-system")


def test_unknown_system_in_with_or_set_is_an_error(cli):
    code, _, err = cli("compare", "decode", "--hardware", "h800-cluster", "--with", "h800:batch=64")
    one_line_error(code, err, "h800")


def test_bad_config_yaml_is_named(cli, tmp_path):
    broken = tmp_path / "broken.yaml"
    broken.write_text("systems: [\n")
    code, _, err = cli("compare", "decode", "--config", broken)
    one_line_error(code, err, str(broken), "YAML")
    typo = tmp_path / "typo.yaml"
    typo.write_text(yaml.safe_dump({"name": "t", "source": "typo test",
                                    "systems": {"h800-cluster": {"modle": "deepseek-v3"}}}))
    code, _, err = cli("compare", "decode", "--config", typo)
    one_line_error(code, err, str(typo), "modle")
    code, _, err = cli("compare", "decode", "--config", tmp_path / "missing.yaml")
    one_line_error(code, err, "missing.yaml")


@pytest.mark.parametrize("system,args,name", [
    ("h800-cluster", ["--with", "batch"], "batch"),
    ("h800-cluster", ["--with", "h800-cluster:bogus=3"], "bogus"),
    ("cloudmatrix384", ["--with", "cloudmatrix384:batch=0"], "batch"),
    ("h800-cluster", ["--set", "h800-cluster:system.tiers.nosuch.bandwidth_Bps=1e9"], "nosuch"),
])
def test_bad_overrides_are_named(cli, system, args, name):
    code, _, err = cli("compare", "decode", "--hardware", system, *args)
    one_line_error(code, err, name)
