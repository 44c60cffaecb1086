"""A snapshot of what ``cmperf plan`` answers, to hold a change of the planner's speed to the
same answers (docs/model.md §9).

    python benchmarks/plan_snapshot.py save SNAPSHOT.pkl      # every case below, planned
    python benchmarks/plan_snapshot.py check SNAPSHOT.pkl     # planned again, compared

The cases: every shipped system x model from their own defaults (``--format json``, as
benchmarks/plan_matrix.py plans them) and a few dozen plans with flags (budgets, length
distributions, prefix hits, shapes, rates, a p90 SLO, sweeps and lists, given deployments,
``--deployment`` round trips of exported plans, ``--verify``) and ``cmperf study``. Each is run
in this process as the command line runs it; kept: its exit code, stdout, stderr, the CSV of
every deployment evaluated (``--out``) and the plan's whole table (the ``_`` columns too).
``check`` prints each case that differs, with the largest relative difference of its numbers
(and whether the best deployment is another), and exits 1 when any does.
"""

from __future__ import annotations

import math
import os
import pickle
import re
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(os.environ.get("CMPERF_REPO", Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from plan_matrix import run_cli  # noqa: E402  (the command line in this process)

FLAGGED = {
    "npus64": ["--npus", "64"],
    "cm384-npus1536-vpc": ["--npus", "1536", "--kv-tier", "vpc"],
    "h100-llama-16": ["--hardware", "h100-cluster", "--model", "llama-3.1-70b", "--npus", "16"],
    "h800-lognormal": ["--hardware", "h800-cluster", "--prompt-len", "4096:8192"],
    "a950-exp": ["--hardware", "atlas-950-superpod", "--prompt-len", "exp:2000", "--output-len", "512:1024"],
    "gb200-lognormal": ["--hardware", "gb200-nvl72", "--prompt-len", "2000:4000", "--npus", "36"],
    "cm384-hit": ["--prefix-hit", "0.5"],
    "cm384-hit-ws": ["--prefix-hit", "0.5", "--working-set-tokens", "1e9"],
    "cm384-hit-spread": ["--prefix-hit", "0.3:1", "--prompt-len", "4096:8192", "--npus", "128"],
    "h800-hit": ["--hardware", "h800-cluster", "--prefix-hit", "0.4"],
    "h800-pd-afd": ["--hardware", "h800-cluster", "--shapes", "pd,afd"],
    "h100-colo-rate": ["--hardware", "h100-cluster", "--shapes", "colocated", "--rate", "100"],
    "gb200-rate": ["--hardware", "gb200-nvl72", "--rate", "200"],
    "h200-rate": ["--hardware", "h200-cluster", "--rate", "30"],
    "h200-p90": ["--hardware", "h200-cluster", "--ttft-stat", "p90"],
    "a950-p90": ["--hardware", "atlas-950-superpod", "--ttft-stat", "p90", "--npus", "512"],
    "b200-slo": ["--hardware", "b200-cluster", "--ttft-slo", "800", "--tpot-slo", "30"],
    "cm384-sweep": ["--npus", "64", "--sweep", "system.tiers.ub.bandwidth_Bps=100e9,200e9"],
    "h800-rates": ["--hardware", "h800-cluster", "--rate", "5,max"],
    "cm384-given": ["--prefill", "6x32", "--decode", "1x160"],
    "h800-given": ["--hardware", "h800-cluster", "--prefill", "4x16", "--decode", "1x32"],
    "a950-stack-vllm": ["--hardware", "atlas-950-superpod", "--stack", "vllm-ascend", "--npus", "256"],
    "h100-stack-none": ["--hardware", "h100-cluster", "--stack", "none"],
    "mi300x-qwen-npus": ["--hardware", "mi300x-cluster", "--model", "qwen3-235b-a22b", "--npus", "40"],
}
ROUND_TRIPS = {  # plan --export DIR, then plan --deployment DIR/deployment.yaml (and --verify on two)
    "rt-cm384": ["--npus", "64"],
    "rt-h800": ["--hardware", "h800-cluster"],
    "rt-a950": ["--hardware", "atlas-950-superpod"],
    "rt-h100-llama": ["--hardware", "h100-cluster", "--model", "llama-3.1-70b", "--npus", "16"],
}
VERIFY = {
    "verify-h100-llama": ["--hardware", "h100-cluster", "--model", "llama-3.1-70b", "--npus", "16", "--verify",
                          "--verify-prompts", "1000"],
    "verify-h800-given": ["--hardware", "h800-cluster", "--prefill", "2x16", "--decode", "1x32", "--verify",
                          "--verify-prompts", "1000"],
}


def plan_case(args, tmp) -> dict:
    """One plan on the command line, its outputs and its plans' whole tables."""
    from cmperf.plan import planner

    tables = []
    real = planner.plan

    def kept(*a, **k):
        p = real(*a, **k)
        tables.append(p.table.copy())
        return p

    planner.plan = kept
    csv = Path(tmp) / "out.csv"
    if csv.exists():
        csv.unlink()
    try:
        code, out, err = run_cli("plan", *args, "--format", "json", "--out", str(csv))
    finally:
        planner.plan = real
    return {"code": code, "stdout": _stable(out), "stderr": _stable(err), "csv": _stable(csv.read_text()) if csv.exists() else None,
            "tables": tables}


def _stable(text: str) -> str:
    """Without what changes from run to run (the provenance's time, paths of temporary files)."""
    text = re.sub(r'"(created|date|time|timestamp|generated)[^"]*": "[^"]*"', r'"\1": ""', text)
    text = re.sub(r"# (created|date|time|generated)[^\n]*", "", text)
    return re.sub(r"/tmp/[^\s\",]*", "TMP", text)


def cases():
    from cmperf.specs.loader import list_builtin

    systems = [n for n, _ in list_builtin("system")]
    models = [n for n, _ in list_builtin("model")]
    for s in systems:
        for m in models:
            yield f"{s}/{m}", ["--hardware", s, "--model", m]
    yield from FLAGGED.items()
    yield from VERIFY.items()


def snapshot() -> dict:
    out = {}
    t0 = time.process_time()
    with tempfile.TemporaryDirectory() as tmp:
        for name, args in cases():
            t = time.process_time()
            out[name] = plan_case(args, tmp)
            out[name]["cpu_s"] = time.process_time() - t
            print(f"{name:<40} {out[name]['code']} {out[name]['cpu_s']:6.2f} s", flush=True)
        for name, args in ROUND_TRIPS.items():
            d = Path(tmp) / name
            first = plan_case([*args, "--export", str(d)], tmp)
            flags = [a for a, b in zip(args, args[1:] + [""]) if a in ("--hardware", "--model") for a in (a, b)]
            again = plan_case([*flags, "--deployment", str(d / "deployment.yaml")], tmp) if first["code"] == 0 else None
            ver = (plan_case([*flags, "--deployment", str(d / "deployment.yaml"), "--verify", "--verify-prompts", "800"], tmp)
                   if first["code"] == 0 and name in ("rt-h800", "rt-cm384") else None)
            out[name] = {"first": first, "again": again, "verify": ver}
            print(f"{name:<40} {first['code']}", flush=True)
        code, stdout, err = run_cli("study", str(REPO / "examples" / "study.yaml"), "--executor", "serial", "--format", "json")
        out["study"] = {"code": code, "stdout": _stable(stdout), "stderr": err}
    print(f"{len(out)} cases, {time.process_time() - t0:.1f} s of CPU")
    return out


NUMBER = re.compile(r"-?\d+\.?\d*(?:[eE][-+]?\d+)?")


def _text_diff(a: str, b: str) -> str:
    """'' when equal; else the largest relative difference of the numbers in the two texts."""
    if a == b:
        return ""
    x, y = NUMBER.findall(a or ""), NUMBER.findall(b or "")
    if NUMBER.sub("#", a or "") != NUMBER.sub("#", b or "") or len(x) != len(y):
        return "text differs"
    worst = max((abs(float(u) - float(v)) / max(abs(float(u)), abs(float(v)), 1e-300) for u, v in zip(x, y)), default=0.0)
    return f"numbers differ, at most {worst:.3g} relative"


def _table_diff(a, b) -> str:
    import numpy as np

    if len(a) != len(b):
        return f"{len(a)} vs {len(b)} tables"
    worst, why = 0.0, []
    for s, t in zip(a, b):
        if list(s.columns) != list(t.columns) or len(s) != len(t):
            why.append(f"shape {s.shape} vs {t.shape}")
            continue
        if len(s) and s.iloc[0].get("shape") is not None and (
                [s.iloc[0][k] for k in ("shape", "prefill_instances", "prefill_dies", "decode_instances", "decode_dies")
                 if k in s] != [t.iloc[0][k] for k in ("shape", "prefill_instances", "prefill_dies", "decode_instances",
                                                       "decode_dies") if k in t]):
            why.append("ANOTHER BEST DEPLOYMENT")
        for c in s.columns:
            u, v = s[c].to_numpy(), t[c].to_numpy()
            if u.dtype.kind in "fiu" and v.dtype.kind in "fiu":
                u, v = u.astype(float), v.astype(float)
                same = (u == v) | (np.isnan(u) & np.isnan(v))
                if not same.all():
                    with np.errstate(all="ignore"):
                        rel = np.abs(u - v) / np.maximum(np.maximum(np.abs(u), np.abs(v)), 1e-300)
                    rel = np.where(same, 0.0, np.where(np.isfinite(rel), rel, np.inf))  # inf against a number: inf
                    worst = max(worst, float(rel.max()))
            else:  # names, and cells that hold arrays (``_counts_s``: a row's pass times; NaN on co-located rows)
                for p, q in zip(u, v):
                    if np.ndim(p) or np.ndim(q):
                        pp, qq = np.asarray(p, dtype=float), np.asarray(q, dtype=float)
                        if pp.shape != qq.shape:
                            worst = math.inf
                        elif not np.array_equal(pp, qq, equal_nan=True):
                            with np.errstate(all="ignore"):
                                rel = np.abs(pp - qq) / np.maximum(np.maximum(np.abs(pp), np.abs(qq)), 1e-300)
                            same = (pp == qq) | (np.isnan(pp) & np.isnan(qq))
                            worst = max(worst, float(np.where(same, 0.0, np.where(np.isfinite(rel), rel, np.inf)).max()))
                    elif not (p == q or (p != p and q != q)):
                        why.append(f"column {c} differs")
                        break
    if worst:
        why.append(f"table numbers at most {worst:.3g} relative")
    return "; ".join(why)


def compare(old: dict, new: dict) -> list[str]:
    bad = []
    for name, a in old.items():
        b = new.get(name)
        if b is None:
            bad.append(f"{name}: missing")
            continue
        parts = [("", a, b)] if "first" not in a else [(k, a[k], b[k]) for k in ("first", "again", "verify")]
        for label, x, y in parts:
            if x is None or y is None:
                if (x is None) != (y is None):
                    bad.append(f"{name} {label}: one side missing")
                continue
            why = []
            if x["code"] != y["code"]:
                why.append(f"exit {x['code']} vs {y['code']}")
            for k in ("stdout", "stderr", "csv"):  # (stderr names the temporary directory of --export)
                d = _text_diff(*(None if z.get(k) is None else _stable(z[k]) for z in (x, y)))
                if d:
                    why.append(f"{k}: {d}")
            if "tables" in x:
                d = _table_diff(x["tables"], y["tables"])
                if d:
                    why.append(d)
            if why:
                bad.append(f"{name} {label}: " + "; ".join(why))
    return bad


def main() -> int:
    sys.path.insert(0, str(REPO))
    if len(sys.argv) != 3 or sys.argv[1] not in ("save", "check"):
        print(__doc__)
        return 2
    what, path = sys.argv[1], Path(sys.argv[2])
    new = snapshot()
    if what == "save":
        path.write_bytes(pickle.dumps(new))
        return 0
    old = pickle.loads(path.read_bytes())
    cpu = lambda s: sum(v.get("cpu_s", 0.0) for k, v in s.items() if "/" in k)  # noqa: E731
    print(f"default pairs: {cpu(old):.1f} s of CPU then, {cpu(new):.1f} s now")
    bad = compare(old, new)
    for line in bad:
        print(line)
    print(f"{len(old)} cases compared, {len(bad)} differ")
    return 1 if bad else 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    sys.exit(main())
