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
    """Peaks, ridge points and network tiers of a chip, or topology and totals of a system.
    Example: cmperf hw show ascend-910c"""
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
        print_records(chip_facts(chip), fmt, f"{chip.name}: {chip.description}")
    else:
        hw = load_hardware(name, overrides)
        print_records(system_facts(hw) + chip_facts(hw.chip), fmt, f"{hw.system.name}: {hw.system.description}")

