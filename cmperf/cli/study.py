"""``cmperf study FILE``: many questions (hardware x models x workloads x SLOs x stacks x what-ifs)
planned, optionally simulated, on a local process pool or a Dask cluster; one table of answers
(CSV or Parquet) and a self-contained HTML report (cmperf/study, docs/study.md)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

import typer

from ..errors import ConfigError
from ..study import MAX_QUESTIONS
from .options import FormatOpt

PROGRESS_EVERY_S = 60.0  # off a terminal, a long study says how far it is once a minute

SHOWN = {"question": "#", "hardware": "hardware", "model": "model", "npus_budget": "NPU budget", "lengths": "prompt / output",
         "what_if": "what-if (--set)", "shape": "shape", "split": "best deployment", "goodput_rps": "goodput, requests/s",
         "ttft_ms": "TTFT, ms", "tpot_ms": "TPOT, ms", "error": "why none"}


def study_cmd(
    file: str = typer.Argument(..., help="the study YAML (examples/study.yaml)"),
    out: Optional[str] = typer.Option(None, "--out", help="write every answer to this file: .csv, or .parquet (needs pyarrow: pip install 'cmperf[parquet]')"),
    html: Optional[str] = typer.Option(None, "--html", help="write a self-contained HTML report (figures inlined) to this file"),
    executor: str = typer.Option("local", "--executor", help="local (a process pool on this machine), serial (this process) or dask (a Dask cluster at --address)"),
    workers: Optional[int] = typer.Option(None, "--workers", help="processes of the local pool (default: the cores)"),
    address: Optional[str] = typer.Option(None, "--address", help="the Dask scheduler, e.g. tcp://10.0.0.1:8786 (with --executor dask)"),
    max_questions: int = typer.Option(MAX_QUESTIONS, "--max-questions", help="refuse a grid of more questions than this (at most 1,000,000): a big grid runs for hours"),
    fmt: str = FormatOpt,
):
    """Answer a study: every combination of the file's hardware, models, workloads, SLOs, stacks
    and what-ifs, planned (and simulated if it asks). Example: cmperf study examples/study.yaml
    --out answers.csv --html report.html"""
    from .. import study
    from ..report import check_format, check_parent_dir, print_csv, print_json, print_table, provenance, write_atomic, write_csv
    from ..report import marked_html, write_parquet
    from .progress import ProgressBar

    check_format(fmt)
    for path, flag in ((out, "--out"), (html, "--html")):
        if path is not None:
            check_parent_dir(path, flag)
    if out is not None and Path(out).suffix.lower() not in (".csv", ".parquet"):
        raise ConfigError(f"--out {out}: expected a .csv or .parquet file name")
    if out is not None and out.lower().endswith(".parquet"):
        try:
            import pyarrow  # noqa: F401
        except ImportError:
            raise ConfigError("--out *.parquet needs pyarrow, an optional extra: pip install 'cmperf[parquet]'") from None
    if html is not None:
        from ..plots import _pyplot

        _pyplot()
    s = study.load(file, max_questions)
    prov = provenance("study", None, None, file=str(Path(file).resolve()), questions=len(s.questions), executor=executor)
    bar = ProgressBar("answering questions", every_s=PROGRESS_EVERY_S)
    try:
        df = study.run(s, executor, workers, address, bar)
    finally:
        bar.close()
    if out is not None:
        if out.lower().endswith(".parquet"):
            write_atomic(out, lambda tmp: write_parquet(df, tmp), "--out")
        else:
            write_csv(df, out, prov, "--out")
    if html is not None:
        from ..study.report import html_report

        text = html_report(df, s.title, prov)
        write_atomic(html, lambda tmp: Path(tmp).write_text(marked_html(text), encoding="utf-8"), "--html")
    answered = int((df["error"] == "").sum())
    if fmt == "json":
        from ..report import json_records

        print_json({"rows": json_records(df.to_dict(orient="records")), "provenance": prov})
    elif fmt == "csv":
        print_csv(df, prov)
    else:
        typer.echo(f"study {s.title}: {len(df):,} questions, {answered:,} answered")
        shown = df.assign(lengths=df["prompt_len"] + " / " + df["output_len"],
                          error=df["error"].map(lambda e: e if len(e) <= 80 else e[:77] + "..."))
        for c in ("goodput_rps", "ttft_ms", "tpot_ms"):
            shown[c] = shown[c].map(lambda v: "-" if v is None or v != v else f"{v:,.1f}")
        cols = [c for c in SHOWN if c in shown.columns and (c != "error" or answered < len(df))]
        shown = shown[cols].rename(columns=SHOWN)
        print_table(shown, "answers: the best deployment of each question (--out has every column)")
    written = [p for p in (out, html) if p]
    if written:
        sys.stderr.write(f"cmperf: wrote {', '.join(written)}\n")
