"""Search report figure (README.md, "Search"): Pareto frontier, roofline of one configuration's
operators, and its per-operator time. matplotlib is an optional extra
(``pip install 'cmperf[plot]'``), imported here only, lazily, with the Agg backend."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from .errors import ConfigError
from .report import human, unit_of, write_atomic

BOUND_COLORS = {"compute": "#d62728", "vector": "#9467bd", "memory": "#1f77b4", "network": "#2ca02c",
                "latency": "#7f7f7f", "other": "#e0e0e0"}
MAX_SCATTER = 50_000  # background points drawn; the frontier and the best are always drawn


def _pyplot():
    try:
        import matplotlib
    except ImportError:
        raise ConfigError("--plot needs matplotlib, an optional extra: pip install 'cmperf[plot]'") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def roofs(specs, row: pd.Series, sweeps, dtypes) -> tuple[dict[str, float], float]:
    """Compute roof per dtype (FLOP/s per die) and HBM bandwidth (B/s per die) of the plotted
    configuration, read through the same spec view as the cost model (so sweeps apply)."""
    hw, _ = specs.views({k: float(row[k]) for k in sweeps})
    die = hw.chip.die
    return {d: float(getattr(die.peak_flops_per_s, d)) for d in dtypes}, float(die.hbm_bandwidth_Bps)


def search_figure(result, ops: pd.DataFrame, specs, path: str | Path, label: str = "") -> None:
    """Write the three-panel PNG for a :class:`cmperf.search.SearchResult` and the operator
    breakdown ``ops`` of its best configuration; whole or not at all."""
    plt = _pyplot()
    from matplotlib.gridspec import GridSpec

    row = result.featured
    m = specs.model
    dtypes = list(dict.fromkeys([m.precision.matmul, m.precision.attention]))
    peaks, hbm_Bps = roofs(specs, row, result.sweeps, dtypes)

    fig = plt.figure(figsize=(15, 11), dpi=110)
    gs = GridSpec(2, 2, figure=fig, height_ratios=[1, 1.15], hspace=0.42, wspace=0.45)
    _pareto_panel(fig.add_subplot(gs[0, :]), result, row)
    roof_ax = fig.add_subplot(gs[1, 0])
    _roofline_panel(roof_ax, ops, peaks, hbm_Bps)
    _breakdown_panel(fig.add_subplot(gs[1, 1]), ops, "iteration" if result.phase == "decode" else "forward pass")
    fig.suptitle(f"cmperf search {result.phase}: {label}".rstrip(": "), fontsize=13, x=0.01, ha="left")
    which = "best configuration" if result.best is not None else "fastest configuration that fits (none meets the SLO)"
    fig.text(0.01, roof_ax.get_position().y1 + 0.04, f"Below, the {which}: {_describe(result.phase, row, result.sweeps)}",
             fontsize=10.5, ha="left", weight="bold")
    try:
        write_atomic(path, lambda tmp: fig.savefig(tmp, format="png", bbox_inches="tight"))
    finally:
        plt.close(fig)


def _describe(phase: str, row: pd.Series, sweeps) -> str:
    lat = "tpot_ms" if phase == "decode" else "ttft_ms"
    if phase == "decode":
        what = (f"batch {row['batch']:g}/NPU, {row['dies']:g} dies, EP{row['ep']:g}, "
                f"{int(row['microbatches_used'])} microbatch(es), MTP {'k=' + format(row['mtp_k'], 'g') if row['mtp'] else 'off'}")
    else:
        what = (f"{row['tokens_per_npu']:g} tokens/NPU, prompt {row['prompt_len']:g}, {row['dies']:g} dies, "
                f"EP{row['ep']:g}, attention TP{row['attn_tp']:g}, {int(row['microbatches_used'])} microbatch(es)")
    swept = "".join(f", {'.'.join(k.split('.')[-2:])} = {human(row[k], unit_of(k))}" for k in sweeps)
    return f"{what}{swept} ({lat.split('_')[0].upper()} {row[lat]:.2f} ms, {row['throughput_per_npu']:,.0f} tok/s/NPU)"


def _pareto_panel(ax, result, best: pd.Series) -> None:
    lat = result.latency
    t = result.table
    fits = t[t["fits"]]
    if len(fits) > MAX_SCATTER:  # an even subsample keeps the cloud's shape and the file small
        fits = fits.iloc[np.linspace(0, len(fits) - 1, MAX_SCATTER).astype(int)]
    ax.scatter(fits[lat], fits["throughput_per_npu"], s=6, c="#c7c7c7", lw=0, rasterized=True,
               label=f"fits in memory ({int(t['fits'].sum()):,} configurations)")
    ok = fits[fits["meets_slo"]]
    ax.scatter(ok[lat], ok["throughput_per_npu"], s=6, c="#9ecae1", lw=0, rasterized=True,
               label=f"meets the SLO ({int(t['meets_slo'].sum()):,})")
    p = result.pareto
    ax.plot(p[lat], p["throughput_per_npu"], "-o", c="#08519c", ms=3, lw=1.6, label=f"Pareto frontier ({len(p)} points)")
    ax.axvline(result.slo_ms, c="#d62728", ls="--", lw=1.3, label=f"SLO {result.slo_ms:g} ms")
    if result.best is not None:
        ax.plot([best[lat]], [best["throughput_per_npu"]], "*", c="#ff7f0e", ms=16, mec="k", mew=0.6,
                label=f"best: {best['throughput_per_npu']:,.0f} tok/s/NPU at {best[lat]:.1f} ms", zorder=5)
    name = "TPOT" if lat == "tpot_ms" else "TTFT"
    ax.set_xlabel(f"{name} (ms)")
    ax.set_ylabel("throughput per NPU (tokens/s)")
    ax.set_title(f"Throughput per NPU vs {name}", loc="left")
    ax.grid(alpha=0.3)
    ax.set_xlim(left=0)
    ax.set_ylim(bottom=0)
    if lat == "tpot_ms":  # tokens/s per user = 1000 / TPOT, on the top axis
        inv = lambda x: 1000.0 / np.maximum(np.asarray(x, dtype=float), 1e-3)
        top = ax.secondary_xaxis("top", functions=(inv, inv))
        top.set_xlabel("tokens/s per user (= 1000 / TPOT)")
        lo = max(float(fits[lat].min()) if len(fits) else 1.0, 1.0)
        ticks = [v for v in (200, 100, 75, 50, 40, 30, 25, 20, 15, 12, 10, 8, 6, 5, 4, 3, 2, 1) if 1000 / v >= lo * 0.95]
        top.set_xticks(ticks)
    ax.legend(loc="lower right", fontsize=9, framealpha=0.9, markerscale=1.5)


def _roofline_panel(ax, ops: pd.DataFrame, peaks: dict[str, float], hbm_Bps: float) -> None:
    cube = ops[(ops["flops"] > 0) & (ops["hbm_bytes"] > 0) & (ops["time_us"] > 0)]
    # one point per operator over the whole iteration: FLOPs, bytes and time summed over its calls
    cube = cube.assign(flops=cube["flops"] * cube["calls"], hbm_bytes=cube["hbm_bytes"] * cube["calls"],
                       time_s=cube["total_ms"] * 1e-3)
    per_op = cube.groupby("op", sort=False).agg(flops=("flops", "sum"), hbm_bytes=("hbm_bytes", "sum"),
                                                time_s=("time_s", "sum"), bound=("bound", "first"))
    ai = per_op["flops"] / per_op["hbm_bytes"]
    achieved = per_op["flops"] / per_op["time_s"]
    ridge = max(peaks.values()) / hbm_Bps
    lo = min(float(ai.min()) if len(ai) else 1.0, ridge) / 20
    # leave the right third of the chart for the column of operator names
    right = max(float(ai.max()) if len(ai) else 1.0, ridge) * 1.5
    hi = 10 ** (np.log10(lo) + (np.log10(right) - np.log10(lo)) / 0.66)
    x = np.geomspace(lo, hi, 200)
    for i, (d, peak) in enumerate(sorted(peaks.items(), key=lambda kv: -kv[1])):
        style = "-" if i == 0 else ":"
        ax.plot(x, np.minimum(peak, hbm_Bps * x), style, c="k", lw=1.4 if i == 0 else 1.1,
                label=f"{d.upper()} roof {peak / 1e12:.0f} TFLOP/s (ridge {peak / hbm_Bps:.0f} FLOP/B)")
    ax.scatter(ai, achieved, s=55, c=[BOUND_COLORS.get(b, "k") for b in per_op["bound"]], edgecolors="k", lw=0.5, zorder=4)
    for name, a, f, y in zip(per_op.index, ai, achieved, _spread(np.log10(achieved.to_numpy()), 0.16)):
        ax.annotate(name, (a, f), xytext=(0.72, 10 ** y), textcoords=("axes fraction", "data"), fontsize=8.5,
                    va="center", bbox={"fc": "white", "ec": "none", "alpha": 0.8, "pad": 0.3},
                    arrowprops={"arrowstyle": "-", "lw": 0.5, "color": "0.55"})
    for b in dict.fromkeys(per_op["bound"]):
        ax.scatter([], [], s=40, c=BOUND_COLORS.get(b, "k"), edgecolors="k", lw=0.5, label=f"{b}-bound")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    ax.set_ylim(float(achieved.min()) / 5 if len(achieved) else max(peaks.values()) / 1e3, max(peaks.values()) * 20)
    # the HBM label sits above the slope (no operator can be there), along it
    at = 10 ** ((2 * np.log10(lo) + 3 * np.log10(ridge)) / 5)
    (x0, y0), (x1, y1) = ax.transData.transform([(at, hbm_Bps * at), (at * 2, hbm_Bps * at * 2)])
    ax.annotate(f"HBM {hbm_Bps / 1e12:.2g} TB/s", (at, hbm_Bps * at), xytext=(-4, 4), textcoords="offset points",
                rotation=np.degrees(np.arctan2(y1 - y0, x1 - x0)), rotation_mode="anchor", ha="center", va="bottom",
                fontsize=9)
    ax.set_xlabel("arithmetic intensity (FLOP per HBM byte)")
    ax.set_ylabel("achieved FLOP/s per die")
    ax.set_title("Roofline of the operators (one die; each summed over its calls)", loc="left")
    ax.grid(alpha=0.3, which="both")
    ax.legend(loc="upper left", fontsize=8, framealpha=0.9)


def _spread(y: np.ndarray, gap: float) -> np.ndarray:
    """Label heights near ``y`` (log10 units) at least ``gap`` apart, in the same order."""
    order = np.argsort(y)
    out = y[order].astype(float).copy()
    for i in range(1, len(out)):  # a loop over the dozen labels of one chart
        out[i] = max(out[i], out[i - 1] + gap)
    out -= (out - y[order]).mean() / 2  # re-centre the pushed-up stack on the points
    res = np.empty_like(out)
    res[order] = out
    return res


def _breakdown_panel(ax, ops: pd.DataFrame, step: str) -> None:
    per = ops.assign(label=ops["section"] + " / " + ops["op"]).groupby("label", sort=False).agg(
        total_ms=("total_ms", "sum"), bound=("bound", "first"))
    per = per.sort_values("total_ms")
    total = float(per["total_ms"].sum())
    if len(per) > 16:  # keep the longest; fold the rest into one bar
        rest = per.iloc[:-15]
        per = pd.concat([pd.DataFrame({"total_ms": [rest["total_ms"].sum()], "bound": ["other"]},
                                      index=[f"{len(rest)} other operators"]), per.iloc[-15:]])
    y = np.arange(len(per))
    ax.barh(y, per["total_ms"], color=[BOUND_COLORS.get(b, "k") for b in per["bound"]], edgecolor="k", lw=0.4)
    ax.set_yticks(y, per.index, fontsize=8.5)
    for yi, v in zip(y, per["total_ms"]):
        ax.text(v, yi, f" {v:.2f} ms ({100 * v / total:.0f} %)", va="center", fontsize=8)
    ax.set_xlim(0, float(per["total_ms"].max()) * 1.3)
    ax.set_xlabel(f"time per {step} (ms, summed over calls; streams that overlap are both counted)")
    ax.set_title("Per-operator time (colour = bounding term)", loc="left")
    ax.grid(alpha=0.3, axis="x")
    from matplotlib.patches import Patch

    handles = [Patch(facecolor=BOUND_COLORS.get(b, "k"), edgecolor="k", lw=0.4, label=f"{b}-bound" if b != "other" else b)
               for b in dict.fromkeys(per["bound"][::-1])]
    ax.legend(handles=handles, loc="lower right", fontsize=8.5, framealpha=0.9)


def available() -> bool:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


__all__: list[Any] = ["search_figure", "available"]


def plan_figure(result, path: str | Path) -> None:
    """Write the ``cmperf plan`` PNG: TTFT and TPOT against the arrival rate for the best
    deployment of each shape (with the SLOs), the P:D split of the best deployments and where
    their TTFT goes. Whole or not at all."""
    from .plan.planner import curves, describe

    plt = _pyplot()
    w = result.workload
    table = result.table
    lead = pd.concat([table.head(1), result.runners_up(5)]).drop_duplicates("rank").head(6)
    per_shape = table.drop_duplicates("shape")
    fig, axes = plt.subplots(2, 2, figsize=(14, 9.5), dpi=110)
    top_rate = float(max(table["goodput_rps"].max(), w.arrival_rate_per_s or 0.0, 1e-3)) * 1.5
    rates = np.linspace(0.0, top_rate, 200)
    ax_t, ax_p = axes[0]
    for _, row in per_shape.iterrows():
        c = curves(result, row, rates)
        label = f"{row['shape']}: {describe(row)}"
        ax_t.plot(rates, np.where(np.isfinite(c["ttft_s"]), c["ttft_s"] * 1e3, np.nan), label=label)
        ax_p.plot(rates, np.where(np.isfinite(c["tpot_s"]), c["tpot_s"] * 1e3, np.nan), label=label)
    for ax, slo, name in ((ax_t, w.slo.ttft_s, f"TTFT ({w.slo.ttft_stat})"), (ax_p, w.slo.tpot_s, "TPOT")):
        ax.axhline(slo * 1e3, color="k", ls="--", lw=1, label=f"SLO {slo * 1e3:g} ms")
        if w.arrival_rate_per_s:
            ax.axvline(w.arrival_rate_per_s, color="grey", ls=":", lw=1, label="arrival rate")
        ax.set_xlabel("arrival rate (requests/s)")
        ax.set_ylabel(f"{name} (ms)")
        ax.set_ylim(0, slo * 1e3 * 2.5)
        ax.legend(fontsize=7.5, loc="upper left")
    ax_t.set_title("TTFT against the arrival rate (best deployment of each shape)", fontsize=10)
    ax_p.set_title("TPOT against the arrival rate", fontsize=10)
    ax_s, ax_b = axes[1]
    labels = [f"#{int(r['rank'])} {r['goodput_rps']:.0f} req/s" for _, r in lead.iterrows()]
    y = np.arange(len(lead))
    pre, dec = lead["prefill_npus"].to_numpy(float), lead["decode_npus"].to_numpy(float)
    ax_s.barh(y, pre, color="#1f77b4", label="prefill NPUs")
    ax_s.barh(y, dec, left=pre, color="#ff7f0e", label="decode (or co-located) NPUs")
    ax_s.set_yticks(y, labels, fontsize=8)
    ax_s.invert_yaxis()
    ax_s.set_xlabel("NPUs")
    ax_s.set_title("P:D split of the best deployments", fontsize=10)
    ax_s.legend(fontsize=8)
    left = np.zeros(len(lead))
    for col, color, name in (("ttft_queue_ms", "#d62728", "queue"), ("ttft_align_ms", "#9467bd", "pass alignment"),
                             ("ttft_prefill_ms", "#1f77b4", "prefill pass"), ("ttft_kv_transfer_ms", "#2ca02c", "KV transfer")):
        v = lead[col].to_numpy(float)
        v = np.where(np.isfinite(v), v, 0.0)
        ax_b.barh(y, v, left=left, color=color, label=name)
        left += v
    ax_b.axvline(w.slo.ttft_s * 1e3, color="k", ls="--", lw=1)
    ax_b.set_yticks(y, labels, fontsize=8)
    ax_b.invert_yaxis()
    ax_b.set_xlabel(f"TTFT at the plan's rate (ms; TPOT shown in the table)")
    ax_b.set_title("where the TTFT goes", fontsize=10)
    ax_b.legend(fontsize=8)
    st = result.settings
    fig.suptitle(f"cmperf plan: {st['npus']} NPUs of {st['hardware']}, {st['model']}", fontsize=12, x=0.01, ha="left")
    fig.tight_layout()
    write_atomic(path, lambda tmp: fig.savefig(tmp, format="png"))
    plt.close(fig)
