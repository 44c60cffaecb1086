"""Reading from the pooled CPU DRAM (EMS, paper §4.4) and from object storage
(docs/model.md §9.5-§9.6).

A cached KV prefix or a model's weights are bytes that one side serves and the other
reads; the slower side and a per-block latency set the time:

    KV prefix (per die):  t = bytes / rate + blocks x (latency + block overhead)
                          rate = min(the die's read rate, nodes x serve rate per node / readers):
                          Table 1's NPU-CPU read over UB (147 GB/s per die, 1.7 us), or for a
                          tier without a measured read (e.g. the VPC plane, for comparison) its
                          own bandwidth per die and latency — a node's 400 Gbps shared by its
                          16 dies; and the memory servers: the pool is striped over every
                          node, each copying out of its DRAM at serve_per_node_Bps, shared by
                          the ``readers`` dies reading at once (a prefill instance's, or a
                          deployment's prefill dies); each block also pays its lookup,
                          metadata and submission (block_overhead_s)
    model (per instance): t = bytes / min(sockets x socket rate, readers x rate)
                          from the pool: the sockets holding the cached copy serve every
                          die of the instance;
                          t = bytes / (buckets x bucket rate) from object storage.

The pool's capacity is nodes x DRAM per node x the usable share; it holds
capacity / (KV bytes per token) tokens of prefixes, and with a working set of W distinct
prefix tokens serves h x min(1, held / W) of the hits asked (:func:`served_hit`).
"""

from __future__ import annotations

import numpy as np

from ..errors import ConfigError
from .roofline import tier_bandwidth_Bps


def memory_pool(hw):
    pool = hw.system.memory_pool
    if pool is None:
        raise ConfigError(f"system {hw.system.name} has no `memory_pool` section (EMS): context caching and "
                          f"model loading from DRAM need one (see hardware/cloudmatrix384.yaml)")
    return pool


def pool_read_rate(hw, tier: str | None = None) -> tuple[float, float]:
    """(bytes/s per die, seconds per block) of reading the pool over ``tier`` (default: the
    pool's own tier): the measured read where there is one, else the tier's own figures."""
    pool = memory_pool(hw)
    tier = tier or pool.tier
    if tier in pool.reads.keys():
        r = pool.reads[tier]
        return r.bandwidth_Bps, r.latency_s
    return tier_bandwidth_Bps(hw, tier), hw.system.tiers[tier].latency_s


def pool_serve_Bps(hw) -> float:
    """What the whole pool serves per second: every node's memory server copying out of DRAM."""
    return hw.system.nodes * memory_pool(hw).serve_per_node_Bps


def pool_read_s(hw, bytes_, blocks, readers=1.0) -> np.ndarray:
    """Time for one die to read ``bytes_`` in ``blocks`` KV blocks from the pool while
    ``readers`` dies read at once (module docstring)."""
    rate, latency = pool_read_rate(hw)
    shared = pool_serve_Bps(hw) / np.maximum(np.asarray(readers, dtype=float), 1.0)
    return (np.asarray(bytes_, dtype=float) / np.minimum(rate, shared)
            + np.asarray(blocks, dtype=float) * (latency + memory_pool(hw).block_overhead_s))


def pool_capacity_B(hw) -> float:
    """Bytes the pool can hold: every node's DRAM times the usable share."""
    pool = memory_pool(hw)
    return hw.system.nodes * pool.dram_per_node_B * pool.usable_fraction


def socket_Bps(hw) -> float:
    """One CPU socket's UB port (paper §3.3.2: ~160 GB/s), capped by what a die reads."""
    rate, _ = pool_read_rate(hw)
    fabric = hw.system.ub_fabric
    return min(fabric.cpu_ub_Bps, rate) if fabric is not None else rate


def model_load_s(hw, bytes_, reader_dies, source: str) -> np.ndarray:
    """Time to bring ``bytes_`` of weights into an instance of ``reader_dies`` dies from the
    DRAM pool (``pool``) or from object storage (``object_storage``)."""
    pool = memory_pool(hw)
    bytes_ = np.asarray(bytes_, dtype=float)
    if source == "object_storage":
        return bytes_ / (pool.object_storage_buckets * pool.object_storage_Bps)
    rate, _ = pool_read_rate(hw)
    serve = pool.model_load_sockets * socket_Bps(hw)
    return bytes_ / np.minimum(serve, np.asarray(reader_dies, dtype=float) * rate)


def served_hit(hw, m, workload, working_set_tokens: float | None = None) -> tuple[float, float | None]:
    """(the prefix-hit share the pool serves, the prefix tokens it holds) (docs/model.md §9.5):
    the pool holds capacity / (KV bytes per token) tokens; with a working set of W distinct
    prefix tokens an LRU pool under uniform popularity keeps min(1, held / W) of them, so it
    serves h x min(1, held / W) of the hits asked."""
    hit = workload.prefix_hit
    if not hit > 0:
        return hit, None
    # a cached prompt's cache per token (docs/model.md §1.2: a window or a state is per prompt)
    prompt = max(workload.prompt.mean, 1.0)
    from .arch import kv_cache
    from .ops import Bytes

    kv_tok = float(kv_cache(m, Bytes.of(m).kv, 1.0).bytes(prompt)) / prompt
    pool_tokens = pool_capacity_B(hw) / kv_tok
    if working_set_tokens is not None:
        hit = hit * min(1.0, pool_tokens / working_set_tokens)
    return hit, pool_tokens
