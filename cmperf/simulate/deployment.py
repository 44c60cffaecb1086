"""The deployment a simulation runs (docs/model.md §12.3): groups of identical instances.

Given as ``--prefill 6x32 --decode 1x320`` (count x dies, then options ``:KEY=VALUE``:
``tp`` the attention TP of a prefill instance or the TP of a decode instance, ``ep``,
``redundant`` routed expert copies, ``shared`` shared-expert copies, ``mtp``, and the engine's
limits ``pass_tokens`` and ``running``: :data:`LIMITS`), as ``--afd 1x224+96`` (attention +
expert dies) for an attention-FFN disaggregated decode, or as a YAML file::

    prefill: [{count: 6, dies: 32, attn_tp: 4, pass_tokens: 28680}]
    decode: [{count: 1, dies: 320, running: 832}]

Every input an instance leaves unset follows the system and the model (cmperf/deployment.py).
Without one: the system's published deployment (``deployment.prefill.instances`` /
``decode.instances``: the paper's 6 x 32 + 1 x 320 on CloudMatrix384), else the deployment
``cmperf plan`` chooses for the workload.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import ConfigError


@dataclass
class InstanceGroup:
    count: int
    inputs: dict  # predict inputs of one instance (dies, attn_tp / tp, or attention_dies + expert_dies)
    limits: dict = field(default_factory=dict)  # the serving engine's limits of one instance (LIMITS), beyond the stack's


@dataclass
class DeploymentSpec:
    prefill: list = field(default_factory=list)
    decode: list = field(default_factory=list)
    decode_phase: str = "decode"  # or "afd"
    colocated: bool = False  # the decode instances prefill their own prompts (aggregated serving)

    def npus(self, dpp: int, dec_inputs, pre_inputs) -> float:
        dec = sum(g.count * ((i["attention_dies"] + i["expert_dies"]) if self.decode_phase == "afd" else i["dies"])
                  for g, i in zip(self.decode, dec_inputs))
        pre = sum(g.count * i["dies"] for g, i in zip(self.prefill, pre_inputs))
        return (dec + pre) / dpp

    def describe(self, dec_inputs=None, pre_inputs=None) -> str:
        def one(g, i, kind):
            i = i or g.inputs
            if kind == "afd":
                return f"{g.count} x AFD ({i['attention_dies']:g} attention + {i['expert_dies']:g} expert dies)"
            tp = i.get("attn_tp" if kind == "prefill" else "tp")
            return f"{g.count} x {'co-located' if self.colocated else kind} {i['dies']:g} dies" + (f" (TP {tp:g})" if tp and tp != 1 else "")
        pre = [one(g, i, "prefill") for g, i in zip(self.prefill, pre_inputs or [None] * len(self.prefill))]
        dec = [one(g, i, self.decode_phase) for g, i in zip(self.decode, dec_inputs or [None] * len(self.decode))]
        return " + ".join(pre + dec)


_GROUP = re.compile(r"^(\d+)x(\d+)(?:\+(\d+))?((?::[a-z_]+=?[0-9.e+]+)*)$")
# per-group options: predict inputs, and the engine's limits of one instance
OPTIONS = {"tp": "tp", "ep": "ep", "redundant": "redundant_experts", "shared": "shared_copies", "mtp": "mtp"}
LIMITS = {"pass_tokens": "prompt tokens one prefill pass (or co-located iteration) takes at most (SGLang --max-prefill-tokens)",
          "running": "requests one instance runs at most (SGLang --max-running-requests)"}


def parse_group(text: str, flag: str) -> InstanceGroup:
    """``COUNTxDIES[:KEY=VALUE]...`` (``COUNTxATTENTION+EXPERT`` for --afd): KEY one of tp (a
    prefill instance's attention TP, a decode instance's TP), ep, redundant (routed expert
    copies), shared (shared-expert copies), mtp (0/1), pass_tokens, running (LIMITS)."""
    m = _GROUP.match(str(text).strip())
    if not m:
        raise ConfigError(f"{flag} {str(text)[:40]}: expected COUNTxDIES[:KEY=VALUE]..., e.g. 6x32, 1x320:tp=2 or "
                          f"7x16:redundant=0:pass_tokens=28680 (keys: {', '.join([*OPTIONS, *LIMITS])})"
                          + (" (AFD: COUNTxATTENTION+EXPERT, e.g. 1x224+96)" if flag == "--afd" else ""))
    count, dies, experts = (int(x) if x else None for x in m.groups()[:3])
    opts, limits = {}, {}
    for item in [x for x in (m.group(4) or "").split(":") if x]:
        key, value = re.match(r"^([a-z_]+?)=?([0-9.e+]+)$", item).groups()
        if key not in OPTIONS and key not in LIMITS:
            raise ConfigError(f"{flag} {text}: unknown option '{key}' (expected one of {', '.join([*OPTIONS, *LIMITS])})")
        try:
            v = float(value)
        except ValueError:
            v = float("nan")
        least = 1 if key in LIMITS or key in ("tp", "ep") else 0
        if not (v >= least and v == int(v) and v <= 1e9):
            raise ConfigError(f"{flag} {text}: option '{key}' expects a whole number >= {least} (got {value})")
        if key == "mtp" and v > 1:
            raise ConfigError(f"{flag} {text}: option 'mtp' expects 0 (off) or 1 (on) (got {value})")
        (limits if key in LIMITS else opts)[key] = int(v)
    tp = opts.pop("tp", None)
    if count < 1 or dies < 1:
        raise ConfigError(f"{flag} {text}: counts and dies must be at least 1")
    if flag == "--afd":
        if experts is None:
            raise ConfigError(f"{flag} {text}: expected COUNTxATTENTION+EXPERT dies, e.g. 1x224+96")
        return InstanceGroup(count, {"attention_dies": dies, "expert_dies": experts, **{OPTIONS[k]: v for k, v in opts.items() if k != "tp"}},
                             limits)
    if experts is not None:
        raise ConfigError(f"{flag} {text}: '+EXPERT' dies belong to --afd")
    inputs = {"dies": dies, **{OPTIONS[k]: v for k, v in opts.items()}}
    if tp is not None:
        inputs["attn_tp" if flag == "--prefill" else "tp"] = tp
    return InstanceGroup(count, inputs, limits)


def from_flags(prefill: list[str], decode: list[str], afd: list[str], colocated: list[str] = ()) -> DeploymentSpec | None:
    if colocated:
        if prefill or decode or afd:
            raise ConfigError("--colocated instances prefill their own prompts: not with --prefill, --decode or --afd")
        return DeploymentSpec(decode=[parse_group(c, "--colocated") for c in colocated], colocated=True)
    if not (prefill or decode or afd):
        return None
    groups = [parse_group(p, "--prefill") for p in prefill]
    dec = [parse_group(d, "--decode") for d in decode] + [parse_group(d, "--afd") for d in afd]
    if decode and afd:
        raise ConfigError("--decode and --afd: give one kind of decode instance")
    if not prefill or not (decode or afd):
        raise ConfigError("a deployment needs --prefill and --decode (or --afd) instances, or --colocated ones")
    return DeploymentSpec(prefill=groups, decode=dec, decode_phase="afd" if afd else "decode")


def from_file(path: str) -> DeploymentSpec:
    from ..specs.loader import read_yaml

    raw = read_yaml(Path(path))
    if not isinstance(raw, dict) or set(raw) - {"prefill", "decode", "afd", "colocated"}:
        raise ConfigError(f"{path}: expected a mapping of prefill and decode (or afd, or colocated) instance groups")
    groups = {}
    for key in ("prefill", "decode", "afd", "colocated"):
        items = raw.get(key) or []
        if not isinstance(items, list):
            raise ConfigError(f"{path}: field '{key}': expected a list of {{count, dies, ...}}")
        out = []
        for j, it in enumerate(items):
            if not isinstance(it, dict) or "count" not in it:
                raise ConfigError(f"{path}: field '{key}[{j}]': expected {{count: N, dies: D, ...}}")
            count = it["count"]
            if not isinstance(count, int) or isinstance(count, bool) or count < 1:
                raise ConfigError(f"{path}: field '{key}[{j}].count': expected a whole number >= 1 (got {count!r})")
            lim = {k: it[k] for k in LIMITS if k in it}
            for k, v in lim.items():
                if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                    raise ConfigError(f"{path}: field '{key}[{j}].{k}': expected a whole number >= 1 (got {v!r})")
            out.append(InstanceGroup(count, {k: v for k, v in it.items() if k != "count" and k not in LIMITS}, lim))
        groups[key] = out
    if groups["colocated"]:
        if groups["prefill"] or groups["decode"] or groups["afd"]:
            raise ConfigError(f"{path}: colocated instances prefill their own prompts: no prefill, decode or afd groups with them")
        return DeploymentSpec(decode=groups["colocated"], colocated=True)
    if groups["decode"] and groups["afd"]:
        raise ConfigError(f"{path}: give decode or afd instances, not both")
    if not groups["prefill"] or not (groups["decode"] or groups["afd"]):
        raise ConfigError(f"{path}: a deployment needs prefill and decode (or afd) instances")
    return DeploymentSpec(prefill=groups["prefill"], decode=groups["afd"] or groups["decode"],
                          decode_phase="afd" if groups["afd"] else "decode")


def default_deployment(specs, workload) -> DeploymentSpec:
    """The system's published deployment (instances of its deployment section), else the
    deployment ``cmperf plan`` chooses for ``workload`` on the system's supernode."""
    hw, _ = specs.views()
    dep = hw.system.deployment
    counts = None
    if dep is not None:
        pc = dep.prefill.instances if "instances" in dep.prefill.keys() else None
        dc = dep.decode.instances if "instances" in dep.decode.keys() else None
        if pc and dc:
            counts = (int(pc), int(dc))
    if counts is not None:
        from ..deployment import instance

        _, m = specs.views()
        pre = instance("prefill", hw, m, {})
        dec = instance("decode", hw, m, {})
        return DeploymentSpec(prefill=[InstanceGroup(counts[0], {k: pre[k] for k in ("dies", "attn_tp") if k in pre})],
                              decode=[InstanceGroup(counts[1], {k: dec[k] for k in ("dies", "tp") if k in dec})])
    from ..plan.planner import plan

    p = plan(workload, specs=specs, shape_names=("pd",))
    if p.best is None:
        raise ConfigError(f"no deployment to simulate: {p.message}; give --prefill and --decode")
    b = p.best
    return DeploymentSpec(prefill=[InstanceGroup(int(b["prefill_instances"]), {"dies": int(b["prefill_dies"]), "attn_tp": int(b["prefill_tp"])})],
                          decode=[InstanceGroup(int(b["decode_instances"]), {"dies": int(b["decode_dies"]), "tp": int(b["decode_tp"])})])


def from_plan_row(b, dpp: int) -> DeploymentSpec:
    """The DeploymentSpec of one plan row (PD, AFD or co-located), its prefill passes at the
    row's tokens per NPU (the pass budget the plan chose: SGLang's --max-prefill-tokens)."""
    pass_tokens = float(b["prefill_tokens_per_npu"]) * int(b["prefill_dies"]) / dpp
    if b["shape"] == "colocated":  # the row's chunk per NPU, every iteration (docs/model.md §9.4)
        return DeploymentSpec(decode=[InstanceGroup(int(b["decode_instances"]), {"dies": int(b["decode_dies"]),
                                                                                  "tp": int(b["decode_tp"])},
                                                    {"pass_tokens": max(int(round(pass_tokens)), 1)})], colocated=True)
    if b["shape"] == "afd":
        dec = InstanceGroup(int(b["decode_instances"]), {"attention_dies": int(b["attention_dies"]),
                                                         "expert_dies": int(b["expert_dies"])})
    else:
        dec = InstanceGroup(int(b["decode_instances"]), {"dies": int(b["decode_dies"]), "tp": int(b["decode_tp"])})
    return DeploymentSpec(prefill=[InstanceGroup(int(b["prefill_instances"]), {"dies": int(b["prefill_dies"]),
                                                                               "attn_tp": int(b["prefill_tp"])},
                                                 {"pass_tokens": int(round(pass_tokens))})],
                          decode=[dec], decode_phase="afd" if b["shape"] == "afd" else "decode")
