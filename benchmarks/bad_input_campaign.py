"""A campaign of generated bad inputs (issues 11 and 17): every case of tests/bad_inputs.py run
as its own ``cmperf`` process with a timeout, judged and counted: clear errors, unclear errors,
tracebacks, hangs, silent acceptances, bad outputs (NaN/inf/negative), files left behind and
legitimate runs; a case that must warn ("warning") and does not is a silent acceptance. Issue 23's
families (--round3): simulate's traffic flags, stack limits, deployment shapes and files, serving
files, traces, plot names, model contexts. Issue 33's (--round4): one boundary per input kind
(plan's --verify-prompts, a deployment larger than the system, trace rows out of arrival order,
a system file without a required floor or deployment size, a deployment file's group without dies,
a serving fit: path the stack lacks); and (--writers) every writer over a user's file (which must
stay byte for byte), two flags on one file, bad export targets. Issue 17's families: plan flags and traces, compare set-ups (--with/--config),
config.json imports, absurd what-ifs, reference files, output streams and encodings, signals
(SIGINT/TERM/HUP sent while --out is written) and a corrupted spec cache (the answer must be
the uncached one).

    python benchmarks/bad_input_campaign.py [--jobs 2] [--timeout 60] [--show KIND] [--new-only | --round3 | --round4 | --writers]

Exit 1 if any case is a traceback, hang, unclear error, silent acceptance or bad output.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from bad_inputs import (compare_cases, csv_cases, environment_cases, flag_cases, hf_cases, judge,  # noqa: E402
                        output_cases, plan_cases, reference_cases, reference_file_cases, round3_file_cases,
                        round3_flag_cases, round4_cases, spec_file_cases, what_if_cases, writer_cases)

GOOD = ("clear error", "ok")


def run(exe: str, argv: list[str], timeout: float, cwd: Path, opts: dict | None = None) -> tuple:
    """(exit code or 'timeout', stdout, stderr) of one case, with its runner options (see
    tests/bad_inputs.py: env, stdout, signal, cache)."""
    import os
    import signal as signals

    opts = opts or {}
    env = {**os.environ, **opts.get("env", {})}
    if "cache" in opts:
        env["XDG_CACHE_HOME"] = opts["cache_dir"]
    stdout = subprocess.PIPE
    full = None
    if opts.get("stdout") == "full":
        full = open("/dev/full", "w")
        stdout = full
    preexec = (lambda: os.close(1)) if opts.get("stdout") == "closed" else None
    try:
        p = subprocess.Popen([exe, *argv], stdout=None if preexec else stdout, stderr=subprocess.PIPE, text=True, cwd=cwd,
                             errors="replace", env=env, preexec_fn=preexec, start_new_session=True)
        if "signal" in opts:
            name, after = opts["signal"]
            try:
                p.wait(timeout=after)
            except subprocess.TimeoutExpired:
                p.send_signal(getattr(signals, name))
        out, err = p.communicate(timeout=timeout)
        return p.returncode, out or "", err
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signals.SIGKILL)
        p.communicate()
        return "timeout", "", ""
    finally:
        if full is not None:
            full.close()


def corrupt_cache(exe: str, folder: Path, how: str) -> None:
    """Fill a cache folder with a first run, then corrupt every entry ``how``."""
    import os

    import json

    subprocess.run([exe, "predict", "decode", "-f", "json"], capture_output=True, env={**os.environ, "XDG_CACHE_HOME": str(folder)})
    for p in (folder / "cmperf").iterdir():
        if how == "valid JSON lie" and p.name.startswith("chip-"):
            head, _, body = p.read_text().partition("\n")
            obj = json.loads(body)
            obj["die"]["hbm_bandwidth_Bps"]["value"] = -1.6e12
            p.write_text(head + "\n" + json.dumps(obj))
        elif how == "wrong type":
            p.write_text(p.read_text().replace("1600000000000.0", '"fast"'))
        elif how == "truncated":
            p.write_bytes(p.read_bytes()[: len(p.read_bytes()) // 2])
        elif how == "binary":
            p.write_bytes(os.urandom(2000))
        elif how == "empty":
            p.write_bytes(b"")
        elif how in ("FIFO", "folder", "link to /dev/zero"):
            p.unlink()
            os.mkfifo(p) if how == "FIFO" else p.mkdir() if how == "folder" else p.symlink_to("/dev/zero")


def judge_case(case: tuple, res: tuple, truth: str) -> str:
    """judge() of tests/bad_inputs.py, and the runner's own kinds: an interrupted run (one line,
    exit 128 + the signal, nothing left behind, the old file kept) and a cache case (the
    uncached answer)."""
    name, argv, expect = case[:3]
    opts = case[3] if len(case) > 3 else {}
    code, out, err = res
    if code == "timeout":
        return "hang"
    if expect == "interrupted":
        import signal as signals

        sig = getattr(signals, opts["signal"][0])
        left = sorted(p.name for p in Path(opts["leftovers"]).iterdir())
        kept = (Path(opts["leftovers"]) / "f.csv").read_text() == "old\n"
        if "Traceback" in err:
            return "traceback"
        if left != ["f.csv"]:
            return "left behind"
        if code == 128 + sig and err.strip().splitlines()[-1:] == [f"cmperf: interrupted ({opts['signal'][0]})"] and kept:
            return "clear error"
        return "ok" if code == 0 and kept is False else "unclear error"  # finished before the signal: a legitimate run
    if "kept" in opts:  # a user's files: refused (one line) and left byte for byte
        from bad_inputs import USERS_BYTES

        if any(not Path(f).is_file() or Path(f).read_bytes() != USERS_BYTES for f in opts["kept"]):
            return "destroyed a user's file"
    if expect == "same":
        if "Traceback" in err or code != 0:
            return "traceback" if "Traceback" in err else "unclear error"
        return "ok" if out == truth else "silent acceptance"
    return judge(expect, code, out, err)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=60.0)
    ap.add_argument("--show", default="", help="print the cases judged KIND (e.g. 'clear error') with their line")
    ap.add_argument("--new-only", action="store_true", help="only issue 17's families (plan, compare, config.json, "
                                                             "what-ifs, reference files, streams, signals, the cache)")
    ap.add_argument("--round3", action="store_true", help="only issue 23's families (simulate's traffic flags, stack limits, "
                                                          "deployments, serving files, traces, plot names, model contexts)")
    ap.add_argument("--round4", action="store_true", help="only issue 33's families (--verify-prompts, deployments larger "
                                                          "than the system, trace arrival order, required spec entries, fit: paths)")
    ap.add_argument("--writers", action="store_true", help="only issue 33's family: every writer over a user's file, "
                                                            "two flags on one file, bad export targets")
    args = ap.parse_args()
    exe = shutil.which("cmperf") or str(Path(sys.executable).parent / "cmperf")
    tmp = Path(tempfile.mkdtemp(prefix="cmperf-campaign-"))
    good_csv = tmp / "good.csv"
    subprocess.run([exe, "search", "decode", "--tpot-slo", "50", "--batch", "8:64:8", "--out", str(good_csv), "-f", "json"],
                   capture_output=True, check=True)
    (tmp / "out").mkdir()
    old = [*flag_cases(), *spec_file_cases(tmp / "specs"), *reference_cases(tmp), *csv_cases(tmp, good_csv),
           *output_cases(tmp / "out")]
    new = [*plan_cases(tmp / "plan"), *compare_cases(tmp / "compare"), *hf_cases(tmp / "hf"), *what_if_cases(),
           *reference_file_cases(tmp / "refs"), *environment_cases(tmp / "env")]
    round3 = [*round3_flag_cases(), *round3_file_cases(tmp / "round3")]
    round4 = round4_cases(tmp / "round4")
    writers = writer_cases(tmp / "writers")
    cases = (writers if args.writers else round4 if args.round4 else round3 if args.round3 else new if args.new_only
             else [*old, *new, *round3, *round4, *writers])
    import os

    truth = subprocess.run([exe, "predict", "decode", "-f", "json"], capture_output=True, text=True,
                           env={**os.environ, "CMPERF_NO_CACHE": "1"}).stdout
    for i, c in enumerate(cases):
        if len(c) > 3 and "cache" in c[3]:
            folder = tmp / f"cache-{i}"
            corrupt_cache(exe, folder, c[3]["cache"])
            c[3]["cache_dir"] = str(folder)
    t0 = time.perf_counter()
    with ThreadPoolExecutor(args.jobs) as pool:
        results = list(pool.map(lambda c: run(exe, c[1], args.timeout, tmp, c[3] if len(c) > 3 else None), cases))
    verdicts = [judge_case(c, res, truth) for c, res in zip(cases, results)]
    counts = Counter(verdicts)
    by_kind = Counter((c[0].split(":")[0].split(" ")[0], v) for c, v in zip(cases, verdicts))
    for (name, argv, *_), v, (code, out, err) in zip(cases, verdicts, results):
        if v not in GOOD or v == args.show:
            line = (err.strip().splitlines() or [""])[-1][:200]
            print(f"{v:18s} {name[:70]:70s} exit {code}: {line}")
    print(f"\n{len(cases)} cases in {time.perf_counter() - t0:.0f} s: " + ", ".join(f"{n} {k}" for k, n in counts.most_common()))
    print("by kind:", ", ".join(f"{k}/{v}: {n}" for (k, v), n in sorted(by_kind.items())))
    dirs = [tmp / "out", *(Path(c[3]["leftovers"]) for c in cases if len(c) > 3 and "leftovers" in c[3])]
    leftovers = [p for d in dirs if d.is_dir() for p in d.iterdir() if p.name.startswith(".")]
    print(f"temporary files left in the output directories: {len(leftovers)}")
    shutil.rmtree(tmp, ignore_errors=True)
    return 0 if all(v in GOOD for v in verdicts) and not leftovers else 1


if __name__ == "__main__":
    sys.exit(main())
