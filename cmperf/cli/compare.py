"""``cmperf compare decode|prefill``: one workload on several systems side by side."""

from __future__ import annotations

from typing import List, Optional

import typer

from ..errors import CmperfError, short
from .options import FormatOpt

compare_app = typer.Typer(no_args_is_help=True, help="One workload on several systems side by side. "
                                                    "Example: cmperf compare decode --hardware cloudmatrix384,h800-cluster")
HardwareListOpt = typer.Option(None, "--hardware", help="comma list of systems (default: every system of the set-ups: "
                                                        "cloudmatrix384, h800-cluster, h100-cluster)")
ConfigOpt = typer.Option(None, "--config", help="a set-up file of your own (YAML: per system its model, --set overrides "
                                                "and decode/prefill inputs; see cmperf/reference/setups.yaml)")
WithOpt = typer.Option(None, "--with", help="a scenario input for one system or all: [SYSTEM:]key=value, e.g. h800-cluster:batch=64 (repeatable)")
SetsOpt = typer.Option(None, "--set", help="a spec override for one system or all: [SYSTEM:]key.path=value (repeatable)")
ModelOpt = typer.Option(None, "--model", help="the model on every system (default: each set-up's)")
PlotOpt = typer.Option(None, "--plot", help="draw tokens/s per NPU, per TFLOPS and the TPOT/TTFT of each system, with its "
                                            "settings, to this image: png, pdf, svg, ... by its suffix (needs: pip install 'cmperf\\[plot]')")


def _per_system(items: Optional[List[str]], flag: str, split_value: bool) -> dict:
    from ..specs.loader import parse_value

    out: dict = {}
    for item in items or []:
        target, sep, rest = item.partition(":") if ":" in item.split("=", 1)[0] else ("*", "", item)
        if "=" not in rest:
            raise CmperfError(f"{flag} {short(item)}: expected [SYSTEM:]key=value")
        key, value = rest.split("=", 1)
        if split_value:
            parsed = parse_value(value, f"{flag} {key.strip()}")
            if parsed is None or isinstance(parsed, (list, dict)):
                what = "no value" if parsed is None else "a list" if isinstance(parsed, list) else "a mapping"
                raise CmperfError(f"{flag} {short(item)}: expected one value (compare runs one configuration per "
                                  f"system; sweeps: cmperf search), got {what}")
            out.setdefault(target, {})[key.strip()] = parsed
        else:
            out.setdefault(target, []).append(rest)
    return out


def _run(phase: str, hardware, config, model, withs, sets, fmt, plot, out):
    from ..compare import LATENCY, SETUPS_FILE, compare, load_setups
    from ..report import check_format, check_parent_dir, human, print_csv, print_json, print_table, provenance, write_csv

    check_format(fmt)
    for path, flag in ((plot, "--plot"), (out, "--out")):
        if path is not None:
            check_parent_dir(path, flag)
    systems = [s.strip() for s in hardware.split(",") if s.strip()] if hardware else None
    cmp = compare(phase, systems, load_setups(config or SETUPS_FILE), model,
                  _per_system(sets, "--set", False), _per_system(withs, "--with", True))
    t = cmp.table
    prov = provenance(f"compare {phase}", hardware or ",".join(t["system"]), model or ",".join(dict.fromkeys(t["model"])),
                      sets or [], config=config, **{"with": list(withs or [])})
    if out:
        write_csv(t, out, prov, "--out")
    if plot:
        from ..plots import compare_figure

        compare_figure(cmp, plot)
    if fmt == "json":
        print_json(t.to_dict(orient="records"))
    elif fmt == "csv":
        print_csv(t, prov)
    else:
        lat = LATENCY[phase]
        shown = t[["system", "chip", "model", "dtype", "dies", "ep"]].copy()
        floor = [" (floor)" if f else "" for f in t["band_floor"]]
        shown[lat] = [f"{v:.4g} ± {(h - lo) / 2:.2g}{f}" for v, lo, h, f in zip(t[lat], t[f"{lat}_lo"], t[f"{lat}_hi"], floor)]
        shown["tokens/s per NPU"] = [f"{v:,.0f} ± {(h - lo) / 2:,.0f}{f}" for v, lo, h, f in
                                      zip(t["throughput_per_npu"], t["throughput_per_npu_lo"], t["throughput_per_npu_hi"], floor)]
        shown["peak TFLOPS"] = t["npu_peak_TFLOPS"].map(lambda v: f"{v:,.0f}")
        shown["tokens/s/TFLOPS"] = t["tokens_per_s_per_tflops"].map(lambda v: f"{v:.3g}")
        shown["memory/die"] = [human(v, "B") for v in t["memory_per_die_bytes"]]
        shown["fits"] = t["fits"].map(lambda v: "yes" if v else "NO")
        shown["bound"] = t["bound"]
        shown["confidence"] = t["confidence"]
        print_table(shown, f"compare {phase}: each system at its own configuration (band: each system's own held-out error; floor: no end-to-end evidence, the error is at least this)")


@compare_app.command("decode")
def compare_decode(hardware: Optional[str] = HardwareListOpt, config: Optional[str] = ConfigOpt,
                   model: Optional[str] = ModelOpt, withs: Optional[List[str]] = WithOpt,
                   sets: Optional[List[str]] = SetsOpt, fmt: str = FormatOpt, plot: Optional[str] = PlotOpt,
                   out: Optional[str] = typer.Option(None, "--out", help="also write the table to this CSV file")):
    """TPOT, tokens/s per NPU and per TFLOPS of each system's decode deployment (default: the
    paper's Table 4 set-ups). Example: cmperf compare decode --with h800-cluster:batch=64"""
    _run("decode", hardware, config, model, withs, sets, fmt, plot, out)


@compare_app.command("prefill")
def compare_prefill(hardware: Optional[str] = HardwareListOpt, config: Optional[str] = ConfigOpt,
                    model: Optional[str] = ModelOpt, withs: Optional[List[str]] = WithOpt,
                    sets: Optional[List[str]] = SetsOpt, fmt: str = FormatOpt, plot: Optional[str] = PlotOpt,
                    out: Optional[str] = typer.Option(None, "--out", help="also write the table to this CSV file")):
    """TTFT, tokens/s per NPU and per TFLOPS of each system's prefill deployment (default: the
    paper's Table 3 set-ups). Example: cmperf compare prefill --plot prefill.png"""
    _run("prefill", hardware, config, model, withs, sets, fmt, plot, out)
