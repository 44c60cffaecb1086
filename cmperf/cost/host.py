"""Host and seam time of a served step (docs/model.md §11.1; serving-reference.md §2.1, §2.2,
§2.7). The device's work of a step is the schedule's (cmperf/schedule); this module adds what
the serving stack's host does around it, from the stack profile's facts (stacks/*.yaml).
Everything is numpy-vectorised over the rows of a grid; with no stack (``--stack none``)
every term is 0 and a step is its device time.

**Two kinds of host work.** Work the host can do while the device runs — launching the step's
kernels or graphs, which the host issues ahead of the device — hides under the device's time
unless it takes longer; work that needs the device's results (or that the device must wait
for before it can start: a seam) adds to it:

    step = max(device, H_overlapped) + H_serial                      (1)

so a step is never shorter than its host time, H_overlapped + H_serial <= step, nor than its
device time.

**Launches.** In graph mode the host replays captured graphs: one launch per graph and a
cost per node it uploads (OCANNL488 on a GPU: ~15 µs + ~0.58 µs per node). The step's first
graph is issued ahead (overlapped); a graph that follows a seam cannot be, and its launch is
part of the seam (below):

    H_launch(graph) = graph_launch_s + nodes x graph_node_s

(the device-side cost of each node is the chip's ``kernel_launch_s``, already in every op's
time). In eager mode the host launches every operator itself (Python -> C++ dispatch -> the
device's queue; TORCHAIR):

    H_launch(eager) = launches x eager_launch_s

where ``launches`` is the sum of the ``launches`` of every op the schedule runs, calls
included (:func:`launches`): a kernel a schedule adds is counted without a change here.

**Decode seams.** A speculative step (MTP, k drafts) in SGLang's spec v2 is three kinds of
graph — the draft (k graphs, one per draft token), the verify, and the draft-extend when the
stack has one (``draft_extend_graph``) — with an eager seam between consecutive graphs: accept
sampling, cache-slot assignment, rebuilding the next graph's metadata on the host (PR 32219;
pypto's host-built speculative metadata ~12.3 + 4.9 ms per step on Ascend). At the seam the
device idles for the host's work and the next graph's launch:

    graphs = 1 + k + draft_extend   (1 without MTP)
    H_seams = (graphs - 1) x (spec_seam_s + graph_launch_s)     (eager: + eager_launch_s, the
              first op of the next pass; the host then runs ahead again)

and once per speculative step the host builds the step's metadata (the main and the MTP
path's; pypto: 12.3 + 4.9 ms) while the device waits: H_spec = spec_step_s (0 without MTP).

A stack that pipelines the speculative step (``spec_pipeline``: CloudMatrix-Infer's optimised
MTP pipeline, paper §4.2.4, which "hides" the k + 1 graph launches of 0.6-0.8 ms) has no seams:
it issues every graph ahead, H_launch = graphs x graph_launch_s + nodes x graph_node_s, and
H_seams = 0.

**The scheduler.** ``scheduler_overhead_s`` is the host time between two decode iterations
the device waits for (0 for an overlap scheduler, which plans step i + 1 while the device runs
step i; xDeepServe's measured 2 ms bubble). With DP attention the scheduler all-gathers its
per-step metadata across the R DP-attention ranks on the CPU (gloo) before it can form the
batch; a ring all-gather takes R - 1 hops, and speculative overlap cannot hide it (SGLang
PR 14294, which adds SGLANG_SCHEDULER_SKIP_ALL_GATHER):

    H_dp = dp_sync x (R - 1) x dp_sync_hop_s

**Prefill.** A pass pays ``prefill_overhead_s`` once, its launches (eager or graph) as above,
and the host syncs of normal-mode expert dispatch: each dispatch round reads counts back from
the device (``dispatch_host_syncs`` device-to-host reads per round, merged into one on A3 by
sgl-kernel-npu PR 731) and the device waits for the host to read them and issue the rest
(``host_sync_s`` each; XDS: "any CPU round-trip costs milliseconds"); a round takes at most
``dispatch_round_tokens`` tokens per die (0: the whole microbatch in one):

    H_syncs = MoE layers x microbatches x ceil(T_mb / round_tokens) x dispatch_host_syncs x host_sync_s

and the work per prompt the pass's scheduler does before the device can run it: a DP-attention
rank's scheduler admits its own prompts (the request's metadata, its KV pages, the PD
bootstrap with the decode instance), the ranks in parallel, so the device waits for the prompts
of one rank (``prompts_per_rank``, of the pass's ``attn_tp`` dies):

    H_requests = prompts_per_rank x prefill_request_s

So a pass's host time has a part per pass, one per prompt and one per layer and round of
tokens: a longer prompt costs more rounds, more prompts more admissions, more layers more syncs.

A decode term (the scheduler, the DP sync, the seams) never enters a prefill pass and a
prefill term (the pass overhead, the dispatch syncs) never a decode step: each phase reads its
own fields. A co-located iteration carrying prompts is both when the stack runs its prompts as
their own extend forward rather than mixing them into the decode batch (``mixed_chunks`` off,
SGLang's default): it pays the decode step's terms and the prefill pass's (:func:`with_extend`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


def stack_value(stack, name: str, default: float = 0.0):
    """A field of the stack as a number (array over a sweep); ``default`` when absent."""
    if stack is None:
        return default
    try:
        v = stack[name]
    except (AttributeError, KeyError):
        return default
    return default if v is None else v


def launches(parts) -> np.ndarray:
    """Kernel launches of a step: every scheduled op's ``launches`` times its calls."""
    return sum((np.asarray(p.calls, dtype=float) * np.asarray(p.launches, dtype=float) for p in parts),
               np.asarray(0.0))


@dataclass
class HostTime:
    """A step's host work: ``overlapped_s`` the host issues while the device runs (launches),
    ``serial`` the terms the device waits for (name -> seconds), as (1) composes them."""

    overlapped_s: np.ndarray
    serial: dict = field(default_factory=dict)

    @property
    def serial_s(self) -> np.ndarray:
        return sum(self.serial.values(), np.asarray(0.0))

    @property
    def host_s(self) -> np.ndarray:
        """All the host's time of the step (the least the step can take)."""
        return self.overlapped_s + self.serial_s

    def step_s(self, device_s) -> np.ndarray:
        """(1): max(device, overlapped host) + serial host."""
        return np.maximum(device_s, self.overlapped_s) + self.serial_s


def launch_s(stack, mode: str, n_launches) -> np.ndarray:
    """Host time to launch a step's kernels ahead of the device: the first graph's replay and
    every node in graph mode, every operator in eager mode."""
    n = np.asarray(n_launches, dtype=float)
    if mode == "eager":
        return n * stack_value(stack, "eager_launch_s")
    return stack_value(stack, "graph_launch_s") + n * stack_value(stack, "graph_node_s")


def decode_graphs(stack, drafts) -> np.ndarray:
    """Graphs of a decode step with ``drafts`` speculative tokens: 1, or 1 + k (+ 1 draft-extend)."""
    k = np.asarray(drafts, dtype=float)
    extend = 1.0 if bool(stack_value(stack, "draft_extend_graph", False)) else 0.0
    return np.where(k > 0, 1.0 + k + extend, 1.0)


def dp_sync_s(stack, ranks) -> np.ndarray:
    """The scheduler's CPU all-gather across ``ranks`` DP-attention ranks: (R - 1) hops when
    the stack syncs them, else 0."""
    if not bool(stack_value(stack, "dp_sync", False)):
        return np.asarray(0.0)
    return np.maximum(np.asarray(ranks, dtype=float) - 1.0, 0.0) * stack_value(stack, "dp_sync_hop_s")


def decode_host(stack, n_launches, drafts, ranks) -> HostTime:
    """Host time of one decode (or AFD) iteration with ``n_launches`` kernel launches,
    ``drafts`` MTP tokens per request and ``ranks`` DP-attention ranks (module docstring)."""
    if stack is None:
        return HostTime(np.asarray(0.0))
    graphs = decode_graphs(stack, drafts)
    mode = stack.decode_graph
    spec = np.where(np.asarray(drafts, dtype=float) > 0, stack_value(stack, "spec_step_s"), 0.0)
    if bool(stack_value(stack, "spec_pipeline", False)):  # every graph issued ahead, no seam
        ahead = launch_s(stack, mode, n_launches) + (graphs - 1.0) * (stack_value(stack, "graph_launch_s") if mode == "graph" else 0.0)
        return HostTime(ahead, {"scheduler": np.asarray(stack_value(stack, "scheduler_overhead_s"), dtype=float),
                                "dp_sync": dp_sync_s(stack, ranks), "spec_metadata": spec})
    seam = stack_value(stack, "spec_seam_s") + stack_value(stack, "graph_launch_s" if mode == "graph" else "eager_launch_s")
    return HostTime(launch_s(stack, mode, n_launches), {
        "scheduler": np.asarray(stack_value(stack, "scheduler_overhead_s"), dtype=float),
        "dp_sync": dp_sync_s(stack, ranks),
        "spec_seams": (graphs - 1.0) * seam,
        "spec_metadata": spec,
    })


def dispatch_syncs(stack, moe_layers, microbatches, tokens_per_microbatch) -> np.ndarray:
    """Host syncs of normal-mode dispatch in a prefill pass: per MoE layer and microbatch,
    one round per ``dispatch_round_tokens`` tokens of the die's microbatch, each with
    ``dispatch_host_syncs`` reads."""
    per = stack_value(stack, "dispatch_host_syncs")
    chunk = np.asarray(stack_value(stack, "dispatch_round_tokens"), dtype=float)
    T = np.asarray(tokens_per_microbatch, dtype=float)
    rounds = np.where(chunk > 0, np.ceil(T / np.where(chunk > 0, chunk, 1.0)), 1.0)
    return np.asarray(moe_layers, dtype=float) * np.asarray(microbatches, dtype=float) * rounds * per


def prefill_serial(stack, moe_layers, microbatches, tokens_per_microbatch, prompts_per_rank) -> dict:
    """The host terms of a prefill pass the device waits for (module docstring): the pass's
    own, its prompts' admission (one DP-attention rank's ``prompts_per_rank``) and the
    dispatch syncs of ``moe_layers`` x ``microbatches`` of ``tokens_per_microbatch`` tokens
    per die."""
    syncs = dispatch_syncs(stack, moe_layers, microbatches, tokens_per_microbatch)
    return {"pass": np.asarray(stack_value(stack, "prefill_overhead_s"), dtype=float),
            "requests": np.asarray(prompts_per_rank, dtype=float) * stack_value(stack, "prefill_request_s"),
            "dispatch_syncs": syncs * stack_value(stack, "host_sync_s")}


def prefill_host(stack, n_launches, moe_layers, microbatches, tokens_per_microbatch, prompts_per_rank) -> HostTime:
    """Host time of one prefill pass (module docstring): ``moe_layers`` layers that dispatch
    (the MTP module's included when it runs), ``microbatches`` of ``tokens_per_microbatch``
    tokens per die, ``prompts_per_rank`` prompts admitted by each DP-attention rank."""
    if stack is None:
        return HostTime(np.asarray(0.0))
    return HostTime(launch_s(stack, stack.prefill_graph, n_launches),
                    prefill_serial(stack, moe_layers, microbatches, tokens_per_microbatch, prompts_per_rank))


def mixes_chunks(stack) -> bool:
    """The stack mixes a co-located iteration's prompt chunk into the decode batch (its
    ``mixed_chunks``; absent, or no stack: on)."""
    return bool(stack_value(stack, "mixed_chunks", True))


def with_extend(stack, h: HostTime, n_launches, chunk_prompts_per_rank, moe_layers, chunk_tokens_per_die) -> HostTime:
    """A co-located iteration's host time, ``h`` its decode step's: a stack that does not mix
    prompt chunks into the decode batch (``mixed_chunks`` off: SGLang without
    --enable-mixed-chunk runs them as their own extend forward, the DP ranks' batches in one
    pass) pays, on the iterations that carry prompts (``chunk_prompts_per_rank`` > 0 on the
    hot rank), a prefill pass's host terms too (:func:`prefill_serial`), and launches its
    ``n_launches`` kernels in the stack's prefill mode (SGLang: eager; its decode graphs take
    decode batches only):

        H = H_decode + [chunk > 0] x (H_pass + H_requests + H_syncs), launched as prefill_graph says

    A stack that mixes them (vLLM V1, Sarathi: one engine step) pays the decode step's alone."""
    if stack is None or mixes_chunks(stack):
        return h
    on = np.asarray(chunk_prompts_per_rank, dtype=float) > 0
    if not np.any(on):
        return h
    extend = prefill_serial(stack, moe_layers, 1.0, chunk_tokens_per_die, chunk_prompts_per_rank)
    ahead = np.where(on, launch_s(stack, stack.prefill_graph, n_launches), h.overlapped_s)
    return HostTime(ahead, {**h.serial, **{k: np.where(on, v, 0.0) for k, v in extend.items()}})
