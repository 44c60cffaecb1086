"""Deployment defaults (cmperf/deployment.py, docs/model.md §10): what a prediction runs when
the user leaves an input unset, on every shipped system and model.

The layout rule is checked against the layouts the sources publish (not against itself); the
sizes against the published instances and against the weights they must hold; the matrix
tests run every shipped system x model from its own defaults (predict, search, compare), and
plan a representative part of it (every system, every model twice: benchmarks/plan_matrix.py
plans all of it)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from cmperf.deployment import expert_layout, instance_sizes
from cmperf.predict import load_specs, predict, system_model
from helpers import check_default_plan

REPO = Path(__file__).resolve().parents[1]
SYSTEMS = sorted(p.stem for p in (REPO / "hardware").glob("*.yaml") if "kind: system" in p.read_text())
MODELS = sorted(p.stem for p in (REPO / "models").glob("*.yaml"))


@pytest.fixture(scope="module")
def r1():
    return load_specs("cloudmatrix384", "deepseek-r1")


# --------------------------------------------------------------------------- the expert layout
@pytest.mark.parametrize("ep, s, r, redundant, shared, source", [
    (320, 0.1, 0, 32, 32, "paper §4.2: 256 routed + 32 redundant + 32 shared at EP320, one expert per die"),
    (32, 1.0, 1, 32, 32, "paper §4.3 / DAY6 prefill: 8 routed + 1 redundant + 1 shared per die at EP32"),
    (128, 1.0, 0, 0, 128, "PROFILE decode EP128: 2 routed + 1 shared per GPU"),
    (144, 1.0, 0, 32, 144, "DAY6 decode EP144: 32 redundant, 2 routed + 1 shared per GPU"),
    (72, 1.0, 0, 32, 72, "SGL-EP decode EP72: 32 redundant, 288 + 72 = 5 per GPU"),
    (48, 1.0, 0, 32, 48, "DYN-GB200 decode EP48: 32 redundant, 288 / 48 = 6 routed per GPU + shared"),
])
def test_layout_reproduces_the_published_layouts(r1, ep, s, r, redundant, shared, source):
    _, m = r1.views()
    red, sh = expert_layout(m, [ep], s, r)
    assert (red[0], sh[0]) == (redundant, shared), source


def test_layout_puts_whole_experts_on_every_die_for_any_ep(r1):
    """For every EP from 1 to 768 and both rules: whole experts per die, at least one shared
    copy, at least the spare per die, and the fewest instances that do so."""
    _, m = r1.views()
    ep = np.arange(1, 769, dtype=float)
    for s, r in ((0.1, 0), (1.0, 0), (1.0, 1)):
        red, sh = expert_layout(m, ep, s, r)
        total = 256 + red + sh
        assert (np.mod(total, ep) == 0).all()
        assert (sh >= 1).all() and (red >= r * ep).all()
        assert (total - ep < 256 + sh + r * ep).all()  # one die fewer per EP group would not hold them


def test_a_given_count_is_kept_and_the_other_completes_whole_experts(r1):
    _, m = r1.views()
    red, sh = expert_layout(m, [8], 0.1, 0, redundant=[0])  # Kimi-style: no redundant copies wanted
    assert red[0] == 0 and sh[0] == 8  # 256 + 0 + 8 = 33 x 8
    red, sh = expert_layout(m, [64], 0.1, 0, shared=[32])
    assert sh[0] == 32 and red[0] == 32  # 256 + 32 + 32 = 5 x 64


def test_a_model_without_experts_has_no_layout():
    _, m = load_specs("h100-cluster", "llama-3.1-70b").views()
    red, sh = expert_layout(m, [8, 16], 1.0, 1)
    assert red.tolist() == [0, 0] and sh.tolist() == [0, 0]


# --------------------------------------------------------------------------- the published instances
@pytest.mark.parametrize("system, phase, expected", [
    ("cloudmatrix384", "decode", {"dies": 320, "ep": 320, "tp": 1, "batch": 96, "mtp": 1, "redundant_experts": 32, "shared_copies": 32}),
    ("cloudmatrix384", "prefill", {"dies": 32, "ep": 32, "attn_tp": 4, "tokens_per_npu": 16384, "redundant_experts": 32, "shared_copies": 32}),
    ("h800-cluster", "decode", {"dies": 128, "ep": 128, "tp": 1, "batch": 128, "redundant_experts": 0, "shared_copies": 128}),
    ("h800-cluster", "prefill", {"dies": 32, "attn_tp": 1, "tokens_per_npu": 16384, "redundant_experts": 32, "shared_copies": 32}),
    ("h100-cluster", "decode", {"dies": 72, "tp": 1, "mtp": 0, "redundant_experts": 32, "shared_copies": 72}),
    ("gb200-nvl72", "decode", {"dies": 48, "mtp": 0, "redundant_experts": 32, "shared_copies": 48}),
    ("gb200-nvl72", "prefill", {"dies": 8, "attn_tp": 1}),
])
def test_each_system_runs_its_published_instance(system, phase, expected):
    """With no flags, each system runs the instance its own sources publish for its model
    (hardware/<system>.yaml `deployment`), not CloudMatrix384's."""
    row = predict(phase, {}, load_specs(system)).table.iloc[0]
    assert {k: row[k] for k in expected} == expected


def test_the_default_model_is_the_systems():
    assert system_model("cloudmatrix384") == "deepseek-r1"
    assert system_model("h800-cluster") == "deepseek-v3"  # DeepSeek serves the FP8 checkpoint
    assert system_model("b200-cluster") == "deepseek-v3"  # none published: the FP8 checkpoint NVIDIA systems serve
    assert system_model("atlas-800t-a2") == "deepseek-r1"  # the 910B: INT8 W8A8 as the 910C


def test_the_batch_is_the_published_one_capped_by_memory():
    """H100 at EP72 holds fewer than SGLang's 256 requests per GPU at 4K prompts + 256 outputs
    (SGLang ran 2K contexts): the default batch is the largest that fits, and it fits."""
    row = predict("decode", {}, load_specs("h100-cluster")).table.iloc[0]
    assert 1 <= row["batch"] < 256 and bool(row["fits"])
    assert row["batch"] == row["max_batch_per_npu"]
    short = predict("decode", {"prompt_len": 1000, "output_len": 100}, load_specs("h100-cluster")).table.iloc[0]
    assert short["batch"] == 256  # short contexts: SGLang's own batch fits


def test_a_given_batch_is_never_capped():
    row = predict("decode", {"batch": 250}, load_specs("h100-cluster")).table.iloc[0]
    assert row["batch"] == 250 and not bool(row["fits"])


# --------------------------------------------------------------------------- sizes follow the weights
def _total_weights_B(specs) -> float:
    """Every weight once, at the model's bytes per element (an EP1 instance holds them all)."""
    r = predict("decode", {"dies": 1, "ep": 1, "tp": 1, "redundant_experts": 0, "batch": 1}, specs, strict=False)
    return float(r.columns["weights_per_die_bytes"].iat[0]) if len(r.columns) else math.nan


@pytest.mark.parametrize("system", ["cloudmatrix384", "h800-cluster", "gb200-nvl72", "b200-cluster"])
def test_a_larger_moe_model_never_gets_a_smaller_instance(system):
    moe = ["qwen3-30b-a3b", "mixtral-8x7b", "qwen3-235b-a22b", "deepseek-r1", "kimi-k2"]
    pairs = []
    for m in moe:
        specs = load_specs(system, m)
        pairs.append((_total_weights_B(specs), int(predict("decode", {}, specs).columns["dies"].iat[0])))
    pairs.sort()
    dies = [d for _, d in pairs]
    assert dies == sorted(dies), pairs


@pytest.mark.parametrize("system", ["h100-cluster", "cloudmatrix384", "b200-cluster"])
def test_a_dense_model_is_the_smallest_tp_group_that_leaves_half_the_hbm(system):
    """Llama-3.1-70B in BF16: TP t is the smallest power of two whose weights per die take at
    most half a die's HBM (the system's max_weight_share); t/2 would take more."""
    specs = load_specs(system, "llama-3.1-70b")
    row = predict("decode", {}, specs).table.iloc[0]
    t = int(row["tp"])
    assert row["dies"] == t and row["ep"] == t
    hbm = row["hbm_per_die_bytes"]
    assert row["weights_per_die_bytes"] <= 0.5 * hbm
    half = predict("decode", {"tp": t // 2, "dies": t // 2}, specs).table.iloc[0] if t > 1 else None
    assert half is None or half["weights_per_die_bytes"] > 0.5 * hbm


def test_instance_sizes_are_whole_npus_inside_the_ep_domain():
    hw, _ = load_specs("gb200-nvl72").views()
    sizes = instance_sizes(hw, "decode", moe=True)
    assert sizes.max() == 72 and {1, 2, 4, 8, 48}.issubset(set(sizes.tolist()))
    hw, _ = load_specs("cloudmatrix384").views()
    sizes = instance_sizes(hw, "decode", moe=True)
    assert (np.mod(sizes, 2) == 0).all() and sizes.max() == 768  # two dies per NPU, one UB plane


# --------------------------------------------------------------------------- precision
def test_an_fp8_model_runs_as_int8_on_ascend_with_a_note():
    specs = load_specs("cloudmatrix384", "deepseek-v3")
    assert specs.model.precision.matmul == "int8" and len(specs.notes) == 1
    assert "fp8 -> int8" in specs.notes[0] and "ascend-910c" in specs.notes[0]
    v3 = predict("decode", {}, specs).columns["tpot_ms"].iat[0]
    r1 = predict("decode", {}, load_specs("cloudmatrix384", "deepseek-r1")).columns["tpot_ms"].iat[0]
    assert v3 == pytest.approx(r1, rel=1e-12)  # the same architecture in the same dtype


# --------------------------------------------------------------------------- every system x model
@pytest.mark.parametrize("system", SYSTEMS)
@pytest.mark.parametrize("phase", ["decode", "prefill"])
def test_every_system_and_model_predicts_from_its_own_defaults(cli, system, phase):
    """The matrix: with no flag beyond --hardware/--model, every pair predicts (exit 0), or a
    pair says in one line why it cannot run."""
    for model in MODELS:
        code, out, err = cli("predict", phase, "--hardware", system, "--model", model, "--format", "json")
        assert "Traceback" not in err
        if code != 0:
            lines = [line for line in err.splitlines() if line.startswith("cmperf: error:")]
            assert code == 2 and len(lines) == 1, (model, err)
            continue
        row = json.loads(out)
        latency = row["tpot_ms"] if phase == "decode" else row["ttft_ms"]
        assert 0 < latency < 1e6 and row["throughput_per_npu"] > 0, (system, model)
        assert row["fits"] is True, (system, model, err)  # the derived instance holds its model


@pytest.mark.parametrize("system", SYSTEMS)
def test_every_system_searches_and_compares_from_its_own_defaults(cli, system):
    for model in MODELS:
        for command in (("search", "decode"), ("compare", "decode")):
            code, out, err = cli(*command, "--hardware", system, "--model", model, "--format", "json")
            assert code == 0 and "Traceback" not in err, (command, model, err)


NO_PLAN = {"gb300-nvl72": ("deepseek-r1",), "h20-cluster": ("glm-4.5",)}  # pairs with no deployment within the SLOs


def planned_models(system: str) -> list[str]:
    """The models ``system`` plans in the suite: its own, and one of a cyclic pairing (system i
    with model i of the sorted lists), so that every model is planned on at least one system
    and every system plans one or two; and the pairs
    that say in one line why there is none (exit 1, today: deepseek-r1 in INT8 on GB300, GLM-4.5
    on H20 within the default SLOs). The whole matrix (168 plans, ~120 s of CPU on the shared
    2-core machine) is benchmarks/plan_matrix.py, held to the same check."""
    i = SYSTEMS.index(system)
    models = {system_model(system), MODELS[i % len(MODELS)]} | set(NO_PLAN.get(system, ()))
    return sorted(models)


@pytest.mark.parametrize("system", SYSTEMS)
def test_every_system_plans_models_from_their_own_defaults(cli, system):
    """`cmperf plan` with no flag beyond --hardware/--model finds a deployment of the model
    on the system (exit 0), or says in one line why not (exit 1). Its best deployment's NPUs
    stay within the budget and its latencies within the default SLOs (tests/helpers.py
    ``check_default_plan``)."""
    for model in planned_models(system):
        check_default_plan(*cli("plan", "--hardware", system, "--model", model, "--format", "json"), model)


def test_the_planned_pairs_cover_every_system_and_model():
    pairs = [(s, m) for s in SYSTEMS for m in planned_models(s)]
    assert {s for s, _ in pairs} == set(SYSTEMS)
    assert all(sum(m == model for _, m in pairs) >= 1 for model in MODELS), pairs
    assert all(m in planned_models(s) for s, ms in NO_PLAN.items() for m in ms)


def test_deepseek_v3_takes_deepseek_r1s_measured_imbalance():
    """The same architecture and router: one default real-traffic balance for both, kept equal
    by the calibration (the paper file's model_proxies)."""
    from cmperf.calibration.reference import load_reference

    r1, v3 = (load_specs("cloudmatrix384", m).model.serving.default_expert_imbalance for m in ("deepseek-r1", "deepseek-v3"))
    assert r1.value == v3.value > 1.0
    ref = load_reference(REPO / "cmperf" / "reference" / "cloudmatrix384-paper.yaml")
    assert "deepseek-v3" in ref.model_proxies and ref.model == "deepseek-r1"
