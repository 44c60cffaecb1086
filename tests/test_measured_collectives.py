"""The collective a stack calls (issue 32 item 2, docs/model.md §4.5): a stack's ``all_reduce``
names an implementation the system measured (``collectives.all_reduce_implementations``, the
faster of two lines per group size, fitted to aiconfigurator's tables in
cmperf/reference/measured-tables/); a TP all-reduce of that stack is timed as the table
measured it, launch included, and ``--breakdown`` names it. Checked against the measured rows
themselves (not the fit recomputed), and as structure: never below the measured smallest call,
more bytes never cheaper."""

from __future__ import annotations

import json

import numpy as np
import pytest

from cmperf.calibration import tables
from cmperf.cost.roofline import all_reduce_protocols, protocol_time_s
from cmperf.predict import load_specs, predict

IMPL = {"vllm": "vllm_graph", "sglang": "sglang_graph", "trtllm-dynamo": "trtllm"}  # stack -> the table's rows
SYSTEMS = {system: platform for platform, (_, system) in tables.PLATFORMS.items()}


@pytest.fixture(scope="module")
def measured():
    """Per platform: the all-reduce rows of its extract (ring bytes per die, seconds)."""
    out = {}
    for platform in tables.PLATFORMS:
        df, _ = tables.read_extract(platform)
        ar = df[df["kind"] == "all_reduce"].copy()
        ar["x_B"] = tables.allreduce_bytes(ar["message_elems"], ar["elem_B"], ar["num_gpus"])
        ar["t_s"] = ar["latency_ms"] * 1e-3
        out[platform] = ar
    return out


def _rows(measured, system, impl, n):
    ar = measured[SYSTEMS[system]]
    g = ar[(ar["impl"] == impl) & (ar["num_gpus"] == n)].sort_values("x_B")
    return g["x_B"].to_numpy(), g["t_s"].to_numpy()


def _allreduce_call(cli, stack, batch, tp=4):
    code, out, err = cli("predict", "decode", "--hardware", "h100-cluster", "--model", "llama-3.1-70b", "--stack", stack,
                         "--batch", str(batch), "--dies", "8", "--tp", str(tp), "--breakdown", "--format", "json")
    assert code == 0, err
    rows = [r for r in json.loads(out)["breakdown"] if r["op"] == "attn_allreduce"]
    return rows[0]


def test_a_stacks_allreduce_is_named_and_within_its_measured_rows(cli, measured):
    """vLLM and SGLang on H100, Llama-3.1-70B decode at TP 4 and 8: the breakdown names the
    stack's all-reduce, and a call's time lies within 20 % of the measured rows at its size
    (log-interpolated between the two sizes around it), or twice its table's held-out median
    error where that is larger (SGLang's TP-8 table: one 38 us row among 3-5 us ones, 16.5 %);
    a stack without one of its own (the system's 34 us floor, Vidur's torch.distributed) is
    above both."""
    df, _ = tables.read_extract("h100")
    fits = tables.collective_fits(df).set_index(["impl", "num_gpus"])
    for stack in ("vllm", "sglang"):
        for batch, tp in ((8, 4), (64, 4), (8, 8), (64, 8)):
            row = _allreduce_call(cli, stack, batch, tp)
            assert row["implementation"] == {"vllm": "vllm_custom", "sglang": "sglang_custom"}[stack]
            x, t = _rows(measured, "h100-cluster", IMPL[stack], tp)
            expected = float(np.exp(np.interp(np.log(row["net_bytes"]), np.log(x), np.log(t))))
            band = max(0.20, 2 * float(fits.loc[(IMPL[stack], tp), "two_held_out_median"]))
            assert row["time_us"] * 1e-6 == pytest.approx(expected, rel=band), (stack, batch, tp)
    none = _allreduce_call(cli, "none", 8)
    assert none["implementation"] == "" and none["time_us"] >= 34.0
    assert none["time_us"] > _allreduce_call(cli, "vllm", 8)["time_us"]


def test_stacks_differ_as_their_measurements_do(cli, measured):
    """At one message size the stacks' calls are ordered as their tables are there."""
    row = {s: _allreduce_call(cli, s, 8) for s in ("vllm", "sglang", "trtllm-dynamo")}
    x = row["vllm"]["net_bytes"]
    assert all(r["net_bytes"] == x for r in row.values())
    at = {}
    for s in row:
        xs, ts = _rows(measured, "h100-cluster", IMPL[s], 4)
        at[s] = float(np.exp(np.interp(np.log(x), np.log(xs), np.log(ts))))
    order_measured = sorted(at, key=at.get)
    order_model = sorted(row, key=lambda s: row[s]["time_us"])
    if max(at.values()) / min(at.values()) > 1.2:  # distinguishable in the tables
        assert order_model[0] == order_measured[0] and order_model[-1] == order_measured[-1], (at, row)


@pytest.mark.parametrize("system", sorted(SYSTEMS))
def test_a_measured_allreduce_never_costs_less_than_its_smallest_call_and_more_bytes_never_less(system, measured):
    """On every GPU system and implementation, at every measured group size: a call over 1 B
    ... 1 GB never costs less than 80 % of the smallest measured call (the held-out band of the
    fit's floor) and never less at more bytes. (Across group sizes at the same bytes per die
    no order holds: the tables' bus bandwidth grows with the GPUs over NVSwitch.)"""
    hw, _ = load_specs(system).views()
    table = hw.system.collectives.all_reduce_implementations
    x = np.logspace(0, 9, 200)
    for impl in table.keys():
        lines = sorted((int(k[2:]), tuple(table[impl]["nvlink"][k][f] for f in ("small_floor_s", "small_Bps",
                                                                              "large_floor_s", "large_Bps")))
                       for k in table[impl]["nvlink"].keys())
        for n, _ in lines:
            t = protocol_time_s(lines, float(n), x)
            name = {"vllm_custom": "vllm_graph", "sglang_custom": "sglang_graph", "trtllm": "trtllm", "nccl": "nccl"}[impl]
            _, ts = _rows(measured, system, name, n)
            assert np.all(t >= 0.8 * ts.min()), (impl, n)
            assert np.all(np.diff(t) >= 0), (impl, n)


def test_the_shipped_implementations_are_the_tables_fit():
    """hardware/*.yaml holds what `python -m cmperf.calibration.tables` fits to the committed
    extracts (4 significant digits): a new extract or fit must re-write them."""
    names = {"nccl": "nccl", "vllm_graph": "vllm_custom", "sglang_graph": "sglang_custom", "trtllm": "trtllm"}
    for platform, (_, system) in tables.PLATFORMS.items():
        df, _ = tables.read_extract(platform)
        fits = tables.collective_fits(df)
        hw, _ = load_specs(system).views()
        table = hw.system.collectives.all_reduce_implementations
        for _, r in fits.iterrows():
            got = table[names[r["impl"]]]["nvlink"][f"tp{int(r['num_gpus'])}"]
            for field, col in (("small_floor_s", "a_small_s"), ("small_Bps", "B_small_Bps"),
                               ("large_floor_s", "a_large_s"), ("large_Bps", "B_large_Bps")):
                assert float(got[field]) == pytest.approx(float(r[col]), rel=1e-3), (system, r["impl"], field)


def test_a_stack_that_names_no_measured_allreduce_keeps_the_systems_floor():
    """On CloudMatrix384 (no table) and on H100 with the stack none, the all-reduce is the
    system's per-call floor path: no implementation is named."""
    for system, stack in (("cloudmatrix384", "sglang-ascend"), ("h100-cluster", "none")):
        hw, _ = load_specs(system, None, [], stack).views()
        assert all_reduce_protocols(hw, "all_reduce", "nvlink") is None
        assert all_reduce_protocols(hw, "all_reduce", "ub") is None
    hw, _ = load_specs("h100-cluster", "llama-3.1-70b", [], "vllm").views()
    assert all_reduce_protocols(hw, "all_gather", "nvlink") is None  # the table is the all-reduce's alone
    assert all_reduce_protocols(hw, "all_reduce", "ib") is None  # measured within a node only
    name, lines = all_reduce_protocols(hw, "all_reduce", "nvlink")
    assert name == "vllm_custom" and [n for n, _ in lines] == [2, 4, 8]
    assert float(protocol_time_s(lines, 1.0, 1e6)) == 0.0  # a group of one calls nothing


def test_a_stack_naming_an_unmeasured_allreduce_is_one_line(cli):
    """A misspelt implementation on a system that measured some: one line naming what was
    written and what the system has (a system that measured none keeps the floor path)."""
    from helpers import one_line_error

    code, _, err = cli("predict", "decode", "--hardware", "h100-cluster", "--model", "llama-3.1-70b", "--stack", "vllm",
                       "--set", "stack.all_reduce=vllm_cusotm")
    one_line_error(code, err, "--set stack.all_reduce", "vllm_cusotm", "vllm_custom")
    code, _, err = cli("predict", "decode", "--hardware", "mi300x-cluster", "--stack", "vllm")
    assert code == 0, err


def test_a_swept_line_moves_the_step_as_the_same_value_set():
    """A what-if sweep of a measured line's constants answers each point as --set does (the
    lines broadcast against the grid's rows), and a slower line is never faster."""
    p = "system.collectives.all_reduce_implementations.vllm_custom.nvlink.tp8."
    base = {"batch": 8, "tp": 8, "dies": 8}
    specs = load_specs("h100-cluster", "llama-3.1-70b", [], "vllm")
    swept = predict("decode", base, specs, sweeps={p + "small_floor_s": [50e-6], p + "large_floor_s": [10.5e-6, 60e-6]})
    tpot = swept.columns["tpot_ms"].tolist()
    for v, t in zip((10.5e-6, 60e-6), tpot):
        one = load_specs("h100-cluster", "llama-3.1-70b", [f"{p}small_floor_s=50e-6", f"{p}large_floor_s={v}"], "vllm")
        assert predict("decode", base, one).columns["tpot_ms"].iat[0] == pytest.approx(t, rel=1e-12)
    assert tpot[1] > tpot[0]
