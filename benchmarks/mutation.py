"""Mutation testing of the cost model: do the tests catch a planted bug once the fit has
had its chance to absorb it?

    python benchmarks/mutation.py                    # baseline, then every mutation
    python benchmarks/mutation.py --list             # the catalogue
    python benchmarks/mutation.py --only sync-round-one-way,kv-memory-prompt-only
    python benchmarks/mutation.py --baseline         # only the unmutated control run
    python benchmarks/mutation.py --keep             # keep the temporary copies (and their logs)

Each mutation is one exact textual replacement (``old -> new``) in one file of the cost
model or the schedules: a single-line bug of a kind that is easy to write and hard to see
(a bandwidth read from the wrong tier, a factor 2 dropped, a max where a sum belongs, a
layer count off by one, ...). For each one the script

1. copies the repository (without .git, .ci-venv, __pycache__ and the pytest/hypothesis
   caches) into a fresh temporary directory, so the real checkout is never modified; all
   copies are made from one snapshot taken at start, so every run sees the same tests even
   if the checkout changes meanwhile;
2. applies the mutation there: the ``old`` text must occur exactly once in the file, else the
   script stops before running anything (the catalogue is checked against the code up front;
   when the code changes, the catalogue must be updated by hand);
3. re-runs the calibration with ``python -m cmperf.calibration --write`` in the copy (cwd and
   PYTHONPATH = the copy; the script checks that ``cmperf.__file__`` is the copy's), so the
   fitted parameters and the prediction bands can absorb the bug as far as they are able;
4. runs ``pytest -q -x -p no:cacheprovider -rfE`` in the copy (same PYTHONPATH) and records

   * ``caught``   -- some test fails (the first failing test id is reported); the tests
     that compare shipped numbers with a re-fit or a pinned output (``BOOKKEEPING``: they fail
     on any change, bug or not) are deselected, so a bug only they notice is not caught,
   * ``survived`` -- every other test passes: no test of the physics notices the bug,
   * ``broken``   -- the fit itself crashed (counted as caught, but reported as such),
   * ``timeout``  -- fit + tests exceeded ``--timeout`` (counted as caught, reported as such).

Before the mutations, the same pipeline (copy, fit, tests; without ``-x``, so that every
failure is listed) runs on the unmutated code. If that baseline fails, the script prints the
failing tests and stops: a mutation result means nothing against a red suite.

Hypothesis draws its examples from a fixed seed (``--hypothesis-seed``, default 0) so that a
result does not depend on the luck of the draw; ``--hypothesis-seed random`` restores the
default behaviour.

Exit code: 0 when every mutation is caught, 1 when at least one survived, 2 when the run could
not be made (a catalogue entry no longer matches the code, the baseline fails, bad options).

Not run in CI: it takes about (fit + test suite) x (mutations + 1). On the 2-core development
machine the fit with --write takes ~10 s and a caught mutation stops at its first failing test,
so a mutation takes 5-25 s and the whole catalogue about 5 minutes (more as the suite grows).
``--jobs 2`` runs two mutations at a time (only worth it with more than the default two cores).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
EXCLUDE = (".git", ".ci-venv", "__pycache__", ".pytest_cache", ".hypothesis")
FIT = ["-m", "cmperf.calibration", "--write"]
PYTEST = ["-m", "pytest", "-q", "-p", "no:cacheprovider", "-rfE"]
# Tests that compare shipped numbers with what the code now gives (a re-fit, the README's quoted
# numbers, the stored bands, values pinned from an earlier run): any change fails them, a bug or
# not, so a mutation that only they notice is NOT caught. They are deselected in a mutation's run
# (the baseline runs them: the shipped numbers must be the code's).
BOOKKEEPING = (
    "tests/test_validation.py::test_shipped_values_are_the_fit_output",
    "tests/test_validation.py::test_platform_values_are_their_micro_benchmark_fit",
    "tests/test_validation.py::test_910b_proxies_track_the_910c_fit",
    "tests/test_readme.py::test_every_quoted_number_is_what_the_tool_prints",
    "tests/test_readme.py::test_quoted_bands_and_held_out_errors_are_the_stored_ones",
    "tests/test_bands.py::test_stored_band_is_never_narrower_than_the_errors_it_names",
    "tests/test_bands.py::test_stored_band_covers_every_in_sample_error",
    "tests/test_physics.py::test_no_chunk_leaves_the_decode_iteration_as_it_was",
    "tests/test_measured_tables.py::test_docs_quote_the_fits",
    # the stack's host constants are re-fitted by `--stack NAME --write`, which a mutation's re-fit does not run
    "tests/test_serving_fit.py::test_the_shipped_stack_constants_are_a_fresh_fit",
    # the catalogue's own check: in a mutated copy the planted text is gone, so it fails for every mutation
    "tests/test_planted.py::test_the_mutation_catalogue_still_plants_every_bug",
)


@dataclass(frozen=True)
class Mutation:
    name: str
    file: str  # relative to the repository root
    kind: str
    old: str
    new: str
    what: str  # one line: the bug, in words


CATALOGUE = [
    # ---------------------------------------------------------------- bandwidths and tiers
    Mutation("tier-nominal-not-measured", "cmperf/cost/roofline.py", "bandwidth swap",
             "    return t.bandwidth_Bps / per\n",
             "    return (t.nominal_Bps or t.bandwidth_Bps) / per\n",
             "a tier's nominal bandwidth replaces its measured one (UB: 196 instead of 135 GB/s)"),
    Mutation("allgather-over-die-to-die", "cmperf/cost/ops.py", "bandwidth swap",
             'gather = Op("attn_allgather", "dma", launches=1, tier=tier, collective="all_gather",\n',
             'gather = Op("attn_allgather", "dma", launches=1, tier="die_to_die", collective="all_gather",\n',
             "prefill SP->TP all-gather timed on the on-package die-to-die tier (270 GB/s, 1 us) instead of UB"),
    Mutation("kv-transfer-over-ub", "cmperf/schedule/prefill.py", "wrong tier",
             'return number(bytes_) / tier_bandwidth_Bps(hw, tier) + ',
             'return number(bytes_) / tier_bandwidth_Bps(hw, "ub") + ',
             "prefill -> decode KV-cache transfer at UB bandwidth instead of RDMA (TTFT too short)"),
    # ---------------------------------------------------------------- the planner (docs/model.md §5.4, §9)
    Mutation("plan-no-pass-alignment", "cmperf/plan/planner.py", "term dropped",
             "        return rho * period_s / 2.0\n",
             "        return 0.0 * rho * period_s\n",
             "a request joins the running prefill pass instead of waiting for the next one (TTFT too short)"),
    Mutation("plan-servers-one-instance", "cmperf/plan/planner.py", "count dropped",
             "    servers_p = np.maximum(prompts, 1.0) * n_p\n",
             "    servers_p = np.maximum(prompts, 1.0)\n",
             "the prefill queue has one instance's prompt slots, whatever the number of instances"),
    Mutation("plan-capacity-per-die", "cmperf/plan/instances.py", "unit slip",
             "            cap.append(b * (float(req[at[0]]) / dies_per_npu) / (output_tokens * s))\n",
             "            cap.append(b * float(req[at[0]]) / (output_tokens * s))\n",
             "decode capacity counts the batch per NPU once per die (Little's law off by the dies per package)"),
    Mutation("cache-not-attended", "cmperf/cost/ops.py", "term dropped",
             "    return cached + (P - cached + 1) / 2\n",
             "    return (P - cached + 1) / 2\n",
             "computed tokens attend only the new part of their prompt, not the cached prefix"),
    Mutation("decode-kv-len-no-spread", "cmperf/plan/workload.py", "term dropped",
             "        return self.prompt.mean + self.output.second_moment / (2.0 * self.output.mean)\n",
             "        return self.prompt.mean + self.output.mean / 2.0\n",
             "the decode KV length ignores the spread of output lengths (long requests stay longer)"),
    Mutation("switch-one-chip", "cmperf/plan/supernode.py", "constant slip",
             "CHIPS_PER_LOGICAL_SWITCH = 2",
             "CHIPS_PER_LOGICAL_SWITCH = 1",
             "a logical UB switch counted as one physical chip (Table 11)"),
    Mutation("afd-rows-one-attention-die", "cmperf/schedule/afd.py", "count dropped",
             "        pl = placement(m, A * T / E, E,",
             "        pl = placement(m, T / E, E,",
             "an expert die receives the tokens of one attention die instead of all A"),
    # ---------------------------------------------------------------- factors of 2
    Mutation("expert-flops-no-2x", "cmperf/cost/ops.py", "factor 2 dropped",
             'experts = Op("experts", "cube", flops=2 * rows * e_w,',
             'experts = Op("experts", "cube", flops=rows * e_w,',
             "grouped-GEMM expert FLOPs counted as one per multiply-add instead of two"),
    Mutation("mtp-eh-proj-flops-no-2x", "cmperf/cost/ops.py", "factor 2 dropped",
             'return Op("mtp_eh_proj", "cube", flops=2 * T * w,',
             'return Op("mtp_eh_proj", "cube", flops=T * w,',
             "MTP entry projection (eh_proj, 2h -> h) FLOPs halved"),
    Mutation("sync-round-one-way", "cmperf/cost/roofline.py", "factor 2 dropped",
             "return 2.0 * hw.system.tiers[tier].latency_s",
             "return hw.system.tiers[tier].latency_s",
             "a barrier round costs one one-way latency instead of a round trip (2 x 2.1 us)"),
    # ---------------------------------------------------------------- max <-> sum
    Mutation("roofline-sum-not-max", "cmperf/cost/roofline.py", "max -> sum",
             "        out = np.maximum(np.maximum(self._matmul(memory), self.vector_s), self.network_s)\n",
             "        out = self.compute_s + self.vector_s + memory + self.network_s\n",
             "a fused kernel's engines run one after another (sum of roofline terms) instead of pipelined (max)"),
    Mutation("attention-unchained", "cmperf/cost/roofline.py", "sum -> max",
             "np.maximum(np.maximum(self.compute_s[rows] + self.vector_s[rows], memory[rows]),",
             "np.maximum(np.maximum(np.maximum(self.compute_s[rows], self.vector_s[rows]), memory[rows]),",
             "attention's cube and softmax phases overlap (max) although they wait on each other (sum)"),
    Mutation("pipeline-pools-summed", "cmperf/schedule/pipeline.py", "max -> sum",
             "floor = n * maximum(*broadcast(*pools, zero))",
             "floor = n * sum(broadcast(*pools, zero))",
             "pipeline pool floor adds the shared pools (cores, HBM, UB) instead of taking the busiest"),
    # ---------------------------------------------------------------- counts
    Mutation("moe-layers-plus-one", "cmperf/schedule/decode.py", "layer count",
             'sched.stack(layer_section("moe_layer", kind), pipe, count, rule=rule(n, overlap),',
             'sched.stack(layer_section("moe_layer", kind), pipe, count + 1, rule=rule(n, overlap),',
             "decode runs 59 MoE layers instead of 58 (one more per attention kind)"),
    Mutation("dense-layers-as-moe", "cmperf/schedule/decode.py", "structure",
             'for kind, count in arch.layer_counts(m, "moe").items():',
             'for kind, count in arch.layer_counts(m, "all").items():',
             "decode stacks 61 MoE layers: the 3 dense layers counted as MoE layers too"),
    Mutation("int8-two-bytes", "cmperf/specs/dtypes.py", "dtype bytes",
             '"int8": 1,',
             '"int8": 2,',
             "INT8 tensors (weights, activations, dispatch messages) counted as 2 bytes"),
    Mutation("mtp-layer-double-tokens", "cmperf/schedule/decode.py", "token count",
             'out["mtp"] = timing.add(moe_parts(hw, m, g, R_die, R_die, n, overlap=overlap))',
             'out["mtp"] = timing.add(moe_parts(hw, m, g, 2 * R_die, R_die, n, overlap=overlap))',
             "each MTP draft step pushes two tokens per request through the MTP block instead of one"),
    Mutation("mtp-acceptance-ignored", "cmperf/schedule/decode.py", "MTP series",
             "k, a * (1 - a ** k) / np.where(",
             "k, (1 - a ** k) / np.where(",
             "accepted drafts 1 + a + ... + a^(k-1) instead of a + ... + a^k (k = 1: every draft accepted)"),
    # ---------------------------------------------------------------- memory and placement
    Mutation("kv-memory-prompt-only", "cmperf/schedule/memory.py", "memory",
             'peak = np.maximum(np.asarray(g["prompt_len"], dtype=float) + g["output_len"], g["kv_len"]) + k',
             'peak = np.maximum(np.asarray(g["prompt_len"], dtype=float), g["kv_len"]) + k',
             "a request's peak KV sized for the prompt only, not prompt + output (the peak cache too small)"),
    Mutation("memory-vocab-whole", "cmperf/schedule/memory.py", "memory",
             "vocab_weight_bytes(m, *vocab_tp(g, phase))",
             "vocab_weight_bytes(m, 1.0, 1.0)",
             "memory holds the whole embedding and LM head on every die of a TP group, which the schedules split"),
    Mutation("expert-weights-once-time", "cmperf/cost/ops.py", "per instance",
             "hbm_bytes=pl.instances_per_die * e_w * b.expert_weight + swiglu_activation_bytes(m, rows, I, b.expert),",
             "hbm_bytes=e_w * b.expert_weight + swiglu_activation_bytes(m, rows, I, b.expert),",
             "experts read one instance's weights per microbatch whatever the instances per die (prefill: 10)"),
    Mutation("expert-weights-once-memory", "cmperf/cost/ops.py", "per instance",
             "weight_bytes=pl.instances_per_die * e_w * b.expert_weight)",
             "weight_bytes=e_w * b.expert_weight)",
             "HBM holds one expert instance per MoE layer whatever the placement (prefill: 10 per die)"),
    # ---------------------------------------------------------------- vector work, waits, cores
    Mutation("residual-add-one-read", "cmperf/cost/ops.py", "bytes",
             'return Op("residual_add", "vector", vector_ops=VEC_RESIDUAL * T * h, hbm_bytes=3 * x, in_B=x)',
             'return Op("residual_add", "vector", vector_ops=VEC_RESIDUAL * T * h, hbm_bytes=2 * x, in_B=x)',
             "the residual add reads one of its two operands (x + residual) and writes the sum: 2 tensors, not 3"),
    Mutation("expected-max-off-by-one", "cmperf/cost/collectives.py", "statistics",
             "density = n * _PHI * _CDF ** (n - 1)",
             "density = n * _PHI * _CDF ** n",
             "E[max of G normals] from a wrong density (Phi^G instead of Phi^(G-1)): barrier waits off"),
    Mutation("attention-share-not-applied", "cmperf/schedule/decode.py", "core split",
             'return [(attn_ops, share, share), (route',
             'return [(attn_ops, 1.0, 1.0), (route',
             "with two microbatches the attention stream runs on all cores, not its 16/24 and 32/48 share"),
    # ---------------------------------------------------------------- issue 17: bugs the suite let through
    Mutation("mla-cache-write-dropped", "cmperf/cost/ops.py", "term dropped",
             "hbm_bytes=T * width * (b.attn + b.kv), in_B=T * width * b.attn)",
             "hbm_bytes=T * width * b.attn, in_B=T * width * b.attn)",
             "the KV write reads the new token's entries but forgets to write them to the cache"),
    Mutation("embedding-hidden-dtype", "cmperf/cost/ops.py", "dtype bytes",
             'return Op("embedding", "vector", hbm_bytes=2 * T * m.hidden_size * b.emb)',
             'return Op("embedding", "vector", hbm_bytes=2 * T * m.hidden_size * b.hidden)',
             "the embedding is read in the hidden dtype instead of its own"),
    Mutation("dispatch-local-expert-remote", "cmperf/cost/ops.py", "fan-out",
             "    remote = (ep - 1) / ep\n",
             "    remote = np.ones_like(ep)\n",
             "dispatch sends a message for every routed expert, the ones on the token's own die included"),
    Mutation("tp-allreduce-one-pass", "cmperf/cost/ops.py", "factor 2 dropped",
             "net_bytes=2 * (tp - 1) / tp * data",
             "net_bytes=(tp - 1) / tp * data",
             "the TP ring all-reduce counts one pass (reduce-scatter) instead of two (+ all-gather)"),
    Mutation("gqa-kv-keys-only", "cmperf/cost/ops.py", "factor 2 dropped",
             "hbm_bytes=R * keys * 2 * Hkv * d * b.kv + 2 * T * H * d * b.attn)",
             "hbm_bytes=R * keys * Hkv * d * b.kv + 2 * T * H * d * b.attn)",
             "GQA decode attention reads the cached keys but not the values"),
    Mutation("chunk-prompts-per-chunk", "cmperf/schedule/decode.py", "count slip",
             '"prompts": T / P,',
             '"prompts": T / np.where(k > 0, k, 1.0),',
             "a co-located iteration finishes one prompt per chunk instead of chunk / prompt length"),
    Mutation("colocated-capacity-per-die", "cmperf/plan/planner.py", "unit slip",
             "    cap_d = batch * npus_i / (workload.output.mean * tpot)\n",
             "    cap_d = batch * dies / (workload.output.mean * tpot)\n",
             "a co-located instance's decode capacity counts the batch per NPU once per die"),
    Mutation("colocated-prompts-per-npu", "cmperf/plan/planner.py", "unit slip",
             "    per_die = chunk_tok / dpp / prompt.mean  # prompts per die per iteration\n",
             "    per_die = chunk_tok / prompt.mean  # prompts per die per iteration\n",
             "a co-located die takes the whole NPU's chunk of prompt tokens (prompt slots doubled)"),
    Mutation("ems-block-not-rounded", "cmperf/plan/workload.py", "rounding dropped",
             "return float(math.floor(self.prefix_hit * self.prompt.mean / self.block_tokens) * self.block_tokens)",
             "return float(self.prefix_hit * self.prompt.mean)",
             "a cached prefix counts its tokens, not whole KV blocks (EMS caches blocks)"),
    Mutation("pool-blocks-not-rounded", "cmperf/schedule/prefill.py", "rounding dropped",
             "blocks = seqs * np.ceil(L / hw.system.memory_pool.block_tokens)",
             "blocks = seqs * L / hw.system.memory_pool.block_tokens",
             "a prefix read from the pool pays a fraction of a block fetch instead of whole blocks"),
    Mutation("write-back-not-overlapped", "cmperf/cost/pool.py", "max -> sum",
             "np.maximum(compute_s, np.asarray(write_s, dtype=float))",
             "(compute_s + np.asarray(write_s, dtype=float))",
             "the write-back of new blocks runs after the pass instead of layer by layer under it"),
    Mutation("cache-tiers-summed", "cmperf/cost/pool.py", "max -> sum",
             "min(1.0, max(k_hbm, k_pool) / W)",
             "min(1.0, (k_hbm + k_pool) / W)",
             "the pool's capacity adds to the HBM tier's though it holds a superset of it (write-through)"),
    Mutation("bringup-no-die-fill", "cmperf/plan/bringup.py", "term dropped",
             "    return copy + np.asarray(weights_per_die_B, dtype=float) / rate\n",
             "    return copy + 0.0 * np.asarray(weights_per_die_B, dtype=float) / rate\n",
             "bring-up ends when the model's copy arrives, before the dies fill their HBM"),
    Mutation("hf-kv-heads-default-mqa", "cmperf/specs/hf_import.py", "default",
             'kv_heads = c.int("num_key_value_heads", heads)',
             'kv_heads = c.int("num_key_value_heads", 1)',
             "a config without num_key_value_heads imports as multi-query attention (transformers: MHA)"),
    Mutation("hf-tie-default-llama", "cmperf/specs/hf_import.py", "default",
             '"llama": False, "mistral": False,',
             '"llama": True, "mistral": False,',
             "a Llama config without tie_word_embeddings imports tied (transformers: untied)"),
    Mutation("prefill-head-every-token", "cmperf/schedule/prefill.py", "token count",
             "head_ops(m, prompts_per_die(hw, g) * head_tp, head_tp, tier)",
             "head_ops(m, T_die * head_tp, head_tp, tier)",
             "prefill runs the LM head on every prompt token, not the last of each prompt"),
    Mutation("prefill-no-dense-layers", "cmperf/schedule/prefill.py", "structure",
             'for part, moe in (("dense", False), ("moe", True)):',
             'for part, moe in (("dense", True), ("moe", True)):',
             "prefill runs DeepSeek-R1's 3 dense layers as MoE layers"),
    Mutation("decode-dispatch-wait-attention-only", "cmperf/schedule/decode.py", "barrier wait",
             "wait_after([attn, send], ep, hw)",
             "wait_after([attn], ep, hw)",
             "decode's dispatch barrier waits for the attention's spread only, not the gate's and the send's"),
    Mutation("prefill-dispatch-wait-tp-group", "cmperf/schedule/prefill.py", "barrier wait",
             'groups = [g["attn_tp"], g["attn_tp"], g["ep"] if moe else g["attn_tp"], g["ep"]]',
             'groups = [g["attn_tp"], g["attn_tp"], g["attn_tp"], g["ep"]]',
             "prefill's dispatch barrier waits for the attention TP group instead of the whole EP group"),
    Mutation("stream-share-rounding", "cmperf/cost/roofline.py", "rounding",
             "return np.floor(np.asarray(units, dtype=float) * np.asarray(share, dtype=float) + 1e-9)",
             "return np.floor(np.asarray(units, dtype=float) * np.asarray(share, dtype=float))",
             "a stream owning 1 - 0.666666666667 of 24 cube cores gets 7, not 8"),
    Mutation("unit-rate-not-kept", "cmperf/specs/loader.py", "what-if",
             "    keep_carried(kind, raw, base, overrides)\n",
             "    pass\n",
             "--set chip.die.matrix_units=1 keeps the die's peak: one cube core 24x as fast"),
    Mutation("cache-no-checksum", "cmperf/specs/cache.py", "cache",
             'if not sep or head.decode("ascii", "replace") != _hash(_key(kind, text), b"|", body):',
             "if not sep:",
             "a spec-cache entry is trusted without its checksum (an edited entry changes answers)"),
    # ---- issue 33 (round A)
    # planted bugs that passed the whole suite; tests/test_planted_round4.py catches each
    Mutation("deltanet-state-per-token", "cmperf/cost/ops.py", "count slip",
             "+ 2 * rows / DELTANET_CHUNK * recurrent",
             "+ 2 * rows * recurrent",
             "the Gated DeltaNet scan writes and reads back its recurrent state per token, not per chunk of 64"),
    Mutation("predict-bare-function", "cmperf/__init__.py", "API",
             '_CALLABLE_MODULES = ("predict", "search", "plan", "simulate")',
             '_CALLABLE_MODULES = ("search", "plan", "simulate")',
             "cmperf.predict bound to the bare function: cmperf.predict.load_specs etc. gone (docs/api.md)"),
    Mutation("simulate-npus-in-dies", "cmperf/simulate/deployment.py", "unit slip",
             "        return (dec + pre) / dpp\n",
             "        return dec + pre\n",
             "a simulated deployment's NPUs counted in dies (throughput per NPU halved on 2-die NPUs)"),
    Mutation("plan-given-budget-in-dies", "cmperf/plan/planner.py", "unit slip",
             "    return max(math.ceil(dies / dpp), 1)\n",
             "    return max(math.ceil(dies), 1)\n",
             "the plan of a given --prefill/--decode deployment budgets its dies as NPUs (6x32 + 1x320: 512, two systems)"),
    Mutation("kv-transfers-unshared-link", "cmperf/simulate/engine.py", "max -> one",
             "            start = max(now, p.link_free)\n",
             "            start = now\n",
             "a pass's prompts send their KV at once, not one after another over the instance's link"),
    Mutation("itl-weights-requests-only", "cmperf/simulate/metrics.py", "weights",
             "    w = (n * k / m)[rows]\n",
             "    w = n[rows]\n",
             "an ITL sample weighs the interval's requests, not requests x the steps it stands for"),
    Mutation("dp-ranks-tp-ignored-kv", "cmperf/simulate/predictor.py", "count slip",
             '    return int(instance["dies"]) // int(instance.get("tp", 1) or 1)\n',
             '    return int(instance["dies"])\n',
             "a decode instance's KV per DP rank counts every die a rank (TP ignored): 1/tp of its KV room"),
    Mutation("fanout-local-expert-remote", "cmperf/cost/ops.py", "fan-out",
             "    fanout = mo.experts_per_token * pl.remote_routed_fraction + shared_msgs\n",
             "    fanout = mo.experts_per_token + shared_msgs\n",
             "dispatch and combine buffer a message for every routed expert, the die-local ones included"),
    Mutation("dp-sync-r-hops", "cmperf/cost/host.py", "off by one",
             "np.maximum(np.asarray(ranks, dtype=float) - 1.0, 0.0)",
             "np.maximum(np.asarray(ranks, dtype=float), 0.0)",
             "the scheduler's DP all-gather takes R hops instead of R - 1 (one rank still pays one)"),
    Mutation("spec-metadata-without-drafts", "cmperf/cost/host.py", "condition",
             'spec = np.where(np.asarray(drafts, dtype=float) > 0, stack_value(stack, "spec_step_s"), 0.0)',
             'spec = np.where(np.asarray(drafts, dtype=float) >= 0, stack_value(stack, "spec_step_s"), 0.0)',
             "a decode step with MTP off (0 drafts) pays the speculative step's host metadata"),
]

# ---- issue 33 (round B): bugs that escaped the whole suite; tests/test_planted_round4b.py catches each
CATALOGUE += [
    Mutation("fusion-swallows-network", "cmperf/cost/fusion.py", "fusion",
             "            if tuple(name for name, _ in run) == g and all(local for _, local in run):\n",
             "            if tuple(name for name, _ in run) == g:\n",
             "a stack's fusion group takes in a collective on a network tier (its bytes and launch folded away)"),
    Mutation("sampling-one-token", "cmperf/cost/ops.py", "count dropped",
             "vector_ops=VEC_SAMPLING * T * V, hbm_bytes=T * (V * b + 4)",
             "vector_ops=VEC_SAMPLING * V, hbm_bytes=T * (V * b + 4)",
             "sampling's vector work is one token's whatever the tokens sampled"),
    Mutation("collective-one-floor", "cmperf/cost/roofline.py", "count dropped",
             "np.maximum(lat, launches * floor), lat)",
             "np.maximum(lat, floor), lat)",
             "an op of n collective calls pays one per-call floor instead of n"),
    Mutation("replay-any-model", "cmperf/schedule/replay.py", "cache",
             "    if entry is None or entry.m is not m:\n",
             "    if entry is None:\n",
             "a one-row replay traced under one model answers for another on the same hardware view"),
    Mutation("replay-unguarded-branch", "cmperf/schedule/replay.py", "cache",
             '        _rec().guard(self.name if out else f"not {self.name}")\n',
             "        pass\n",
             "a branch taken on a traced value is not guarded: the replay answers the other side as the traced one"),
    Mutation("rank-one-over-cap", "cmperf/simulate/engine.py", "off by one",
             "        return (n < self.cap_n) & ((used + need",
             "        return (n <= self.cap_n) & ((used + need",
             "a decode rank admits one request over the stack's max_running_per_rank"),
    Mutation("export-gpu-die-ranks", "cmperf/export/__init__.py", "unit slip",
             'return dies if self.vendor == "huawei" else max(1, dies // self.dies_per_package)',
             "return dies",
             "an exported launcher counts a 2-die GPU as 2 ranks (a GPU is one rank)"),
    Mutation("coloc-pool-every-rank", "cmperf/simulate/engine.py", "count slip",
             "            share = min(new, self.R) * self.pred.dies_per_rank\n",
             "            share = self.R * self.pred.dies_per_rank\n",
             "a co-located prompt's pool read is spread over every rank's dies, not its own rank's"),
    Mutation("study-rows-completion-order", "cmperf/study/__init__.py", "order",
             "rows = in_order(qs, ((futures[f], f.result()) for f in as_completed(futures)), tick)",
             "rows = in_order(qs, enumerate(f.result() for f in as_completed(futures)), tick)",
             "a local study's rows placed in the order the pool answered them (tests/test_study_edges.py)"),
    Mutation("study-dask-repeat-one-row", "cmperf/study/__init__.py", "count dropped",
             "            where.setdefault(f.key, []).append(i)\n",
             "            where[f.key] = [i]\n",
             "a question repeated in a Dask study answers one of its rows, the other left empty (tests/test_study_edges.py)"),
    Mutation("measured-attention-rows-of-the-group", "cmperf/schedule/decode.py", "factor",
             'kind), "decode", T)\n',
             'kind), "decode", T * tp)\n',
             "a decode core's per-row cost counted on the TP group's tokens, not a die's full-head share "
             "(tests/test_measured_attention.py)"),
    Mutation("measured-attention-busy-times-efficiency", "cmperf/cost/roofline.py", "inverted",
             "            a / e for a in (compute, pool_compute, pool_vector, memory, activation_memory))",
             "            a * e for a in (compute, pool_compute, pool_vector, memory, activation_memory))",
             "a measured kernel's busy time multiplied by its efficiency instead of divided (tests/test_measured_attention.py)"),
    Mutation("measured-attention-launch-kept", "cmperf/cost/roofline.py", "term dropped",
             '        latency = np.where(measured, x["launches"] * np.where(measured, x["call_s"], 0.0), latency)\n',
             '        latency = latency\n',
             "a measured kernel's fixed time per call never charged (the chip's launch kept) (tests/test_measured_attention.py)"),
    # ---- issue 31: co-located admission as SGLang runs it
    Mutation("colocated-chunk-spread-evenly", "cmperf/simulate/predictor.py", "term dropped",
             "    return max(tokens / npus, group_tokens * dies_per_npu / group_dies)\n",
             "    return tokens / npus\n",
             "a pass timed at its tokens spread over the NPUs, never at its most-loaded rank's (tests/test_simulate_story.py)"),
    Mutation("prefill-delayer-never-holds", "cmperf/simulate/engine.py", "condition",
             "        if self.s - self.delay_from < self.delay_passes - 1:\n            return True\n",
             "        if self.s - self.delay_from < 0:\n            return True\n",
             "SGLang's prefill delayer lets a lone rank's prompt go at once (tests/test_simulate_story.py)"),
    Mutation("extending-rank-still-steps", "cmperf/simulate/engine.py", "term dropped",
             "            if self.extend_pauses:\n",
             "            if False:\n",
             "a rank that ran an extend forward still steps its decode batch in that pass (tests/test_simulate_story.py)"),
    Mutation("extend-pays-no-pass-host", "cmperf/cost/host.py", "inverted",
             "    if stack is None or mixes_chunks(stack):\n",
             "    if stack is None or not mixes_chunks(stack):\n",
             "an extend iteration of a stack that does not mix chunks pays only the decode step's host time (tests/test_host.py)"),
    Mutation("hit-skips-pass-host", "cmperf/schedule/prefill.py", "term dropped",
             "    return sched.with_host(prefill_host(hw.stack, sched.launches(), moe, n, T, per_rank)), sched\n",
             "    cached = bool(np.any(np.asarray(g[\"cached_len\"]) > 0))\n"
             "    return sched.with_host(prefill_host(None if cached else hw.stack, sched.launches(), moe, n, T, per_rank)), sched\n",
             "a pass with a cached prefix pays none of the stack's host work (tests/test_prefix_cache.py: the gain's bound)"),
    Mutation("shared-budget-ignores-decode", "cmperf/simulate/engine.py", "term dropped",
             "        room = np.maximum(self.per_rank_tokens - self.decode_budget_tokens * self.n_r, 0.0)\n",
             "        room = np.full(self.R, self.per_rank_tokens)\n",
             "vLLM's token budget all the prompts', the running requests' tokens not taken first (tests/test_simulate_story.py)"),
]



# ---------------------------------------------------------------------------------------------
@dataclass
class Result:
    name: str
    file: str
    kind: str
    result: str  # caught | survived | broken | timeout | baseline-ok | baseline-failed
    first_failure: str = ""
    reason: str = ""
    elapsed_s: float = 0.0
    fitted: dict = field(default_factory=dict)
    failures: list = field(default_factory=list)
    workdir: str = ""


class CatalogueError(Exception):
    pass


def copy_repo(src: Path, dst: Path) -> None:
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns(*EXCLUDE), symlinks=True)


def apply(mut: Mutation, root: Path) -> None:
    """Replace ``old`` by ``new`` in ``root/file``; ``old`` must occur exactly once."""
    path = root / mut.file
    if not path.is_file():
        raise CatalogueError(f"{mut.name}: {mut.file} does not exist")
    text = path.read_text()
    n = text.count(mut.old)
    if n != 1:
        raise CatalogueError(f"{mut.name}: the text to replace occurs {n} times in {mut.file} (must be exactly once):\n"
                             f"    {mut.old!r}")
    if mut.old == mut.new:
        raise CatalogueError(f"{mut.name}: old and new text are the same")
    path.write_text(text.replace(mut.old, mut.new, 1))


def check_catalogue(muts: list[Mutation], root: Path) -> None:
    problems = []
    names = [m.name for m in CATALOGUE]
    dupes = {n for n in names if names.count(n) > 1}
    if dupes:
        problems.append(f"duplicate mutation names: {', '.join(sorted(dupes))}")
    for mut in muts:
        path = root / mut.file
        if not path.is_file():
            problems.append(f"{mut.name}: {mut.file} does not exist")
            continue
        n = path.read_text().count(mut.old)
        if n != 1:
            problems.append(f"{mut.name}: the text to replace occurs {n} times in {mut.file} (must be exactly once): {mut.old!r}")
        if mut.old == mut.new:
            problems.append(f"{mut.name}: old and new text are the same")
    if problems:
        raise CatalogueError("\n".join(problems))


class Timeout(Exception):
    pass


LIVE: set = set()  # process groups started by this script and still running (killed on exit)


def run(cmd: list[str], cwd: Path, env: dict, deadline: float, log) -> subprocess.CompletedProcess:
    """Run ``cmd`` in its own process group; on the deadline kill that group (our child and
    whatever it started) and raise Timeout."""
    log.write(f"\n$ {' '.join(cmd)}   (cwd {cwd})\n")
    log.flush()
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    LIVE.add(proc)
    try:
        out, _ = proc.communicate(timeout=max(deadline - time.monotonic(), 1.0))
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        log.write(out or "")
        raise Timeout(f"{' '.join(cmd[:3])} exceeded the time limit")
    finally:
        LIVE.discard(proc)
    log.write(out)
    log.flush()
    return subprocess.CompletedProcess(cmd, proc.returncode, out, "")


def env_for(copy: Path) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(copy)  # the copy's cmperf, not the editable install
    env.pop("PYTHONHOME", None)
    env["MPLBACKEND"] = "Agg"
    env["COLUMNS"] = "250"  # pytest cuts its short summary to the terminal width
    return env


FAILED_RE = re.compile(r"^(FAILED|ERROR) (\S+)(?: - (.*))?$")
FIT_RE = re.compile(r"^\s+([a-z_]+(?:\.[A-Za-z0-9_]+)+)\s+=\s+(\S+)\s+#")


def failures(pytest_out: str) -> list[tuple[str, str]]:
    """(test id, message) of each FAILED / ERROR line of pytest's short summary."""
    out = []
    for line in pytest_out.splitlines():
        mt = FAILED_RE.match(line.strip())
        if mt:
            out.append((mt.group(2), (mt.group(3) or mt.group(1)).strip()))
    return out


def fitted_values(fit_out: str) -> dict[str, str]:
    return {mt.group(1): mt.group(2) for line in fit_out.splitlines() if (mt := FIT_RE.match(line))}


def trial(mut: Mutation | None, snapshot: Path, args) -> Result:
    """Copy, mutate, fit, test. ``mut`` None is the baseline (all tests, not stopping at the first failure)."""
    name = mut.name if mut else "baseline"
    res = Result(name, mut.file if mut else "-", mut.kind if mut else "-", "")
    t0 = time.monotonic()
    deadline = t0 + args.timeout
    tmp = Path(tempfile.mkdtemp(prefix=f"cmperf-mutation-{name}-"))
    copy = tmp / "repo"
    res.workdir = str(copy)
    try:
        copy_repo(snapshot, copy)
        if mut:
            apply(mut, copy)
        env = env_for(copy)
        with open(tmp / "mutation.log", "w") as log:
            log.write(f"mutation: {name}\n")
            if mut:
                log.write(f"file: {mut.file}\nold: {mut.old!r}\nnew: {mut.new!r}\n")
            try:
                # the copy's package must be the one imported, not the editable install
                probe = run([sys.executable, "-c", "import cmperf; print(cmperf.__file__)"], copy, env, deadline, log)
                imported = Path(probe.stdout.strip().splitlines()[-1]).resolve() if probe.stdout.strip() else None
                if probe.returncode != 0 or imported is None or copy.resolve() not in imported.parents:
                    raise RuntimeError(f"the copy's cmperf is not the one imported: {probe.stdout.strip()!r}")
                fit = run([sys.executable, *FIT, *[f for f in args.fit.split(",") if f]], copy, env, deadline, log)
                res.fitted = fitted_values(fit.stdout)
                if fit.returncode != 0:
                    tail = [ln for ln in fit.stdout.strip().splitlines() if ln.strip()]
                    res.result, res.reason = "broken", (tail[-1] if tail else f"exit {fit.returncode}")[:160]
                    return res
                first = [f for f in args.first.split(",") if f] if mut else []
                order = first + [str(p.relative_to(copy)) for p in sorted((copy / "tests").glob("test_*.py"))
                                 if str(p.relative_to(copy)) not in first] if first else []
                cmd = [sys.executable, *PYTEST, *(["-x", *(f"--deselect={t}" for t in BOOKKEEPING)] if mut else []), *order]
                if args.hypothesis_seed != "random":
                    cmd.append(f"--hypothesis-seed={args.hypothesis_seed}")
                tests = run(cmd, copy, env, deadline, log)
            except Timeout as e:
                res.result, res.reason = "timeout", str(e)
                return res
        res.failures = failures(tests.stdout)
        if res.failures:
            res.first_failure, res.reason = res.failures[0][0], res.failures[0][1][:160]
        if tests.returncode == 0:
            res.result = "baseline-ok" if mut is None else "survived"
        else:
            res.result = "baseline-failed" if mut is None else "caught"
            if not res.failures:
                tail = [ln for ln in tests.stdout.strip().splitlines() if ln.strip()]
                res.reason = f"pytest exit {tests.returncode}: " + (tail[-1] if tail else "")[:140]
        return res
    finally:
        res.elapsed_s = time.monotonic() - t0
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            res.workdir = f"{copy} (log: {tmp / 'mutation.log'})"


# ---------------------------------------------------------------------------------------------
def table(rows: list[list[str]], header: list[str]) -> str:
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    fmt = "  ".join(f"{{:{w}}}" for w in widths)
    lines = [fmt.format(*header), fmt.format(*["-" * w for w in widths])]
    lines += [fmt.format(*map(str, r)) for r in rows]
    return "\n".join(line.rstrip() for line in lines)


def report(results: list[Result], baseline: Result | None) -> str:
    label = {"broken": "broken (fit crashed; counts as caught)", "timeout": "timeout (counts as caught)"}
    rows = [[r.name, r.file, r.kind, label.get(r.result, r.result), r.first_failure or "-", f"{r.elapsed_s:.0f} s"]
            for r in results]
    out = [table(rows, ["mutation", "file", "kind", "result", "first failing test", "elapsed"])]
    reasons = [f"  {r.name}: {r.reason}" for r in results if r.reason]
    if reasons:
        out += ["", "why (first failure, or the fit's last line):", *reasons]
    params = sorted({p for r in results + ([baseline] if baseline else []) for p in r.fitted})
    if params and results:
        short = {p: p.split(".")[-1] for p in params}
        prow = [["baseline", *[baseline.fitted.get(p, "-") for p in params]]] if baseline else []
        prow += [[r.name, *[r.fitted.get(p, "-") for p in params]] for r in results]
        out += ["", "fitted values after each mutation's re-fit (what the fit did to absorb it):",
                table(prow, ["mutation", *[short[p] for p in params]])]
    n = {k: sum(r.result == k for r in results) for k in ("caught", "survived", "broken", "timeout")}
    out += ["", f"{len(results)} mutations: {n['caught']} caught, {n['broken']} broken, {n['timeout']} timeout, "
                f"{n['survived']} survived"]
    survivors = [r.name for r in results if r.result == "survived"]
    if survivors:
        out.append("SURVIVED (no test notices): " + ", ".join(survivors))
    return "\n".join(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--list", action="store_true", help="list the mutations and exit")
    ap.add_argument("--only", metavar="NAME[,NAME]", help="run only these mutations")
    ap.add_argument("--keep", action="store_true", help="keep the temporary copies and their logs")
    ap.add_argument("--jobs", type=int, default=1, help="mutations run at a time (default 1: the machine has 2 cores)")
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds per mutation, fit + tests (default 900)")
    ap.add_argument("--baseline", action="store_true", help="run only the baseline (unmutated copy: fit + tests)")
    ap.add_argument("--skip-baseline", action="store_true", help="do not run the baseline first")
    ap.add_argument("--hypothesis-seed", default="0", help="seed of the property tests' draws, or 'random' (default 0)")
    ap.add_argument("--fit", default="", metavar="REF[,REF]",
                    help="reference files the re-fit runs (default: every built-in one); e.g. "
                         "cmperf/reference/cloudmatrix384-paper.yaml for bugs only its fit could absorb")
    ap.add_argument("--first", default="tests/test_planted.py,tests/test_physics.py,tests/test_monotonicity.py,tests/test_spec_cache.py",
                    help="test files a mutation's run starts with (the whole suite follows; a caught mutation stops "
                         "at its first failure, so the files most likely to catch one save time); '' for the plain order")
    args = ap.parse_args(argv)

    if args.jobs < 1:
        ap.error("--jobs must be at least 1")
    muts = CATALOGUE
    if args.only:
        wanted = [w.strip() for w in args.only.split(",") if w.strip()]
        unknown = [w for w in wanted if w not in {m.name for m in CATALOGUE}]
        if unknown:
            ap.error(f"unknown mutation(s): {', '.join(unknown)} (see --list)")
        muts = [m for m in CATALOGUE if m.name in wanted]
    if args.list:
        print(table([[m.name, m.file, m.kind, m.what] for m in muts], ["mutation", "file", "kind", "bug"]))
        return 0

    snapshot_dir = Path(tempfile.mkdtemp(prefix="cmperf-mutation-snapshot-"))
    snapshot = snapshot_dir / "repo"
    try:
        copy_repo(REPO, snapshot)  # one snapshot: every trial sees the same code and tests
        try:
            check_catalogue([] if args.baseline else muts, snapshot)
        except CatalogueError as e:
            print(f"mutation.py: the catalogue does not match the code; fix these entries:\n{e}", file=sys.stderr)
            return 2

        baseline = None
        if not args.skip_baseline:
            print(f"baseline: fit + full test suite on an unmutated copy of {REPO} ...", flush=True)
            baseline = trial(None, snapshot, args)
            print(f"baseline: {baseline.result} in {baseline.elapsed_s:.0f} s"
                  + (f"  [{baseline.workdir}]" if args.keep else ""), flush=True)
            if baseline.result != "baseline-ok":
                print("\nThe unmutated suite does not pass; mutation results would mean nothing. Failing:", file=sys.stderr)
                for test_id, msg in baseline.failures:
                    print(f"  {test_id}  -- {msg[:200]}", file=sys.stderr)
                if not baseline.failures:
                    print(f"  ({baseline.result}: {baseline.reason})", file=sys.stderr)
                return 2
            if args.baseline:
                return 0

        print(f"{len(muts)} mutations, {args.jobs} at a time, timeout {args.timeout:.0f} s each", flush=True)
        t_start = time.monotonic()
        results: dict[str, Result] = {}

        def one(mut):
            r = trial(mut, snapshot, args)
            print(f"  {mut.name:32s} {r.result:9s} {r.elapsed_s:5.0f} s  {r.first_failure or r.reason}"
                  + (f"  [{r.workdir}]" if args.keep else ""), flush=True)
            return r

        pool = ThreadPoolExecutor(max_workers=args.jobs)
        try:
            for mut, r in zip(muts, pool.map(one, muts)):
                results[mut.name] = r
        finally:
            pool.shutdown(wait=False, cancel_futures=True)  # on Ctrl-C: start nothing new
        ordered = [results[m.name] for m in muts]
        print("\n" + report(ordered, baseline))
        print(f"total {time.monotonic() - t_start:.0f} s for the mutations"
              + (f" (+ {baseline.elapsed_s:.0f} s baseline)" if baseline else ""))
        return 1 if any(r.result == "survived" for r in ordered) else 0
    finally:
        for proc in list(LIVE):  # interrupted: stop the fits / test runs this script started
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        shutil.rmtree(snapshot_dir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
