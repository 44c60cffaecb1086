"""bench_serving's metrics of a simulated run, with its definitions (docs/model.md §12.4;
serving-reference.md §1.5: SGLang ``bench_serving`` / vLLM ``benchmark_serving``):

    TTFT        first token - send (the client's clock starts when it sends the request)
    TPOT        (E2E - TTFT) / (output - 1), over requests with output > 1
    ITL         the gap between two streamed chunks: one chunk per decode step, so the step
                time, weighted by the requests in each step (vLLM's per-chunk entries; SGLang's
                native client divides each gap over the chunk's tokens, ITL ~ TPOT)
    E2E         finish - send
    throughput  requests, output tokens, input + output tokens over the duration (first send
                to last finish)
    concurrency sum of E2E / duration (time-averaged requests in flight)
    goodput     requests meeting every SLO given, per second (vLLM's --goodput)

Mean, median and p99 are over requests (ITL: over chunks).
"""

from __future__ import annotations

from itertools import chain

import numpy as np

from .engine import Requests, Stats


def _stats(x: np.ndarray, name: str, unit: str = "ms", scale: float = 1e3) -> dict:
    x = np.asarray(x, dtype=float)
    x = x[np.isfinite(x)]
    if not len(x):
        return {f"mean_{name}_{unit}": float("nan"), f"median_{name}_{unit}": float("nan"), f"p99_{name}_{unit}": float("nan")}
    p90, p99 = np.quantile(x, [0.9, 0.99])  # one partition for both (each the same interpolation as alone)
    return {f"mean_{name}_{unit}": float(x.mean() * scale), f"median_{name}_{unit}": float(np.median(x) * scale),
            f"p90_{name}_{unit}": float(p90 * scale), f"p99_{name}_{unit}": float(p99 * scale)}


def _itl(a: np.ndarray) -> np.ndarray:
    """Step times of every decode interval (``a``: Stats.intervals as rows), sampled evenly
    over its steps, each weighted by the requests it carried: a weighted sample of the chunk
    gaps."""
    if not len(a):
        return np.zeros(0), np.zeros(0)
    T0, d, k, n = a[:, 0], a[:, 1], a[:, 2], a[:, 3]
    m = np.minimum(k, 8).astype(int)  # up to 8 points per interval, at the midpoints of equal shares of its steps
    rows = np.repeat(np.arange(len(a)), m)
    i = np.arange(len(rows)) - np.repeat(np.cumsum(m) - m, m)  # each point's place in its interval, 0 ... m - 1
    j = (i + 0.5) / m[rows]
    t = T0[rows] + d[rows] * (k[rows] - 1) * j
    w = (n * k / m)[rows]
    return t, w


def _weighted_quantile(x: np.ndarray, w: np.ndarray, q: float) -> float:
    if not len(x):
        return float("nan")
    o = np.argsort(x)
    c = np.cumsum(w[o])
    return float(x[o][np.searchsorted(c, q * c[-1])])


def metrics(req: Requests, stats: Stats, slo_ttft_ms: float | None = None, slo_tpot_ms: float | None = None,
            warmup: float = 0.0) -> dict:
    """bench_serving's summary of a run (module docstring). ``warmup``: the share of the first
    requests (by send time) left out of the latency statistics, as a benchmark's warm-up."""
    done = np.isfinite(req.finish_s)
    ttft = req.first_token_s - req.send_s
    e2e = req.finish_s - req.send_s
    out = req.output.astype(float)
    tpot = np.where(out > 1, (e2e - ttft) / np.maximum(out - 1, 1), np.nan)
    keep = done.copy()
    if warmup > 0:
        order = np.argsort(req.send_s)
        keep[order[: int(warmup * len(order))]] = False
    start, end = np.nanmin(req.send_s), np.nanmax(req.finish_s)
    duration = max(end - start, 1e-12)
    intervals = np.fromiter(chain.from_iterable(stats.intervals), float, 5 * len(stats.intervals)).reshape(-1, 5)
    t, w = _itl(intervals)
    res = {
        "completed": int(done.sum()),
        "duration_s": float(duration),
        "total_input_tokens": int(req.prompt[done].sum()),
        "total_output_tokens": int(out[done].sum()),
        "request_throughput_rps": float(done.sum() / duration),
        "input_throughput_tps": float(req.prompt[done].sum() / duration),
        "output_throughput_tps": float(out[done].sum() / duration),
        "total_throughput_tps": float((req.prompt[done] + out[done]).sum() / duration),
        "concurrency": float(np.nansum(e2e[done]) / duration),
        **_stats(ttft[keep], "ttft"), **_stats(tpot[keep], "tpot"), **_stats(e2e[keep], "e2e"),
        "mean_itl_ms": float(np.sum(t * w) / np.sum(w) * 1e3) if len(t) else float("nan"),
        "median_itl_ms": _weighted_quantile(t, w, 0.5) * 1e3,
        "p99_itl_ms": _weighted_quantile(t, w, 0.99) * 1e3,
        "mean_queue_ms": float(np.nanmean((req.prefill_start_s - req.send_s)[keep]) * 1e3),
        "mean_prefill_ms": float(np.nanmean((req.prefill_end_s - req.prefill_start_s)[keep]) * 1e3),
        "mean_kv_transfer_ms": float(np.nanmean((req.kv_arrive_s - req.prefill_end_s)[keep]) * 1e3),
        "mean_decode_wait_ms": float(np.nanmean((req.first_token_s - req.kv_arrive_s)[keep]) * 1e3),
    }
    if len(intervals):  # the time decode steps lose waiting for the DP rank with the most KV
        a = intervals
        res["dp_rank_wait_share"] = float(np.sum((a[:, 0] - a[:, 4]) * a[:, 2]) / max(np.sum(a[:, 0] * a[:, 2]), 1e-30))
    ok = done.copy()
    if slo_ttft_ms is not None:
        ok &= ttft * 1e3 <= slo_ttft_ms
    if slo_tpot_ms is not None:
        ok &= ~(tpot * 1e3 > slo_tpot_ms)
    res["goodput_rps"] = float(ok.sum() / duration)
    return res
