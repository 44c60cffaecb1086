"""Search report figure (README.md, "Search"): Pareto frontier, roofline of one configuration's
operators, and its per-operator time. matplotlib is an optional extra
(``pip install 'cmperf[plot]'``), imported here only, lazily, with the Agg backend."""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from .errors import ConfigError
from .report import human, unit_of, write_atomic

BOUND_COLORS = {"compute": "#d62728", "compute+vector": "#ff9896", "vector": "#9467bd", "memory": "#1f77b4", "network": "#2ca02c",
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


def plot_format(path, flag: str = "--plot") -> str:
    """The image format a plot's file name asks for: its suffix, one of the formats matplotlib
    writes (png, pdf, svg, jpg, ...); a name without one of them is refused, naming them."""
    _pyplot()
    from matplotlib.backend_bases import FigureCanvasBase

    formats = sorted(FigureCanvasBase.get_supported_filetypes())
    suffix = Path(str(path)).suffix.lower().lstrip(".")
    if suffix not in formats:
        from .errors import short

        found = f"suffix '.{short(suffix, 20)}'" if suffix else "no suffix"
        raise ConfigError(f"{flag} {short(str(path))}: {found}; name the image format by the file's suffix: "
                          f"{', '.join('.' + f for f in formats)}")
    return suffix


# Where each image format keeps cmperf's mark (report.MARK): its metadata, or Pillow's comment or
# description; raw, rgba, pgf and svgz keep none (docs/export.md: cmperf replaces one only with --force).
MARKED_BY_METADATA = ("png", "pdf", "svg", "ps", "eps")
MARKED_BY_PIL = {"jpg": "comment", "jpeg": "comment", "gif": "comment", "tif": "description", "tiff": "description",
                 "webp": "xmp", "avif": "xmp"}


def _marked(fmt: str) -> dict:
    """savefig's arguments that put cmperf's mark in an image of format ``fmt``."""
    from .report import mark

    if fmt in MARKED_BY_METADATA:
        return {"metadata": {"Creator": mark()}}
    if fmt in MARKED_BY_PIL:
        key = MARKED_BY_PIL[fmt]
        return {"pil_kwargs": {key: mark().encode() if key == "xmp" else mark()}}
    return {}


def _save(fig, path, flag: str = "--plot", **kwargs) -> None:
    """``fig`` written whole to ``path`` in the format its suffix names, with cmperf's mark."""
    fmt = plot_format(path, flag)  # a bad name: nothing left
    write_atomic(path, lambda tmp: fig.savefig(tmp, format=fmt, **_marked(fmt), **kwargs), flag)


@dataclass(frozen=True)
class Roof:
    """One roof of the roofline: ``min(flops_per_s, hbm_Bps x intensity)`` on one die. A peak
    roof is the datasheet's; an achievable one is the peak times the chip's efficiency for that
    work (``compute_efficiency``: the dtype's GEMM or attention efficiency) over the HBM
    bandwidth times ``memory_bandwidth`` (``memory_efficiency``), the rates the cost model runs at."""

    label: str
    dtype: str
    flops_per_s: float
    hbm_Bps: float
    compute_efficiency: float = 1.0
    memory_efficiency: float = 1.0

    @property
    def achievable(self) -> bool:
        return (self.compute_efficiency, self.memory_efficiency) != (1.0, 1.0)

    @property
    def ridge(self) -> float:
        return self.flops_per_s / self.hbm_Bps

    def at(self, intensity):
        return np.minimum(self.flops_per_s, self.hbm_Bps * np.asarray(intensity, dtype=float))


def roofs(specs, row: pd.Series, sweeps) -> list[Roof]:
    """The roofs of the plotted configuration, read through the same spec view as the cost
    model (so sweeps apply): the peak of the model's matmul and attention dtypes, then the
    achievable roof of the matmuls (peak x the dtype's GEMM efficiency, ``matmul_by_dtype``
    where it names one, else ``matmul_compute``) and of attention (peak x ``attention_compute``),
    both under the HBM bandwidth x ``memory_bandwidth``."""
    from .cost.roofline import matmul_dtype

    hw, _ = specs.views({k: float(row[k]) for k in sweeps})
    die, eff = hw.chip.die, hw.chip.efficiency
    mm, attn = specs.model.precision.matmul, specs.model.precision.attention
    peak = lambda d: float(getattr(die.peak_flops_per_s, d))
    hbm, mem = float(die.hbm_bandwidth_Bps), float(eff.memory_bandwidth)
    out = [Roof(f"{d.upper()} peak", d, peak(d), hbm) for d in dict.fromkeys([mm, attn])]
    for what, d, e in (("matmul", mm, float(matmul_dtype(hw, mm)[0])), ("attention", attn, float(eff.attention_compute))):
        out.append(Roof(f"{d.upper()} {what} achievable", d, peak(d) * e, hbm * mem, e, mem))
    return out


def search_figure(result, ops: pd.DataFrame, specs, path: str | Path, label: str = "") -> None:
    """Write the three-panel PNG for a :class:`cmperf.search.SearchResult` and the operator
    breakdown ``ops`` of its best configuration; whole or not at all."""
    plt = _pyplot()
    from matplotlib.gridspec import GridSpec

    row = result.featured

    fig = plt.figure(figsize=(15, 11), dpi=110)
    gs = GridSpec(2, 2, figure=fig, height_ratios=[1, 1.15], hspace=0.42, wspace=0.45)
    top_ax = fig.add_subplot(gs[0, :])
    if result.sweeps:
        _swept_pareto_panel(top_ax, result, row)
    else:
        _pareto_panel(top_ax, result, row)
    roof_ax = fig.add_subplot(gs[1, 0])
    _roofline_panel(roof_ax, ops, roofs(specs, row, result.sweeps))
    _breakdown_panel(fig.add_subplot(gs[1, 1]), ops, "iteration" if result.phase == "decode" else "forward pass")
    fig.suptitle(f"cmperf search {result.phase}: {label}".rstrip(": "), fontsize=13, x=0.01, ha="left")
    which = "best configuration" if result.best is not None else "fastest configuration that fits (none meets the SLO)"
    fig.text(0.01, roof_ax.get_position().y1 + 0.04, f"Below, the {which}: {_describe(result.phase, row, result.sweeps)}",
             fontsize=10.5, ha="left", weight="bold")
    try:
        _save(fig, path, bbox_inches="tight")
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
    _latency_axes(ax, lat, t, "Throughput per NPU vs ")
    ax.legend(loc="lower right", fontsize=9, framealpha=0.9, markerscale=1.5)


def _latency_axes(ax, lat: str, table: pd.DataFrame, title: str) -> None:
    """Labels, limits and (decode) the tokens/s-per-user top axis of a Pareto panel."""
    name = "TPOT" if lat == "tpot_ms" else "TTFT"
    ax.set_xlabel(f"{name} (ms)")
    ax.set_ylabel("throughput per NPU (tokens/s)")
    ax.set_title(f"{title}{name}", loc="left")
    ax.grid(alpha=0.3)
    ax.set_xlim(left=0)
    ax.set_ylim(bottom=0)
    if lat == "tpot_ms":  # tokens/s per user = 1000 / TPOT, on the top axis
        inv = lambda x: 1000.0 / np.maximum(np.asarray(x, dtype=float), 1e-3)
        top = ax.secondary_xaxis("top", functions=(inv, inv))
        top.set_xlabel("tokens/s per user (= 1000 / TPOT)")
        fits = table[table["fits"].to_numpy(dtype=bool)]
        lo = max(float(fits[lat].min()) if len(fits) else 1.0, 1.0)
        ticks = [v for v in (200, 100, 75, 50, 40, 30, 25, 20, 15, 12, 10, 8, 6, 5, 4, 3, 2, 1) if 1000 / v >= lo * 0.95]
        top.set_xticks(ticks)


@dataclass
class SweptFrontier:
    """The configurations of one combination of swept values: those that fit in memory, their
    own Pareto frontier (throughput per NPU against latency, by latency) and the best of them
    under the SLO (None if none meets it)."""

    values: dict[str, float]
    label: str
    points: pd.DataFrame
    frontier: pd.DataFrame
    best: pd.Series | None


def sweep_label(values: dict[str, float]) -> str:
    """``135 GB/s, 1.6 TB/s``: each swept value in its field's unit, in the order swept."""
    return ", ".join(human(v, unit_of(k)) for k, v in values.items())


def sweep_frontiers(result) -> list[SweptFrontier]:
    """One :class:`SweptFrontier` per combination of the swept values (the product of the
    ``--sweep`` lists, in their order), each frontier the Pareto frontier of its own points
    (:func:`cmperf.search.pareto_mask`), not of the merged cloud. Without a sweep: one, the
    search's own frontier."""
    from .search import THROUGHPUT, pareto_mask

    lat = result.latency
    t = result.table
    fits = t[t["fits"].to_numpy(dtype=bool)]
    keys = list(result.sweeps)
    out = []
    for combo in itertools.product(*(result.sweeps[k] for k in keys)):
        values = dict(zip(keys, map(float, combo)))
        mine = np.ones(len(fits), dtype=bool)
        for k, v in values.items():
            mine &= fits[k].to_numpy(dtype=float) == v
        pts = fits[mine]
        front = pts[pareto_mask(pts[lat].to_numpy(float), pts[THROUGHPUT].to_numpy(float))].sort_values(lat)
        ok = pts[pts["meets_slo"].to_numpy(dtype=bool)]
        best = (ok.sort_values([THROUGHPUT, lat, "memory_per_die_bytes"], ascending=[False, True, True]).iloc[0]
                if len(ok) else None)
        out.append(SweptFrontier(values, sweep_label(values), pts, front.reset_index(drop=True), best))
    return out


def frontier_at(frontier: pd.DataFrame, latency: str, x) -> np.ndarray:
    """The frontier as a function: the largest throughput per NPU of its points with latency
    <= x (0 where it has none), i.e. the best a configuration of it does under an SLO of x."""
    lat = frontier[latency].to_numpy(dtype=float)
    thr = np.maximum.accumulate(frontier["throughput_per_npu"].to_numpy(dtype=float))
    i = np.searchsorted(lat, np.asarray(x, dtype=float), side="right")
    return np.where(i > 0, thr[np.maximum(i - 1, 0)], 0.0)


SWEEP_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "<", ">", "h")


def _sweep_colors(n: int) -> list:
    import matplotlib

    cmap = matplotlib.colormaps["tab10" if n <= 10 else "turbo"]
    return [cmap(i) for i in range(n)] if n <= 10 else [cmap(v) for v in np.linspace(0.05, 0.95, n)]


def _swept_pareto_panel(ax, result, best: pd.Series) -> None:
    """The Pareto panel of a sweep: per swept value (combination) its cloud (light) and its own
    frontier in its own colour, so the frontiers show what the swept field changes. Frontiers
    are drawn widest first, so one that coincides with another shows as a band around it."""
    lat = result.latency
    groups = sweep_frontiers(result)
    colors = _sweep_colors(len(groups))
    total_fits = sum(len(g.points) for g in groups)
    keep = min(1.0, MAX_SCATTER / max(total_fits, 1))
    for g, c in zip(groups, colors):
        pts = g.points
        if keep < 1 and len(pts):  # an even subsample keeps each cloud's shape and the file small
            pts = pts.iloc[np.linspace(0, len(pts) - 1, max(1, int(len(pts) * keep))).astype(int)]
        ax.scatter(pts[lat], pts["throughput_per_npu"], s=6, color=c, alpha=0.22, lw=0, rasterized=True)
    n = len(groups)
    seen: list[tuple[np.ndarray, np.ndarray, str]] = []
    for i, (g, c) in enumerate(zip(groups, colors)):
        f = g.frontier
        xy = (f[lat].to_numpy(float), f["throughput_per_npu"].to_numpy(float))
        same = next((name for x0, y0, name in seen if len(x0) == len(xy[0]) and np.array_equal(x0, xy[0])
                     and np.array_equal(y0, xy[1])), None)
        seen.append((*xy, g.label))
        if g.best is not None:
            what = f"best {g.best['throughput_per_npu']:,.0f} tok/s/NPU at {g.best[lat]:.1f} ms"
        else:
            what = "none fits" if not len(g.points) else "none meets the SLO"
        label = f"{g.label}: {what}" + (f" (same frontier as {same})" if same else "")
        lw = 1.3 + 2.7 * (n - 1 - i) / max(n - 1, 1)
        ax.plot(*xy, "-", marker=SWEEP_MARKERS[i % len(SWEEP_MARKERS)], color=c, ms=3.2, lw=lw, alpha=0.95,
                label=label, zorder=3 + i)
        if g.best is not None:
            ax.plot([g.best[lat]], [g.best["throughput_per_npu"]], SWEEP_MARKERS[i % len(SWEEP_MARKERS)], color=c,
                    ms=9, mec="k", mew=0.8, zorder=10 + i)
    ax.scatter([], [], s=12, c="0.6", alpha=0.5, lw=0,
               label=f"light dots: the {total_fits:,} configurations that fit, in their value's colour")
    ax.axvline(result.slo_ms, c="#d62728", ls="--", lw=1.3, label=f"SLO {result.slo_ms:g} ms", zorder=2)
    if result.best is not None:
        ax.plot([best[lat]], [best["throughput_per_npu"]], "*", c="#ff7f0e", ms=16, mec="k", mew=0.6,
                label=f"best overall: {best['throughput_per_npu']:,.0f} tok/s/NPU at {best[lat]:.1f} ms", zorder=20)
    _latency_axes(ax, lat, result.table, "Pareto frontier per swept value: throughput per NPU vs ")
    ax.set_ylim(top=ax.get_ylim()[1] * 1.05)
    # beside the panel: inside, a legend of several values would hide part of a cloud
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8.5, framealpha=0.9, markerscale=1.2,
              ncol=1 if n <= 16 else 2, title="swept " + (next(iter(result.sweeps)) if len(result.sweeps) == 1 else f"({', '.join(result.sweeps)})"),
              title_fontsize=8.5)


ROOF_COLORS = ("k", "#8c564b")  # the matmul dtype's roofs, the attention dtype's (when it differs)


def _roofline_panel(ax, ops: pd.DataFrame, roof_list: list[Roof]) -> None:
    cube = ops[(ops["flops"] > 0) & (ops["hbm_bytes"] > 0) & (ops["time_us"] > 0)]
    # one point per operator over the whole iteration: FLOPs, bytes and time summed over its calls
    cube = cube.assign(flops=cube["flops"] * cube["calls"], hbm_bytes=cube["hbm_bytes"] * cube["calls"],
                       time_s=cube["total_ms"] * 1e-3)
    per_op = cube.groupby("op", sort=False).agg(flops=("flops", "sum"), hbm_bytes=("hbm_bytes", "sum"),
                                                time_s=("time_s", "sum"), bound=("bound", "first"))
    ai = per_op["flops"] / per_op["hbm_bytes"]
    achieved = per_op["flops"] / per_op["time_s"]
    peaks = [r for r in roof_list if not r.achievable]
    top = max(r.flops_per_s for r in peaks)
    hbm_Bps = peaks[0].hbm_Bps
    ridge = max(r.ridge for r in roof_list)
    lo = min(float(ai.min()) if len(ai) else 1.0, min(r.ridge for r in roof_list)) / 20
    # leave the right third of the chart for the column of operator names
    right = max(float(ai.max()) if len(ai) else 1.0, ridge) * 1.5
    hi = 10 ** (np.log10(lo) + (np.log10(right) - np.log10(lo)) / 0.66)
    x = np.geomspace(lo, hi, 200)
    color = {d: ROOF_COLORS[min(i, 1)] for i, d in enumerate(dict.fromkeys(r.dtype for r in roof_list))}
    slopes = set()  # roofs under the same HBM slope share it: a second one is drawn from its ridge on
    for r in roof_list:  # peaks solid; achievable: matmul dashed, attention dash-dot
        y = np.where(x >= r.ridge, r.at(x), np.nan) if r.hbm_Bps in slopes else r.at(x)
        slopes.add(r.hbm_Bps)
        if r.achievable:
            style = "--" if "matmul" in r.label else "-."
            label = f"{r.label} (x{r.compute_efficiency:.3g}): {r.flops_per_s / 1e12:.0f} TFLOP/s"
        else:
            style, label = "-", f"{r.label}: {r.flops_per_s / 1e12:.0f} TFLOP/s"
        ax.plot(x, y, style, c=color[r.dtype], lw=1.5 if not r.achievable else 1.2, label=label, zorder=2)
    ax.scatter(ai, achieved, s=55, c=[BOUND_COLORS.get(b, "k") for b in per_op["bound"]], edgecolors="k", lw=0.5, zorder=4)
    for name, a, f, y in zip(per_op.index, ai, achieved, _spread(np.log10(achieved.to_numpy()), 0.16)):
        ax.annotate(name, (a, f), xytext=(0.72, 10 ** y), textcoords=("axes fraction", "data"), fontsize=8.5,
                    va="center", bbox={"fc": "white", "ec": "none", "alpha": 0.8, "pad": 0.3},
                    arrowprops={"arrowstyle": "-", "lw": 0.5, "color": "0.55"})
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    ax.set_ylim(float(achieved.min()) / 5 if len(achieved) else top / 1e3, top * 60)
    # the HBM label sits above the peak slope (no operator can be there), along it
    at = 10 ** ((2 * np.log10(lo) + 3 * np.log10(peaks[0].ridge)) / 5)
    (x0, y0), (x1, y1) = ax.transData.transform([(at, hbm_Bps * at), (at * 2, hbm_Bps * at * 2)])
    text = f"HBM peak {hbm_Bps / 1e12:.3g} TB/s"
    for r in [r for r in roof_list if r.achievable][:1]:
        text += f"\n(dashed: x{r.memory_efficiency:.3g} = {r.hbm_Bps / 1e12:.3g} TB/s)"
    ax.annotate(text, (at, hbm_Bps * at), xytext=(-7, 7), textcoords="offset points", multialignment="center",
                rotation=np.degrees(np.arctan2(y1 - y0, x1 - x0)), rotation_mode="anchor", ha="center", va="bottom",
                fontsize=8.5)
    ax.set_xlabel("arithmetic intensity (FLOP per HBM byte)")
    ax.set_ylabel("achieved FLOP/s per die")
    ax.set_title("Roofline of the operators (one die, each summed over its calls; colour = bound)", loc="left")
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


__all__: list[Any] = ["search_figure", "plan_figure", "compare_figure", "available"]


SHAPE_STYLES = (("-", "o"), ("--", "s"), (":", "^"), ("-.", "D"))


def plan_lines(result, rates) -> list[dict]:
    """The lines of the ``cmperf plan`` rate panels, best shape first: per shape that has a
    deployment, its best deployment's TTFT and TPOT (ms; NaN where the queue grows without
    bound) at each of ``rates`` (:func:`cmperf.plan.planner.curves`), and its operating point
    (rate, TTFT, TPOT at the rate it is planned at); then the asked shapes without one."""
    from .plan.planner import curves, describe

    table = result.table
    out = []
    for _, row in table.drop_duplicates("shape").iterrows():
        c = curves(result, row, rates)
        ms = lambda v: np.where(np.isfinite(v), v * 1e3, np.nan)  # noqa: E731
        out.append({"shape": row["shape"], "label": f"#{int(row['rank'])} {row['shape']}: {describe(row)}",
                    "ttft_ms": ms(c["ttft_s"]), "tpot_ms": ms(c["tpot_s"]), "rate_rps": float(row["goodput_rps"]),
                    "at_ttft_ms": float(row["ttft_ms"]), "at_tpot_ms": float(row["tpot_ms"])})
    for shape in result.settings.get("shapes", []):
        if shape not in set(table["shape"]):
            out.append({"shape": shape, "label": f"{shape}: no deployment of this shape in the plan", "ttft_ms": None,
                        "tpot_ms": None, "rate_rps": 0.0, "at_ttft_ms": np.nan, "at_tpot_ms": np.nan})
    return out


def plan_figure(result, path: str | Path) -> None:
    """Write the ``cmperf plan`` PNG: TTFT and TPOT against the arrival rate for the best
    deployment of each shape (own colour, line style and marker; drawn widest first, so
    coinciding lines stay visible), the SLOs and the chosen operating rate with its goodput;
    below, the P:D split of the best deployments and where their TTFT goes. Whole or not at all."""
    plt = _pyplot()
    w = result.workload
    table = result.table
    best = result.best
    lead = pd.concat([table.head(1), result.runners_up(5)]).drop_duplicates("rank").head(6)
    fig, axes = plt.subplots(2, 2, figsize=(15, 10.5), dpi=110)
    # the rates up to past the largest any shape's best sustains in either phase (its goodput, or
    # when the SLOs are not met, the rates its prefill and decode would carry)
    heads = table.drop_duplicates("shape")
    reach = [heads[c].max() for c in ("goodput_rps", "prefill_max_rps", "decode_max_rps") if c in heads.columns]
    top_rate = float(max(*reach, w.arrival_rate_per_s or 0.0, 1e-3)) * 1.5
    rates = np.linspace(0.0, top_rate, 400)
    lines = plan_lines(result, rates)
    colors = _sweep_colors(len(lines))
    ax_t, ax_p = axes[0]
    drawn = [ln for ln in lines if ln["ttft_ms"] is not None]
    for i, (ln, c) in enumerate(zip(lines, colors)):
        style, marker = SHAPE_STYLES[i % len(SHAPE_STYLES)]
        lw = 1.4 + 2.6 * (len(drawn) - 1 - i) / max(len(drawn) - 1, 1) if ln["ttft_ms"] is not None else 1.4
        for ax, key in ((ax_t, "ttft_ms"), (ax_p, "tpot_ms")):
            y = ln[key] if ln[key] is not None else []
            ax.plot(rates[:len(y)], y, style, marker=marker, markevery=(i * 7, 40), ms=5, color=c, lw=lw,
                    label=ln["label"], zorder=3 + i, alpha=0.95 if ln[key] is not None else 0.5)
            if ln[key] is not None and ln["rate_rps"] > 0:
                at = ln["at_ttft_ms"] if key == "ttft_ms" else ln["at_tpot_ms"]
                ax.plot([ln["rate_rps"]], [at], marker, color=c, ms=9, mec="k", mew=0.8, zorder=20 + i)
    for ax, slo, name, key in ((ax_t, w.slo.ttft_s, f"TTFT ({w.slo.ttft_stat})", "ttft_ms"), (ax_p, w.slo.tpot_s, "TPOT", "tpot_ms")):
        ax.axhline(slo * 1e3, color="#d62728", ls="--", lw=1.3, label=f"{name} SLO {slo * 1e3:g} ms", zorder=2)
        if best is not None:
            ax.axvline(best["goodput_rps"], color="k", ls="-", lw=1.1, alpha=0.7, zorder=2,
                       label=f"chosen rate: goodput {best['goodput_rps']:,.1f} req/s (#1 {best['shape']}, "
                             f"bound by {best['binding']})")
            ax.annotate(f"{best['goodput_rps']:,.1f} req/s", (best["goodput_rps"], 0), xytext=(4, 4),
                        textcoords="offset points", ha="left", va="bottom", fontsize=9, weight="bold")
        if w.arrival_rate_per_s and (best is None or abs(w.arrival_rate_per_s - best["goodput_rps"]) > 1e-9):
            ax.axvline(w.arrival_rate_per_s, color="grey", ls=":", lw=1.3, label=f"asked rate {w.arrival_rate_per_s:g} req/s")
        ax.set_xlabel("arrival rate (requests/s)")
        ax.set_ylabel(f"{name} (ms)")
        ax.set_xlim(0, top_rate)
        starts = [ln[key][0] for ln in drawn if np.isfinite(ln[key][0])]
        ax.set_ylim(0, max(slo * 1e3 * 2.5, 1.3 * max(starts, default=0.0)))  # every curve's start is in view
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7.5, loc="best", framealpha=0.92)
    ax_t.set_title("TTFT against the arrival rate (best deployment of each shape; big marker: its planned rate)",
                   fontsize=10, loc="left")
    ax_p.set_title("TPOT against the arrival rate", fontsize=10, loc="left")
    ax_s, ax_b = axes[1]
    labels = [f"#{int(r['rank'])} {r['shape']}, {r['goodput_rps']:,.0f} req/s" for _, r in lead.iterrows()]
    y = np.arange(len(lead))
    pre, dec = lead["prefill_npus"].to_numpy(float), lead["decode_npus"].to_numpy(float)
    ax_s.barh(y, pre, color="#1f77b4", label="prefill NPUs")
    ax_s.barh(y, dec, left=pre, color="#ff7f0e", label="decode (or co-located) NPUs")
    for yi, a_, b_ in zip(y, pre, dec):
        ax_s.text(a_ + b_, yi, f" {a_:g} : {b_:g}", va="center", fontsize=8.5)
    ax_s.set_xlim(0, float((pre + dec).max()) * 1.3 if len(lead) else 1)
    ax_s.set_yticks(y, labels, fontsize=8)
    ax_s.invert_yaxis()
    ax_s.set_xlabel("NPUs")
    ax_s.set_title("P:D split of the best deployments", fontsize=10, loc="left", pad=24)
    ax_s.legend(fontsize=8, loc="lower right", bbox_to_anchor=(1.0, 1.0), ncol=2, frameon=False)
    left = np.zeros(len(lead))
    for col, color, name in (("ttft_queue_ms", "#d62728", "queue"), ("ttft_align_ms", "#9467bd", "pass alignment"),
                             ("ttft_prefill_ms", "#1f77b4", "prefill pass"), ("ttft_kv_transfer_ms", "#2ca02c", "KV transfer")):
        v = lead[col].to_numpy(float)
        v = np.where(np.isfinite(v), v, 0.0)
        ax_b.barh(y, v, left=left, color=color, label=name)
        left += v
    ax_b.axvline(w.slo.ttft_s * 1e3, color="#d62728", ls="--", lw=1.3, label=f"TTFT SLO {w.slo.ttft_s * 1e3:g} ms")
    ax_b.set_xlim(0, max(float(left.max()) if len(left) else 0.0, w.slo.ttft_s * 1e3) * 1.35)
    ax_b.set_yticks(y, labels, fontsize=8)
    ax_b.invert_yaxis()
    ax_b.set_xlabel(f"TTFT ({w.slo.ttft_stat}) at each deployment's planned rate (ms; TPOT in the table)")
    ax_b.set_title("where the TTFT goes", fontsize=10, loc="left", pad=24)
    ax_b.legend(fontsize=8, loc="lower right", bbox_to_anchor=(1.0, 1.0), ncol=3, frameon=False)
    st = result.settings
    fail = "" if best is not None else ": NO DEPLOYMENT MEETS THE SLOs (each shape's closest shown)"
    fig.suptitle(f"cmperf plan: {st['npus']} NPUs of {st['hardware']}, {st['model']}{fail}", fontsize=12, x=0.01, ha="left")
    fig.tight_layout()
    try:
        _save(fig, path)
    finally:
        plt.close(fig)


SHAPE_MARKERS = {"pd": "o", "afd": "s", "colocated": "^"}
PLAN_AXES = {"rate": "asked arrival rate (requests/s; max: the largest within the SLOs)",
             "prefix_hit": "prefix hit (share of prompt tokens in the KV cache pool)"}


def plan_sweep_series(table: pd.DataFrame, varied: list[str]) -> tuple[str, list[tuple[str, pd.DataFrame]]]:
    """How ``plan --sweep`` (or a list of rates / prefix hits) is drawn: the x axis is the
    first of ``varied`` (swept spec fields first, then the workload lists) that takes more than
    one value; every combination of the others is one series (its label, its rows by x)."""
    moving = [k for k in varied if k in table.columns and table[k].nunique() > 1] or [varied[0]]
    x, rest = moving[0], moving[1:]
    if not rest:
        return x, [("", table.sort_values(x, key=_x_order))]
    out = []
    for values, rows in table.groupby(rest, sort=False):
        values = values if isinstance(values, tuple) else (values,)
        label = ", ".join(f"{k.split('.')[-1]} = {human(v, unit_of(k)) if isinstance(v, float) else v}" for k, v in zip(rest, values))
        out.append((label, rows.sort_values(x, key=_x_order)))
    return x, out


def _x_order(col: pd.Series) -> pd.Series:
    """Numbers by value; a word (the rate 'max') after them."""
    return pd.to_numeric(col, errors="coerce").fillna(np.inf)


def plan_sweep_figure(table: pd.DataFrame, varied: list[str], slo, title: str, path: str | Path) -> None:
    """``cmperf plan --sweep ... --plot``: the goodput of the best deployment against the swept
    value (marker: its shape; one line per combination of the other varied values), and how
    much of each SLO it uses at its planned rate (100 %: the SLO binds). Whole or not at all."""
    plt = _pyplot()
    x_key, series = plan_sweep_series(table, varied)
    numeric = pd.to_numeric(table[x_key], errors="coerce").notna().all()
    if numeric:
        pos = lambda rows: pd.to_numeric(rows[x_key]).to_numpy(float)  # noqa: E731
    else:
        cats = list(dict.fromkeys(table.sort_values(x_key, key=_x_order)[x_key].astype(str)))
        pos = lambda rows: np.array([cats.index(str(v)) for v in rows[x_key]], dtype=float)  # noqa: E731
    colors = _sweep_colors(len(series))
    fig, (ax_g, ax_s) = plt.subplots(1, 2, figsize=(14, 5.6), dpi=110)
    for i, ((label, rows), c) in enumerate(zip(series, colors)):
        xs, g = pos(rows), rows["goodput_rps"].to_numpy(float)
        style = SHAPE_STYLES[i % len(SHAPE_STYLES)][0]
        lw = 1.4 + 2.6 * (len(series) - 1 - i) / max(len(series) - 1, 1)  # widest first: equal lines stay visible
        ax_g.plot(xs, g, style, color=c, lw=lw, label=label or None, zorder=2 + i)
        for xi, gi, (_, r) in zip(xs, g, rows.iterrows()):
            shape = r.get("shape") if gi > 0 else None
            ax_g.plot([xi], [gi], SHAPE_MARKERS.get(shape, "x"), color=c, ms=8, mec="k", mew=0.6, zorder=3)
            ax_g.annotate(f"{gi:,.0f}" + (f"\n{shape}, {r['binding']}" if shape else "\nnone meets the SLOs"), (xi, gi),
                          xytext=(0, 7), textcoords="offset points", ha="center", va="bottom", fontsize=7.5)
        for col, lim, ls, name in (("ttft_ms", slo.ttft_s * 1e3, "-", "TTFT"), ("tpot_ms", slo.tpot_s * 1e3, "--", "TPOT")):
            v = pd.to_numeric(rows.get(col, pd.Series(np.nan, index=rows.index)), errors="coerce").to_numpy(float)
            ax_s.plot(xs, 100 * v / lim, ls, marker="o" if name == "TTFT" else "s", ms=4 + lw, color=c, lw=lw,
                      label=f"{name}" + (f" ({label})" if label else ""), zorder=2 + i)
    for shape, m in SHAPE_MARKERS.items():
        ax_g.plot([], [], m, color="0.6", mec="k", mew=0.6, ms=7, ls="none", label=f"best shape: {shape}")
    ax_s.axhline(100, color="#d62728", ls=":", lw=1.0, zorder=1,
                 label=f"the SLO (TTFT {slo.ttft_stat} {slo.ttft_s * 1e3:g} ms, TPOT {slo.tpot_s * 1e3:g} ms)")
    for ax in (ax_g, ax_s):
        ax.set_xlabel(PLAN_AXES.get(x_key, x_key))
        if numeric:
            xv = pd.to_numeric(table[x_key]).to_numpy(float)
            if (xv > 0).all() and xv.max() / xv.min() >= 20:
                ax.set_xscale("log")
            ticks = sorted(set(xv))
            ax.set_xticks(ticks, [human(v, unit_of(x_key)) for v in ticks], fontsize=8.5)
            ax.minorticks_off()
        else:
            ax.set_xticks(range(len(cats)), cats)
        ax.margins(x=0.08)
        ax.grid(alpha=0.3)
    ax_g.set_ylim(0, float(table["goodput_rps"].max()) * 1.3 or 1.0)
    ax_g.set_ylabel("goodput of the best deployment (requests/s)")
    ax_g.set_title("Goodput per value (label: requests/s, best shape, what limits it)", fontsize=10, loc="left")
    ax_g.legend(fontsize=8, loc="lower right", framealpha=0.9)
    ax_s.set_ylim(0, 130)
    ax_s.set_ylabel("% of the SLO used at the planned rate")
    ax_s.set_title("TTFT and TPOT at the planned rate, as % of their SLO (100 %: it binds)", fontsize=10, loc="left")
    ax_s.legend(fontsize=8, loc="lower right", framealpha=0.9)
    fig.suptitle(title, fontsize=12, x=0.01, ha="left")
    fig.tight_layout()
    try:
        _save(fig, path)
    finally:
        plt.close(fig)


def compare_settings(phase: str, row: pd.Series) -> str:
    """The deployment a compared system runs, in one line: model and dtype, dies and EP, then
    batch, KV length and MTP (decode) or tokens per NPU, prompt and attention TP (prefill)."""
    def n(key):
        v = row.get(key)
        return "?" if v is None or (isinstance(v, float) and np.isnan(v)) else f"{v:,.0f}"

    parts = [f"{row['model']} in {str(row['dtype']).upper()}", f"{n('dies')} dies", f"EP{n('ep')}"]
    if phase == "decode":
        parts += [f"batch {n('batch')}/NPU", f"kv_len {n('kv_len')}", f"MTP {'on' if row.get('mtp') else 'off'}"]
    else:
        parts += [f"{n('tokens_per_npu')} tokens/NPU", f"prompt {n('prompt_len')}", f"attention TP{n('attn_tp')}"]
    if "microbatches_used" in row:
        parts.append(f"{n('microbatches_used')} microbatch(es)")
    if not bool(row.get("fits", True)):
        parts.append("DOES NOT FIT in HBM")
    return ", ".join(parts)


def _banded(v: float, lo: float, hi: float) -> str:
    """``1,916 ± 154``, ``50.1 ± 4.0``, ``1.27 ± 0.11``: three significant digits (whole numbers
    from 100 up), the half-width of the band to the same decimals."""
    d = 0 if abs(v) >= 100 or v == 0 else max(0, 2 - int(np.floor(np.log10(abs(v)))))
    return f"{v:,.{d}f} ± {(hi - lo) / 2:,.{d}f}"


def compare_bars(cmp) -> list[dict]:
    """The three panels of ``cmperf compare --plot``, one value per system with its band (lo,
    hi): throughput per NPU, tokens/s per TFLOPS of the chip's peak in its dtype (the same band
    scaled by the same peak: tokens/s/TFLOPS = throughput / peak), and the latency (TPOT for
    decode, TTFT for prefill)."""
    from .compare import LATENCY

    t = cmp.table
    lat = LATENCY[cmp.phase]
    thr = t["throughput_per_npu"].to_numpy(float)
    per = t["tokens_per_s_per_tflops"].to_numpy(float)
    scale = np.divide(per, thr, out=np.zeros_like(per), where=thr > 0)
    name = "TPOT" if lat == "tpot_ms" else "TTFT"
    return [
        {"title": f"{cmp.phase} tokens/s per NPU", "unit": "tokens/s", "value": thr,
         "lo": t["throughput_per_npu_lo"].to_numpy(float), "hi": t["throughput_per_npu_hi"].to_numpy(float)},
        {"title": "tokens/s per TFLOPS (chip peak in its dtype)", "unit": "tokens/s/TFLOPS", "value": per,
         "lo": t["throughput_per_npu_lo"].to_numpy(float) * scale, "hi": t["throughput_per_npu_hi"].to_numpy(float) * scale},
        {"title": f"{name} (lower is better)", "unit": "ms", "value": t[lat].to_numpy(float),
         "lo": t[f"{lat}_lo"].to_numpy(float), "hi": t[f"{lat}_hi"].to_numpy(float)},
    ]


def compare_figure(cmp, path: str | Path) -> None:
    """``cmperf compare --plot``: per system (one colour each) its tokens/s per NPU, tokens/s
    per TFLOPS and TPOT (decode) or TTFT (prefill), each with the prediction band as an error
    bar and written on the bar; below, each system's settings. Whole or not at all."""
    plt = _pyplot()
    from matplotlib.patches import Patch

    t = cmp.table
    panels = compare_bars(cmp)
    x = np.arange(len(t))
    colors = _sweep_colors(len(t))
    fig, axes = plt.subplots(1, 3, figsize=(max(13.0, 1.6 * 3 * len(t) + 3), 5.0), dpi=120)
    for ax, p in zip(axes, panels):
        err = np.vstack([p["value"] - p["lo"], p["hi"] - p["value"]])
        ax.bar(x, p["value"], yerr=err, color=colors, edgecolor="k", lw=0.5, capsize=5, width=0.7)
        for xi, v, lo, hi in zip(x, p["value"], p["lo"], p["hi"]):
            ax.annotate(_banded(v, lo, hi), (xi, hi), xytext=(0, 3), textcoords="offset points", ha="center",
                        va="bottom", fontsize=9)
        ax.set_title(p["title"], loc="left", fontsize=10.5)
        ax.set_ylabel(p["unit"])
        ax.set_ylim(0, float(np.nanmax(p["hi"])) * 1.15 if len(t) else 1)
        ax.set_xticks(x, t["system"], fontsize=9, rotation=15 if len(t) > 3 else 0)
        ax.grid(alpha=0.3, axis="y")
    floor = t["band_floor"].to_numpy(bool) if "band_floor" in t else np.zeros(len(t), bool)
    handles = [Patch(facecolor=c, edgecolor="k", lw=0.5,
                     label=f"{s}: {compare_settings(cmp.phase, r)}" + ("; band a floor" if f else ""))
               for c, s, (_, r), f in zip(colors, t["system"], t.iterrows(), floor)]
    fig.suptitle(f"cmperf compare {cmp.phase}: each system at its own configuration "
                 f"(error bars: each system's own held-out band; a floor where only micro-benchmarks calibrate it)",
                 x=0.01, ha="left", fontsize=11.5)
    fig.tight_layout(rect=(0, 0.04 + 0.045 * len(t), 1, 1))
    fig.legend(handles=handles, loc="lower left", bbox_to_anchor=(0.01, 0.0), fontsize=9.5, frameon=False,
               title="settings", title_fontsize=9.5, alignment="left")
    try:
        _save(fig, path, bbox_inches="tight")
    finally:
        plt.close(fig)


def simulate_figure(res, path: str | Path, title: str = "") -> None:
    """``cmperf simulate --plot``: the latency CDFs over requests (TTFT, TPOT, E2E, with the
    SLOs), and over time the output throughput (1-second buckets of finished tokens), the
    requests in flight (prefill queue, decode waiting and running)."""
    plt = _pyplot()
    r = res.requests
    m = res.metrics
    fig, axes = plt.subplots(2, 3, figsize=(15, 8))
    ttft = (r.first_token_s - r.send_s) * 1e3
    e2e = (r.finish_s - r.send_s) * 1e3
    out = r.output
    tpot = np.where(out > 1, (e2e - ttft) / np.maximum(out - 1, 1), np.nan)
    slo = res.settings.get("slo", {})
    for ax, x, name, key in ((axes[0, 0], ttft, "TTFT (ms)", "ttft"), (axes[0, 1], tpot, "TPOT (ms)", "tpot"),
                             (axes[0, 2], e2e, "E2E latency (ms)", "e2e")):
        x = np.sort(x[np.isfinite(x)])
        if len(x):
            ax.plot(x, np.arange(1, len(x) + 1) / len(x), color="#1f77b4", lw=2)
        for q, ls in (("mean", "-"), ("p99", "--")):
            v = m.get(f"{q}_{key}_ms")
            if v is not None and np.isfinite(v):
                ax.axvline(v, color="#d62728", ls=ls, lw=1, label=f"{q} {v:,.1f} ms")
        if key in slo:
            ax.axvline(slo[key], color="k", ls=":", lw=1.2, label=f"SLO {slo[key]:g} ms")
        ax.set_xlabel(name)
        ax.set_ylabel("share of requests")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="lower right")
    done = np.isfinite(r.finish_s)
    t0 = np.nanmin(r.send_s)
    if done.any():
        end = np.nanmax(r.finish_s) - t0
        edges = np.arange(0.0, end + 1.0, 1.0)
        tok, _ = np.histogram(r.finish_s[done] - t0, bins=edges, weights=out[done])
        axes[1, 0].step(edges[:-1], tok, where="post", color="#2ca02c")
    axes[1, 0].set_xlabel("time (s)")
    axes[1, 0].set_ylabel("output tokens finished per second")
    axes[1, 0].set_title(f"output throughput (mean {m['output_throughput_tps']:,.0f} tok/s)", fontsize=10)
    axes[1, 0].grid(alpha=0.3)
    q = np.asarray(res.stats.queue, dtype=float)
    if len(q):
        for j, (label, c) in enumerate((("prefill queue", "#ff7f0e"), ("decode waiting", "#9467bd"), ("decode running", "#1f77b4")),
                                       start=1):
            axes[1, 1].plot(q[:, 0] - t0, q[:, j], label=label, color=c, lw=1.2)
    axes[1, 1].set_xlabel("time (s)")
    axes[1, 1].set_ylabel("requests")
    axes[1, 1].set_title("requests over time", fontsize=10)
    if len(q):  # no queue samples (too few requests): no lines to name
        axes[1, 1].legend(fontsize=8)
    axes[1, 1].grid(alpha=0.3)
    parts = [("waiting for prefill", m["mean_queue_ms"]), ("prefill pass", m["mean_prefill_ms"]),
             ("KV transfer", m["mean_kv_transfer_ms"]), ("waiting for decode", m["mean_decode_wait_ms"])]
    left = 0.0
    for (label, v), c in zip(parts, ("#d62728", "#1f77b4", "#2ca02c", "#9467bd")):
        v = v if np.isfinite(v) else 0.0
        axes[1, 2].barh([0], [v], left=left, color=c, label=f"{label} {v:,.0f} ms")
        left += v
    axes[1, 2].set_yticks([])
    axes[1, 2].set_xlabel("mean TTFT, by part (ms)")
    axes[1, 2].legend(fontsize=8, loc="upper right")
    fig.suptitle(title, x=0.01, ha="left", fontsize=11)
    fig.tight_layout()
    _save(fig, path, dpi=110)
    plt.close(fig)


def rate_sweep_figure(rows: list[dict], slo: dict, path: str | Path, title: str = "") -> None:
    """``cmperf simulate --request-rate R1,R2,... --plot``: what a deployment serves against
    the latency it costs, one point per rate: output throughput against the p99 TTFT (left)
    and the p99 TPOT (right), each point labelled with its rate, the SLOs as lines."""
    plt = _pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.8))
    x = np.array([r["output_throughput_tps"] for r in rows], dtype=float)
    for ax, key, name, s in ((axes[0], "p99_ttft_ms", "P99 TTFT (ms)", "ttft"), (axes[1], "p99_tpot_ms", "P99 TPOT (ms)", "tpot")):
        y = np.array([r[key] for r in rows], dtype=float)
        ax.plot(x, y, "o-", color="#1f77b4", lw=2)
        for xi, yi, r in zip(x, y, rows):
            ax.annotate(f"{r['rate_rps']:g}/s", (xi, yi), textcoords="offset points", xytext=(4, 4), fontsize=8)
        if s in slo:
            ax.axhline(slo[s], color="k", ls=":", lw=1.2, label=f"SLO {slo[s]:g} ms")
            ax.legend(fontsize=8, loc="upper left")
        ax.set_xlabel("output throughput (tokens/s)")
        ax.set_ylabel(name)
        ax.set_yscale("log")
        ax.grid(alpha=0.3, which="both")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    _save(fig, path, dpi=110)
    plt.close(fig)
