"""Host and seam time of a served step (cmperf/cost/host.py, docs/model.md §11.1): physical
structure that holds whatever the fitted constants are — a step is never shorter than its
host time nor its device time, a host term adds exactly its own time where the device does
not hide it, the DP-rank sync grows with the ranks where the stack syncs them, an eager
phase waits for its launches, and a phase never pays another phase's host time."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from cmperf.cost.host import decode_host, dispatch_syncs, prefill_host
from cmperf.errors import CmperfError
from cmperf.predict import load_specs, predict
from cmperf.schedule.decode import dp_ranks, draft_tokens
from cmperf.specs.loader import list_builtin

REPO = Path(__file__).resolve().parents[1]
STACKS = sorted(p.stem for p in (REPO / "stacks").glob("*.yaml"))
SYSTEMS = [name for name, _ in list_builtin("system")]


def _first(x) -> float:
    return float(np.ravel(np.asarray(x, dtype=float))[0])


def _decode(specs, values):
    """(columns, host time, device time) of one decode prediction; the host time recomputed
    from the schedule's own launches must be the ``host_ms`` the prediction reports."""
    r = predict("decode", values, specs)
    sched = r.schedules[int(r.columns["microbatches_used"].iat[0]) - 1]
    g = {k: np.asarray([r.columns[k].iat[0]]) for k in ("mtp", "mtp_k", "dies", "tp")}
    host = _first(decode_host(load_specs_view(specs), sched.launches(), draft_tokens(g), dp_ranks(g)).host_s)
    assert r.columns["host_ms"].iat[0] == pytest.approx(host * 1e3, rel=1e-9, abs=1e-12)
    device = sum(_first(s.time_s) * _first(s.count) for s in sched.sections if not s.name.startswith("host_"))
    return r.columns, host, device


def load_specs_view(specs):
    """The stack as the schedules read it (``hw.stack``)."""
    hw, _ = specs.views()
    return hw.stack


def test_a_decode_step_at_batch_1_is_never_shorter_than_its_host_time_on_every_system_and_stack():
    """Walks every shipped system x stack (one prediction each, shared specs), then the same
    with host launches that outlast the device (an eager decode at 1 ms per op), where the
    step must be the host's time plus its serial terms."""
    ran = 0
    for system in SYSTEMS:
        for name in STACKS:
            try:
                specs = load_specs(system, stack=name)
                cols, host, device = _decode(specs, {"batch": 1})
            except CmperfError:
                continue  # a system the model does not fit on at its default deployment (test_deployment's matter)
            ran += 1
            step = cols["iteration_ms"].iat[0] / 1e3
            assert step >= host * (1 - 1e-12), (system, name, step, host)
            assert step >= device * (1 - 1e-12), (system, name, step, device)
    assert ran >= len(STACKS) * len(SYSTEMS) // 2
    for name in STACKS:
        specs = load_specs("cloudmatrix384", stack=name, sets=["stack.decode_graph=eager", "stack.eager_launch_s=1e-3"])
        cols, host, device = _decode(specs, {"batch": 1})
        step = cols["iteration_ms"].iat[0] / 1e3
        assert host > device  # host-bound: the launches outlast the device
        assert step == pytest.approx(host, rel=1e-9), name  # max(device, launches) + serial = host time


def test_the_dp_rank_sync_grows_with_the_ranks_where_the_stack_syncs_them():
    """SGLang's scheduler all-gathers across DP ranks (a ring, R - 1 hops); SGLang on A3 skips
    it (SGLANG_SCHEDULER_SKIP_ALL_GATHER): its host time does not depend on the ranks."""
    sglang = load_specs("cloudmatrix384", stack="sglang")
    hosts = [_decode(sglang, {"batch": 1, "dies": d, "ep": d, "tp": 1})[1] for d in (16, 32, 64, 128)]
    assert all(b > a for a, b in zip(hosts, hosts[1:])), hosts
    st = load_specs_view(sglang)
    assert hosts[-1] - hosts[0] == pytest.approx((128 - 16) * st.dp_sync_hop_s, rel=1e-6)
    skip = load_specs("cloudmatrix384", stack="sglang-ascend")
    flat = [_decode(skip, {"batch": 1, "dies": d, "ep": d, "tp": 1})[1] for d in (16, 32, 64, 128)]
    assert max(flat) - min(flat) < 1e-6 * max(flat)


def test_a_serial_host_term_adds_exactly_its_time_to_the_step():
    """The speculative metadata and the scheduler's time are serial: +1 ms of either adds
    1 ms to every iteration, at any batch; the launches hide under a longer device step."""
    base = load_specs("cloudmatrix384", stack="sglang-ascend")
    for field in ("spec_step_s", "scheduler_overhead_s"):
        v = float(getattr(load_specs_view(base), field))
        more = load_specs("cloudmatrix384", stack="sglang-ascend", sets=[f"stack.{field}={v + 1e-3}"])
        for batch in (1, 64):
            a = predict("decode", {"batch": batch}, base).columns["iteration_ms"].iat[0]
            b = predict("decode", {"batch": batch}, more).columns["iteration_ms"].iat[0]
            assert b - a == pytest.approx(1.0, rel=1e-9), (field, batch)


def test_eager_is_never_faster_than_graph_where_the_host_bounds_the_step():
    """With launches that outlast the device, an eager decode step is the host's launches
    plus its seams: never shorter than the same step replayed as graphs."""
    for name in STACKS:
        sets = ["stack.eager_launch_s=2e-4"]
        graph = predict("decode", {"batch": 1}, load_specs("cloudmatrix384", stack=name, sets=sets + ["stack.decode_graph=graph"]))
        eager = predict("decode", {"batch": 1}, load_specs("cloudmatrix384", stack=name, sets=sets + ["stack.decode_graph=eager"]))
        assert eager.columns["iteration_ms"].iat[0] >= graph.columns["iteration_ms"].iat[0], name


def test_a_decode_host_term_never_enters_a_prefill_pass_and_vice_versa():
    specs = load_specs("cloudmatrix384", stack="sglang-ascend")
    big = ["stack.spec_step_s=0.5", "stack.scheduler_overhead_s=0.5", "stack.dp_sync=true"]
    fat = load_specs("cloudmatrix384", stack="sglang-ascend", sets=big)
    assert predict("prefill", {}, fat).columns["forward_ms"].iat[0] == predict("prefill", {}, specs).columns["forward_ms"].iat[0]
    pre = load_specs("cloudmatrix384", stack="sglang-ascend", sets=["stack.host_sync_s=0.5", "stack.prefill_overhead_s=0.5"])
    assert predict("decode", {"batch": 8}, pre).columns["iteration_ms"].iat[0] == \
        predict("decode", {"batch": 8}, specs).columns["iteration_ms"].iat[0]


def test_an_extend_iteration_pays_the_prefill_pass_host_where_the_stack_does_not_mix_chunks():
    """A co-located iteration with a prompt chunk, by hand at fixed values: 0.1 s a pass and
    2 ms a prompt, 4,096 prompt tokens per NPU = one 2,048-token prompt per die, one die per
    rank (tp 1): SGLang's extend forward (mixed_chunks off) adds 0.1 + 1 x 0.002 s to the
    iteration the same stack mixing its chunks takes; a decode step without a chunk pays
    neither (cost/host.with_extend, docs/model.md §12.3)."""
    sets = ["stack.prefill_overhead_s=0.1", "stack.prefill_request_s=0.002"]
    row = {"dies": 16, "tp": 1, "batch": 8, "chunk_tokens": 4096.0, "prompt_len": 2048}
    ms = {}
    for mixed in ("true", "false"):
        specs = load_specs("cloudmatrix384", stack="sglang-ascend", sets=sets + [f"stack.mixed_chunks={mixed}"])
        ms[mixed] = (predict("decode", row, specs).columns["iteration_ms"].iat[0],
                     predict("decode", {**row, "chunk_tokens": 0.0}, specs).columns["iteration_ms"].iat[0])
    assert ms["false"][0] - ms["true"][0] == pytest.approx(102.0, rel=1e-9)
    assert ms["false"][1] == ms["true"][1]


def test_the_simulators_steps_carry_the_host_time_of_their_own_phase():
    """The simulation's step-time grids are predict's rows (host time included), and a decode
    constant moves only decode steps, a prefill constant only passes."""
    from cmperf.simulate.predictor import decode_predictor, prefill_predictor

    specs = load_specs("cloudmatrix384", stack="sglang-ascend")
    inst = {"dies": 32, "ep": 32, "tp": 1, "mtp": 1}
    sweeps = {"stack.spec_step_s": [0.0, 0.01], "stack.host_sync_s": [0.0, 0.01]}
    d0, d1 = decode_predictor(specs, inst, 8.0, 4096.0, sweeps=sweeps)
    one = predict("decode", {**inst, "batch": 8.0, "kv_len": 4096.0, "prompt_len": 4096, "output_len": 1}, specs,
                  sweeps={k: [v[1]] for k, v in sweeps.items()}).columns["iteration_ms"].iat[0] / 1e3
    assert d1.step(8.0, 4096.0) == pytest.approx(one, rel=1e-9)
    assert d1.step(8.0, 4096.0) - d0.step(8.0, 4096.0) == pytest.approx(0.01, rel=1e-9)
    p0, p1 = prefill_predictor(specs, {"dies": 16, "ep": 16, "attn_tp": 8, "mtp": 1}, 28000.0, np.array([3500.0]),
                               sweeps=sweeps)
    t = 1750.0 * 2
    syncs = float(dispatch_syncs(load_specs_view(specs), 58 + 1, 1, 1750.0))
    assert p1.times(t * 8, 3500.0)[0] - p0.times(t * 8, 3500.0)[0] == pytest.approx(syncs * 0.01, rel=1e-6)


def test_dispatch_syncs_count_rounds_of_the_dies_tokens():
    """A normal-mode dispatch takes at most round_tokens tokens per die per round, each round
    with its host syncs: 1,750 tokens per die in rounds of 512 is 4 rounds per layer."""
    st = load_specs_view(load_specs("cloudmatrix384", stack="sglang-ascend"))
    assert st.dispatch_round_tokens == 512 and st.dispatch_host_syncs == 1
    assert float(dispatch_syncs(st, 58, 1, 1750.0)) == 58 * 4
    assert float(dispatch_syncs(st, 58, 2, 875.0)) == 58 * 2 * 2
    assert float(prefill_host(None, 1000, 58, 1, 1750.0, 2.0).host_s) == 0.0  # no stack: the bare cost model


def test_the_launch_count_is_every_op_of_every_layer_and_microbatch():
    """An eager decode step at 1 s per launch is its launch count in seconds: at least a few
    kernels per layer of the 61 (not one per kind of op), and a second microbatch launches
    every MoE layer's ops again (58 layers x at least 4 ops more)."""
    def launches(mb):
        specs = load_specs("cloudmatrix384", stack="sglang-ascend",
                           sets=["stack.decode_graph=eager", "stack.eager_launch_s=1.0", "stack.spec_step_s=0"])
        r = predict("decode", {"batch": 8, "mtp": 0, "microbatches": mb}, specs)
        return r.columns["iteration_ms"].iat[0] / 1e3
    one, two = launches(1), launches(2)
    assert 61 * 4 <= one <= 61 * 40
    assert two - one >= 58 * 4


def test_the_breakdown_shows_host_time_apart_from_the_device():
    """--breakdown: the launches on the host's own lane (overlapped, as the host time of the
    step says), and each term the device waits for as its own row and section."""
    r = predict("decode", {"batch": 2}, load_specs("cloudmatrix384", stack="sglang-ascend"))
    ops, sections = r.breakdown(0)
    host = ops[ops["section"] == "host"].set_index("op")
    assert {"host_launch", "host_spec_metadata", "host_spec_seams"} <= set(host.index)
    assert (host["total_ms"] > 0).all() and (host["engine"] == "host").all()
    assert host.loc["host_launch", "stream"].startswith("host (ahead")
    waits = sections[sections["section"].str.startswith("host_")]["total_ms"].sum()
    assert r.columns["iteration_ms"].iat[0] == pytest.approx(sections["total_ms"].sum(), rel=1e-9)
    assert waits == pytest.approx(host.loc[["host_spec_metadata", "host_spec_seams"], "total_ms"].sum(), rel=1e-9)


@pytest.mark.parametrize("attn_tp", [1, 4])
def test_a_pass_waits_for_one_ranks_prompts_at_the_per_request_cost(attn_tp):
    """16K tokens per NPU of 4K prompts on 2-die NPUs: 2 prompts per die, so a DP-attention rank
    of attn_tp dies admits 2 x attn_tp prompts; 1 ms each (``prefill_request_s``) adds exactly
    2 x attn_tp ms to the pass (serial: the device waits), whatever the other host terms."""
    base = {"tokens_per_npu": 16384, "prompt_len": 4096, "attn_tp": attn_tp}
    ttft = {}
    for s in (0.0, 1e-3):
        specs = load_specs("cloudmatrix384", None, [f"stack.prefill_request_s={s}"], "sglang-ascend")
        ttft[s] = float(predict("prefill", base, specs).columns["ttft_ms"].iat[0])
    assert ttft[1e-3] - ttft[0.0] == pytest.approx(2 * attn_tp, rel=1e-6)


def test_a_stacks_prompt_attention_efficiency_slows_only_prompt_attention():
    """At prefill_attention_efficiency e a prompt's attention core's cube and vector phases take
    1 / e of their time (the same work on the same cores at e of the rate); nothing else in the pass
    changes, a decode step without a chunk not at all, and a pass never gets faster as e falls."""
    base = {"tokens_per_npu": 16384, "prompt_len": 8192}
    rows, ttft = {}, {}
    for e in (1.0, 0.5, 0.25):
        specs = load_specs("cloudmatrix384", None, [f"stack.prefill_attention_efficiency={e}"], "sglang-ascend")
        r = predict("prefill", base, specs)
        ttft[e] = float(r.columns["ttft_ms"].iat[0])
        rows[e] = {(o["section"], o["op"]): o for o in r.breakdown_records()[0]}
        dec = predict("decode", {"batch": 8}, specs).columns["tpot_ms"].iat[0]
        rows[e]["decode"] = dec
    core = [k for k in rows[1.0] if k != "decode" and k[1] == "attention_core"]
    assert core
    for k in core:  # its cube and vector phases both at half the rate: twice as long each
        one, half = rows[1.0][k], rows[0.5][k]
        assert half["compute_us"] == pytest.approx(2 * one["compute_us"], rel=1e-9)
        assert half["vector_us"] == pytest.approx(2 * one["vector_us"], rel=1e-9)
        assert half["time_us"] >= 1.5 * one["time_us"]
    others = [k for k in rows[1.0] if k != "decode" and k[1] not in ("attention_core",) and k[0] != "host"]
    for k in others:
        assert rows[0.5][k]["compute_us"] == pytest.approx(rows[1.0][k]["compute_us"], rel=1e-12), k
    assert rows[0.5]["decode"] == rows[1.0]["decode"] == rows[0.25]["decode"]
    assert ttft[0.25] > ttft[0.5] > ttft[1.0]
