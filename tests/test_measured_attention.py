"""The attention kernels a stack calls (issue 32, docs/model.md §11.3): a stack's ``attention``
names the kernels a chip measured (``attention_implementations``: per phase and kind a line
t = call_s + row_s x rows + busy / busy_efficiency, fitted to aiconfigurator's tables in
cmperf/reference/measured-tables/); an attention core of that stack is timed at its line.
Checked against the measured rows themselves through the schedules' own path
(cmperf.schedule.common.stack_attention, then the roofline), not the fit recomputed; and as
structure: never below the table's fastest call, more rows or a longer cache never cheaper, a
chip or kind without a table unchanged."""

from __future__ import annotations

import json

import numpy as np
import pytest

from cmperf.calibration import tables
from cmperf.cost import ops, roofline
from cmperf.predict import load_specs, predict
from cmperf.schedule.common import attention_line, stack_attention

STACK_OF = {"vllm": "vllm", "sglang": "sglang"}  # a table's backend -> the stack that calls it
PHASE = {"context_attention": "prefill", "context_mla": "prefill", "generation_attention": "decode",
         "generation_mla": "decode"}


def core_s(system, stack, model, kind, batch, kv_len):
    """cmperf's time of one attention core call of ``stack`` on ``system`` for the table rows
    (``batch`` requests, ``kv_len`` tokens each; prefill: whole prompts of ``kv_len``), as the
    schedules time it (stack_attention, then the roofline), with the row count they pass."""
    hw, m = load_specs(system, model, [], stack).views()
    b, L = np.asarray(batch, dtype=float), np.asarray(kv_len, dtype=float)
    if PHASE[kind] == "prefill":
        core_ops, rows = ops.attention_prefill_ops(m, b * L, L, 1.0, tier="nvlink"), b * L
    else:
        core_ops, rows = ops.attention_decode_ops(m, b, b, L, 1.0), b
    timed = stack_attention(hw, m, core_ops, PHASE[kind], rows)
    core = next(o for o in timed if o.name == "attention_core")
    return np.asarray(roofline.op_times(roofline.columns([core]), hw).time_s)[0]


@pytest.fixture(scope="module")
def rows():
    """Per platform: its extract's attention rows and the table fits (held-out errors)."""
    out = {}
    for platform in tables.PLATFORMS:
        df, _ = tables.read_extract(platform)
        att = df[df["kind"].isin(list(PHASE))].copy()
        att["t_s"] = att["latency_ms"] * 1e-3
        out[platform] = (att, tables.attention_fits(df, platform).set_index("kind"))
    return out


def test_a_stacks_attention_lies_within_its_measured_rows(rows):
    """Every platform, every table (vLLM's GQA, SGLang's MLA; prefill and decode): the stack's
    attention core, timed as the schedules time it, is within 30 % of the measured call, or
    twice the table's held-out median error where that is larger, on at least 80 % of the
    rows, and its median error is at most the table's held-out median (one sequence length
    left out) plus a quarter, or 10 % (the rows a line misses most are the smallest shapes, a
    few microseconds, and SGLang's MLA kernels: docs/calibration.md)."""
    for platform, (att, fits) in rows.items():
        system = tables.PLATFORMS[platform][1]
        for kind, g in att.groupby("kind"):
            stack, model = STACK_OF[g["backend"].iloc[0]], tables.KIND_MODEL[kind]
            t = core_s(system, stack, model, kind, g["batch"].to_numpy(), g["kv_len"].to_numpy())
            err = np.abs(t / g["t_s"].to_numpy() - 1)
            held = float(fits.loc[kind, "held_out_median"])
            band = max(0.3, 2 * held)
            assert np.mean(err <= band) >= 0.8, (platform, kind, float(np.mean(err <= band)))
            assert np.median(err) <= max(0.1, 1.25 * held), (platform, kind, float(np.median(err)))


def test_attention_is_never_below_the_fastest_measured_call_and_grows_with_its_work(rows):
    """Structure on every platform and table: no call faster than 60 % of the table's fastest
    measured one (a line never makes the kernel nearly free; the worst, SGLang's MLA prefill on
    H100, fits a fixed 8.0 us under a fastest call of 12.7 us, its slope taken by the busy
    term), and more requests or a longer cache never cheaper, over a grid wider than the
    tables."""
    for platform, (att, _) in rows.items():
        system = tables.PLATFORMS[platform][1]
        for kind, g in att.groupby("kind"):
            stack, model = STACK_OF[g["backend"].iloc[0]], tables.KIND_MODEL[kind]
            batch = np.array([1, 2, 8, 32, 128, 512], dtype=float)[:, None]
            kv = np.array([1, 16, 256, 2048, 16384, 65536], dtype=float)[None, :]
            t = core_s(system, stack, model, kind, *np.broadcast_arrays(batch, kv)).reshape(6, 6)
            assert np.all(t >= 0.6 * g["t_s"].min()), (platform, kind)
            assert np.all(np.diff(t, axis=0) >= 0) and np.all(np.diff(t, axis=1) >= 0), (platform, kind)


def test_the_shipped_lines_are_the_tables_fit():
    """hardware/<chip>.yaml holds what `python -m cmperf.calibration.tables --yaml` fits to the
    committed extracts (4 significant digits): a new extract or fit must re-write them."""
    for platform, (_, system) in tables.PLATFORMS.items():
        df, meta = tables.read_extract(platform)
        want = tables.attention_lines(tables.attention_fits(df, platform), f"{meta['package']} {meta['version']}")
        hw, _ = load_specs(system).views()
        table = hw.chip.attention_implementations
        assert sorted(table.keys()) == sorted(want), platform
        for impl, phases in want.items():
            for phase, kinds in phases.items():
                for kind, line in kinds.items():
                    got = table[impl][phase][kind]
                    for f in ("call_s", "row_s", "busy_efficiency"):
                        assert float(got[f]) == pytest.approx(line[f], rel=1e-3, abs=1e-12), (platform, impl, phase, kind, f)


def test_a_decode_step_pays_the_measured_kernel_per_call_and_request():
    """Hand-derived at the shipped H100 line: vLLM, Llama-3.1-70B, TP 4, 32 requests per die:
    the core's latency term is call_s + row_s x 32 (a die's own tokens in full-head units) and
    its busy terms are the roofline's over busy_efficiency; at 1 request per die, where the
    fixed cost dominates, the core is slower than the roofline's with the chip's launch (no
    stack)."""
    hw, _ = load_specs("h100-cluster", "llama-3.1-70b", [], "vllm").views()
    line = hw.chip.attention_implementations["vllm"]["decode"]["gqa"]
    def core(stack, batch):
        specs = load_specs("h100-cluster", "llama-3.1-70b", [], stack)
        table, _ = predict("decode", {"dies": 4, "tp": 4, "batch": batch}, specs).breakdown()
        return table[table["op"] == "attention_core"].iloc[0]

    measured, roof = core("vllm", 32), core("none", 32)
    assert measured["implementation"] == "vllm" and roof["implementation"] == ""
    assert measured["latency_us"] == pytest.approx((float(line["call_s"]) + float(line["row_s"]) * 32) * 1e6, rel=1e-6)
    assert measured["memory_us"] == pytest.approx(roof["memory_us"] / float(line["busy_efficiency"]), rel=1e-6)
    assert core("vllm", 1)["time_us"] > core("none", 1)["time_us"]


def test_where_no_table_times_it_the_roofline_stays(cli):
    """A kind the stack's tables do not hold (Llama on SGLang: its GQA kernels are not
    measured; DeepSeek on vLLM), a chip with no tables (H800, CloudMatrix384) and a stack that
    names none: the core keeps the roofline (no implementation, the chip's launch)."""
    for hardware, model, stack in (("h100-cluster", "llama-3.1-70b", "sglang"), ("h100-cluster", "deepseek-v3", "vllm"),
                                   ("h800-cluster", "deepseek-v3", "sglang"), ("cloudmatrix384", "deepseek-r1", "sglang-ascend")):
        code, out, err = cli("predict", "decode", "--hardware", hardware, "--model", model, "--stack", stack,
                             "--breakdown", "--format", "json")
        assert code == 0, err
        cores = [r for r in json.loads(out)["breakdown"] if r["op"] == "attention_core"]
        assert cores and all(r["implementation"] == "" for r in cores), (hardware, model, stack)
        hw, m = load_specs(hardware, model, [], stack).views()
        assert attention_line(hw, m, "decode") is None and attention_line(hw, m, "prefill") is None


def test_a_stack_naming_an_unmeasured_kernel_is_one_line(cli):
    code, out, err = cli("predict", "decode", "--hardware", "h100-cluster", "--model", "llama-3.1-70b", "--stack", "vllm",
                         "--set", "stack.attention=flashmla")
    assert code == 2 and "stack.attention 'flashmla'" in err and "vllm, sglang" in err and len(err.strip().splitlines()) == 1
