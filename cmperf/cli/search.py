"""``cmperf search decode|prefill|report``: design-space search under an SLO (README.md, "Search").

Parses flags, calls :mod:`cmperf.search` and renders; computes nothing itself. Imports only
typer at module level so that ``cmperf predict`` starts as fast as before.

Exit codes: 0 when some configuration meets the SLO and fits in memory; 1 when none does (the
reason and the closest configuration go to stderr; reports are still written); 2 on bad input.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import List, Optional

import typer

from .options import FormatOpt, HardwareOpt, ModelOpt, SetOpt
from .progress import ProgressBar

search_app = typer.Typer(
    no_args_is_help=True,
    help="Best configurations under a latency SLO: top-N by throughput per NPU and the Pareto frontier. "
         "Example: cmperf search decode --tpot-slo 50 --batch 8:256:8 --sweep chip.die.hbm_bandwidth_Bps=1.6e12,3.2e12",
)

LIST = "comma list and/or start:stop\\[:step] ranges (stop included)"
SweepOpt = typer.Option(None, "--sweep", help="vary a spec field over the grid, e.g. system.tiers.ub.bandwidth_Bps=100e9,135e9,270e9 "
                                              "or =100e9:300e9:50e9 (repeatable)")
TopOpt = typer.Option(10, "--top", help="how many of the best configurations to report")
SloStatOpt = typer.Option("mean", "--slo-stat", help="the statistic the SLO bounds: mean (search times one pass or step, "
                         "with no queue and no spread across requests: its latency is the mean; p50/p90/p99 need "
                         "cmperf plan or simulate)")
OutOpt = typer.Option(None, "--out", help="write every configuration (all inputs, outputs, slo_ms, meets_slo, on_pareto, rank) to this CSV")
PlotOpt = typer.Option(None, "--plot", help="draw the Pareto frontier (one per swept value), the roofline (peak and achievable "
                                            "roofs) and per-operator time of the best configuration to this image (png, pdf, svg, ...: by its suffix) "
                                            "(needs: pip install 'cmperf\\[plot]')")

MICROBATCHES = {"auto": 0}
ONOFF = {"on": 1, "off": 0}
IMBALANCE = {"default": "default"}


# --------------------------------------------------------------------------- commands
@search_app.command("decode")
def search_decode(
    tpot_slo: Optional[float] = typer.Option(None, "--tpot-slo", help="TPOT SLO in ms (tokens/s per user = 1000 / TPOT; default: none, every configuration that fits ranks; the paper's is 50)"),
    slo_stat: str = SloStatOpt,
    batch: str = typer.Option("1:256", "--batch", help=f"requests per NPU: {LIST}"),
    prompt_len: str = typer.Option("4096", "--prompt-len", help="prompt tokens per request"),
    output_len: str = typer.Option("256", "--output-len", help="output tokens per request"),
    kv_len: Optional[str] = typer.Option(None, "--kv-len", help="cached tokens per decode step (default: prompt + output/2)"),
    dies: Optional[str] = typer.Option(None, "--dies", help="dies in the decode instance (default: the system's, for the model: 320 on cloudmatrix384)"),
    ep: Optional[str] = typer.Option(None, "--ep", help="expert-parallel degree (default: = dies)"),
    tp: Optional[str] = typer.Option(None, "--tp", help="tensor-parallel degree of attention and dense FFN (1 = data-parallel; default: the system's, dense models the smallest that fits)"),
    microbatches: str = typer.Option("1,2", "--microbatches", help="1, 2 and/or auto"),
    mtp: Optional[str] = typer.Option(None, "--mtp", help="multi-token prediction: on, off or on,off (default: the system's, off without an MTP module)"),
    mtp_k: str = typer.Option("1", "--mtp-k", help="speculative tokens per step (with MTP on)"),
    mtp_acceptance: str = typer.Option("0.7", "--mtp-acceptance", help="acceptance rate of each speculative token"),
    expert_imbalance: str = typer.Option("1.0", "--expert-imbalance", help="max/mean expert load (numbers and/or 'default')"),
    redundant_experts: Optional[str] = typer.Option(None, "--redundant-experts", help="redundant routed experts (default: whole experts per die for each EP)"),
    shared_copies: Optional[str] = typer.Option(None, "--shared-copies", help="shared-expert copies (default: the system's share of each EP's dies)"),
    top: int = TopOpt, sweep: Optional[List[str]] = SweepOpt, sets: Optional[List[str]] = SetOpt,
    hardware: str = HardwareOpt, model: Optional[str] = ModelOpt, fmt: str = FormatOpt,
    out: Optional[str] = OutOpt, plot: Optional[str] = PlotOpt,
):
    """Top decode configurations by throughput per NPU with TPOT <= SLO that fit in HBM; Pareto frontier.

    Exit 1 if none qualifies. Example: cmperf search decode --tpot-slo 30 --mtp-k 1,2 --out d.csv --plot d.png
    """
    from ..search import parse_list

    values = {
        "batch": parse_list(batch, "--batch"),
        "prompt_len": parse_list(prompt_len, "--prompt-len", integer=True),
        "output_len": parse_list(output_len, "--output-len", integer=True),
        "kv_len": parse_list(kv_len, "--kv-len"),
        "dies": parse_list(dies, "--dies", integer=True),
        "ep": parse_list(ep, "--ep", integer=True),
        "tp": parse_list(tp, "--tp", integer=True),
        "microbatches": parse_list(microbatches, "--microbatches", integer=True, words=MICROBATCHES, allowed=(1, 2)),
        "mtp": parse_list(mtp, "--mtp", integer=True, words=ONOFF),
        "mtp_k": parse_list(mtp_k, "--mtp-k", integer=True),
        "mtp_acceptance": parse_list(mtp_acceptance, "--mtp-acceptance"),
        "expert_imbalance": parse_list(expert_imbalance, "--expert-imbalance", words=IMBALANCE),
        "redundant_experts": parse_list(redundant_experts, "--redundant-experts", integer=True),
        "shared_copies": parse_list(shared_copies, "--shared-copies", integer=True),
    }
    _run("decode", values, _slo(tpot_slo, "--tpot-slo", slo_stat), top, sweep, sets, hardware, model, fmt, out, plot)


@search_app.command("prefill")
def search_prefill(
    ttft_slo: Optional[float] = typer.Option(None, "--ttft-slo", help="TTFT SLO in ms (default: none, every configuration that fits ranks; the paper's is 2000)"),
    slo_stat: str = SloStatOpt,
    tokens_per_npu: str = typer.Option("4096:65536:4096", "--tokens-per-npu", help=f"prompt tokens per NPU per pass: {LIST}"),
    prompt_len: str = typer.Option("4096", "--prompt-len", help="tokens per prompt"),
    dies: Optional[str] = typer.Option(None, "--dies", help="dies in the prefill instance (default: the system's, for the model: 32 on cloudmatrix384)"),
    ep: Optional[str] = typer.Option(None, "--ep", help="expert-parallel degree (default: = dies)"),
    attn_tp: Optional[str] = typer.Option(None, "--attn-tp", help="tensor-parallel degree of attention (default: the system's: 4 on cloudmatrix384)"),
    microbatches: str = typer.Option("1,2", "--microbatches", help="1, 2 and/or auto"),
    mtp: Optional[str] = typer.Option(None, "--mtp", help="run the MTP module: on, off or on,off (default: as the system's decode)"),
    expert_imbalance: str = typer.Option("1.0", "--expert-imbalance", help="max/mean expert load (numbers and/or 'default')"),
    redundant_experts: Optional[str] = typer.Option(None, "--redundant-experts", help="redundant routed experts (default: whole experts per die, at least the system's spare per die)"),
    shared_copies: Optional[str] = typer.Option(None, "--shared-copies", help="shared-expert copies (default: the system's: one per die on cloudmatrix384)"),
    top: int = TopOpt, sweep: Optional[List[str]] = SweepOpt, sets: Optional[List[str]] = SetOpt,
    hardware: str = HardwareOpt, model: Optional[str] = ModelOpt, fmt: str = FormatOpt,
    out: Optional[str] = OutOpt, plot: Optional[str] = PlotOpt,
):
    """Top prefill configurations by throughput per NPU with TTFT <= SLO that fit in HBM; Pareto frontier.

    Exit 1 if none qualifies. Example: cmperf search prefill --ttft-slo 2000 --attn-tp 1,2,4,8
    """
    from ..search import parse_list

    values = {
        "tokens_per_npu": parse_list(tokens_per_npu, "--tokens-per-npu"),
        "prompt_len": parse_list(prompt_len, "--prompt-len", integer=True),
        "dies": parse_list(dies, "--dies", integer=True),
        "ep": parse_list(ep, "--ep", integer=True),
        "attn_tp": parse_list(attn_tp, "--attn-tp", integer=True),
        "microbatches": parse_list(microbatches, "--microbatches", integer=True, words=MICROBATCHES, allowed=(1, 2)),
        "mtp": parse_list(mtp, "--mtp", integer=True, words=ONOFF),
        "expert_imbalance": parse_list(expert_imbalance, "--expert-imbalance", words=IMBALANCE),
        "redundant_experts": parse_list(redundant_experts, "--redundant-experts", integer=True),
        "shared_copies": parse_list(shared_copies, "--shared-copies", integer=True),
    }
    _run("prefill", values, _slo(ttft_slo, "--ttft-slo", slo_stat), top, sweep, sets, hardware, model, fmt, out, plot)


@search_app.command("report")
def search_report(
    results: str = typer.Argument(..., help="CSV written by cmperf search ... --out"),
    slo: Optional[float] = typer.Option(None, "--slo", help="re-rank under this SLO in ms (default: the one searched with)"),
    top: Optional[int] = typer.Option(None, "--top", help="how many to report (default: as many as the search ranked)"),
    plot: Optional[str] = PlotOpt, fmt: str = FormatOpt,
    sets: Optional[List[str]] = typer.Option(None, "--set", help="spec overrides for the plotted operator breakdown "
                                                                 "(default: the ones the file records)"),
    hardware: Optional[str] = typer.Option(None, "--hardware", help="system spec (default: the one the file records)"),
    model: Optional[str] = typer.Option(None, "--model", help="model spec (default: the one the file records)"),
):
    """Re-rank a search saved with --out and redraw its figure, without re-running the grid.

    The file records the hardware, model, --set and --sweep it was made with (its '# key: value' lines); the
    plotted configuration's operators are re-evaluated from them (--hardware/--model/--set replace them).
    Example: cmperf search report d.csv --slo 30 --plot d30.png
    """
    from ..report import check_format, provenance, read_provenance
    from ..search import read_results

    check_format(fmt)
    _check_dir(plot, "--plot")
    _plot_ready(plot)
    result = read_results(results, slo, top)
    recorded, _ = read_provenance(results)
    hardware = hardware or recorded.get("hardware") or "cloudmatrix384"
    model = model or recorded.get("model") or None
    sets = sets or recorded["set"]
    specs = _specs(hardware, model, sets) if plot else None
    prov = provenance(f"search report {results}", hardware, model, sets, recorded["sweep"])
    _finish(result, specs, fmt, None, plot, f"{Path(results).name}", prov)


# --------------------------------------------------------------------------- shared
def _run(phase, values, slo, top, sweep, sets, hardware, model, fmt, out, plot):
    from ..report import check_format, provenance
    from ..search import check_sweeps, parse_sweeps, search

    check_format(fmt)
    _check_dir(out, "--out")
    _check_dir(plot, "--plot")
    _plot_ready(plot)
    sweeps = parse_sweeps(sweep or [])
    from ..predict import system_model

    model = model or system_model(hardware)
    specs = _specs(hardware, model, sets)
    check_sweeps(sweeps, hardware, model, sets or [])
    progress = ProgressBar()
    try:
        result = search(phase, {k: v for k, v in values.items() if v is not None}, slo, specs, sweeps, top, progress)
    finally:
        progress.close()
    prov = provenance(f"search {phase}", hardware, model, sets or [], sweep or [])
    _finish(result, specs, fmt, out, plot, f"{hardware}, {model}", prov)


def _specs(hardware, model, sets):
    from ..predict import load_specs

    return load_specs(hardware, model, sets or [])


def _check_dir(path: Optional[str], flag: str) -> None:
    """Fail before the search, not after it, when an output file cannot be written."""
    from ..report import check_parent_dir

    if path is not None:
        check_parent_dir(path, flag)


def _plot_ready(plot: Optional[str]) -> None:
    if plot:
        from ..plots import _pyplot

        _pyplot()  # fail before the search, not after it (the name's format: when the figure is written)


def _finish(result, specs, fmt, out, plot, label, prov):
    from ..report import warn, write_csv

    s = result.summary()
    if s["dropped_invalid"]:
        examples = "; ".join(result.invalid_examples(2))
        warn(f"dropped {s['dropped_invalid']:,} of {s['configurations']:,} configurations as invalid (e.g. {examples})")
    inert, why = result.inert_sweeps(), result.nothing_meets()
    for k in inert:
        warn(f"--sweep {k} changed no output over this grid (the cost model does not read it, or it never limits these configurations)")
    if out:
        write_csv(result.table, out, prov, "--out")
    if plot:
        from ..plots import search_figure
        from ..search import breakdown

        ops, _ = breakdown(result, specs)
        search_figure(result, ops, specs, plot, f"{label}, {result.latency.split('_')[0].upper()} {_slo_text(result.slo_ms)}")
    _render(result, fmt, inert, why, prov)
    if why:
        sys.stderr.write(f"cmperf: {why}\n")
        raise typer.Exit(1)


def _render(result, fmt: str, inert: list[str], why: str, prov: dict) -> None:
    import pandas as pd

    from ..report import json_records, print_csv, print_json, print_table, unit_of

    top, pareto = result.top, result.pareto
    if fmt == "json":
        print_json({"summary": result.summary(), "invalid_examples": result.invalid_examples(),
                    "inert_sweeps": inert, "message": why,
                    "top": json_records(_records(top)), "pareto": json_records(_records(pareto)), "provenance": prov})
        return
    if fmt == "csv":
        print_csv(top, prov)
        return
    s = result.summary()
    lat = result.latency
    typer.echo(f"{s['phase']} search: {s['configurations']:,} configurations, {s['dropped_invalid']:,} invalid, "
               f"{s['fit_in_memory']:,} fit in memory" + (f", {s['meet_slo']:,} also meet {lat} (mean) <= {s['slo_ms']:g}"
                                                           if math.isfinite(s['slo_ms']) else " (no SLO given)"))
    cols = _shown_columns(result)
    units = {c: unit_of(c) for c in result.table.columns}
    if len(top):
        cap = f"{lat} <= {s['slo_ms']:g}" if math.isfinite(s["slo_ms"]) else "no SLO"
        merged = _merge_same(top, cols)
        note = "; rows with the same result merged, the inputs that differ named" if len(merged) < len(top) else ""
        print_table(_in_words(merged), f"top {len(top)} by throughput per NPU ({cap}{note})", _in_words_units(units))
    shown = pareto
    if len(pareto) > 20:  # evenly spaced along the frontier; all of it is in --format json / --out
        shown = pareto.iloc[sorted(set(pd.Series(range(20)) * (len(pareto) - 1) // 19))]
    title = f"Pareto frontier: throughput per NPU vs {lat} ({len(shown)} of {len(pareto)} points" + \
            ("; all in --format json / --out)" if len(shown) < len(pareto) else ")")
    print_table(_in_words(_for_table(shown, [*cols, "meets_slo"])), title, _in_words_units(units))


def _slo(given: Optional[float], flag: str, stat: str = "mean") -> float:
    """The SLO in ms: none given is no SLO (inf: every configuration that fits ranks); a given
    one is a finite positive number. ``stat``: the statistic it bounds (``--slo-stat``), the
    mean only: a configuration's pass or step, timed alone, is its requests' mean latency."""
    from ..errors import ConfigError

    if stat != "mean":
        raise ConfigError(f"--slo-stat {str(stat)[:40]}: search times one configuration's pass or step, with no "
                          f"queue and no spread across requests, so it bounds the mean only; give --slo-stat mean, "
                          f"or use cmperf plan / simulate --slo-stat {str(stat)[:10]} for a percentile")
    if given is None:
        return math.inf
    if not (math.isfinite(given) and given > 0):
        from ..errors import ConfigError

        raise ConfigError(f"{flag} {given:g}: the SLO must be a positive number of milliseconds")
    return given


def _slo_text(slo_ms: float) -> str:
    return f"SLO {slo_ms:g} ms" if math.isfinite(slo_ms) else "no SLO"


def _shown_columns(result) -> list[str]:
    t = result.table
    if result.phase == "decode":
        always = ["batch", "dies", "ep", "microbatches_used"]
        maybe = ["tp", "prompt_len", "output_len", "kv_len", "mtp", "mtp_k", "mtp_acceptance", "expert_imbalance",
                 "redundant_experts", "shared_copies"]
        outputs = ["tpot_ms", "tokens_per_s_per_user", "throughput_per_npu", "memory_per_die_bytes"]
    else:
        always = ["tokens_per_npu", "prompt_len", "dies", "ep", "attn_tp", "microbatches_used"]
        maybe = ["mtp", "expert_imbalance", "redundant_experts", "shared_copies"]
        outputs = ["ttft_ms", "throughput_per_npu", "tokens_per_s_per_tflops", "memory_per_die_bytes"]
    varying = [c for c in maybe if c in t.columns and t[c].nunique() > 1]
    return [*always, *varying, *result.sweeps, *outputs]


DIGITS = {"tpot_ms": 2, "ttft_ms": 1, "tokens_per_s_per_user": 1, "throughput_per_npu": 0, "tokens_per_s_per_tflops": 3}


def _for_table(df, cols):
    """The shown columns, rounded; a banded column as 'value ± half-width' (cmperf/bands.py)."""
    out = df[cols].round(DIGITS)
    for c in cols:
        if f"{c}_lo" in df.columns:
            half = (df[f"{c}_hi"] - df[f"{c}_lo"]) / 2
            out[c] = [f"{v:,.{DIGITS.get(c, 2)}f} ± {h:,.{DIGITS.get(c, 2)}f}" for v, h in zip(df[c], half)]
    return out


NOT_INPUTS = {"rank", "on_pareto", "meets_slo"}
# a search table's columns in words (JSON, CSV and --out keep the field names)
HEADERS = {"batch": "batch per NPU", "tokens_per_npu": "prompt tokens per NPU", "prompt_len": "prompt tokens",
           "output_len": "output tokens", "kv_len": "KV tokens", "dies": "dies", "ep": "EP", "tp": "TP",
           "attn_tp": "attention TP", "microbatches_used": "microbatches", "mtp": "MTP", "mtp_k": "MTP draft tokens",
           "mtp_acceptance": "MTP acceptance", "expert_imbalance": "expert imbalance", "redundant_experts": "redundant experts",
           "shared_copies": "shared-expert copies", "tpot_ms": "TPOT, ms", "ttft_ms": "TTFT, ms",
           "tokens_per_s_per_user": "tokens/s per user", "throughput_per_npu": "tokens/s per NPU",
           "tokens_per_s_per_tflops": "tokens/s per TFLOPS", "memory_per_die_bytes": "memory per die",
           "meets_slo": "meets the SLO"}


def _in_words(table):
    """Records (or a DataFrame) with the columns of HEADERS renamed."""
    rows = table.to_dict(orient="records") if hasattr(table, "to_dict") else table
    return [{HEADERS.get(k, k): v for k, v in r.items()} for r in rows]


def _in_words_units(units: dict) -> dict:
    return {HEADERS.get(k, k): v for k, v in units.items()}


def _merge_same(top, cols):
    """The top table with rows whose shown values are all equal merged into one: its ranks
    listed ('1, 2') and the inputs that differ among them named ('microbatches 1 or 2': a
    dense model runs one microbatch either way)."""
    shown = _for_table(top, ["rank", *cols])
    key = shown[cols].astype(str).agg("|".join, axis=1)
    rows, differs = [], []
    for k in dict.fromkeys(key):
        idx = [i for i, kk in enumerate(key) if kk == k]
        row = shown.iloc[idx[0]].to_dict()
        if len(idx) > 1:
            group = top.iloc[idx]
            row["rank"] = ", ".join(str(int(r)) for r in group["rank"])
            diff = [c for c in group.columns if c not in NOT_INPUTS and c not in cols and not c.endswith(("_lo", "_hi"))
                    and group[c].astype(str).nunique() > 1]
            differs.append("; ".join(f"{c} {' or '.join(dict.fromkeys(_plain(v) for v in group[c]))}" for c in diff) or "-")
        else:
            row["rank"] = str(int(row["rank"]))
            differs.append("")
        rows.append(row)
    out = rows
    if any(differs):
        out = [{**r, "same result for": d} for r, d in zip(rows, differs)]
    return out


def _plain(v) -> str:
    return f"{v:g}" if isinstance(v, float) else str(v)


def _records(df) -> list[dict]:
    df = df.assign(rank=df["rank"].astype(object).where(df["rank"].notna(), None))
    return df.to_dict(orient="records")


