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

Cached prefixes live in two tiers (docs/model.md §9.5): the free HBM of the prefill instance
(the stack's on-device prefix cache: RadixAttention, vLLM's automatic prefix caching; a hit
there costs no transfer, the attention reads it from HBM as any KV), then the pool. The pool's
capacity is nodes x DRAM per node x the usable share; with a working set of W distinct prefix
tokens an LRU tier of capacity K keeps min(1, K / W) of it (:func:`cache_tiers`), the pool
holding a superset of the HBM tier (write-through). The computed tokens' new whole blocks are
written back to the pool during the pass, overlapped with its compute (:func:`pass_with_pool_s`).
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


def pool_rate(hw, op: str = "read", tier: str | None = None) -> tuple[float, float]:
    """(bytes/s per die, seconds per block) of reading (``op`` "read") or writing ("write") the
    pool over ``tier`` (default: the pool's own tier): the measured figure where there is one
    (a write without one: the read's), else the tier's own bandwidth and latency."""
    pool = memory_pool(hw)
    tier = tier or pool.tier
    writes = pool.writes if op == "write" and pool.writes is not None else None
    if writes is not None and tier in writes.keys():
        r = writes[tier]
        return r.bandwidth_Bps, r.latency_s
    if tier in pool.reads.keys():
        r = pool.reads[tier]
        return r.bandwidth_Bps, r.latency_s
    return tier_bandwidth_Bps(hw, tier), hw.system.tiers[tier].latency_s


def pool_read_rate(hw, tier: str | None = None) -> tuple[float, float]:
    """(bytes/s per die, seconds per block) of reading the pool over ``tier`` (:func:`pool_rate`)."""
    return pool_rate(hw, "read", tier)


def pool_serve_Bps(hw) -> float:
    """What the whole pool serves per second: every node's memory server copying out of DRAM."""
    return hw.system.nodes * memory_pool(hw).serve_per_node_Bps


def pool_transfer_s(hw, bytes_, blocks, dies=1.0, op: str = "read") -> np.ndarray:
    """Time for one die to read (or write, ``op``) ``bytes_`` in ``blocks`` KV blocks from (to)
    the pool while ``dies`` dies do so at once: the die's rate or its share of what the
    memory servers move, plus each block's latency and overhead (module docstring)."""
    rate, latency = pool_rate(hw, op)
    shared = pool_serve_Bps(hw) / np.maximum(np.asarray(dies, dtype=float), 1.0)
    return (np.asarray(bytes_, dtype=float) / np.minimum(rate, shared)
            + np.asarray(blocks, dtype=float) * (latency + memory_pool(hw).block_overhead_s))


def pool_read_s(hw, bytes_, blocks, readers=1.0) -> np.ndarray:
    """Time for one die to read ``bytes_`` in ``blocks`` KV blocks from the pool while
    ``readers`` dies read at once (:func:`pool_transfer_s`)."""
    return pool_transfer_s(hw, bytes_, blocks, readers, "read")


def pool_write_s(hw, bytes_, blocks, writers=1.0) -> np.ndarray:
    """Time for one die to write ``bytes_`` in ``blocks`` new KV blocks to the pool while
    ``writers`` dies write at once (:func:`pool_transfer_s`; paper Table 1's NPU-CPU write)."""
    return pool_transfer_s(hw, bytes_, blocks, writers, "write")


def pass_with_pool_s(compute_s, read_s, write_s) -> np.ndarray:
    """A prefill pass with its pool traffic (docs/model.md §9.5): the cached prefixes read
    before the pass (their KV is needed by the first layer's attention), the new blocks
    written back layer by layer as each layer's KV is made, overlapped with the rest of the
    pass (Mooncake's layer-wise store, SGLang HiCache's write-through on its own stream:
    serving-reference §3.1, §3.3); the pass ends when both its compute and its write are
    done: read + max(compute, write)."""
    compute_s = np.asarray(compute_s, dtype=float)
    return np.asarray(read_s, dtype=float) + np.maximum(compute_s, np.asarray(write_s, dtype=float))


def written_blocks(kv, prompt, cached, block_tokens) -> tuple[np.ndarray, np.ndarray]:
    """(bytes, blocks) of the new whole blocks a prompt of ``prompt`` tokens with ``cached``
    cached writes back to the pool: its full blocks past the cached ones (a partial last
    block is not cached, as vLLM and SGLang's pages; ``kv`` a :class:`cmperf.cost.arch.KVCache`)."""
    P = np.asarray(prompt, dtype=float)
    C = np.asarray(cached, dtype=float)
    full = np.floor(P / block_tokens) * block_tokens
    blocks = np.maximum(np.floor(P / block_tokens) - np.ceil(C / block_tokens), 0.0)
    bytes_ = np.where(blocks > 0, np.asarray(kv.bytes(np.maximum(full, C)), dtype=float)
                      - np.asarray(kv.bytes(C), dtype=float), 0.0)
    return np.maximum(bytes_, 0.0), blocks


def tail_bytes(kv, cached, tail) -> np.ndarray:
    """KV bytes of the last ``tail`` tokens of a ``cached``-token prefix (all of it when the
    tail is the whole prefix: a window's or a state's bytes are the prefix's own)."""
    C = np.asarray(cached, dtype=float)
    L = np.minimum(np.asarray(tail, dtype=float), C)
    whole = np.asarray(kv.bytes(C), dtype=float)
    return np.where(L >= C, whole, whole - np.asarray(kv.bytes(C - L), dtype=float))


def hbm_cache_share(hw) -> float:
    """Share of an instance's free HBM its stack keeps cached prefixes in (the stack's
    ``prefix_cache_hbm_share``; no stack or unset: 1, every free page; docs/model.md §9.5)."""
    stack = hw.stack
    if stack is None:
        return 1.0
    try:
        v = stack["prefix_cache_hbm_share"]
    except (AttributeError, KeyError):
        return 1.0
    return 1.0 if v is None else float(v)


def hbm_cache_tokens(hw, row) -> float:
    """Distinct prefix tokens a prefill instance's HBM holds (docs/model.md §9.5): the HBM its
    dies leave free after weights, buffers, the pass's activations and KV (``row``: a
    ``predict prefill`` result), times the stack's share, over the KV a held token costs
    its dies (the row's own KV per context token per die: a prefix replicated over an
    attention TP group, as MLA's latent, costs each of its dies)."""
    dies = float(row["dies"])
    free = max(float(row["hbm_per_die_bytes"]) - float(row["memory_per_die_bytes"]), 0.0)
    P, C = float(row["prompt_len"]), float(row.get("cached_len", 0) or 0)
    context_per_die = float(row["tokens_per_npu"]) / float(hw.chip.dies_per_package) * P / max(P - C, 1.0)
    per_token = float(row["kv_cache_per_die_bytes"]) / max(context_per_die, 1.0)
    return hbm_cache_share(hw) * dies * free / per_token if per_token > 0 else 0.0


def cache_tiers(hbm_tokens: float, pool_tokens: float, working_set_tokens: float | None,
                hbm: bool = True, pool: bool = True) -> tuple[float, float]:
    """(share of the hits asked served from HBM, share served from the pool) (docs/model.md
    §9.5). An LRU tier of capacity K under uniform popularity over a working set of W
    distinct prefix tokens keeps min(1, K / W) of it; the pool holds a superset of the HBM
    tier (write-through), so together they keep min(1, max(K_hbm, K_pool) / W). No working
    set given: every prefix fits the first tier there is (``hbm``: the stack keeps one;
    ``pool``: the system has one)."""
    if working_set_tokens is None:
        return (1.0, 0.0) if hbm else ((0.0, 1.0) if pool else (0.0, 0.0))
    W = float(working_set_tokens)
    k_hbm = max(float(hbm_tokens), 0.0) if hbm else 0.0
    k_pool = max(float(pool_tokens), 0.0) if pool else 0.0
    in_hbm = min(1.0, k_hbm / W)
    return in_hbm, max(min(1.0, max(k_hbm, k_pool) / W) - in_hbm, 0.0)


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


def kv_bytes_per_token(m, workload) -> float:
    """A cached prompt's KV bytes per token (docs/model.md §1.2: a window or a state is per prompt)."""
    from .arch import kv_cache
    from .ops import Bytes

    prompt = max(workload.prompt.mean, 1.0)
    return float(kv_cache(m, Bytes.of(m).kv, 1.0).bytes(prompt)) / prompt


def served_hit(hw, m, workload, working_set_tokens: float | None = None,
               hbm_tokens: float = 0.0) -> tuple[float, float | None, float]:
    """(the prefix-hit share the tiers serve, the prefix tokens the pool holds, the share of a
    served prefix read from the pool) (docs/model.md §9.5): of the hits asked, the HBM tier
    (``hbm_tokens`` distinct tokens, where the stack keeps one) and the pool serve the shares
    :func:`cache_tiers` gives; a served prefix's head is in HBM and its tail in the pool (an
    LRU radix tree evicts leaves first), in the ratio of those shares."""
    hit = workload.prefix_hit
    has_pool = hw.system.memory_pool is not None
    pool_tokens = pool_capacity_B(hw) / kv_bytes_per_token(m, workload) if has_pool else None
    if not hit > 0:
        return hit, pool_tokens, (0.0 if hbm_cache_share(hw) > 0 or not has_pool else 1.0)
    in_hbm, in_pool = cache_tiers(hbm_tokens, pool_tokens or 0.0, working_set_tokens, hbm_cache_share(hw) > 0, has_pool)
    served = in_hbm + in_pool
    return hit * served, pool_tokens, (in_pool / served if served > 0 else 0.0)


def no_cache_error(hw, flag: str) -> ConfigError:
    """The error for cached prefixes asked of a system and stack with neither tier."""
    return ConfigError(f"{flag}: system {hw.system.name} has no memory pool (`memory_pool`) and its stack keeps no "
                       f"prefix cache in HBM (`prefix_cache_hbm_share` 0) to cache KV in")


def cache_block_tokens(hw, stack) -> float:
    """Tokens a cached prefix counts in: the pool's blocks, else the stack's KV pages
    (``stack``: its view, or None), else 1."""
    if hw.system.memory_pool is not None:
        return float(hw.system.memory_pool.block_tokens)
    return float(stack.kv_block_tokens) if stack is not None else 1.0


def can_cache(hw) -> bool:
    """Whether cached prefixes have a tier: the stack's HBM cache or the system's pool."""
    return hbm_cache_share(hw) > 0 or hw.system.memory_pool is not None
