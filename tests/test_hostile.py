"""Issue 17's reproductions, each as the hostile user typed it: one clear line and exit 2 where
the input is bad, a warning and a result where it is only implausible, a correct result where
it is legitimate, a bounded run, one line on a signal with no file left behind."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from cmperf.predict import load_specs, predict

ROOT = Path(__file__).resolve().parents[1]
HF = Path(__file__).parent / "data" / "hf-configs"  # shipped with the tests (SOURCES.md)


def one_error(code, err, *words):
    lines = [x for x in err.splitlines() if x.strip()]
    assert code == 2 and len(lines) == 1 and lines[0].startswith("cmperf: error: "), (code, err)
    for w in words:
        assert w in lines[0], (w, lines[0])


def run(*args, env=None, timeout=120, **kw):
    return subprocess.run([sys.executable, "-m", "cmperf.cli", *map(str, args)], capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, timeout=timeout, **kw)


# --------------------------------------------------------------------------- tracebacks
@pytest.mark.parametrize("s", ["system.kv_transfer_tier=[x]", "system.kv_transfer_tier={a: 1}",
                               "system.memory_pool.tier=[ub]", "system.expert_parallel.decode.tiers=[[ub]]"])
def test_a_tier_named_by_a_list_is_a_field_error(cli, s):
    one_error(*cli("predict", "decode", "--set", s)[::2], "valid string")


def test_an_ascii_terminal_gets_ascii_spellings():
    """A process started with ASCII standard streams (the encoding is chosen at start-up)."""
    r = run("predict", "decode", env={"PYTHONIOENCODING": "ascii"})
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr[-500:]
    assert "+/-" in r.stdout


@pytest.mark.parametrize("argv", [["hw", "show", "cloudmatrix384"], ["validate", ROOT / "cmperf/reference/h800-microbenchmarks.yaml"],
                                  ["plan", "--npus", "32", "--shapes", "pd"]])
def test_ascii_streams_get_ascii_spellings_from_every_command(monkeypatch, argv):
    """The other commands on ASCII streams, in this process (streams as PYTHONIOENCODING=ascii
    makes them: strict ASCII text over bytes): each runs to its end, no traceback."""
    import io

    from cmperf.cli import main

    streams = {name: io.TextIOWrapper(io.BytesIO(), encoding="ascii", errors="strict") for name in ("stdout", "stderr")}
    for name, stream in streams.items():
        monkeypatch.setattr(sys, name, stream)
    monkeypatch.setattr(sys, "argv", ["cmperf", *map(str, argv)])
    try:
        main()
        code = 0
    except SystemExit as e:
        code = e.code
    text = {}
    for name, stream in streams.items():
        stream.flush()
        text[name] = stream.buffer.getvalue().decode("utf-8", errors="replace")
    assert code in (0, None) and "Traceback" not in text["stderr"], text["stderr"][-500:]
    assert text["stdout"].strip()


def test_a_full_disk_or_a_closed_stdout_is_one_line():
    with open("/dev/full", "w") as full:
        r = subprocess.run([sys.executable, "-m", "cmperf.cli", "predict", "decode"], stdout=full, stderr=subprocess.PIPE,
                           text=True, timeout=120)
    one_error(r.returncode, r.stderr, "standard output", "No space left")
    r = subprocess.run([sys.executable, "-m", "cmperf.cli", "predict", "decode", "-f", "json"], stderr=subprocess.PIPE,
                       text=True, timeout=120, preexec_fn=lambda: os.close(1))
    one_error(r.returncode, r.stderr, "standard output is closed")


def _hf_copy(tmp_path, **extra) -> Path:
    cfg = json.loads((HF / "llama-3.1-70b.json").read_text())
    cfg.update(extra)
    p = tmp_path / "config.json"
    p.write_text(json.dumps(cfg))
    return p


@pytest.mark.skipif(not HF.is_dir(), reason="the reference configs")
def test_a_config_with_a_5001_digit_integer(cli, tmp_path):
    p = tmp_path / "config.json"
    p.write_text((HF / "llama-3.1-70b.json").read_text().replace('"vocab_size": 128256', '"vocab_size": ' + "9" * 5001))
    one_error(*cli("model", "import", p)[::2], "5,001 digits")


@pytest.mark.skipif(not HF.is_dir(), reason="the reference configs")
@pytest.mark.parametrize("what", ["not UTF-8", "a FIFO", "a folder"])
def test_a_broken_sources_table_beside_a_config_is_a_warning(tmp_path, what):
    p = _hf_copy(tmp_path)
    sources = tmp_path / "SOURCES.md"
    if what == "not UTF-8":
        sources.write_bytes(b"| config.json | \xe9t\xe9 |\n")
    elif what == "a FIFO":
        os.mkfifo(sources)
    else:
        sources.mkdir()
    r = run("model", "import", p, timeout=60)  # a FIFO once blocked here
    assert r.returncode == 0 and "kind: model" in r.stdout
    assert "SOURCES.md" in r.stderr and "provenance row is not read" in r.stderr and "Traceback" not in r.stderr


@pytest.mark.skipif(not HF.is_dir(), reason="the reference configs")
def test_a_config_key_with_a_line_break_still_imports_a_readable_spec(cli, tmp_path):
    p = _hf_copy(tmp_path, **{"weird\nkey: 1\n- x": 3, "sep\u2028key": 4})
    code, out, err = cli("model", "import", p, "--out", tmp_path / "m.yaml")
    assert code == 0 and err.count("unmapped config field") == 2
    code, out, err = cli("model", "show", tmp_path / "m.yaml")
    assert code == 0, err


# --------------------------------------------------------------------------- hangs: bounded runs
def test_plan_variants_are_capped_before_any_is_made(cli):
    many = ",".join(str(i) for i in range(1, 65))
    hits = ",".join(f"{i / 100:g}" for i in range(64))
    one_error(*cli("plan", "--rate", many, "--prefix-hit", hits)[::2], "4,096 plans", "at most 64")
    sweep = ",".join(f"{100e9 + i * 1e9:g}" for i in range(1000))
    one_error(*cli("plan", "--sweep", f"system.tiers.ub.bandwidth_Bps={sweep}")[::2], "1,000 plans")


def test_a_long_trace_is_refused_before_it_is_parsed(tmp_path, monkeypatch):
    from cmperf.errors import ConfigError
    from cmperf.plan import workload

    monkeypatch.setattr(workload, "MAX_TRACE_ROWS", 1000)
    monkeypatch.setattr(workload, "_trace_cell", lambda *a: pytest.fail("a cell was parsed"))
    p = tmp_path / "t.csv"
    p.write_text("prompt_len,output_len\n" + "1,1\n" * 2000)
    with pytest.raises(ConfigError, match="more than 1,000 request rows"):
        workload.read_trace(str(p))


# --------------------------------------------------------------------------- silent nonsense
@pytest.mark.parametrize("w", ["batch=", "batch=null", "batch=[8,16]", "h800-cluster:batch=", "batch={a: 1}"])
def test_compare_with_takes_one_value(cli, w):
    one_error(*cli("compare", "decode", "--with", w)[::2], "expected one value")


@pytest.mark.parametrize("v", ["1:30", "0x10", "0o17", "1_000"])
def test_set_reads_yaml_1_2_numbers(cli, v):
    one_error(*cli("predict", "decode", "--set", f"chip.die.hbm_bandwidth_Bps={v}")[::2], "valid number", v)


@pytest.mark.parametrize("argv, words", [
    (["plan", "--kv-tier", "die_to_die"], ["--kv-tier die_to_die", "ub, rdma, vpc"]),
    (["plan", "--pool-path", "die_to_die", "--prefix-hit", "0.5"], ["--pool-path die_to_die", "DRAM of every node"]),
    (["predict", "decode", "--set", "system.kv_transfer_tier=die_to_die"], ["inside one package"]),
    (["predict", "decode", "--set", "system.memory_pool.tier=die_to_die"], ["reaches all 384"]),
    (["predict", "decode", "--set", "system.tiers.ub.bandwidth_Bps=300e9", "--set", "system.tiers.ub.nominal_Bps=250e9"],
     ["above its nominal_Bps"]),
    (["predict", "decode", "--set", "system.tiers.ub.domain_chips=1000"], ["more than the system's 384"]),
    (["predict", "prefill", "--hardware", "h800-cluster", "--set", "system.kv_transfer_tier=nvlink"], ["connects 8 NPUs"]),
    (["predict", "prefill", "--hardware", "h800-cluster", "--set", "system.overlap.prefill.comm_units=200"],
     ["none left to compute"]),
])
def test_impossible_routes_are_errors(cli, argv, words):
    one_error(*cli(*argv)[::2], *words)


@pytest.mark.parametrize("s, field", [("chip.efficiency.matmul_compute=1e-9", "chip.efficiency.matmul_compute"),
                                      ("chip.die.hbm_bandwidth_Bps=1e30", "chip.die.hbm_bandwidth_Bps"),
                                      ("system.tiers.rdma.latency_s=10", "system.tiers.rdma.latency_s")])
def test_an_absurd_value_is_predicted_with_a_warning(cli, monkeypatch, s, field):
    import cmperf.predict

    monkeypatch.setattr(cmperf.predict, "_implausible_said", set())  # said once per process: this test's own
    code, out, err = cli("predict", "decode", "--set", s, "-f", "json")
    assert code == 0 and json.loads(out)["tpot_ms"] > 0
    warning = [x for x in err.splitlines() if field in x and "outside the range of any real part" in x]
    assert len(warning) == 1


# --------------------------------------------------------------------------- misleading
def test_a_set_that_moves_the_answer_is_not_called_inert(cli):
    code, out, err = cli("predict", "decode", "--set", "chip.die.hbm_bandwidth_Bps=1e30", "-f", "json")
    assert code == 0 and json.loads(out)["tpot_ms"] < 45 and "changes no output" not in err
    code, out, _ = cli("hw", "show", "cloudmatrix384", "--set", "chip.die.hbm_bandwidth_Bps=1e30", "-f", "json")
    row = [r for r in json.loads(out) if r.get("field") == "chip.die.hbm_bandwidth_Bps"][0]
    assert row["used"] is True


@pytest.mark.parametrize("n", [1, 2, 3])
def test_plan_of_one_token_prompts(cli, n):
    code, out, err = cli("plan", "--prompt-len", n, "--npus", "32", "-f", "json")
    assert code == 0, err
    best = json.loads(out)["best"]
    assert best["goodput_rps"] > 0 and best["ttft_ms"] <= 2000 and best["tpot_ms"] <= 50


def test_a_long_output_names_the_lengths_not_kv_len(cli):
    one_error(*cli("plan", "--output-len", "exp:1e9")[::2], "--output-len exp:1e9", "attends")


def test_an_oversized_trace_value_names_the_file_and_line(cli, tmp_path):
    p = tmp_path / "t.csv"
    p.write_text("prompt_len,output_len\n4096,256\n4096,2000000000\n")
    one_error(*cli("plan", "--trace", p)[::2], "t.csv: line 3, output_len")


def test_a_trace_with_a_byte_order_mark(cli, tmp_path):
    p = tmp_path / "t.csv"
    p.write_bytes(b"\xef\xbb\xbfprompt_len,output_len\n4096,256\n")
    code, out, err = cli("plan", "--trace", p, "--npus", "32", "--shapes", "pd", "-f", "json")
    assert code == 0 and json.loads(out)["best"]["goodput_rps"] > 0


def test_plan_sweeps_an_integer_field(cli):
    code, out, err = cli("plan", "--prefix-hit", "0.5", "--npus", "32", "--shapes", "pd", "-f", "json",
                         "--sweep", "system.memory_pool.block_tokens=128,512")
    assert code == 0, err
    assert [r["system.memory_pool.block_tokens"] for r in json.loads(out)["rows"]] == [128, 512]


def test_a_long_plain_file_is_no_alias_bomb(tmp_path):
    """6,000 reference rows (~110,000 values, no alias) parse; nine aliases of nine still fail."""
    from cmperf.errors import SpecError
    from cmperf.specs.loader import read_yaml

    rows = "".join(f"  - {{id: R{i}, description: d, where: w, phase: decode, metric: tpot_ms, paper: 50, "
                   f"tolerance: 0.5, scenario: {{batch: 8}}}}\n" for i in range(6000))
    p = tmp_path / "big.yaml"
    p.write_text("name: big\nsource: test\nrows:\n" + rows)
    assert len(read_yaml(p)["rows"]) == 6000
    laughs = "".join(f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 9)}]\n" for i in range(1, 10))
    p.write_text("l0: &l0 lol\n" + laughs)
    with pytest.raises(SpecError, match="alias bomb"):
        read_yaml(p)


# --------------------------------------------------------------------------- left behind
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT])
@pytest.mark.parametrize("argv", [["search", "decode", "--tpot-slo", "50", "--batch", "8,16"],
                                  ["plan", "--npus", "32", "--shapes", "pd"]])
def test_a_signal_while_the_output_is_written_leaves_the_old_file(cli, tmp_path, monkeypatch, sig, argv):
    """The signal arrives between the temporary file's write and its rename: the old file
    stays, the temporary one is removed, one line, exit 128 + the signal."""
    from cmperf import report

    out = tmp_path / "f.csv"
    out.write_text("old\n")
    chmod = os.chmod

    def interrupted(path, mode):
        chmod(path, mode)
        os.kill(os.getpid(), sig)

    monkeypatch.setattr(report.os, "chmod", interrupted)
    code, _, err = cli(*argv, "--out", out, "--force")  # not cmperf's file: replaced on demand, or kept whole
    assert code == 128 + sig and err.strip().splitlines() == [f"cmperf: interrupted ({signal.Signals(sig).name})"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f.csv"] and out.read_text() == "old\n"


def _cpu_s(pid: int) -> float | None:
    """CPU seconds (user + system) process ``pid`` has run so far (Linux /proc), else None."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_ctrl_c_in_a_process_says_so():
    """Ctrl-C while the process computes (39 plans: a minute or more of CPU). It is sent once
    the process has run 2 s of CPU, past its imports (~0.6 s) and inside the plans; waiting 6 s
    of wall time instead burned 6 s of a core on a quiet machine (where /proc is missing, it
    still does)."""
    import time

    p = subprocess.Popen([sys.executable, "-m", "cmperf.cli", "plan", "--npus", "64", "--rate",
                          ",".join(str(i) for i in range(1, 40))], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    start = time.monotonic()
    if _cpu_s(p.pid) is None:
        time.sleep(6)
    while (_cpu_s(p.pid) or 0.0) < 2.0 and time.monotonic() - start < 60 and p.poll() is None:
        time.sleep(0.05)
    assert p.poll() is None, "the plans ended before Ctrl-C"
    p.send_signal(signal.SIGINT)
    err = p.communicate(timeout=60)[1]
    assert p.returncode == 130 and err.strip().splitlines()[-1] == "cmperf: interrupted (SIGINT)", err[-300:]
    assert "Traceback" not in err
