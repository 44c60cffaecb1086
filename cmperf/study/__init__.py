"""A capacity study: one YAML of questions, each planned (and optionally simulated), on a local
process pool or a Dask cluster, with one table of answers (``cmperf study FILE``; docs/study.md).

The file is a grid; every combination of its lists is one question::

    hardware: [cloudmatrix384, h100-cluster]   # a name or a list
    model: [default, deepseek-v3]              # default: the system's model
    stack: [default]                           # default: the system's stack; none: the bare cost model
    npus: [64, 128]                            # NPU budget (default: the whole system)
    workload:                                  # prompt/output lengths as plan takes them
      - {prompt_len: 4096, output_len: 256, prefix_hit: 0}
    slo:
      - {ttft_ms: 2000, tpot_ms: 50, ttft_stat: mean}
    set:                                       # what-ifs: each a mapping of --set paths to values
      - {}
      - {chip.die.hbm_bandwidth_Bps: 3.2e12}
    shapes: [pd, colocated]                    # deployment shapes the planner considers
    simulate: {num_prompts: 500, seed: 0}      # optional: simulate each best deployment at its rate

A question's answer is a pure function of the question (:func:`answer`), so the answers are the
same whichever executor runs them, in the order of the grid.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from ..errors import ConfigError

GRID = ("hardware", "model", "stack", "npus", "workload", "slo", "set")
KEYS = set(GRID) | {"shapes", "simulate", "title"}
WORKLOAD_KEYS = {"prompt_len", "output_len", "prefix_hit", "rate"}
SLO_KEYS = {"ttft_ms", "tpot_ms", "ttft_stat"}
SIMULATE_KEYS = {"num_prompts", "seed", "warmup"}
MAX_QUESTIONS = 100_000
EXECUTORS = ("local", "serial", "dask")


@dataclass
class Study:
    path: str
    title: str
    questions: list[dict] = field(default_factory=list)


def _listed(raw: dict, key: str, default: list, path: str) -> list:
    v = raw.get(key, default)
    v = v if isinstance(v, list) else [v]
    if not v:
        raise ConfigError(f"{path}: field '{key}': an empty list asks no question")
    return v


def _check_mapping(item: Any, allowed: set, where: str) -> dict:
    if not isinstance(item, dict):
        raise ConfigError(f"{where}: expected a mapping of {', '.join(sorted(allowed))} (got {type(item).__name__})")
    extra = set(item) - allowed
    if extra:
        raise ConfigError(f"{where}: unknown field '{sorted(extra)[0]}' (expected {', '.join(sorted(allowed))})")
    return item


def load(path: str) -> Study:
    """The questions of a study file (every combination of its grid lists), checked."""
    from ..specs.loader import read_yaml

    raw = read_yaml(Path(path))
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: expected a mapping of {', '.join(GRID)} (a study grid)")
    extra = set(raw) - KEYS
    if extra:
        raise ConfigError(f"{path}: unknown field '{sorted(extra)[0]}' (expected {', '.join(sorted(KEYS))})")
    lists = {k: _listed(raw, k, d, path) for k, d in
             (("hardware", ["cloudmatrix384"]), ("model", ["default"]), ("stack", ["default"]), ("npus", [None]),
              ("workload", [{}]), ("slo", [{}]), ("set", [{}]))}
    for k in ("hardware", "model", "stack"):
        for j, v in enumerate(lists[k]):
            if not isinstance(v, str) or not v:
                raise ConfigError(f"{path}: field '{k}[{j}]': expected a name (got {v!r})")
    for j, v in enumerate(lists["npus"]):
        if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v < 1):
            raise ConfigError(f"{path}: field 'npus[{j}]': expected a whole number of NPUs >= 1 (got {v!r})")
    for j, w in enumerate(lists["workload"]):
        _check_mapping(w, WORKLOAD_KEYS, f"{path}: field 'workload[{j}]'")
    for j, s in enumerate(lists["slo"]):
        _check_mapping(s, SLO_KEYS, f"{path}: field 'slo[{j}]'")
    for j, s in enumerate(lists["set"]):
        if not isinstance(s, dict):
            raise ConfigError(f"{path}: field 'set[{j}]': expected a mapping of spec paths to values, e.g. "
                              f"{{chip.die.hbm_bandwidth_Bps: 3.2e12}}")
    shapes = raw.get("shapes", ["pd", "colocated", "afd"])
    shapes = shapes if isinstance(shapes, list) else [s.strip() for s in str(shapes).split(",")]
    bad = [s for s in shapes if s not in ("pd", "colocated", "afd")]
    if bad or not shapes:
        raise ConfigError(f"{path}: field 'shapes': expected pd, colocated and/or afd (got {bad[0] if bad else 'none'!r})")
    sim = raw.get("simulate")
    if sim is not None:
        sim = _check_mapping(sim, SIMULATE_KEYS, f"{path}: field 'simulate'")
        n = sim.get("num_prompts", 500)
        if not isinstance(n, int) or isinstance(n, bool) or not 10 <= n <= 1_000_000:
            raise ConfigError(f"{path}: field 'simulate.num_prompts': expected a whole number from 10 to 1,000,000 (got {n!r})")
    total = math.prod(len(v) for v in lists.values())
    if total > MAX_QUESTIONS:
        raise ConfigError(f"{path}: the grid asks {total:,} questions; at most {MAX_QUESTIONS:,} in one study")
    questions = []
    for i, combo in enumerate(itertools.product(*(lists[k] for k in GRID))):
        q = dict(zip(GRID, combo))
        q["question"] = i
        q["shapes"] = list(shapes)
        q["simulate"] = dict(sim) if sim is not None else None
        questions.append(q)
    return Study(path=str(path), title=str(raw.get("title") or Path(path).stem), questions=questions)


def _workload(q: dict):
    from ..plan.workload import SLO, Workload, parse_lengths

    w, s = q["workload"], q["slo"]
    rate = w.get("rate", "max")
    arrival = None if rate in (None, "max") else float(rate)
    if arrival is not None and not arrival > 0:
        raise ConfigError(f"workload rate {rate!r}: expected requests/s > 0 or max")
    hit = float(w.get("prefix_hit", 0))
    if not 0 <= hit < 1:
        raise ConfigError(f"workload prefix_hit {hit:g}: expected a share in [0, 1)")
    ttft, tpot = float(s.get("ttft_ms", 2000)), float(s.get("tpot_ms", 50))
    if not (ttft > 0 and tpot > 0 and math.isfinite(ttft) and math.isfinite(tpot)):
        raise ConfigError(f"slo {s}: expected ttft_ms and tpot_ms > 0")
    stat = s.get("ttft_stat", "mean")
    if stat not in ("mean", "p90"):
        raise ConfigError(f"slo ttft_stat {stat!r}: expected mean or p90")
    return Workload(prompt=parse_lengths(str(w.get("prompt_len", 4096)), "prompt_len"),
                    output=parse_lengths(str(w.get("output_len", 256)), "output_len"), prefix_hit=hit,
                    slo=SLO(ttft / 1e3, tpot / 1e3, stat), arrival_rate_per_s=arrival)


def label(q: dict) -> dict:
    """The question's columns of the answer table (flat, printable)."""
    w, s = q["workload"], q["slo"]
    return {"question": q["question"], "hardware": q["hardware"], "model": q["model"], "stack": q["stack"],
            "npus_budget": q["npus"] if q["npus"] is not None else "system",
            "prompt_len": str(w.get("prompt_len", 4096)), "output_len": str(w.get("output_len", 256)),
            "prefix_hit": float(w.get("prefix_hit", 0)), "rate": str(w.get("rate", "max")),
            "ttft_slo_ms": float(s.get("ttft_ms", 2000)), "tpot_slo_ms": float(s.get("tpot_ms", 50)),
            "what_if": ", ".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in q["set"].items()) or "-"}


ANSWER = ("shape", "split", "npus", "goodput_rps", "max_rps", "binding", "ttft_ms", "tpot_ms",
          "output_tokens_per_s_per_npu")
SIMULATED = ("request_throughput_rps", "goodput_rps", "mean_ttft_ms", "p90_ttft_ms", "mean_tpot_ms", "p90_tpot_ms")


def answer(q: dict) -> dict:
    """Plan question ``q`` (and simulate its best deployment if the study asks): one row of the
    answer table; a question the model cannot answer gets its reason in ``error``."""
    from ..errors import CmperfError
    from ..plan.planner import plan, summary

    row: dict[str, Any] = {**label(q), **{k: None for k in ANSWER}, "error": ""}
    if q.get("simulate") is not None:
        row.update({f"simulated_{k}": None for k in SIMULATED})
    try:
        w = _workload(q)
        sets = [f"{k}={v}" for k, v in q["set"].items()]
        p = plan(w, hardware=q["hardware"], model=None if q["model"] == "default" else q["model"], sets=sets,
                 npus=q["npus"], shape_names=tuple(q["shapes"]), stack=None if q["stack"] == "default" else q["stack"])
        best = p.best
        if best is None:
            row["error"] = p.message or "no deployment meets the SLOs"
            return row
        hw, m = p.specs.views()
        row["model"], row["stack"] = str(m.name), p.specs.stack_name or "none"
        s = summary(p)["best"]
        for k in ANSWER:
            v = s.get(k, best.get(k))
            row[k] = v.item() if hasattr(v, "item") else v
        if q.get("simulate") is not None:
            row.update(_simulated(p, best, q["simulate"]))
    except CmperfError as e:
        row["error"] = str(e)
    return row


def _simulated(p, best: dict, opts: dict) -> dict:
    from ..export import from_plan
    from ..simulate import Traffic, simulate

    dep = from_plan(best).deployment_spec()
    sim = simulate(p.specs, p.workload, dep, Traffic(rate_rps=float(best["goodput_rps"]), num_prompts=int(opts.get("num_prompts", 500))),
                   int(opts.get("seed", 0)), None, float(opts.get("warmup", 0.1)))
    return {f"simulated_{k}": float(sim.metrics[k]) for k in SIMULATED}


def run(study: Study, executor: str = "local", workers: int | None = None, address: str | None = None,
        progress: Callable[[int, int], None] | None = None):
    """The answers to every question of ``study`` (a DataFrame in grid order) on ``executor``:
    ``serial`` (this process), ``local`` (a process pool of ``workers``, default the cores) or
    ``dask`` (the Dask cluster at ``address``: dask.distributed's ``Client(address)``)."""
    import pandas as pd

    qs = study.questions
    if executor not in EXECUTORS:
        raise ConfigError(f"--executor {executor}: expected one of {', '.join(EXECUTORS)}")
    if workers is not None and workers < 1:
        raise ConfigError(f"--workers {workers}: expected 1 or more")
    if executor == "dask" and not address:
        raise ConfigError("--executor dask needs --address (the scheduler, e.g. tcp://10.0.0.1:8786)")
    if executor != "dask" and address:
        raise ConfigError("--address is the Dask scheduler's: give it with --executor dask")
    done = [0]

    def tick():
        done[0] += 1
        if progress is not None:
            progress(done[0], len(qs))

    rows: list[dict | None] = [None] * len(qs)
    if executor == "serial" or (executor == "local" and (workers == 1 or len(qs) == 1)):
        for i, q in enumerate(qs):
            rows[i] = answer(q)
            tick()
    elif executor == "local":
        import os
        from concurrent.futures import ProcessPoolExecutor, as_completed

        n = min(workers or os.cpu_count() or 1, len(qs))
        import multiprocessing as mp

        pool = ProcessPoolExecutor(max_workers=n, mp_context=mp.get_context("fork" if os.name == "posix" else "spawn"))
        try:
            futures = {pool.submit(answer, q): i for i, q in enumerate(qs)}
            for f in as_completed(futures):
                rows[futures[f]] = f.result()
                tick()
        except BaseException:  # Ctrl-C, a signal: stop now, not after the questions still queued
            pool.shutdown(wait=False, cancel_futures=True)
            raise
        pool.shutdown()
    else:
        rows = _dask(qs, address, tick)
    return pd.DataFrame(rows)


def _dask(qs: list[dict], address: str, tick) -> list[dict]:
    """The answers on a Dask cluster (dask.distributed, the optional extra cmperf[study-dask])."""
    try:
        from distributed import Client, as_completed
    except ImportError:
        raise ConfigError("--executor dask needs dask.distributed, an optional extra: pip install 'cmperf[study-dask]'") from None
    try:
        client = Client(address, timeout=30)
    except (OSError, TimeoutError) as e:
        raise ConfigError(f"--address {address}: cannot reach a Dask scheduler there ({e})") from None
    try:
        futures = client.map(answer, qs, pure=False)
        index = {f.key: i for i, f in enumerate(futures)}
        rows: list[dict | None] = [None] * len(qs)
        for f in as_completed(futures):
            rows[index[f.key]] = f.result()
            tick()
        return rows
    finally:
        client.close()
