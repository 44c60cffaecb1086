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

# four questions of several seconds each (a long simulation): a pool of 2 is busy on two of them
LONG = """
hardware: cloudmatrix384
npus: [32, 33, 34, 35]
workload: {prompt_len: 2048, output_len: 128}
shapes: pd
simulate: {num_prompts: 200000}
"""


def _children(pid: int) -> list[int]:
    """The processes whose parent is ``pid`` (/proc on Linux)."""
    kids = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                stat = Path(f"/proc/{d}/stat").read_text()
            except OSError:
                continue
            if int(stat[stat.rindex(")") + 2:].split()[1]) == pid:
                kids.append(int(d))
    return kids


def _alive(pids: list[int]) -> list[int]:
    """Those of ``pids`` still running (a zombie, dead and not yet reaped, is not)."""
    out = []
    for p in pids:
        try:
            stat = Path(f"/proc/{p}/stat").read_text()
        except OSError:
            continue
        if stat[stat.rindex(")") + 2] not in "ZX":
            out.append(p)
    return out


def _start_long_study(tmp_path, *extra):
    """A `cmperf study --workers 2` subprocess busy on its questions; its workers' pids."""
    f = tmp_path / "long.yaml"
    f.write_text(LONG)
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    proc = subprocess.Popen([sys.executable, "-m", "cmperf.cli", "study", str(f), "--workers", "2", *extra],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    deadline = time.monotonic() + 30
    while len(_children(proc.pid)) < 2 and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.05)
    workers = _children(proc.pid)
    assert len(workers) >= 2, (workers, proc.poll())
    time.sleep(0.5)  # on their questions
    assert len(_alive(workers)) >= 2
    return proc, workers


def _gone_within(workers: list[int], seconds: float) -> tuple[list[int], float]:
    t0 = time.monotonic()
    while _alive(workers) and time.monotonic() - t0 < seconds:
        time.sleep(0.02)
    return _alive(workers), time.monotonic() - t0


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_kill_9_of_a_study_takes_its_workers_with_it(tmp_path):
    """kill -9 of `cmperf study --workers 2` mid-question: no worker of it is running 2 s later
    (before: both went on with their questions, 16 s and more), and --out still holds what it
    held (nothing is written before every question is answered)."""
    from cmperf.report import mark

    out = tmp_path / "answers.csv"
    old = f"# {mark()}\nold answers\n"  # an earlier study's (cmperf's own file: the study may replace it)
    out.write_text(old)
    proc, workers = _start_long_study(tmp_path, "--out", str(out))
    try:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
        alive, took = _gone_within(workers, 2.0)
        assert not alive, f"workers {alive} of the killed study still run {took:.1f} s later"
        assert out.read_text() == old
        assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".answers.csv")] == []
    finally:
        for p in _alive(workers):
            os.kill(p, signal.SIGKILL)
        proc.stderr.close()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_sigterm_ends_a_study_and_its_workers_at_once(tmp_path):
    """SIGTERM: exit 143 within seconds (before: the exit waited for the questions on the
    workers), one line, no worker left, no traceback."""
    proc, workers = _start_long_study(tmp_path)
    try:
        t0 = time.monotonic()
        os.kill(proc.pid, signal.SIGTERM)
        code = proc.wait(10)
        took = time.monotonic() - t0
        err = proc.stderr.read().decode()
        assert code == 128 + signal.SIGTERM and took < 4, (code, took, err)
        assert "Traceback" not in err and "interrupted (SIGTERM)" in err, err
        assert not _alive(workers)
    finally:
        for p in _alive(workers):
            os.kill(p, signal.SIGKILL)
        proc.stderr.close()


def test_a_worker_whose_parent_is_gone_ends():
    """The pool's initializer on a process whose parent already went: it ends at once."""
    r = subprocess.run([sys.executable, "-c", "from cmperf.study import _die_with; _die_with(-1); print('alive')"],
                       capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert r.returncode == 1 and "alive" not in r.stdout, (r.returncode, r.stdout, r.stderr)


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
    ("slo: [{}, {ttft_stat: p95}]\n", ["slo[1].ttft_stat", "p95"]),
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


# Dask addresses ---------------------------------------------------------------------------------

@pytest.fixture
def one_question(tmp_path):
    f = tmp_path / "s.yaml"
    f.write_text(BASE)
    return f


@pytest.mark.parametrize("address,names", [
    ("not a url", ["--address not a url", "tcp://HOST:PORT"]),
    ("http://127.0.0.1:1", ["--address http://127.0.0.1:1", "http:// is not a Dask protocol"]),
    ("tcp://127.0.0.1", ["--address tcp://127.0.0.1", "HOST:PORT"]),
    ("tcp://127.0.0.1:99999", ["--address tcp://127.0.0.1:99999"]),
    ("tcp://127.0.0.1:8786/path", ["--address"]),
])
def test_a_malformed_dask_address_is_one_line(cli, one_question, address, names):
    t0 = time.monotonic()
    code, out, err = cli("study", str(one_question), "--executor", "dask", "--address", address)
    one_line_error(code, err, *names)
    assert time.monotonic() - t0 < 5


def _closed_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def test_a_closed_port_is_one_line_at_once(cli, one_question):
    pytest.importorskip("distributed")
    address = f"tcp://127.0.0.1:{_closed_port()}"
    t0 = time.monotonic()
    code, out, err = cli("study", str(one_question), "--executor", "dask", "--address", address)
    one_line_error(code, err, f"--address {address}", "cannot reach")
    assert time.monotonic() - t0 < 3  # Dask's own connect retries a refused port for its whole timeout


@pytest.mark.parametrize("greeting", [None, b"\x03\x00\x00\x00\x00\x00\x00\x00" + b"\xff" * 64],
                         ids=["silent", "not-dask"])
def test_a_port_that_is_no_scheduler_is_one_line_within_the_timeout(cli, one_question, monkeypatch, greeting):
    """A port that accepts and then says nothing (as a host that drops the packets does, but
    here: Dask's handshake waits for it forever) or says what is not Dask's protocol (where a
    read length once asked numpy for 3 EiB): one line naming --address, within the timeout.
    Only this machine's loopback is used."""
    pytest.importorskip("distributed")
    monkeypatch.setattr(study, "CONNECT_TIMEOUT_S", 1.0)
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(4)
    server.settimeout(10)
    held = []

    def serve():
        try:
            while True:
                c, _ = server.accept()
                held.append(c)
                if greeting:
                    c.sendall(greeting)
        except OSError:
            pass

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    address = f"tcp://127.0.0.1:{server.getsockname()[1]}"
    try:
        t0 = time.monotonic()
        code, out, err = cli("study", str(one_question), "--executor", "dask", "--address", address)
        took = time.monotonic() - t0
    finally:
        server.close()
        for c in held:
            c.close()
    one_line_error(code, err, f"--address {address}")
    assert took < 4, took


# rows: one per question, in question order ------------------------------------------------------

def _qs(n):
    return [{"question": i} for i in range(n)]


def test_rows_come_in_question_order_whatever_order_they_were_answered_in():
    qs = _qs(5)
    ticks = []
    rows = study.in_order(qs, ((i, {"question": i, "v": 10 * i}) for i in (3, 0, 4, 1, 2)), lambda: ticks.append(1))
    assert [r["question"] for r in rows] == [0, 1, 2, 3, 4] and [r["v"] for r in rows] == [0, 10, 20, 30, 40]
    assert len(ticks) == 5


@pytest.mark.parametrize("answered,says", [
    ([(0, {"question": 0}), (1, {"question": 1})], "got no answer"),  # a row left empty
    ([(0, {"question": 0}), (0, {"question": 0}), (1, {"question": 1})], "answered twice"),
    ([(0, {"question": 1}), (1, {"question": 0}), (2, {"question": 2})], "came back as"),  # completion order kept
])
def test_a_row_missing_twice_or_misplaced_is_an_error_not_a_table(answered, says):
    with pytest.raises(RuntimeError, match=says):
        study.in_order(_qs(3), answered)


REPEATED = """
hardware: cloudmatrix384
npus: [64, 32, 64, 32]
workload: {prompt_len: 2048, output_len: 128}
shapes: pd
"""


@pytest.fixture(scope="module")
def repeated(tmp_path_factory):
    path = tmp_path_factory.mktemp("rep") / "rep.yaml"
    path.write_text(REPEATED)
    s = study.load(str(path))
    return s, study.run(s, "serial")


def _full_and_in_order(df, s):
    assert list(df["question"]) == [q["question"] for q in s.questions]
    assert list(df["npus_budget"]) == [q["npus"] for q in s.questions]
    assert (df["error"] == "").all() and df["goodput_rps"].notna().all(), df
    a = df.drop(columns="question")
    assert a.iloc[0].equals(a.iloc[2]) and a.iloc[1].equals(a.iloc[3])  # a repeated question: the same full row


def test_repeated_questions_each_get_a_full_row_serially(repeated):
    s, df = repeated
    _full_and_in_order(df, s)


def test_the_local_pool_gives_rows_in_question_order(repeated):
    """The first question (64 NPUs) takes longer than the second (32): completion order is not
    question order, the table is."""
    import pandas as pd

    s, serial = repeated
    got = study.run(s, "local", workers=2)
    _full_and_in_order(got, s)
    pd.testing.assert_frame_equal(got, serial, check_exact=True)


def _first_question_slowest(q):
    """A stand-in answer: question 0 takes longest, so it is answered last."""
    time.sleep(0.4 if q["question"] == 0 else 0.01)
    return {**study.label(q), "error": "", "pid": os.getpid()}


def test_local_rows_are_in_question_order_not_completion_order(monkeypatch, repeated):
    """Question 0 answered last (a stand-in answer, inherited by the forked workers): still row 0."""
    if os.name != "posix":
        pytest.skip("the stand-in reaches the workers by fork")
    s, _ = repeated
    monkeypatch.setattr(study, "answer", _first_question_slowest)
    qs = [{**s.questions[i % 4], "question": i} for i in range(6)]
    got = study.run(study.Study("x", "x", qs), "local", workers=2)
    assert list(got["question"]) == list(range(6))
    assert got["pid"].nunique() == 2  # both workers answered: an order to lose


class _FakeFuture:
    def __init__(self, key, value):
        self.key, self.value = key, value

    def result(self):
        return self.value


def test_dask_rows_when_keys_repeat_and_complete_out_of_order(monkeypatch, repeated):
    """Dask's path with a stand-in client whose futures share a key for identical questions
    (as pure=True gives) and complete in reverse: every question still its own full row, in
    question order (without the cluster: a LocalCluster is seconds the suite need not spend)."""
    distributed = pytest.importorskip("distributed")
    s, serial = repeated
    qs = [dict(q) for q in s.questions]
    qs[2] = {**qs[0]}  # the same question twice, key and all
    rows_by_q = {q["question"]: row for q, row in zip(s.questions, serial.to_dict(orient="records"))}

    class Client:
        def __init__(self, address, timeout):
            pass

        def map(self, fn, items, pure):
            return [_FakeFuture(repr(sorted(q.items(), key=str)), rows_by_q[q["question"]]) for q in items]

        def close(self):
            pass

    monkeypatch.setattr(distributed, "Client", Client)
    monkeypatch.setattr(distributed, "as_completed", lambda fs: list(reversed(list(fs))))
    monkeypatch.setattr(study, "_reach", lambda address, timeout: None)
    rows = study._dask(qs, "tcp://127.0.0.1:8786", lambda: None)
    assert [r["question"] for r in rows] == [0, 1, 0, 3]
    assert rows[0] == rows[2] and rows[0] is not rows[2] and all(r["goodput_rps"] > 0 for r in rows)


def test_a_question_made_through_the_api_with_a_bad_rate_gets_its_reason():
    """A question that no file's schema checked (built in code): its row says why, the study goes on."""
    q = {"hardware": "cloudmatrix384", "model": "default", "stack": "default", "npus": 32, "question": 0,
         "workload": {"rate": "fast"}, "slo": {}, "set": {}, "shapes": ["pd"], "simulate": None}
    row = study.answer(q)
    assert "rate" in row["error"] and "fast" in row["error"] and row["goodput_rps"] is None
