"""``cmperf simulate``: a request-level simulation of one deployment, with bench_serving's
metrics (docs/model.md §12). Parses flags, calls :func:`cmperf.simulate.simulate`, renders."""

from __future__ import annotations

import math
from typing import List, Optional

import typer

from ..errors import ConfigError
from .options import FormatOpt, HardwareOpt, ModelOpt, SetOpt, StackOpt
from .progress import ProgressBar

SHOWN = [("completed", "successful requests", ""), ("duration_s", "benchmark duration", "s"),
         ("total_input_tokens", "total input tokens", ""), ("total_output_tokens", "total generated tokens", ""),
         ("request_throughput_rps", "request throughput", "req/s"), ("input_throughput_tps", "input token throughput", "tok/s"),
         ("output_throughput_tps", "output token throughput", "tok/s"), ("total_throughput_tps", "total token throughput", "tok/s"),
         ("output_throughput_per_npu", "output tokens/s per NPU", "tok/s"), ("concurrency", "concurrency", ""),
         ("goodput_rps", "goodput (within the SLOs)", "req/s"), ("accept_length", "accept length (tokens per step)", ""),
         ("mean_ttft_ms", "mean TTFT", "ms"), ("median_ttft_ms", "median TTFT", "ms"), ("p99_ttft_ms", "P99 TTFT", "ms"),
         ("mean_tpot_ms", "mean TPOT", "ms"), ("median_tpot_ms", "median TPOT", "ms"), ("p99_tpot_ms", "P99 TPOT", "ms"),
         ("mean_itl_ms", "mean ITL (per step)", "ms"), ("median_itl_ms", "median ITL", "ms"), ("p99_itl_ms", "P99 ITL", "ms"),
         ("mean_e2e_ms", "mean E2E latency", "ms"), ("median_e2e_ms", "median E2E latency", "ms"), ("p99_e2e_ms", "P99 E2E latency", "ms"),
         ("mean_queue_ms", "  TTFT: waiting for prefill", "ms"), ("mean_prefill_ms", "  TTFT: prefill pass", "ms"),
         ("mean_kv_transfer_ms", "  TTFT: KV transfer", "ms"), ("mean_decode_wait_ms", "  TTFT: waiting for a decode slot", "ms"),
         ("preemptions", "requests preempted (KV full; recomputed)", ""),
         ("decode_peak_kv_share", "peak KV of a decode rank / what it holds", ""),
         ("prefill_utilisation", "prefill instances busy", ""), ("decode_utilisation", "decode instances busy", ""),
         ("dp_rank_wait_share", "decode step time spent waiting for the slowest DP rank", "")]


def simulate_cmd(
    prefill: Optional[List[str]] = typer.Option(None, "--prefill", help="prefill instances COUNTxDIES[:tp=T], e.g. 6x32 (repeatable)"),
    decode: Optional[List[str]] = typer.Option(None, "--decode", help="decode instances COUNTxDIES[:tp=T], e.g. 1x320 (repeatable)"),
    afd: Optional[List[str]] = typer.Option(None, "--afd", help="AFD decode instances COUNTxATTENTION+EXPERT dies, e.g. 1x224+96"),
    colocated: Optional[List[str]] = typer.Option(None, "--colocated", help="co-located instances COUNTxDIES[:tp=T] that prefill and decode (aggregated serving)"),
    deployment: Optional[str] = typer.Option(None, "--deployment", help="a deployment YAML (prefill:, decode: or afd: lists of {count, dies, ...})"),
    request_rate: str = typer.Option("plan", "--request-rate", help="requests/s (Poisson), inf (all at once), trace (a --trace's arrival_s; the default when it has them), or plan: the rate the planner's closed form finds for this deployment; a comma list sweeps the rates (one row each; --plot: throughput against p99 TTFT and TPOT)"),
    burstiness: float = typer.Option(1.0, "--burstiness", help="coefficient of variation of the arrival gaps (1: Poisson; >1: bursty, gamma)"),
    max_concurrency: Optional[int] = typer.Option(None, "--max-concurrency", help="requests in flight at most (a closed loop, as bench_serving)"),
    num_prompts: int = typer.Option(2000, "--num-prompts", help="requests to simulate"),
    prompt_len: str = typer.Option("4096", "--prompt-len", help="prompt tokens: N, MEAN:P90 (log-normal), exp:MEAN or cdf:FILE (tokens,cdf or tokens,share)"),
    output_len: str = typer.Option("256", "--output-len", help="output tokens: N, MEAN:P90 (log-normal), exp:MEAN or cdf:FILE"),
    trace: Optional[str] = typer.Option(None, "--trace", help="CSV of prompt_len,output_len[,prefix_hit_tokens][,arrival_s] per request"),
    prefix_hit: str = typer.Option("0", "--prefix-hit", help="mean share of prompt tokens found cached (the HBM prefix cache, then the KV pool), 0-1; H:K draws each request's share from Beta(K H, K (1 - H)) (default K 2; inf: all H)"),
    working_set: Optional[float] = typer.Option(None, "--working-set-tokens", help="distinct prefix tokens in use (the HBM prefix cache, then the pool, hold a share of them: LRU, docs/model.md §9.5)"),
    ttft_slo: float = typer.Option(2000.0, "--ttft-slo", help="TTFT SLO in ms, for the goodput (and the plan rate)"),
    tpot_slo: float = typer.Option(50.0, "--tpot-slo", help="TPOT SLO in ms, for the goodput (and the plan rate)"),
    slo_stat: str = typer.Option("mean", "--slo-stat", help="the statistic of the requests' TTFT and TPOT the SLOs bound (the plan rate, the verdict): mean, p50, p90 or p99"),
    warmup: float = typer.Option(0.0, "--warmup", help="share of the first requests left out of the latency statistics"),
    seed: int = typer.Option(0, "--seed", help="random seed (the same seed gives the same run)"),
    mtp: Optional[bool] = typer.Option(None, "--mtp/--no-mtp", help="multi-token prediction on or off in every instance (default: the system's deployment; an instance's :mtp= wins)"),
    hardware: str = HardwareOpt, model: Optional[str] = ModelOpt, sets: Optional[List[str]] = SetOpt, stack: Optional[str] = StackOpt,
    fmt: str = FormatOpt,
    out: Optional[str] = typer.Option(None, "--out", help="write one row per request (send, first token, finish, lengths) to this CSV"),
    plot: Optional[str] = typer.Option(None, "--plot", help="draw latency CDFs and throughput over time to this image (png, pdf, svg, ...: by its suffix)"),
    export: Optional[str] = typer.Option(None, "--export", help="write the simulated deployment to this directory: deployment.yaml (read back by --deployment) and the launch commands of the stacks that run it (docs/export.md)"),
):
    """Simulate one deployment request by request and print bench_serving's metrics (default:
    the system's published deployment, the paper's 6 x 32 + 1 x 320 dies on CloudMatrix384,
    at the rate the planner promises for it). Example: cmperf simulate --max-concurrency 832
    --num-prompts 3328 --request-rate inf --prompt-len 3500 --output-len 1500"""
    from ..predict import load_specs, system_model
    from ..report import check_format, check_parent_dir, note_line, warn
    from ..simulate import Traffic
    from ..simulate.requests import check_seed, check_warmup
    from ..simulate.deployment import check, given, with_plan_budget
    from .plan import _workload

    check_format(fmt)
    for path, flag in ((out, "--out"), (plot, "--plot")):
        if path is not None:
            check_parent_dir(path, flag)
    if plot:
        from ..plots import plot_format

        plot_format(plot)
    model = model or system_model(hardware)
    if working_set is not None and not (math.isfinite(working_set) and 0 < working_set <= 1e18):
        raise ConfigError(f"--working-set-tokens {working_set:g}: expected a positive number of tokens, at most 1e18")
    workload = _workload("max", prompt_len, output_len, trace, prefix_hit, ttft_slo, tpot_slo, None, slo_stat)
    specs = load_specs(hardware, model, sets or [], stack)
    from ..advice import slow_dtype_notes

    for note in [*specs.notes, *slow_dtype_notes(specs)]:
        note_line(note)
    dep = given(deployment, prefill, decode, afd, colocated)
    if dep is None:
        dep = _default_deployment(specs, workload)
    for line in check(dep, specs):
        warn(line)
    if mtp is not None:
        _, m = specs.views()
        if mtp and not m.mtp.modules:
            raise ConfigError(f"--mtp: model {model} has no MTP module")
        for g in [*dep.prefill, *dep.decode]:
            g.inputs.setdefault("mtp", int(mtp))
    Traffic(rate_rps=None, burstiness=burstiness, max_concurrency=max_concurrency, num_prompts=num_prompts)  # checked first
    check_seed(seed)
    check_warmup(warmup, num_prompts)
    if "," in request_rate:
        return _sweep(specs, workload, dep, request_rate, burstiness, max_concurrency, num_prompts, seed, warmup,
                      working_set, fmt, plot, out, hardware, model, sets)
    if request_rate == "trace" or (request_rate == "plan" and workload.arrival_samples is not None and max_concurrency is None):
        if workload.arrival_samples is None:
            raise ConfigError("--request-rate trace: give a --trace whose header ends in arrival_s")
        traffic = Traffic(burstiness=burstiness, max_concurrency=max_concurrency, num_prompts=num_prompts,
                          arrivals_s=tuple(workload.arrival_samples))
        note_line("arrivals: the trace's own times (arrival_s)")
        return _run(specs, workload, dep, traffic, seed, warmup, working_set, fmt, plot, out, hardware, model, sets, export)
    rate = _rate(request_rate)
    if rate == "plan" and max_concurrency is not None:
        rate = math.inf  # a closed loop: bench_serving's --request-rate inf with --max-concurrency
    if rate == "plan":
        ev = _plan_rate(specs, workload, dep)
        rate = ev["goodput_rps"]
        if not rate > 0:
            raise ConfigError(f"--request-rate plan: the planner finds no rate within the SLOs for {dep.describe()} "
                              f"({ev.get('binding', '')}); give --request-rate or --max-concurrency")
        note_line(f"request rate {rate:.4g}/s: the planner's closed form for this deployment within the SLOs "
                  f"(binding: {ev['binding']})")
        dep, budgeted = with_plan_budget(dep, ev, int(specs.views()[0].chip.dies_per_package))
        if budgeted:
            note_line(f"prefill passes of at most {ev['prefill_tokens_per_npu']:,.0f} prompt tokens per NPU: the budget "
                      f"the planner chose for that rate (give pass_tokens=N in --prefill to set another)")
    traffic = Traffic(rate_rps=rate, burstiness=burstiness, max_concurrency=max_concurrency, num_prompts=num_prompts)
    _run(specs, workload, dep, traffic, seed, warmup, working_set, fmt, plot, out, hardware, model, sets, export)


def _default_deployment(specs, workload):
    """The system's published deployment, else the one the planner chooses for ``workload``
    (:func:`cmperf.simulate.deployment.default_deployment`), kept in the answer cache as
    :func:`_plan_rate` is: choosing one runs the whole planner (~1 s on h100-cluster)."""
    from dataclasses import asdict

    from ..simulate.deployment import DeploymentSpec, InstanceGroup, default_deployment
    from .cache import cached, plain, specs_key

    def compute() -> dict:
        dep = default_deployment(specs, workload)
        return {"prefill": [asdict(g) for g in dep.prefill], "decode": [asdict(g) for g in dep.decode],
                "decode_phase": dep.decode_phase, "colocated": dep.colocated}

    d = cached("defaultdeployment", lambda: {"specs": specs_key(specs), "workload": plain(workload)}, compute)
    return DeploymentSpec(prefill=[InstanceGroup(**g) for g in d["prefill"]], decode=[InstanceGroup(**g) for g in d["decode"]],
                          decode_phase=d["decode_phase"], colocated=d["colocated"])


def _plan_rate(specs, workload, dep) -> dict:
    """The goodput, binding term and prefill pass budget (tokens per NPU) the planner's closed form finds for ``dep``
    (:func:`cmperf.plan.planner.evaluate`), kept in the answer cache (cli/cache.py): evaluating
    loads the planner, pandas and SciPy (~0.5 s, more than the rest of a short simulation) for an
    answer that depends only on the specs, the workload, the deployment and cmperf's code,
    which the key holds."""
    from .cache import cached, plain, specs_key

    def compute() -> dict:
        from ..plan.planner import evaluate

        ev = evaluate(specs, workload, dep)
        return {"goodput_rps": float(ev["goodput_rps"]), "binding": str(ev.get("binding", "")),
                "prefill_tokens_per_npu": float(ev.get("prefill_tokens_per_npu", math.nan))}

    return cached("planrate", lambda: {"specs": specs_key(specs), "workload": plain(workload), "deployment": plain(dep)},
                  compute)


def _run(specs, workload, dep, traffic, seed, warmup, working_set, fmt, plot, out, hardware, model, sets, export=None):
    """One simulation, rendered (table, JSON or CSV; --out rows, --plot figure)."""
    from ..report import print_json, print_table, provenance, write_csv
    from ..simulate import simulate

    bars = []

    def progress(done: int, total: int) -> None:  # the bar's clock starts with the run, not the step-time grids
        if not bars:
            bars.append(ProgressBar("simulating requests"))
        bars[0](done, total)

    try:
        res = simulate(specs, workload, dep, traffic, seed, progress, warmup, working_set_tokens=working_set)
    finally:
        for bar in bars:
            bar.close()
    _warn_context(res, specs)
    prov = provenance("simulate", hardware, model, sets or [], stack=specs.stack_name or "none",
                      deployment=res.settings["deployment"], traffic=res.settings["traffic"], seed=seed)
    if out:
        write_csv(_rows(res), out, prov, "--out")
    if export is not None:
        import sys

        from ..export import context, from_deployment, write, written_message

        keys = ("request_throughput_rps", "goodput_rps", "mean_ttft_ms", "mean_tpot_ms", "npus")
        chosen = from_deployment(res.deployment, res.instances["decode"], res.instances["prefill"],
                                 {"split": res.settings["deployment"], **{k: res.metrics[k] for k in keys if k in res.metrics}})
        written = write(export, chosen, context(specs, workload.slo), prov)
        sys.stderr.write(written_message(export, written))
    if plot:
        from ..plots import simulate_figure

        simulate_figure(res, plot, f"cmperf simulate: {res.settings['deployment']}, {res.settings['traffic']}")
    m = res.metrics
    if fmt == "json":
        print_json({**m, "settings": res.settings, "provenance": prov})
    elif fmt == "csv":
        from ..report import print_csv

        print_csv([m], prov)
    else:
        typer.echo(f"simulate: {res.settings['deployment']} on {hardware}, {model}, stack {res.settings['stack']}; "
                   f"{res.settings['traffic']}; seed {seed}")
        shown = [{"metric": label, "value": _value(m.get(key), unit)} for key, label, unit in SHOWN if key in m]
        print_table(shown, "serving benchmark result (bench_serving's metrics)")
        typer.echo(slo_verdict(m, res.settings["slo"]))


def slo_verdict(m: dict, slo: dict) -> str:
    """The run against its SLOs at their statistic, in one line: 'SLOs (p90): TTFT p90 1,234
    ms <= 2,000 ms met; TPOT p90 45.1 ms <= 50 ms met' (goodput counts requests one by one)."""
    parts = []
    for name, key in (("TTFT", "ttft"), ("TPOT", "tpot")):
        v, bound, stat = m[f"slo_{key}_ms"], slo[key], slo[f"{key}_stat"]
        parts.append(f"{name} {stat} {v:,.4g} ms {'<=' if v <= bound else '>'} {bound:,.6g} ms "
                     f"{'met' if v <= bound else 'MISSED'}")
    return "SLOs at their statistic: " + "; ".join(parts)


def _warn_context(res, specs) -> None:
    """One warning when requests attend more context (prompt + output) than the model supports."""
    from ..contexts import max_context, past_context
    from ..report import warn

    ctx = res.requests.prompt + res.requests.output
    m = specs.views()[1]
    most = max_context(m)
    if most is not None and (ctx > most).any():
        warn(past_context(m, float(ctx.max()), f"{int((ctx > most).sum()):,} of {len(ctx):,} requests "
                                                          f"(prompt + output up to {float(ctx.max()):,.0f} tokens)"))


SWEPT = [("rate_rps", "rate (req/s)"), ("request_throughput_rps", "req/s"), ("output_throughput_tps", "output tok/s"),
         ("output_throughput_per_npu", "tok/s per NPU"), ("mean_ttft_ms", "mean TTFT (ms)"), ("p99_ttft_ms", "P99 TTFT (ms)"),
         ("mean_tpot_ms", "mean TPOT (ms)"), ("p99_tpot_ms", "P99 TPOT (ms)"), ("goodput_rps", "goodput (req/s)")]
MAX_SWEEP = 32


def _sweep(specs, workload, dep, text, burstiness, max_concurrency, num_prompts, seed, warmup, working_set, fmt, plot, out,
           hardware, model, sets):
    """``--request-rate R1,R2,...``: one simulation per rate, the same seed (the same requests,
    their gaps scaled), a row of bench_serving's headline metrics each."""
    from ..report import print_json, print_table, provenance, write_csv
    from ..simulate import Traffic, simulate

    items = [t.strip() for t in text.split(",")]
    if any(t in ("", "plan") for t in items) or len(items) > MAX_SWEEP:
        raise ConfigError(f"--request-rate {text[:40]}: a sweep is a comma list of up to {MAX_SWEEP} rates (requests/s or inf)")
    rows, settings = [], None
    for t in items:
        rate = _rate(t)
        res = simulate(specs, workload, dep, Traffic(rate_rps=rate, burstiness=burstiness, max_concurrency=max_concurrency,
                                                     num_prompts=num_prompts), seed, None, warmup, working_set_tokens=working_set)
        rows.append({"rate_rps": rate, **{k: res.metrics[k] for k, _ in SWEPT[1:]}})
        settings = res.settings
    prov = provenance("simulate", hardware, model, sets or [], stack=specs.stack_name or "none",
                      deployment=settings["deployment"], request_rate=text, seed=seed)
    if out:
        write_csv(rows, out, prov, "--out")
    if plot:
        from ..plots import rate_sweep_figure

        rate_sweep_figure(rows, settings["slo"], plot, f"cmperf simulate: {settings['deployment']}, {num_prompts} requests per rate")
    if fmt == "json":
        print_json({"rows": rows, "settings": {**settings, "traffic": f"{num_prompts} requests per rate"}, "provenance": prov})
    elif fmt == "csv":
        from ..report import print_csv

        print_csv(rows, prov)
    else:
        typer.echo(f"simulate: {settings['deployment']} on {hardware}, {model}, stack {settings['stack']}; "
                   f"{num_prompts} requests per rate; seed {seed}")
        print_table([{label: _value(r[k], "") for k, label in SWEPT} for r in rows], "rate sweep (bench_serving's metrics)")


def _rate(text: str):
    if text == "plan":
        return "plan"
    if text.strip().lower() in ("inf", "+inf", "infinity", "+infinity"):
        return math.inf
    from ..errors import parse_number

    from ..simulate.requests import MIN_RATE_RPS

    v = parse_number(text, "--request-rate")
    if not v >= MIN_RATE_RPS:
        raise ConfigError(f"--request-rate {text[:40]}: expected requests/s of at least {MIN_RATE_RPS:g}, inf or plan")
    return v


def _value(v, unit: str) -> str:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "-"
    if isinstance(v, int):
        return f"{v:,}" + (f" {unit}" if unit else "")
    text = f"{v:,.0f}" if abs(v) >= 1000 else f"{v:,.4g}" if abs(v) >= 1 or v == 0 else f"{v:.3f}"
    return text + (f" {unit}" if unit else "")


def _rows(res) -> list[dict]:
    r = res.requests
    return [{"request": i, "prompt_len": int(r.prompt[i]), "output_len": int(r.output[i]), "cached_len": int(r.cached[i]),
             "send_s": r.send_s[i], "prefill_start_s": r.prefill_start_s[i], "prefill_end_s": r.prefill_end_s[i],
             "kv_arrive_s": r.kv_arrive_s[i], "first_token_s": r.first_token_s[i], "finish_s": r.finish_s[i],
             "decode_steps": int(r.steps[i])} for i in range(len(r.prompt))]


