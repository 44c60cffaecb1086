"""``cmperf predict decode|prefill``: one configuration (grids: ``cmperf search``)."""

from __future__ import annotations

from typing import List, Optional

import typer

from ..defaults import help_text
from ..errors import CmperfError
from .options import FormatOpt, HardwareOpt, ModelOpt, SetOpt

predict_app = typer.Typer(no_args_is_help=True, help="Predict one configuration (grids: cmperf search). Example: cmperf predict decode --batch 8")


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
        if not v.isascii():  # float() reads other scripts' digits ('٣' = 3): not what anyone types
            raise ValueError(v)
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


DECODE_SUMMARY = ["phase", "batch", "kv_len", "dies", "ep", "tp", "mtp", "microbatches_used", "tpot_ms", "iteration_ms",
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
    from ..predict import load_specs, predict
    from ..bands import half_width
    from ..report import check_format, check_parent_dir, human, print_csv, print_json, print_table, unit_of, warn, write_csv

    check_format(fmt)
    if out is not None:
        check_parent_dir(out, "--out")
    specs = load_specs(hardware, model, sets)
    result = predict(phase, {k: v for k, v in values.items() if v is not None}, specs)
    table = result.table
    for i in range(len(table)):
        if not bool(table["fits"].iat[i]):
            need, have = table["memory_per_die_bytes"].iat[i], table["hbm_per_die_bytes"].iat[i]
            warn(f"does not fit: needs {human(need, 'B')} per die (weights {human(table['weights_per_die_bytes'].iat[i], 'B')}, "
                 f"KV {human(table['kv_cache_per_die_bytes'].iat[i], 'B')}, buffers {human(table['buffers_per_die_bytes'].iat[i], 'B')}) "
                 f"but a die has {human(have, 'B')}")
    if out is not None:
        write_csv(table, out, "--out")
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
    tp: Optional[int] = typer.Option(None, "--tp", help=help_text("decode", "tp")),
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
    values = dict(batch=batch, prompt_len=prompt_len, output_len=output_len, kv_len=kv_len, dies=dies, ep=ep, tp=tp,
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

