"""The inputs of a prediction and their defaults: the paper's deployment (reference §4),
each with its source and the line ``--help`` shows. Kept free of numpy and pandas so that
the command line can build its help without importing them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Default:
    value: Any
    source: str
    help: str
    shown: str | None = None  # how --help shows the default, when not the plain value

    def help_text(self) -> str:
        shown = self.shown if self.shown is not None else f"{self.value:g}" if isinstance(self.value, float) else str(self.value)
        return f"{self.help} (default: {shown})"  # not [..]: rich reads brackets as markup


DECODE_DEFAULTS: dict[str, Default] = {
    "batch": Default(96, "paper Table 4 (D1): batch 96 per NPU", "requests per NPU (each emits one token stream)"),
    "prompt_len": Default(4096, "paper Table 4-5: 4K prompts", "prompt tokens per request"),
    "output_len": Default(256, "paper Table 5 (D2): output 256", "output tokens per request"),
    "kv_len": Default(float("nan"), "paper Table 4: KV length 4,096; unset = prompt + output/2", "cached tokens attended per decode step", "prompt + output/2"),
    "dies": Default(320, "paper §4.1: 160 NPUs = 320 dies", "dies in the decode instance"),
    "tp": Default(1, "paper §4.2: data-parallel attention (DP320)", "tensor-parallel degree of attention and dense FFN (dies sharing the same requests)"),
    "ep": Default(0, "paper §4.2: EP320 (unset = all dies)", "expert-parallel degree", "= dies"),
    "microbatches": Default(0, "auto: the faster of one and two microbatches; at the paper's deployment that is two (paper §4.2.3)", "1, 2 or auto", "auto: the faster"),
    "mtp": Default(1, "paper §5.1: MTP on", "multi-token prediction", "on"),
    "mtp_k": Default(1, "paper §5.1: 1 speculative token", "speculative tokens per step"),
    "mtp_acceptance": Default(0.7, "paper §5.1: 70 % acceptance", "acceptance rate of each speculative token"),
    "expert_imbalance": Default(1.0, "paper §4.2: EPLB with redundant experts; 1.0 = perfect balance", "max/mean tokens on a die's routed experts, or 'default'"),
    "redundant_experts": Default(32, "paper §4.2: 32 redundant routed experts", "extra copies of hot routed experts"),
    "shared_copies": Default(32, "paper §4.2: 32 shared-expert copies", "copies of the shared expert"),
    "chunk_tokens": Default(0.0, "no co-located prefill: the paper's decode instances run decode only (PD disaggregation, paper §4.1)", "prompt tokens per NPU each iteration also prefills, in the same forward pass (co-located, chunked prefill; docs/model.md §9.4)"),
    "attention_share": Default(float("nan"), "the system's overlap.decode.attention_share (CloudMatrix384: 16 of 24 AIC and 32 of 48 AIV, paper §4.2.3)", "share of the cores the attention stream owns with two microbatches (core-split systems)", "the system's: 16/24 on CloudMatrix384"),
}

PREFILL_DEFAULTS: dict[str, Default] = {
    "tokens_per_npu": Default(16384, "paper Table 3: 16K tokens per NPU", "prompt tokens per NPU per forward pass"),
    "prompt_len": Default(4096, "paper Table 3: 4K prompts", "tokens per prompt"),
    "cached_len": Default(0, "no context cache (paper §4.4: EMS serves cached KV blocks of a prompt's prefix)", "tokens of each prompt's prefix whose KV is read from the EMS pool instead of computed"),
    "dies": Default(32, "paper §4.3: 16 NPUs = 32 dies per prefill instance", "dies in the prefill instance"),
    "ep": Default(0, "paper §4.3: EP32 (unset = all dies)", "expert-parallel degree", "= dies"),
    "attn_tp": Default(4, "ASSUMPTION (paper MISSING: exact prefill TP degree); docs/model.md §2.2", "tensor-parallel degree of prefill attention"),
    "microbatches": Default(0, "auto: the faster of one and two microbatches (paper §4.3.2 uses two)", "1, 2 or auto", "auto: the faster"),
    "mtp": Default(1, "paper §5.1: MTP module runs in prefill to seed the first draft", "run the MTP module", "on"),
    "expert_imbalance": Default(1.0, "paper Table 3 P1: perfect balance", "max/mean tokens on a die's routed experts, or 'default'"),
    "redundant_experts": Default(32, "paper §4.3: 1 redundant expert per die (32)", "extra copies of hot routed experts"),
    "shared_copies": Default(-1, "paper §4.3: 1 shared-expert copy per die (unset = one per die)", "copies of the shared expert", "one per die"),
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
    "batch": Default(96, "paper Table 4 (D1)'s batch 96 per NPU, here per attention NPU", "requests per attention NPU"),
    **{k: DECODE_DEFAULTS[k] for k in ("prompt_len", "output_len", "kv_len")},
    "attention_dies": Default(224, "ASSUMPTION (paper MISSING: it does not deploy AFD): the paper's 160 decode NPUs split 112 attention + 48 expert NPUs; docs/model.md §5.4", "dies running attention (data-parallel, TP 1), dense layers, gate and head"),
    "expert_dies": Default(96, "ASSUMPTION (paper MISSING): 48 expert NPUs, 3 routed + 1 shared instance per die; docs/model.md §5.4", "dies holding the experts (EP degree)"),
    "microbatches": Default(0, "auto: the fastest of 1..4 (MegaScale-Infer's ping-pong pipeline across the two pools)", "microbatches across the attention and expert pools: 1..4 or auto", "auto: the fastest of 1..4"),
    **{k: DECODE_DEFAULTS[k] for k in ("mtp", "mtp_k", "mtp_acceptance", "expert_imbalance", "redundant_experts")},
    "shared_copies": Default(0, "ASSUMPTION: one shared-expert copy per expert die (0 = one per expert die)", "copies of the shared expert (on expert dies)", "one per expert die"),
}

PHASE_DEFAULTS = {"decode": DECODE_DEFAULTS, "prefill": PREFILL_DEFAULTS, "collective": COLLECTIVE_DEFAULTS,
                  "gemm": GEMM_DEFAULTS, "attention": ATTENTION_DEFAULTS, "afd": AFD_DEFAULTS}


def help_text(phase: str, key: str) -> str:
    """A flag's --help line: what it is, then its default, from the one table above."""
    return PHASE_DEFAULTS[phase][key].help_text()
