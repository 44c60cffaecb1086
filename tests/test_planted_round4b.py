"""Tests for planted bugs that escaped the whole suite (issue 33 item 4, round B): each a
hand-derived value at fixed parameters, an inequality or an identity between two paths, so
that it holds after any re-fit and fails on the bug (benchmarks/mutation.py, the catalogue's
"issue 33 (round B)" section, plants each).

Llama-3.1-70B: hidden 8,192, vocabulary 128,256, BF16. H100 (h100-cluster): an NVLink
all-reduce pays at least its measured per-call floor, 34 us (Vidur's profile; hardware/h100-cluster.yaml).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from cmperf.cost.roofline import Op, columns, op_time, op_times, rows_of
from cmperf.predict import load_specs, predict
from cmperf.specs.view import uncached


@pytest.fixture(scope="module")
def h100():
    return load_specs("h100-cluster", "llama-3.1-70b", [], "none")


# --------------------------------------------------------------------------- fusion never swallows the network
def test_a_fusion_group_never_takes_in_a_network_op(h100):
    """A stack's group that names a collective between two compute kernels fuses nothing
    across it: the collective stays its own kernel (its own launch, its bytes on the tier), so
    the three together are never cheaper than the collective alone plus one launch."""
    from cmperf.cost.fusion import fused_table, fusion_runs
    from cmperf.cost.ops import residual_norm_ops, tp_allreduce_op

    hw, m = h100.views()
    add, norm = residual_norm_ops(m, 64.0)
    ar = tp_allreduce_op(m, 64.0, 8.0, "nvlink")
    assert fusion_runs((("residual_add", True), ("tp_allreduce", False), ("rmsnorm", True)),
                       (("residual_add", "tp_allreduce", "rmsnorm"),)) == ((0, 1), (1, 1), (2, 1))
    table, sizes = fused_table(rows_of([add, ar, norm]), [("residual_add", "tp_allreduce", "rmsnorm")], [3])
    assert sizes == [3] and table.names == ["residual_add", "tp_allreduce", "rmsnorm"]
    fused_s = float(np.sum(op_times(table, hw).time_s))
    assert fused_s >= float(op_time(ar, hw).time_s)


# --------------------------------------------------------------------------- sampling, per token
def test_sampling_reads_every_logit_of_every_token(h100):
    """Sampling T tokens (softmax / argmax over the vocabulary) touches each of the T x V
    logits at least once: its element operations are at least T x V, and twice the tokens
    take twice the work."""
    from cmperf.cost.ops import sampling_op

    _, m = h100.views()
    V = 128256
    for T in (1.0, 64.0, 512.0):
        assert float(sampling_op(m, T).vector_ops) >= T * V
    assert float(sampling_op(m, 512.0).vector_ops) == pytest.approx(512 * float(sampling_op(m, 1.0).vector_ops))


# --------------------------------------------------------------------------- n calls, n floors
def test_n_calls_of_a_collective_pay_n_floors(h100):
    """An op of n all-reduce calls of a few bytes each is never faster than n of the tier's
    measured per-call floor (34 us on H100 NVLink): 10 calls at least 340 us."""
    from cmperf.cost.ops import tp_allreduce_op

    hw, m = h100.views()
    floor = float(hw.system.collectives.call_floor_s.all_reduce["nvlink"])
    one = tp_allreduce_op(m, 1.0, 8.0, "nvlink")
    for n in (1.0, 10.0, 160.0):
        assert float(op_time(replace(one, launches=n), hw).time_s) >= n * floor * (1 - 1e-12), n


# --------------------------------------------------------------------------- the replay, across models and branches
def _columns(phase, values, specs):
    r = predict(phase, values, specs, strict=False)
    return {c: np.asarray(r.columns[c]) for c in r.columns.columns}


def _same(a, b) -> bool:
    return a.keys() == b.keys() and all(
        np.array_equal(a[c], b[c], equal_nan=True) if a[c].dtype.kind in "fc" else np.array_equal(a[c], b[c]) for c in a)


def test_a_replay_made_for_one_model_never_answers_for_another():
    """The same system's views, the same inputs, two models: each model's warm calls (traced on
    the third, replayed after) answer as its own uncached path, model B's after model A's
    trace was made on the same structure."""
    a = load_specs("h100-cluster", "llama-3.1-70b")
    b = load_specs("h100-cluster", "qwen2.5-72b")  # dense as Llama: the same inputs, so the same structure key
    # one hardware view under both models, as a cache of views per system would give it: what
    # the view keeps (its traces among it) must still tell the models apart
    hw_a, _ = a.views()
    _, m_b = b.views()
    b.__dict__["_views"] = (b.__dict__["_views"][0], (hw_a, m_b))
    values = {"batch": 16, "kv_len": 2048.0}
    for specs in (a, b, a, b):
        for k in range(4):
            got = _columns("decode", {**values, "batch": 16 + k}, specs)
            with uncached():
                cold = _columns("decode", {**values, "batch": 16 + k}, specs)
            assert _same(got, cold), (specs.model.name, k)


@pytest.mark.parametrize("system", ["cloudmatrix384", "h100-cluster"])
def test_a_replayed_branch_on_a_traced_value_is_guarded(system):
    """Drawn rows of one structure whose traced values flip the branches the cost model takes
    on them (a chunk of prompt tokens on and off in decode, a cached prefix on and off in
    prefill, acceptance 0 and not): every call answers as the uncached path, to the bit."""
    specs = load_specs(system)
    rng = np.random.default_rng(33)
    # each walk's first three rows on one side of its branches (the third is traced there), the
    # rest on the other side and back: a replay that skipped a guard would answer them as the first
    walks = {"decode": [{"batch": int(rng.integers(1, 64)), "kv_len": float(rng.integers(256, 8192)),
                         "chunk_tokens": int(c), "mtp_acceptance": float(a)}
                        for c, a in zip((0, 0, 0, 512, 2048, 0, 1024, 0), (0.7, 0.5, 0.8, 0.6, 0.0, 0.7, 0.3, 0.0))],
             "prefill": [{"prompt_len": int(p), "cached_len": int(c), "pool_len": int(q)}
                         for p, c, q in ((4096, 1024, 0), (2048, 512, 0), (8192, 2048, 0), (4096, 2048, 1024),
                                         (6144, 3072, 3072), (1024, 0, 0), (4096, 1024, 512))]}
    for phase, walk in walks.items():
        for values in walk:
            got = _columns(phase, values, specs)
            with uncached():
                cold = _columns(phase, values, specs)
            assert _same(got, cold), (phase, values)


# --------------------------------------------------------------------------- a rank's cap
def test_no_decode_rank_runs_more_than_its_stacks_limit():
    """2 DP ranks (8 GPUs at TP 4) of at most 3 requests each under 40 clients: the decode
    batch reaches 6 requests and never 7."""
    from cmperf.plan.workload import SLO, Workload, fixed
    from cmperf.simulate import Traffic, simulate
    from cmperf.simulate.deployment import DeploymentSpec, InstanceGroup

    specs = load_specs("h100-cluster", "llama-3.1-70b", ["stack.max_running_per_rank=3"], "sglang")
    w = Workload(prompt=fixed(512), output=fixed(64), prefix_hit=0.0, slo=SLO(10.0, 1.0))
    dep = DeploymentSpec(prefill=[InstanceGroup(1, {"dies": 8})], decode=[InstanceGroup(1, {"dies": 8, "tp": 4})])
    res = simulate(specs, w, dep, Traffic(rate_rps=None, max_concurrency=40, num_prompts=200), seed=3)
    running = max(n for _, _, _, n, *_ in res.stats.intervals)
    assert running == 6


# --------------------------------------------------------------------------- export: ranks are GPUs
def test_an_exported_gpu_rank_is_a_gpu_whatever_its_dies():
    """A GPU of 2 dies per package (a launcher's rank is one GPU): 16 dies are 8 ranks on 1
    node of 8 GPUs; on Ascend a rank is a die (SGLASC: tp 16 on a 16-die node)."""
    from cmperf.export import Context

    def ctx(vendor, dpp):
        return Context(vendor=vendor, dies_per_package=dpp, chips_per_node=8, model_name="m", moe=False, mtp_modules=0,
                       redundant_experts={}, stack=None, stack_name="none", ttft_slo_ms=2000.0, tpot_slo_ms=50.0,
                       mtp_on=False)

    assert ctx("nvidia", 2).ranks(16) == 8 and ctx("nvidia", 2).nodes(16) == 1
    assert ctx("nvidia", 1).ranks(16) == 16 and ctx("nvidia", 1).nodes(16) == 2
    assert ctx("huawei", 2).ranks(16) == 16 and ctx("huawei", 2).nodes(16) == 1


# --------------------------------------------------------------------------- a co-located prompt's pool read
def test_a_colocated_prompts_pool_read_is_over_its_own_ranks_dies():
    """A lone 4K prompt with 3,584 cached tokens on a 16-die co-located CloudMatrix384
    instance (16 DP ranks of one die): read from the pool, its prefix's bytes come over its
    own rank's die before its pass (the other ranks hold none of its KV), so its TTFT exceeds
    the one with the prefix in HBM by at least that die's read of all of them (Table 1's
    147 GB/s: ~1.7 ms for its 256 MB), not a sixteenth of it."""
    from cmperf.cost.pool import pool_read_s
    from cmperf.plan.workload import SLO, Workload, fixed
    from cmperf.simulate import Traffic, simulate
    from cmperf.simulate.deployment import DeploymentSpec, InstanceGroup

    specs = load_specs("cloudmatrix384")
    hw, _ = specs.views()
    dep = DeploymentSpec(decode=[InstanceGroup(1, {"dies": 16, "tp": 1})], colocated=True)
    ttft, req = {}, None
    for part in (0.0, 1.0):
        w = Workload(prompt=fixed(4096), output=fixed(8), prefix_hit=0.875, slo=SLO(10.0, 1.0), hit_concentration=float("inf"),
                     block_tokens=256.0, pool_part=part)
        res = simulate(specs, w, dep, Traffic(rate_rps=None, max_concurrency=1, num_prompts=2), seed=0)
        req = res.requests
        ttft[part] = float(req.first_token_s[0] - req.send_s[0])
    assert float(req.cached[0]) == 3584 and float(req.pool_B[0]) > 0
    one_die = float(pool_read_s(hw, float(req.pool_B[0]), float(req.blocks[0]), 16.0))
    assert one_die > 1e-3
    assert ttft[1.0] - ttft[0.0] >= 0.9 * one_die
