"""cmperf study at its edges (issue 33): a killed study's workers die with it, every study file
is held to one schema (one line naming the file and the field, exit 2), a grid's size has a
stated limit, a Dask --address that is wrong or unreachable is one line within seconds, and
the answers come back one per question, in question order, whatever order they were
answered in."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from cmperf import study
from helpers import one_line_error

ROOT = Path(__file__).resolve().parents[1]

# the schema ---------------------------------------------------------------------------------

BASE = "hardware: cloudmatrix384\nnpus: 32\nshapes: pd\n"
BAD = [  # (file text, what the one line names)
    (BASE + "workload: {prompt_len: 2048, rate: fast}\n", ["workload[0].rate", "fast"]),
    (BASE + "simulate: {seed: x}\n", ["simulate.seed", "'x'"]),
    (BASE + "simulate: {seed: -1}\n", ["simulate.seed"]),
    (BASE + "simulate: {seeds: 1}\n", ["simulate", "seeds", "did you mean 'seed'"]),
    (BASE + "simulate: {num_prompts: 5}\n", ["simulate.num_prompts"]),
    (BASE + "simulate: {num_prompts: 100.5}\n", ["simulate.num_prompts"]),
    (BASE + "simulate: {warmup: 1}\n", ["simulate.warmup"]),
    ("hardwre: cloudmatrix384\n", ["hardwre", "did you mean 'hardware'"]),
    ("npus: ['64']\n", ["npus[0]", "'64'"]),
    ("npus: [32, true]\n", ["npus[1]"]),
    ("npus: [32, 0]\n", ["npus[1]", ">= 1"]),
    ("hardware: [cloudmatrix384, 7]\n", ["hardware[1]"]),
    ("hardware: ['']\n", ["hardware[0]"]),
    ("hardware: []\n", ["hardware", "empty list"]),
    ("workload: [{promt_len: 1}]\n", ["workload[0]", "promt_len", "did you mean 'prompt_len'"]),
    ("workload: {prompt_len: lots}\n", ["workload[0].prompt_len", "lots"]),
    ("workload: {output_len: 0}\n", ["workload[0].output_len"]),
    ("workload: {prefix_hit: 1.5}\n", ["workload[0].prefix_hit", "1.5"]),
    ("workload: {prefix_hit: '0.5'}\n", ["workload[0].prefix_hit", "'0.5'"]),
    ("workload: {rate: -3}\n", ["workload[0].rate"]),
    ("slo: {ttft_ms: 0}\n", ["slo[0].ttft_ms"]),
    ("slo: [{}, {ttft_stat: p99}]\n", ["slo[1].ttft_stat", "p99"]),
    ("slo: {tpot: 50}\n", ["slo[0]", "tpot", "did you mean 'tpot_ms'"]),
    ("set: [{chip.die.hbm_bandwidth_Bps: [1, 2]}]\n", ["set[0]", "chip.die.hbm_bandwidth_Bps"]),
    ("set: fast\n", ["set[0]"]),
    ("shapes: [pd, pdd]\n", ["shapes[1]", "pdd"]),
    ("title: [a]\n", ["title"]),
    ("- a\n- b\n", ["expected a mapping"]),
]


@pytest.mark.parametrize("text,names", BAD, ids=[b[1][0] for b in BAD])
def test_a_study_file_that_breaks_the_schema_is_one_line(cli, tmp_path, text, names):
    f = tmp_path / "s.yaml"
    f.write_text(text)
    code, out, err = cli("study", str(f), "--executor", "serial")
    one_line_error(code, err, str(f), *names)
    assert out == ""


def test_the_schema_keeps_what_the_file_says(tmp_path):
    """A file within the schema asks the questions it says, values as written (single values
    for lists of one, shapes as a comma list)."""
    f = tmp_path / "s.yaml"
    f.write_text("hardware: cloudmatrix384\nnpus: [32, null]\nworkload: {prompt_len: '2048:4096', rate: 2}\n"
                 "slo: {ttft_ms: 1500}\nset: [{}, {chip.die.hbm_bandwidth_Bps: 3.2e12}]\nshapes: pd, colocated\n"
                 "simulate: {num_prompts: 100, seed: 3}\n")
    s = study.load(str(f))
    assert len(s.questions) == 4
    q = s.questions[3]
    assert q["npus"] is None and q["workload"] == {"prompt_len": "2048:4096", "rate": 2} and q["slo"] == {"ttft_ms": 1500}
    assert q["set"] == {"chip.die.hbm_bandwidth_Bps": 3.2e12} and q["shapes"] == ["pd", "colocated"]
    assert q["simulate"] == {"num_prompts": 100, "seed": 3} and q["question"] == 3


def test_a_grid_has_a_stated_limit(cli, tmp_path):
    """Above --max-questions (default MAX_QUESTIONS) a grid is refused, naming the flag that
    lifts it; the flag lifts it (to HARD_MAX_QUESTIONS at most)."""
    n = study.MAX_QUESTIONS + 1
    f = tmp_path / "big.yaml"
    f.write_text(f"npus: [{', '.join(str(i) for i in range(1, n + 1))}]\n")
    code, out, err = cli("study", str(f))
    line = one_line_error(code, err, str(f), f"{n:,} questions", f"--max-questions {n}")
    assert f"{study.MAX_QUESTIONS:,}" in line
    assert len(study.load(str(f), max_questions=n).questions) == n
    for bad in ("0", str(study.HARD_MAX_QUESTIONS + 1)):
        code, out, err = cli("study", str(f), "--max-questions", bad)
        one_line_error(code, err, "--max-questions")


def test_a_long_study_off_a_terminal_says_how_far_it_is(capsys):
    """Off a terminal a long run says once that it runs, then every ``every_s`` how far."""
    from cmperf.cli.progress import MEASURE_S, ProgressBar

    now = [0.0]
    bar = ProgressBar("answering questions", every_s=60, clock=lambda: now[0])
    total = 100_000
    for done in range(1, total + 1, 50):
        now[0] = done * 0.02  # 2,000 s in all
        bar(done, total)
    bar.close()
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines[0].startswith("cmperf: answering questions:") and "2,000 s in all" in lines[0], lines[0]
    assert MEASURE_S <= 11 and 30 <= len(lines) <= 34, lines  # once at 10 s, then each minute of the 2,000 s
    assert "of 100,000" in lines[-1] and "s left" in lines[-1]
