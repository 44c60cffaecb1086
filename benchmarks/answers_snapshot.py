"""A snapshot of cmperf's answers, to hold a speed change to "outputs identical to the bit".

    python benchmarks/answers_snapshot.py save /tmp/before.pkl     # on the code before
    python benchmarks/answers_snapshot.py compare /tmp/before.pkl  # on the code after

The set (~1,500 answers, about a minute): decode and prefill on every system x model at their
defaults, single calls over a walk of batches, prompt lengths, KV lengths, acceptances and
chunks (each call alone, warm: the path a notebook's loop of single calls takes, twice, so a
second call reads what the first kept), a few grids, AFD, the kernel phases, spec sweeps,
extreme ``--set`` values, the ``--breakdown`` records of single and grid rows, and two small
searches. Every answer is the prediction's columns (or the error it raised); ``compare``
prints each answer that differs (numbers compared bit for bit, NaN equal to NaN) and exits 1
if any does.
"""

from __future__ import annotations

import pickle
import sys
import time

import numpy as np


def answers() -> dict:
    from cmperf.errors import CmperfError
    from cmperf.predict import load_specs, predict, system_model
    from cmperf.search import search
    from cmperf.specs.loader import list_builtin

    out: dict = {}

    def put(key, fn):
        try:
            r = fn()
        except CmperfError as e:
            out[key] = f"error: {e}"
            return None
        if hasattr(r, "columns") and hasattr(r, "invalid_columns"):
            out[key] = {c: np.asarray(r.columns[c]) for c in r.columns.columns}
            out[key + ("invalid",)] = {c: np.asarray(r.invalid_columns[c]) for c in r.invalid_columns.columns}
        else:
            out[key] = r
        return r

    def breakdown(key, r, rows):
        for i in rows:
            if r is not None and i < len(r.columns):
                put(key + ("breakdown", i), lambda: r.breakdown_records(i))

    systems = [n for n, _ in list_builtin("system")]
    models = [n for n, _ in list_builtin("model")]
    for system in systems:
        for model in models:
            try:
                specs = load_specs(system, model)
            except CmperfError:
                continue
            own = model == system_model(system)
            for rep in range(2 if own else 1):
                r = put((system, model, "decode", rep), lambda: predict("decode", {}, specs, strict=False))
                if rep == 0:
                    breakdown((system, model, "decode"), r, [0])
            if own or system == "cloudmatrix384":
                r = put((system, model, "prefill"), lambda: predict("prefill", {}, specs, strict=False))
                breakdown((system, model, "prefill"), r, [0])
            if own:
                for b in (1, 3, 16, 64, 97, 256, 1024):
                    for mb in (None, 1, 2):
                        put((system, model, "decode", "batch", b, mb),
                            lambda: predict("decode", {"batch": b, "microbatches": mb}, specs, strict=False))
                for kv in (128, 4096, 100000):
                    put((system, model, "decode", "kv", kv), lambda: predict("decode", {"kv_len": kv}, specs, strict=False))
                for p in (512, 2048, 8192, 32768):
                    put((system, model, "prefill", "p", p), lambda: predict("prefill", {"prompt_len": p}, specs, strict=False))
                put((system, model, "decode", "grid"),
                    lambda: predict("decode", {"batch": [1, 8, 96], "microbatches": [0, 1, 2]}, specs, strict=False))
                put((system, model, "afd"), lambda: predict("afd", {}, specs, strict=False))
                for phase in ("gemm", "attention", "collective"):
                    put((system, model, phase), lambda: predict(phase, {}, specs, strict=False))
    cm = load_specs("cloudmatrix384")
    for b in range(1, 257, 5):  # the benchmark's walk, each call alone (replayed), and its breakdowns
        r = put(("cm", "walk", b), lambda: predict("decode", {"batch": b}, cm))
        if b % 50 == 1:
            breakdown(("cm", "walk", b), r, [0])
    for p in range(512, 8193, 1280):
        r = put(("cm", "walk-prefill", p), lambda: predict("prefill", {"prompt_len": p}, cm))
        breakdown(("cm", "walk-prefill", p), r, [0])
    for a in (0.0, 0.5, 0.7, 1.0):
        for k in (1, 2, 3):
            put(("cm", "mtp", a, k), lambda: predict("decode", {"mtp_acceptance": a, "mtp_k": k}, cm, strict=False))
    for c in (0, 256, 4096):
        for b in (8, 64):
            r = put(("cm", "chunk", c, b), lambda: predict("decode", {"chunk_tokens": c, "batch": b}, cm, strict=False))
            breakdown(("cm", "chunk", c, b), r, [0])
    for share in (0.3, 0.5, 2 / 3):
        put(("cm", "share", share), lambda: predict("decode", {"attention_share": share, "microbatches": 2}, cm, strict=False))
    for imb in (1.0, 1.3, "default"):
        put(("cm", "imbalance", imb), lambda: predict("decode", {"expert_imbalance": imb}, cm, strict=False))
    for tp in (1, 2, 4, 8):
        put(("cm", "tp", tp), lambda: predict("decode", {"tp": tp, "batch": 32}, cm, strict=False))
    for cached in (0, 1024, 3000):
        put(("cm", "cached", cached), lambda: predict("prefill", {"cached_len": cached}, cm, strict=False))
    for t in (1024, 4096, 65536):
        put(("cm", "tokens", t), lambda: predict("prefill", {"tokens_per_npu": t}, cm, strict=False))
    r = put(("cm", "grid"), lambda: predict("decode", {"batch": [4, 64, 128], "microbatches": [1, 2]}, cm, strict=False))
    breakdown(("cm", "grid"), r, [0, 3, 5])
    put(("cm", "sweep"), lambda: predict("decode", {"batch": 64}, cm,
                                         sweeps={"system.tiers.ub.bandwidth_Bps": [50e9, 135e9, 270e9]}, strict=False))
    put(("cm", "rows"), lambda: predict("decode", rows=[{"batch": 8}, {"batch": 64, "tp": 2}], specs=cm, strict=False))
    extremes = [["chip.die.hbm_bandwidth_Bps=1e-300"], ["chip.die.hbm_bandwidth_Bps=1e300"],
                ["system.tiers.ub.bandwidth_Bps=1e-3"], ["chip.latency.kernel_launch_s=0"],
                ["chip.die.vector_ops_per_s=1e30"], ["system.collectives.step_time_cv=0"]]
    for sets in extremes:
        try:
            s = load_specs("cloudmatrix384", sets=sets)
        except CmperfError as e:
            out[("set", *sets)] = f"error: {e}"
            continue
        for phase in ("decode", "prefill"):
            for rep in range(2):
                put(("set", *sets, phase, rep), lambda: predict(phase, {}, s, strict=False))
    for phase, values in (("decode", {"batch": list(range(8, 257, 8)), "microbatches": [1, 2]}),
                          ("prefill", {"tokens_per_npu": [4096, 16384], "microbatches": [1, 2]})):
        res = search(phase, values, slo_ms=50 if phase == "decode" else 2000, specs=cm)
        out[("search", phase)] = {c: np.asarray(res.table[c]) for c in res.table.columns}
    return out


def same(a, b) -> bool:
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        a, b = np.asarray(a), np.asarray(b)
        if a.shape != b.shape or a.dtype != b.dtype:
            return False
        return bool(np.array_equal(a, b, equal_nan=a.dtype.kind in "fc"))
    if isinstance(a, float) and isinstance(b, float):
        return a == b or (a != a and b != b)
    return a == b


def save_or_compare(make, noun: str, differences) -> int:
    """The command line of a snapshot script: ``save PATH`` pickles ``make()``'s answers,
    ``compare PATH`` prints ``differences(before, now)`` (printable items, at most 40 shown)
    and exits 1 when there is any; ``noun`` names what is counted."""
    if len(sys.argv) != 3 or sys.argv[1] not in ("save", "compare"):
        print(sys.modules["__main__"].__doc__)
        return 2
    t = time.process_time()
    now = make()
    took = time.process_time() - t
    if sys.argv[1] == "save":
        with open(sys.argv[2], "wb") as f:
            pickle.dump(now, f)
        print(f"{len(now)} {noun} saved to {sys.argv[2]} ({took:.0f} s CPU)")
        return 0
    with open(sys.argv[2], "rb") as f:
        before = pickle.load(f)
    differ = differences(before, now)
    for item in differ[:40]:
        print("differs:", item)
    print(f"{len(now)} {noun} compared ({took:.0f} s CPU): {len(differ)} differ")
    return 1 if differ else 0


def main() -> int:
    return save_or_compare(answers, "answers", lambda before, now: sorted(
        (k for k in before.keys() | now.keys() if k not in now or k not in before or not same(before[k], now[k])), key=repr))


if __name__ == "__main__":
    sys.exit(main())
