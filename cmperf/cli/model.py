"""``cmperf model list|show``: the built-in models, and the facts derived from one."""

from __future__ import annotations

from typing import List, Optional

import typer

from .options import FormatOpt, SetOpt

model_app = typer.Typer(no_args_is_help=True, help="Model specs and derived facts. Example: cmperf model show deepseek-r1 --context 32768")


@model_app.command("list")
def model_list(fmt: str = FormatOpt):
    """List built-in models. Example: cmperf model list"""
    from ..report import check_format, print_records
    from ..specs.loader import list_builtin, read_yaml, validate as _v

    records = [{"section": "model", "quantity": n, "value": _v("model", read_yaml(p), p).description, "unit": "", "note": str(p)}
               for n, p in list_builtin("model")]
    print_records(records, check_format(fmt), "model specs")


@model_app.command("show")
def model_show(name: str = typer.Argument("deepseek-r1", help="built-in name or YAML path"),
               context: int = typer.Option(4096, "--context", min=1, help="context length for FLOPs per token"),
               fmt: str = FormatOpt, sets: Optional[List[str]] = SetOpt):
    """Parameter counts, KV-cache bytes per token, FLOPs per token at a context length.
    Example: cmperf model show deepseek-r1 --context 32768"""
    from ..facts import model_facts
    from ..report import check_format, print_records
    from ..specs.loader import load_model, split_overrides

    check_format(fmt)
    m, _ = load_model(name, split_overrides(sets or []))
    print_records(model_facts(m, context), fmt, f"{m.name}: {m.description}")

