"""Pydantic schemas of the three spec kinds: chip, system, model (docs/specs.md).

Units are SI and appear in field names (``_B``, ``_Bps``, ``_s``, ``_per_s``). Every
hardware number is a :class:`Sourced` value: ``{value: ..., source: "..."}``. Unknown keys
are rejected everywhere (``extra="forbid"``) so that a typo never silently falls back to a
default.
"""

from __future__ import annotations

from typing import Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

DTYPE_BYTES: dict[str, int] = {"bf16": 2, "fp16": 2, "int8": 1}
Dtype = Literal["bf16", "fp16", "int8"]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Sourced(Strict):
    """A number with the place it comes from (paper table, datasheet, or fitted row)."""

    value: float
    source: str = Field(min_length=3)


class Positive(Sourced):
    value: float = Field(gt=0)


class NonNegative(Sourced):
    value: float = Field(ge=0)


class Fraction(Sourced):
    value: float = Field(gt=0, le=1)


class Count(Sourced):
    value: int = Field(gt=0)


# --------------------------------------------------------------------------- chip
class PeakFlops(Strict):
    bf16: Positive
    fp16: Positive
    int8: Positive


class Ports(Strict):
    die_to_die_Bps: Positive
    ub_Bps: Positive
    rdma_Bps: Positive


class Die(Strict):
    cube_cores: Count
    vector_cores: Count
    peak_flops_per_s: PeakFlops
    vector_ops_per_s: Positive
    hbm_capacity_B: Positive
    hbm_bandwidth_Bps: Positive
    ports: Ports


class Efficiency(Strict):
    matmul_compute: Fraction
    matmul_tile_rows: Count
    attention_compute: Fraction
    memory_bandwidth: Fraction


class Latency(Strict):
    kernel_launch_s: NonNegative
    iteration_overhead_s: NonNegative


class ChipMemory(Strict):
    runtime_reserved_B: NonNegative


class ChipSpec(Strict):
    kind: Literal["chip"]
    name: str
    description: str
    dies_per_package: Count
    die: Die
    efficiency: Efficiency
    latency: Latency
    memory: ChipMemory


# --------------------------------------------------------------------------- system
class Node(Strict):
    npus: Count
    cpus: Count
    cpu_ub_Bps: Positive
    l1_switch_chips: Count
    l1_uplink_links: Count
    l1_uplink_link_Bps: Positive


class Supernode(Strict):
    nodes: Count
    racks: Count
    l2_subplanes: Count
    l2_chips_per_subplane: Count
    l2_ports_per_chip: Count
    l2_port_Bps: Positive


class Measured(Strict):
    inter_Bps: float = Field(gt=0)
    intra_Bps: float = Field(gt=0)
    inter_latency_s: float = Field(gt=0)
    intra_latency_s: float = Field(gt=0)
    source: str = Field(min_length=3)


class Tier(Strict):
    scope: Literal["package", "node", "supernode", "cluster", "datacenter"]
    port: Optional[Literal["die_to_die_Bps", "ub_Bps", "rdma_Bps"]] = None
    bandwidth_Bps: Optional[Positive] = None
    node_bandwidth_Bps: Optional[Positive] = None
    latency_s: Positive
    measured: Optional[dict[str, Measured]] = None

    @model_validator(mode="after")
    def _bandwidth_known(self):
        if self.port is None and self.bandwidth_Bps is None and self.node_bandwidth_Bps is None:
            raise ValueError("a tier needs a chip `port`, a `bandwidth_Bps` or a `node_bandwidth_Bps`")
        return self


class Tiers(Strict):
    die_to_die: Tier
    ub: Tier
    rdma: Tier
    vpc: Tier


class Collectives(Strict):
    """Expert-parallel dispatch/combine (docs/model.md §4.2-§4.3)."""

    message_issue_s: NonNegative  # the communication engine's time per token message
    step_time_cv: NonNegative  # spread (std/mean) of a die's load-dependent time between two barriers


class SystemSpec(Strict):
    kind: Literal["system"]
    name: str
    description: str
    chip: str
    node: Node
    supernode: Supernode
    tiers: Tiers
    collectives: Collectives


# --------------------------------------------------------------------------- model
class Attention(Strict):
    type: Literal["mla"]
    num_heads: int = Field(gt=0)
    q_lora_rank: int = Field(gt=0)
    kv_lora_rank: int = Field(gt=0)
    qk_nope_head_dim: int = Field(gt=0)
    qk_rope_head_dim: int = Field(gt=0)
    v_head_dim: int = Field(gt=0)


class DenseFFN(Strict):
    intermediate_size: int = Field(gt=0)


class MoE(Strict):
    routed_experts: int = Field(gt=0)
    experts_per_token: int = Field(gt=0)
    shared_experts: int = Field(ge=0)
    expert_intermediate_size: int = Field(gt=0)
    groups: int = Field(gt=0)
    top_groups: int = Field(gt=0)
    scoring: Literal["sigmoid", "softmax"]

    @model_validator(mode="after")
    def _routing_fits(self):
        if self.experts_per_token > self.routed_experts:
            raise ValueError(f"experts_per_token ({self.experts_per_token}) exceeds routed_experts ({self.routed_experts})")
        if self.top_groups > self.groups:
            raise ValueError(f"top_groups ({self.top_groups}) exceeds groups ({self.groups})")
        return self


class MTP(Strict):
    modules: int = Field(ge=0)
    shares_embedding_and_head: bool


class Precision(Strict):
    matmul: Dtype
    attention: Dtype
    hidden: Dtype
    embedding: Dtype
    head: Dtype
    kv_cache: Dtype


class Imbalance(Sourced):
    value: float = Field(ge=1)


class Serving(Strict):
    default_expert_imbalance: Imbalance


class ModelSpec(Strict):
    kind: Literal["model"]
    name: str
    description: str
    source: str = Field(min_length=3)
    hidden_size: int = Field(gt=0)
    num_layers: int = Field(gt=0)
    first_dense_layers: int = Field(ge=0)
    vocab_size: int = Field(gt=0)
    tie_word_embeddings: bool
    attention: Attention
    dense_ffn: DenseFFN
    moe: MoE
    mtp: MTP
    precision: Precision
    serving: Serving

    @field_validator("first_dense_layers")
    @classmethod
    def _dense_within_layers(cls, v, info):
        n = info.data.get("num_layers")
        if n is not None and v > n:
            raise ValueError(f"first_dense_layers ({v}) exceeds num_layers ({n})")
        return v


SPEC_KINDS = {"chip": ChipSpec, "system": SystemSpec, "model": ModelSpec}
