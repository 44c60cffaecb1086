"""Scenario inputs: the parallel configuration and workload of a prediction, as a grid.

A grid is a table of numpy columns (:class:`cmperf.columns.Columns`) with one row per
configuration and one column per input; a single prediction is a grid of one row. Defaults
(cmperf/defaults.py) are the paper's deployment. Validation has two steps (docs/specs.md,
"Input checks"): every value a user gives is checked once where it enters
(:func:`check_inputs`: a finite number of the right kind, never an internal "unset" marker),
then every row is checked against the others and the specs, vectorised (:func:`validate`): a
row that is not physically possible gets ``valid`` False and the first ``reason``.
"""

from __future__ import annotations

import math
from typing import Any, Mapping

import numpy as np

from .columns import Columns, infer, product
from .defaults import PHASE_DEFAULTS
from .errors import ConfigError, nearest, short
from .cost.pool import can_cache, no_cache_error
from .cost.roofline import core_split_fits
from .specs.dtypes import dtypes_of


# --------------------------------------------------------------------------- the input boundary
# What a value the user gives may be, checked once where it enters (make_grid, grid_from_rows,
# reference rows): the kind of number, finite, and the ranges that keep a default's "unset"
# marker (ep 0 = all dies, kv_len nan = prompt + output/2, ...) out of the user's reach.
# Ranges that involve other inputs or the specs are checked per row by validate().
INTEGER_INPUTS = {"prompt_len", "output_len", "dies", "ep", "tp", "attn_tp", "microbatches", "mtp", "mtp_k", "pool_readers",
                  "redundant_experts", "shared_copies", "m", "n", "k", "groups", "s_q", "h_q", "seq_k", "cached_len", "pool_len",
                  "attention_dies", "expert_dies", "comm_sms"}
WORDS = {"expert_imbalance": {"default": "default"}, "microbatches": {"auto": 0},
         "mtp": {"on": 1, "off": 0, True: 1, False: 0}}
AT_LEAST = {"ep": 1, "dies": 1, "tp": 1, "attn_tp": 1, "kv_len": 1, "shared_copies": 0, "redundant_experts": 0, "mtp": 0,
            "cached_len": 0, "pool_len": 0, "chunk_tokens": 0, "pool_readers": 1, "attention_dies": 1, "expert_dies": 1, "comm_sms": 0,
            "prompt_len": 1, "output_len": 1, "mtp_k": 1, "batch": 1, "tokens_per_npu": 1, "tokens": 1}
GIVEN_ALL = ("ep",)  # validate()'s default: name EP as a flag (callers pass what the user gave)
VECTOR_CHECK_FROM = 16  # values of one input beyond which they are checked as one array (cheaper than one by one)
SCALARS = (str, int, float, np.generic)  # one value (np.ndim 0), told without numpy's call
MAX_INPUT = 1e9  # requests, tokens, lengths, dies: far above any deployment, far below float overflow


def flag_name(key: str) -> str:
    """The command-line flag of a scenario input (``kv_len`` -> ``--kv-len``)."""
    return "--" + key.replace("_", "-")


def check_inputs(phase: str, values: Mapping[str, Any], name=flag_name) -> dict[str, Any]:
    """The given values (scalars or lists) of ``phase`` checked and normalised: known inputs,
    numbers that are finite, whole where the input counts things, within the ranges of
    AT_LEAST and MAX_INPUT; words (``default``, ``auto``, ``on``) where an input takes them.
    ``name(key)`` is how an error names the input (a flag, or a reference file's field)."""
    defaults = PHASE_DEFAULTS[phase]
    unknown = [k for k in values if k not in defaults]
    if unknown:
        hint = nearest(unknown[0], defaults) if len(unknown) == 1 else ""
        raise ConfigError(f"unknown {phase} input(s): {', '.join(short(k, 40) for k in sorted(map(str, unknown)))}{hint} "
                          f"(expected: {', '.join(defaults)})")
    out = {}
    for key, given in values.items():
        if given is None:
            continue
        many = not isinstance(given, SCALARS) and np.ndim(given) > 0  # a list, tuple, array or Series
        items = list(given) if many else [given]
        if many and not items:
            raise ConfigError(f"{name(key)}: no values (expected at least one)")
        if len(items) > VECTOR_CHECK_FROM and _all_fine(key, items):  # a numeric axis (a search's, a plan's rows): one array
            out[key] = np.asarray(items).astype(int).tolist() if key in INTEGER_INPUTS else items
            continue
        checked = [_check_value(phase, key, x, name) for x in items]
        out[key] = checked if many else checked[0]
    return out


def _all_fine(key: str, items: list) -> bool:
    """Whether every item is a number that _check_value would pass (vectorised; a count is
    then made an int, as _check_value makes it);
    False sends the items through _check_value one by one, which names the first bad one."""
    arr = np.asarray(items)
    if arr.dtype.kind not in "iuf":
        return False
    x = arr.astype(float)
    ok = np.isfinite(x) & (np.abs(x) <= MAX_INPUT) & (x >= AT_LEAST.get(key, -np.inf))
    if key in INTEGER_INPUTS:  # whole numbers, as ints or floats (8.0 is read as 8)
        ok &= np.mod(x, 1.0) == 0
    return bool(ok.all())


def _check_value(phase: str, key: str, x: Any, name) -> Any:
    """One given value of ``key``, normalised (a word to its number, 8.0 to 8 for a count), or
    a ConfigError naming the input, what it expects and what it found."""
    words = WORDS.get(key, {})
    if isinstance(x, np.generic):
        x = x.item()
    if isinstance(x, bool) and True in words or isinstance(x, str) and x in words:
        return words[x]
    default = PHASE_DEFAULTS[phase][key].value
    if isinstance(default, str):  # a name (the GEMM dtype)
        if not isinstance(x, str):
            raise ConfigError(f"{name(key)}: expected a name such as {default!r}, got {_shown(x)}")
        return x
    named = [w for w in words if isinstance(w, str)]
    expected = ("a whole number" if key in INTEGER_INPUTS else "a number") + (f" or {', '.join(named)}" if named else "")
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        raise ConfigError(f"{name(key)}: expected {expected}, got {_shown(x)}")
    if not math.isfinite(x):
        raise ConfigError(f"{name(key)}: expected {expected}, got {_shown(x)} (not a finite number)")
    if key in INTEGER_INPUTS:
        if not float(x).is_integer():
            raise ConfigError(f"{name(key)}: expected {expected}, got {_shown(x)}")
        x = int(x)
    low = AT_LEAST.get(key)
    if low is not None and x < low:
        raise ConfigError(f"{name(key)} must be >= {low} (got {_shown(x)})")
    if abs(x) > MAX_INPUT:
        raise ConfigError(f"{name(key)} must be at most {MAX_INPUT:g} (got {_shown(x)})")
    return x


def _shown(x) -> str:
    """A value as the user would type it (8, not 8.0; a word in quotes), bounded in length."""
    if isinstance(x, str):
        return repr(short(x, 40))
    return short(int(x) if isinstance(x, float) and x.is_integer() and abs(x) < 1e15 else x, 40)


def make_grid(phase: str, values: Mapping[str, Any] | None = None) -> Columns:
    """Cartesian product of the given values (scalars or lists) with defaults elsewhere."""
    defaults = PHASE_DEFAULTS[phase]
    values = check_inputs(phase, dict(values or {}))
    cols: dict[str, list] = {}
    for k, d in defaults.items():
        v = values.get(k, d.value)
        if v is None:
            v = d.value
        many = not isinstance(v, SCALARS) and np.ndim(v) > 0  # a list, array or Series
        cols[k] = list(v) if many else [v]
    return resolve_defaults(phase, product(cols))


def grid_from_rows(phase: str, rows: list[Mapping[str, Any]]) -> Columns:
    """One configuration per mapping (missing keys take the defaults), no cartesian product.
    The given cells are checked a column at a time (:func:`check_inputs`: a long column of
    fine numbers as one array), so a planner's thousands of rows cost one check per input."""
    defaults = PHASE_DEFAULTS[phase]
    keys = list(dict.fromkeys(k for order in dict.fromkeys(tuple(r) for r in rows) for k in order))
    cols = {}
    for k in keys:
        cells = [r.get(k) for r in rows]
        try:
            whole = None not in cells  # (``in``'s C loop; a cell that is an array: one by one)
        except (ValueError, TypeError):  # no truth value (an array, pandas' NA)
            whole = all(v is not None for v in cells)
        at = range(len(rows)) if whole else [i for i, v in enumerate(cells) if v is not None]
        checked = check_inputs(phase, {k: (cells if whole else [cells[i] for i in at]) if at else None}).get(k, [])
        if k in defaults:
            if whole:
                cols[k] = list(checked)
                continue
            col = [defaults[k].value] * len(rows)
            for i, v in zip(at, checked):
                col[i] = v
            cols[k] = col
    df = Columns({k: infer(cols[k]) if k in cols else np.repeat(infer([d.value]), len(rows))
                  for k, d in defaults.items()}, n=len(rows))
    return resolve_defaults(phase, df)


def resolve_defaults(phase: str, df: Columns) -> Columns:
    """Fill the inputs whose default depends on other inputs (EP = dies, kv_len), in the
    columns of ``df`` (a grid just made: its columns are replaced, never written into)."""
    if phase in ("gemm", "attention"):
        return df
    if phase == "collective":
        df["dies"] = np.where(df["dies"] <= 0, df["ep"], df["dies"])
        return df
    if phase != "afd":
        df["ep"] = np.where(df["ep"] <= 0, df["dies"], df["ep"])
    if phase == "prefill":
        df["pool_readers"] = np.where(df["pool_readers"] <= 0, df["dies"], df["pool_readers"])
    if phase in ("decode", "afd"):
        df["kv_len"] = np.where(np.isnan(df["kv_len"].astype(float)), df["prompt_len"] + df["output_len"] / 2, df["kv_len"])
    return df  # the inputs that follow the system and the model: cmperf/deployment.py


def validate(phase: str, df: Columns, m, hw, given: set | frozenset = frozenset(GIVEN_ALL)) -> tuple[np.ndarray, np.ndarray]:
    """Vectorised checks; returns (valid mask, reason per row: '' when valid). ``m`` and ``hw``
    are numeric views whose swept fields are arrays over the rows of ``df`` (a row is checked
    with its own spec values). ``given``: the inputs the user set; a message names a default
    by what it defaults to (EP = --dies), not by a flag the user never typed."""
    reason = np.full(len(df), "", dtype=object)

    def check(bad, msg):
        bad = np.asarray(bad, dtype=bool)
        if not (bad.item() if bad.size == 1 else bad.any()):  # most checks find nothing: the rows' reasons are not read
            return
        bad = bad & (reason == "")
        if bad.any():
            reason[bad] = [msg(i) for i in np.flatnonzero(bad)]

    def at(x, i):  # row i of a value that may be an array over the rows (a swept spec field), as typed
        v = np.broadcast_to(np.asarray(x), (len(df),))[i]
        v = v.item() if isinstance(v, np.generic) else v
        return short(int(v) if isinstance(v, float) and v.is_integer() else v)

    g = df
    mo = m.moe
    if phase == "gemm":
        for c in ("m", "n", "k", "groups"):
            check(g[c] <= 0, lambda i, c=c: f"gemm {c} must be > 0 (got {short(g[c].iat[i])})")
        check(~g["layout"].astype(str).isin(["contiguous", "masked"]),
              lambda i: f"gemm layout {short(g['layout'].iat[i])!r}: expected contiguous or masked")
        peaks = set(dtypes_of(hw.chip.die.peak_flops_per_s))
        check(~g["dtype"].astype(str).isin(peaks),
              lambda i: f"gemm dtype {short(g['dtype'].iat[i])!r}: chip {hw.chip.name} runs {', '.join(sorted(peaks))}")
        return reason == "", reason
    if phase == "attention":
        for c in ("batch", "s_q", "h_q", "seq_k"):
            check(g[c] <= 0, lambda i, c=c: f"attention {c} must be > 0 (got {short(g[c].iat[i])})")
        check(np.mod(m.attention.num_heads, g["h_q"]) != 0,
              lambda i: f"attention h_q {g['h_q'].iat[i]} must divide the model's {at(m.attention.num_heads, i)} heads")
        return reason == "", reason
    ep_given = "ep" in given or phase == "collective"
    ep_fix = "pick an EP" if ep_given else "give an --ep"

    def ep_at(i):  # the EP of row i as the user set it: the flag, or the default it took
        return f"--ep {g['ep'].iat[i]}" if ep_given else f"EP {g['ep'].iat[i]} (= --dies; --ep not given)"
    dies_per_pkg = hw.chip.dies_per_package
    system_dies = hw.system.nodes * hw.system.node.chips * dies_per_pkg
    if phase == "afd":
        _validate_afd(g, m, hw, check, system_dies, at)
        return reason == "", reason
    check(g["dies"] <= 0, lambda i: f"--dies must be positive (got {g['dies'].iat[i]})")
    check(g["dies"] > system_dies,
          lambda i: f"--dies {g['dies'].iat[i]} exceeds the {at(system_dies, i)} dies of {hw.system.name}")
    check(g["ep"] > g["dies"], lambda i: f"--ep {g['ep'].iat[i]} exceeds --dies {g['dies'].iat[i]}")
    check(np.mod(g["dies"], g["ep"]) != 0,
          lambda i: f"--ep {g['ep'].iat[i]} does not divide --dies {g['dies'].iat[i]} (the instance must hold whole EP groups)")
    for ph in ("decode", "prefill") if phase == "collective" else (phase,):
        outer = hw.system.expert_parallel[ph].tiers[-1]
        domain = hw.system.tiers[outer].domain_chips
        if domain is not None:
            reach = domain * dies_per_pkg
            check(g["ep"] > reach,
                  lambda i, reach=reach, outer=outer: f"{ep_at(i)} exceeds the {at(reach, i)} dies one '{outer}' "
                                                      f"domain connects (expert parallelism runs over {outer})")
    if mo is None and phase == "collective":
        check(np.ones(len(g), dtype=bool), lambda i: f"model {m.name} has no MoE layers: no dispatch/combine to time")
    _check_experts(g, g["ep"], ep_at, ep_fix, m, check, at, shared_needed=phase != "collective")  # Table 7 routes top-k only
    if phase == "collective":
        check(g["tokens"] <= 0, lambda i: f"tokens must be > 0 (got {short(g['tokens'].iat[i])})")
        check(g["comm_sms"] < 0, lambda i: f"comm_sms must be >= 0 (got {short(g['comm_sms'].iat[i])})")
        return reason == "", reason
    check(~g["microbatches"].isin([0, 1, 2]), lambda i: f"--microbatches must be 1, 2 or auto (got {g['microbatches'].iat[i]})")
    check(g["prompt_len"] < 1, lambda i: f"--prompt-len must be >= 1 (got {g['prompt_len'].iat[i]})")
    check(~g["mtp"].isin([0, 1]), lambda i: "--mtp must be on or off")
    for ph in ("decode", "prefill"):  # communication holds some of a die's units; compute keeps one at least
        overlap = hw.system.overlap[ph]
        if overlap.style == "compute-comm":
            held = np.asarray(overlap.comm_units, dtype=float)
            check(held > hw.chip.die.vector_units - 1,
                  lambda i, ph=ph, held=held: f"system overlap.{ph}.comm_units {at(held, i)}: communication would hold "
                                              f"all of a die's {at(hw.chip.die.vector_units, i)} units, none left to compute")
    if phase == "decode":
        _check_decode_tokens(g, m, check)
        share = g["attention_share"].to_numpy(dtype=float)
        check((share <= 0) | (share >= 1),
              lambda i: f"--attention-share must be within (0, 1) (got {short(share[i])})")
        def cores(i):
            return (f"(a die has {at(hw.chip.die.matrix_units, i)} matrix and {at(hw.chip.die.vector_units, i)} vector units; "
                    f"each stream needs at least one of each)")

        check(~np.isnan(share) & ~core_split_fits(hw, np.nan_to_num(share, nan=0.5)),
              lambda i: f"--attention-share {short(share[i])} leaves a stream less than one core {cores(i)}")
        overlap = hw.system.overlap.decode
        if overlap.style == "core-split":
            check((g["microbatches"] == 2) & ~core_split_fits(hw, overlap.attention_share),
                  lambda i: f"--microbatches 2: the system's attention share {short(overlap.attention_share)} "
                            f"(overlap.decode) leaves a stream less than one core {cores(i)}")
        check(g["chunk_tokens"] < 0, lambda i: f"--chunk-tokens must be >= 0 (got {short(g['chunk_tokens'].iat[i])})")
        check(g["tp"] < 1, lambda i: f"--tp must be >= 1 (got {g['tp'].iat[i]})")
        check(np.mod(m.attention.num_heads, g["tp"]) != 0,
              lambda i: f"--tp {g['tp'].iat[i]} does not divide the {at(m.attention.num_heads, i)} attention heads")
        check(np.mod(g["dies"], g["tp"]) != 0, lambda i: f"--tp {g['tp'].iat[i]} does not divide --dies {g['dies'].iat[i]}")
    else:
        check(g["tokens_per_npu"] <= 0, lambda i: f"--tokens-per-npu must be > 0 (got {short(g['tokens_per_npu'].iat[i])})")
        check((g["cached_len"] < 0) | (g["cached_len"] >= g["prompt_len"]),
              lambda i: f"--cached-len must be >= 0 and below --prompt-len {g['prompt_len'].iat[i]} (got {g['cached_len'].iat[i]})")
        check((g["cached_len"] > 0) & (not can_cache(hw)),
              lambda i: str(no_cache_error(hw, f"--cached-len {g['cached_len'].iat[i]}")))
        check(g["pool_len"] > g["cached_len"],
              lambda i: f"--pool-len {g['pool_len'].iat[i]}: at most --cached-len {g['cached_len'].iat[i]} (the pool holds part of the cached prefix)")
        check((g["pool_len"] > 0) & (hw.system.memory_pool is None),
              lambda i: f"--pool-len {g['pool_len'].iat[i]}: system {hw.system.name} has no memory pool (`memory_pool`) to read it from")
        # a prompt's tokens may be split over its attention TP group (the SP half of SP-TP-SP), no further
        group_tokens = g["tokens_per_npu"] / hw.chip.dies_per_package * g["attn_tp"]
        check(group_tokens < g["prompt_len"] - g["cached_len"],
              lambda i: f"--tokens-per-npu {at(g['tokens_per_npu'], i)} puts less than one prompt's computed tokens "
                        f"(--prompt-len {g['prompt_len'].iat[i]} - --cached-len {g['cached_len'].iat[i]}) on an attention TP "
                        f"group of --attn-tp {g['attn_tp'].iat[i]} dies: a prompt is split over its TP group at most")
        kv_tier = hw.system.kv_transfer_tier
        kv_domain = hw.system.tiers[kv_tier].domain_chips
        if kv_domain is not None:  # the decode instance the KV cache goes to is on other NPUs of the same domain
            check(g["dies"] / dies_per_pkg + 1 > kv_domain,
                  lambda i: f"a prefill instance of {g['dies'].iat[i]} dies: the system's kv_transfer_tier '{kv_tier}' "
                            f"connects {at(kv_domain, i)} NPUs per domain, too few for it and a decode instance to receive "
                            f"its KV cache (give a smaller --dies, or --set system.kv_transfer_tier=TIER that reaches further)")
        check(g["attn_tp"] < 1, lambda i: f"--attn-tp must be >= 1 (got {g['attn_tp'].iat[i]})")
        check(np.mod(g["dies"], g["attn_tp"]) != 0,
              lambda i: f"--attn-tp {g['attn_tp'].iat[i]} does not divide --dies {g['dies'].iat[i]}")
        check(np.mod(m.attention.num_heads, g["attn_tp"]) != 0,
              lambda i: f"--attn-tp {g['attn_tp'].iat[i]} does not divide the {at(m.attention.num_heads, i)} attention heads")
    return reason == "", reason


def _check_experts(g, ep, ep_at, ep_fix: str, m, check, at, shared_needed: bool = True) -> None:
    """The expert instances (routed + redundant + shared copies) split evenly over the
    ``ep`` dies that hold them (``ep_at(i)`` names row i's EP as the user set it); a shared
    expert needs a copy somewhere; the busiest die's load is at most the EP degree."""
    mo = m.moe
    check(g["redundant_experts"] < 0, lambda i: f"--redundant-experts must be >= 0 (got {g['redundant_experts'].iat[i]})")
    if mo is not None:
        shared = np.asarray(mo.shared_experts)
        if shared_needed:
            check((shared > 0) & (g["shared_copies"] < 1),
                  lambda i: f"--shared-copies must be >= 1: the model has a shared expert that some die must hold (got {g['shared_copies'].iat[i]})")
        check((shared == 0) & (g["shared_copies"] != 0),
              lambda i: f"--shared-copies must be 0: model {m.name} has no shared expert (got {g['shared_copies'].iat[i]})")
        inst = mo.routed_experts + g["redundant_experts"] + g["shared_copies"]
        check(np.mod(inst, ep) != 0,
              lambda i: (f"{ep_at(i)} does not divide the {at(inst, i)} expert instances "
                         f"({at(mo.routed_experts, i)} routed + {g['redundant_experts'].iat[i]} redundant + {g['shared_copies'].iat[i]} shared copies): "
                         f"a die holds whole experts; change --redundant-experts/--shared-copies or {ep_fix} that divides {at(inst, i)}"))
    check(g["expert_imbalance"] < 1, lambda i: f"--expert-imbalance must be >= 1 (1 = perfect balance; got {short(g['expert_imbalance'].iat[i])})")
    check(g["expert_imbalance"] > ep,
          lambda i: f"--expert-imbalance {at(g['expert_imbalance'], i)} exceeds {ep_at(i)}: "
                    f"max/mean load over {ep.iat[i]} dies is at most {ep.iat[i]} (one die takes every token)")


def _check_decode_tokens(g, m, check) -> None:
    """Batch, lengths and MTP of a decode step (EP decode and AFD)."""
    check(g["batch"] < 1, lambda i: f"--batch must be >= 1 request per NPU (got {short(g['batch'].iat[i])})")
    check(g["output_len"] < 1, lambda i: f"--output-len must be >= 1 (got {g['output_len'].iat[i]})")
    check(g["kv_len"] < 1, lambda i: f"--kv-len must be >= 1 (got {short(g['kv_len'].iat[i])})")
    check((g["mtp_acceptance"] < 0) | (g["mtp_acceptance"] > 1),
          lambda i: f"--mtp-acceptance must be within [0, 1] (got {short(g['mtp_acceptance'].iat[i])})")
    check((g["mtp"] == 1) & (g["mtp_k"] < 1), lambda i: f"--mtp-k must be >= 1 (got {g['mtp_k'].iat[i]})")
    check((g["mtp"] == 1) & (m.mtp.modules < 1), lambda i: "MTP requested but the model has no MTP module")


def _validate_afd(g, m, hw, check, system_dies, at) -> None:
    """AFD (docs/model.md §5.4): two positive, disjoint pools of dies within the system; every
    attention die reaches every expert die over the decode EP route, so both pools sit in one
    domain of its outer tier; the expert dies split the expert instances evenly (EP = expert
    dies); 1..4 microbatches or auto (0)."""
    if m.moe is None:
        check(np.ones(len(g), dtype=bool), lambda i: f"model {m.name} has no MoE layers: attention-FFN disaggregation needs experts")
    A, E = g["attention_dies"], g["expert_dies"]
    check(A <= 0, lambda i: f"--attention-dies must be positive (got {A.iat[i]})")
    check(E <= 0, lambda i: f"--expert-dies must be positive (got {E.iat[i]})")
    check(A + E > system_dies,
          lambda i: f"--attention-dies {A.iat[i]} + --expert-dies {E.iat[i]} exceed the {system_dies} dies of {hw.system.name}")
    outer = hw.system.expert_parallel["decode"].tiers[-1]
    domain = hw.system.tiers[outer].domain_chips
    if domain is not None:
        reach = domain * hw.chip.dies_per_package
        check(A + E > reach, lambda i: (f"--attention-dies {A.iat[i]} + --expert-dies {E.iat[i]} exceed the {reach} dies one "
                                        f"'{outer}' domain connects (the attention-expert transfers run over {outer})"))
    _check_experts(g, E, lambda i: f"--expert-dies {E.iat[i]}", "pick --expert-dies", m, check, at)
    check(~g["microbatches"].isin([0, 1, 2, 3, 4]), lambda i: f"--microbatches must be 1, 2, 3, 4 or auto (got {g['microbatches'].iat[i]})")
    check(g["prompt_len"] < 1, lambda i: f"--prompt-len must be >= 1 (got {g['prompt_len'].iat[i]})")
    check(~g["mtp"].isin([0, 1]), lambda i: "--mtp must be on or off")
    _check_decode_tokens(g, m, check)
