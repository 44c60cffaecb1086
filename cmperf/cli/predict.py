"""``cmperf predict decode|prefill``: one configuration (grids: ``cmperf search``)."""

from __future__ import annotations

from typing import List, Optional

import typer

from ..defaults import help_text
from ..errors import CmperfError, short
from .options import FormatOpt, HardwareOpt, ModelOpt, SetOpt, StackOpt

predict_app = typer.Typer(no_args_is_help=True, help="Predict one configuration (grids: cmperf search). Example: cmperf predict decode --batch 8")


def _microbatches(v: Optional[str], most: int = 2) -> Optional[int]:
    if v is None:
        return None
    table = {**{str(n): n for n in range(1, most + 1)}, "auto": 0}
    if v not in table:
        raise CmperfError(f"--microbatches {short(v, 40)}: expected {', '.join(list(table)[:-1])} or auto")
    return table[v]


def _imbalance(v: Optional[str]):
    if v is None or v == "default":
        return v
    try:
        if not v.isascii():  # float() reads other scripts' digits ('٣' = 3): not what anyone types
            raise ValueError(v)
        return float(v)
    except ValueError:
        raise CmperfError(f"--expert-imbalance {short(v, 40)}: expected a number >= 1 or 'default'") from None


KV_DTYPES = ("bf16", "fp16", "fp8", "int8")


def _kv_sets(sets: Optional[List[str]], kv_dtype: Optional[str], hardware: str) -> list[str]:
    """--kv-dtype as the --set it stands for; an FP8 cache needs a chip with FP8 (its attention
    kernels read the cache as it is stored)."""
    out = list(sets or [])
    if kv_dtype is not None:
        if kv_dtype not in KV_DTYPES:
            raise CmperfError(f"--kv-dtype {short(kv_dtype, 40)}: expected {', '.join(KV_DTYPES[:-1])} or {KV_DTYPES[-1]}")
        if kv_dtype == "fp8":
            from ..specs.dtypes import dtypes_of
            from ..specs.loader import load_hardware

            chip = load_hardware(hardware).chip
            have = dtypes_of(chip.die.peak_flops_per_s)
            if "fp8" not in have:
                raise CmperfError(f"--kv-dtype fp8: chip {chip.name} has no FP8 (it runs {', '.join(have)}); "
                                  f"an 8-bit cache there is --kv-dtype int8")
        out.append(f"model.precision.kv_cache={kv_dtype}")
    return out


KV_HELP = "KV-cache dtype bf16|fp16|fp8|int8 (fp8 where the chip has FP8; default: the model spec's)"


DECODE_SUMMARY = ["phase", "batch", "kv_len", "chunk_tokens", "dies", "ep", "tp", "mtp", "microbatches_used", "tpot_ms", "iteration_ms",
                  "host_ms", "layer_us", "stream_a_us", "stream_b_us", "barrier_wait_us", "microbatch_gain",
                  "tokens_per_iteration", "throughput_per_npu",
                  "tokens_per_s_per_user", "tokens_per_s_per_tflops", "memory_per_die_bytes", "weights_per_die_bytes",
                  "kv_cache_per_die_bytes", "buffers_per_die_bytes", "activations_per_die_bytes",
                  "runtime_reserve_per_die_bytes", "kv_cache_peak_per_die_bytes", "hbm_per_die_bytes", "max_batch_per_npu",
                  "fits"]
PREFILL_SUMMARY = ["phase", "tokens_per_npu", "prompt_len", "cached_len", "dies", "ep", "attn_tp", "microbatches_used", "ttft_ms",
                   "forward_ms", "host_ms", "pool_load_ms", "kv_transfer_ms", "throughput_per_npu", "prompt_throughput_per_npu",
                   "tokens_per_s_per_tflops", "microbatch_gain",
                   "memory_per_die_bytes", "weights_per_die_bytes", "kv_cache_per_die_bytes", "buffers_per_die_bytes",
                   "activations_per_die_bytes", "runtime_reserve_per_die_bytes", "hbm_per_die_bytes", "max_tokens_per_npu",
                   "fits"]
AFD_SUMMARY = ["phase", "batch", "kv_len", "attention_dies", "expert_dies", "mtp", "microbatches_used", "tpot_ms",
               "iteration_ms", "host_ms", "layer_us", "attention_stage_us", "expert_stage_us", "transfer_us", "barrier_wait_us",
               "expert_rows", "npus", "throughput_per_npu", "throughput_per_attention_npu", "tokens_per_s_per_user",
               "tokens_per_s_per_tflops", "attention_memory_per_die_bytes", "attention_weights_per_die_bytes",
               "kv_cache_per_die_bytes", "attention_buffers_per_die_bytes", "attention_activations_per_die_bytes",
               "expert_memory_per_die_bytes", "expert_weights_per_die_bytes", "expert_buffers_per_die_bytes",
               "runtime_reserve_per_die_bytes", "kv_cache_peak_per_die_bytes", "hbm_per_die_bytes", "max_batch_per_npu",
               "fits"]
SUMMARY = {"decode": DECODE_SUMMARY, "prefill": PREFILL_SUMMARY, "afd": AFD_SUMMARY}


def _warn_context(phase: str, table, specs) -> None:
    """One warning when a row attends more context than the model supports."""
    from ..contexts import past_context
    from ..report import warn

    col = "prompt_len" if phase == "prefill" else "kv_len"
    if col in table:
        tokens = float(table[col].to_numpy(dtype=float).max())
        line = past_context(specs.views()[1], tokens, f"--{col.replace('_', '-')} {tokens:.0f}")
        if line:
            warn(line)


def _run_predict(phase: str, values: dict, hardware: str, model: Optional[str], sets: list[str], breakdown: bool,
                 fmt: str, out: Optional[str], stack: Optional[str] = None):
    """Predict one configuration and render it from the result's numpy columns (pandas is
    imported only to write CSV)."""
    from ..predict import inert_overrides, load_specs, predict, system_model
    from ..bands import half_width
    from ..report import (check_format, check_parent_dir, human, json_records, misfit, note_line, print_csv, print_json,
                          print_table, provenance, unit_of, warn, write_csv)

    check_format(fmt)
    if out is not None:
        check_parent_dir(out, "--out")
    model = model or system_model(hardware)
    specs = load_specs(hardware, model, sets, stack)
    from ..advice import slow_dtype_notes

    for note in [*specs.notes, *slow_dtype_notes(specs)]:
        note_line(note)
    given = {k: v for k, v in values.items() if v is not None}
    result = predict(phase, given, specs)
    table = result.columns
    for i in range(len(table)):
        if not bool(table["fits"].iat[i]):
            warn(misfit(table.record(i), phase))
    _warn_context(phase, table, specs)
    base = None
    if sets:
        try:
            base = load_specs(hardware, model)  # the files as they are: what each --set is compared with
        except CmperfError:
            base = None
    for path in inert_overrides(phase, given, specs, sets, base):
        warn(f"--set {path} changes no output of this prediction (the cost model does not read it, "
             f"or it never limits this configuration)")
    prov = provenance(f"predict {phase}", hardware, model, sets, stack=specs.stack_name or "none")
    ops, sections = result.breakdown_records(0) if breakdown else (None, None)
    tables = {"summary": table.records(), "operators": ops, "sections": sections} if breakdown else table.records()
    if out is not None:
        write_csv(table.records(), out, prov, "--out")
    summary = SUMMARY[phase]
    if fmt == "json":
        obj = json_records(table.records())[0]
        if breakdown:
            obj = {**obj, "breakdown": ops, "sections": sections}
        print_json({**obj, "provenance": prov})
    elif fmt == "csv":
        print_csv(tables, prov)
    else:
        def cell(c):
            text = human(table[c].iat[0], unit_of(c))
            if f"{c}_lo" in table:
                text += f" ± {human(half_width(table[f'{c}_lo'].iat[0], table[f'{c}_hi'].iat[0]), unit_of(c))}"
                text += " (floor)" if bool(table["band_floor"].iat[0]) else ""
            return text

        shown = [{"quantity": c, "value": cell(c)} for c in summary if c in table]
        print_table(shown, f"{phase} prediction ({hardware}, {model})")
        if breakdown:
            cols = ["section", "stream", "op", "calls", "time_us", "compute_us", "vector_us", "memory_us", "network_us",
                    "latency_us", "bound", "total_ms"]
            note = ""
            if any(o.get("implementation") for o in ops):  # a stack's own measured collective (docs/model.md §4.5)
                cols.insert(3, "implementation")
                note = "; implementation: the measured collective the stack calls, else the system's per-call floor"
            print_table(_rounded(ops, cols, 2), f"per-operator time (one call = one microbatch; bound = largest term{note})")
            print_table(_rounded(sections, None, 3), "how the operators combine")


def _rounded(records: list[dict], cols: Optional[list[str]], digits: int) -> list[dict]:
    """The records' ``cols`` (default: all), floats rounded to ``digits``."""
    return [{c: round(r[c], digits) if isinstance(r[c], float) else r[c] for c in (cols or r)} for r in records]


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
    kv_dtype: Optional[str] = typer.Option(None, "--kv-dtype", help=KV_HELP),
    hardware: str = HardwareOpt, model: Optional[str] = ModelOpt, sets: Optional[List[str]] = SetOpt, stack: Optional[str] = StackOpt,
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
    _run_predict("decode", values, hardware, model, _kv_sets(sets, kv_dtype, hardware), breakdown, fmt, out, stack)


@predict_app.command("prefill")
def predict_prefill(
    tokens_per_npu: Optional[float] = typer.Option(None, "--tokens-per-npu", help=help_text("prefill", "tokens_per_npu")),
    prompt_len: Optional[int] = typer.Option(None, "--prompt-len", help=help_text("prefill", "prompt_len")),
    cached_len: Optional[int] = typer.Option(None, "--cached-len", help=help_text("prefill", "cached_len")),
    pool_len: Optional[int] = typer.Option(None, "--pool-len", help=help_text("prefill", "pool_len")),
    pool_readers: Optional[int] = typer.Option(None, "--pool-readers", help=help_text("prefill", "pool_readers")),
    dies: Optional[int] = typer.Option(None, "--dies", help=help_text("prefill", "dies")),
    ep: Optional[int] = typer.Option(None, "--ep", help=help_text("prefill", "ep")),
    attn_tp: Optional[int] = typer.Option(None, "--attn-tp", help=help_text("prefill", "attn_tp")),
    microbatches: Optional[str] = typer.Option(None, "--microbatches", help=help_text("prefill", "microbatches")),
    mtp: Optional[bool] = typer.Option(None, "--mtp/--no-mtp", help=help_text("prefill", "mtp")),
    expert_imbalance: Optional[str] = typer.Option(None, "--expert-imbalance", help=help_text("prefill", "expert_imbalance")),
    redundant_experts: Optional[int] = typer.Option(None, "--redundant-experts", help=help_text("prefill", "redundant_experts")),
    shared_copies: Optional[int] = typer.Option(None, "--shared-copies", help=help_text("prefill", "shared_copies")),
    kv_dtype: Optional[str] = typer.Option(None, "--kv-dtype", help=KV_HELP),
    hardware: str = HardwareOpt, model: Optional[str] = ModelOpt, sets: Optional[List[str]] = SetOpt, stack: Optional[str] = StackOpt,
    breakdown: bool = typer.Option(False, "--breakdown", help="per-operator table: time and bounding term"),
    fmt: str = FormatOpt,
    out: Optional[str] = typer.Option(None, "--out", help="also write the result table to this CSV file"),
):
    """TTFT, throughput per NPU and memory of a prefill instance (default: the paper's 16-NPU
    EP32 instance, 16K tokens per NPU of 4K prompts). Example: cmperf predict prefill --prompt-len 32768"""
    values = dict(tokens_per_npu=tokens_per_npu, prompt_len=prompt_len, cached_len=cached_len, pool_len=pool_len, pool_readers=pool_readers,
                  dies=dies, ep=ep, attn_tp=attn_tp,
                  microbatches=_microbatches(microbatches), mtp=None if mtp is None else int(mtp),
                  expert_imbalance=_imbalance(expert_imbalance), redundant_experts=redundant_experts,
                  shared_copies=shared_copies)
    _run_predict("prefill", values, hardware, model, _kv_sets(sets, kv_dtype, hardware), breakdown, fmt, out, stack)



@predict_app.command("afd")
def predict_afd(
    batch: Optional[float] = typer.Option(None, "--batch", help=help_text("afd", "batch")),
    prompt_len: Optional[int] = typer.Option(None, "--prompt-len", help=help_text("afd", "prompt_len")),
    output_len: Optional[int] = typer.Option(None, "--output-len", help=help_text("afd", "output_len")),
    kv_len: Optional[float] = typer.Option(None, "--kv-len", help=help_text("afd", "kv_len")),
    attention_dies: Optional[int] = typer.Option(None, "--attention-dies", help=help_text("afd", "attention_dies")),
    expert_dies: Optional[int] = typer.Option(None, "--expert-dies", help=help_text("afd", "expert_dies")),
    microbatches: Optional[str] = typer.Option(None, "--microbatches", help=help_text("afd", "microbatches")),
    mtp: Optional[bool] = typer.Option(None, "--mtp/--no-mtp", help=help_text("afd", "mtp")),
    mtp_k: Optional[int] = typer.Option(None, "--mtp-k", help=help_text("afd", "mtp_k")),
    mtp_acceptance: Optional[float] = typer.Option(None, "--mtp-acceptance", help=help_text("afd", "mtp_acceptance")),
    expert_imbalance: Optional[str] = typer.Option(None, "--expert-imbalance", help=help_text("afd", "expert_imbalance")),
    redundant_experts: Optional[int] = typer.Option(None, "--redundant-experts", help=help_text("afd", "redundant_experts")),
    shared_copies: Optional[int] = typer.Option(None, "--shared-copies", help=help_text("afd", "shared_copies")),
    kv_dtype: Optional[str] = typer.Option(None, "--kv-dtype", help=KV_HELP),
    hardware: str = HardwareOpt, model: Optional[str] = ModelOpt, sets: Optional[List[str]] = SetOpt, stack: Optional[str] = StackOpt,
    breakdown: bool = typer.Option(False, "--breakdown", help="per-operator table: time and bounding term"),
    fmt: str = FormatOpt,
    out: Optional[str] = typer.Option(None, "--out", help="also write the result table to this CSV file"),
):
    """TPOT, throughput per NPU (attention + expert NPUs) and memory of an attention-FFN
    disaggregated decode instance: attention dies (data-parallel) and expert dies (EP) on
    separate NPUs, transfers over UB, microbatches pipelined across the two pools (default:
    the paper's 160 NPUs as 112 attention + 48 expert NPUs, batch 96 per attention NPU).
    Example: cmperf predict afd --attention-dies 272 --expert-dies 48 --batch 128"""
    values = dict(batch=batch, prompt_len=prompt_len, output_len=output_len, kv_len=kv_len, attention_dies=attention_dies,
                  expert_dies=expert_dies, microbatches=_microbatches(microbatches, 4), mtp=None if mtp is None else int(mtp),
                  mtp_k=mtp_k, mtp_acceptance=mtp_acceptance, expert_imbalance=_imbalance(expert_imbalance),
                  redundant_experts=redundant_experts, shared_copies=shared_copies)
    _run_predict("afd", values, hardware, model, _kv_sets(sets, kv_dtype, hardware), breakdown, fmt, out, stack)
