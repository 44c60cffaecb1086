"""``cmperf hw list|show``: the built-in chips and systems, and the facts derived from one."""

from __future__ import annotations

from typing import List, Optional

import typer

from ..errors import ConfigError
from .options import FormatOpt, SetOpt

hw_app = typer.Typer(no_args_is_help=True, help="Hardware specs (chips, systems). Example: cmperf hw show cloudmatrix384")


@hw_app.command("list")
def hw_list(fmt: str = FormatOpt):
    """List built-in chips and systems. Example: cmperf hw list"""
    from ..report import check_format
    from ..specs.loader import list_builtin, validate as _v, read_yaml

    from ..report import print_csv, print_json, print_table

    check_format(fmt)
    records = []
    for kind in ("system", "chip"):
        for name, path in list_builtin(kind):
            spec = _v(kind, read_yaml(path), path)
            records.append({"name": name, "kind": kind, "description": spec.description, "confidence": spec.confidence,
                            "file": f"{path.parent.name}/{path.name}"})  # as in the repository (the wheel carries the same tree)
    if fmt == "json":
        print_json(records)
    elif fmt == "csv":
        print_csv(records)
    else:
        print_table(records, "hardware specs (--hardware NAME or hw show NAME; files relative to the repository)")


@hw_app.command("show")
def hw_show(name: str = typer.Argument("cloudmatrix384", help="chip or system: built-in name or YAML path"),
            fmt: str = FormatOpt, sets: Optional[List[str]] = SetOpt,
            deployment_out: Optional[str] = typer.Option(None, "--deployment-out", help="write the system's default deployment of --model (default: the system's model) to this YAML, as --deployment reads it"),
            model: Optional[str] = typer.Option(None, "--model", help="with --deployment-out: the model whose default deployment is written (default: the system's)")):
    """Peaks, ridge points and network tiers of a chip, or topology and totals of a system and
    the default deployment of each built-in model on it (instance dies, EP, TP, batch, MTP);
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
    if is_chip and (deployment_out is not None or model is not None):
        raise ConfigError(f"--deployment-out / --model: {name} is a chip; a deployment belongs to a system")
    if model is not None and deployment_out is None:
        raise ConfigError("--model: hw show lists every model's default deployment; --model chooses the one --deployment-out writes")
    if is_chip:
        chip, _ = load_chip(name, overrides)
        records = chip_facts(chip)
        files = _system_of(load_chip(name)[0], {}) if sets else None
        print_records(_mark_unused(records, _system_of(chip, overrides), overrides, files), fmt,
                      f"{chip.name}: {chip.description}")
    else:
        if deployment_out is not None:
            from ..report import check_parent_dir

            check_parent_dir(deployment_out, "--deployment-out")
        hw = load_hardware(name, overrides)
        records = _mark_unused(system_facts(hw) + chip_facts(hw.chip), hw, overrides, load_hardware(name) if sets else None)
        defaults = _defaults(name, hw, list(sets or []))
        if fmt == "table":
            print_records(records, fmt, f"{hw.system.name}: {hw.system.description}")
            _print_defaults(defaults, hw.system.name)
        else:
            print_records(records + [_default_record(r) for r in defaults], fmt, "")
        if deployment_out is not None:
            _write_deployment(deployment_out, name, model, list(sets or []))


def _defaults(name: str, hw, sets: list[str]) -> list[dict]:
    """The default deployment of every built-in model on the system (cached: cli/cache.py)."""
    from ..export.defaults import system_defaults
    from .cache import cached

    key = {"system": hw.system.model_dump(mode="json"), "chip": hw.chip.model_dump(mode="json"), "sets": sets,
           "name": name}
    return cached("hwdefaults", key, lambda: system_defaults(name, sets))


def _default_record(r: dict) -> dict:
    """A default-deployment row as a record of hw show's JSON/CSV (section 'default deployment')."""
    return {"section": "default deployment", "quantity": f"{r['model']} {r['phase']}", "value": _describe(r),
            "unit": "", "note": r.get("note", ""), "instance": {k: r.get(k) for k in ("dies", "npus", "ep", "tp", "mtp",
                                                                                     "batch_per_npu", "tokens_per_npu")}}


def _describe(r: dict) -> str:
    if "dies" not in r:
        return "none"
    what = (f"batch {r['batch_per_npu']:,.0f} per NPU" if r["phase"] == "decode" else
            f"{r['tokens_per_npu']:,.0f} tokens per NPU")
    ep = f"EP {r['ep']:,}, " if r.get("ep") else ""
    return f"{r['dies']:,} dies, {ep}TP {r['tp']}, {what}, MTP {'on' if r['mtp'] else 'off'}"


def _print_defaults(rows: list[dict], system: str) -> None:
    import pandas as pd

    from ..report import print_table

    def n(v, fmt="{:,.0f}"):
        return "-" if v is None else fmt.format(v)

    shown = pd.DataFrame([{"model": r["model"], "phase": r["phase"], "dies": n(r.get("dies")), "NPUs": n(r.get("npus"), "{:,.4g}"),
                           "expert parallel (EP)": n(r.get("ep")), "tensor parallel (TP)": n(r.get("tp")),
                           "batch per NPU": n(r.get("batch_per_npu")), "prompt tokens per NPU": n(r.get("tokens_per_npu")),
                           "MTP": "-" if r.get("mtp") is None else ("on" if r["mtp"] else "off"), "note": r.get("note", "")}
                          for r in rows])
    print_table(shown, f"default deployment on {system}: the instance a prediction runs when you give none "
                       f"(docs/model.md §10; --deployment-out writes one)")


def _write_deployment(path: str, name: str, model: str | None, sets: list[str]) -> None:
    import sys

    from pathlib import Path

    import yaml

    from ..export.defaults import deployment_file
    from ..report import mark, write_atomic

    dep = deployment_file(name, model, sets)
    text = f"# {mark()}: hw show {name} --deployment-out, the default deployment (read by --deployment)\n" + \
        yaml.safe_dump(dep, sort_keys=False)
    write_atomic(path, lambda tmp: Path(tmp).write_text(text, encoding="utf-8"), "--deployment-out", say=False)
    sys.stderr.write(f"cmperf: wrote {path}: the default deployment of {name} (read by --deployment)\n")


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
        from .cache import cached

        key = {"system": hw.system.model_dump(mode="json"), "chip": hw.chip.model_dump(mode="json"),
               "model": model.model_dump(mode="json"), "fields": fields, "other": other}
        unused = cached("hwunused", key, lambda: unused_fields(Specs(hardware=hw, model=model), fields, other))
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
