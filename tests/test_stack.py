"""Serving-stack profiles (stacks/*.yaml, cmperf/stack.py, docs/model.md §11): facts that
enter the one cost model as host time, inputs and limits — never as a throughput factor."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from cmperf.predict import load_specs, predict
from cmperf.schedule.decode import acceptance_for

REPO = Path(__file__).resolve().parents[1]
STACKS = sorted(p.stem for p in (REPO / "stacks").glob("*.yaml"))
PAPER_ROWS = [("decode", {"batch": 96, "kv_len": 4096}), ("decode", {"batch": 8, "prompt_len": 4096, "output_len": 256}),
              ("prefill", {})]


def test_every_stack_loads_and_every_fact_has_a_source():
    import yaml

    assert {"cloudmatrix-infer", "xdeepserve", "sglang", "sglang-ascend", "vllm", "vllm-ascend"} <= set(STACKS)
    for name in STACKS:
        specs = load_specs("cloudmatrix384", "deepseek-r1", stack=name)
        assert specs.stack_name == name
        raw = yaml.safe_load((REPO / "stacks" / f"{name}.yaml").read_text())
        for field, v in raw.items():
            if isinstance(v, dict):
                assert len(v.get("source", "")) > 10, (name, field)


@pytest.mark.parametrize("phase, inputs", PAPER_ROWS)
def test_the_papers_stack_leaves_the_papers_rows_as_calibrated(phase, inputs):
    """The paper's rows were measured on CloudMatrix-Infer, whose host time the fitted chip
    values hold: the default stack (the system's) adds no time to no stack's prediction; what
    it changes is which kernels run fused (docs/model.md §2.9), never for the slower."""
    import copy

    lat = "tpot_ms" if phase == "decode" else "ttft_ms"
    specs = load_specs("cloudmatrix384")
    with_stack = predict(phase, inputs, specs).columns[lat].iat[0]
    bare = predict(phase, inputs, load_specs("cloudmatrix384", stack="none")).columns[lat].iat[0]
    unfused = copy.copy(specs)
    unfused.stack = {**specs.stack, "fusion": None}
    assert specs.stack_name == "cloudmatrix-infer"
    assert predict(phase, inputs, unfused).columns[lat].iat[0] == pytest.approx(bare, rel=1e-12)
    assert with_stack <= bare


def test_a_scheduler_bubble_adds_its_time_to_every_decode_iteration():
    """xDeepServe's 2 ms between decode iterations, and the launch of the MTP step's second
    graph after its seam (docs/model.md §11.1): the iteration grows by exactly their sum (the
    same MTP acceptance as the bare model's 0.7); TPOT by that over 1.7 tokens per iteration."""
    base = predict("decode", {"batch": 96}, load_specs("cloudmatrix384", stack="xdeepserve",  # the same fusion
                                                        sets=["stack.mtp_acceptance=0.7", "stack.scheduler_overhead_s=0",
                                                              "stack.graph_launch_s=0", "stack.spec_seam_s=0"])).columns
    specs = load_specs("cloudmatrix384", stack="xdeepserve", sets=["stack.mtp_acceptance=0.7"])
    xds = predict("decode", {"batch": 96}, specs).columns
    st = specs.stack_view()
    extra = st.scheduler_overhead_s + 1 * (st.graph_launch_s + st.spec_seam_s)  # 2 graphs: 1 seam
    assert extra * 1e3 == pytest.approx(2.7, rel=1e-9)
    assert xds["iteration_ms"].iat[0] - base["iteration_ms"].iat[0] == pytest.approx(extra * 1e3, rel=1e-9)
    assert xds["tpot_ms"].iat[0] - base["tpot_ms"].iat[0] == pytest.approx(extra * 1e3 / 1.7, rel=1e-9)


def test_an_eager_phase_waits_for_the_host_launch():
    """Eager prefill: the pass is never shorter than the host's launches (launches x
    eager_launch_s); a longer host launch never makes a pass shorter, one that outlasts the
    device sets the pass, and graph mode ignores it."""
    def run(stack, launch):
        specs = load_specs("cloudmatrix384", stack=stack, sets=[f"stack.eager_launch_s={launch}"])
        return predict("prefill", {}, specs)

    def ttft(stack, launch):
        return run(stack, launch).columns["ttft_ms"].iat[0]

    assert ttft("xdeepserve", 5e-3) > ttft("xdeepserve", 1e-4) >= ttft("xdeepserve", 5e-6) >= ttft("xdeepserve", 0.0) - 1e-9
    slow = run("xdeepserve", 5e-3)
    launches = slow.schedules[int(slow.columns["microbatches_used"].iat[0]) - 1].launches()
    assert slow.columns["forward_ms"].iat[0] >= float(np.ravel(launches)[0]) * 5e-3 * 1e3 * (1 - 1e-12)
    assert ttft("cloudmatrix-infer", 1e-4) == ttft("cloudmatrix-infer", 0.0)  # graph mode: not used


def test_a_stack_sets_mtp_and_microbatches_only_where_the_user_does_not():
    specs = load_specs("cloudmatrix384", stack="sglang-ascend")
    row = predict("decode", {"batch": 32}, specs).columns
    assert row["mtp_k"].iat[0] == 2 and row["mtp_acceptance"].iat[0] == pytest.approx(acceptance_for(2.84, 3), abs=1e-4)
    assert row["microbatches"].iat[0] == 1
    given = predict("decode", {"batch": 32, "mtp_k": 1, "microbatches": 2}, specs).columns
    assert given["mtp_k"].iat[0] == 1 and given["microbatches_used"].iat[0] == 2


def test_no_stack_to_set_is_a_clear_error(cli):
    code, _, err = cli("predict", "decode", "--hardware", "h800-cluster", "--set", "stack.mtp_acceptance=0.9")
    assert code == 2 and "no serving stack" in err and "--stack" in err
    code, _, err = cli("predict", "decode", "--stack", "nosuch")
    assert code == 2 and "unknown stack spec 'nosuch'" in err
