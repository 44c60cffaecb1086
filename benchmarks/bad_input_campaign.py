"""A campaign of generated bad inputs (issue 11): every case of tests/bad_inputs.py run as its
own ``cmperf`` process with a timeout, judged and counted: clear errors, unclear errors,
tracebacks, hangs, silent acceptances, bad outputs (NaN/inf/negative) and legitimate runs.

    python benchmarks/bad_input_campaign.py [--jobs 2] [--timeout 20] [--show KIND]

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

from bad_inputs import csv_cases, flag_cases, judge, output_cases, reference_cases, spec_file_cases  # noqa: E402

GOOD = ("clear error", "ok")


def run(exe: str, argv: list[str], timeout: float, cwd: Path) -> tuple:
    try:
        r = subprocess.run([exe, *argv], capture_output=True, text=True, timeout=timeout, cwd=cwd,
                           errors="replace")
        return r.returncode, r.stdout, r.stderr
    except subprocess.TimeoutExpired:
        return "timeout", "", ""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=20.0)
    ap.add_argument("--show", default="", help="print the cases judged KIND (e.g. 'clear error') with their line")
    args = ap.parse_args()
    exe = shutil.which("cmperf") or str(Path(sys.executable).parent / "cmperf")
    tmp = Path(tempfile.mkdtemp(prefix="cmperf-campaign-"))
    good_csv = tmp / "good.csv"
    subprocess.run([exe, "search", "decode", "--tpot-slo", "50", "--batch", "8:64:8", "--out", str(good_csv), "-f", "json"],
                   capture_output=True, check=True)
    (tmp / "out").mkdir()
    cases = [*flag_cases(), *spec_file_cases(tmp / "specs"), *reference_cases(tmp),
             *csv_cases(tmp, good_csv), *output_cases(tmp / "out")]
    t0 = time.perf_counter()
    with ThreadPoolExecutor(args.jobs) as pool:
        results = list(pool.map(lambda c: run(exe, c[1], args.timeout, tmp), cases))
    verdicts = [judge(expect, *res) for (_, _, expect), res in zip(cases, results)]
    counts = Counter(verdicts)
    by_kind = Counter((name.split(":")[0].split(" ")[0], v) for (name, _, _), v in zip(cases, verdicts))
    for (name, argv, _), v, (code, out, err) in zip(cases, verdicts, results):
        if v not in GOOD or v == args.show:
            line = (err.strip().splitlines() or [""])[-1][:200]
            print(f"{v:18s} {name[:70]:70s} exit {code}: {line}")
    print(f"\n{len(cases)} cases in {time.perf_counter() - t0:.0f} s: " + ", ".join(f"{n} {k}" for k, n in counts.most_common()))
    print("by kind:", ", ".join(f"{k}/{v}: {n}" for (k, v), n in sorted(by_kind.items())))
    leftovers = [p for p in (tmp / "out").iterdir() if p.name.startswith(".")]
    print(f"temporary files left in the output directory: {len(leftovers)}")
    shutil.rmtree(tmp, ignore_errors=True)
    return 0 if all(v in GOOD for v in verdicts) and not leftovers else 1


if __name__ == "__main__":
    sys.exit(main())
