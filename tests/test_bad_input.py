"""Bad input, generated and tabled (issue 11): every example of the issue gives one clear line and
exit 2 (or, where the value is legitimate, a correct result); hypothesis draws flags, spec
fields, reference rows and CSV cells from the weird values a careless or hostile user could type,
and each run must end in a clear error or a clean result: no traceback, no hang, no NaN, inf or
negative time in the output, no partial file. The same cases run one process each, counted, in
benchmarks/bad_input_campaign.py."""

import json
import os
import re
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings, strategies as st

from bad_inputs import CHIP, MODEL, SYSTEM, WEIRD_NUMBERS, _leaves, bad_output, flag_cases, judge, private_device
from cmperf.errors import SpecError
from helpers import one_line_error

CLEAN = ("clear error", "ok")
FAST = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def error_line(result, *names):
    """The one error line of a (code, stdout, stderr) run, naming each of ``names``."""
    code, _, err = result
    return one_line_error(code, err, *names)


def run_judged(cli, argv, expect="any"):
    code, out, err = cli(*argv)
    return judge(expect, code, out, err), code, out, err


# --------------------------------------------------------------------------- the issue's examples, one by one
@pytest.mark.parametrize("flag,value", [
    ("--batch", "nan"), ("--kv-len", "nan"), ("--kv-len", "inf"), ("--mtp-acceptance", "nan"),
    ("--attention-share", "nan"), ("--expert-imbalance", "nan"), ("--expert-imbalance", "inf"), ("--batch", "inf")])
def test_nan_and_inf_flags_are_errors_naming_the_flag(cli, flag, value):
    line = error_line(cli("predict", "decode", flag, value), flag, "finite")
    assert "np.float64" not in line


def test_nan_tokens_per_npu(cli):
    error_line(cli("predict", "prefill", "--tokens-per-npu", "nan"), "--tokens-per-npu", "finite")


@pytest.mark.parametrize("args,needles", [
    (["decode", "--batch", "1e-300"], ["--batch must be >= 1"]),
    (["decode", "--expert-imbalance", "500"], ["--expert-imbalance 500", "EP 320", "at most 320"]),
    (["prefill", "--tokens-per-npu", "100"], ["--tokens-per-npu 100", "less than one prompt", "--prompt-len 4096"]),
    (["decode", "--attention-share", "1e-300"], ["--attention-share", "less than one core"]),
    (["decode", "--ep", "0"], ["--ep must be >= 1 (got 0)"]),
    (["decode", "--ep", "-1"], ["--ep must be >= 1 (got -1)"]),
    (["prefill", "--ep", "0"], ["--ep must be >= 1"]),
    (["decode", "--shared-copies", "-1"], ["--shared-copies must be >= 0"]),
    (["prefill", "--shared-copies", "-1"], ["--shared-copies must be >= 0"]),
    (["prefill", "--shared-copies", "0"], ["--shared-copies must be >= 1"]),  # 0 no longer means "one per die"
])
def test_impossible_values_and_sentinels(cli, args, needles):
    error_line(cli("predict", *args), *needles)


def test_legitimate_edges_still_predict(cli):
    """The checks reject only the impossible: one request per NPU, tokens of exactly one
    prompt, an imbalance equal to EP and an attention share of one core give results."""
    for args in (["decode", "--batch", "1"], ["prefill", "--tokens-per-npu", "4096"],
                 ["decode", "--expert-imbalance", "320"], ["decode", "--attention-share", f"{1 / 24}"]):
        code, out, err = cli("predict", *args, "-f", "json")
        assert code == 0, err
        assert bad_output(out) == ""


def test_dies_alone_does_not_blame_an_ep_never_given(cli):
    line = error_line(cli("predict", "decode", "--dies", "7", "--redundant-experts", "32", "--shared-copies", "32"),
                      "EP 7 (= --dies; --ep not given)")
    assert "--ep 7" not in line


def test_search_sweep_cannot_bypass_the_row_checks(cli):
    # 128 routed experts at EP320: 128 + 32 + 32 = 192 instances do not divide over 320 dies
    line = error_line(cli("search", "decode", "--tpot-slo", "50", "--batch", "8", "--redundant-experts", "32",
                          "--shared-copies", "32", "--sweep", "model.moe.routed_experts=128"), "192 expert instances")
    assert "configurations of the grid are invalid" in line
    error_line(cli("search", "decode", "--tpot-slo", "50", "--batch", "8",
                   "--sweep", "chip.die.matrix_units=20,24.5,26"), "--sweep chip.die.matrix_units=24.5", "integer")
    error_line(cli("search", "decode", "--tpot-slo", "50", "--batch", "8",
                   "--sweep", "system.expert_parallel.decode.message.header_B=0,0.5"), "header_B", "integer")
    error_line(cli("search", "decode", "--tpot-slo", "50", "--batch", "8",  # fractional bytes
                   "--sweep", "chip.die.hbm_capacity_B=64e9,64.5e9,1e-300"), "hbm_capacity_B=1e-300", "whole number")


def test_search_swept_rows_are_checked_with_their_own_values(cli):
    code, out, err = cli("search", "decode", "--tpot-slo", "50", "--batch", "8", "-f", "json", "--redundant-experts", "32",
                         "--shared-copies", "32", "--sweep", "model.moe.routed_experts=128,256")
    assert code == 0, err
    data = json.loads(out)
    assert data["summary"]["dropped_invalid"] == data["summary"]["evaluated"] > 0  # one routed count of two
    assert "192 expert instances" in err


@pytest.mark.parametrize("value", ["0", "-2"])
def test_search_report_top_must_be_positive(cli, tmp_path, value):
    out = tmp_path / "s.csv"
    assert cli("search", "decode", "--tpot-slo", "50", "--batch", "8,16", "--out", out, "-f", "json")[0] == 0
    error_line(cli("search", "report", out, "--top", value), f"--top {value}")


def test_search_microbatches_zero_is_not_auto(cli):
    error_line(cli("search", "decode", "--tpot-slo", "50", "--microbatches", "0"), "--microbatches 0", "auto")


def test_hw_show_chip_refuses_system_override(cli):
    error_line(cli("hw", "show", "ascend-910c", "--set", "system.nodes=3"), "--set system.nodes", "chip")


def test_set_error_names_the_flag_not_the_shipped_file(cli):
    for s, needle in (("model.moe.routed_experts=4", "experts_per_token (8) exceeds routed_experts (4)"),
                      ("model.first_dense_layers=100", "exceeds num_layers"),
                      ("system.kv_transfer_tier=zzz", "tier 'zzz'")):
        line = error_line(cli("predict", "decode", "--set", s), f"--set {s}", needle)
        assert str(MODEL.parent) not in line and str(SYSTEM.parent) not in line and "site-packages" not in line


def test_errors_never_echo_unbounded_input(cli):
    huge = "x" * 100_000
    for argv in (["predict", "decode", "--set", f"chip.die.hbm_bandwidth_Bps={huge}"],
                 ["predict", "decode", "--set", f"chip.{huge}=1"],
                 ["predict", "decode", "--model", huge],
                 ["predict", "decode", "--batch", huge],
                 ["search", "decode", "--tpot-slo", "50", "--batch", huge]):
        line = error_line(cli(*argv))
        assert len(line) < 600, len(line)


def test_hardware_directory(cli):
    error_line(cli("predict", "decode", "--hardware", "/tmp"), "/tmp", "is a directory")
    error_line(cli("hw", "show", "/tmp"), "/tmp", "is a directory")


@pytest.mark.parametrize("argv,needle", [
    (["predict", "decode", "--batch", "abc"], "--batch"), (["predict", "decode", "--dies", "1.5"], "--dies"),
    (["search", "decode", "--tpot-slo", "x"], "--tpot-slo"), (["predict", "decode", "--nope"], "--nope"),
    (["predict", "decode", "--batch"], "--batch"), (["search", "report"], "results"), (["nosuch"], "nosuch"),
    (["model", "show", "--context", "0"], "--context")])
def test_usage_errors_are_one_line(cli, argv, needle):
    line = error_line(cli(*argv), needle)
    assert line.startswith("cmperf: error: ")


def test_help_and_version_still_work(cli):
    assert cli("--version")[0] == 0
    code, out, _ = cli("predict", "decode", "--help")
    assert code == 0 and "--batch" in out


# --------------------------------------------------------------------------- spec files
def _spec_in(tmp_path, kind, data: bytes):
    """The command that reads ``data`` as the chip, system or model file, and the file's path."""
    if kind == "chip":
        (tmp_path / CHIP.name).write_bytes(data)
        (tmp_path / "sys.yaml").write_text(SYSTEM.read_text())
        return ["predict", "decode", "--hardware", tmp_path / "sys.yaml", "-f", "json"], tmp_path / CHIP.name
    if kind == "system":
        (tmp_path / "sys.yaml").write_bytes(data)
        return ["predict", "decode", "--hardware", tmp_path / "sys.yaml", "-f", "json"], tmp_path / "sys.yaml"
    (tmp_path / "m.yaml").write_bytes(data)
    return ["predict", "decode", "--model", tmp_path / "m.yaml", "-f", "json"], tmp_path / "m.yaml"


SRC = {"chip": CHIP, "system": SYSTEM, "model": MODEL}


@pytest.mark.parametrize("kind", ["chip", "system", "model"])
@pytest.mark.parametrize("name,make,needle", [
    ("UTF-16", lambda t: t.encode("utf-16"), "not UTF-8"),
    ("UTF-16 without BOM", lambda t: t.encode("utf-16-le"), "not UTF-8"),
    ("binary", lambda t: bytes(range(256)) * 4, "not UTF-8"),
    ("a Latin-1 byte", lambda t: t.encode() + b"# caf\xe9\n", "byte 0xe9"),
    ("nested 5,000 deep", lambda t: (t + "\nx: " + "[" * 5000 + "]" * 5000).encode(), "deeper than 32"),
    ("3 MB", lambda t: (t + "#" + "x" * 3_000_000).encode(), "at most 1,000,000"),
    ("duplicate key", lambda t: (t + "\nname: again\n").encode(), "'name' given twice (first at line"),
])
def test_unreadable_spec_files(cli, tmp_path, kind, name, make, needle):
    argv, path = _spec_in(tmp_path, kind, make(SRC[kind].read_text()))
    error_line(cli(*argv), str(path), needle)


@pytest.mark.parametrize("kind", ["chip", "system", "model"])
@pytest.mark.parametrize("where", ["extra keys", "description", "kind"])
def test_billion_laughs_fails_fast(cli, tmp_path, kind, where):
    laughs = "l0: &l0 lol\n" + "".join(f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 9)}]\n" for i in range(1, 10))
    text = SRC[kind].read_text()
    text = text + "\n" + laughs if where == "extra keys" else laughs + re.sub(rf"(?m)^{where}: .*$", f"{where}: *l9", text, count=1)
    argv, path = _spec_in(tmp_path, kind, text.encode())
    t0 = time.perf_counter()
    line = error_line(cli(*argv), str(path), "aliases expand to more than")
    assert time.perf_counter() - t0 < 2 and len(line) < 400


def test_inf_in_a_numeric_spec_field_names_the_line(cli, tmp_path):
    text = CHIP.read_text()
    line_no = next(i for i, l in enumerate(text.splitlines()) if "hbm_bandwidth_Bps" in l) + 1
    argv, path = _spec_in(tmp_path, "chip", text.replace("hbm_bandwidth_Bps: {value: 1.6e12", "hbm_bandwidth_Bps: {value: .inf").encode())
    error_line(cli(*argv), str(path), f"line {line_no}", ".inf is not a finite number")


def test_duplicate_bandwidth_is_not_last_wins(cli, tmp_path):
    text = CHIP.read_text().replace("hbm_bandwidth_Bps: {value: 1.6e12", "hbm_bandwidth_Bps: {value: 1.6e12, value: 3.2e12", 1)
    argv, path = _spec_in(tmp_path, "chip", text.encode())
    error_line(cli(*argv), str(path), "'value' given twice")


@FAST
@given(kind=st.sampled_from(["chip", "system", "model"]), pick=st.integers(0, 10_000),
       value=st.sampled_from([".inf", "-.inf", ".nan", "-1", "0", "1e-300", "1e300", "'12'", "[1, 2]", "{value: 1}", "null",
                              "true", "1.5", "'x' * 3", "&a 1", "*nope", "!!binary aGk=", "!!python/object:os.system x",
                              "!!int 1.5", "!!timestamp x", "!!bool maybe", "9" * 5000]))
def test_any_spec_field_replaced_by_anything(cli, tmp_path_factory, kind, pick, value):
    text = SRC[kind].read_text()
    leaves = _leaves(text)
    line, a, b = leaves[pick % len(leaves)]
    lines = text.splitlines()
    lines[line] = lines[line][:a] + value + lines[line][b:]
    argv, _ = _spec_in(tmp_path_factory.mktemp("spec"), kind, ("\n".join(lines) + "\n").encode())
    verdict, code, out, err = run_judged(cli, argv)
    assert verdict in CLEAN, (verdict, lines[line], err[-500:], out[:300])


@settings(max_examples=200, deadline=None)
@given(st.one_of(st.binary(max_size=300), st.text(max_size=300).map(str.encode),
                 st.lists(st.sampled_from(["a:", " b:", "- ", "[", "]", "{", "}", "&x ", "*x", "<<: *x", "\n", ".inf", "!!",
                                           "'", '"', "? ", "---", "...", "%YAML 1.1\n", "\t", ",", "|", ">", "!!int ",
                                           "!!float ", "!!bool ", "!!timestamp ", "!!binary ", "!!set ", "9" * 5000,
                                           "maybe", "1.5", "x"]),
                          max_size=60).map(lambda parts: "".join(parts).encode())))
def test_yaml_reader_never_raises_anything_but_a_spec_error(tmp_path_factory, data):
    from cmperf.specs.loader import read_yaml

    p = tmp_path_factory.mktemp("y") / "f.yaml"
    p.write_bytes(data)
    try:
        raw = read_yaml(p)
    except SpecError as e:
        assert "\n" not in str(e) and len(str(e)) < 600
    else:
        assert isinstance(raw, dict)


def test_optional_system_field_deleted(cli, tmp_path):
    """Optional fields may be left out of a system file without a TypeError on None."""
    raw = yaml.safe_load(SYSTEM.read_text())
    for tier in raw["tiers"].values():
        for key in ("measured", "nominal_Bps", "per"):
            tier.pop(key, None)
    raw.pop("ub_fabric", None)
    raw.pop("racks", None)
    (tmp_path / CHIP.name).write_text(CHIP.read_text())
    (tmp_path / "sys.yaml").write_text(yaml.safe_dump(raw, sort_keys=False))
    code, out, err = cli("predict", "decode", "--hardware", tmp_path / "sys.yaml", "-f", "json")
    assert code == 0, err
    assert bad_output(out) == ""


# --------------------------------------------------------------------------- command lines, drawn
FLAG_CASES = flag_cases()


@FAST
@given(case=st.sampled_from(FLAG_CASES))
def test_generated_flag_cases(cli, case):
    name, argv, expect = case
    verdict, code, out, err = run_judged(cli, argv, expect)
    assert verdict in CLEAN, (name, verdict, err[-500:])


@pytest.fixture(scope="module")
def hostile_cases(tmp_path_factory):
    """Issue 17's families that run in-process (no runner options): a few of each, chosen
    with a fixed seed, skipping the slow ones (full plans, 6,000-row files)."""
    import random

    from bad_inputs import compare_cases, hf_cases, plan_cases, reference_file_cases, what_if_cases

    tmp = tmp_path_factory.mktemp("hostile")
    families = [plan_cases(tmp / "plan", big=False), compare_cases(tmp / "compare"), hf_cases(tmp / "hf"), what_if_cases(),
                reference_file_cases(tmp / "refs")]
    slow = ("16 million", "1,000,001", "6,000 plain", "--prompt-len 1", "--prompt-len 2", "--prompt-len 3", "block_tokens 128,512",
            "cached column", "BOM", "batch=64", "search --sweep")
    pick = random.Random(17)
    kept = [[c for c in fam if not any(w in c[0] for w in slow)] for fam in families]
    return [c for fam in kept for c in pick.sample(fam, min(8, len(fam)))]


def test_issue_17_families_in_process(cli, hostile_cases):
    for name, argv, expect in hostile_cases:
        verdict, code, out, err = run_judged(cli, argv, expect)
        assert verdict in CLEAN, (name, verdict, err[-500:])


NUMERIC_FLAGS = {"decode": ["--batch", "--prompt-len", "--output-len", "--kv-len", "--dies", "--ep", "--tp", "--mtp-k",
                            "--mtp-acceptance", "--expert-imbalance", "--redundant-experts", "--shared-copies",
                            "--attention-share"],
                 "prefill": ["--tokens-per-npu", "--prompt-len", "--dies", "--ep", "--attn-tp", "--expert-imbalance",
                             "--redundant-experts", "--shared-copies"]}


@FAST
@given(phase=st.sampled_from(["decode", "prefill"]), data=st.data(),
       value=st.one_of(st.floats(allow_nan=True, allow_infinity=True).map(repr), st.integers(-10**12, 10**12).map(str),
                       st.sampled_from(WEIRD_NUMBERS), st.text(max_size=12)))
def test_any_value_of_any_flag(cli, phase, data, value):
    flag = data.draw(st.sampled_from(NUMERIC_FLAGS[phase]))
    verdict, code, out, err = run_judged(cli, ["predict", phase, flag, value, "-f", "json"])
    assert verdict in CLEAN, (flag, value, verdict, err[-500:], out[:300])


@FAST
@given(value=st.one_of(st.floats(allow_nan=True, allow_infinity=True).map(repr), st.sampled_from(WEIRD_NUMBERS)),
       path=st.sampled_from(["chip.die.hbm_bandwidth_Bps", "chip.die.matrix_units", "chip.efficiency.matmul_compute",
                             "system.tiers.ub.latency_s", "system.collectives.step_time_cv", "model.num_layers",
                             "model.serving.default_expert_imbalance", "chip.latency.kernel_launch_s"]))
def test_any_set_value(cli, value, path):
    verdict, code, out, err = run_judged(cli, ["predict", "decode", "--set", f"{path}={value}", "-f", "json"])
    assert verdict in CLEAN, (path, value, verdict, err[-500:], out[:300])


# --------------------------------------------------------------------------- reference files
REF = ("name: t\nsource: test\nrows:\n  - {id: A, description: d, where: w, phase: decode, metric: tpot_ms, "
       "paper: 20, tolerance: 0.5, scenario: {%s: %s}}\n")


@pytest.mark.parametrize("row,needles", [
    ("{id: A, description: d, where: w, phase: decode, metric: tpot_ms, paper: 20, tolerance: 0.5, scenario: {batch: many}}",
     ["row A", "scenario.batch", "'many'"]),
    ("{id: A, description: d, where: w, phase: decode, metric: tpot_ms, paper: 20, tolerance: 0.5, scenario: {batch: [8, 16]}}",
     ["row A", "scenario.batch", "one value"]),
    ("{id: A, description: d, where: w, phase: spec, metric: chip.die, paper: 20, tolerance: 0.5}",
     ["row A", "chip.die", "a section"]),
    ("{id: A, description: d, where: w, phase: spec, metric: chip.name, paper: 20, tolerance: 0.5}",
     ["row A", "chip.name", "str field"]),
    ("{id: A, description: d, where: w, phase: decode, metric: tpot_ms, paper: 20, tolerance: .inf, scenario: {}}",
     [".inf is not a finite number"]),
    ("{id: A, description: d, where: w, phase: decode, metric: tpot_ms, paper: 20, tolerance: 'inf', scenario: {}}",
     ["tolerance", "a valid number"]),  # a quoted number is text, not a number
    ("{id: A, description: d, where: w, phase: decode, metric: tpot_ms, paper: 20, tolerance: 0.5, scenario: {dies: 7, redundant_experts: 32, shared_copies: 32}}",
     ["row A", "EP 7 (= scenario.dies"]),
])
def test_reference_rows(cli, tmp_path, row, needles):
    p = tmp_path / "ref.yaml"
    p.write_text(f"name: t\nsource: test\nrows:\n  - {row}\n")
    line = error_line(cli("validate", p), str(p), *needles)
    assert "--" not in line.split(str(p))[1]  # the file's fields, not command-line flags


@FAST
@given(key=st.sampled_from(["batch", "kv_len", "dies", "ep", "tp", "mtp", "mtp_acceptance", "expert_imbalance",
                            "prompt_len", "microbatches", "shared_copies", "attention_share", "nope"]),
       value=st.sampled_from([".nan", ".inf", "-1", "0", "1e-300", "1e300", "many", "[1, 2]", "{a: 1}", "null", "true",
                              "default", "auto", "1.5", "8"]))
def test_any_reference_scenario_value(cli, tmp_path_factory, key, value):
    p = tmp_path_factory.mktemp("ref") / "ref.yaml"
    p.write_text(REF % (key, value))
    verdict, code, out, err = run_judged(cli, ["validate", p, "-f", "json"])
    assert verdict in CLEAN or code == 1, (key, value, verdict, err[-500:])
    if code == 2:
        assert str(p) in err


# --------------------------------------------------------------------------- search CSVs
@pytest.fixture(scope="module")
def search_csv(tmp_path_factory):
    from cmperf.search import search

    out = tmp_path_factory.mktemp("csv") / "s.csv"
    search("decode", {"batch": [8, 16, 32, 64]}, 50).table.to_csv(out, index=False)
    return out


@FAST
@given(col=st.sampled_from(["tpot_ms", "throughput_per_npu", "fits", "slo_ms", "rank", "batch", "ep", "phase",
                            "memory_per_die_bytes", "meets_slo", "attention_share"]),
       row=st.integers(0, 3),
       value=st.sampled_from(["nan", "inf", "-1", "0", "fast", "", "1e300", "True", "1.5", "decode", "prefill"]))
def test_any_search_csv_cell(cli, tmp_path_factory, search_csv, col, row, value):
    import pandas as pd

    t = pd.read_csv(search_csv).astype(object)
    t.loc[row, col] = value
    p = tmp_path_factory.mktemp("csv") / "bad.csv"
    t.to_csv(p, index=False)
    verdict, code, out, err = run_judged(cli, ["search", "report", p, "-f", "json"])
    assert verdict in CLEAN or code == 1, (col, row, value, verdict, err[-500:], out[:300])


# --------------------------------------------------------------------------- output paths
def _out_paths(tmp_path):
    fifo = tmp_path / "fifo.csv"
    os.mkfifo(fifo)
    (tmp_path / "a-file").write_text("x")
    return {"empty": ("", "expected the path"), "directory": (str(tmp_path), "is a directory"),
            "directory/": (f"{tmp_path}/", "is a directory"), "missing parent": (str(tmp_path / "no" / "x.csv"), "does not exist"),
            "parent is a file": (str(tmp_path / "a-file" / "x.csv"), "is not a directory"),
            "FIFO": (str(fifo), "not a regular file"),
            "unwritable": ("/sys/x.csv", "cannot write"), "name too long": (str(tmp_path / ("x" * 300)), "cannot write"),
            # a device of our own: a regression must not replace the system's /dev/null by a file
            **({"device": (str(private_device(tmp_path)), "not a regular file")} if private_device(tmp_path) else {})}


# A directory that looks writable to root (os.access) fails only when written: the error then
# names the file the user gave, not always the flag.
NAMED_BY_PATH = {"unwritable"}


OUTPUT_CASES = [(command, flag) for command in (["predict", "decode"], ["search", "decode", "--tpot-slo", "50", "--batch", "8"],
                                                ["compare", "decode"])
                for flag in ("--out", "--plot") if not (flag == "--plot" and command[0] == "predict")]  # predict draws no figure


@pytest.mark.parametrize("command, flag", OUTPUT_CASES)
def test_output_paths(cli, tmp_path, command, flag):
    before = None
    for name, (path, needle) in _out_paths(tmp_path).items():
        if name == "unwritable" and os.access("/sys", os.W_OK) and os.geteuid() != 0:
            continue
        before = sorted(p.name for p in tmp_path.iterdir()) if before is None else before
        code, out, err = cli(*command, flag, path, "-f", "json")
        if name == "unwritable" and code == 0:  # a system where /sys is writable: nothing to test
            continue
        line = one_line_error(code, err, path if name in NAMED_BY_PATH else flag, needle)
        assert "Traceback" not in line
        assert sorted(p.name for p in tmp_path.iterdir()) == before, name  # nothing partial, no temporary file
        assert stat.S_ISFIFO(os.stat(tmp_path / "fifo.csv").st_mode)  # the FIFO was not replaced
        if (tmp_path / "null-device").exists():
            assert stat.S_ISCHR(os.stat(tmp_path / "null-device").st_mode)  # nor the device


@pytest.mark.parametrize("umask,mode", [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_written_files_respect_the_umask(cli, tmp_path, umask, mode):
    old = os.umask(umask)
    try:
        out = tmp_path / "p.csv"
        assert cli("predict", "decode", "--out", out, "-f", "json")[0] == 0
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(out).st_mode) == mode


def test_an_existing_file_keeps_its_mode(cli, tmp_path):
    out = tmp_path / "p.csv"
    out.write_text("old")
    os.chmod(out, 0o640)
    assert cli("predict", "decode", "--out", out, "-f", "json", "--force")[0] == 0  # not cmperf's: replaced on demand
    assert stat.S_IMODE(os.stat(out).st_mode) == 0o640 and "\nphase," in out.read_text()  # after the provenance lines
    assert cli("predict", "decode", "--out", out, "-f", "json")[0] == 0  # cmperf's own now
    assert stat.S_IMODE(os.stat(out).st_mode) == 0o640


# --------------------------------------------------------------------------- real processes: exit codes, hangs
def _cmperf(*args, timeout=30):
    return subprocess.run([sys.executable, "-m", "cmperf.cli", *map(str, args)], capture_output=True, text=True,
                          timeout=timeout)


def test_process_usage_error_and_billion_laughs(tmp_path):
    r = _cmperf("predict", "decode", "--batch", "abc")
    one_line_error(r.returncode, r.stderr, "--batch", "'abc'")
    laughs = "l0: &l0 lol\n" + "".join(f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 9)}]\n" for i in range(1, 10))
    p = tmp_path / "m.yaml"
    p.write_text(MODEL.read_text() + laughs)
    t0 = time.perf_counter()
    r = _cmperf("model", "show", p, timeout=20)
    one_line_error(r.returncode, r.stderr, str(p), "aliases")
    assert time.perf_counter() - t0 < 10


# --------------------------------------------------------------------------- Hugging Face config.json
HF = json.dumps({"model_type": "llama", "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
                 "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 128256, "torch_dtype": "bfloat16"})


@pytest.mark.parametrize("text,needle", [
    (HF.replace('"llama"', '["llama"]'), "model_type"), (HF.replace('"bfloat16"', '{"a": 1}'), None),
    (HF.replace("4096", "1e400"), "not a finite number"), (HF.replace("4096", "NaN"), "not a finite number"),
    (HF.replace('"vocab_size"', '"hidden_size"'), "given twice"), (HF[:-1] + ', "x": ' + "[" * 5000 + "]" * 5000 + "}", "deeper than 32"),
    (HF.replace("4096", '"4096"'), "hidden_size"), (HF[:40], "malformed JSON")])
def test_bad_hugging_face_configs(cli, tmp_path, text, needle):
    p = tmp_path / "config.json"
    p.write_text(text)
    code, out, err = cli("model", "show", p, "-f", "json")
    if needle is None:  # an unknown dtype is served as bf16, with a warning
        assert code == 0 and "torch_dtype" in err and bad_output(out) == ""
    else:
        one_line_error(code, err, str(p), needle)
