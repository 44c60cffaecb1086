"""The deployment a simulation runs (docs/model.md §12.3): groups of identical instances.

Given as ``--prefill 6x32 --decode 1x320`` (count x dies, then options ``:KEY=VALUE``:
``tp`` the attention TP of a prefill instance or the TP of a decode instance, ``ep``,
``redundant`` routed expert copies, ``shared`` shared-expert copies, ``mtp``, and the engine's
limits ``pass_tokens`` and ``running``: :data:`LIMITS`), as ``--afd 1x224+96`` (attention +
expert dies) for an attention-FFN disaggregated decode, or as a YAML file::

    prefill: [{count: 6, dies: 32, attn_tp: 4, pass_tokens: 28680}]
    decode: [{count: 1, dies: 320, running: 832}]

A group states its count and size (``dies``; an AFD group its attention and expert dies); every
other input an instance leaves unset follows the system and the model (cmperf/deployment.py).
Without one: the system's published deployment (``deployment.prefill.instances`` /
``decode.instances``: the paper's 6 x 32 + 1 x 320 on CloudMatrix384), else the deployment
``cmperf plan`` chooses for the workload.
"""

from __future__ import annotations

import math

import re
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import ConfigError, short, short_path, whole_number


@dataclass
class InstanceGroup:
    count: int
    inputs: dict  # predict inputs of one instance (dies, attn_tp / tp, or attention_dies + expert_dies)
    limits: dict = field(default_factory=dict)  # the serving engine's limits of one instance (LIMITS), beyond the stack's
    where: str = ""  # where the user wrote it, for errors: "--prefill 6x32", "dep.yaml: prefill[0]"


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
MAX_INSTANCES = 100_000  # instances of one group (the planner's MAX_NPUS bounds their NPUs)
MAX_GROUP_DIES = 10_000_000  # dies of one instance before the system is known (then: the system's)


def parse_group(text: str, flag: str) -> InstanceGroup:
    """``COUNTxDIES[:KEY=VALUE]...`` (``COUNTxATTENTION+EXPERT`` for --afd): KEY one of tp (a
    prefill instance's attention TP, a decode instance's TP), ep, redundant (routed expert
    copies), shared (shared-expert copies), mtp (0/1), pass_tokens, running (LIMITS)."""
    m = _GROUP.match(str(text).strip())
    if not m:
        raise ConfigError(f"{flag} {short(str(text), 40)}: expected COUNTxDIES[:KEY=VALUE]..., e.g. 6x32, 1x320:tp=2 or "
                          f"7x16:redundant=0:pass_tokens=28680 (keys: {', '.join([*OPTIONS, *LIMITS])})"
                          + (" (AFD: COUNTxATTENTION+EXPERT, e.g. 1x224+96)" if flag == "--afd" else ""))
    where = f"{flag} {str(text).strip()}"
    if len(str(text).split(":")[0]) > 40:
        raise ConfigError(f"{flag} {short(str(text), 40)}: a number too long for a count of instances or dies")
    count, dies, experts = (int(x) if x else None for x in m.groups()[:3])
    opts, limits = {}, {}
    for item in [x for x in (m.group(4) or "").split(":") if x]:
        key, value = re.match(r"^([a-z_]+?)=?([0-9.e+]+)$", item).groups()
        if key not in OPTIONS and key not in LIMITS:
            raise ConfigError(f"{where}: unknown option '{key}' (expected one of {', '.join([*OPTIONS, *LIMITS])})")
        try:
            v = float(value)
        except ValueError:
            v = float("nan")
        least = 1 if key in LIMITS or key in ("tp", "ep") else 0
        if not (v >= least and v == int(v) and v <= 1e9):
            raise ConfigError(f"{where}: option '{key}' expects a whole number >= {least} (got {value})")
        if key == "mtp" and v > 1:
            raise ConfigError(f"{where}: option 'mtp' expects 0 (off) or 1 (on) (got {value})")
        (limits if key in LIMITS else opts)[key] = int(v)
    tp = opts.pop("tp", None)
    if count < 1 or dies < 1 or (experts is not None and experts < 1):
        raise ConfigError(f"{where}: counts, dies and TP must be at least 1")
    if count > MAX_INSTANCES:
        raise ConfigError(f"{where}: {count:,} instances; at most {MAX_INSTANCES:,} in one group")
    if flag == "--afd":
        if experts is None:
            raise ConfigError(f"{where}: expected COUNTxATTENTION+EXPERT dies, e.g. 1x224+96")
        return InstanceGroup(count, {"attention_dies": dies, "expert_dies": experts, **{OPTIONS[k]: v for k, v in opts.items()}},
                             limits, where)
    if experts is not None:
        raise ConfigError(f"{where}: '+EXPERT' dies belong to --afd")
    inputs = {"dies": dies, **{OPTIONS[k]: v for k, v in opts.items()}}
    if tp is not None:
        inputs["attn_tp" if flag == "--prefill" else "tp"] = tp
    return InstanceGroup(count, inputs, limits, where)


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


def given(path: str | None, prefill, decode, afd, colocated=()) -> DeploymentSpec | None:
    """The deployment the user gave: ``--deployment FILE`` or the group flags, never both
    (one would be dropped), None when neither."""
    flags = [f for f, v in (("--prefill", prefill), ("--decode", decode), ("--afd", afd), ("--colocated", colocated)) if v]
    if path is not None and flags:
        raise ConfigError(f"--deployment {short_path(path)} and {', '.join(flags)}: give the deployment once, "
                          f"as a file or as flags")
    return from_file(path) if path is not None else from_flags(prefill or [], decode or [], afd or [], colocated or [])


# --------------------------------------------------------------------------- the file's schema
# What a group of a deployment file (or of a serving row's deployment) may hold, with ranges.
# A decode group has no batch: the traffic and the stack's max_running_per_rank set it.
FIELDS = {
    "prefill": {"count": "instances", "dies": "dies per instance", "attn_tp": "attention TP (divides dies)"},
    "decode": {"count": "instances", "dies": "dies per instance", "tp": "attention TP (divides dies)"},
    "colocated": {"count": "instances", "dies": "dies per instance", "tp": "attention TP (divides dies)"},
    "afd": {"count": "instances", "attention_dies": "attention dies", "expert_dies": "expert dies"},
}
_GROUP_OPTIONS = {"ep": "expert-parallel degree", "redundant_experts": "redundant routed-expert copies",
                  "shared_copies": "shared-expert copies", "mtp": "MTP on (1) or off (0)", **LIMITS}
for _fields in FIELDS.values():
    _fields.update(_GROUP_OPTIONS)
FIELD_MIN = {"redundant_experts": 0, "shared_copies": 0, "mtp": 0}  # every other field: at least 1
FIELD_MAX = {"mtp": 1}
# a group's size is stated, as --prefill COUNTxDIES states it: a group without dies was run at
# the system's instance size, said nowhere (issue 33)
REQUIRED = {"prefill": ("count", "dies"), "decode": ("count", "dies"), "colocated": ("count", "dies"),
            "afd": ("count", "attention_dies", "expert_dies")}


def _whole(v, where: str, most: int, least: int = 1) -> int:
    return whole_number(v, where, least, most)


def from_data(raw, where: str) -> DeploymentSpec:
    """The deployment a mapping states (a deployment file, a serving row's ``deployment:``),
    checked against its schema (FIELDS): every error names ``where``, the group and the field
    (``dep.yaml: prefill[0].dies: ...``)."""
    if not isinstance(raw, dict) or not raw:
        found = "an empty mapping" if isinstance(raw, dict) else type(raw).__name__ if raw is not None else "nothing"
        raise ConfigError(f"{where}: expected a mapping of prefill and decode (or afd, or colocated) instance groups, "
                          f"e.g. {{prefill: [{{count: 6, dies: 32}}], decode: [{{count: 1, dies: 320}}]}} (found {found})")
    unknown = [str(k) for k in raw if k not in FIELDS]
    if unknown:
        raise ConfigError(f"{where}: unknown group {short(unknown[0], 40)!r} (expected prefill, decode, afd or colocated)")
    groups = {}
    for key in FIELDS:
        items = raw.get(key)
        if items is None:
            items = []
        if not isinstance(items, list):
            raise ConfigError(f"{where}: {key}: expected a list of {{count, dies, ...}} groups (found {type(items).__name__})")
        out = []
        for j, it in enumerate(items):
            at = f"{where}: {key}[{j}]"
            if not isinstance(it, dict):
                raise ConfigError(f"{at}: expected a group {{{', '.join(FIELDS[key])}}} (found {short(it, 40)})")
            extra = [str(k) for k in it if k not in FIELDS[key]]
            if extra:
                hint = ("; a batch follows the traffic and the stack's max_running_per_rank" if extra[0] == "batch" else "")
                raise ConfigError(f"{at}.{short(extra[0], 40)}: unknown field (a {key} group has "
                                  f"{', '.join(FIELDS[key])}{hint})")
            for k in REQUIRED[key]:
                if k not in it:
                    raise ConfigError(f"{at}.{k}: required field is missing ({FIELDS[key][k]})")
            inputs = {k: _whole(v, f"{at}.{k}", FIELD_MAX.get(k, MAX_INSTANCES if k == "count" else MAX_GROUP_DIES), FIELD_MIN.get(k, 1))
                      for k, v in it.items()}
            count = inputs.pop("count")
            lim = {k: inputs.pop(k) for k in LIMITS if k in inputs}
            out.append(InstanceGroup(count, inputs, lim, at))
        groups[key] = out
    if groups["colocated"]:
        if groups["prefill"] or groups["decode"] or groups["afd"]:
            raise ConfigError(f"{where}: colocated instances prefill their own prompts: no prefill, decode or afd groups with them")
        return DeploymentSpec(decode=groups["colocated"], colocated=True)
    if groups["decode"] and groups["afd"]:
        raise ConfigError(f"{where}: give decode or afd instances, not both")
    if not groups["prefill"] or not (groups["decode"] or groups["afd"]):
        raise ConfigError(f"{where}: a deployment needs prefill and decode (or afd) instances, or colocated ones")
    return DeploymentSpec(prefill=groups["prefill"], decode=groups["afd"] or groups["decode"],
                          decode_phase="afd" if groups["afd"] else "decode")


def from_file(path: str) -> DeploymentSpec:
    from ..specs.loader import read_yaml

    return from_data(read_yaml(Path(path)), short_path(path))


# --------------------------------------------------------------------------- against the system
_FLAG = re.compile(r"--(dies|tp|attn-tp|attention-dies|expert-dies|ep)\b")


def _field_named(message: str) -> str:
    """A prediction's error about a group's input, with the group's field names for the
    flags it names (the user wrote ``attn_tp: 3`` in a file, or ``:tp=3``; not --attn-tp)."""
    return _FLAG.sub(lambda m: m.group(1).replace("-", "_"), message)


def check(dep: DeploymentSpec, specs, budget_npus: int | None = None, budget_flag: str = "--npus",
          one_system: bool = True) -> list[str]:
    """Check ``dep`` against the system of ``specs``: every instance within the system, each
    group's inputs resolvable (an error names the group and its field, not a flag), its
    NPUs within ``budget_npus`` (``budget_flag``) and, when ``one_system``, within the system.
    Returns warnings: an instance that does not hold its weights, dies that leave half an NPU."""
    from ..errors import CmperfError
    from ..predict import predict
    from ..report import misfit

    hw, _ = specs.views()
    dpp = int(hw.chip.dies_per_package)
    system_npus = hw.system_npus
    name = hw.system.name
    warnings = []
    kinds = [("prefill", g) for g in dep.prefill] + [(dep.decode_phase if not dep.colocated else "decode", g) for g in dep.decode]
    dies_total = 0
    for phase, g in kinds:
        at = g.where or f"{phase} group"
        dies = (g.inputs.get("attention_dies", 0) + g.inputs.get("expert_dies", 0)) if phase == "afd" else g.inputs.get("dies")
        if dies is not None and dies > system_npus * dpp:
            raise ConfigError(f"{at}: an instance of {dies:,} dies; the system {name} has {system_npus * dpp:,} "
                              f"({system_npus:,} NPUs of {dpp} dies)")
        try:
            r = predict(phase, dict(g.inputs), specs)
        except CmperfError as e:
            raise ConfigError(f"{at}: {_field_named(str(e))}") from None
        row = r.columns.record(0)
        dies = float(row["attention_dies"] + row["expert_dies"]) if phase == "afd" else float(row["dies"])
        dies_total += g.count * dies
        if dpp > 1 and dies % dpp:
            warnings.append(f"{at}: {dies:g} {'die is' if dies == 1 else 'dies are'} {dies / dpp:g} NPUs of {dpp} dies: "
                            f"the other die of one NPU idles")
        if not bool(row.get("fits", True)):
            warnings.append(f"{at}: {misfit(row, phase)}")
    npus = dies_total / dpp
    if one_system and npus > system_npus:
        raise ConfigError(f"{dep.describe()}: {npus:,.0f} NPUs; the system {name} has {system_npus:,}")
    if budget_npus is not None and npus > budget_npus:
        raise ConfigError(f"{dep.describe()}: {npus:,.0f} NPUs, more than {budget_flag} {budget_npus:,}")
    return warnings


def default_deployment(specs, workload) -> DeploymentSpec:
    """The system's published deployment (instances of its deployment section) where this
    model's instances of it fit the system, else the deployment ``cmperf plan`` chooses for
    ``workload`` on the system's supernode."""
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
        system_dies = hw.system_dies
        if counts[0] * pre["dies"] + counts[1] * dec["dies"] <= system_dies:
            return DeploymentSpec(prefill=[InstanceGroup(counts[0], {k: pre[k] for k in ("dies", "attn_tp") if k in pre})],
                                  decode=[InstanceGroup(counts[1], {k: dec[k] for k in ("dies", "tp") if k in dec})])
        # the published counts of this model's instance sizes overflow the system (Kimi K2's
        # EP72 decode + a 16-GPU prefill on a 72-GPU NVL72): the planner splits it instead
    from ..plan.planner import plan

    p = plan(workload, specs=specs, shape_names=("pd",))
    if p.best is None:
        raise ConfigError(f"no deployment to simulate: {p.message}; give --prefill and --decode")
    b = p.best
    return DeploymentSpec(prefill=[InstanceGroup(int(b["prefill_instances"]), {"dies": int(b["prefill_dies"]), "attn_tp": int(b["prefill_tp"])})],
                          decode=[InstanceGroup(int(b["decode_instances"]), {"dies": int(b["decode_dies"]), "tp": int(b["decode_tp"])})])


def pass_tokens(per_npu: float, dies: int, dpp: int) -> int:
    """The prompt tokens one pass (or co-located iteration) of an instance of ``dies`` takes
    at a plan's ``per_npu`` tokens per NPU (``dpp`` dies per NPU), at least one."""
    return max(int(round(float(per_npu) * int(dies) / dpp)), 1)


def with_plan_budget(dep: DeploymentSpec, b, dpp: int) -> tuple[DeploymentSpec, bool]:
    """``dep`` with the pass budget the plan of it chose (row ``b``: its tokens per NPU, the
    budget that serves its rate within the SLOs, SGLang's --max-prefill-tokens) on every
    prefill group that sets none (a co-located group: its iteration's chunk), as
    :func:`from_plan_row` gives a plan's own deployment; whether any group took it. A group's
    own ``pass_tokens`` stays. Simulating the plan's rate without its budget runs passes the
    plan did not time (the stack's largest budget: longer passes, a TTFT the plan never
    promised)."""
    from dataclasses import replace

    per_npu = float(b.get("prefill_tokens_per_npu", math.nan))
    if not (math.isfinite(per_npu) and per_npu > 0):
        return dep, False
    groups = dep.decode if dep.colocated else dep.prefill
    new = [g if "pass_tokens" in g.limits or "dies" not in g.inputs else
           replace(g, limits={**g.limits, "pass_tokens": pass_tokens(per_npu, g.inputs["dies"], dpp)})
           for g in groups]
    if all(a is b for a, b in zip(new, groups)):
        return dep, False
    return (replace(dep, decode=new) if dep.colocated else replace(dep, prefill=new)), True


def from_plan_row(b, dpp: int) -> DeploymentSpec:
    """The DeploymentSpec of one plan row (PD, AFD or co-located), its prefill passes at the
    row's tokens per NPU (the pass budget the plan chose: SGLang's --max-prefill-tokens)."""
    if b["shape"] == "colocated":  # the row's chunk per NPU over the instance's own NPUs, every iteration (docs/model.md §9.4)
        return DeploymentSpec(decode=[InstanceGroup(int(b["decode_instances"]), {"dies": int(b["decode_dies"]),
                                                                                  "tp": int(b["decode_tp"])},
                                                    {"pass_tokens": pass_tokens(b["prefill_tokens_per_npu"], b["decode_dies"], dpp)})],
                              colocated=True)
    if b["shape"] == "afd":
        dec = InstanceGroup(int(b["decode_instances"]), {"attention_dies": int(b["attention_dies"]),
                                                         "expert_dies": int(b["expert_dies"])})
    else:
        dec = InstanceGroup(int(b["decode_instances"]), {"dies": int(b["decode_dies"]), "tp": int(b["decode_tp"])})
    return DeploymentSpec(prefill=[InstanceGroup(int(b["prefill_instances"]), {"dies": int(b["prefill_dies"]),
                                                                               "attn_tp": int(b["prefill_tp"])},
                                                 {"pass_tokens": pass_tokens(b["prefill_tokens_per_npu"], b["prefill_dies"], dpp)})],
                          decode=[dec], decode_phase="afd" if b["shape"] == "afd" else "decode")
