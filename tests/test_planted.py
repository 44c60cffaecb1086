"""Tests that catch physics the earlier suite let through (issue 17: planted bugs that passed
every test, or only the bookkeeping ones that compare shipped numbers with a re-fit). Each is
a value worked out by hand at fixed parameters, from the paper's or the config's own numbers,
or a structural identity; benchmarks/mutation.py plants the bug each one guards.

DeepSeek-R1: hidden 7,168; 128 heads; MLA latent 512 + 64 RoPE = 576; 61 layers = 3 dense + 58
MoE; vocabulary 129,280; BF16 hidden, embedding, head and KV cache; 8 of 256 routed experts.
Llama-3.1-70B: hidden 8,192; 64 query and 8 KV heads of 128; BF16.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from cmperf import deployment
from cmperf.cost.collectives import expected_max_normal
from cmperf.cost.ops import attention_decode_ops, embedding_op, moe_ops, placement, tp_allreduce_op
from cmperf.predict import load_specs, predict
from cmperf.scenario import make_grid

FIXED = ["chip.latency.kernel_launch_s=2e-6", "chip.die.vector_ops_per_s=1e12",
         "system.collectives.message_issue_s=1e-7", "system.collectives.step_time_cv=0.1"]
HF = Path(__file__).parent / "data" / "hf-configs"  # shipped with the tests (SOURCES.md)
V, H = 129280, 7168


@pytest.fixture(scope="module")
def fixed():
    return load_specs(sets=FIXED)


@pytest.fixture(scope="module")
def r1(fixed):
    return fixed.views()[1]


@pytest.fixture(scope="module")
def llama():
    return load_specs("h100-cluster", "llama-3.1-70b").views()[1]


def num(x) -> float:
    """A scalar of a one-row grid's array."""
    return float(np.asarray(x, dtype=float).ravel()[0])


def _grid(phase, specs, values):
    """The columns predict evaluates for ``values`` (the instance derived as predict does)."""
    hw, m = specs.views()
    grid = make_grid(phase, deployment.with_instance(phase, values, hw, m))
    deployment.resolve(phase, grid, hw, m)
    return hw, m, grid.arrays()


# --------------------------------------------------------------------------- attention
def test_the_new_tokens_latent_is_written_to_the_cache_once(fixed):
    """The cache write (its own kernel, or fused into MLAProlog) writes each new token's
    576-wide latent to the cache: one token more costs 576 x 2 B more with a BF16 cache than
    with an INT8 one (everything else alike)."""
    from cmperf.cost.ops import attention_decode_kernels

    m16 = fixed.views()[1]
    m8 = load_specs(sets=FIXED + ["model.precision.kv_cache=int8"]).views()[1]
    step = {}
    for name, m in (("bf16", m16), ("int8", m8)):
        one, two = (sum(float(o.hbm_bytes) for o in attention_decode_kernels(m, T, T, 4096)[:3]) for T in (1.0, 2.0))
        step[name] = two - one
    assert step["bf16"] - step["int8"] == pytest.approx(576 * (2 - 1))


def test_gqa_decode_reads_keys_and_values_of_its_kv_heads(llama):
    """Llama-3.1-70B at TP 8: a die holds 8 / 8 = 1 KV head; a request with 1,000 cached
    tokens reads its keys and values, 2 x 128 x 2 B x 1,000 = 512,000 B."""
    at = {L: float(attention_decode_ops(llama, 1.0, 1.0, L, 8)[1].hbm_bytes) for L in (0, 1000)}
    assert at[1000] - at[0] == pytest.approx(2 * 128 * 2 * 1000)
    # at TP 16 the 8 KV heads cannot split further: a die still reads one whole head
    at16 = {L: float(attention_decode_ops(llama, 1.0, 1.0, L, 16)[1].hbm_bytes) for L in (0, 1000)}
    assert at16[1000] - at16[0] == pytest.approx(2 * 128 * 2 * 1000)


def test_the_tp_all_reduce_is_two_passes_of_the_ring(llama):
    """A ring all-reduce over 8 dies sends (reduce-scatter + all-gather) 2 x 7/8 of the data:
    16 tokens x 8,192 x 2 B = 262,144 B -> 458,752 B; over one die nothing."""
    op = tp_allreduce_op(llama, 16.0, 8.0, "nvlink")
    assert float(op.net_bytes) == pytest.approx(2 * 7 / 8 * 16 * 8192 * 2)
    assert float(tp_allreduce_op(llama, 16.0, 1.0, "nvlink").net_bytes) == 0


def test_the_embedding_is_read_in_its_own_dtype(fixed):
    """A token's embedding row (7,168 values) is read and written once: 2 x 7,168 x 2 B in
    BF16, half that in INT8 (the precision's `embedding`, not the hidden dtype)."""
    assert float(embedding_op(fixed.views()[1], 1.0).hbm_bytes) == 2 * H * 2
    m8 = load_specs(sets=FIXED + ["model.precision.embedding=int8"]).views()[1]
    assert float(embedding_op(m8, 1.0).hbm_bytes) == 2 * H * 1


# --------------------------------------------------------------------------- MoE
def test_dispatch_keeps_the_experts_on_the_tokens_own_die(r1):
    """At EP 2 each of a token's 8 routed experts is on the other die with probability 1/2:
    4 messages per token; with a shared copy on both dies no shared message. At EP 1: none."""
    pl = placement(r1, 10.0, 2, 0, 2, 1.0, 128)
    _, dispatch, _, _ = moe_ops(r1, 10.0, 2, pl)
    assert float(dispatch.net_messages) == pytest.approx(10 * 8 / 2)
    pl1 = placement(r1, 10.0, 1, 0, 1, 1.0, 128)
    assert float(moe_ops(r1, 10.0, 1, pl1)[1].net_messages) == 0


def _ops(stage) -> list:
    """A stage's ops, one by one (its tables' rows)."""
    return [o for table in stage.ops for o in table.ops()]


def test_decode_dispatch_waits_for_attention_gate_and_send(fixed):
    """The barrier before the experts waits for the slowest of the 320 dies' attention, gate
    and send (docs/model.md §4.3): its wait over cv x their load is E[max of 320 normals],
    2.9; the one before the next layer's attention waits for the experts and combine."""
    from cmperf.schedule.decode import moe_stages

    hw, m, g = _grid("decode", fixed, {"batch": 96, "microbatches": 1, "expert_imbalance": 1.2})
    a, b = moe_stages(hw, m, g, 96.0, 48.0, 1)
    ops_a, ops_b = _ops(a), _ops(b)
    names = [o.name for o in ops_a] + [o.name for o in ops_b]
    assert names == ["mla_prolog", "attention_core", "o_proj", "gate", "dispatch", "experts", "combine"]
    load_a = sum(num(o.load_s) for o in ops_a + ops_b[:2])
    load_b = sum(num(o.load_s) for o in ops_b[2:])
    g320 = float(expected_max_normal(320))
    assert 2.85 < g320 < 2.95  # Tippett's table: 2.9 at 320
    assert num(a.wait_s) == pytest.approx(0.1 * g320 * load_a, rel=1e-9)
    assert num(b.wait_s) == pytest.approx(0.1 * g320 * load_b, rel=1e-9)


def test_prefill_dispatch_waits_for_the_whole_ep_group(fixed):
    """Prefill's SP -> TP collectives wait for the attention TP group (4 dies: E[max] 1.029),
    its dispatch and combine for the EP group (32 dies: E[max] 2.070, Tippett's table)."""
    from cmperf.schedule.prefill import layer_stages

    hw, m, g = _grid("prefill", fixed, {"microbatches": 1, "expert_imbalance": 1.2})
    stages = layer_stages(hw, m, g, 8192.0, moe=True)
    assert [s.name for s in stages] == ["C1", "M1", "C2", "M2", "C3", "M3", "C4", "M4"]
    for i, group in ((1, 1.0294), (3, 1.0294), (5, 2.0697), (7, 2.0697)):
        load = sum(num(o.load_s) for o in _ops(stages[i - 1]) + _ops(stages[i]))
        assert num(stages[i].wait_s) == pytest.approx(0.1 * group * load, rel=2e-4), stages[i].name


# --------------------------------------------------------------------------- prefill's pass
def test_prefill_runs_the_lm_head_on_each_prompts_last_token(fixed):
    """16,384 tokens per NPU of 4,096-token prompts: 2 prompts per die, so the head computes
    2 rows: 2 x 2 x 129,280 x 7,168 FLOPs (not 8,192 rows)."""
    r = predict("prefill", {"tokens_per_npu": 16384, "prompt_len": 4096}, fixed)
    ops, _ = r.breakdown(0)
    head = ops[(ops["section"] == "per_pass") & (ops["op"] == "lm_head")].iloc[0]
    assert head["flops"] == pytest.approx(2 * 2 * V * H)


def test_prefill_runs_three_dense_layers_and_58_moe_layers(fixed):
    """DeepSeek-R1's first 3 layers are dense (FFN 18,432 wide): prefill runs them as such."""
    r = predict("prefill", {"tokens_per_npu": 16384, "prompt_len": 4096, "microbatches": 1}, fixed)
    ops, sections = r.breakdown(0)
    count = sections.set_index("section")["count"]
    assert count["dense_layer"] == 3 and count["moe_layer"] == 58
    ffn = ops[ops["op"] == "dense_ffn"].iloc[0]
    assert ffn["flops"] == pytest.approx(2 * 8192 * 3 * H * 18432)  # 8,192 tokens per die, 3 matrices


# --------------------------------------------------------------------------- co-located instances
def test_a_chunked_iteration_samples_the_prompts_it_finishes(fixed):
    """A co-located iteration of 1,024 chunk tokens per NPU (512 per die) of 4K prompts
    finishes 512 / 4,096 = 0.125 prompts per die: the LM head computes the 96 decode tokens
    of a die (48 requests x 2 with MTP) and 0.125 prompt rows."""
    r = predict("decode", {"batch": 96, "chunk_tokens": 1024, "prompt_len": 4096, "microbatches": 1}, fixed)
    ops, _ = r.breakdown(0)
    head = ops[(ops["section"] == "per_iteration") & (ops["op"] == "lm_head")].iloc[0]
    assert head["flops"] == pytest.approx(2 * (96 + 0.125) * V * H)


def test_colocated_capacity_by_hand():
    """One co-located instance of 32 dies (16 NPUs) at batch 64 per NPU, TPOT 30 ms, a 50 ms
    iteration carrying 8,192 chunk tokens per NPU of 4,096-token prompts, 256-token outputs:
    decode serves 64 x 16 / (256 x 0.030) = 133.3 requests/s; a prompt runs on one die at 4,096
    of its tokens per iteration, so the 32 dies finish 32 prompts per 50 ms: 640 requests/s at
    most, and the rate within TTFT 2 s sits just below."""
    from cmperf.plan.planner import _colocated
    from cmperf.plan.workload import SLO, Workload, fixed

    rows = pd.DataFrame([{"dies": 32, "tp": 1, "batch": 64.0, "chunk_tokens": 8192.0, "iteration_ms": 50.0,
                          "tpot_ms": 30.0, "fits": True}])
    w = Workload(prompt=fixed(4096), output=fixed(256), prefix_hit=0.0, slo=SLO(ttft_s=2.0, tpot_s=0.05))
    t = _colocated(rows, w, budget_dies=32, dpp=2)
    best = t.iloc[0]
    assert best["decode_max_rps"] == pytest.approx(64 * 16 / (256 * 0.030))
    assert 600 < best["prefill_max_rps"] <= 640
    assert best["goodput_rps"] == pytest.approx(64 * 16 / (256 * 0.030))


# --------------------------------------------------------------------------- EMS and bring-up
def test_a_cached_prefix_counts_in_whole_blocks():
    """30 % of a 4,096-token prompt hits the pool: 1,228.8 tokens, 4 whole 256-token blocks =
    1,024 cached, 3,072 computed."""
    from cmperf.plan.workload import SLO, Workload, fixed

    w = Workload(prompt=fixed(4096), output=fixed(256), prefix_hit=0.3, slo=SLO(2.0, 0.05), block_tokens=256.0)
    assert w.cached_tokens == 1024 and w.computed.mean == 3072


def test_a_prefix_is_fetched_block_by_block(fixed):
    """A prefill of 1,000 cached + 3,096 computed tokens per prompt, 16,384 tokens per NPU
    (8,192 per die: 8,192 / 3,096 = 2.646 prompts): each prompt's prefix is ceil(1,000 / 256)
    = 4 blocks of 1.7 us (Table 1's NPU-CPU read) + 2.6 us (the pool's lookup and submission per
    block) and 1,000 x 62 layers x 576 x 2 B at 147 GB/s."""
    r = predict("prefill", {"tokens_per_npu": 16384, "prompt_len": 4096, "cached_len": 1000, "mtp": 1}, fixed)
    prompts = 8192 / 3096
    expected = prompts * (1000 * 62 * 576 * 2 / 147e9 + 4 * (1.7e-6 + 2.6e-6))
    assert r.table["pool_load_ms"].iat[0] == pytest.approx(expected * 1e3, rel=1e-9)


def test_bring_up_fills_each_die_after_the_copy():
    """A new instance whose dies hold 20 GB each: after one copy of the model arrives from the
    pool, every die reads its own 20 GB at 147 GB/s (Table 1): 0.136 s more than with none."""
    from cmperf.plan.bringup import bring_up_s

    hw, m = load_specs().views()
    t = {w: float(bring_up_s(hw, m, 32, w, "pool")) for w in (0.0, 20e9)}
    assert t[20e9] - t[0.0] == pytest.approx(20e9 / 147e9)


# --------------------------------------------------------------------------- Hugging Face defaults
@pytest.mark.skipif(not HF.is_dir(), reason="the reference configs")
def test_a_config_that_leaves_fields_out_takes_transformers_defaults(tmp_path):
    """LlamaConfig's defaults: num_key_value_heads = num_attention_heads (multi-head
    attention), tie_word_embeddings false."""
    from cmperf.specs.hf_import import import_hf_file

    cfg = json.loads((HF / "llama-3.1-70b.json").read_text())
    for k in ("num_key_value_heads", "tie_word_embeddings"):
        cfg.pop(k, None)
    p = tmp_path / "config.json"
    p.write_text(json.dumps(cfg))
    model, _ = import_hf_file(p)
    assert model["attention"]["num_kv_heads"] == 64 and model["tie_word_embeddings"] is False


def test_the_mutation_catalogue_still_plants_every_bug():
    """Each of benchmarks/mutation.py's planted bugs is one exact replacement whose text occurs
    once in its file: when the code moves, the catalogue must follow (six entries had drifted
    unseen, and the benchmark refused to run until they were re-pointed)."""
    import importlib.util
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    spec = importlib.util.spec_from_file_location("mutation_catalogue", root / "benchmarks" / "mutation.py")
    mutation = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mutation  # its dataclasses look their module up
    try:
        spec.loader.exec_module(mutation)
    finally:
        del sys.modules[spec.name]
    mutation.check_catalogue(mutation.CATALOGUE, root)  # raises CatalogueError naming each entry that drifted
    assert len(mutation.CATALOGUE) >= 40
