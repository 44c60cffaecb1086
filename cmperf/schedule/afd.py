"""Attention-FFN disaggregated decode (AFD): attention and experts on separate dies
(docs/model.md §5.4; MegaScale-Infer's ping-pong pipeline).

``A`` attention dies run data-parallel attention (TP 1) on their own requests, the three
dense layers, the gate (a token must know its experts before it is sent), embedding, LM
head and the MTP module's projections; ``E`` expert dies hold the routed, redundant and
shared-expert instances (EP = E) and nothing else. Per MoE layer and microbatch of ``T``
tokens per attention die, four stages on four lanes:

    attention  MLAProlog + FusedAttention + O-proj + gate        attention die, all cores
    a2e        each attention die sends its T (k + shared) messages; an expert die
               receives A T k / E x imbalance routed rows (+ its shared-copy rows)   UB
    experts    grouped GEMM over the rows of ALL attention dies     expert die, all cores
    e2a        the expert die sends its rows back; the attention die receives T (k + shared)
               results and sums them                                UB

A transfer has two sides with different work (the attention die issues the a2e messages
and receives the e2a results; the expert die receives the a2e rows and issues the e2a
messages). Each side is timed by the same ``moe_ops`` dispatch/combine builders as EP
decode (cmperf/cost/ops.py), fed a placement that says which side this die is: on the
attention side no rows arrive in a2e, on the expert side no tokens leave. Both sides run
at once and the transfer ends when the slower is done:

    a2e = max(t_send(attention die), t_receive(expert die)),  e2a likewise.

Barrier waits (docs/model.md §4.3): the experts wait for the slowest of the ``A`` attention
dies (load: attention + gate + send), the next layer's attention for the slowest of the
``E`` expert dies (load: experts + send).

With ``n`` microbatches the four lanes run microbatch 0, 1, ... in turn
(cmperf/schedule/pipeline.py, the max-plus engine decode uses): attention of microbatch
i + 1 overlaps the transfers and experts of microbatch i. Its steady state is

    layer = max(n A, n a2e, n X, n e2a, A + a2e + X + e2a + waits, pools of each die)

(A, X: one microbatch's attention and expert stage on ``T / n`` tokens). Each die's pools
(HBM, vector cores, port + engine) bound the layer from below with that die's own work
only: the engine is timed once as seen from each pool (the other pool's stages are time
that holds none of this die's resources) and the longer of the two views is the layer.
More microbatches hide the transfers and waits but re-read every attention and expert
weight once per microbatch; ``microbatches = 0`` takes the fastest of 1..4 per row.

Throughput counts every NPU of the instance: output tokens/s / ((A + E) / dies per NPU).
"""

from __future__ import annotations

from dataclasses import fields, replace

import numpy as np

from ..cost import arch
from ..cost.collectives import route_of
from ..cost.host import decode_host
from ..cost.ops import (Bytes, Placement, activation_op, attention_decode_kernels, dense_ffn_op, embedding_ops, head_ops,
                        moe_ops, mtp_proj_op, placement, residual_norm_ops, router_topk_op)
from ..cost.roofline import OpTimes, sum_ops
from .common import LayerMix, Schedule, layer_section, timed, tokens_per_s_per_tflops, wait_after
from .decode import draft_tokens, emitted_tokens
from .pipeline import Pipeline, Stage, pipeline

MICROBATCHES = (1, 2, 3, 4)  # the pipelines evaluated; 0 (auto) takes the fastest
LANES = ("attention dies", "a2e (UB)", "expert dies", "e2a (UB)")
RULE = ("max(n x each lane, one microbatch's trip attention + a2e + experts + e2a + waits, each die's pools): "
        "n microbatches across the attention and expert pools")


def slower(a: OpTimes, b: OpTimes, name: str) -> OpTimes:
    """Per row, the side of a transfer (a table of one op each) that finishes last (the
    transfer ends when both have)."""
    pick = np.asarray(a.time_s >= b.time_s)

    def field(f):  # a time or an amount, each row its side's
        return np.where(pick, getattr(a, f), getattr(b, f))

    kept = ("names", "engines", "chained", "tiled", "overlap_p", "implementations")
    return replace(a, **{f.name: field(f.name) for f in fields(OpTimes) if f.name not in kept}, names=(name,))


def elsewhere(time_s) -> OpTimes:
    """A stage as a die of the other pool sees it: time on the lane that holds none of this
    die's cores, HBM or port (all of it latency)."""
    return OpTimes.idle("other pool", "remote", time_s)


class Layer:
    """One MoE layer for one of ``n`` microbatches of an attention die's ``tokens`` tokens
    of ``requests`` requests: the ops of each side and the pipeline of the two pools."""

    def __init__(self, hw, m, g, tokens, requests, n: int, kind: str = "full"):
        T, R = tokens / n, requests / n
        A, E = np.asarray(g["attention_dies"], dtype=float), np.asarray(g["expert_dies"], dtype=float)
        route, span = route_of(hw, "decode"), A + E  # a transfer's barrier spans both pools
        zero = 0.0 * T * span
        # attention side: its T tokens leave (every expert is remote), no rows arrive
        sender = Placement(instances_per_die=zero, rows=zero, padded_rows=zero, shared_remote=zero == 0,
                           remote_routed_fraction=1.0 + zero, received_rows=zero)
        gate, send, _, gather = moe_ops(m, T, span, sender, route)
        # expert side: an expert die serves the tokens of all A attention dies as if each of
        # the E dies had A T / E of them; every row it computes arrived over the network
        pl = placement(m, A * T / E, E, g["redundant_experts"], g["shared_copies"], g["expert_imbalance"],
                       hw.chip.efficiency.matmul_tile_rows)
        self.placement = replace(pl, received_rows=pl.rows, remote_routed_fraction=1.0 + zero, shared_remote=zero == 0)
        _, receive, experts, scatter = moe_ops(m, zero, span, self.placement, route)
        # the attention die's block: residual add + RMSNorm, attention, residual add + RMSNorm,
        # the gate and top-k (docs/model.md §2.9); the expert die's: experts and SwiGLU
        self.attention = timed(residual_norm_ops(m, T) + attention_decode_kernels(m, T, R, g["kv_len"], kind=kind)
                               + residual_norm_ops(m, T) + [gate, router_topk_op(m, T)], hw)
        send_t, gather_t = timed([send, gather], hw).split()
        receive_t, scatter_t = timed([receive, scatter], hw).split()
        self.expert_ops = timed([experts, activation_op(m, self.placement.rows, m.moe.expert_intermediate_size,
                                                        Bytes.of(m).expert)], hw)
        self.expert_stage_s = self.expert_ops.total_time_s
        self.a2e = slower(send_t, receive_t, "a2e")
        self.e2a = slower(gather_t, scatter_t, "e2a")
        wait_a2e = wait_after([self.attention, send_t], A, hw)  # experts wait for the slowest attention die
        wait_e2a = wait_after([self.expert_ops, scatter_t], E, hw)  # attention waits for the slowest expert die
        stages = [Stage("attention", LANES[0], [self.attention]), Stage("a2e", LANES[1], [self.a2e], wait_a2e),
                  Stage("experts", LANES[2], [self.expert_ops]), Stage("e2a", LANES[3], [self.e2a], wait_e2a)]
        own = {"attention": ([self.attention], []), "a2e": ([send_t], [receive_t]), "experts": ([], [self.expert_ops]),
               "e2a": ([gather_t], [scatter_t])}
        views = [pipeline([replace(s, ops=self._seen(own[s.name][side], s.time_s)) for s in stages], n) for side in (0, 1)]
        self.pipe = Pipeline(n=n, stages=stages, period_s=np.maximum(*(v.period_s for v in views)),
                             ends_s=[np.maximum(x, y) for x, y in zip(*(v.ends_s for v in views))],
                             pool_floor_s=np.maximum(*(v.pool_floor_s for v in views)))

    @staticmethod
    def _seen(ops: list[OpTimes], stage_s) -> list[OpTimes]:
        """One die's view of a stage: its own ops, the rest of the stage's time elsewhere."""
        return ops + [elsewhere(stage_s - sum_ops(ops))]


def iteration(hw, m, g, n: int) -> tuple[np.ndarray, Schedule, LayerMix]:
    """Iteration time with ``n`` microbatches across the pools; (time, schedule, the main
    stack's layers: one :class:`Layer` per attention kind). Dense layers, embedding, LM head
    and the MTP projections run on the attention dies as one microbatch (the expert dies
    wait)."""
    sched = Schedule()
    R_die = g["batch"] / hw.chip.dies_per_package
    k = draft_tokens(g)
    T_die = R_die * (1 + k)
    for kind, count in arch.layer_counts(m, "dense").items():
        ops = (residual_norm_ops(m, T_die) + attention_decode_kernels(m, T_die, R_die, g["kv_len"], kind=kind)
               + residual_norm_ops(m, T_die) + [dense_ffn_op(m, T_die),
                                                activation_op(m, T_die, m.dense_ffn.intermediate_size)])
        sched.serial(layer_section("dense_layer", kind), timed(ops, hw), count, "sum of all ops on the attention die")
    counts, parts = arch.layer_counts(m, "moe"), []
    for kind, count in counts.items():
        layer = Layer(hw, m, g, T_die, R_die, n, kind)
        sched.stack(layer_section("moe_layer", kind), layer.pipe, count, rule=RULE, share=count / sum(counts.values()))
        parts.append((layer, count))
    main = LayerMix(parts)
    if m.mtp.modules:
        sched.serial("mtp", timed([mtp_proj_op(m, R_die)] + head_ops(m, R_die, 1.0, None, "mtp_head"), hw), k,
                     "eh_proj + head on the attention die, once per draft step")
        sched.stack("mtp_layer", Layer(hw, m, g, R_die, R_die, n).pipe, 1, repeats=k, rule=RULE)
    ends = embedding_ops(m, T_die, 1.0, None) + head_ops(m, T_die, 1.0, None)
    sched.serial("per_iteration", timed(ends, hw), 1,
                 "embedding + final norm + LM head + sampling over all tokens (attention TP 1: nothing gathered) "
                 "+ iteration overhead", hw.chip.latency.iteration_overhead_s)
    return sched.with_host(decode_host(hw.stack, sched.launches(), k, g["attention_dies"])), sched, main


def afd(hw, m, g) -> dict:
    """Vectorised AFD decode prediction for grid ``g`` (a mapping of column -> array).

    Stage times are one microbatch's at the microbatch count used; ``transfer_us`` is
    a2e + e2a of one microbatch, ``barrier_wait_us`` its two waits, ``expert_rows`` the rows
    the busiest expert die computes per microbatch."""
    runs = [iteration(hw, m, g, n) for n in MICROBATCHES]
    mb = np.asarray(g["microbatches"])  # an array over the rows where it varies and nothing else does
    its = np.stack(np.broadcast_arrays(*(r[0] for r in runs), mb)[:len(runs)])
    mb = np.broadcast_to(mb, its.shape[1:])
    choice = np.where(mb == 0, np.argmin(its, axis=0) + 1, mb).astype(int)  # ties: fewer microbatches

    def pick(values):
        return np.choose(choice - 1, np.broadcast_arrays(*(np.asarray(v, dtype=float) for v in values)))

    layers = [r[2] for r in runs]

    def per_layer(f):  # a per-layer quantity of each microbatch count's run, its layers' mean, picked
        return pick([x.mean(f) for x in layers])

    it = pick(its)
    tpot = it / emitted_tokens(g)
    dpp = hw.chip.dies_per_package
    per_attention_npu = g["batch"] / tpot
    throughput = per_attention_npu * g["attention_dies"] / (g["attention_dies"] + g["expert_dies"])
    return {
        "microbatches_used": choice,
        "iteration_ms": it * 1e3,
        "tpot_ms": tpot * 1e3,
        "layer_us": per_layer(lambda x: x.pipe.period_s) * 1e6,
        "attention_stage_us": per_layer(lambda x: x.pipe.stages[0].time_s) * 1e6,
        "expert_stage_us": per_layer(lambda x: x.expert_stage_s) * 1e6,
        "transfer_us": per_layer(lambda x: x.a2e.total_time_s + x.e2a.total_time_s) * 1e6,
        "barrier_wait_us": per_layer(lambda x: x.pipe.wait_s) * 1e6,
        "expert_rows": per_layer(lambda x: x.placement.rows),
        "tokens_per_iteration": emitted_tokens(g),
        "npus": (g["attention_dies"] + g["expert_dies"]) / dpp,
        "throughput_per_npu": throughput,
        "throughput_per_attention_npu": per_attention_npu,
        "tokens_per_s_per_user": 1.0 / tpot,
        "tokens_per_s_per_tflops": tokens_per_s_per_tflops(throughput, hw, m),
        "host_ms": np.broadcast_to(pick([r[1].host_s for r in runs]), np.shape(tpot)) * 1e3,
        "_schedules": tuple(r[1] for r in runs),
        "_choice": choice,
    }
