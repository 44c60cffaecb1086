"""The instance options a plan chooses from (docs/model.md §9.2), as rows for
:func:`cmperf.predict.predict`: every option is one configuration of the same cost model
``cmperf predict`` runs. Sizes follow the system: multiples of its node (16 dies on
CloudMatrix384, 8 GPUs on an H100 node), tensor parallelism within the scale-up domain a
node's collectives use (NVLink: the node; UB: the supernode), degrees that divide the heads.
The experts of every option are laid out by the system's rule, as for any prediction that
leaves them unset (cmperf/deployment.py ``expert_layout``, docs/model.md §10: the paper's
256 + 32 + 32 at EP320 and 8 + 1 + 1 per die at EP32 on CloudMatrix384).

* prefill instance: a MoE model's ``dies`` (EP = dies, attention TP as predict's default),
  prompts per NPU per forward pass. A dense model's instance is one TP group (``attn_tp`` =
  dies; the dense FFN follows attention's TP, as predict does);
* decode instance: a MoE model's ``dies`` (EP = dies, data-parallel attention, or TP groups
  inside the EP group where that helps fit), batch per NPU. A dense model's: one TP group;
* co-located instance (chunked prefill): a decode instance whose every iteration also runs
  ``chunk_tokens`` prompt tokens per NPU in the same forward pass;
* attention-FFN disaggregated decode instance (AFD): ``attention_dies`` holding the requests
  and ``expert_dies`` holding the experts, batch per attention NPU.

Instances of expert parallelism stay inside one scale-up domain (the supernode's UB plane):
predict drops the options beyond it as invalid.
"""

from __future__ import annotations

import math

from ..cost.roofline import tier_for_group

# instance sizes in nodes (x 16 dies on CloudMatrix384: the paper's 32-die prefill and 320-die decode among them)
PREFILL_NODES = (0.5, 1, 2, 3, 4, 6, 8, 12, 16)
DECODE_NODES = (0.5, 1, 2, 3, 4, 6, 8, 10, 12, 16, 20, 24, 32, 40, 48)
AFD_ATTENTION_NODES = (2, 4, 6, 8, 10, 12, 14, 16, 20, 24, 28, 32, 40)
AFD_EXPERT_NODES = (1, 2, 3, 4, 6, 8, 12, 16)
TP_DEGREES = (1, 2, 4, 8, 16)
PREFILL_PROMPTS_PER_NPU = (0.25, 0.5, 1, 2, 4, 8)
DECODE_BATCHES = (1, 2, 4, 8, 12, 16, 24, 32, 40, 48, 56, 64, 72, 80, 88, 96, 104, 112, 120, 128, 144, 160, 176,
                  192, 224, 256)
CHUNK_TOKENS = (32, 64, 128, 256, 512, 1024, 2048, 4096, 8192)


def node_dies(hw) -> int:
    return int(hw.system.node.chips) * int(hw.chip.dies_per_package)


def sizes(hw, nodes, limit_dies: int) -> list[int]:
    """Instance sizes of ``nodes`` nodes of the system, in dies: whole NPUs, at most ``limit_dies``."""
    dies = {round(n * node_dies(hw)) for n in nodes}
    return sorted(d for d in dies if 0 < d <= limit_dies and d % int(hw.chip.dies_per_package) == 0)


def tp_degrees(hw, m, limit_dies: int) -> list[int]:
    """Tensor-parallel degrees an instance may use: dividing the attention heads, inside the
    scale-up domain of the tier a node's collectives use (NVLink: the node; UB: the
    supernode) and within ``limit_dies``."""
    tier = tier_for_group(hw, node_dies(hw))
    domain = hw.system.tiers[tier].domain_chips
    reach = math.inf if domain is None else int(domain) * int(hw.chip.dies_per_package)
    heads = int(m.attention.num_heads)
    return [t for t in TP_DEGREES if heads % t == 0 and t <= min(reach, limit_dies)]


def dense_groups(hw, m, limit_dies: int) -> list[int]:
    """A dense model's instances: one TP group of whole NPUs (data-parallel replicas are more
    instances of the same group)."""
    return [t for t in tp_degrees(hw, m, limit_dies) if t % int(hw.chip.dies_per_package) == 0]


def prefill_rows(hw, m, limit_dies: int, prompt_tokens: float, prompt_len: float, common: dict) -> list[dict]:
    """Prefill options: instance size x prompts per NPU per pass (``prompt_tokens`` computed
    tokens each; a share of a prompt per NPU only while it is a token at least: a 1-token
    prompt is one per NPU or more); a dense model's instance is one TP group."""
    if m.moe is None:
        layouts = [{"dies": t, "ep": t, "attn_tp": t, "redundant_experts": 0, "shared_copies": 0}
                   for t in dense_groups(hw, m, limit_dies)]
    else:
        layouts = [{"dies": d, "ep": d} for d in sizes(hw, PREFILL_NODES, limit_dies)]
    return [{**lay, "tokens_per_npu": k * prompt_tokens, "prompt_len": prompt_len, **common}
            for lay in layouts for k in PREFILL_PROMPTS_PER_NPU if k * prompt_tokens >= 1]  # whole tokens on an NPU


def decode_layouts(hw, m, limit_dies: int) -> list[dict]:
    """Decode instance options: a MoE model's EP = dies with data-parallel attention or TP
    groups inside it; a dense model's one TP group."""
    if m.moe is None:
        return [{"dies": t, "ep": t, "tp": t, "redundant_experts": 0, "shared_copies": 0}
                for t in dense_groups(hw, m, limit_dies)]
    return [{"dies": d, "ep": d, "tp": t} for d in sizes(hw, DECODE_NODES, limit_dies)
            for t in tp_degrees(hw, m, d) if d % t == 0]


def decode_rows(layouts: list[dict], common: dict, batches=DECODE_BATCHES, chunks=(0,)) -> list[dict]:
    """Every decode layout at every batch per NPU (and co-located chunk of prompt tokens per NPU)."""
    return [{**lay, "batch": b, "chunk_tokens": c, **common} for lay in layouts for c in chunks for b in batches]


def afd_rows(hw, m, limit_dies: int, common: dict, batches=DECODE_BATCHES) -> list[dict]:
    """Every attention/expert split within ``limit_dies`` (whole NPUs on each side)."""
    if m.moe is None:
        return []
    rows = []
    for e in sizes(hw, AFD_EXPERT_NODES, limit_dies):
        for a in sizes(hw, AFD_ATTENTION_NODES, limit_dies - e):
            rows += [{"attention_dies": a, "expert_dies": e, "batch": b, **common} for b in batches]
    return rows
