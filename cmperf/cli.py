"""Command line: ``cmperf hw|model|predict|validate|search ...`` (README.md has the tour).

The CLI only parses flags, calls the Python API and renders; it computes nothing itself.
Bad input ends in one line on stderr and exit code 2, never a traceback.
"""

from __future__ import annotations

import sys
from typing import List, Optional

import typer

from . import __version__
from .cli_options import FormatOpt, HardwareOpt, ModelOpt, SetOpt
from .cli_search import search_app
from .errors import CmperfError
from .defaults import help_text

app = typer.Typer(
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    help="Analytical performance model of DeepSeek-R1 serving on Huawei CloudMatrix384 (Ascend 910C).\n\n"
         "Example: cmperf predict decode --batch 64 --set chip.die.hbm_bandwidth_Bps=3.2e12",
)
hw_app = typer.Typer(no_args_is_help=True, help="Hardware specs (chips, systems). Example: cmperf hw show cloudmatrix384")
model_app = typer.Typer(no_args_is_help=True, help="Model specs and derived facts. Example: cmperf model show deepseek-r1 --context 32768")
predict_app = typer.Typer(no_args_is_help=True, help="Predict one configuration (grids: cmperf search). Example: cmperf predict decode --batch 8")
app.add_typer(hw_app, name="hw")
app.add_typer(model_app, name="model")
app.add_typer(predict_app, name="predict")
app.add_typer(search_app, name="search")


def _version(value: bool):
    if value:
        typer.echo(f"cmperf {__version__}")
        raise typer.Exit()


@app.callback()
def _root(version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="print the version and exit")):
    pass


# --------------------------------------------------------------------------- hw / model
@hw_app.command("list")
def hw_list(fmt: str = FormatOpt):
    """List built-in chips and systems. Example: cmperf hw list"""
    from .report import check_format, print_records
    from .specs.loader import list_builtin, validate as _v, read_yaml

    records = []
    for kind in ("system", "chip"):
        for name, path in list_builtin(kind):
            spec = _v(kind, read_yaml(path), path)
            records.append({"section": kind, "quantity": name, "value": spec.description, "unit": "", "note": str(path)})
    print_records(records, check_format(fmt), "hardware specs")


@hw_app.command("show")
def hw_show(name: str = typer.Argument("cloudmatrix384", help="chip or system: built-in name or YAML path"),
            fmt: str = FormatOpt, sets: Optional[List[str]] = SetOpt):
    """Peaks, ridge points and network tiers of a chip, or topology and totals of a system.
    Example: cmperf hw show ascend-910c"""
    from .facts import chip_facts, system_facts
    from .report import check_format, print_records
    from .specs.loader import hardware_kind, load_chip, load_hardware, split_overrides

    check_format(fmt)
    overrides = split_overrides(sets or [])
    is_chip = hardware_kind(name) == "chip"
    if is_chip:
        chip, _ = load_chip(name, overrides)
        print_records(chip_facts(chip), fmt, f"{chip.name}: {chip.description}")
    else:
        hw = load_hardware(name, overrides)
        print_records(system_facts(hw) + chip_facts(hw.chip), fmt, f"{hw.system.name}: {hw.system.description}")


@model_app.command("list")
def model_list(fmt: str = FormatOpt):
    """List built-in models. Example: cmperf model list"""
    from .report import check_format, print_records
    from .specs.loader import list_builtin, read_yaml, validate as _v

    records = [{"section": "model", "quantity": n, "value": _v("model", read_yaml(p), p).description, "unit": "", "note": str(p)}
               for n, p in list_builtin("model")]
    print_records(records, check_format(fmt), "model specs")


@model_app.command("show")
def model_show(name: str = typer.Argument("deepseek-r1", help="built-in name or YAML path"),
               context: int = typer.Option(4096, "--context", min=1, help="context length for FLOPs per token"),
               fmt: str = FormatOpt, sets: Optional[List[str]] = SetOpt):
    """Parameter counts, KV-cache bytes per token, FLOPs per token at a context length.
    Example: cmperf model show deepseek-r1 --context 32768"""
    from .facts import model_facts
    from .report import check_format, print_records
    from .specs.loader import load_model, split_overrides

    check_format(fmt)
    m, _ = load_model(name, split_overrides(sets or []))
    print_records(model_facts(m, context), fmt, f"{m.name}: {m.description}")


# --------------------------------------------------------------------------- predict
def _microbatches(v: Optional[str]) -> Optional[int]:
    if v is None:
        return None
    table = {"1": 1, "2": 2, "auto": 0}
    if v not in table:
        raise CmperfError(f"--microbatches {v}: expected 1, 2 or auto")
    return table[v]


def _imbalance(v: Optional[str]):
    if v is None or v == "default":
        return v
    try:
        return float(v)
    except ValueError:
        raise CmperfError(f"--expert-imbalance {v}: expected a number >= 1 or 'default'") from None


def _kv_sets(sets: Optional[List[str]], kv_dtype: Optional[str]) -> list[str]:
    out = list(sets or [])
    if kv_dtype is not None:
        if kv_dtype not in ("bf16", "fp16", "int8"):
            raise CmperfError(f"--kv-dtype {kv_dtype}: expected bf16, fp16 or int8")
        out.append(f"model.precision.kv_cache={kv_dtype}")
    return out


DECODE_SUMMARY = ["phase", "batch", "kv_len", "dies", "ep", "mtp", "microbatches_used", "tpot_ms", "iteration_ms",
                  "layer_us", "stream_a_us", "stream_b_us", "barrier_wait_us", "microbatch_gain",
                  "tokens_per_iteration", "throughput_per_npu",
                  "tokens_per_s_per_user", "tokens_per_s_per_tflops", "memory_per_die_bytes", "weights_per_die_bytes",
                  "kv_cache_per_die_bytes", "buffers_per_die_bytes", "hbm_per_die_bytes", "max_batch_per_npu", "fits"]
PREFILL_SUMMARY = ["phase", "tokens_per_npu", "prompt_len", "dies", "ep", "attn_tp", "microbatches_used", "ttft_ms",
                   "forward_ms", "kv_transfer_ms", "throughput_per_npu", "tokens_per_s_per_tflops", "microbatch_gain",
                   "memory_per_die_bytes", "weights_per_die_bytes", "kv_cache_per_die_bytes", "buffers_per_die_bytes",
                   "hbm_per_die_bytes", "max_tokens_per_npu", "fits"]


def _run_predict(phase: str, values: dict, hardware: str, model: str, sets: list[str], breakdown: bool,
                 fmt: str, out: Optional[str]):
    from .predict import load_specs, predict
    from .bands import half_width
    from .report import check_format, human, print_csv, print_json, print_table, unit_of, warn, write_csv

    check_format(fmt)
    specs = load_specs(hardware, model, sets)
    result = predict(phase, {k: v for k, v in values.items() if v is not None}, specs)
    table = result.table
    for i in range(len(table)):
        if not bool(table["fits"].iat[i]):
            need, have = table["memory_per_die_bytes"].iat[i], table["hbm_per_die_bytes"].iat[i]
            warn(f"does not fit: needs {human(need, 'B')} per die (weights {human(table['weights_per_die_bytes'].iat[i], 'B')}, "
                 f"KV {human(table['kv_cache_per_die_bytes'].iat[i], 'B')}, buffers {human(table['buffers_per_die_bytes'].iat[i], 'B')}) "
                 f"but a die has {human(have, 'B')}")
    if out:
        write_csv(table, out)
    ops, sections = result.breakdown(0) if breakdown else (None, None)
    summary = DECODE_SUMMARY if phase == "decode" else PREFILL_SUMMARY
    if fmt == "json":
        obj = table.to_dict(orient="records")
        obj = obj[0] if len(obj) == 1 else obj
        if breakdown:
            obj = {**obj, "breakdown": ops.to_dict(orient="records"), "sections": sections.to_dict(orient="records")} \
                if isinstance(obj, dict) else obj
        print_json(obj)
    elif fmt == "csv":
        print_csv(ops if breakdown else table)
    else:
        row = table.iloc[0]

        def cell(c):
            text = human(row[c], unit_of(c))
            if f"{c}_lo" in table.columns:
                text += f" ± {human(half_width(row[f'{c}_lo'], row[f'{c}_hi']), unit_of(c))}"
            return text

        shown = [(c, cell(c)) for c in summary if c in table.columns]
        import pandas as pd
        print_table(pd.DataFrame(shown, columns=["quantity", "value"]), f"{phase} prediction ({hardware}, {model})")
        if breakdown:
            cols = ["section", "stream", "op", "calls", "time_us", "compute_us", "vector_us", "memory_us", "network_us",
                    "latency_us", "bound", "total_ms"]
            print_table(ops[cols].round(2), "per-operator time (one call = one microbatch; bound = largest term)")
            print_table(sections.round(3), "how the operators combine")


@predict_app.command("decode")
def predict_decode(
    batch: Optional[float] = typer.Option(None, "--batch", help=help_text("decode", "batch")),
    prompt_len: Optional[int] = typer.Option(None, "--prompt-len", help=help_text("decode", "prompt_len")),
    output_len: Optional[int] = typer.Option(None, "--output-len", help=help_text("decode", "output_len")),
    kv_len: Optional[float] = typer.Option(None, "--kv-len", help=help_text("decode", "kv_len")),
    dies: Optional[int] = typer.Option(None, "--dies", help=help_text("decode", "dies")),
    ep: Optional[int] = typer.Option(None, "--ep", help=help_text("decode", "ep")),
    microbatches: Optional[str] = typer.Option(None, "--microbatches", help=help_text("decode", "microbatches")),
    mtp: Optional[bool] = typer.Option(None, "--mtp/--no-mtp", help=help_text("decode", "mtp")),
    mtp_k: Optional[int] = typer.Option(None, "--mtp-k", help=help_text("decode", "mtp_k")),
    mtp_acceptance: Optional[float] = typer.Option(None, "--mtp-acceptance", help=help_text("decode", "mtp_acceptance")),
    expert_imbalance: Optional[str] = typer.Option(None, "--expert-imbalance", help=help_text("decode", "expert_imbalance")),
    redundant_experts: Optional[int] = typer.Option(None, "--redundant-experts", help=help_text("decode", "redundant_experts")),
    shared_copies: Optional[int] = typer.Option(None, "--shared-copies", help=help_text("decode", "shared_copies")),
    attention_share: Optional[float] = typer.Option(None, "--attention-share", help=help_text("decode", "attention_share")),
    kv_dtype: Optional[str] = typer.Option(None, "--kv-dtype", help="KV-cache dtype bf16|int8 (default: the model spec's, bf16)"),
    hardware: str = HardwareOpt, model: str = ModelOpt, sets: Optional[List[str]] = SetOpt,
    breakdown: bool = typer.Option(False, "--breakdown", help="per-operator table: time and bounding term"),
    fmt: str = FormatOpt,
    out: Optional[str] = typer.Option(None, "--out", help="also write the result table to this CSV file"),
):
    """TPOT, throughput per NPU, per-layer time and memory of a decode instance (default: the
    paper's EP320 deployment, batch 96). Example: cmperf predict decode --batch 8 --breakdown"""
    values = dict(batch=batch, prompt_len=prompt_len, output_len=output_len, kv_len=kv_len, dies=dies, ep=ep,
                  microbatches=_microbatches(microbatches), mtp=None if mtp is None else int(mtp), mtp_k=mtp_k,
                  mtp_acceptance=mtp_acceptance, expert_imbalance=_imbalance(expert_imbalance),
                  redundant_experts=redundant_experts, shared_copies=shared_copies, attention_share=attention_share)
    _run_predict("decode", values, hardware, model, _kv_sets(sets, kv_dtype), breakdown, fmt, out)


@predict_app.command("prefill")
def predict_prefill(
    tokens_per_npu: Optional[float] = typer.Option(None, "--tokens-per-npu", help=help_text("prefill", "tokens_per_npu")),
    prompt_len: Optional[int] = typer.Option(None, "--prompt-len", help=help_text("prefill", "prompt_len")),
    dies: Optional[int] = typer.Option(None, "--dies", help=help_text("prefill", "dies")),
    ep: Optional[int] = typer.Option(None, "--ep", help=help_text("prefill", "ep")),
    attn_tp: Optional[int] = typer.Option(None, "--attn-tp", help=help_text("prefill", "attn_tp")),
    microbatches: Optional[str] = typer.Option(None, "--microbatches", help=help_text("prefill", "microbatches")),
    mtp: Optional[bool] = typer.Option(None, "--mtp/--no-mtp", help=help_text("prefill", "mtp")),
    expert_imbalance: Optional[str] = typer.Option(None, "--expert-imbalance", help=help_text("prefill", "expert_imbalance")),
    redundant_experts: Optional[int] = typer.Option(None, "--redundant-experts", help=help_text("prefill", "redundant_experts")),
    shared_copies: Optional[int] = typer.Option(None, "--shared-copies", help=help_text("prefill", "shared_copies")),
    kv_dtype: Optional[str] = typer.Option(None, "--kv-dtype", help="KV-cache dtype bf16|int8 (default: the model spec's, bf16)"),
    hardware: str = HardwareOpt, model: str = ModelOpt, sets: Optional[List[str]] = SetOpt,
    breakdown: bool = typer.Option(False, "--breakdown", help="per-operator table: time and bounding term"),
    fmt: str = FormatOpt,
    out: Optional[str] = typer.Option(None, "--out", help="also write the result table to this CSV file"),
):
    """TTFT, throughput per NPU and memory of a prefill instance (default: the paper's 16-NPU
    EP32 instance, 16K tokens per NPU of 4K prompts). Example: cmperf predict prefill --prompt-len 32768"""
    values = dict(tokens_per_npu=tokens_per_npu, prompt_len=prompt_len, dies=dies, ep=ep, attn_tp=attn_tp,
                  microbatches=_microbatches(microbatches), mtp=None if mtp is None else int(mtp),
                  expert_imbalance=_imbalance(expert_imbalance), redundant_experts=redundant_experts,
                  shared_copies=shared_copies)
    _run_predict("prefill", values, hardware, model, _kv_sets(sets, kv_dtype), breakdown, fmt, out)


# --------------------------------------------------------------------------- validate
def _rows_table(res, title):
    from .report import print_table

    shown = res[["id", "where", "metric", "predicted", "paper", "error", "tolerance", "pass"]].copy()
    pct = res["unit"] == "%"
    shown["predicted"] = shown["predicted"].map(lambda v: f"{v:.4g}")
    shown["error"] = [f"{e:+.1f} %" if p else f"{100 * e:+.1f} pt" for e, p in zip(res["error"], pct)]
    shown["tolerance"] = [f"±{t:g} %" if p else f"±{100 * t:g} pt" for t, p in zip(res["tolerance"], pct)]
    shown["pass"] = shown["pass"].map(lambda v: "pass" if v else "FAIL")
    if (res["derived_from"] != "").any():
        shown["from"] = res["derived_from"]
    print_table(shown, title)


@app.command("validate")
def validate_cmd(
    files: Optional[List[str]] = typer.Argument(None, help="reference files (default: the built-in CloudMatrix384 paper rows)"),
    sensitivity: bool = typer.Option(False, "--sensitivity", help="also show how headline rows move when each parameter moves +-10 %"),
    cross_validate: bool = typer.Option(False, "--cross-validate",
                                        help="re-fit without each group of evidence rows and predict it (about a minute)"),
    fmt: str = FormatOpt, sets: Optional[List[str]] = SetOpt,
):
    """Replay published results: predicted vs paper, error, pass/fail; exit 1 if a row fails.
    The headline counts evidence rows only; derived and spec rows are listed apart.
    Example: cmperf validate --cross-validate"""
    import pandas as pd

    from .predict import load_specs
    from .report import check_format, print_csv, print_json, print_table
    from .calibration.reference import BUILTIN_REFERENCE, load_reference
    from .calibration.validate import evaluate, fitted_parameters, summary
    from .calibration.validate import sensitivity as sens

    check_format(fmt)
    results, fitted, sens_tables, cv = [], None, [], None
    for f in files or [str(BUILTIN_REFERENCE)]:
        ref = load_reference(f)
        specs = load_specs(ref.hardware, ref.model, sets or [])
        res = evaluate(ref, specs)
        res.insert(0, "file", ref.name)
        results.append(res)
        fitted = fitted_parameters(specs)
        if sensitivity:
            sens_tables.append(sens(ref, specs))
        if cross_validate:
            from .calibration.crossval import cross_validate as run_cv

            cv = run_cv(ref, specs)
    res = pd.concat(results, ignore_index=True)
    stats = summary(res)
    if fmt == "json":
        obj = {"rows": res.to_dict(orient="records"), "summary": stats,
               "fitted_parameters": fitted.to_dict(orient="records")}
        if sensitivity:
            obj["sensitivity"] = pd.concat(sens_tables).to_dict(orient="records")
        if cv is not None:
            obj["cross_validation"] = {"groups": cv.groups.to_dict(orient="records"),
                                       "rows": cv.rows.to_dict(orient="records"),
                                       "parameters": cv.parameters.to_dict(orient="records")}
        print_json(obj)
    elif fmt == "csv":
        print_csv(res)
    else:
        _rows_table(res[res["kind"] == "evidence"], "evidence: independent published measurements, predicted")
        typer.echo(f"evidence: {stats['evidence_rows']} rows, {stats['evidence_rows'] - stats['evidence_failed']} within "
                   f"tolerance; mean |error| {stats['evidence_mean_abs_error_pct']:.2f} %, max "
                   f"{stats['evidence_max_abs_error_pct']:.2f} %"
                   + (f"; ablation rows max |error| {100 * stats['evidence_max_abs_error_abs']:.1f} points"
                      if stats["evidence_max_abs_error_abs"] == stats["evidence_max_abs_error_abs"] else ""))
        for kind, title in (("derived", "derived rows: arithmetic on another row, or the row a parameter is read from "
                                        "(bookkeeping, cannot fail alone)"),
                            ("spec", "spec rows: hardware-file values against the tables they come from")):
            part = res[res["kind"] == kind]
            if len(part):
                _rows_table(part, title)
        print_table(fitted.assign(value=fitted["value"].map(lambda v: f"{v:.4g}")),
                    f"fitted parameters ({len(fitted)}; re-fit with: python -m cmperf.calibration)")
        for t in sens_tables:
            t = t[t["max_abs_change_pct"] > 0.05]
            rows = sorted({c.rsplit(" ", 1)[0] for c in t.columns if c.endswith("%") and " " in c})
            compact = pd.DataFrame({"parameter": t["parameter"]})
            for r in rows:
                minus = next(c for c in t.columns if c.startswith(f"{r} -"))
                plus = next(c for c in t.columns if c.startswith(f"{r} +"))
                compact[r] = [f"{a:+.1f}/{b:+.1f}" for a, b in zip(t[minus], t[plus])]
            print_table(compact, "sensitivity: % change of each headline row when the parameter moves -10 % / +10 %")
        if cv is not None:
            g = cv.groups.copy()
            for c in ("held_out_max_abs_error", "held_out_mean_abs_error", "in_sample_max_abs_error"):
                g[c] = [f"{v:.2f} %" if u == "%" else f"{100 * v:.1f} pt" for v, u in zip(g[c], g["unit"])]
            print_table(g.drop(columns="unit"), "cross-validation: each evidence group predicted by a fit to the others")
            p = cv.parameters[["parameter", "full fit", "min", "max", "spread_pct"]].copy()
            for c in ("full fit", "min", "max"):
                p[c] = p[c].map(lambda v: f"{v:.4g}")
            p["spread_pct"] = p["spread_pct"].map(lambda v: f"{v:.1f} %")
            print_table(p, "fitted parameters across the folds")
    if stats["failed"]:
        raise typer.Exit(1)


def main() -> None:
    """Entry point: typer handles usage errors itself (message + exit 2); our own input
    errors arrive here as CmperfError."""
    try:
        app()
    except CmperfError as e:
        sys.stderr.write(f"cmperf: error: {e}\n")
        sys.exit(e.exit_code)


if __name__ == "__main__":
    main()
