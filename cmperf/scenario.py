"""Scenario inputs: the parallel configuration and workload of a prediction, as a grid.

A grid is a table of numpy columns (:class:`cmperf.columns.Columns`) with one row per
configuration and one column per input; a single prediction is a grid of one row. Defaults
(cmperf/defaults.py) are the paper's deployment. Validation is vectorised: every row gets
``valid`` and, when it is not, the first ``reason``.
"""

from __future__ import annotations

import math
from typing import Any, Mapping

import numpy as np

from .columns import Columns, product
from .defaults import PHASE_DEFAULTS
from .errors import ConfigError


def make_grid(phase: str, values: Mapping[str, Any] | None = None) -> Columns:
    """Cartesian product of the given values (scalars or lists) with defaults elsewhere."""
    defaults = PHASE_DEFAULTS[phase]
    values = dict(values or {})
    unknown = set(values) - set(defaults)
    if unknown:
        raise ConfigError(f"unknown {phase} input(s): {', '.join(sorted(unknown))} (expected: {', '.join(defaults)})")
    cols: dict[str, list] = {}
    for k, d in defaults.items():
        v = values.get(k, d.value)
        if v is None:
            v = d.value
        cols[k] = list(v) if np.ndim(v) > 0 and not isinstance(v, str) else [v]  # a list, array or Series
    return resolve_defaults(phase, product(cols))


def grid_from_rows(phase: str, rows: list[Mapping[str, Any]]) -> Columns:
    """One configuration per mapping (missing keys take the defaults), no cartesian product."""
    defaults = PHASE_DEFAULTS[phase]
    for r in rows:
        unknown = set(r) - set(defaults)
        if unknown:
            raise ConfigError(f"unknown {phase} input(s): {', '.join(sorted(unknown))} (expected: {', '.join(defaults)})")
    df = Columns.from_records([{k: r.get(k, d.value) for k, d in defaults.items()} for r in rows], defaults)
    return resolve_defaults(phase, df)


def resolve_defaults(phase: str, df: Columns) -> Columns:
    """Fill the inputs whose default depends on others (EP = dies, kv_len, shared copies)."""
    df = df.copy()
    if phase in ("gemm", "attention"):
        return df
    if phase == "collective":
        df["dies"] = np.where(df["dies"] <= 0, df["ep"], df["dies"])
        return df
    if phase == "afd":  # one shared-expert copy per expert die unless set
        df["shared_copies"] = np.where(df["shared_copies"] <= 0, df["expert_dies"], df["shared_copies"])
    else:
        df["ep"] = np.where(df["ep"] <= 0, df["dies"], df["ep"])
    if phase in ("decode", "afd"):
        df["kv_len"] = np.where(np.isnan(df["kv_len"].astype(float)), df["prompt_len"] + df["output_len"] / 2, df["kv_len"])
    else:
        df["shared_copies"] = np.where(df["shared_copies"] <= 0, df["ep"], df["shared_copies"])
    return df


def validate(phase: str, df: Columns, m, hw) -> tuple[np.ndarray, np.ndarray]:
    """Vectorised checks; returns (valid mask, reason per row: '' when valid)."""
    reason = np.full(len(df), "", dtype=object)

    def check(bad, msg):
        bad = np.asarray(bad, dtype=bool) & (reason == "")
        if bad.any():
            reason[bad] = [msg(i) for i in np.flatnonzero(bad)]

    g = df
    mo = m.moe
    if phase == "gemm":
        for c in ("m", "n", "k", "groups"):
            check(g[c] <= 0, lambda i, c=c: f"gemm {c} must be > 0 (got {g[c].iat[i]})")
        check(~g["layout"].astype(str).isin(["contiguous", "masked"]),
              lambda i: f"gemm layout {g['layout'].iat[i]!r}: expected contiguous or masked")
        peaks = set(hw.chip.spec.die.peak_flops_per_s.dtypes())
        check(~g["dtype"].astype(str).isin(peaks),
              lambda i: f"gemm dtype {g['dtype'].iat[i]!r}: chip {hw.chip.name} runs {', '.join(sorted(peaks))}")
        return reason == "", reason
    if phase == "attention":
        for c in ("batch", "s_q", "h_q", "seq_k"):
            check(g[c] <= 0, lambda i, c=c: f"attention {c} must be > 0 (got {g[c].iat[i]})")
        check(np.mod(m.attention.num_heads, g["h_q"]) != 0,
              lambda i: f"attention h_q {g['h_q'].iat[i]} must divide the model's {m.attention.num_heads} heads")
        return reason == "", reason
    dies_per_pkg = hw.chip.dies_per_package
    system_dies = hw.system.nodes * hw.system.node.chips * dies_per_pkg
    if phase == "afd":
        _validate_afd(g, m, hw, check, system_dies)
        return reason == "", reason
    check(g["dies"] <= 0, lambda i: f"--dies must be positive (got {g['dies'].iat[i]})")
    check(g["dies"] > system_dies,
          lambda i: f"--dies {g['dies'].iat[i]} exceeds the {system_dies} dies of {hw.system.name}")
    check(g["ep"] > g["dies"], lambda i: f"--ep {g['ep'].iat[i]} exceeds --dies {g['dies'].iat[i]}")
    check(np.mod(g["dies"], g["ep"]) != 0,
          lambda i: f"--ep {g['ep'].iat[i]} does not divide --dies {g['dies'].iat[i]} (the instance must hold whole EP groups)")
    for ph in ("decode", "prefill") if phase == "collective" else (phase,):
        outer = hw.system.expert_parallel[ph].tiers[-1]
        domain = hw.system.tiers[outer].domain_chips
        if domain is not None:
            reach = domain * dies_per_pkg
            check(g["ep"] > reach,
                  lambda i, reach=reach, outer=outer: f"--ep {g['ep'].iat[i]} exceeds the {reach} dies one '{outer}' domain connects "
                                                      f"(expert parallelism runs over {outer})")
    if mo is None and phase == "collective":
        check(np.ones(len(g), dtype=bool), lambda i: f"model {m.name} has no MoE layers: no dispatch/combine to time")
    _check_experts(g, g["ep"], "--ep", m, check, shared_needed=phase != "collective")  # Table 7's benchmark routes top-k only
    if phase == "collective":
        check(g["tokens"] <= 0, lambda i: f"tokens must be > 0 (got {g['tokens'].iat[i]})")
        check(g["comm_sms"] < 0, lambda i: f"comm_sms must be >= 0 (got {g['comm_sms'].iat[i]})")
        return reason == "", reason
    check(~g["microbatches"].isin([0, 1, 2]), lambda i: f"--microbatches must be 1, 2 or auto (got {g['microbatches'].iat[i]})")
    check(g["prompt_len"] < 1, lambda i: f"--prompt-len must be >= 1 (got {g['prompt_len'].iat[i]})")
    check(~g["mtp"].isin([0, 1]), lambda i: "--mtp must be on or off")
    if phase == "decode":
        _check_decode_tokens(g, m, check)
        check((g["attention_share"] <= 0) | (g["attention_share"] >= 1),
              lambda i: f"--attention-share must be within (0, 1) (got {g['attention_share'].iat[i]})")
        check(g["tp"] < 1, lambda i: f"--tp must be >= 1 (got {g['tp'].iat[i]})")
        check(np.mod(m.attention.num_heads, g["tp"]) != 0,
              lambda i: f"--tp {g['tp'].iat[i]} does not divide the {m.attention.num_heads} attention heads")
        check(np.mod(g["dies"], g["tp"]) != 0, lambda i: f"--tp {g['tp'].iat[i]} does not divide --dies {g['dies'].iat[i]}")
    else:
        check(g["tokens_per_npu"] <= 0, lambda i: f"--tokens-per-npu must be > 0 (got {g['tokens_per_npu'].iat[i]})")
        check((g["cached_len"] < 0) | (g["cached_len"] >= g["prompt_len"]),
              lambda i: f"--cached-len must be >= 0 and below --prompt-len {g['prompt_len'].iat[i]} (got {g['cached_len'].iat[i]})")
        check((g["cached_len"] > 0) & (hw.system.memory_pool is None),
              lambda i: f"--cached-len {g['cached_len'].iat[i]}: system {hw.system.name} has no memory pool (`memory_pool`) to cache KV in")
        check(g["attn_tp"] < 1, lambda i: f"--attn-tp must be >= 1 (got {g['attn_tp'].iat[i]})")
        check(np.mod(g["dies"], g["attn_tp"]) != 0,
              lambda i: f"--attn-tp {g['attn_tp'].iat[i]} does not divide --dies {g['dies'].iat[i]}")
        check(np.mod(m.attention.num_heads, g["attn_tp"]) != 0,
              lambda i: f"--attn-tp {g['attn_tp'].iat[i]} does not divide the {m.attention.num_heads} attention heads")
    return reason == "", reason


def _check_experts(g, ep, flag: str, m, check, shared_needed: bool = True) -> None:
    """The expert instances (routed + redundant + shared copies) split evenly over the
    ``ep`` dies that hold them; a shared expert needs a copy somewhere."""
    mo = m.moe
    check(g["redundant_experts"] < 0, lambda i: f"--redundant-experts must be >= 0 (got {g['redundant_experts'].iat[i]})")
    if mo is not None:
        if mo.shared_experts > 0 and shared_needed:
            check(g["shared_copies"] < 1,
                  lambda i: f"--shared-copies must be >= 1: the model has a shared expert that some die must hold (got {g['shared_copies'].iat[i]})")
        if mo.shared_experts == 0:
            check(g["shared_copies"] != 0,
                  lambda i: f"--shared-copies must be 0: model {m.name} has no shared expert (got {g['shared_copies'].iat[i]})")
        inst = mo.routed_experts + g["redundant_experts"] + g["shared_copies"]
        check(np.mod(inst, ep) != 0,
              lambda i: (f"{flag} {ep.iat[i]} does not divide the {inst.iat[i]} expert instances "
                         f"({mo.routed_experts} routed + {g['redundant_experts'].iat[i]} redundant + {g['shared_copies'].iat[i]} shared copies); "
                         f"change --redundant-experts/--shared-copies or pick {'an EP' if flag == '--ep' else flag} that divides {inst.iat[i]}"))
    check(g["expert_imbalance"] < 1, lambda i: f"--expert-imbalance must be >= 1 (1 = perfect balance; got {g['expert_imbalance'].iat[i]})")


def _check_decode_tokens(g, m, check) -> None:
    """Batch, lengths and MTP of a decode step (EP decode and AFD)."""
    check(g["batch"] <= 0, lambda i: f"--batch must be > 0 requests per NPU (got {g['batch'].iat[i]})")
    check(g["output_len"] < 1, lambda i: f"--output-len must be >= 1 (got {g['output_len'].iat[i]})")
    check(g["kv_len"] < 1, lambda i: f"--kv-len must be >= 1 (got {g['kv_len'].iat[i]})")
    check((g["mtp_acceptance"] < 0) | (g["mtp_acceptance"] > 1),
          lambda i: f"--mtp-acceptance must be within [0, 1] (got {g['mtp_acceptance'].iat[i]})")
    check((g["mtp"] == 1) & (g["mtp_k"] < 1), lambda i: f"--mtp-k must be >= 1 (got {g['mtp_k'].iat[i]})")
    check((g["mtp"] == 1) & (m.mtp.modules < 1), lambda i: "MTP requested but the model has no MTP module")


def _validate_afd(g, m, hw, check, system_dies) -> None:
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
    _check_experts(g, E, "--expert-dies", m, check)
    check(~g["microbatches"].isin([0, 1, 2, 3, 4]), lambda i: f"--microbatches must be 1, 2, 3, 4 or auto (got {g['microbatches'].iat[i]})")
    check(g["prompt_len"] < 1, lambda i: f"--prompt-len must be >= 1 (got {g['prompt_len'].iat[i]})")
    check(~g["mtp"].isin([0, 1]), lambda i: "--mtp must be on or off")
    _check_decode_tokens(g, m, check)
