"""Derived facts of the specs, computed, never typed in: ``cmperf model show`` and
``cmperf hw show`` (docs/specs.md §Derived facts). Each fact is a record
(section, quantity, value, unit); the CLI renders them as a table, JSON or CSV."""

from __future__ import annotations

from .cost import arch
from .cost.ops import combine_message_B, dispatch_message_B, experts_dtype, flops_per_token
from .cost.roofline import matmul_dtype, sync_round_s, tier_bandwidth_Bps
from .specs.loader import Hardware
from .specs.schema import DTYPE_BYTES, ChipSpec, ModelSpec
from .specs.view import HardwareView, SpecView


def _r(section, quantity, value, unit, note="", field=None):
    """A fact; ``field`` is the spec path (for --set) when the fact is one spec field's value."""
    out = {"section": section, "quantity": quantity, "value": value, "unit": unit, "note": note}
    return {**out, "field": field} if field else out


def model_facts(m: ModelSpec, context: int = 4096) -> list[dict]:
    pb = arch.param_breakdown(m)
    out = [_r("parameters", "total (main model, without MTP)", pb.total, "params", "what a model's size counts"),
           _r("parameters", "total with MTP module (as on disk)", pb.total_with_mtp, "params",
              "MTP block + its own embedding/head copies"),
           _r("parameters", "activated per token (matmuls)", arch.activated_matmul_params(m), "params",
              "attention + dense FFN + top-k routed + shared experts + router + LM head")]
    for part in ("attention", "dense_ffn", "routed_experts", "shared_experts", "router", "norms", "embedding", "head", "mtp"):
        out.append(_r("parameters by part", part, getattr(pb, part), "params"))
    out.append(_r("parameters by part", "mtp embedding+head copies", pb.mtp_embedding_and_head_copies, "params",
                  "shared with the main model at run time"))
    out.append(_r("layers", "dense / MoE / MTP", f"{m.first_dense_layers} / {arch.moe_layers(m)} / {m.mtp.modules}", ""))
    a = m.attention
    counts = arch.layer_counts(m)
    if set(counts) != {"full"}:
        out.append(_r("layers", "attention full / window / linear",
                      " / ".join(str(counts.get(k, 0)) for k in ("full", "window", "linear")), "",
                      f"layer_pattern {', '.join(m.layer_pattern)} repeated"))
    per_layer = (f"({a.kv_lora_rank} + {a.qk_rope_head_dim})" if arch.is_mla(m)
                 else f"2 x {a.num_kv_heads} KV heads x {a.head_dim}")
    indexer = (f" + indexer key {arch.indexer_key_B(m, DTYPE_BYTES[m.precision.indexer or m.precision.attention]):g} B"
               if arch.is_dsa(m) else "")
    for dt, b in DTYPE_BYTES.items():
        if dt in ("fp16", "int8"):
            continue
        per_token = f"({per_layer} x {b:g} B{indexer})" if indexer else f"{per_layer} x {b:g} B"
        out.append(_r("KV cache per token", dt, arch.kv_bytes_per_token(m, b), "B",
                      f"{per_token} x {counts.get('full', 0)} full-attention layers"))
        kv = arch.kv_cache(m, b)
        if counts.get("window"):
            out.append(_r("KV cache per sequence, window layers", dt, kv.window_B * kv.window, "B",
                          f"{per_layer} x {counts['window']} layers x {b:g} B x at most {kv.window:g} tokens"))
    if counts.get("linear"):
        la = m.linear_attention
        out.append(_r("state per sequence, linear layers", la.state_dtype, arch.kv_cache(m, 2).state_B, "B",
                      f"({la.value_heads} x {la.key_head_dim} x {la.value_head_dim} + conv {la.conv_kernel - 1} x "
                      f"{arch.linear_dims(m)['conv']}) x {counts['linear']} layers, any context"))
    if m.moe is not None:
        out.append(_r("EP messages", "dispatch per token per expert", dispatch_message_B(m), "B",
                      f"{experts_dtype(m).upper()} hidden + one FP32 scale, 512 B aligned (the CloudMatrix384 format)"))
        out.append(_r("EP messages", "combine per token per expert", combine_message_B(m), "B", f"{m.precision.hidden.upper()} hidden"))
    for phase, note in (("decode", f"one new token attending to {context} cached tokens"),
                        ("prefill", f"average token of a {context}-token prompt (causal)")):
        for part, v in flops_per_token(m, context, phase).items():
            out.append(_r(f"FLOPs per token, {phase}", part, v, "FLOP", note if part == "total" else ""))
    return out


def chip_facts(chip: ChipSpec) -> list[dict]:
    v = SpecView(chip)
    d, n = v.die, v.dies_per_package
    out = [_r("chip", "vendor", chip.vendor, ""),
           _r("chip", "confidence", chip.confidence, "", "how well the numbers are sourced (docs/specs.md)"),
           _r("package", "dies", n, ""),
           _r("die", "matrix / vector units", f"{d.matrix_units} / {d.vector_units}", "",
              f"{chip.die.matrix_units.source}; {chip.die.vector_units.source}")]
    dtypes = chip.die.peak_flops_per_s.dtypes()
    for dt in dtypes:
        peak = getattr(d.peak_flops_per_s, dt)
        out.append(_r("dense peak", f"{dt} per die", peak, "FLOP/s", getattr(chip.die.peak_flops_per_s, dt).source,
                      f"chip.die.peak_flops_per_s.{dt}"))
        out.append(_r("dense peak", f"{dt} per package", peak * n, "FLOP/s"))
    out += [_r("HBM", "capacity per die", d.hbm_capacity_B, "B", field="chip.die.hbm_capacity_B"),
            _r("HBM", "capacity per package", d.hbm_capacity_B * n, "B"),
            _r("HBM", "bandwidth per die", d.hbm_bandwidth_Bps, "B/s", field="chip.die.hbm_bandwidth_Bps"),
            _r("HBM", "bandwidth per package", d.hbm_bandwidth_Bps * n, "B/s")]
    for dt in dtypes:
        peak = getattr(d.peak_flops_per_s, dt)
        out.append(_r("ridge point", f"{dt} (peak / HBM bandwidth)", peak / d.hbm_bandwidth_Bps, "FLOP/B",
                      "operators with fewer FLOPs per byte are memory-bound"))
        out.append(_r("ridge point", f"{dt} achievable (with efficiencies)",
                      peak * matmul_dtype(HardwareView(None, v), dt)[0] / (d.hbm_bandwidth_Bps * v.efficiency.memory_bandwidth),
                      "FLOP/B", "the dtype's GEMM efficiency x peak / (memory efficiency x HBM bandwidth)"))
    out.append(_r("vector", "element operations per die", d.vector_ops_per_s, "op/s", chip.die.vector_ops_per_s.source,
                  "chip.die.vector_ops_per_s"))
    for name in type(chip.efficiency).model_fields:
        field = getattr(chip.efficiency, name)
        if name == "matmul_by_dtype":
            out += _per_dtype_efficiency(field or {})
        elif field is not None:
            out.append(_r("efficiency", name, getattr(v.efficiency, name), "", field.source, f"chip.efficiency.{name}"))
    for name in type(chip.latency).model_fields:
        out.append(_r("latency", name, getattr(v.latency, name), "s", getattr(chip.latency, name).source, f"chip.latency.{name}"))
    return out


def _per_dtype_efficiency(by_dtype) -> list[dict]:
    """``efficiency.matmul_by_dtype``: per dtype, its GEMM efficiency (replacing
    matmul_compute for that dtype) and its extra fixed cost per kernel, each a sourced field."""
    out = []
    for dt, own in by_dtype.items():
        for name, unit, what in (("compute", "", "replaces matmul_compute for this dtype"),
                                 ("kernel_fixed_s", "s", "added to every GEMM kernel in this dtype")):
            f = getattr(own, name)
            if f is not None:
                out.append(_r("efficiency", f"matmul_by_dtype {dt} {name}", f.value, unit, f"{f.source} ({what})",
                              f"chip.efficiency.matmul_by_dtype.{dt}.{name}"))
    return out


def system_facts(hw: Hardware) -> list[dict]:
    s, c = SpecView(hw.system), SpecView(hw.chip)
    view = HardwareView(s, c)
    chips = s.nodes * s.node.chips
    dies = chips * c.dies_per_package
    out = [_r("topology", "chip", hw.chip.name, ""),
           _r("topology", "confidence", hw.system.confidence, "", "how well the numbers are sourced (docs/specs.md)"),
           _r("topology", "nodes", s.nodes, "", hw.system.nodes.source),
           _r("topology", "chips per node", s.node.chips, "", hw.system.node.chips.source),
           _r("topology", "chips", chips, ""),
           _r("topology", "dies", dies, ""),
           _r("totals", "HBM", dies * c.die.hbm_capacity_B, "B"),
           _r("totals", "HBM bandwidth", dies * c.die.hbm_bandwidth_Bps, "B/s")]
    for dt in hw.chip.die.peak_flops_per_s.dtypes():
        if dt != "fp16":
            out.append(_r("totals", f"dense {dt.upper()}", dies * getattr(c.die.peak_flops_per_s, dt), "FLOP/s"))
    if hw.system.node.cpus is not None:
        out.append(_r("topology", "CPUs", s.nodes * s.node.cpus, ""))
    if hw.system.ub_fabric is not None:
        f = s.ub_fabric
        ub = s.tiers["ub"]
        ub_chip = (ub.nominal_Bps if ub.nominal_Bps is not None else ub.bandwidth_Bps) * c.dies_per_package
        uplink = f.l1_switch_chips * f.l1_uplink_links * f.l1_uplink_link_Bps
        l2 = f.l2_subplanes * f.l2_chips_per_subplane * f.l2_ports_per_chip * f.l2_port_Bps
        out += [_r("topology", "L1 UB switch chips", s.nodes * f.l1_switch_chips, ""),
                _r("topology", "L2 UB switch chips", f.l2_subplanes * f.l2_chips_per_subplane, ""),
                _r("UB", "per NPU (unidirectional)", ub_chip, "B/s"),
                _r("UB", "node uplink to L2", uplink, "B/s",
                   f"= {s.node.chips} NPUs x {ub_chip / 1e9:.0f} GB/s: non-blocking" if abs(uplink - s.node.chips * ub_chip) < 1 else "oversubscribed"),
                _r("UB", "L2 port capacity", l2, "B/s"),
                _r("UB", "bisection (unidirectional)", chips / 2 * ub_chip, "B/s", "half the NPUs at full UB rate")]
    for name in s.tiers.keys():
        spec, t = hw.system.tiers[name], s.tiers[name]
        domain = "the whole system and beyond" if t.domain_chips is None else f"{t.domain_chips} chips"
        out.append(_r("tier " + name, "domain", domain, "", spec.domain_chips.source if spec.domain_chips else ""))
        if t.nominal_Bps is not None:
            out.append(_r("tier " + name, "nominal bandwidth", t.nominal_Bps, "B/s", spec.nominal_Bps.source,
                          f"system.tiers.{name}.nominal_Bps"))
        out.append(_r("tier " + name, "bandwidth per die", tier_bandwidth_Bps(view, name), "B/s", spec.bandwidth_Bps.source,
                      f"system.tiers.{name}.bandwidth_Bps"))
        out.append(_r("tier " + name, "latency", t.latency_s, "s", spec.latency_s.source, f"system.tiers.{name}.latency_s"))
        out.append(_r("tier " + name, "barrier round (one round trip)", sync_round_s(view, name), "s",
                      "2 x the tier latency; a collective over G dies needs ceil(log2 G) rounds"))
    out.append(_r("roles", "KV transfer prefill -> decode", hw.system.kv_transfer_tier, ""))
    for ph in ("decode", "prefill"):
        r = hw.system.expert_parallel[ph] if isinstance(hw.system.expert_parallel, dict) else getattr(hw.system.expert_parallel, ph)
        out.append(_r("expert parallel", f"{ph} route", f"{r.route} over {' -> '.join(r.tiers)}", "", r.source))
        o = getattr(hw.system.overlap, ph)
        detail = (f"attention stream owns {o.attention_share.value:.3g} of the cores" if o.style == "core-split"
                  else f"communication holds {o.comm_units.value:g} units")
        out.append(_r("overlap", ph, f"{o.style}: {detail}", "", o.source))
    co = hw.system.collectives
    out.append(_r("collectives", "time per message", co.message_issue_s.value, "s", co.message_issue_s.source,
                  "system.collectives.message_issue_s"))
    out.append(_r("collectives", "message rate per die", 1 / co.message_issue_s.value if co.message_issue_s.value else float("inf"),
                  "msg/s", "the communication engine both streams share"))
    out.append(_r("collectives", "spread of a die's load between barriers", co.step_time_cv.value, "", co.step_time_cv.source,
                  "system.collectives.step_time_cv"))
    if hw.system.memory_pool is not None:
        out += _pool_facts(hw, view)
    return out


def _pool_facts(hw: Hardware, view: HardwareView) -> list[dict]:
    """The EMS pool (docs/model.md §9.5-§9.6): what it holds and how fast NPUs read it."""
    from .cost.pool import pool_capacity_B, pool_rate, pool_read_rate, socket_Bps

    p, v = hw.system.memory_pool, view.system.memory_pool
    rate, latency = pool_read_rate(view)
    w_rate, w_latency = pool_rate(view, "write")
    writes = p.writes or {}
    return [_r("memory pool (EMS)", "read over", p.tier, "", p.source),
            _r("memory pool (EMS)", "DRAM per node", v.dram_per_node_B, "B", p.dram_per_node_B.source,
               "system.memory_pool.dram_per_node_B"),
            _r("memory pool (EMS)", "usable share", v.usable_fraction, "", p.usable_fraction.source,
               "system.memory_pool.usable_fraction"),
            _r("memory pool (EMS)", "capacity", pool_capacity_B(view), "B", "nodes x DRAM per node x usable share"),
            _r("memory pool (EMS)", "read rate per die", rate, "B/s",
               p.reads[p.tier].source if p.tier in p.reads else f"tier {p.tier}'s bandwidth per die"),
            _r("memory pool (EMS)", "read latency per block", latency, "s"),
            _r("memory pool (EMS)", "write-back rate per die", w_rate, "B/s",
               writes[p.tier].source if p.tier in writes else "the read's (no measured write over the tier)"),
            _r("memory pool (EMS)", "write latency per block", w_latency, "s"),
            _r("memory pool (EMS)", "KV block", v.block_tokens, "tokens", p.block_tokens.source,
               "system.memory_pool.block_tokens"),
            _r("memory pool (EMS)", "per-block lookup, metadata, submission", v.block_overhead_s, "s",
               p.block_overhead_s.source, "system.memory_pool.block_overhead_s"),
            _r("memory pool (EMS)", "memory server copy rate per node", v.serve_per_node_Bps, "B/s",
               p.serve_per_node_Bps.source, "system.memory_pool.serve_per_node_Bps"),
            _r("memory pool (EMS)", "pool serves (all nodes)", view.system.nodes * v.serve_per_node_Bps, "B/s",
               "nodes x memory server copy rate: shared by the dies reading at once"),
            _r("memory pool (EMS)", "cached model served at", v.model_load_sockets * socket_Bps(view), "B/s",
               p.model_load_sockets.source, "system.memory_pool.model_load_sockets"),
            _r("memory pool (EMS)", "object storage", v.object_storage_buckets * v.object_storage_Bps, "B/s",
               p.object_storage_Bps.source, "system.memory_pool.object_storage_Bps")]
