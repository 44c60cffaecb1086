"""Deployment defaults: the instance a prediction runs for every input the user leaves unset
(docs/model.md §10). Every input the user gives is used as given; the rest follows the
system and the model, never another system's deployment.

The system's ``deployment`` section states the instances it is published with (CloudMatrix384:
the paper's; H800: DeepSeek's profile; H100, GB200: SGLang's) for its reference ``model``,
and how their experts are laid out. From it, for the model at hand:

    size (MoE)      dies = published dies x W(model) / W(reference), rounded up to an
                    instance size the system holds (a divisor of a node or whole nodes, inside
                    the expert-parallel domain), and at least the smallest size whose weights
                    per die take at most ``max_weight_share`` of a die's HBM. EP = dies.
                    Without a published size: that smallest size, at no more HBM than the
                    chip file states (a what-if with more HBM keeps the instance, as a
                    published one is kept: fewer dies would read more weights per step, and
                    more memory would give a slower answer; less HBM grows it).
    size (dense)    TP = the smallest power of two (dividing the heads, within a node) whose
                    weights per die take at most the share (of at most the chip file's HBM,
                    as above); dies = TP (one TP group).
    experts         shared copies  S = max(1, round(s x EP))   (s = 1: a copy on every die)
                    redundant      R = ceil((E + S + r x EP) / EP) x EP - E - S
                    (E routed experts, r spare routed copies per die at least): whole experts
                    on every die for any EP (paper §4.2: 256 + 32 + 32 = 320 at EP320, s = 0.1;
                    §4.3: 8 + 1 + 1 per die at EP32, s = 1, r = 1).
    MTP             the system's, off for a model without an MTP module.
    batch / tokens  the published batch per NPU (tokens per NPU in prefill), capped by what
                    fits in HBM at the prediction's lengths (the largest that fits).

W(model) is the model's weight bytes in its precision (all experts once, MTP module
included). A system file without a ``deployment`` section takes the generic values of
cmperf/defaults.py (``Default.fallback``: the paper's deployment) with the same rules.
"""

from __future__ import annotations

import math
from typing import Any, Mapping

import numpy as np

from .defaults import GENERIC_LAYOUT, PHASE_DEFAULTS
from .specs.view import remember
from .schedule.memory import afd_memory, decode_memory, prefill_memory, weight_bytes

AFD_EXPERT_SHARE = 96 / 320  # ASSUMPTION (docs/model.md §5.4): the paper's 160 decode NPUs as 112 attention + 48 expert
UNSET = {"dies": 0, "tp": 0, "attn_tp": 0, "mtp": -1, "redundant_experts": -1, "shared_copies": -1,
         "attention_dies": 0, "expert_dies": 0}  # markers of an input left unset (the user cannot give them)
UNSET_NAN = ("batch", "tokens_per_npu")


def _published(hw, phase: str) -> dict[str, Any]:
    """The system's published instance for ``phase`` ('decode' or 'prefill'), its fields
    unset where it states none; the generic fallbacks where the system has no section."""
    dep = hw.system.deployment
    if dep is None:
        d = PHASE_DEFAULTS[phase]
        generic = {k: d[k].fallback for k in d if d[k].fallback is not None}
        return {"dies": generic.get("dies"), "tp": generic.get("tp"), "attn_tp": generic.get("attn_tp"),
                "batch": generic.get("batch"), "tokens_per_npu": generic.get("tokens_per_npu"),
                "mtp": generic.get("mtp"), **GENERIC_LAYOUT[phase], "model": None, "share": 0.5}
    p = dep[phase]
    get = lambda k: getattr(p, k, None) if k in p.keys() else None  # noqa: E731
    return {"dies": get("dies"), "tp": get("tp"), "attn_tp": get("attn_tp"), "batch": get("batch"),
            "tokens_per_npu": get("tokens_per_npu"), "mtp": get("mtp"),
            "shared_copies_per_die": p.shared_copies_per_die, "redundant_per_die": p.redundant_per_die,
            "model": dep.model, "share": dep.max_weight_share}


# --------------------------------------------------------------------------- expert layout
def expert_layout(m, ep, shared_per_die, spare_per_die, redundant=None, shared=None) -> tuple[np.ndarray, np.ndarray]:
    """(redundant routed experts, shared-expert copies) that put whole experts on each of
    ``ep`` dies (module docstring): S = max(1, round(s EP)) shared copies (none without a
    shared expert), routed experts topped up to a multiple of EP with at least ``spare_per_die``
    redundant copies per die. Where the user gave the redundant count (``redundant``, NaN
    where not), the shared copies are the fewest >= S that complete whole experts instead;
    a given ``shared`` count is kept and the redundant ones top it up. Vectorised over
    ``ep``; (0, 0) for a dense model."""
    ep = np.asarray(ep, dtype=float)
    nan = np.full(ep.shape, np.nan)
    red_given = nan if redundant is None else np.asarray(redundant, dtype=float) * np.ones(ep.shape)
    sh_given = nan if shared is None else np.asarray(shared, dtype=float) * np.ones(ep.shape)
    mo = m.moe
    if mo is None:
        return np.zeros_like(ep), np.zeros_like(ep)
    E = np.asarray(mo.routed_experts, dtype=float)
    has_shared = np.asarray(mo.shared_experts) > 0
    s_min = np.where(has_shared, np.maximum(1.0, np.floor(ep * np.asarray(shared_per_die, dtype=float) + 0.5)), 0.0)
    S = np.where(np.isnan(sh_given), s_min, sh_given)
    need = E + S + np.asarray(spare_per_die, dtype=float) * ep
    R = np.ceil(need / ep - 1e-9) * ep - E - S
    # the redundant count given: the fewest shared copies >= S that fill whole experts
    topped = np.where(has_shared, S + np.mod(-(E + red_given + S), ep), S)
    S = np.where(~np.isnan(red_given) & np.isnan(sh_given), topped, S)
    R = np.where(np.isnan(red_given), R, red_given)
    return R, S


# --------------------------------------------------------------------------- instance sizes
def instance_sizes(hw, phase: str, moe: bool) -> np.ndarray:
    """Dies an instance of ``phase`` may have: whole NPUs that divide a node (1, 2, 4, ...)
    or fill whole nodes, within the system and, for expert parallelism, within one domain
    of the route's outer tier."""
    dpp = int(hw.chip.dies_per_package)
    node = int(hw.system.node.chips)
    nodes = int(hw.system.nodes)
    npus = {2 ** j for j in range(12) if 2 ** j < node} | {node * k for k in range(1, nodes + 1)}
    limit = node * nodes
    if moe:
        outer = hw.system.expert_parallel[phase].tiers[-1]
        domain = hw.system.tiers[outer].domain_chips
        limit = min(limit, int(domain)) if domain is not None else limit
    return np.array(sorted(n * dpp for n in npus if n <= limit), dtype=float)


def _weights_per_die(m, phase: str, dies, tp, mtp: int, pub: dict) -> np.ndarray:
    """Weight bytes on one die of an instance of ``dies`` (EP = dies) and TP ``tp``."""
    dies = np.asarray(dies, dtype=float)
    red, shared = expert_layout(m, dies, pub["shared_copies_per_die"], pub["redundant_per_die"])
    tp = np.broadcast_to(np.asarray(tp, dtype=float), dies.shape)
    g = {"ep": dies, "tp": tp, "attn_tp": tp, "mtp": np.full(dies.shape, float(mtp)),
         "redundant_experts": red, "shared_copies": shared}
    return np.asarray(weight_bytes(m, g, phase), dtype=float) * np.ones(dies.shape)


def _total_weights(m) -> float:
    """W(m): every weight once (one copy of each expert), MTP module included."""
    return float(_weights_per_die(m, "decode", [1.0], 1.0, 1 if m.mtp.modules else 0,
                                  {"shared_copies_per_die": 1.0, "redundant_per_die": 0})[0])


_REFERENCES: dict[str, Any] = {}


def _reference(name: str):
    """The system's reference model (a view of its spec), or None when it cannot be read."""
    from .errors import CmperfError
    from .specs.loader import cached_spec, load_model
    from .specs.view import SpecView

    if name not in _REFERENCES:
        try:
            hit = cached_spec("model", name)
            _REFERENCES[name] = SpecView(hit[0]) if hit is not None else SpecView(load_model(name, {})[0])
        except CmperfError:
            _REFERENCES[name] = None
    return _REFERENCES[name]


_SHIPPED_HBM: dict[str, float | None] = {}


def shipped_hbm(hw) -> float:
    """A die's HBM capacity as the chip's own file states it (no --set): the capacity a default
    instance is sized at, so that more HBM never shrinks it (module docstring); the capacity
    at hand when the chip file cannot be read by its name."""
    from .errors import CmperfError
    from .specs.loader import cached_spec, load_chip

    hbm = float(hw.chip.die.hbm_capacity_B)
    name = str(hw.system.chip)
    if name not in _SHIPPED_HBM:
        try:
            hit = cached_spec("chip", name)
            chip = hit[0] if hit is not None else load_chip(name, {})[0].model_dump(mode="json")
            _SHIPPED_HBM[name] = float(chip["die"]["hbm_capacity_B"]["value"])
        except (CmperfError, KeyError, TypeError):
            _SHIPPED_HBM[name] = None
    return _SHIPPED_HBM[name] or hbm


def moe_dies(hw, m, phase: str, tp: int, mtp: int) -> int:
    """Dies of a MoE instance (module docstring: size (MoE)). The share of HBM the weights
    may take is ``max_weight_share``, or more where the published instance of the reference
    model takes more (a prefill instance holds little KV)."""
    return remember(hw, ("moe_dies", m, phase, tp, mtp), lambda: _moe_dies(hw, m, phase, tp, mtp))


def _moe_dies(hw, m, phase: str, tp: int, mtp: int) -> int:
    pub = _published(hw, phase)
    sizes = instance_sizes(hw, phase, moe=True)
    hbm = float(hw.chip.die.hbm_capacity_B)
    share = float(pub["share"])
    target = None if pub["dies"] is None else float(pub["dies"])
    same = pub["model"] is not None and pub["model"] == m.name
    ref = m if same else _reference(pub["model"]) if pub["model"] is not None else None
    if target is not None and ref is not None:
        ref_tp = pub["tp" if phase == "decode" else "attn_tp"] or 1
        published_w = _weights_per_die(ref, phase, [target], ref_tp, mtp if ref.mtp.modules else 0, pub)[0]
        share = max(share, published_w / hbm)
        if not same:
            target *= _total_weights(m) / _total_weights(ref)
    w = _weights_per_die(m, phase, sizes, tp, mtp, pub)
    fits = sizes[w <= share * hbm * (1 + 1e-9)]
    smallest = fits[0] if len(fits) else sizes[-1]
    if target is None:  # the smallest size that fits, at no more HBM than the chip's own (more never shrinks it)
        held = sizes[w <= share * min(hbm, shipped_hbm(hw)) * (1 + 1e-9)]
        return int(max(smallest, held[0] if len(held) else sizes[-1]))
    if target == pub["dies"]:
        size = target  # the published size itself (it need not be a node multiple)
    else:
        above = sizes[sizes >= target - 1e-9]
        size = above[0] if len(above) else sizes[-1]
    return int(max(size, smallest))


def dense_tp(hw, m, phase: str, mtp: int, divides: int | None = None) -> int:
    """TP group of a dense model (module docstring: size (dense)): the smallest power of two
    dividing the heads (and ``divides``, the given dies), within a node, whose weights per
    die take at most the share of HBM; else the largest such TP."""
    return remember(hw, ("dense_tp", m, phase, mtp, divides), lambda: _dense_tp(hw, m, phase, mtp, divides))


def _dense_tp(hw, m, phase: str, mtp: int, divides: int | None) -> int:
    pub = _published(hw, phase)
    node_dies = int(hw.system.node.chips) * int(hw.chip.dies_per_package)
    heads = int(m.attention.num_heads)
    tps = [t for t in (2 ** j for j in range(12)) if t <= node_dies and heads % t == 0
           and (divides is None or divides % t == 0)] or [1]
    w = _weights_per_die(m, phase, np.ones(len(tps)), np.asarray(tps, dtype=float), mtp, pub)
    cap = min(float(hw.chip.die.hbm_capacity_B), shipped_hbm(hw)) * float(pub["share"])  # more HBM never shrinks it
    ok = [t for t, x in zip(tps, w) if x <= cap]
    return ok[0] if ok else tps[-1]


def instance(phase: str, hw, m, values: Mapping[str, Any]) -> dict[str, Any]:
    """The instance-size inputs of ``phase`` (dies, TP, the AFD split) that ``values`` (the
    inputs the user gave, scalars or lists) leave unset, derived for this system and model;
    {} for the kernel phases."""
    if phase not in ("decode", "prefill", "afd"):
        return {}
    given = {k for k, v in values.items() if v is not None}
    base = "decode" if phase == "afd" else phase
    pub = _published(hw, base)
    tp_key = "tp" if base == "decode" else "attn_tp"
    mtp = 1 if _mtp(hw, m, base) else 0
    out: dict[str, Any] = {}
    if phase == "afd":
        if m.moe is None:
            return {}  # validate() says why: AFD needs experts
        if {"expert_dies", "attention_dies"} <= given:
            return out
        dpp = int(hw.chip.dies_per_package)
        total = moe_dies(hw, m, "decode", 1, mtp)
        experts = values["expert_dies"] if "expert_dies" in given else dpp * max(1, round(total * AFD_EXPERT_SHARE / dpp))
        if "expert_dies" not in given:
            out["expert_dies"] = experts
        if "attention_dies" not in given and np.ndim(experts) == 0:
            out["attention_dies"] = max(dpp, total - int(experts))
        return out
    if m.moe is None:  # a dense model: one TP group holds the weights
        dies = values.get("dies")
        if tp_key not in given:
            out[tp_key] = dense_tp(hw, m, base, mtp, int(dies) if dies is not None and np.ndim(dies) == 0 else None)
        if "dies" not in given:
            out["dies"] = out.get(tp_key, values.get(tp_key))
        return out
    if tp_key not in given:
        out[tp_key] = int(pub[tp_key] or 1)
    if "dies" not in given:
        tp = out.get(tp_key, values.get(tp_key))
        out["dies"] = moe_dies(hw, m, base, int(tp) if np.ndim(tp) == 0 else 1, mtp)
    dies = out.get("dies", values.get("dies"))
    if tp_key in out and dies is not None and np.ndim(dies) == 0:
        out[tp_key] = math.gcd(out[tp_key], int(dies))  # a TP group within the instance
    return out


def _mtp(hw, m, phase: str) -> bool:
    """Whether the system serves with MTP (its decode instance; prefill runs the module to
    seed the first draft whenever decode uses it), and the model has a module to run."""
    pub = _published(hw, "decode")
    return bool(pub["mtp"]) and m.mtp.modules > 0


# --------------------------------------------------------------------------- per row
def resolve(phase: str, grid, hw, m) -> None:
    """Fill, in place, the unset markers of ``grid`` (Columns; ``hw``/``m`` may hold swept
    arrays over its rows): MTP, the expert layout of each row's EP, then the batch (tokens
    per NPU) the system publishes, capped by what fits in HBM."""
    if phase not in ("decode", "prefill", "afd"):
        return
    base = "decode" if phase == "afd" else phase
    pub = _published(hw, base)
    n = len(grid)
    if n == 0:
        return
    if "mtp" in grid:
        mtp = grid["mtp"].to_numpy()
        grid["mtp"] = np.where(mtp < 0, 1 if _mtp(hw, m, base) else 0, mtp).astype(int)
    ep = (grid["expert_dies"] if phase == "afd" else grid["ep"]).to_numpy(dtype=float)
    given = {k: np.where(grid[k].to_numpy(dtype=float) < 0, np.nan, grid[k].to_numpy(dtype=float))
             for k in ("redundant_experts", "shared_copies")}
    s, r = (1.0, 0) if phase == "afd" else (pub["shared_copies_per_die"], pub["redundant_per_die"])
    red, shared = expert_layout(m, ep, s, r, given["redundant_experts"], given["shared_copies"])
    grid["redundant_experts"] = red.astype(int)
    grid["shared_copies"] = shared.astype(int)
    if phase == "prefill" and "pool_len" in grid:  # unset: the first cache tier there is (docs/model.md §9.5)
        from .cost.pool import hbm_cache_share

        pool_len, cached = grid["pool_len"].to_numpy(), grid["cached_len"].to_numpy()
        grid["pool_len"] = np.where(pool_len < 0, cached if hbm_cache_share(hw) <= 0 else 0, pool_len).astype(int)
    key = "tokens_per_npu" if phase == "prefill" else "batch"
    col = grid[key].to_numpy(dtype=float)
    unset = np.isnan(col)
    if not unset.any():
        return
    published = float(pub[key] if pub[key] is not None else PHASE_DEFAULTS[phase][key].fallback)
    grid[key] = np.where(unset, published, col)
    cols = grid.arrays()
    with np.errstate(all="ignore"):
        if phase == "prefill":
            most = prefill_memory(hw, m, cols, 1.0)["max_tokens_per_npu"]
            unit = (cols["prompt_len"] - cols["cached_len"]) * hw.chip.dies_per_package / cols["attn_tp"]
            most = np.floor(most / unit) * unit  # whole prompts on each attention TP group
            enough = most >= unit
        else:
            most = (decode_memory if phase == "decode" else afd_memory)(hw, m, cols)["max_batch_per_npu"]
            enough = most >= 1
    capped = np.where(unset & enough, np.minimum(published, most), np.where(unset, published, col))
    grid[key] = capped


def with_instance(phase: str, values: Mapping[str, Any], hw, m) -> dict[str, Any]:
    """``values`` (without the unset ones) and the derived instance inputs for what they leave unset."""
    given = {k: v for k, v in values.items() if v is not None}
    return {**instance(phase, hw, m, given), **given}
