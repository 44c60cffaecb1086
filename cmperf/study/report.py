"""The study's HTML report: one self-contained page (figures as base64 PNGs inlined, no link out)
with the answers table."""

from __future__ import annotations

import base64
import html
import io

import numpy as np


def _png(fig) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    return base64.b64encode(buf.getvalue()).decode("ascii")


def figures(df) -> list[tuple[str, str]]:
    """(caption, base64 PNG) of the study's pictures: goodput per question, and TTFT against
    TPOT of each best deployment with the SLOs."""
    from ..plots import _pyplot

    plt = _pyplot()
    ok = df[df["error"] == ""] if "error" in df else df
    out = []
    if len(ok):
        fig, ax = plt.subplots(figsize=(max(6.0, 0.35 * len(ok)), 3.6))
        labels = [f"#{r.question} {r.hardware}\n{r.model}, {r.npus_budget} NPUs" if len(ok) <= 24 else str(r.question)
                  for r in ok.itertuples()]
        colours = {s: c for s, c in zip(sorted(ok["shape"].astype(str).unique()), ("tab:blue", "tab:orange", "tab:green"))}
        ax.bar(np.arange(len(ok)), ok["goodput_rps"].astype(float), color=[colours[str(s)] for s in ok["shape"]])
        ax.set_xticks(np.arange(len(ok)), labels, fontsize=7, rotation=90 if len(ok) > 8 else 0)
        ax.set_ylabel("goodput, requests/s")
        ax.set_title("best deployment of each question (colour: shape)")
        for s, c in colours.items():
            ax.bar([], [], color=c, label=s)
        ax.legend(fontsize=8)
        out.append(("Goodput of the best deployment of each question (requests per second within the SLOs).", _png(fig)))
        plt.close(fig)
        fig, ax = plt.subplots(figsize=(5.5, 4.0))
        ax.scatter(ok["tpot_ms"].astype(float), ok["ttft_ms"].astype(float), c="tab:blue", s=18, label="planned")
        if "simulated_mean_tpot_ms" in ok:
            ax.scatter(ok["simulated_mean_tpot_ms"].astype(float), ok["simulated_mean_ttft_ms"].astype(float), c="tab:red",
                       marker="x", s=18, label="simulated (mean)")
        ax.axvline(float(ok["tpot_slo_ms"].max()), color="grey", ls="--", lw=0.8)
        ax.axhline(float(ok["ttft_slo_ms"].max()), color="grey", ls="--", lw=0.8)
        ax.set_xlabel("TPOT, ms")
        ax.set_ylabel("TTFT, ms")
        ax.set_title("latency at the planned rate (dashed: the largest SLOs)")
        ax.legend(fontsize=8)
        out.append(("TTFT against TPOT of each question's best deployment at its planned rate.", _png(fig)))
        plt.close(fig)
    return out


def html_report(df, title: str, provenance: dict) -> str:
    """The report page."""
    figs = "".join(f'<figure><img alt="{html.escape(c)}" src="data:image/png;base64,{b}"><figcaption>{html.escape(c)}'
                   f"</figcaption></figure>" for c, b in figures(df))
    answered = int((df["error"] == "").sum()) if "error" in df else len(df)
    table = df.to_html(index=False, na_rep="-", float_format=lambda v: f"{v:,.4g}", border=0, classes="answers")
    prov = "".join(f"<li><b>{html.escape(str(k))}</b>: {html.escape(str(v))}</li>" for k, v in provenance.items())
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>
body {{ font-family: sans-serif; margin: 2em; color: #222; background: #fff; }}
h1 {{ font-size: 1.5em; }}
figure {{ display: inline-block; margin: 0 1em 1em 0; }}
figcaption {{ font-size: 0.85em; color: #555; max-width: 40em; }}
table.answers {{ border-collapse: collapse; font-size: 0.8em; }}
table.answers th, table.answers td {{ border-bottom: 1px solid #ddd; padding: 0.2em 0.5em; text-align: right; }}
table.answers th {{ background: #f0f0f0; }}
table.answers td {{ white-space: nowrap; }}
</style></head><body>
<h1>{html.escape(title)}</h1>
<p>{len(df):,} questions, {answered:,} answered (a deployment meets the SLOs); cmperf study.</p>
{figs}
<h2>Answers</h2>
{table}
<h2>Provenance</h2><ul>{prov}</ul>
</body></html>
"""
