"""``cmperf plan``: split an NPU budget into prefill/decode (or co-located) instances for a
workload and its SLOs, and say how many requests per second it serves (docs/model.md §9)."""

from __future__ import annotations

import math
import sys
from typing import List, Optional

import typer

from ..errors import ConfigError, short
from .options import FormatOpt, HardwareOpt, ModelOpt, SetOpt, StackOpt

MAX_SLO_MS = 1e9  # eleven days: beyond it an SLO bounds nothing
BEST_ROWS = [("shape", "shape", ""), ("split", "split", ""), ("npus_split", "NPUs used (prefill : decode)", ""),
             ("prefill_tokens_per_npu", "prefill tokens per NPU per pass (chunk, co-located)", ""),
             ("decode_batch_per_npu", "decode batch per NPU at this rate", ""),
             ("goodput_rps", "goodput", "requests/s"), ("goodput_rpm", "goodput", "requests/min"),
             ("max_rps", "largest rate within the SLOs", "requests/s"),
             ("binding", "what limits it", ""),
             ("ttft_ms", "TTFT", "ms"), ("ttft_queue_ms", "  waiting for a place in a pass", "ms"),
             ("ttft_align_ms", "  waiting for the running pass to end", "ms"),
             ("ttft_prefill_ms", "  prefill pass (pool loads included)", "ms"),
             ("ttft_kv_transfer_ms", "  KV transfer to decode", "ms"),
             ("ttft_decode_join_ms", "  waiting for the decode step it joins", "ms"),
             ("tpot_ms", "TPOT", "ms"), ("tokens_per_s_per_user", "tokens/s per user", ""),
             ("output_tokens_per_s_per_npu", "output tokens/s per NPU (all NPUs)", ""),
             ("prompt_tokens_per_s_per_npu", "prompt tokens/s per NPU (all NPUs)", "")]
SHOWN = ["rank", "shape", "prefill_instances", "prefill_dies", "prefill_tp", "prefill_tokens_per_npu", "decode_instances",
         "decode_dies", "decode_tp", "attention_dies",
         "decode_batch_per_npu", "npus", "goodput_rps", "binding", "ttft_ms", "tpot_ms", "output_tokens_per_s_per_npu"]


def plan_cmd(
    npus: Optional[int] = typer.Option(None, "--npus", help="NPU budget (default: the whole system, 384 on CloudMatrix384; more = several supernodes)"),
    supernode: Optional[int] = typer.Option(None, "--supernode", help="NPUs per supernode (UB domain), 192-384 in Table 11 (default: the system's)"),
    rate: str = typer.Option("max", "--rate", help="arrival rate in requests/s, or max: the largest rate that meets the SLOs; a comma list plans each"),
    prompt_len: str = typer.Option("4096", "--prompt-len", help="prompt tokens: N, MEAN:P90 (log-normal) or exp:MEAN"),
    output_len: str = typer.Option("256", "--output-len", help="output tokens: N, MEAN:P90 (log-normal) or exp:MEAN"),
    trace: Optional[str] = typer.Option(None, "--trace", help="CSV of prompt_len,output_len[,prefix_hit_tokens] per request (replaces --prompt-len/--output-len)"),
    prefix_hit: str = typer.Option("0", "--prefix-hit", help="share of prompt tokens found cached (the HBM prefix cache, then the KV pool), 0-1; a comma list plans each"),
    block_tokens: Optional[int] = typer.Option(None, "--block-tokens", help="EMS KV block in tokens (paper: 128-512; default: the system's, 256)"),
    working_set: Optional[float] = typer.Option(None, "--working-set-tokens", help="distinct prefix tokens in use (the HBM prefix cache, then the pool, hold a share of them: LRU, docs/model.md §9.5)"),
    pool_path: Optional[str] = typer.Option(None, "--pool-path", help="tier cached KV is read over: ub (default, Table 1) or e.g. vpc for comparison"),
    ttft_slo: float = typer.Option(2000.0, "--ttft-slo", help="TTFT SLO in ms (paper: 2,000)"),
    tpot_slo: float = typer.Option(50.0, "--tpot-slo", help="TPOT SLO in ms (paper: 50)"),
    slo_stat: str = typer.Option("mean", "--slo-stat", help="the statistic of the requests' TTFT and TPOT the SLOs bound: mean, p50, p90 or p99"),
    ttft_stat: Optional[str] = typer.Option(None, "--ttft-stat", help="the TTFT's statistic alone (default: --slo-stat's)"),
    shapes: str = typer.Option("pd,colocated,afd", "--shapes", help="deployment shapes to consider: pd (prefill/decode disaggregated), colocated (chunked prefill), afd (PD with attention-FFN disaggregated decode); comma-separated"),
    kv_tier: Optional[str] = typer.Option(None, "--kv-tier", help="tier of the prefill-to-decode KV transfer, e.g. rdma (paper) or ub (default: the system's)"),
    top: int = typer.Option(5, "--top", help="runner-up deployments shown"),
    prefill: Optional[List[str]] = typer.Option(None, "--prefill", help="evaluate this deployment: prefill instances COUNTxDIES[:tp=T], e.g. 7x16"),
    decode: Optional[List[str]] = typer.Option(None, "--decode", help="... and decode instances COUNTxDIES[:tp=T], e.g. 1x64"),
    afd: Optional[List[str]] = typer.Option(None, "--afd", help="... or AFD decode instances COUNTxATTENTION+EXPERT, e.g. 1x224+96"),
    deployment: Optional[str] = typer.Option(None, "--deployment", help="evaluate the deployment of this YAML (prefill:, decode: or afd:)"),
    verify: bool = typer.Option(False, "--verify", help="also simulate the best (or given) deployment at its planned rate (cmperf simulate): closed form and simulation side by side, with p90/p99"),
    verify_prompts: int = typer.Option(4000, "--verify-prompts", help="requests each --verify simulation runs at least (more when its steady window needs them: 20 TTFT SLOs and 4 end-to-end latencies)"),
    hardware: str = HardwareOpt, model: Optional[str] = ModelOpt, sets: Optional[List[str]] = SetOpt, stack: Optional[str] = StackOpt,
    sweep: Optional[List[str]] = typer.Option(None, "--sweep", help="plan once per value of a spec field, e.g. system.tiers.ub.bandwidth_Bps=100e9,200e9"),
    fmt: str = FormatOpt,
    out: Optional[str] = typer.Option(None, "--out", help="also write every deployment evaluated (ranked) to this CSV file"),
    plot: Optional[str] = typer.Option(None, "--plot", help="write an image (png, pdf, svg, ...: by its suffix): TTFT/TPOT against the rate per shape, the P:D split, the TTFT breakdown (with --sweep or lists: goodput per value)"),
    export: Optional[str] = typer.Option(None, "--export", help="write the best deployment to this directory: deployment.yaml (read back by --deployment) and the launch commands of the stacks that run it (SGLang, vLLM, MindIE, Dynamo with SGLang or TensorRT-LLM; docs/export.md)"),
):
    """Plan a deployment: the P:D split, instance sizes, batch, requests/s within the SLOs and
    where the time goes (default: the paper's setting, 384 NPUs, 4K prompts, 256 outputs,
    TTFT <= 2 s, TPOT <= 50 ms). Example: cmperf plan --rate 300 --prefix-hit 0.5"""
    from ..plan.planner import plan, plan_sweep
    from ..report import check_format, check_parent_dir

    check_format(fmt)
    from ..plan.planner import MAX_NPUS
    from ..simulate.sustain import check_verify_prompts

    for flag, v in (("--npus", npus), ("--supernode", supernode)):
        if v is not None and not 1 <= v <= MAX_NPUS:
            raise ConfigError(f"{flag} {v}: expected 1 to {MAX_NPUS:,} NPUs")
    check_verify_prompts(verify_prompts)
    for path, flag in ((out, "--out"), (plot, "--plot")):
        if path is not None:
            if not path:
                raise ConfigError(f"{flag}: expected a file name (got an empty string)")
            check_parent_dir(path, flag)
    if plot:
        from ..plots import plot_format

        plot_format(plot)
    if export is not None and not export:
        raise ConfigError("--export: expected a directory name (got an empty string)")
    rates, hits = _list(rate, "--rate"), _list(prefix_hit, "--prefix-hit")
    _cap_plans(len(rates) * len(hits), {})
    variants = [({"rate": r, "prefix_hit": h} if len(rates) * len(hits) > 1 else {},
                 _workload(r, prompt_len, output_len, trace, h, ttft_slo, tpot_slo, ttft_stat, slo_stat))
                for r in rates for h in hits]
    workload = variants[0][1]
    if working_set is not None and not (math.isfinite(working_set) and 0 < working_set <= 1e18):
        raise ConfigError(f"--working-set-tokens {working_set:g}: expected a positive number of tokens, at most 1e18")
    if top < 0:
        raise ConfigError(f"--top {top}: expected 0 or more")
    sets = list(sets or [])
    from ..simulate.deployment import given as given_deployment

    given = given_deployment(deployment, prefill, decode, afd)
    if given is not None and (sweep or len(variants) > 1):
        raise ConfigError("--prefill/--decode (or --deployment) evaluate one deployment: not with --sweep or lists")
    if given is not None:
        _check_given(given, hardware, model, sets, stack, npus, supernode)
    if export is not None and (sweep or len(variants) > 1):
        raise ConfigError("--export writes one deployment: not with --sweep or lists of --rate / --prefix-hit")
    kwargs = dict(hardware=hardware, model=model, sets=sets, npus=npus, supernode=supernode,
                  shape_names=_shapes(shapes), kv_tier=kv_tier, pool_path=pool_path, working_set_tokens=working_set,
                  block_tokens=block_tokens, stack=stack, deployment=given)
    from ..report import provenance
    from .progress import ProgressBar

    prov = provenance("plan", hardware, model, sets, sweep or [], npus=npus, supernode=supernode, rate=rate,
                      prompt_len=None if trace else prompt_len, output_len=None if trace else output_len, trace=trace,
                      prefix_hit=prefix_hit, pool_path=pool_path, block_tokens=block_tokens, working_set_tokens=working_set, ttft_slo_ms=ttft_slo,
                      ttft_stat=workload.slo.ttft_stat, tpot_slo_ms=tpot_slo, tpot_stat=workload.slo.tpot_stat, shapes=shapes,
                      kv_tier=kv_tier)

    sweeps = {}
    if sweep:
        from ..predict import system_model
        from ..search import check_sweeps, parse_sweeps

        sweeps = parse_sweeps(sweep)
        _cap_plans(len(variants), sweeps)
        check_sweeps(sweeps, hardware, model or system_model(hardware), sets)
    progress = ProgressBar()
    try:
        if sweep or len(variants) > 1:
            kwargs.pop("deployment")
            result = plan_sweep(variants, sweeps, progress=progress, **kwargs)
        else:
            result = plan(workload, progress=progress, **kwargs)
    finally:
        progress.close()
    if sweep or len(variants) > 1:
        if plot and len(result):
            from ..plots import plan_sweep_figure

            plan_sweep_figure(result, [*sweeps, "prefix_hit", "rate"], workload.slo,
                              f"cmperf plan: the best deployment per value, {hardware}, {model}", plot)
        _render_sweep(result, fmt, out, prov)
        return
    from ..advice import slow_dtype_notes
    from ..report import note_line

    for note in slow_dtype_notes(result.specs) if result.specs is not None else []:
        note_line(note)
    from ..simulate.sustain import verify_plan

    verified = verify_plan(result, verify_prompts) if verify else None
    if export is not None and result.best is None:
        sys.stderr.write(f"cmperf: --export {export}: nothing written: no deployment meets the SLOs\n")
    if export is not None and result.best is not None:
        from ..export import context, from_plan, write, written_message

        written = write(export, from_plan(result.best), context(result.specs, result.workload.slo), prov)
        sys.stderr.write(written_message(export, written))
    _render(result, fmt, top, out, plot, prov, verified)


def _check_given(dep, hardware, model, sets, stack, npus, supernode) -> None:
    """A given deployment within ``--npus`` (which must be a budget even when the shapes are
    given) and the system, each group's inputs checked where the user wrote them."""
    from ..plan.planner import MAX_NPUS
    from ..predict import load_specs, system_model
    from ..report import note_line, warn
    from ..simulate.deployment import check

    specs = load_specs(hardware, model or system_model(hardware), sets, stack)
    for note in specs.notes:
        note_line(note)
    # without --npus the budget is the system (several supernodes are asked for with --npus)
    one = npus is None and supernode is None
    try:
        lines = check(dep, specs, npus if npus is not None else MAX_NPUS, "--npus" if npus is not None else "the planner's limit",
                      one_system=one)
    except ConfigError as e:
        more = "; give --npus to plan over several supernodes" if one and " NPUs; the system " in str(e) else ""
        raise ConfigError(f"{e}{more}") from None
    for line in lines:
        warn(line)


MAX_PLANS = 64  # plans one run makes (each takes seconds): the variants of --rate x --prefix-hit x --sweep


def _cap_plans(variants: int, sweeps: dict) -> None:
    """At most MAX_PLANS plans in one run, said before any is made."""
    total = variants * math.prod(len(v) for v in sweeps.values())
    if total > MAX_PLANS:
        what = [f"{variants:,} --rate x --prefix-hit variants"] if variants > 1 else []
        what += [f"{len(v):,} values of --sweep {short(k, 60)}" for k, v in sweeps.items()]
        raise ConfigError(f"{' x '.join(what)}: {total:,} plans; at most {MAX_PLANS} are made in one run "
                          f"(plan fewer values at a time)")


def _list(text: str, flag: str) -> list[str]:
    items = [t.strip() for t in str(text).split(",")]
    if any(not t for t in items):
        raise ConfigError(f"{flag} {str(text)[:40]}: empty item in the comma list")
    if len(items) > 64:
        raise ConfigError(f"{flag}: {len(items)} values; at most 64 are planned at once")
    return items


def _workload(rate, prompt_len, output_len, trace, prefix_hit, ttft_slo, tpot_slo, ttft_stat, slo_stat="mean"):
    """The workload the flags give; ``slo_stat`` the statistic both SLOs bound (``--slo-stat``),
    ``ttft_stat`` the TTFT's alone when given (``--ttft-stat``)."""
    from ..plan.workload import MAX_TOKENS, SLO, SLO_STATS, Workload, parse_lengths, read_trace

    from ..errors import parse_number

    arrival = None if rate == "max" else parse_number(rate, "--rate", words={"max": None})
    if arrival is not None and not arrival > 0:
        raise ConfigError(f"--rate {rate[:40]}: expected requests/s (a number > 0) or max")
    for flag, v in (("--ttft-slo", ttft_slo), ("--tpot-slo", tpot_slo)):
        if not (math.isfinite(v) and 0 < v <= MAX_SLO_MS):
            raise ConfigError(f"{flag} {v:g}: expected milliseconds > 0 and at most {MAX_SLO_MS:g}")
    for flag, stat in (("--slo-stat", slo_stat), ("--ttft-stat", ttft_stat)):
        if stat is not None and stat not in SLO_STATS:
            raise ConfigError(f"{flag} {short(str(stat), 40)}: expected one of {', '.join(SLO_STATS)}")
    ttft_stat = ttft_stat or slo_stat
    text = str(prefix_hit)
    hit_text, _, spread = text.partition(":")
    prefix_hit = parse_number(hit_text, "--prefix-hit")
    if not 0 <= prefix_hit < 1:
        raise ConfigError(f"--prefix-hit {prefix_hit:g}: expected a share in [0, 1)")
    concentration = 2.0
    if spread:
        concentration = float("inf") if spread.strip() == "inf" else parse_number(spread, "--prefix-hit")
        if not concentration > 0:
            raise ConfigError(f"--prefix-hit {short(text, 40)}: expected H or H:K, K > 0 the spread of the "
                              f"per-request share (Beta(K H, K (1 - H)); inf: every request H)")
    cached = arrivals = None
    if trace is not None:
        prompt, output, cached, arrivals = read_trace(trace, with_arrivals=True)
        if cached is not None and prefix_hit:
            raise ConfigError("--prefix-hit: the trace gives prefix_hit_tokens per request; give one or the other")
    else:
        prompt, output = parse_lengths(prompt_len, "--prompt-len"), parse_lengths(output_len, "--output-len")
    w = Workload(prompt=prompt, output=output, prefix_hit=prefix_hit, slo=SLO(ttft_slo / 1e3, tpot_slo / 1e3, ttft_stat, slo_stat),
                 arrival_rate_per_s=arrival, cached_samples=cached, hit_concentration=concentration, arrival_samples=arrivals)
    if not w.decode_kv_len <= MAX_TOKENS:  # E[P] + E[O] (1 + scv) / 2: the lengths' own bounds do not bound it
        given = f"--trace {trace}" if trace is not None else f"--prompt-len {prompt_len} --output-len {output_len}"
        raise ConfigError(f"{short(given, 120)}: a decode step attends {w.decode_kv_len:,.0f} tokens on average "
                          f"(prompt + output x (1 + scv) / 2); at most {MAX_TOKENS:g}")
    return w


def _shown(v: float) -> str:
    """Four significant digits, thousands separated, never an exponent below 1e15."""
    return f"{v:,.0f}" if abs(v) >= 1e4 else f"{v:,.4g}"


def _shapes(text: str) -> list[str]:
    return [s.strip() for s in text.split(",") if s.strip()]


def _render(result, fmt: str, top: int, out: Optional[str], plot: Optional[str], prov: dict, verified: dict | None = None) -> None:
    import pandas as pd

    from ..report import human, print_json, print_table, write_csv
    from ..plan.planner import public, summary

    table = result.table
    if out:
        from ..plan.planner import aggregated_vs_disaggregated

        write_csv(public(table), out, {**prov, **aggregated_vs_disaggregated(result)}, "--out")
    if plot and len(table):
        from ..plots import plan_figure

        plan_figure(result, plot)
    s = summary(result)
    if verified and verified["refined_by_simulation"] and s["best"] is not None:
        # the closed form could not say (heavy tails, stragglers): the plan is the simulation's, at its verified rate
        from ..plan.planner import describe

        row, rate = verified["row"], verified["planned_rate_rps"]
        s["best"] = {**row, "split": describe(row), "goodput_rps": rate, "goodput_rpm": rate * 60.0, "rate_rps": rate,
                     "binding": f"the rate simulation sustains (closed form: {verified['refined_by_simulation']['closed_form_rate_rps']:.4g} requests/s)"}
    runners = public(result.runners_up(top))
    ratio = s["aggregated_vs_disaggregated"]
    if fmt == "json":
        print_json({**s, "runners_up": runners.to_dict(orient="records"), "verify": verified, "provenance": prov})
    elif fmt == "csv":
        from ..report import print_csv

        print_csv(public(table.head(1 + top)), {**prov, **ratio})
    else:
        typer.echo(s["headline"])
        best = s["best"]
        if best is not None:
            rows = []
            for key, label, unit in BEST_ROWS:
                v = best.get(key)
                if v is None or (isinstance(v, float) and v == 0 and key in ("ttft_kv_transfer_ms",)):
                    continue
                rows.append((label, v if isinstance(v, str) else f"{_shown(v)} {unit}".strip()))
            print_table(pd.DataFrame(rows, columns=["quantity", "value"]), "best deployment")
            if len(runners):
                _print_runners(runners, float(best["goodput_rps"]))
            if ratio:
                print_table(pd.DataFrame(_ratio_rows(ratio), columns=["", "co-located (aggregated)", "PD (disaggregated)",
                                                                      "co-located / PD"]),
                            "aggregated vs disaggregated: the best deployment of each shape")
            if s["bring_up"]:
                up = pd.DataFrame(s["bring_up"])
                shown = pd.DataFrame({
                    "instance": up["instance"], "dies": up["dies"].map(lambda v: f"{v:g}"),
                    "model": up["model_bytes"].map(lambda v: human(v, "B")),
                    "weights/die": up["weights_per_die_bytes"].map(lambda v: human(v, "B")),
                    "adds": up["adds_rps"].map(lambda v: f"{v:,.1f} req/s"),
                    "from DRAM pool": up["from_pool_s"].map(lambda v: f"{v:,.1f} s"),
                    "from object storage": up["from_object_storage_s"].map(lambda v: f"{v:,.0f} s"),
                    "growth, pool": up["growth_rps_per_min_pool"].map(lambda v: f"{v:,.0f} req/s per min"),
                    "growth, OBS": up["growth_rps_per_min_object_storage"].map(lambda v: f"{v:,.1f} req/s per min")})
                print_table(shown, "bringing up one more instance (paper §4.4, Table 2), one at a time")
            if verified:
                c, v = verified["closed_form"], verified["simulated"]
                rows = [("TTFT (ms)", _shown(c["ttft_ms"]), _shown(v["mean_ttft_ms"]), _shown(v["median_ttft_ms"]),
                         _shown(v["p90_ttft_ms"]), _shown(v["p99_ttft_ms"])),
                        ("TPOT (ms)", _shown(c["tpot_ms"]), _shown(v["mean_tpot_ms"]), "", _shown(v["p90_tpot_ms"]),
                         _shown(v["p99_tpot_ms"])),
                        ("requests/s (within the SLOs)", _shown(c["goodput_rps"]), _shown(v["request_throughput_rps"]) + " (" +
                         _shown(v["goodput_rps"]) + ")", "", "", "")]
                print_table(pd.DataFrame(rows, columns=["", "closed form", "simulated mean", "median", "p90", "p99"]),
                            f"--verify: {verified['deployment']} simulated at {verified['rate_rps']:.4g} requests/s "
                            f"({verified['requests']:,} requests, Poisson; first 10 % left out)")
                if verified["refined_by_simulation"]:
                    ref = verified["refined_by_simulation"]
                    typer.echo(f"--verify: the closed form's {ref['closed_form_rate_rps']:.4g} requests/s on "
                               f"{ref['closed_form_deployment']} is more than {ref['tolerance']:.0%} from what simulation sustains; "
                               f"its top candidates ranked by simulation: " + "; ".join(
                                   f"{c['deployment']}: {c['closed_form_rate_rps']:.4g} planned, {c['simulated_rate_rps']:.4g} simulated"
                                   for c in ref["candidates"]))
                typer.echo(f"--verify: planned rate {verified['planned_rate_rps']:.4g} requests/s; the largest rate the "
                           f"simulation sustains within the SLOs (steady window, bisection) {verified['sustained_rate_rps']:.4g} "
                           f"requests/s (planned / sustained {verified['planned_over_sustained']:.3f}; SLOs "
                           f"{'met' if verified['meets_slos_at_planned'] else 'missed'} at the planned rate)")
            if s["context_cache"]:
                cc = s["context_cache"]
                print_table(pd.DataFrame([(k, human(v) if isinstance(v, float) else str(v)) for k, v in cc.items()],
                                         columns=["quantity", "value"]), "context cache (HBM, then the pool)")
    if result.message:
        sys.stderr.write(f"cmperf: {result.message}\n")
        raise typer.Exit(1)


# the runners-up table's columns in words, units after a comma
RUNNER_HEADERS = {"rank": "rank", "shape": "shape", "prefill_instances": "prefill instances",
                  "prefill_dies": "dies per prefill instance", "prefill_tp": "prefill attention TP",
                  "prefill_tokens_per_npu": "prompt tokens per NPU per pass", "decode_instances": "decode instances",
                  "decode_dies": "dies per decode instance", "decode_tp": "decode TP",
                  "attention_dies": "attention dies (AFD)", "decode_batch_per_npu": "decode batch per NPU",
                  "npus": "NPUs", "goodput_rps": "goodput, requests/s", "vs_best": "goodput against the best",
                  "binding": "what limits it", "ttft_ms": "TTFT, ms", "tpot_ms": "TPOT, ms",
                  "output_tokens_per_s_per_npu": "output tokens/s per NPU"}
COUNTS = ("rank", "prefill_instances", "prefill_dies", "prefill_tp", "decode_instances", "decode_dies", "decode_tp",
          "attention_dies", "npus", "prefill_tokens_per_npu")


def _print_runners(runners, best_rps: float) -> None:
    """The runners-up in words, each goodput against the best's, a tie said as a tie."""
    from ..report import print_table, versus

    shown = runners[[c for c in SHOWN if c in runners.columns]].copy()
    for c in COUNTS:
        if c in shown:
            shown[c] = shown[c].round().astype(int)
    if "attention_dies" in shown:  # AFD's own column
        shown["attention_dies"] = [int(a) if sh == "afd" else "-" for a, sh in zip(shown["attention_dies"], shown["shape"])]
    shown.insert(list(shown.columns).index("goodput_rps") + 1, "vs_best", [versus(v, best_rps) for v in shown["goodput_rps"]])
    print_table(shown.round(2).rename(columns=RUNNER_HEADERS), "runners-up (best of each shape and size)")
    tied = [f"#{int(r.rank)} {r.shape}" for r in shown.itertuples() if r.vs_best == "tie"]
    if tied:
        typer.echo(f"{', '.join(tied)} tie{'s' if len(tied) == 1 else ''} with the best at {_shown(best_rps)} requests/s: "
                   f"the same goodput, a different deployment (both bound by {runners['binding'].iat[0]})"
                   if len(set(runners.loc[shown['vs_best'] == 'tie', 'binding'])) == 1 else
                   f"{', '.join(tied)} tie with the best at {_shown(best_rps)} requests/s")


def _ratio_rows(r: dict) -> list[tuple]:
    x = lambda v: "-" if v is None else f"{v:.3g}"  # noqa: E731
    return [("deployment", r["colocated_deployment"], r["pd_deployment"], ""),
            ("goodput, requests/s", _shown(r["colocated_goodput_rps"]), _shown(r["pd_goodput_rps"]), x(r["colocated_vs_pd_goodput"])),
            ("goodput per NPU, requests/s", _shown(r["colocated_goodput_rps_per_npu"]), _shown(r["pd_goodput_rps_per_npu"]),
             x(r["colocated_vs_pd_goodput_per_npu"]))]


def _render_sweep(result, fmt: str, out: Optional[str], prov: dict) -> None:
    from ..report import print_frame

    print_frame(result.round(6) if fmt == "table" else result, fmt, "best deployment per swept value", out, prov)
    if (result["goodput_rps"] <= 0).all():
        sys.stderr.write("cmperf: no swept value gives a deployment that meets the SLOs\n")
        raise typer.Exit(1)
