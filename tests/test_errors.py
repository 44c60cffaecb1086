"""Every bad-input path ends in one clear line naming the file/flag/field, exit code 2,
and no traceback."""

from pathlib import Path

import pytest

from cmperf.specs.loader import resolve

CHIP = Path(resolve("chip", "ascend-910c"))
SYSTEM = Path(resolve("system", "cloudmatrix384"))
MODEL = Path(resolve("model", "deepseek-r1"))


def assert_error(result, *needles):
    code, out, err = result
    assert code == 2, (code, out, err)
    assert "Traceback" not in err and "Traceback" not in out
    line = err.strip().splitlines()[-1]
    for n in needles:
        assert n in err, (n, err)
    return line


def _copy(tmp_path, src: Path, name: str, old: str | None = None, new: str = "") -> Path:
    text = src.read_text()
    if old is not None:
        assert old in text, old
        text = text.replace(old, new, 1)
    p = tmp_path / name
    p.write_text(text)
    return p


def test_malformed_yaml(cli, tmp_path):
    bad = _copy(tmp_path, MODEL, "m.yaml", "hidden_size: 7168", "hidden_size: [7168")
    assert_error(cli("model", "show", bad), str(bad), "malformed YAML", "line")


def test_wrong_type(cli, tmp_path):
    bad = _copy(tmp_path, MODEL, "m.yaml", "hidden_size: 7168", "hidden_size: wide")
    assert_error(cli("model", "show", bad), str(bad), "hidden_size")


def test_unknown_key(cli, tmp_path):
    bad = _copy(tmp_path, MODEL, "m.yaml", "vocab_size: 129280", "vocab_size: 129280\nvocab_sise: 1")
    assert_error(cli("model", "show", bad), "vocab_sise", "unknown field")


def test_missing_key(cli, tmp_path):
    bad = _copy(tmp_path, MODEL, "m.yaml", "vocab_size: 129280\n", "")
    assert_error(cli("model", "show", bad), "vocab_size", "missing")


def test_zero_bandwidth(cli, tmp_path):
    bad = _copy(tmp_path, CHIP, "chip.yaml", "hbm_bandwidth_Bps: {value: 1.6e12", "hbm_bandwidth_Bps: {value: 0")
    assert_error(cli("hw", "show", bad), "die.hbm_bandwidth_Bps.value", "greater than 0")


def test_negative_capacity(cli, tmp_path):
    bad = _copy(tmp_path, CHIP, "chip.yaml", "hbm_capacity_B: {value: 64.0e9", "hbm_capacity_B: {value: -64.0e9")
    assert_error(cli("hw", "show", bad), "hbm_capacity_B")


def test_missing_source(cli, tmp_path):
    text = CHIP.read_text().replace('matrix_units: {value: 24, source: "paper §3.3.1 (AI Cube cores per die)"}', "matrix_units: {value: 24}")
    p = tmp_path / "chip.yaml"
    p.write_text(text)
    assert_error(cli("hw", "show", p), "matrix_units.source", "missing")


def test_system_referencing_user_chip(cli, tmp_path):
    # a system file next to its own chip file uses that chip; a broken chip is reported
    _copy(tmp_path, CHIP, "ascend-910c.yaml", "vector_units: {value: 48", "vector_units: {value: 0")
    system = _copy(tmp_path, SYSTEM, "sys.yaml")
    assert_error(cli("predict", "decode", "--hardware", system), "ascend-910c.yaml", "vector_units")


def test_unknown_spec_name(cli):
    assert_error(cli("predict", "decode", "--model", "llama-9000"), "unknown model spec 'llama-9000'", "deepseek-r1")


def test_missing_path(cli):
    assert_error(cli("predict", "decode", "--hardware", "/no/such/system.yaml"), "/no/such/system.yaml", "no such")


def test_wrong_kind(cli):
    assert_error(cli("predict", "decode", "--hardware", CHIP), "kind", "expected 'system'")


def test_set_unknown_path(cli):
    assert_error(cli("predict", "decode", "--set", "chip.die.hbm_bandwith_Bps=1e12"), "hbm_bandwith_Bps", "hbm_bandwidth_Bps")


def test_set_bad_prefix_and_syntax(cli):
    assert_error(cli("predict", "decode", "--set", "gpu.x=1"), "chip., system., model. or stack.")
    assert_error(cli("predict", "decode", "--set", "chip.die.hbm_bandwidth_Bps"), "KEY.PATH=VALUE")


def test_set_invalid_value(cli):
    assert_error(cli("predict", "decode", "--set", "system.tiers.ub.bandwidth_Bps=-5"), "tiers.ub.bandwidth_Bps")


def test_ep_not_dividing_dies(cli):
    assert_error(cli("predict", "decode", "--ep", "7"), "--ep 7 does not divide --dies 320")


def test_ep_not_dividing_experts(cli):
    line = assert_error(cli("predict", "decode", "--ep", "256", "--dies", "256", "--redundant-experts", "32",
                            "--shared-copies", "32"), "does not divide the 320 expert instances")
    assert "256 routed + 32 redundant + 32 shared" in line


def test_batch_zero(cli):
    assert_error(cli("predict", "decode", "--batch", "0"), "--batch must be >= 1 (got 0)")


@pytest.mark.parametrize("value", ["1.5", "-0.1"])
def test_acceptance_outside_unit_interval(cli, value):
    assert_error(cli("predict", "decode", "--mtp-acceptance", value), "--mtp-acceptance must be within [0, 1]")


def test_bad_microbatches_and_format(cli):
    assert_error(cli("predict", "decode", "--microbatches", "3"), "--microbatches 3")
    assert_error(cli("predict", "decode", "--format", "xml"), "--format xml")
    assert_error(cli("predict", "decode", "--kv-dtype", "fp8"), "--kv-dtype fp8")
    assert_error(cli("predict", "decode", "--expert-imbalance", "lots"), "--expert-imbalance lots")
    assert_error(cli("predict", "decode", "--expert-imbalance", "0.5"), "--expert-imbalance must be >= 1")


def test_prefill_tp_not_dividing(cli):
    assert_error(cli("predict", "prefill", "--attn-tp", "3"), "--attn-tp 3")


def test_non_numeric_flag_is_usage_error(cli):
    code, out, err = cli("predict", "decode", "--batch", "many")
    assert code == 2 and "Traceback" not in err and "--batch" in err


def test_validate_missing_and_malformed_reference(cli, tmp_path):
    assert_error(cli("validate", tmp_path / "none.yaml"), "no such reference file")
    bad = tmp_path / "ref.yaml"
    bad.write_text("name: x\nsource: y\nrows:\n  - {id: A, description: d, where: w, phase: decode, metric: tpot_ms}\n")
    assert_error(cli("validate", bad), "ref.yaml", "rows.0.paper")


def test_out_file_in_missing_directory(cli, tmp_path):
    assert_error(cli("predict", "decode", "--out", tmp_path / "no" / "x.csv"), "does not exist")


def test_set_error_names_the_flag_not_the_file(cli):
    line = assert_error(cli("predict", "decode", "--set", "model.precision.kv_cache=fp64"), "--set model.precision.kv_cache=fp64")
    assert "'bf16'" in line


def test_shared_expert_needs_a_copy(cli):
    assert_error(cli("predict", "decode", "--shared-copies", "0"), "--shared-copies must be >= 1")


def test_negative_redundant_experts(cli):
    assert_error(cli("predict", "decode", "--redundant-experts", "-32"), "--redundant-experts must be >= 0")


def test_tier_without_bandwidth(cli, tmp_path):
    _copy(tmp_path, CHIP, "ascend-910c.yaml")
    system = _copy(tmp_path, SYSTEM, "sys.yaml", '    bandwidth_Bps: {value: 25.0e9, source: "paper §3.3.1: 200 Gbps per die (400 Gbps per package), RoCE"}\n', "")
    assert_error(cli("hw", "show", system), "tiers.rdma.bandwidth_Bps", "missing")


def test_bad_system_names_every_problem(cli, tmp_path):
    """A system file with several mistakes gets one line that names each of them."""
    _copy(tmp_path, CHIP, "ascend-910c.yaml")
    text = SYSTEM.read_text()
    text = text.replace("    tiers: [ub]\n    message", "    tiers: [nvlink]\n    message", 1)  # unknown tier in an EP route
    text = text.replace("bandwidth_Bps: {value: 135.0e9", "bandwidth_Bps: {value: 0")  # a tier with zero bandwidth
    text = text.replace("kv_transfer_tier: rdma", "kv_transfer_tier: roce")
    p = tmp_path / "sys.yaml"
    p.write_text(text)
    line = assert_error(cli("hw", "show", p), str(p), "tiers.ub.bandwidth_Bps")
    assert line.count("\n") == 0
    code, out, err = cli("hw", "show", p)
    assert "problems" in err and "greater than 0" in err


def test_inconsistent_routing(cli, tmp_path):
    bad = _copy(tmp_path, MODEL, "m.yaml", "experts_per_token: 8", "experts_per_token: 300")
    assert_error(cli("model", "show", bad), "moe", "experts_per_token (300) exceeds routed_experts (256)")


def test_attention_share_outside_unit_interval(cli):
    assert_error(cli("predict", "decode", "--attention-share", "1.2"), "--attention-share must be within (0, 1)")


def test_bad_gemm_fields_named_together(cli, tmp_path):
    """An unknown dtype under matmul_by_dtype and an overlap exponent below 1 (the p-norm
    would fall below the sum of the terms) are both named in one line."""
    chip = _copy(tmp_path, CHIP, "c.yaml", "  matmul_tile_rows:",
                 "  matmul_overlap_exponent: {value: 0.5, source: test}\n"
                 "  matmul_by_dtype: {fp5: {compute: {value: 0.8, source: test}}}\n  matmul_tile_rows:")
    line = assert_error(cli("hw", "show", chip), "matmul_by_dtype.fp5: not a dtype", "matmul_overlap_exponent: expected >= 1")
    assert str(chip) in line


def test_bad_gemm_layout(cli, tmp_path):
    from cmperf.calibration.reference import builtin_references

    src = next(p for p in builtin_references() if p.name == "h800-microbenchmarks.yaml")
    bad = _copy(tmp_path, Path(src), "r.yaml", "layout: masked", "layout: striped")
    assert_error(cli("validate", bad), "gemm layout 'striped': expected contiguous or masked")
