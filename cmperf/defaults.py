"""The inputs of a prediction and their defaults, each with its source and the line
``--help`` shows. Kept free of numpy and pandas so that the command line can build its help
without importing them.

An input whose default follows the system and the model (the instance size, TP, batch, MTP,
the expert layout) holds an "unset" marker here (``value``; a value no user may give) and is
derived by cmperf/deployment.py from the system's ``deployment`` section (docs/model.md §10);
``fallback`` is what a system file without that section gets: the paper's deployment."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Default:
    value: Any
    source: str
    help: str
    shown: str | None = None  # how --help shows the default, when not the plain value
    fallback: Any = None  # for a derived input (value = the unset marker): a system without `deployment` gets this

    def help_text(self) -> str:
        shown = self.shown if self.shown is not None else f"{self.value:g}" if isinstance(self.value, float) else str(self.value)
        return f"{self.help} (default: {shown})"  # not [..]: rich reads brackets as markup


DECODE_DEFAULTS: dict[str, Default] = {
    "batch": Default(float("nan"), "the system's deployment.decode.batch, capped by HBM (cloudmatrix384: 96, paper Table 4 D1)", "requests per NPU (each emits one token stream)", "the system's, capped by HBM: 96 on cloudmatrix384", fallback=96),
    "prompt_len": Default(4096, "paper Table 4-5: 4K prompts", "prompt tokens per request"),
    "output_len": Default(256, "paper Table 5 (D2): output 256", "output tokens per request"),
    "kv_len": Default(float("nan"), "paper Table 4: KV length 4,096; unset = prompt + output/2", "cached tokens attended per decode step", "prompt + output/2"),
    "dies": Default(0, "the system's deployment.decode.dies scaled to the model's weights (cloudmatrix384: 320, paper §4.1)", "dies in the decode instance", "the system's, for the model: 320 on cloudmatrix384", fallback=320),
    "tp": Default(0, "the system's deployment.decode.tp for a MoE model (cloudmatrix384: 1, paper §4.2 DP320); a dense model: the smallest TP whose weights fit the share", "tensor-parallel degree of attention and dense FFN (dies sharing the same requests)", "the system's; dense models: the smallest that fits", fallback=1),
    "ep": Default(0, "paper §4.2: EP320 (unset = all dies)", "expert-parallel degree", "= dies"),
    "microbatches": Default(0, "auto: the faster of one and two microbatches; at the paper's deployment that is two (paper §4.2.3)", "1, 2 or auto", "auto: the faster"),
    "mtp": Default(-1, "the system's deployment.decode.mtp (cloudmatrix384: on, paper §5.1); off for a model without an MTP module", "multi-token prediction", "the system's: on on cloudmatrix384", fallback=1),
    "mtp_k": Default(1, "paper §5.1: 1 speculative token", "speculative tokens per step"),
    "mtp_acceptance": Default(0.7, "paper §5.1: 70 % acceptance", "acceptance rate of each speculative token"),
    "expert_imbalance": Default(1.0, "paper §4.2: EPLB with redundant experts; 1.0 = perfect balance", "max/mean tokens on a die's routed experts, or 'default'"),
    "redundant_experts": Default(-1, "derived: routed experts topped up to whole experts per die (paper §4.2: 32 at EP320)", "extra copies of hot routed experts", "whole experts per die: 32 at EP320"),
    "shared_copies": Default(-1, "derived: the system's deployment.decode.shared_copies_per_die x EP (paper §4.2: 32 at EP320)", "copies of the shared expert", "the system's share of the dies: 32 at EP320"),
    "chunk_tokens": Default(0.0, "no co-located prefill: the paper's decode instances run decode only (PD disaggregation, paper §4.1)", "prompt tokens per NPU each iteration also prefills, in the same forward pass (co-located, chunked prefill; docs/model.md §9.4)"),
    "attention_share": Default(float("nan"), "the system's overlap.decode.attention_share (CloudMatrix384: 16 of 24 AIC and 32 of 48 AIV, paper §4.2.3)", "share of the cores the attention stream owns with two microbatches (core-split systems)", "the system's: 16/24 on CloudMatrix384"),
}

PREFILL_DEFAULTS: dict[str, Default] = {
    "tokens_per_npu": Default(float("nan"), "the system's deployment.prefill.tokens_per_npu, capped by HBM (cloudmatrix384: 16K, paper Table 3)", "prompt tokens per NPU per forward pass", "the system's, capped by HBM: 16384 on cloudmatrix384", fallback=16384),
    "prompt_len": Default(4096, "paper Table 3: 4K prompts", "tokens per prompt"),
    "cached_len": Default(0, "no context cache (paper §4.4: EMS serves cached KV blocks of a prompt's prefix)", "tokens of each prompt's prefix whose KV is cached instead of computed: in HBM (the stack's prefix cache) or read from the pool (--pool-len)"),
    "pool_len": Default(-1, "the first cache tier there is: HBM where the stack keeps a prefix cache (prefix_cache_hbm_share > 0), else the pool (cloudmatrix-infer: EMS, paper §4.4)", "tokens of the cached prefix read from the pool (its tail; the rest is in HBM); docs/model.md §9.5", "HBM where the stack caches, else the pool"),
    "pool_readers": Default(0, "the instance's own dies (a deployment's planner and simulation give all its prefill dies)", "dies reading the EMS pool at once (they share its memory servers)", "the instance's dies"),
    "dies": Default(0, "the system's deployment.prefill.dies scaled to the model's weights (cloudmatrix384: 32, paper §4.3)", "dies in the prefill instance", "the system's, for the model: 32 on cloudmatrix384", fallback=32),
    "ep": Default(0, "paper §4.3: EP32 (unset = all dies)", "expert-parallel degree", "= dies"),
    "attn_tp": Default(0, "the system's deployment.prefill.attn_tp (cloudmatrix384: 4, an ASSUMPTION, docs/model.md §2.2); a dense model: the smallest TP whose weights fit the share", "tensor-parallel degree of prefill attention", "the system's: 4 on cloudmatrix384", fallback=4),
    "microbatches": Default(0, "auto: the faster of one and two microbatches (paper §4.3.2 uses two)", "1, 2 or auto", "auto: the faster"),
    "mtp": Default(-1, "as the system's decode: the MTP module runs in prefill to seed the first draft (paper §5.1)", "run the MTP module", "as the system's decode"),
    "expert_imbalance": Default(1.0, "paper Table 3 P1: perfect balance", "max/mean tokens on a die's routed experts, or 'default'"),
    "redundant_experts": Default(-1, "derived: at least the system's deployment.prefill.redundant_per_die, topped up to whole experts (paper §4.3: 32 at EP32)", "extra copies of hot routed experts", "whole experts per die: 32 at EP32"),
    "shared_copies": Default(-1, "derived: the system's deployment.prefill.shared_copies_per_die x EP (paper §4.3: one per die)", "copies of the shared expert", "the system's: one per die on cloudmatrix384"),
}

COLLECTIVE_DEFAULTS: dict[str, Default] = {
    "tokens": Default(128, "paper Table 7: 128 tokens per rank", "tokens per die"),
    "ep": Default(8, "paper Table 7: EP8 ... EP256", "expert-parallel degree"),
    "dies": Default(0, "= EP (unset)", "dies (0 = EP)"),
    "redundant_experts": Default(0, "paper Table 7: plain top-8 over 256 experts", "extra routed copies"),
    "shared_copies": Default(0, "paper Table 7: no shared expert", "shared-expert copies"),
    "expert_imbalance": Default(1.0, "uniform routing", "max/mean tokens per die"),
    "comm_sms": Default(0, "not SM-limited (the link or message rate sets the pace)",
                        "SMs the dispatch/combine kernels run on, where the route has an SM cost (0 = not limited)"),
}

GEMM_DEFAULTS: dict[str, Default] = {
    "m": Default(4096, "DeepGEMM's large-M rows", "rows per group (tokens)"),
    "n": Default(7168, "DeepGEMM: DeepSeek-V3 shapes", "output columns"),
    "k": Default(2048, "DeepGEMM: DeepSeek-V3 shapes", "reduction dimension"),
    "groups": Default(1, "a plain GEMM", "GEMMs of this shape in one grouped launch"),
    "dtype": Default("fp8", "DeepGEMM runs FP8", "input dtype (bf16, fp16, fp8, int8, fp4)"),
    "layout": Default("contiguous", "a plain GEMM; DeepGEMM's contiguous grouped layout",
                      "contiguous (groups stacked along M) or masked (each group padded to m rows)"),
}

ATTENTION_DEFAULTS: dict[str, Default] = {
    "batch": Default(128, "FlashMLA's benchmark batch", "requests"),
    "s_q": Default(1, "one new token per request", "query tokens per request"),
    "h_q": Default(128, "DeepSeek-V3: 128 heads without TP", "query heads"),
    "seq_k": Default(4096, "a 4K cache", "cached tokens per request"),
}

AFD_DEFAULTS: dict[str, Default] = {
    "batch": Default(float("nan"), "the system's deployment.decode.batch, here per attention NPU, capped by HBM (cloudmatrix384: 96, paper Table 4 D1)", "requests per attention NPU", "the system's, capped by HBM: 96 on cloudmatrix384", fallback=96),
    **{k: DECODE_DEFAULTS[k] for k in ("prompt_len", "output_len", "kv_len")},
    "attention_dies": Default(0, "ASSUMPTION (paper MISSING: it does not deploy AFD): the system's decode instance minus the expert dies (cloudmatrix384: 160 NPUs as 112 attention + 48 expert NPUs); docs/model.md §5.4", "dies running attention (data-parallel, TP 1), dense layers, gate and head", "the system's decode dies - expert dies: 224 on cloudmatrix384"),
    "expert_dies": Default(0, "ASSUMPTION (paper MISSING): 96/320 of the system's decode dies, whole NPUs (cloudmatrix384: 48 expert NPUs, 3 routed + 1 shared instance per die); docs/model.md §5.4", "dies holding the experts (EP degree)", "96/320 of the decode dies: 96 on cloudmatrix384"),
    "microbatches": Default(0, "auto: the fastest of 1..4 (MegaScale-Infer's ping-pong pipeline across the two pools)", "microbatches across the attention and expert pools: 1..4 or auto", "auto: the fastest of 1..4"),
    **{k: DECODE_DEFAULTS[k] for k in ("mtp", "mtp_k", "mtp_acceptance", "expert_imbalance", "redundant_experts")},
    "shared_copies": Default(-1, "ASSUMPTION: one shared-expert copy per expert die", "copies of the shared expert (on expert dies)", "one per expert die"),
}

# The expert layout of a system file without a `deployment` section (cmperf/deployment.py):
# the paper's (§4.2: 32 shared copies over 320 decode dies, redundant copies only to top up;
# §4.3: a shared and a redundant copy on every prefill die).
GENERIC_LAYOUT = {"decode": {"shared_copies_per_die": 0.1, "redundant_per_die": 0},
                  "prefill": {"shared_copies_per_die": 1.0, "redundant_per_die": 1}}

PHASE_DEFAULTS = {"decode": DECODE_DEFAULTS, "prefill": PREFILL_DEFAULTS, "collective": COLLECTIVE_DEFAULTS,
                  "gemm": GEMM_DEFAULTS, "attention": ATTENTION_DEFAULTS, "afd": AFD_DEFAULTS}


def help_text(phase: str, key: str) -> str:
    """A flag's --help line: what it is, then its default, from the one table above."""
    return PHASE_DEFAULTS[phase][key].help_text()
