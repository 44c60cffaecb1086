"""Physics never runs backwards (issue 17): over every capability field of every shipped chip
and system, less of a resource never makes a latency shorter or a throughput higher, for
decode, prefill, AFD and plan; more never the reverse.

A capability is a peak, a bandwidth, a unit count, an efficiency or a memory (more is more),
or a latency, fixed cost or spread (more is less: its direction is inverted). Every numeric
field of the shipped specs is classified below (a new field fails
``test_every_numeric_field_is_classified`` until it is): a capability, or a field that is not
a resource (a shape, a format or a choice: ``NOT_A_RESOURCE``, each with why), or a
capability that is physically not monotone (``EXEMPT``, each with why; kept short).

Hypothesis draws a system, a field, how far it moves and the configuration (fixed inputs:
the deployment a prediction derives from the specs is not re-derived, so a smaller HBM
cannot shrink the batch and look faster), with a fixed seed: the same examples every run,
within CI time. ``python tests/test_monotonicity.py [SYSTEM ...]`` moves every field of every
system instead (minutes per system: a script, not a test that CI would skip).
"""

from __future__ import annotations

import re
from functools import lru_cache

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from cmperf.errors import CmperfError
from cmperf.predict import load_specs, predict
from cmperf.specs.loader import list_builtin

SYSTEMS = [n for n, _ in list_builtin("system")]

# Which way each output must move when a resource grows.
LOWER = {"decode": ("tpot_ms", "iteration_ms"), "afd": ("tpot_ms", "iteration_ms"),
         "prefill": ("ttft_ms", "forward_ms", "kv_transfer_ms", "pool_load_ms")}
HIGHER = {"decode": ("throughput_per_npu", "tokens_per_s_per_user", "max_batch_per_npu"),
          "afd": ("throughput_per_npu", "tokens_per_s_per_user", "max_batch_per_npu"),
          "prefill": ("throughput_per_npu", "prompt_throughput_per_npu", "max_tokens_per_npu")}
FIXED = {"decode": ("dies", "ep", "tp", "batch", "mtp", "redundant_experts", "shared_copies", "prompt_len", "output_len"),
         "prefill": ("dies", "ep", "attn_tp", "tokens_per_npu", "mtp", "redundant_experts", "shared_copies", "prompt_len"),
         "afd": ("attention_dies", "expert_dies", "batch", "mtp", "redundant_experts", "shared_copies", "prompt_len",
                 "output_len")}

# A cost: more of it is less of a resource (latencies, fixed costs, spread, bytes a message adds).
COST = re.compile(r"((?<!per)_s|step_time_cv|matmul_k_overhead|runtime_reserved_B|\.scale_B|\.header_B|vector_launch_ratio"
                  r"|call_floor_s\.\w+\.\w+)$")
# Not a resource: no direction is "more" (why, for each).
NOT_A_RESOURCE = {
    r"efficiency\.matmul_tile_(rows|cols)$": "the output tile's shape: a larger tile pads short GEMMs more and "
                                            "runs fewer, longer tiles per wave",
    r"overlap\.\w+\.attention_share$": "a choice: which stream owns which cores (more for one is less for the other)",
    r"overlap\.\w+\.comm_units$": "a choice: SMs communication holds (faster transfers, slower compute)",
    r"memory_pool\.block_tokens$": "a format: a cached prefix counts in whole blocks (floor(prefix / block) x block "
                                   "is not monotone in the block)",
    r"message\.align_B$": "a format: a message rounds up to its alignment (ceil(x / a) x a is not monotone in a)",
    r"message\.scale_block$": "a format: elements per scale, 0 meaning one scale per token",
}
# Capabilities that are physically not monotone (why, for each). None is: every capability of
# every shipped system moves its outputs one way (python tests/test_monotonicity.py checks each both ways).
EXEMPT: dict[str, str] = {}


def classify(path: str) -> int:
    """+1 (a resource), -1 (a cost) or 0 (not a resource, or exempt)."""
    if any(re.search(p, path) for p in (*NOT_A_RESOURCE, *EXEMPT)):
        return 0
    return -1 if COST.search(path) else 1


def numeric_fields(d, prefix=""):
    """Dotted path -> number of every numeric field of a spec's plain data (a sourced pair's
    value), the deployment section aside (it chooses inputs: the test fixes them)."""
    if isinstance(d, dict):
        if {"value", "source"} <= set(d) and isinstance(d["value"], (int, float)) and not isinstance(d["value"], bool):
            return {prefix[:-1]: d["value"]}
        out = {}
        for k, v in d.items():
            if k != "deployment":
                out.update(numeric_fields(v, f"{prefix}{k}."))
        return out
    if isinstance(d, (int, float)) and not isinstance(d, bool):
        return {prefix[:-1]: d}
    return {}


@lru_cache(maxsize=None)
def shipped(system: str):
    specs = load_specs(system)
    hw = specs.hardware
    fields = {**{"chip." + k: v for k, v in numeric_fields(hw.chip.model_dump()).items()},
              **{"system." + k: v for k, v in numeric_fields(hw.system.model_dump()).items()}}
    return specs, fields


@lru_cache(maxsize=None)
def default_inputs(system: str, phase: str):
    """The inputs of the default prediction of ``phase`` on ``system``, fixed (None: none)."""
    try:
        row = predict(phase, {}, shipped(system)[0]).columns.records()[0]
    except CmperfError:
        return None
    return tuple((k, row[k]) for k in FIXED[phase] if k in row)


def moved(value, factor: float):
    """``value`` moved by ``factor`` (a count: to the nearest other whole number that way, 1 at least)."""
    if isinstance(value, int):
        n = round(value * factor)
        return max(1, n if n != value else value + (1 if factor > 1 else -1))
    return value * factor if value != 0 else (1e-7 if factor > 1 else 0.0)


def predictions(system: str, phase: str, inputs: dict, path: str, values: list, via: str):
    """One record per value of ``path`` (None where that value is not a valid spec or row)."""
    specs = shipped(system)[0]
    if via == "sweep":
        try:
            load_specs(system, None, [f"{path}={v}" for v in values[:1]])  # the schema accepts the value
            load_specs(system, None, [f"{path}={v}" for v in values[-1:]])
            r = predict(phase, inputs, specs, sweeps={path: values}, strict=False)
        except (CmperfError, TypeError, ValueError):
            via = "set"  # a field the vectorised model cannot vary, or a value the schema refuses
        else:
            rows = {float(x[path]): x for x in r.columns.records()}
            return [rows.get(float(v)) for v in values]
    out = []
    for v in values:
        try:
            s = load_specs(system, None, [f"{path}={v}"]) if v != shipped(system)[1][path] else specs
            out.append(predict(phase, inputs, s).columns.records()[0])
        except CmperfError:
            out.append(None)
    return out


def check_order(phase, path, values, rows, direction):
    """Rows for ascending ``values``: every output moves the way ``direction`` says."""
    rows = [(v, r) for v, r in zip(values, rows) if r is not None]
    for (v0, a), (v1, b) in zip(rows, rows[1:]):
        for c in LOWER[phase]:
            if c in a and c in b:
                worse = b[c] > a[c] * (1 + 1e-9) if direction > 0 else b[c] < a[c] * (1 - 1e-9)
                assert not worse, f"{path} {v0:g} -> {v1:g}: {phase} {c} {a[c]:.6g} -> {b[c]:.6g}"
        for c in HIGHER[phase]:
            if c in a and c in b:
                worse = b[c] < a[c] * (1 - 1e-9) if direction > 0 else b[c] > a[c] * (1 + 1e-9)
                assert not worse, f"{path} {v0:g} -> {v1:g}: {phase} {c} {a[c]:.6g} -> {b[c]:.6g}"


def test_every_numeric_field_is_classified():
    """A capability, or listed with why it is not a resource or not monotone; the exemptions
    name fields that exist."""
    every = {p for s in SYSTEMS for p in shipped(s)[1]}
    for pattern in (*NOT_A_RESOURCE, *EXEMPT):
        assert any(re.search(pattern, p) for p in every), f"{pattern} matches no shipped field"
    capabilities = [p for p in every if classify(p) != 0]
    assert len(capabilities) >= 40 and len(EXEMPT) <= 3


@settings(max_examples=60, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(data=st.data())
def test_less_resource_never_helps(data):
    system = data.draw(st.sampled_from(SYSTEMS), "system")
    fields = {p: v for p, v in shipped(system)[1].items() if classify(p) != 0}
    path = data.draw(st.sampled_from(sorted(fields)), "field")
    phase = data.draw(st.sampled_from(["decode", "prefill", "afd"]), "phase")
    base = default_inputs(system, phase)
    if base is None:
        return
    inputs = dict(base)
    if phase == "decode":
        inputs["batch"] = data.draw(st.sampled_from([1, 8, inputs["batch"], 256]), "batch")
        inputs["microbatches"] = data.draw(st.sampled_from([0, 1, 2]), "microbatches")
        inputs["kv_len"] = data.draw(st.sampled_from([None, 512, 32768]), "kv_len")
        inputs["chunk_tokens"] = data.draw(st.sampled_from([0, 0, 4096]), "chunk_tokens")
    elif phase == "prefill":
        inputs["microbatches"] = data.draw(st.sampled_from([0, 1, 2]), "microbatches")
        inputs["prompt_len"] = data.draw(st.sampled_from([inputs["prompt_len"], 1024, 8192]), "prompt_len")
        if shipped(system)[0].hardware.system.memory_pool is not None:
            inputs["cached_len"] = data.draw(st.sampled_from([0, inputs["prompt_len"] // 2]), "cached_len")
    else:
        inputs["microbatches"] = data.draw(st.sampled_from([0, 1, 3]), "microbatches")
        inputs["batch"] = data.draw(st.sampled_from([8, inputs["batch"]]), "batch")
    v = fields[path]
    factor = data.draw(st.sampled_from([0.25, 0.5, 0.9, 0.99, 1.01, 1.1, 2.0, 4.0]), "factor")
    values = sorted({v, moved(v, factor)})
    via = data.draw(st.sampled_from(["sweep", "set"]), "via")
    rows = predictions(system, phase, {k: x for k, x in inputs.items() if x is not None}, path, values, via)
    check_order(phase, path, values, rows, classify(path))


def every_field_both_ways(system):
    """Every capability field of ``system`` moved both ways, every phase (the sampled test's
    exhaustive form: ``python tests/test_monotonicity.py [SYSTEM ...]``, minutes per system)."""
    for path, v in shipped(system)[1].items():
        direction = classify(path)
        if direction == 0:
            continue
        values = sorted({moved(v, 0.5), moved(v, 0.97), v, moved(v, 1.03), moved(v, 2.0)})
        for phase in ("decode", "prefill", "afd"):
            base = default_inputs(system, phase)
            if base is not None:
                check_order(phase, path, values, predictions(system, phase, dict(base), path, values, "set"), direction)


# --------------------------------------------------------------------------- the cases found
def test_one_cube_core_is_slower_than_twenty_four():
    """Issue 17: one AI Cube core gave TPOT 51.06 ms against the shipped chip's 51.25 (the
    die's peak stayed, so each core ran 24 x faster, and both streams of the two-microbatch
    schedule owned the one core). A die's peaks are its units' peaks summed, so one core is
    1/24 of the INT8 peak, and one core cannot be split between two streams."""
    base = predict("decode", {}, load_specs()).columns
    one = load_specs(sets=["chip.die.matrix_units=1"])
    assert one.hardware.chip.die.peak_flops_per_s.int8.value == pytest.approx(752e12 / 24)
    r = predict("decode", {}, one).columns
    assert r["microbatches_used"].iat[0] == 1  # auto: the core-split schedule needs a core per stream
    assert r["tpot_ms"].iat[0] > 10 * base["tpot_ms"].iat[0]
    # the same what-if as a sweep gives the same answer
    s = predict("decode", {}, load_specs(), sweeps={"chip.die.matrix_units": [1, 24]}).columns
    assert s["tpot_ms"].iat[0] == pytest.approx(r["tpot_ms"].iat[0]) and s["tpot_ms"].iat[1] == pytest.approx(base["tpot_ms"].iat[0])
    with pytest.raises(CmperfError, match="less than one core"):
        predict("decode", {"microbatches": 2}, one)


def test_a_stream_owns_whole_cores_of_a_rounded_share():
    """The MoE stream owns 1 - 0.666666666667 of the 24 cube cores: 8 (paper §4.2.3), which
    floor(24 x 0.333333333333) took for 7. By hand: a GEMM of 16 rows x N 2,432 x K 7,168 on
    the 910C's fixed 128 x 152 tile is 16 tiles of 16 x 152 (rows rounded up to the 16-row
    fractal), 2 waves on 8 cores (3 on 7), each wave 2 x 16 x 152 x 7,168 FLOPs at one
    core's 752 T x 0.7968 / 24."""
    from cmperf.cost.roofline import Gemm, gemm_terms, stream_units

    hw, _ = load_specs().views()
    assert stream_units(24, 1 - 0.666666666667) == 8 and stream_units(24, 0.666666666667) == 16
    compute, pool, _ = gemm_terms(Gemm(16, 2432, 7168), hw, "int8", cube_share=1 - 0.666666666667)
    per_core = 752e12 * 0.7968 / 24
    assert float(compute) == pytest.approx(2 * 2 * 16 * 152 * 7168 / per_core, rel=1e-9)
    assert float(pool) == pytest.approx(1 * 2 * 16 * 152 * 7168 / per_core, rel=1e-9)  # 16 tiles, one wave on 24


def test_more_units_at_a_units_rate_never_slow_any_system():
    """Matrix and vector units each keep their rate: more of them never slow a prediction
    (DeepGEMM's block choice included), fewer never speed it."""
    for system in SYSTEMS:
        specs, fields = shipped(system)
        for path in ("chip.die.matrix_units", "chip.die.vector_units"):
            u = fields[path]
            values = sorted({max(1, u // 2), u - 1, u, u + 1, 2 * u})
            for phase in ("decode", "prefill"):
                base = default_inputs(system, phase)
                if base is not None:
                    check_order(phase, path, values, predictions(system, phase, dict(base), path, values, "sweep"), 1)


@lru_cache(maxsize=None)
def plan_goodput(system: str, sets: tuple = ()) -> float:
    from cmperf.plan.planner import plan

    p = plan(hardware=system, sets=list(sets), npus=32, shape_names=("pd", "colocated"))
    return p.best["goodput_rps"] if p.best is not None else 0.0


@pytest.mark.parametrize("system, path", [("cloudmatrix384", "chip.die.hbm_bandwidth_Bps"),
                                          ("cloudmatrix384", "system.collectives.step_time_cv"),
                                          ("h800-cluster", "chip.latency.kernel_launch_s")])
def test_plan_goodput_never_falls_with_more_resource(system, path):
    """plan: the best deployment's goodput (requests/s within the SLOs) on a 32-NPU budget
    never falls when a resource grows (a cost shrinks), and never rises the other way."""
    base = plan_goodput(system)
    assert base > 0
    v = shipped(system)[1][path]
    lo, hi = plan_goodput(system, (f"{path}={v * 0.5}",)), plan_goodput(system, (f"{path}={v * 2}",))
    if classify(path) < 0:
        lo, hi = hi, lo
    assert lo <= base * (1 + 1e-9) and base <= hi * (1 + 1e-9), (path, lo, base, hi)


if __name__ == "__main__":
    import sys

    for name in sys.argv[1:] or SYSTEMS:
        every_field_both_ways(name)
        print(f"{name}: every capability field monotone in decode, prefill and AFD")
