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
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

from ..errors import ConfigError, short

GRID = ("hardware", "model", "stack", "npus", "workload", "slo", "set")
MAX_QUESTIONS = 10_000  # a study asks at most this many questions unless --max-questions says more (~30 min on 2 cores)
HARD_MAX_QUESTIONS = 1_000_000  # never more: the questions alone would take GBs, the answers days
EXECUTORS = ("local", "serial", "dask")


@dataclass
class Study:
    path: str
    title: str
    questions: list[dict] = field(default_factory=list)


def load(path: str, max_questions: int = MAX_QUESTIONS) -> Study:
    """The questions of a study file (every combination of its grid lists), checked against its
    schema (cmperf/study/schema.py); a grid of more than ``max_questions`` is refused."""
    from ..errors import short_path
    from ..specs.loader import read_yaml
    from .schema import validate

    if isinstance(max_questions, bool) or not isinstance(max_questions, int) or not 1 <= max_questions <= HARD_MAX_QUESTIONS:
        raise ConfigError(f"--max-questions {max_questions}: expected a whole number from 1 to {HARD_MAX_QUESTIONS:,}")
    raw = validate(read_yaml(Path(path)), str(path))
    lists = {k: raw[k] for k in GRID}
    total = math.prod(len(v) for v in lists.values())
    if total > max_questions:
        more = (f"raise the limit with --max-questions {total}" if total <= HARD_MAX_QUESTIONS
                else f"at most {HARD_MAX_QUESTIONS:,} in one study: split it")
        raise ConfigError(f"{short_path(path)}: the grid asks {total:,} questions, more than the limit of "
                          f"{max_questions:,} ({more})")
    sim = raw.get("simulate")
    questions = []
    for i, combo in enumerate(itertools.product(*(lists[k] for k in GRID))):
        q = dict(zip(GRID, combo))
        q["question"] = i
        q["shapes"] = list(raw["shapes"])
        q["simulate"] = dict(sim) if sim is not None else None
        questions.append(q)
    return Study(path=str(path), title=str(raw.get("title") or Path(path).stem), questions=questions)


def _workload(q: dict):
    from ..plan.workload import SLO, Workload, parse_lengths

    w, s = q["workload"], q["slo"]
    rate = w.get("rate", "max")
    try:  # a question made through the API, not a file held to the schema
        arrival = None if rate in (None, "max") else float(rate)
    except (TypeError, ValueError):
        raise ConfigError(f"workload rate {short(rate)}: expected requests/s > 0 or max") from None
    if arrival is not None and not arrival > 0:
        raise ConfigError(f"workload rate {rate!r}: expected requests/s > 0 or max")
    hit = float(w.get("prefix_hit", 0))
    if not 0 <= hit < 1:
        raise ConfigError(f"workload prefix_hit {hit:g}: expected a share in [0, 1)")
    ttft, tpot = float(s.get("ttft_ms", 2000)), float(s.get("tpot_ms", 50))
    if not (ttft > 0 and tpot > 0 and math.isfinite(ttft) and math.isfinite(tpot)):
        raise ConfigError(f"slo {s}: expected ttft_ms and tpot_ms > 0")
    stats = {k: s.get(k, "mean") for k in ("ttft_stat", "tpot_stat")}  # SLO checks them (one place)
    return Workload(prompt=parse_lengths(str(w.get("prompt_len", 4096)), "prompt_len"),
                    output=parse_lengths(str(w.get("output_len", 256)), "output_len"), prefix_hit=hit,
                    slo=SLO(ttft / 1e3, tpot / 1e3, stats["ttft_stat"], stats["tpot_stat"]), arrival_rate_per_s=arrival)


def label(q: dict) -> dict:
    """The question's columns of the answer table (flat, printable)."""
    w, s = q["workload"], q["slo"]
    return {"question": q["question"], "hardware": q["hardware"], "model": q["model"], "stack": q["stack"],
            "npus_budget": q["npus"] if q["npus"] is not None else "system",
            "prompt_len": str(w.get("prompt_len", 4096)), "output_len": str(w.get("output_len", 256)),
            "prefix_hit": float(w.get("prefix_hit", 0)), "rate": str(w.get("rate", "max")),
            "ttft_slo_ms": float(s.get("ttft_ms", 2000)), "tpot_slo_ms": float(s.get("tpot_ms", 50)),
            "ttft_stat": str(s.get("ttft_stat", "mean")), "tpot_stat": str(s.get("tpot_stat", "mean")),
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

    if executor == "serial" or (executor == "local" and (workers == 1 or len(qs) == 1)):
        rows = in_order(qs, ((i, answer(q)) for i, q in enumerate(qs)), tick)
    elif executor == "local":
        rows = _local(qs, min(workers or os.cpu_count() or 1, len(qs)), tick)
    else:
        rows = _dask(qs, address, tick)
    return pd.DataFrame(rows)


def in_order(qs: list[dict], answered: Iterable[tuple[int, dict]], tick: Callable[[], None] = lambda: None) -> list[dict]:
    """The answer rows in question order, from ``(position, row)`` pairs in the order they were
    answered (a pool's or a cluster's completion order); every question gets exactly one row,
    its own (the row's ``question`` is the question's): else an error, never a table with a
    row missing, twice or in another question's place."""
    rows: list[dict | None] = [None] * len(qs)
    for i, row in answered:
        if rows[i] is not None:
            raise RuntimeError(f"study: question {qs[i]['question']} answered twice")
        if row.get("question") != qs[i]["question"]:
            raise RuntimeError(f"study: the answer to question {row.get('question')} came back as question {qs[i]['question']}'s")
        rows[i] = row
        tick()
    missing = [q["question"] for q, r in zip(qs, rows) if r is None]
    if missing:
        raise RuntimeError(f"study: {len(missing):,} questions got no answer (the first: {missing[0]})")
    return rows  # type: ignore[return-value]


def _die_with(parent: int) -> None:
    """A pool worker's initializer: the worker ends when the study's process does, however it
    ends (kill -9 included), and leaves Ctrl-C and SIGTERM to it (which stops the workers).

    On Linux the kernel sends the worker SIGKILL when its parent goes (prctl PR_SET_PDEATHSIG:
    strictly, when the parent's thread that forked it ends; the pool forks every worker from the
    thread that calls run(), which waits in run() for them); elsewhere a thread of the worker
    watches its parent's pid."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a terminal's Ctrl-C reaches the whole group: the parent stops us
    for name in ("SIGTERM", "SIGHUP"):  # not the parent's handlers (forked): a signal ends a worker at once
        if hasattr(signal, name):
            signal.signal(getattr(signal, name), signal.SIG_DFL)
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            PR_SET_PDEATHSIG = 1
            if ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0) == 0:
                if os.getppid() != parent:  # the parent went before the kernel was told
                    os._exit(1)
                return
        except (OSError, AttributeError):
            pass
    import threading

    threading.Thread(target=_watch_parent, args=(parent,), name="cmperf-parent-watch", daemon=True).start()


def _watch_parent(parent: int, every_s: float = 0.5) -> None:
    import time

    while os.getppid() == parent:
        time.sleep(every_s)
    os._exit(1)


def _stop(pool) -> None:
    """End a process pool now: the questions still queued cancelled, its workers killed (they
    hold nothing to save), reaped."""
    # the pool's processes (its own map, in every Python since 3.8; 3.14's kill_workers() does the
    # same) before shutdown, which forgets them: shutdown(wait=False) alone leaves each worker on
    # its question, and the interpreter's exit waiting for it (17 s for a simulated question)
    procs = list((getattr(pool, "_processes", None) or {}).values())
    manager = getattr(pool, "_executor_manager_thread", None)
    pool.shutdown(wait=False, cancel_futures=True)
    for p in procs:
        try:
            p.kill()
        except (OSError, ValueError, AttributeError):
            pass
    if manager is not None:  # it sees the workers gone and closes its pipe now, not racing the exit's wakeup of it
        manager.join(5)     # (3.11: "OSError: Bad file descriptor" from concurrent.futures' exit hook)
    for p in procs:
        try:
            p.join(2)
        except (OSError, ValueError, AssertionError, AttributeError):
            pass


def _local(qs: list[dict], n: int, tick) -> list[dict]:
    """The answers on a pool of ``n`` processes on this machine (forked where fork exists:
    cmperf already imported), which end with this process however it ends."""
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor, as_completed

    pool = ProcessPoolExecutor(max_workers=n, mp_context=mp.get_context("fork" if os.name == "posix" else "spawn"),
                               initializer=_die_with, initargs=(os.getpid(),))
    try:
        futures = {pool.submit(answer, q): i for i, q in enumerate(qs)}
        rows = in_order(qs, ((futures[f], f.result()) for f in as_completed(futures)), tick)
    except BaseException:  # Ctrl-C, a signal, an error: stop now, not after the questions still queued
        _stop(pool)
        raise
    pool.shutdown()
    return rows


DASK_SCHEMES = ("tcp", "tls", "ws", "wss", "ucx")
CONNECT_TIMEOUT_S = 5.0  # a scheduler that has not answered by then is not there (an unroutable host, a silent port)


def dask_address(address: str) -> str:
    """``--address`` as a Dask scheduler's address, ``SCHEME://HOST:PORT`` (``HOST:PORT`` is
    tcp://), checked before anything connects; else one line naming --address."""
    from urllib.parse import urlsplit

    a = str(address).strip()
    shown = short(a, 80)
    expected = "expected a Dask scheduler's address, tcp://HOST:PORT (e.g. tcp://10.0.0.1:8786)"
    scheme, sep, rest = a.partition("://")
    if not sep:
        scheme, rest = "tcp", a
    if scheme.lower() not in DASK_SCHEMES:
        raise ConfigError(f"--address {shown}: {short(scheme, 20)}:// is not a Dask protocol ({expected}; "
                          f"or {', '.join(s + '://' for s in DASK_SCHEMES[1:])})")
    try:
        u = urlsplit("//" + rest)
        host, port = u.hostname, u.port
    except ValueError:
        host = port = None
    if not host or port is None or u.path or u.query or u.fragment or any(c.isspace() for c in rest):
        raise ConfigError(f"--address {shown}: {expected}")
    return f"{scheme.lower()}://{rest}"


def _reach(address: str, timeout: float) -> None:
    """Connect to the scheduler at ``address`` and shake hands (distributed's own comm), all
    within ``timeout`` seconds: an unroutable host, a port that accepts and says nothing (where
    the handshake waits forever) or something else than Dask answering there is one line."""
    import asyncio
    import socket
    from concurrent.futures import ThreadPoolExecutor
    from urllib.parse import urlsplit

    from distributed.comm import connect
    from distributed.security import Security

    u = urlsplit(address)
    if u.scheme != "ucx":  # tcp, tls, ws, wss run on TCP
        try:  # the host first, plainly: a closed port says so at once (Dask's connect retries it for the whole timeout)
            socket.create_connection((u.hostname, u.port), timeout=timeout).close()
        except (socket.timeout, TimeoutError):
            raise ConfigError(f"--address {address}: no Dask scheduler answered within {timeout:g} s") from None
        except OSError as e:
            raise ConfigError(f"--address {address}: cannot reach a Dask scheduler there ({e.strerror or e})") from None
    args = Security().get_connection_args("client")  # TLS as dask's config sets it (Client's default too)

    async def probe():
        comm = await asyncio.wait_for(connect(address, timeout=timeout, **args), timeout)
        await comm.close()

    with ThreadPoolExecutor(1) as one:  # a loop of its own, even when the caller runs one (a notebook)
        try:
            one.submit(asyncio.run, probe()).result()
        except (asyncio.TimeoutError, TimeoutError):
            raise ConfigError(f"--address {address}: no Dask scheduler answered within {timeout:g} s") from None
        except MemoryError:  # the handshake read a length off what is not Dask's protocol (3 EiB, once)
            raise ConfigError(f"--address {address}: what answers there does not speak Dask's protocol") from None
        except Exception as e:  # noqa: BLE001 - OSError, a closed stream, a TLS error: all 'cannot reach'
            if "Timed out" in str(e):
                raise ConfigError(f"--address {address}: no Dask scheduler answered within {timeout:g} s") from None
            raise ConfigError(f"--address {address}: cannot reach a Dask scheduler there ({short(str(e), 200)})") from None


def _dask(qs: list[dict], address: str, tick) -> list[dict]:
    """The answers on a Dask cluster (dask.distributed, the optional extra cmperf[study-dask])."""
    address = dask_address(address)
    try:
        from distributed import Client, as_completed
    except ImportError:
        raise ConfigError("--executor dask needs dask.distributed, an optional extra: pip install 'cmperf[study-dask]'") from None
    _reach(address, CONNECT_TIMEOUT_S)
    try:
        client = Client(address, timeout=CONNECT_TIMEOUT_S)
    except (OSError, TimeoutError) as e:
        raise ConfigError(f"--address {address}: cannot reach a Dask scheduler there ({short(str(e), 200)})") from None
    try:
        futures = client.map(answer, qs, pure=False)
        where: dict[Any, list[int]] = {}  # a future's key -> the positions it answers (one each unless keys repeat)
        for i, f in enumerate(futures):
            where.setdefault(f.key, []).append(i)
        unique = list({f.key: f for f in futures}.values())

        def answered():
            for f in as_completed(unique):
                row = f.result()
                for i in where[f.key]:
                    yield i, dict(row)  # a row of its own for each (a repeated key answers identical questions)

        return in_order(qs, answered(), tick)
    finally:
        client.close()
