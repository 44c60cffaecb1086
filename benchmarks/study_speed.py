"""Speed-up of `cmperf study`'s local process pool over answering serially, on a 200-question
study (2 systems x 5 budgets x 5 workloads x 2 SLOs x 2 what-ifs, PD plans): prints both times,
the questions per second and the speed-up, and checks the answers are identical.

    python benchmarks/study_speed.py                 # 200 questions, pool of 2 (the machine's 2 cores)
    python benchmarks/study_speed.py --questions 40 --workers 2
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

STUDY = """
title: study speed
hardware: [cloudmatrix384, h100-cluster]
npus: [32, 48, 64, 96, 128]
workload:
  - {prompt_len: 4096, output_len: 256}
  - {prompt_len: 2000, output_len: 100}
  - {prompt_len: 1024, output_len: 512}
  - {prompt_len: 8192, output_len: 256}
  - {prompt_len: "4096:8192", output_len: "exp:256"}
slo:
  - {ttft_ms: 2000, tpot_ms: 50}
  - {ttft_ms: 5000, tpot_ms: 100}
set:
  - {}
  - {chip.die.hbm_bandwidth_Bps: 4.0e12}
shapes: [pd]
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--questions", type=int, default=200, help="answer the first N questions of the grid")
    ap.add_argument("--workers", type=int, default=2, help="processes of the local pool")
    args = ap.parse_args()
    import pandas as pd

    from cmperf import study

    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "study.yaml"
        path.write_text(STUDY)
        s = study.load(str(path))
    s.questions = s.questions[: args.questions]
    t0 = time.perf_counter()
    serial = study.run(s, "serial")
    t_serial = time.perf_counter() - t0
    t0 = time.perf_counter()
    pool = study.run(s, "local", workers=args.workers)
    t_pool = time.perf_counter() - t0
    pd.testing.assert_frame_equal(pool, serial, check_exact=True)
    n = len(s.questions)
    print(f"{n} questions ({int((serial['error'] == '').sum())} answered)")
    print(f"serial:              {t_serial:7.1f} s  ({n / t_serial:5.2f} questions/s)")
    print(f"local pool of {args.workers}:     {t_pool:7.1f} s  ({n / t_pool:5.2f} questions/s)")
    print(f"speed-up over serial: {t_serial / t_pool:.2f}x (answers identical)")


if __name__ == "__main__":
    main()
