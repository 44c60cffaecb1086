"""Issue 33's boundaries, one per input kind (in-process, fast): what the API is given by value
(load_specs' names, predict's values and sweeps, plan's counts, a Traffic's arrivals), plan's
--verify-prompts and a given deployment larger than the system, trace rows out of arrival
order, a system file without a required entry, a serving file whose fit: names no stack field.
Each ends in one clear line naming what the user wrote (exit 2; in the API a CmperfError), or
a correct answer. The CLI cases run one process each in benchmarks/bad_input_campaign.py
(round4_cases, --round4)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

import cmperf
from bad_inputs import judge, round4_cases, system_without
from cmperf.errors import CmperfError
from helpers import one_line_error

ROOT = Path(__file__).resolve().parents[1]
SERVING = ROOT / "cmperf" / "reference" / "sglang-a3-serving.yaml"
SMALL = ["--npus", "32", "--shapes", "pd", "-f", "json"]


def error(result, *words):
    code, _, err = result
    return one_line_error(code, err, *words)


def api_error(call, *words) -> str:
    """The one-line CmperfError ``call()`` raises, naming each of ``words`` (never numpy's or
    Python's own exception)."""
    with pytest.raises(CmperfError) as e:
        call()
    text = str(e.value)
    assert "\n" not in text, text
    for w in words:
        assert w in text, (w, text)
    return text


# --------------------------------------------------------------------------- the API, given by value
@pytest.mark.parametrize("kwargs,words", [
    ({"hardware": None}, ["hardware=None", "a system spec"]),
    ({"hardware": ""}, ["hardware=''"]),
    ({"hardware": 384}, ["hardware=384"]),
    ({"model": 3}, ["model=3", "or None"]),
    ({"stack": ["vllm"]}, ["stack=a list"]),
    ({"sets": "chip.die.hbm_bandwidth_Bps=3e12"}, ["sets=", "a list of FIELD=VALUE strings"]),
    ({"sets": [3]}, ["sets", "FIELD=VALUE strings", "got 3"]),
])
def test_load_specs_refuses_what_is_not_a_spec_name(kwargs, words):
    api_error(lambda: cmperf.load_specs(**kwargs), *words)


def test_load_specs_takes_a_path_object_and_no_sets():
    assert cmperf.load_specs(ROOT / "hardware" / "cloudmatrix384.yaml", sets=None).views()[0].system.name == "cloudmatrix384"


@pytest.mark.parametrize("sweeps,words", [
    ({"chip.die.hbm_bandwith_Bps": [1e12]}, ["sweeps['chip.die.hbm_bandwith_Bps']", "did you mean 'hbm_bandwidth_Bps'"]),
    ({"stack.max_runing_per_rank": [2]}, ["sweeps['stack.max_runing_per_rank']", "did you mean 'max_running_per_rank'"]),
    ({"gpu.x": [1]}, ["sweeps['gpu.x']", "chip., system., model. or stack."]),
    ({"chip.die": [1]}, ["'die' is a section"]),
    ({"chip.name": [1]}, ["'name' is not a number"]),
    ({"chip.die.hbm_bandwidth_Bps": ["x"]}, ["finite numbers", "'x'"]),
    ({"chip.die.hbm_bandwidth_Bps": [float("nan")]}, ["finite numbers", "nan"]),
    ({"chip.die.hbm_bandwidth_Bps": 5}, ["a list of numbers", "got 5"]),
    ({"chip.die.hbm_bandwidth_Bps": []}, ["an empty list"]),
])
def test_a_sweep_that_would_sweep_nothing_is_refused(sweeps, words):
    """A misspelt path was ignored (the answer at the file's values); others crashed in numpy."""
    api_error(lambda: cmperf.predict("decode", sweeps=sweeps), *words)


def test_a_sweep_of_a_real_field_still_moves_the_answer():
    r = cmperf.predict("decode", sweeps={"chip.die.hbm_bandwidth_Bps": [1e12, 2e12]}).columns["tpot_ms"]
    assert r[0] > r[1] > 0


@pytest.mark.parametrize("values,words", [({"batch": None}, ["{'batch': None}", "leave an input out"]),
                                          ([("batch", 8)], ["a mapping of inputs"])])
def test_predict_refuses_an_input_of_none(values, words):
    api_error(lambda: cmperf.predict("decode", values), *words)


def test_search_refuses_an_input_of_none_as_predict_does():
    api_error(lambda: cmperf.search("decode", {"batch": None}), "search(values={'batch': None})")


def test_a_misspelt_input_gets_the_nearest_name():
    api_error(lambda: cmperf.predict("decode", {"batchh": 8}), "unknown decode input(s): batchh", "did you mean 'batch'")


@pytest.mark.parametrize("kwargs,words", [
    ({"npus": 64.5}, ["plan(npus=64.5)", "whole number from 1"]), ({"npus": 0}, ["plan(npus=0)"]),
    ({"npus": -1}, ["plan(npus=-1)"]), ({"npus": True}, ["plan(npus=True)"]), ({"npus": "64"}, ["plan(npus='64')"]),
    ({"supernode": 383.5}, ["plan(supernode=383.5)"]),
])
def test_plan_counts_are_whole_and_positive(kwargs, words):
    api_error(lambda: cmperf.plan(**kwargs), *words)


def test_plan_takes_a_numpy_count():
    assert cmperf.plan(npus=np.int64(64), shape_names=("pd",)).best["npus"] <= 64


def test_cmperf_plan_is_callable_on_first_access():
    """``import cmperf; cmperf.plan(...)`` once gave the module cmperf.plan.planner ('module
    object is not callable'); a fresh process sees the first access."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    code = "import cmperf; p = cmperf.plan; print(callable(p), p.__name__)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True).stdout
    assert out.split() == ["True", "cmperf.plan"]


def test_traffic_arrivals_in_order():
    from cmperf.simulate import Traffic

    api_error(lambda: Traffic(arrivals_s=(0.0, 2.0, 1.0)), "arrival 2", "before arrival 1's 2")
    api_error(lambda: Traffic(arrivals_s=(0.0, float("nan"))), "arrival 1", "finite")
    assert Traffic(arrivals_s=(0.0, 1.0, 1.0)).arrivals_s == (0.0, 1.0, 1.0)


# --------------------------------------------------------------------------- plan's flags
@pytest.mark.parametrize("value", ["0", "-1", "10000001"])
def test_verify_prompts_must_be_a_positive_count(cli, value):
    error(cli("plan", "--verify-prompts", value, *SMALL), "--verify-prompts", f"(got {value})")


def test_verify_plan_checks_its_prompts():
    from cmperf.simulate.sustain import verify_plan

    api_error(lambda: verify_plan(None, 0), "verify_plan(prompts=...)", "got 0")


def test_a_given_deployment_larger_than_the_system_names_both(cli):
    error(cli("plan", "--prefill", "100x32", "--decode", "1x320"), "1,760 NPUs", "cloudmatrix384 has 384", "--npus")
    code, out, err = cli("plan", "--prefill", "100x32", "--decode", "1x320", "--npus", "2000", "-f", "json")
    assert code == 0, err  # several supernodes, asked for


@pytest.mark.parametrize("flag", ["--set", "--sweep"])
def test_a_misspelt_spec_path_on_the_command_line_gets_the_nearest_name(cli, flag):
    cmd = ["predict", "decode"] if flag == "--set" else ["search", "decode", "--tpot-slo", "50", "--batch", "8"]
    error(cli(*cmd, flag, "chip.die.hbm_bandwith_Bps=1e12"), f"{flag} chip.die.hbm_bandwith_Bps",
          "did you mean 'hbm_bandwidth_Bps'")


# --------------------------------------------------------------------------- files
@pytest.mark.parametrize("cmd", [["simulate", "--num-prompts", "3", "-f", "json"], ["plan", *SMALL]])
def test_trace_rows_out_of_arrival_order_name_the_file_and_row(cli, tmp_path, cmd):
    p = tmp_path / "t.csv"
    p.write_text("prompt_len,output_len,arrival_s\n4096,256,0\n4096,256,2\n4096,256,1\n")
    error(cli(cmd[0], "--trace", p, *cmd[1:]), str(p), "line 4", "before line 3's 2", "sort")


@pytest.mark.parametrize("what,words", [
    ("call_floor_s", ["'collectives.call_floor_s'", "missing"]),
    ("call_floor_s.all_gather", ["call_floor_s.all_gather: required"]),
    ("call_floor_s.all_reduce.ub", ["call_floor_s.all_reduce.ub: required", "tier ub"]),
    ("deployment.decode.dies", ["'deployment.decode'", "`instances` 1 needs `dies`"]),
    ("deployment.prefill.dies", ["'deployment.prefill'", "`instances` 6 needs `dies`"]),
])
def test_a_system_file_without_a_required_entry_names_the_file_and_field(cli, tmp_path, what, words):
    p = tmp_path / "sys.yaml"
    p.write_text(system_without(what))
    error(cli("predict", "decode", "--hardware", p, "-f", "json"), str(p), *words)


@pytest.mark.parametrize("cmd", ["simulate", "plan"])
def test_a_deployment_file_group_without_dies_is_refused(cli, tmp_path, cmd):
    """It ran at the system's instance size, said nowhere; --prefill COUNTxDIES states it too."""
    p = tmp_path / "dep.yaml"
    p.write_text("prefill: [{count: 6}]\ndecode: [{count: 1, dies: 320}]\n")
    error(cli(cmd, "--deployment", p), str(p), "prefill[0].dies", "missing")


def test_a_serving_fit_path_the_stack_lacks_is_refused(cli, tmp_path):
    d = yaml.safe_load(SERVING.read_text())
    d["fit"][0]["path"] = "stack.spec_stepp_s"
    p = tmp_path / "serving.yaml"
    p.write_text(yaml.safe_dump(d))
    error(cli("validate", "--serving", p), str(p), "fit[0].path stack.spec_stepp_s", "did you mean 'spec_step_s'")


# --------------------------------------------------------------------------- the campaign's family, judged
@pytest.fixture(scope="module")
def cases(tmp_path_factory):
    return round4_cases(tmp_path_factory.mktemp("round4"))


def test_the_campaigns_round_four_cases_are_clean(cli, cases):
    bad = []
    for name, argv, expect in cases:
        code, out, err = cli(*argv)
        verdict = judge(expect, code, out, err)
        if verdict not in ("clear error", "ok"):
            bad.append((name, verdict, err[-300:]))
    assert not bad, bad
