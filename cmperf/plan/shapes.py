"""The instance options a plan chooses from (docs/model.md §9.2), as rows for
:func:`cmperf.predict.predict`: every option is one configuration of the same cost model
``cmperf predict`` runs.

* prefill instance: ``dies`` (EP = dies, attention TP as predict's default), prompts per
  NPU per forward pass; a shared-expert copy on every die and one redundant routed expert
  per die when 256 does not fill the dies evenly (paper §4.3: 8 + 1 + 1 experts per die at
  EP32);
* decode instance: ``dies`` (EP = dies, data-parallel attention), batch per NPU; shared
  copies about one per ten dies and the routed experts topped up with redundant copies to
  whole experts per die (paper §4.2: 256 + 32 redundant + 32 shared at EP320);
* co-located instance (chunked prefill): a decode instance that also runs ``chunk`` prompt
  tokens per NPU each iteration;
* attention-FFN disaggregated decode instance (AFD): ``attention_dies`` holding the requests
  and ``expert_dies`` holding one shared-expert copy each and the routed experts topped up to
  whole experts per die, batch per attention NPU.

Instances of expert parallelism stay inside one scale-up domain (the supernode's UB plane):
the options stop at the domain's dies; predict drops the rest as invalid.
"""

from __future__ import annotations

import math

PREFILL_DIES = (16, 32, 48, 64, 96, 128, 192, 256)
PREFILL_PROMPTS_PER_NPU = (0.25, 0.5, 1, 2, 4, 8)
DECODE_DIES = (8, 16, 32, 48, 64, 96, 128, 160, 192, 256, 320, 384, 512, 640, 768)
DECODE_BATCHES = (1, 2, 4, 8, 12, 16, 24, 32, 40, 48, 56, 64, 72, 80, 88, 96, 104, 112, 120, 128, 144, 160, 176,
                  192, 224, 256)
CHUNK_TOKENS = (128, 256, 512, 1024, 2048, 4096)
AFD_ATTENTION_DIES = (32, 64, 96, 128, 160, 192, 224, 256, 320, 384, 448, 512, 640)
AFD_EXPERT_DIES = (16, 32, 48, 64, 96, 128, 192, 256)
SHARED_COPY_EVERY_DIES = 10  # paper §4.2: 32 shared-expert copies over 320 dies


def whole_experts(instances: int, ep: int) -> int:
    """The expert instances ``ep`` dies hold when each holds whole experts: ``instances``
    rounded up to a multiple of ``ep`` (the rest are redundant routed copies)."""
    return math.ceil(instances / ep) * ep


def decode_layout(m, ep: int) -> tuple[int, int]:
    """(redundant routed experts, shared-expert copies) for a decode instance of EP ``ep``:
    about one shared copy per ten dies, routed instances topped up to whole experts per die."""
    mo = m.moe
    if mo is None:
        return 0, 0
    shared = max(1, round(ep / SHARED_COPY_EVERY_DIES)) if mo.shared_experts else 0
    return whole_experts(mo.routed_experts + shared, ep) - mo.routed_experts - shared, shared


def prefill_layout(m, ep: int) -> tuple[int, int]:
    """(redundant routed experts, shared copies) for a prefill instance: a shared copy on
    every die and the routed experts topped up to whole experts per die, at least one
    redundant copy per die when the model has a shared expert (paper §4.3)."""
    mo = m.moe
    if mo is None:
        return 0, 0
    spare = 1 if mo.shared_experts else 0
    return whole_experts(mo.routed_experts + spare, ep) - mo.routed_experts, ep if mo.shared_experts else 0


def within(options, limit_dies: int, dies_per_npu: int) -> list[int]:
    """Options of at most ``limit_dies`` dies that are whole NPUs."""
    return [d for d in options if d <= limit_dies and d % dies_per_npu == 0]


def prefill_rows(m, dies_options, prompt_tokens: float, prompt_len: float, common: dict) -> list[dict]:
    rows = []
    for d in dies_options:
        red, shared = prefill_layout(m, d)
        for k in PREFILL_PROMPTS_PER_NPU:
            rows.append({"dies": d, "ep": d, "tokens_per_npu": k * prompt_tokens, "prompt_len": prompt_len,
                         "redundant_experts": red, "shared_copies": shared, **common})
    return rows


def decode_rows(m, dies_options, common: dict, batches=DECODE_BATCHES) -> list[dict]:
    rows = []
    for d in dies_options:
        red, shared = decode_layout(m, d)
        rows += [{"dies": d, "ep": d, "batch": b, "redundant_experts": red, "shared_copies": shared, **common}
                 for b in batches]
    return rows


def chunk_rows(m, dies_options, prompt_len: float, common: dict) -> list[dict]:
    """The prefill work of a co-located instance: ``chunk`` tokens per NPU per iteration on
    the decode layout (EP = dies, attention data-parallel: TP 1)."""
    rows = []
    for d in dies_options:
        red, shared = decode_layout(m, d)
        rows += [{"dies": d, "ep": d, "tokens_per_npu": c, "prompt_len": prompt_len, "attn_tp": 1,
                  "redundant_experts": red, "shared_copies": shared, **common} for c in CHUNK_TOKENS]
    return rows


def afd_layout(m, expert_dies: int) -> tuple[int, int]:
    """(redundant routed experts, shared copies) of an AFD instance: a shared copy on every
    expert die, the routed experts topped up to whole experts per die."""
    mo = m.moe
    if mo is None:
        return 0, 0
    return (whole_experts(mo.routed_experts, expert_dies) - mo.routed_experts,
            expert_dies if mo.shared_experts else 0)


def afd_rows(m, limit_dies: int, dies_per_npu: int, common: dict, batches=DECODE_BATCHES) -> list[dict]:
    """Every attention/expert split within ``limit_dies`` (whole NPUs on each side)."""
    if m.moe is None:
        return []
    rows = []
    for e in within(AFD_EXPERT_DIES, limit_dies, dies_per_npu):
        red, shared = afd_layout(m, e)
        for a in within(AFD_ATTENTION_DIES, limit_dies - e, dies_per_npu):
            rows += [{"attention_dies": a, "expert_dies": e, "batch": b, "redundant_experts": red,
                      "shared_copies": shared, **common} for b in batches]
    return rows
