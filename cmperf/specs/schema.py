"""Pydantic schemas of the three spec kinds: chip, system, model (docs/specs.md).

Units are SI and appear in field names (``_B``, ``_Bps``, ``_s``, ``_per_s``). Every
hardware number is a :class:`Sourced` value: ``{value: ..., source: "..."}``. Unknown keys
are rejected everywhere (``extra="forbid"``) so that a typo never silently falls back to a
default.
"""

from __future__ import annotations

from typing import Annotated, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from .dtypes import DTYPE_BYTES, dtypes_of

Dtype = Literal["bf16", "fp16", "fp8", "hif8", "mxfp8", "int8", "fp4", "mxfp4", "int4"]  # = DTYPE_BYTES (cmperf/specs/dtypes.py)
Confidence = Literal["high", "medium", "low"]


class Strict(BaseModel):
    # strict: a number is a YAML number (not '12' or true), a count a whole one (24, not 24.0)
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class Sourced(Strict):
    """A number with the place it comes from (paper table, datasheet, or fitted row)."""

    value: float = Field(allow_inf_nan=False)
    source: str = Field(min_length=3)


class Positive(Sourced):
    value: float = Field(gt=0, allow_inf_nan=False)


class NonNegative(Sourced):
    value: float = Field(ge=0, allow_inf_nan=False)


class Fraction(Sourced):
    value: float = Field(gt=0, le=1, allow_inf_nan=False)


class Count(Sourced):
    value: int = Field(gt=0)


def _whole_bytes(v: float) -> float:
    if not float(v).is_integer():
        raise ValueError(f"a size in bytes is a whole number (got {v:g})")
    return v


class Bytes(Positive):
    """A size in bytes: positive and whole (64.0e9, not 64.5 or 1e-300)."""

    _whole = field_validator("value")(_whole_bytes)


class NonNegativeBytes(NonNegative):
    _whole = field_validator("value")(_whole_bytes)


class SourcedChoice(Strict):
    """A modelling choice with the evidence for it."""

    value: str
    source: str = Field(min_length=3)


# --------------------------------------------------------------------------- chip
class PeakFlops(Strict):
    """Dense peak per die in each dtype the chip's matrix units run natively (the formats
    and their bytes: cmperf/specs/dtypes.py). ``hif8``: HiFloat8 (Ascend 950); ``mxfp8``,
    ``mxfp4``: the OCP microscaling formats (an E8M0 scale per 32 elements)."""

    bf16: Optional[Positive] = None
    fp16: Optional[Positive] = None
    fp8: Optional[Positive] = None
    hif8: Optional[Positive] = None
    mxfp8: Optional[Positive] = None
    int8: Optional[Positive] = None
    fp4: Optional[Positive] = None
    mxfp4: Optional[Positive] = None
    int4: Optional[Positive] = None

    def dtypes(self) -> list[str]:
        """The dtypes the chip has a peak for, in DTYPE_BYTES order (widest first)."""
        return dtypes_of(self)

    @model_validator(mode="after")
    def _some(self):
        if not self.dtypes():
            raise ValueError(f"give the dense peak of at least one dtype ({', '.join(DTYPE_BYTES)})")
        return self


class Die(Strict):
    """One die: the unit that runs a rank of the parallel configuration."""

    matrix_units: Count  # Ascend: AI Cube cores; NVIDIA: SMs (tensor cores)
    vector_units: Count  # Ascend: AI Vector cores; NVIDIA: SMs (CUDA cores)
    peak_flops_per_s: PeakFlops
    vector_ops_per_s: Positive
    hbm_capacity_B: Bytes
    hbm_bandwidth_Bps: Positive


class AttentionPhases(SourcedChoice):
    """How attention's cube work (scores, values) and vector work (softmax) share time:
    ``chained`` when they run on separate cores and wait on each other block by block
    (Ascend AIC/AIV), ``overlapped`` when one core overlaps them (NVIDIA warp specialisation)."""

    value: Literal["chained", "overlapped"]


class MatmulDtype(Strict):
    """A dtype whose GEMM kernels run at their own efficiency (GB200's NVFP4 GEMMs reach a
    larger fraction of their peak than FP8 ones, with a larger fixed cost)."""

    compute: Fraction  # replaces matmul_compute for this dtype
    kernel_fixed_s: Optional[NonNegative] = None  # added to every kernel launch of a GEMM in this dtype


class Efficiency(Strict):
    matmul_compute: Fraction
    matmul_tile_rows: Count
    matmul_tile_cols: Optional[Count] = None  # a fixed output tile (rows x cols); absent: DeepGEMM's wave heuristic
    matmul_k_overhead: Optional[NonNegative] = None  # reduction steps an output tile's prologue/epilogue costs
    matmul_stream_Bps: Optional[Positive] = None  # operand bytes one matrix unit streams per second (L2/HBM -> unit)
    matmul_overlap_exponent: Optional[Positive] = None  # p of the p-norm of a GEMM's compute and memory terms; absent: max
    matmul_by_dtype: Optional[dict[str, MatmulDtype]] = None

    @model_validator(mode="after")
    def _matmul_fields(self):
        problems = [f"matmul_by_dtype.{d}: not a dtype (expected one of {', '.join(DTYPE_BYTES)})"
                    for d in (self.matmul_by_dtype or {}) if d not in DTYPE_BYTES]
        if self.matmul_overlap_exponent is not None and self.matmul_overlap_exponent.value < 1:
            problems.append(f"matmul_overlap_exponent: expected >= 1 (1 adds the terms), found {self.matmul_overlap_exponent.value}")
        if problems:
            raise ValueError("; ".join(problems))
        return self
    attention_compute: Fraction
    memory_bandwidth: Fraction
    attention_phases: AttentionPhases


class Latency(Strict):
    kernel_launch_s: NonNegative  # fixed cost of one kernel (a GEMM's, as the small-GEMM rows measure it)
    iteration_overhead_s: NonNegative
    # an elementwise (vector) kernel's fixed cost as a share of a GEMM kernel's (docs/model.md
    # §2.9); absent: the same
    vector_launch_ratio: Optional[Fraction] = None


class ChipMemory(Strict):
    runtime_reserved_B: NonNegativeBytes


class AttentionLine(Strict):
    """One stack's attention kernel as a measured table timed it on the chip, for one phase and
    attention kind (docs/model.md §11.3): ``t = call_s + row_s x rows + busy / busy_efficiency``,
    ``busy`` the roofline's busy time of cmperf's attention core at the chip's calibrated
    efficiencies and ``rows`` its query rows (tokens x the share of the model's heads a die
    holds); fitted to the table by python -m cmperf.calibration.tables."""

    call_s: float = Field(ge=0, allow_inf_nan=False)  # fixed time per call, launch included
    row_s: float = Field(ge=0, allow_inf_nan=False)  # per query row at the model's heads (request metadata, split-KV combine)
    busy_efficiency: float = Field(gt=0, allow_inf_nan=False)  # the roofline's busy time over the kernel's
    source: str = Field(min_length=3)


ATTENTION_PHASES = ("prefill", "decode")  # a prompt's attention (prefill passes, co-located chunks), a decode step's
ATTENTION_KINDS = ("gqa", "mla")  # grouped-query (MHA) attention, multi-head latent attention


class ChipSpec(Strict):
    kind: Literal["chip"]
    name: str
    description: str
    vendor: str
    confidence: Confidence  # how well the numbers are sourced (docs/specs.md)
    dies_per_package: Count
    die: Die
    efficiency: Efficiency
    latency: Latency
    memory: ChipMemory
    # measured attention kernels a stack may call (its ``attention``): implementation -> phase
    # (prefill, decode) -> kind (gqa, mla) -> its line (docs/model.md §11.3); absent, or a phase
    # or kind not measured: the roofline at the chip's efficiencies and launch latency
    attention_implementations: Optional[dict[str, dict[str, dict[str, AttentionLine]]]] = None

    @model_validator(mode="after")
    def _attention_keys(self):
        for impl, phases in (self.attention_implementations or {}).items():
            for phase, kinds in phases.items():
                if phase not in ATTENTION_PHASES:
                    raise ValueError(f"attention_implementations.{impl}.{phase}: expected a phase "
                                     f"({', '.join(ATTENTION_PHASES)})")
                bad = [k for k in kinds if k not in ATTENTION_KINDS]
                if bad or not kinds:
                    raise ValueError(f"attention_implementations.{impl}.{phase}: expected attention kinds "
                                     f"{', '.join(ATTENTION_KINDS)} (got {bad[0] if bad else 'none'})")
        return self


# --------------------------------------------------------------------------- system
class Node(Strict):
    chips: Count
    cpus: Optional[Count] = None
    host_memory_B: Optional[Bytes] = None


class UBFabric(Strict):
    """CloudMatrix384's UB switches (paper §3.3.2-§3.3.3): shown by ``hw show``."""

    cpu_ub_Bps: Positive
    l1_switch_chips: Count
    l1_uplink_links: Count
    l1_uplink_link_Bps: Positive
    l2_subplanes: Count
    l2_chips_per_subplane: Count
    l2_ports_per_chip: Count
    l2_port_Bps: Positive


class Measured(Strict):
    inter_Bps: float = Field(gt=0, allow_inf_nan=False)
    intra_Bps: float = Field(gt=0, allow_inf_nan=False)
    inter_latency_s: float = Field(gt=0, allow_inf_nan=False)
    intra_latency_s: float = Field(gt=0, allow_inf_nan=False)
    source: str = Field(min_length=3)


class Tier(Strict):
    """One network tier: the packages one of its domains connects (none: the whole system
    and beyond), its achievable bandwidth per direction per die, and its latency."""

    domain_chips: Optional[Count] = None
    bandwidth_Bps: Positive  # achievable, one direction, per die (or per chip/node, see `per`)
    per: Literal["die", "chip", "node"] = "die"
    nominal_Bps: Optional[Positive] = None
    latency_s: Positive
    measured: Optional[dict[str, Measured]] = None


class MessageFormat(Strict):
    """Bytes of one dispatched token: hidden x dtype bytes + one scale of ``scale_B`` per
    ``scale_block`` elements (0: one per token) + ``header_B``, rounded up to ``align_B``."""

    scale_block: int = Field(ge=0)
    scale_B: int = Field(ge=0)
    header_B: int = Field(ge=0)
    align_B: int = Field(ge=1)
    source: str = Field(min_length=3)


class Route(Strict):
    """How expert-parallel dispatch/combine reach the experts' dies: ``direct`` (every
    message over the innermost listed tier that holds both dies) or ``hierarchical`` (one
    copy per destination domain of the inner tier over the outer tier, then forwarded
    inside the domain: DeepEP's normal kernels). ``transfers``: ``per_token`` (each token is
    one message through the communication engine: Ascend's and DeepEP's low-latency kernels)
    or ``chunked`` (tokens are packed into large buffers per destination, so only bandwidth
    counts: DeepEP's normal kernels)."""

    route: Literal["direct", "hierarchical"]
    tiers: list[str] = Field(min_length=1)  # innermost first
    message: MessageFormat
    transfers: Literal["per_token", "chunked"] = "per_token"
    sm_pair_s: Optional[NonNegative] = None  # SM-seconds per (token, rank of the group); absent: not SM-limited
    source: str = Field(min_length=3)


class Routes(Strict):
    decode: Route
    prefill: Route


class Overlap(Strict):
    """How two microbatches share a die: ``core-split`` (two streams, each owning a share of
    the cores) or ``compute-comm`` (compute on all cores but ``comm_units`` that
    communication holds while it runs; 0 when it only issues remote writes)."""

    style: Literal["core-split", "compute-comm"]
    attention_share: Optional[Fraction] = None
    comm_units: Optional[NonNegative] = None
    source: str = Field(min_length=3)

    @model_validator(mode="after")
    def _style_fields(self):
        if self.style == "core-split" and self.attention_share is None:
            raise ValueError("a core-split overlap needs `attention_share`")
        if self.style == "compute-comm" and self.comm_units is None:
            raise ValueError("a compute-comm overlap needs `comm_units`")
        return self


class Overlaps(Strict):
    decode: Overlap
    prefill: Overlap


class PoolRead(Strict):
    """An NPU reading the pool over one tier, as measured (paper Table 1: NPU-CPU read)."""

    bandwidth_Bps: float = Field(gt=0, allow_inf_nan=False)  # per die, one direction
    latency_s: float = Field(gt=0, allow_inf_nan=False)  # one block fetch
    source: str = Field(min_length=3)


class MemoryPool(Strict):
    """CPU DRAM of all nodes pooled over the scale-up network (EMS, paper §4.4): where cached
    KV blocks and model weights live between uses (docs/model.md §9.5-§9.6)."""

    tier: str  # the tier NPUs read the pool over (a tier without a `reads` entry: its own bandwidth and latency)
    reads: dict[str, PoolRead]  # measured reads per tier
    writes: Optional[dict[str, PoolRead]] = None  # measured writes per tier (absent for a tier: its read's figures)
    dram_per_node_B: Positive
    usable_fraction: Fraction  # share of the DRAM the pool may hold
    block_tokens: Count  # tokens per cached KV block
    block_overhead_s: NonNegative  # a block's lookup, metadata and submission, beyond the wire's latency
    serve_per_node_Bps: Positive  # what one node's memory server copies out of its DRAM per second (shared by its readers)
    model_load_sockets: Count  # CPU sockets that serve one cached model copy to a loading instance
    object_storage_Bps: Positive  # one object-storage bucket's read bandwidth
    object_storage_buckets: Count  # buckets a model is striped over
    source: str = Field(min_length=3)


COLLECTIVE_KINDS = ("all_reduce", "all_gather", "all_to_all", "expert_all_to_all")  # Op.collective (cmperf/cost/roofline.py)
FLOOR_KINDS = COLLECTIVE_KINDS[:3]  # the kinds whose per-call floor every system states


class Protocols(Strict):
    """One all-reduce implementation's measured time per call at one group size (docs/model.md
    §4.5): the faster of a low-latency and a high-bandwidth line, ``t = min(small_floor_s + x /
    small_Bps, large_floor_s + x / large_Bps)``, x a die's ring bytes of the call (2 (n - 1) / n
    of the buffer), as the library picks its protocol by size; fitted to a measured table."""

    small_floor_s: float = Field(ge=0, allow_inf_nan=False)
    small_Bps: float = Field(gt=0, allow_inf_nan=False)
    large_floor_s: float = Field(ge=0, allow_inf_nan=False)
    large_Bps: float = Field(gt=0, allow_inf_nan=False)
    source: str = Field(min_length=3)


class Collectives(Strict):
    """Expert-parallel dispatch/combine (docs/model.md §4.2-§4.3) and the per-call floor of
    every collective (docs/model.md §4.5)."""

    message_issue_s: NonNegative  # the communication engine's time per token message
    step_time_cv: NonNegative  # spread (std/mean) of a die's load-dependent time between two barriers
    # measured time of one call at small sizes, per collective kind and tier (docs/model.md
    # §4.5): required for every kind of FLOOR_KINDS, over the same tiers each; expert_all_to_all
    # (dispatch/combine) may be left out: none beyond its kernel's launch and barrier rounds
    call_floor_s: dict[str, dict[str, NonNegative]]
    # measured all-reduce implementations a stack may call (its ``all_reduce``): implementation ->
    # tier -> group size ("tp2", "tp4", "tp8") -> its two lines (docs/model.md §4.5); absent: the
    # floor above for every stack
    all_reduce_implementations: Optional[dict[str, dict[str, dict[str, Protocols]]]] = None

    @model_validator(mode="after")
    def _implementation_sizes(self):
        for impl, tiers in (self.all_reduce_implementations or {}).items():
            for tier, sizes in tiers.items():
                bad = [k for k in sizes if not (k.startswith("tp") and k[2:].isdigit() and int(k[2:]) > 1)]
                if bad or not sizes:
                    raise ValueError(f"all_reduce_implementations.{impl}.{tier}: expected group sizes tp2, tp4, ... "
                                     f"(got {bad[0] if bad else 'none'})")
        return self

    @model_validator(mode="after")
    def _floor_kinds(self):
        floors = self.call_floor_s
        bad = [k for k in floors if k not in COLLECTIVE_KINDS]
        if bad:
            raise ValueError(f"call_floor_s.{bad[0]}: not a collective kind (expected one of {', '.join(COLLECTIVE_KINDS)})")
        missing = [k for k in FLOOR_KINDS if k not in floors]
        if missing:  # a floor left out would be a collective of no floor (0 s), said nowhere
            raise ValueError(f"call_floor_s.{missing[0]}: required (every system states a floor per tier for each of "
                             f"{', '.join(FLOOR_KINDS)}; docs/model.md §4.5)")
        tiers = [t for k in FLOOR_KINDS for t in floors[k]]
        for k in FLOOR_KINDS:
            lost = [t for t in dict.fromkeys(tiers) if t not in floors[k]]
            if lost:
                others = ", ".join(o for o in FLOOR_KINDS if o != k and lost[0] in floors[o])
                raise ValueError(f"call_floor_s.{k}.{lost[0]}: required ({others} state a floor for tier {lost[0]}; "
                                 f"each of {', '.join(FLOOR_KINDS)} states one per tier)")
        return self


class DecodeInstance(Strict):
    """The decode instance a system is usually run with (docs/model.md §10): every field a
    ``predict decode`` input the user may leave unset. Absent fields are derived."""

    dies: Optional[int] = Field(default=None, gt=0)  # for the system's reference model; other models scale it
    instances: Optional[int] = Field(default=None, gt=0)  # decode instances of the published deployment (simulate's default)
    tp: Optional[int] = Field(default=None, gt=0)  # attention/dense-FFN tensor parallelism of a MoE model
    batch: Optional[float] = Field(default=None, gt=0, allow_inf_nan=False)  # requests per NPU (capped by memory)
    mtp: Optional[bool] = None  # multi-token prediction (off for a model without an MTP module)
    shared_copies_per_die: float = Field(gt=0, le=1, allow_inf_nan=False)  # 1: a copy on every die
    redundant_per_die: int = Field(ge=0)  # spare routed copies per die, at least (then topped up to whole experts)
    source: str = Field(min_length=3)

    _sized = model_validator(mode="after")(lambda self: _published_size(self))


class PrefillInstance(Strict):
    """The prefill instance a system is usually run with (docs/model.md §10)."""

    dies: Optional[int] = Field(default=None, gt=0)
    instances: Optional[int] = Field(default=None, gt=0)  # prefill instances of the published deployment
    attn_tp: Optional[int] = Field(default=None, gt=0)
    tokens_per_npu: Optional[float] = Field(default=None, gt=0, allow_inf_nan=False)  # capped by memory
    shared_copies_per_die: float = Field(gt=0, le=1, allow_inf_nan=False)
    redundant_per_die: int = Field(ge=0)
    source: str = Field(min_length=3)

    _sized = model_validator(mode="after")(lambda self: _published_size(self))


def _published_size(group):
    """A published deployment's instance count needs the instances' size: ``instances``
    without ``dies`` would be that many instances of a derived size, never published."""
    if group.instances is not None and group.dies is None:
        raise ValueError(f"`instances` {group.instances} needs `dies` (the size of the published instances; "
                         f"leave both out to derive the instance)")
    return group


class Deployment(Strict):
    """How the system is usually deployed: its published instances (for ``model``, the model
    they were published with) and the rules that adapt them to another model (docs/model.md §10)."""

    model: Optional[str] = None  # the reference model of the published instance sizes
    stack: Optional[str] = None  # the serving stack the system usually runs (stacks/NAME.yaml); none: the bare cost model
    max_weight_share: Fraction  # an instance is at least large enough that weights take this share of a die's HBM
    decode: DecodeInstance
    prefill: PrefillInstance
    source: str = Field(min_length=3)


class SystemSpec(Strict):
    kind: Literal["system"]
    name: str
    description: str
    chip: str
    confidence: Confidence
    node: Node
    nodes: Count  # nodes in the system
    racks: Optional[Count] = None
    ub_fabric: Optional[UBFabric] = None
    tiers: dict[str, Tier]  # ordered, innermost first; names are free
    kv_transfer_tier: str  # the tier prefill sends the KV cache to decode over
    expert_parallel: Routes
    overlap: Overlaps
    collectives: Collectives
    memory_pool: Optional[MemoryPool] = None
    deployment: Optional[Deployment] = None  # absent: the generic defaults of cmperf/defaults.py (docs/model.md §10)

    @model_validator(mode="after")
    def _tiers_consistent(self):
        problems = system_reference_problems(self.model_dump())
        if problems:
            raise ValueError("; ".join(problems))
        return self


def system_reference_problems(raw) -> list[str]:
    """What a system file's fields say about each other (tier names an EP route or the KV
    transfer uses, their order, domain sizes), checked on the raw mapping so that the loader
    can report these together with every field error."""
    if not isinstance(raw, dict) or not isinstance(raw.get("tiers"), dict):
        return []
    tiers = raw["tiers"]
    names = list(tiers)
    problems = [] if tiers else ["`tiers` needs at least one tier"]

    def domain(t):
        d = t.get("domain_chips") if isinstance(t, dict) else None
        v = d.get("value") if isinstance(d, dict) else None
        return v if isinstance(v, (int, float)) and not isinstance(v, bool) else None  # other values: a field error

    refs = [("kv_transfer_tier", raw.get("kv_transfer_tier"))]
    if isinstance(raw.get("memory_pool"), dict):
        refs.append(("memory_pool.tier", raw["memory_pool"].get("tier")))
    routes = raw.get("expert_parallel") if isinstance(raw.get("expert_parallel"), dict) else {}
    for ph, r in routes.items():
        if isinstance(r, dict) and isinstance(r.get("tiers"), list):
            refs += [(f"expert_parallel.{ph}.tiers", t) for t in r["tiers"]]
            order = [names.index(t) for t in r["tiers"] if isinstance(t, str) and t in tiers]
            if order != sorted(order):
                problems.append(f"`expert_parallel.{ph}.tiers` must list tiers innermost first, as `tiers` does")
            if r.get("route") == "hierarchical" and len(r["tiers"]) != 2:
                problems.append(f"`expert_parallel.{ph}`: a hierarchical route needs two tiers, inner then outer")
    coll = raw.get("collectives") if isinstance(raw.get("collectives"), dict) else {}
    floors = coll.get("call_floor_s") if isinstance(coll.get("call_floor_s"), dict) else {}
    refs += [(f"collectives.call_floor_s.{k}", t) for k, per in floors.items() if isinstance(per, dict) for t in per]
    for where, t in refs:
        if isinstance(t, str) and t not in tiers:  # another type: a field error
            problems.append(f"`{where}` names tier '{t}', which `tiers` does not define (tiers: {', '.join(names)})")
    sizes = [(n, domain(t)) for n, t in tiers.items()]
    for (n1, d1), (n2, d2) in zip(sizes, sizes[1:]):
        if (d1 is None and d2 is not None) or (d1 is not None and d2 is not None and d2 < d1):
            problems.append(f"tier '{n2}' must connect at least as many chips as the tier inside it, '{n1}'")
    return problems + _route_problems(raw, tiers, dict(sizes))


def _number(x):
    """A raw field's number (a sourced pair's value), None for anything else (a field error)."""
    v = x.get("value") if isinstance(x, dict) else x
    return v if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _chips(n) -> str:
    return f"{n:,} chip" + ("" if n == 1 else "s")


def _route_problems(raw: dict, tiers: dict, domains: dict) -> list[str]:
    """What no real system can be (docs/specs.md, "Impossible routes"): a domain of more chips
    than the system has, a tier faster than its nominal rate, a KV transfer over a tier that
    connects no two packages (the die-to-die link inside one), a pool read over a tier that
    does not reach every node's DRAM."""
    problems = []
    node = raw.get("node") if isinstance(raw.get("node"), dict) else {}
    nodes, per_node = _number(raw.get("nodes")), _number(node.get("chips"))
    chips = nodes * per_node if nodes is not None and per_node is not None else None
    for name, t in tiers.items():
        d = domains.get(name)
        if chips is not None and d is not None and d > chips:
            problems.append(f"tier '{name}' connects {d:,} chips per domain, more than the system's {chips:,} "
                            f"(nodes x node.chips)")
        if isinstance(t, dict):
            bw, nominal = _number(t.get("bandwidth_Bps")), _number(t.get("nominal_Bps"))
            if bw is not None and nominal is not None and bw > nominal * (1 + 1e-9):
                problems.append(f"tier '{name}': achievable bandwidth_Bps {bw:g} is above its nominal_Bps {nominal:g}")
    kv = raw.get("kv_transfer_tier")
    if isinstance(kv, str) and domains.get(kv) is not None and domains[kv] < 2:
        problems.append(f"`kv_transfer_tier` '{kv}' connects {_chips(domains[kv])} per domain (a link inside one package): "
                        f"it cannot carry the KV cache from a prefill instance to a decode instance")
    pool = raw.get("memory_pool") if isinstance(raw.get("memory_pool"), dict) else {}
    tier = pool.get("tier")
    if isinstance(tier, str) and chips is not None and domains.get(tier) is not None and domains[tier] < chips:
        problems.append(f"`memory_pool.tier` '{tier}' connects {_chips(domains[tier])} per domain: the pool, the CPU DRAM of "
                        f"every node, is read over a tier that reaches all {chips:,} chips")
    return problems


# --------------------------------------------------------------------------- model
class MLA(Strict):
    """Multi-head latent attention (DeepSeek-V2/V3, Kimi K2): a compressed KV latent of
    ``kv_lora_rank`` plus a shared RoPE key is cached per token and layer."""

    type: Literal["mla"]
    num_heads: int = Field(gt=0)
    q_lora_rank: Optional[int] = Field(default=None, gt=0)  # None: q projected straight from the hidden state
    kv_lora_rank: int = Field(gt=0)
    qk_nope_head_dim: int = Field(gt=0)
    qk_rope_head_dim: int = Field(gt=0)
    v_head_dim: int = Field(gt=0)


class GQA(Strict):
    """Grouped-query attention (Llama, Qwen, Mixtral; MHA when num_kv_heads = num_heads):
    a key and a value of ``head_dim`` per KV head are cached per token and layer.

    ``sliding_window``: the tokens a ``window`` layer of ``layer_pattern`` attends and keeps
    (gpt-oss: 128); ``sinks``: one learned logit per head joins every softmax (gpt-oss);
    ``output_gate``: the query projection also emits a sigmoid gate per head dimension that
    scales the attention output before ``o`` (Qwen3-Next's gated attention)."""

    type: Literal["gqa"]
    num_heads: int = Field(gt=0)
    num_kv_heads: int = Field(gt=0)
    head_dim: int = Field(gt=0)
    qk_norm: bool = False  # RMSNorm on q and k per head (Qwen3)
    sliding_window: Optional[int] = Field(default=None, gt=0)
    sinks: bool = False
    output_gate: bool = False

    @model_validator(mode="after")
    def _groups(self):
        if self.num_heads % self.num_kv_heads:
            raise ValueError(f"num_kv_heads ({self.num_kv_heads}) must divide num_heads ({self.num_heads})")
        return self


class Indexer(Strict):
    """DeepSeek-V3.2's lightning indexer (DSA): per query token, ``heads`` x ``head_dim``
    scores against one cached indexer key per token (its own cache: ``head_dim`` values in
    ``precision.indexer`` plus ``scale_B`` of scale when that dtype is 8-bit or narrower),
    then the ``topk`` best keys are the only ones the MLA core attends."""

    heads: int = Field(gt=0)
    head_dim: int = Field(gt=0)
    topk: int = Field(gt=0)
    scale_B: int = Field(default=4, ge=0)  # one FP32 scale per cached key (vLLM's 132 B layout)


class SparseMLA(MLA):
    """MLA whose core attends only the keys a lightning indexer selects (DSA, DeepSeek-V3.2)."""

    type: Literal["dsa"]
    indexer: Indexer

    @model_validator(mode="after")
    def _query_latent(self):
        if self.q_lora_rank is None:
            raise ValueError("a DSA indexer projects its queries from the MLA query latent: give `q_lora_rank`")
        return self


Attention = Annotated[Union[MLA, SparseMLA, GQA], Field(discriminator="type")]

StateDtype = Literal["bf16", "fp16", "fp32"]  # bytes: cmperf.cost.arch.STATE_DTYPE_BYTES
LayerKind = Literal["full", "window", "linear"]


class LinearAttention(Strict):
    """Gated DeltaNet (Qwen3-Next's linear-attention layers): a causal depthwise conv1d of
    ``conv_kernel`` taps over q, k and v, then a gated delta-rule recurrence whose state is
    one ``key_head_dim`` x ``value_head_dim`` matrix per value head, of fixed size whatever
    the context (kept in ``state_dtype``). ``value_heads`` is a multiple of ``key_heads``
    (each key head serves value_heads / key_heads value heads)."""

    type: Literal["gated_deltanet"]
    key_heads: int = Field(gt=0)
    value_heads: int = Field(gt=0)
    key_head_dim: int = Field(gt=0)
    value_head_dim: int = Field(gt=0)
    conv_kernel: int = Field(gt=0)
    state_dtype: StateDtype

    @model_validator(mode="after")
    def _heads(self):
        if self.value_heads % self.key_heads:
            raise ValueError(f"key_heads ({self.key_heads}) must divide value_heads ({self.value_heads})")
        return self


class DenseFFN(Strict):
    intermediate_size: int = Field(gt=0)


class MoE(Strict):
    routed_experts: int = Field(gt=0)
    experts_per_token: int = Field(gt=0)
    shared_experts: int = Field(ge=0)
    expert_intermediate_size: int = Field(gt=0)
    groups: int = Field(default=1, gt=0)
    top_groups: int = Field(default=1, gt=0)
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
    shares_embedding_and_head: bool = True


class Precision(Strict):
    """Dtype of each tensor family. ``experts`` (the MoE grouped GEMMs and the dispatched
    tokens) defaults to ``matmul``: set it for FP4 experts under FP8 attention (Blackwell).
    ``weights`` and ``expert_weights`` are how weights are *stored* when that differs from the
    dtype their GEMMs compute in: W4A8 stores INT4 weights and dequantises them into INT8 GEMMs
    (Ascend W4A8); they default to ``matmul`` and to ``weights`` (else ``experts``)."""

    matmul: Dtype  # attention and dense projections: the GEMMs' compute dtype
    attention: Dtype  # attention core (QK^T, softmax, PV)
    hidden: Dtype  # residual stream and matmul outputs (combine messages)
    embedding: Dtype
    head: Dtype
    kv_cache: Dtype
    experts: Optional[Dtype] = None
    weights: Optional[Dtype] = None  # storage of the attention / dense / MTP projection weights
    expert_weights: Optional[Dtype] = None  # storage of the expert weights
    indexer: Optional[Dtype] = None  # a DSA indexer's scores and its key cache (default: attention)


class Imbalance(Sourced):
    value: float = Field(ge=1, allow_inf_nan=False)


class Serving(Strict):
    default_expert_imbalance: Imbalance


MAX_CONTEXT = 1_000_000_000  # tokens: as the scenario inputs (cmperf/scenario.py MAX_INPUT)


class ContextTokens(Strict):
    """The longest context the model supports (config.json ``max_position_embeddings``)."""

    value: int = Field(ge=1, le=MAX_CONTEXT)
    source: str = Field(min_length=3)


class ModelSpec(Strict):
    kind: Literal["model"]
    name: str
    description: str
    source: str = Field(min_length=3)
    # architecture numbers copied from an official config.json are "high"; lower it for
    # a model whose numbers are reconstructed or reported second-hand
    confidence: Confidence = "high"
    hidden_size: int = Field(gt=0)
    num_layers: int = Field(gt=0)
    first_dense_layers: int = Field(ge=0)  # dense (FFN) layers before the MoE layers; all, when no `moe`
    vocab_size: int = Field(gt=0)
    tie_word_embeddings: bool
    # the longest context it supports: a prediction past it gets a warning (absent: unknown)
    max_context_tokens: Optional[ContextTokens] = None
    attention: Attention
    # attention of each layer, repeated over the layers (absent: every layer `full`): `full`
    # attends the whole context with `attention`, `window` its last `attention.sliding_window`
    # tokens, `linear` runs `linear_attention` instead
    layer_pattern: Optional[list[LayerKind]] = Field(default=None, min_length=1)
    linear_attention: Optional[LinearAttention] = None
    dense_ffn: Optional[DenseFFN] = None
    moe: Optional[MoE] = None
    mtp: MTP = MTP(modules=0)
    precision: Precision
    serving: Optional[Serving] = None

    @model_validator(mode="after")
    def _layers_consistent(self):
        problems = []
        if self.first_dense_layers > self.num_layers:
            problems.append(f"first_dense_layers ({self.first_dense_layers}) exceeds num_layers ({self.num_layers})")
        if self.moe is None and self.first_dense_layers != self.num_layers:
            problems.append(f"a model without `moe` is dense: first_dense_layers must equal num_layers ({self.num_layers})")
        if self.first_dense_layers > 0 and self.dense_ffn is None:
            problems.append("dense layers need `dense_ffn`")
        if self.moe is not None and self.serving is None:
            problems.append("a MoE model needs `serving.default_expert_imbalance`")
        if self.mtp.modules > 0 and self.moe is None:
            problems.append("an MTP module is a MoE block here: it needs `moe`")
        problems += self._pattern_problems()
        if problems:
            raise ValueError("; ".join(problems))
        return self

    def _pattern_problems(self) -> list[str]:
        """What ``layer_pattern`` needs of the other attention fields, and they of it."""
        pattern = self.layer_pattern or ["full"]
        a, problems = self.attention, []
        if self.num_layers % len(pattern):
            problems.append(f"layer_pattern has {len(pattern)} entries, which does not divide num_layers "
                            f"({self.num_layers}): give a pattern that repeats over the layers, or one entry per layer")
        window = getattr(a, "sliding_window", None)
        if "window" in pattern and window is None:
            problems.append("layer_pattern has `window` layers: they need `attention.sliding_window` "
                            "(a GQA attention's window in tokens)")
        if window is not None and "window" not in pattern:
            problems.append(f"attention.sliding_window ({window}) is set but no layer of layer_pattern is `window` "
                            "(give e.g. layer_pattern: [window] for every layer)")
        if "linear" in pattern and self.linear_attention is None:
            problems.append("layer_pattern has `linear` layers: they need a `linear_attention` section")
        if self.linear_attention is not None and "linear" not in pattern:
            problems.append("`linear_attention` is given but no layer of layer_pattern is `linear`")
        if self.precision.indexer is not None and a.type != "dsa":
            problems.append(f"precision.indexer ({self.precision.indexer}) is the dtype of a DSA indexer: "
                            f"attention type '{a.type}' has none")
        return problems


# --------------------------------------------------------------------------- serving stack
class SourcedInt(Strict):
    value: int = Field(ge=0)
    source: str = Field(min_length=3)


# Bounds of a stack's facts (docs/model.md §11): past them a value no longer describes software.
MAX_RUNNING_PER_RANK = 100_000  # decode requests one DP rank holds: SGLang/vLLM defaults are 256-4096
MAX_PASS_TOKENS = 10_000_000  # prompt tokens in one prefill pass (or one chunk): 16K-32K are the published defaults
MAX_PASS_REQUESTS = 100_000  # prompts in one prefill pass
MAX_BLOCK_TOKENS = 1_000_000  # tokens per KV page: 1-512 published (paper §4.4: 128-512)
MAX_DRAFT_TOKENS = 64  # speculative tokens per step: 1-7 published (EAGLE-3 drafts up to 8)
MAX_HOST_S = 1.0  # host time per launch, iteration or pass: microseconds to milliseconds are published


def _count(name: str, low: int, high: int, doc: str):
    """A sourced whole number from ``low`` to ``high`` (a stack's limit or count)."""
    from pydantic import create_model

    return create_model(name, __base__=SourcedInt, __doc__=doc, value=(int, Field(ge=low, le=high)))


# A batching limit is at least 1: a limit of 0 admits nothing and the run never ends.
RunningLimit = _count("RunningLimit", 1, MAX_RUNNING_PER_RANK, "Decode requests one DP-attention rank holds at most.")
PassTokens = _count("PassTokens", 1, MAX_PASS_TOKENS, "Prompt tokens one prefill pass takes at most.")
PassRequests = _count("PassRequests", 1, MAX_PASS_REQUESTS, "Prompts one prefill pass takes at most.")
ChunkTokens = _count("ChunkTokens", 0, MAX_PASS_TOKENS, "0: a prompt is prefilled whole; else chunks of at most this many tokens.")
BlockTokens = _count("BlockTokens", 1, MAX_BLOCK_TOKENS, "Tokens per KV page.")
DraftTokens = _count("DraftTokens", 0, MAX_DRAFT_TOKENS, "Speculative tokens verified per request and step (0: no MTP).")


class CacheShare(Sourced):
    """A share of the HBM an instance leaves free that holds cached prefixes: 0 (none) to 1."""

    value: float = Field(ge=0, le=1, allow_inf_nan=False)


class HostSeconds(NonNegative):
    """A host time in seconds: 0 (hidden) up to MAX_HOST_S."""

    value: float = Field(ge=0, le=MAX_HOST_S, allow_inf_nan=False)


class SourcedBool(Strict):
    value: bool
    source: str = Field(min_length=3)


class GraphMode(SourcedChoice):
    value: Literal["graph", "eager"]


class DPBalance(SourcedChoice):
    """How a decode instance's router places a new request on a data-parallel attention rank:
    ``round_robin`` (SGLang's decode_round_robin) or ``least_kv`` (the rank with the least KV
    in use, xDeepServe)."""

    value: Literal["round_robin", "least_kv"]


class PrefillRouter(SourcedChoice):
    """Where a PD deployment's router sends a request's prompt (docs/model.md §12.3):
    ``round_robin`` or ``random`` to one prefill instance's own queue at its arrival (SGLang's
    MiniLB picks at random), ``least_load`` to the instance with the fewest prompts waiting or
    in its pass, ``shared`` to one queue every instance takes from when it frees (a pull model)."""

    value: Literal["round_robin", "random", "least_load", "shared"]


class ExpertBalance(SourcedChoice):
    """``eplb``: redundant experts re-placed from load statistics (the cost model's balanced
    load, imbalance 1.0); ``none``: the model's measured default imbalance."""

    value: Literal["eplb", "none"]


class Fusion(Strict):
    """Kernels a stack runs as one (cmperf/cost/fusion.py): each group lists, in dataflow order,
    adjacent kernels of cmperf/specs/kernels.py KERNELS; a fused group pays one launch and does
    not re-read what one member hands the next."""

    value: list[list[str]]
    source: str = Field(min_length=3)

    @model_validator(mode="after")
    def _known(self):
        from .kernels import KERNELS

        for i, group in enumerate(self.value):
            bad = [k for k in group if k not in KERNELS]
            if bad:
                raise ValueError(f"fusion group {i + 1}: '{bad[0]}' is not a kernel (expected one of {', '.join(KERNELS)})")
            if len(group) < 2:
                raise ValueError(f"fusion group {i + 1}: a group fuses at least two kernels (found {group})")
        return self


class StackSpec(Strict):
    """A serving stack (CloudMatrix-Infer, xDeepServe, SGLang, vLLM, ...): facts of the
    software that runs the model, each with its source (docs/model.md §11). A profile states
    what the stack does — graph mode, its host time per iteration, its batching limits, its
    MTP and balancing — never a throughput factor."""

    kind: Literal["stack"]
    name: str
    description: str
    confidence: Confidence
    source: str = Field(min_length=3)
    vendors: Optional[list[str]] = None  # the chip vendors it runs on (chip.vendor: huawei, nvidia, amd); none: any
    decode_graph: GraphMode  # graph: one launch per decode graph (the chip's kernel_launch_s per op); eager: host-paced
    prefill_graph: GraphMode
    eager_launch_s: HostSeconds  # host time to launch one operator in eager mode
    scheduler_overhead_s: HostSeconds  # host time per decode iteration the device waits for (0 when overlapped)
    prefill_overhead_s: HostSeconds  # host time per prefill pass the device waits for
    # host and seam time of a step (cmperf/cost/host.py, docs/model.md §11.1); absent: 0 / off
    graph_launch_s: Optional[HostSeconds] = None  # host time to launch (replay) one captured graph
    graph_node_s: Optional[HostSeconds] = None  # host time per node of a replayed graph
    spec_seam_s: Optional[HostSeconds] = None  # one eager seam between a speculative step's graphs (device idle)
    spec_step_s: Optional[HostSeconds] = None  # host-built metadata of a speculative step, once per step (device idle)
    draft_extend_graph: Optional[SourcedBool] = None  # a speculative step ends with a draft-extend graph (SGLang spec v2)
    spec_pipeline: Optional[SourcedBool] = None  # a speculative step's graphs issued back to back, no seams (CloudMatrix-Infer)
    dp_sync: Optional[SourcedBool] = None  # the scheduler all-gathers its metadata across DP-attention ranks each step
    dp_sync_hop_s: Optional[HostSeconds] = None  # one hop of that CPU all-gather (a ring: ranks - 1 hops)
    host_sync_s: Optional[HostSeconds] = None  # device idle per device-to-host sync (read, host work, re-issue)
    prefill_request_s: Optional[HostSeconds] = None  # host work per prompt of a prefill pass, per DP rank (device idle)
    # share of the chip's calibrated attention rates the stack's attention backend reaches on a
    # prompt's attention (prefill passes and co-located chunks; docs/model.md §11.2); absent: 1
    prefill_attention_efficiency: Optional[Fraction] = None
    dispatch_host_syncs: Optional[SourcedInt] = None  # host syncs per normal-mode dispatch round (prefill)
    dispatch_round_tokens: Optional[SourcedInt] = None  # tokens per die a normal-mode dispatch round takes (0: one round)
    two_batch_overlap: SourcedBool  # two microbatches in decode and prefill (the faster, 'auto'), else one
    mtp_draft_tokens: DraftTokens  # speculative tokens verified per request and step (0: no MTP)
    mtp_acceptance: Fraction  # acceptance of each draft token (accept length 1 + a + ... + a^k)
    max_running_per_rank: Optional[RunningLimit] = None  # decode requests one DP-attention rank holds at most
    max_prefill_tokens: PassTokens  # prompt tokens one prefill pass takes at most (per instance)
    max_prefill_requests: Optional[PassRequests] = None  # prompts one prefill pass takes at most (per instance)
    chunked_prefill_tokens: ChunkTokens  # 0: a prompt is prefilled whole; else chunks of at most this many
    # SGLang's prefill delayer (DP attention, co-located): new prompts wait until every rank can
    # prefill at once, at most this many forward passes less one (docs/model.md §12.3); absent or 0: off
    prefill_delay_passes: Optional[SourcedInt] = None
    # a co-located iteration mixes its prompt chunk into the decode batch (one engine step: vLLM
    # V1, Sarathi); off: the prompts run as their own extend forward and the iteration pays a
    # prefill pass's host terms too (SGLang without --enable-mixed-chunk; cmperf/cost/host.py); absent: on
    mixed_chunks: Optional[SourcedBool] = None
    # a co-located iteration's token budget (the stack's chunk) is shared with its decode batch:
    # each running request takes its 1 + draft tokens of it first, the prompts the rest (vLLM V1's
    # scheduler: RUNNING before WAITING from one token_budget; docs/model.md §12.3); absent: off
    budget_counts_decode: Optional[SourcedBool] = None
    kv_block_tokens: BlockTokens  # tokens per KV page / block
    # share of an instance's free HBM that keeps computed prefixes' KV for reuse (RadixAttention,
    # vLLM automatic prefix caching; docs/model.md §9.5); absent: 1 (every free page)
    prefix_cache_hbm_share: Optional[CacheShare] = None
    dp_balance: DPBalance
    # the all-reduce implementation the stack calls within a node (a key of the system's
    # collectives.all_reduce_implementations; absent, or not measured on the system: its call_floor_s)
    all_reduce: Optional[SourcedChoice] = None
    # the attention kernels the stack calls (a key of the chip's attention_implementations; absent,
    # or not measured on the chip: the roofline at the chip's efficiencies)
    attention: Optional[SourcedChoice] = None
    # how prompts reach a PD deployment's prefill instances; absent: round_robin (cmperf/simulate/engine.py)
    prefill_router: Optional[PrefillRouter] = None
    expert_balance: ExpertBalance
    fusion: Optional[Fusion] = None  # absent: every kernel of cmperf/specs/kernels.py launched on its own


SPEC_KINDS = {"chip": ChipSpec, "system": SystemSpec, "model": ModelSpec, "stack": StackSpec}
