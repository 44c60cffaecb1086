"""``cmperf hw list|show``: the built-in chips and systems, and the facts derived from one."""

from __future__ import annotations

from typing import List, Optional

import typer

from .options import FormatOpt, SetOpt

hw_app = typer.Typer(no_args_is_help=True, help="Hardware specs (chips, systems). Example: cmperf hw show cloudmatrix384")


@hw_app.command("list")
def hw_list(fmt: str = FormatOpt):
    """List built-in chips and systems. Example: cmperf hw list"""
    from ..report import check_format, print_records
    from ..specs.loader import list_builtin, validate as _v, read_yaml

    records = []
    for kind in ("system", "chip"):
        for name, path in list_builtin(kind):
            spec = _v(kind, read_yaml(path), path)
            records.append({"section": kind, "quantity": name, "value": spec.description, "unit": "",
                            "confidence": spec.confidence, "note": str(path)})
    print_records(records, check_format(fmt), "hardware specs")


@hw_app.command("show")
def hw_show(name: str = typer.Argument("cloudmatrix384", help="chip or system: built-in name or YAML path"),
            fmt: str = FormatOpt, sets: Optional[List[str]] = SetOpt):
    """Peaks, ridge points and network tiers of a chip, or topology and totals of a system;
    a field that changes no output of DeepSeek-R1's default decode or prefill prediction on
    it is marked NOT USED. Example: cmperf hw show ascend-910c"""
    from ..facts import chip_facts, system_facts
    from ..errors import SpecError
    from ..report import check_format, print_records
    from ..specs.loader import hardware_kind, load_chip, load_hardware, split_overrides

    check_format(fmt)
    overrides = split_overrides(sets or [])
    is_chip = hardware_kind(name) == "chip"
    unused = [k for k in ("system", "model") if overrides[k]] if is_chip else [k for k in ("model",) if overrides[k]]
    if unused:
        key = next(iter(overrides[unused[0]]))
        raise SpecError(f"--set {unused[0]}.{key}: hw show {name} shows a {'chip' if is_chip else 'system'}; "
                        f"only {'--set chip.*' if is_chip else '--set chip.* and --set system.*'} apply to it")
    if is_chip:
        chip, _ = load_chip(name, overrides)
        records = chip_facts(chip)
        files = _system_of(load_chip(name)[0], {}) if sets else None
        print_records(_mark_unused(records, _system_of(chip, overrides), overrides, files), fmt,
                      f"{chip.name}: {chip.description}")
    else:
        hw = load_hardware(name, overrides)
        records = system_facts(hw) + chip_facts(hw.chip)
        print_records(_mark_unused(records, hw, overrides, load_hardware(name) if sets else None), fmt,
                      f"{hw.system.name}: {hw.system.description}")


def _system_of(chip, overrides):
    """The first built-in system built of ``chip`` (with the same overrides), to judge the
    chip's fields on; None if there is none."""
    from ..errors import CmperfError
    from ..specs.loader import list_builtin, load_hardware

    for system, _ in list_builtin("system"):
        try:
            hw = load_hardware(system, overrides)
        except CmperfError:
            continue
        if hw.chip.name == chip.name:
            return hw
    return None


PLAN_ONLY = "system.memory_pool."


def _mark_unused(records: list[dict], hw, overrides=None, files=None) -> list[dict]:
    """Records of spec fields get ``used`` (yes/no: whether the field changes any output of
    the default decode or prefill prediction of DeepSeek-R1 on ``hw``, cmperf.predict.
    unused_fields); an unused one also says so in its note. A field a --set moved
    (``overrides``) is compared with its value in the files (``files``: the hardware without
    the overrides), not with twice the value set."""
    from ..errors import CmperfError
    from ..predict import Specs, file_values, unused_fields
    from ..specs.loader import load_model

    # the EMS pool enters a prefill with a cached prefix and the planner, not the defaults: not judged here
    fields = [r["field"] for r in records if r.get("field") and not r["field"].startswith(PLAN_ONLY)]
    if hw is None or not fields:
        return records
    try:
        model = load_model()[0]
        set_paths = [f"{k}.{p.removesuffix('.value')}" for k in ("chip", "system") for p in (overrides or {}).get(k, {})]
        other = file_values(Specs(hardware=files, model=model), set_paths) if files is not None else None
        unused = unused_fields(Specs(hardware=hw, model=model), fields, other)
    except CmperfError:
        return records
    if unused is None:
        return records
    out = []
    for r in records:
        if r.get("field", "").startswith(PLAN_ONLY):
            r = {**r, "note": f"used by cmperf plan and predict prefill --cached-len; {r['note']}", "used": True}
        elif r.get("field"):
            used = r["field"] not in unused
            note = r["note"] if used else "NOT USED: changes no output of DeepSeek-R1's default decode or prefill here" + \
                (f"; {r['note']}" if r["note"] else "")
            r = {**r, "note": note, "used": used}
        out.append(r)
    return out
