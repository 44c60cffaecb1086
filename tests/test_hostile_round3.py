"""Issue 23's hostile inputs, each as the user typed it (in-process CLI, fast): the boundaries
where deployments, stacks, serving-evidence files, traces, simulate's traffic flags, plot
names and model contexts enter. Each ends in one clear line naming the file, the group or row
and the field (exit 2), a correct answer, or an answer with a warning that says what is off.
The same families run one process each in benchmarks/bad_input_campaign.py (round3_cases)."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import yaml

from bad_inputs import judge, round3_flag_cases
from helpers import one_line_error

ROOT = Path(__file__).resolve().parents[1]
SERVING = ROOT / "cmperf" / "reference" / "sglang-a3-serving.yaml"
SIM = ["--num-prompts", "10", "--request-rate", "5", "-f", "json"]


def error(result, *words):
    code, _, err = result
    return one_line_error(code, err, *words)


def _write(tmp_path, name, data) -> Path:
    p = tmp_path / name
    p.write_text(data if isinstance(data, str) else yaml.safe_dump(data))
    return p


# --------------------------------------------------------------------------- deployment files and flags
@pytest.mark.parametrize("group,words", [
    ({"count": 1, "dies": -32}, ["prefill[0].dies", "whole number from 1", "-32"]),
    ({"count": 1, "dies": 32, "attn_tp": 3}, ["prefill[0]", "attn_tp 3 does not divide dies 32"]),
    ({"count": 10**12, "dies": 32}, ["prefill[0].count", "100,000"]),
    ({"count": 1, "dies": 32.5}, ["prefill[0].dies", "32.5"]),
    ({"count": 1, "dies": "32"}, ["prefill[0].dies", "'32'"]),
    ({"count": 1, "dies": 32, "batch": 8}, ["prefill[0].batch", "unknown field"]),
    ({"dies": 32}, ["prefill[0].count", "missing"]),
])
def test_a_deployment_file_error_names_the_file_group_and_field(cli, tmp_path, group, words):
    p = _write(tmp_path, "dep.yaml", {"prefill": [group], "decode": [{"count": 1, "dies": 32}]})
    line = error(cli("simulate", "--deployment", p, *SIM), str(p), *words)
    assert "--dies" not in line and "--attn-tp" not in line and "--pool-readers" not in line


def test_a_decode_groups_batch_is_refused_not_ignored(cli, tmp_path):
    p = _write(tmp_path, "dep.yaml", {"prefill": [{"count": 1, "dies": 32}], "decode": [{"count": 1, "dies": 32, "batch": 8}]})
    error(cli("simulate", "--deployment", p, *SIM), "decode[0].batch", "max_running_per_rank")


@pytest.mark.parametrize("raw", ["{}", "6x32", "[1, 2]", "prefill: 3\ndecode: []", "prefill: [3]\ndecode: [{count: 1}]",
                                 "nope: []"])
def test_a_deployment_file_of_the_wrong_shape(cli, tmp_path, raw):
    p = _write(tmp_path, "dep.yaml", raw)
    error(cli("simulate", "--deployment", p, *SIM), str(p))


def test_a_deployment_larger_than_the_system_is_refused(cli, tmp_path):
    error(cli("simulate", "--prefill", "100x32", "--decode", "1x320", *SIM), "1,760 NPUs", "cloudmatrix384 has 384")
    p = _write(tmp_path, "dep.yaml", {"prefill": [{"count": 100000, "dies": 32}], "decode": [{"count": 1, "dies": 320}]})
    error(cli("simulate", "--deployment", p, *SIM), "NPUs", "384")
    error(cli("plan", "--prefill", "1x1000000", "--decode", "1x32"), "--prefill 1x1000000", "768")


def test_plan_checks_a_given_deployment_against_npus(cli):
    error(cli("plan", "--prefill", "6x32", "--decode", "1x320", "--npus", "10"), "256 NPUs", "--npus 10")
    error(cli("plan", "--prefill", "6x32", "--decode", "1x320", "--npus", "-1"), "--npus -1")


@pytest.mark.parametrize("cmd", ["simulate", "plan"])
def test_both_a_deployment_file_and_flags_is_an_error(cli, tmp_path, cmd):
    p = _write(tmp_path, "dep.yaml", {"prefill": [{"count": 1, "dies": 32}], "decode": [{"count": 1, "dies": 32}]})
    error(cli(cmd, "--deployment", p, "--prefill", "2x32", "--decode", "1x64"), "--deployment", "--prefill", "once")


def test_an_instance_of_half_an_npu_or_too_small_for_its_weights_warns(cli):
    code, out, err = cli("simulate", "--prefill", "1x33", "--decode", "1x32", *SIM)
    assert code == 0 and "--prefill 1x33: 33 dies are 16.5 NPUs" in err
    code, out, err = cli("simulate", "--prefill", "1x1", "--decode", "1x32", *SIM)
    assert code == 0 and "--prefill 1x1: does not fit" in err


# --------------------------------------------------------------------------- stacks
@pytest.mark.parametrize("field,value,words", [
    ("max_running_per_rank", "0", ["greater than or equal to 1"]), ("max_prefill_tokens", "0", ["greater than or equal to 1"]),
    ("max_prefill_requests", "0", ["greater than or equal to 1"]), ("kv_block_tokens", "0", ["greater than or equal to 1"]),
    ("scheduler_overhead_s", "1e30", ["less than or equal to 1"]), ("mtp_draft_tokens", "1000000", ["less than or equal to 64"]),
    ("max_prefill_tokens", "9" * 401, ["less than or equal to"]),
])
def test_a_stack_limit_out_of_range_is_an_error(cli, field, value, words):
    line = error(cli("simulate", "--set", f"stack.{field}={value}", *SIM), f"stack.{field}", *words)
    assert len(line) < 400


def test_a_stack_file_with_a_limit_of_zero(cli, tmp_path):
    text = (ROOT / "stacks" / "sglang.yaml").read_text().replace("max_prefill_tokens: {value: 16384", "max_prefill_tokens: {value: 0")
    p = _write(tmp_path, "st.yaml", text)
    error(cli("predict", "decode", "--hardware", "h100-cluster", "--stack", p), "max_prefill_tokens", "greater than or equal to 1")


def test_a_stack_of_another_vendor_gets_a_note(cli):
    code, out, err = cli("predict", "decode", "--hardware", "h100-cluster", "--stack", "vllm-ascend", "-f", "json")
    assert code == 0 and "stack vllm-ascend runs on huawei chips" in err and "nvidia" in err
    code, out, err = cli("predict", "decode", "--hardware", "h100-cluster", "--stack", "sglang", "-f", "json")
    assert code == 0 and "runs on" not in err


# --------------------------------------------------------------------------- serving-evidence files
def _serving(tmp_path, change) -> Path:
    d = yaml.safe_load(SERVING.read_text())
    d["rows"] = d["rows"][1:2]
    change(d, d["rows"][0])
    return _write(tmp_path, "srv.yaml", d)


SERVING_CASES = {
    "deployment {}": (lambda d, r: r.update(deployment={}), ["deployment", "mapping"]),
    "deployment a string": (lambda d, r: r.update(deployment="6x32"), ["deployment"]),
    "measured 0": (lambda d, r: r["measured"].update(mean_tpot_ms=0), ["measured.mean_tpot_ms", "> 0"]),
    "measured 19.5 ms": (lambda d, r: r["measured"].update(mean_tpot_ms="19.5 ms"), ["measured.mean_tpot_ms", "19.5 ms"]),
    "misspelled metric": (lambda d, r: r["measured"].update(p99_ttft_msec=1.0), ["p99_ttft_msec", "unknown metric"]),
    "no target": (lambda d, r: d["targets"].pop("mean_ttft_ms"), ["mean_ttft_ms", "no target"]),
    "prompt 3.5K": (lambda d, r: r["workload"].update(prompt_len="3.5K"), ["workload.prompt_len", "3.5K"]),
    "no num_prompts": (lambda d, r: r["traffic"].pop("num_prompts"), ["traffic.num_prompts", "missing"]),
    "a row a string": (lambda d, r: d["rows"].append("x"), ["row 1"]),
    "a row a number": (lambda d, r: d["rows"].append(3), ["row 1"]),
    "stack limit 0": (lambda d, r: r.update(stack_sets=["max_running_per_rank=0"]), ["stack_sets", "max_running_per_rank"]),
    "10 million prompts": (lambda d, r: r["traffic"].update(num_prompts=10_000_000), ["traffic.num_prompts", "100000"]),
    "two rows one id": (lambda d, r: d["rows"].append(copy.deepcopy(r)), ["is also row 0"]),
    "unknown row field": (lambda d, r: r.update(colour="red"), ["colour", "unknown field"]),
    "measured {}": (lambda d, r: r.update(measured={}), ["measured", "at least one"]),
    "measured negative": (lambda d, r: r["measured"].update(mean_tpot_ms=-3), ["measured.mean_tpot_ms"]),
    "target negative": (lambda d, r: d["targets"].update(mean_tpot_ms=-0.1), ["targets.mean_tpot_ms"]),
    "prompt_len 0": (lambda d, r: r["workload"].update(prompt_len=0), ["workload.prompt_len"]),
    "dies -16": (lambda d, r: r["deployment"]["prefill"][0].update(dies=-16), ["deployment: prefill[0].dies"]),
    "too many NPUs": (lambda d, r: r["deployment"]["prefill"][0].update(count=100), ["816 NPUs", "384"]),
    "attn_tp 3": (lambda d, r: r["deployment"]["prefill"][0].update(attn_tp=3), ["prefill[0]", "attn_tp 3"]),
}


@pytest.mark.parametrize("name", list(SERVING_CASES))
def test_a_broken_serving_file_names_the_file_row_and_field(cli, tmp_path, name):
    change, words = SERVING_CASES[name]
    p = _serving(tmp_path, change)
    line = error(cli("validate", "--serving", p), str(p), *words)
    assert "--num-prompts" not in line and "--request-rate" not in line and "--set" not in line
    if name not in ("a row a string", "a row a number", "target negative", "no target"):
        assert "row LL-6K/1.6K" in line


# --------------------------------------------------------------------------- traffic flags of simulate
@pytest.mark.parametrize("flag,value,words", [
    ("--seed", "-1", ["--seed -1", "2^63"]), ("--seed", str(2**64), ["--seed"]),
    ("--request-rate", "1e-320", ["--request-rate 1e-320"]), ("--request-rate", "0", ["--request-rate"]),
    ("--burstiness", "1e-300", ["--burstiness"]), ("--burstiness", "1e-160", ["--burstiness"]),
    ("--burstiness", "0", ["--burstiness"]), ("--warmup", "-0.1", ["--warmup"]), ("--warmup", "1.5", ["--warmup"]),
    ("--warmup", "nan", ["--warmup"]), ("--warmup", "1", ["--warmup"]), ("--num-prompts", "0", ["--num-prompts"]),
])
def test_a_traffic_flag_out_of_range_is_one_line(cli, flag, value, words):
    argv = ["simulate", "--num-prompts", "10", "--request-rate", "5", flag, value, "-f", "json"]
    error(cli(*argv), *words)


@pytest.mark.parametrize("spelling", ["inf", "+inf", "Inf", "Infinity"])
def test_every_spelling_of_an_infinite_rate_is_all_at_once(cli, spelling):
    code, out, err = cli("simulate", "--num-prompts", "10", "--request-rate", spelling, "-f", "json")
    assert code == 0, err
    assert "10 requests at inf" in json.loads(out)["settings"]["traffic"]


def test_a_warmup_that_leaves_requests_gives_finite_metrics(cli):
    code, out, err = cli("simulate", "--num-prompts", "10", "--request-rate", "5", "--warmup", "0.95", "-f", "json")
    assert code == 0 and "Mean of empty slice" not in err, err


# --------------------------------------------------------------------------- traces
def test_a_trace_row_past_the_token_limit_names_the_line(cli, tmp_path):
    p = _write(tmp_path, "t.csv", "prompt_len,output_len\n100,10\n600000000,600000000\n")
    line = error(cli("simulate", "--trace", p, *SIM), str(p), "line 3")
    assert "--kv-len" not in line


# --------------------------------------------------------------------------- contexts
def test_model_contexts_are_bounded_and_warned_past_the_models(cli):
    for m in ("gpt-oss-120b", "deepseek-v3.2", "qwen3-next-80b-a3b", "glm-4.5"):
        error(cli("model", "show", m, "--context", "9223372036854775808"), "--context")
    code, out, err = cli("predict", "decode", "--hardware", "h100-cluster", "--model", "gpt-oss-120b", "--kv-len", "1048576",
                         "-f", "json")
    assert code == 0 and "8x the longest context gpt-oss-120b supports (131,072 tokens" in err
    code, out, err = cli("predict", "decode", "--hardware", "h100-cluster", "--model", "gpt-oss-120b", "--kv-len", "100000",
                         "-f", "json")
    assert code == 0 and "longest context" not in err


def test_every_shipped_model_states_its_context_with_a_source():
    from cmperf.specs.loader import list_builtin, load_model

    for name, _ in list_builtin("model"):
        m, _ = load_model(name, {})
        assert m.max_context_tokens is not None and m.max_context_tokens.value >= 32768, name
        assert "max_position_embeddings" in m.max_context_tokens.source, name


def test_an_import_carries_max_position_embeddings(cli, tmp_path):
    src = ROOT / "tests" / "data" / "hf-configs" / "llama-3.1-70b.json"
    out = tmp_path / "m.yaml"
    code, _, err = cli("model", "import", src, "--out", out)
    assert code == 0, err
    assert yaml.safe_load(out.read_text())["max_context_tokens"]["value"] == json.loads(src.read_text())["max_position_embeddings"]


# --------------------------------------------------------------------------- plots
@pytest.mark.parametrize("suffix,magic", [(".png", b"\x89PNG"), (".pdf", b"%PDF"), (".svg", b"<?xml"), (".jpg", b"\xff\xd8")])
def test_a_plot_is_written_in_the_format_its_name_asks_for(cli, tmp_path, suffix, magic):
    pytest.importorskip("matplotlib")
    p = tmp_path / f"x{suffix}"
    code, _, err = cli("simulate", "--num-prompts", "10", "--request-rate", "5", "--plot", p, "-f", "json")
    assert code == 0, err
    assert p.read_bytes()[:len(magic)] == magic


@pytest.mark.parametrize("name", ["x.docx", "x", "x.png.bak"])
def test_a_plot_name_of_no_known_format_is_refused_naming_the_formats(cli, tmp_path, name):
    pytest.importorskip("matplotlib")
    error(cli("simulate", "--num-prompts", "10", "--plot", tmp_path / name), "--plot", "png", "pdf", "svg")
    assert not (tmp_path / name).exists()


# --------------------------------------------------------------------------- the families, judged as the campaign does
CASES = round3_flag_cases()


@pytest.mark.parametrize("case", CASES[::5], ids=lambda c: c[0][:60])
def test_a_sample_of_the_campaigns_round_three_cases_is_clean(cli, case):
    name, argv, expect = case[:3]
    code, out, err = cli(*argv)
    assert judge(expect, code, out, err) in ("clear error", "ok"), (code, err[-400:])


# --------------------------------------------------------------------------- item 9: defaults that resize the instance
@pytest.mark.parametrize("system,model", [("h200-cluster", "deepseek-v3.2"), ("h100-cluster", "llama-3.1-70b"),
                                          ("mi300x-cluster", "qwen3-30b-a3b"), ("cloudmatrix384", "deepseek-r1")])
@pytest.mark.parametrize("phase,key", [("decode", "tpot_ms"), ("prefill", "ttft_ms")])
def test_more_hbm_never_shrinks_the_default_instance_or_slows_it(system, model, phase, key):
    """1.5x the HBM capacity (a what-if by --set): the default instance keeps at least its dies
    and, at the same batch (tokens per NPU), is never slower: more memory never gives a worse
    answer (issue 23 item 9: h200-cluster's deepseek-v3.2 instance shrank from 16 to 8 GPUs and
    its TPOT rose 50.95 -> 51.32 ms). Less HBM may grow the instance (what fits)."""
    from cmperf.predict import load_specs, predict

    base = load_specs(system, model)
    hbm = float(base.hardware.chip.die.hbm_capacity_B.value)
    r0 = predict(phase, {}, base).columns.records()[0]
    fixed = {"batch": r0["batch"]} if phase == "decode" else {"tokens_per_npu": r0["tokens_per_npu"]}
    for factor in (1.5, 4.0):
        more = load_specs(system, model, [f"chip.die.hbm_capacity_B={hbm * factor:.0f}"])
        r1 = predict(phase, fixed, more).columns.records()[0]
        assert r1["dies"] >= r0["dies"], (factor, r0["dies"], r1["dies"])
        assert r1[key] <= r0[key] * (1 + 1e-9), (factor, r0[key], r1[key])
    less = load_specs(system, model, [f"chip.die.hbm_capacity_B={hbm * 0.6:.0f}"])
    assert predict(phase, {}, less).columns.records()[0]["dies"] >= r0["dies"]


# --------------------------------------------------------------------------- imports past any published model
HF = ROOT / "tests" / "data" / "hf-configs"


@pytest.mark.parametrize("config,key,value,words", [
    ("gpt-oss-120b", "sliding_window", 200_000, ["sliding_window 200,000", "context (131,072"]),
    ("deepseek-v3.2", "index_topk", 10**6, ["indexer.topk 1,000,000", "context (163,840"]),
    ("llama-3.1-70b", "num_hidden_layers", 10**9, ["num_layers 1,000,000,000"]),
    ("deepseek-v3", "num_nextn_predict_layers", 10**6, ["mtp.modules 1,000,000"]),
])
def test_an_import_past_any_published_model_warns(cli, tmp_path, config, key, value, words):
    c = json.loads((HF / f"{config}.json").read_text())
    c[key] = value
    p = tmp_path / "config.json"
    p.write_text(json.dumps(c))
    code, out, err = cli("model", "import", p)
    assert code == 0, err
    line = next((x for x in err.splitlines() if words[0] in x), "")
    assert line.startswith("cmperf: warning:") and all(w in line for w in words), err


@pytest.mark.parametrize("name", ["", " ", "a\nb", "x" * 201])
def test_an_import_name_must_be_one_printable_line(cli, name):
    error(cli("model", "import", HF / "llama-3.1-70b.json", "--name", name), "--name")


def test_a_trace_of_almost_wholly_cached_prompts_runs(cli, tmp_path):
    """2,047 of 2,048 tokens cached and a prompt without any: the prefill grid takes whole
    cached tokens as its rows do (a mean of 1,023.5 made a grid row of less than one prompt,
    and the error named --tokens-per-npu and --cached-len with a Python dict)."""
    p = _write(tmp_path, "t.csv", "prompt_len,output_len,prefix_hit_tokens\n2048,10,2047\n4096,10,0\n")
    code, out, err = cli("simulate", "--trace", p, *SIM)
    assert code == 0, err


def test_a_long_run_off_a_terminal_says_so_once(capsys):
    """--num-prompts 10000000 off a terminal: no bar, but one line that it runs and for how long
    (issue 23 item 4: it ran with nothing shown); a short run says nothing."""
    from cmperf.cli.progress import ProgressBar

    bar = ProgressBar("simulating requests")
    bar.t0 -= 1.0  # one second for the first of 100: no measure yet (a first item costs more)
    bar(1, 100)
    assert capsys.readouterr().err == ""
    bar.t0 -= 11.0  # 12 s for 10 of 100: about 120 s in all
    bar(10, 100)
    bar(11, 100)
    err = capsys.readouterr().err
    assert err.count("cmperf: simulating requests:") == 1 and "10 of 100 in 12 s, about 120 s in all" in err
    quick = ProgressBar("x")
    quick.t0 -= 0.5
    quick(50, 100)
    assert capsys.readouterr().err == ""
