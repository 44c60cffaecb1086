"""Output a person reads (issue 24 items 2, 6, 7): hw show's default deployments, defaults that
fit their system, records with names, words for units."""

import json
import re

import pytest
import yaml


def test_hw_show_prints_the_default_deployment_of_every_model(cli):
    code, out, err = cli("hw", "show", "cloudmatrix384")
    assert code == 0, err
    assert "default deployment on cloudmatrix384" in out
    # the paper's deployment (§4.2, §4.3): decode EP320, batch 96, MTP; prefill 32 dies, attention TP 4
    code, out, err = cli("hw", "show", "cloudmatrix384", "--format", "json")
    rows = {r["quantity"]: r for r in json.loads(out) if r["section"] == "default deployment"}
    dec, pre = rows["deepseek-r1 decode"]["instance"], rows["deepseek-r1 prefill"]["instance"]
    assert (dec["dies"], dec["ep"], dec["tp"], dec["batch_per_npu"], dec["mtp"]) == (320, 320, 1, 96, 1)
    assert (pre["dies"], pre["tp"]) == (32, 4)
    # GLM-4.5's decode instance takes the whole supernode: visible, and said
    assert rows["glm-4.5 decode"]["instance"]["dies"] == 768
    assert "all 768 dies" in rows["glm-4.5 decode"]["note"]
    # a dense model has no expert parallelism to show
    assert rows["llama-3.1-70b decode"]["instance"]["ep"] is None


def test_hw_show_is_cached(cli, monkeypatch):
    """A second hw show of the same system runs no prediction (the answers come from the cache)."""
    import cmperf.predict as p

    code, first, err = cli("hw", "show", "cloudmatrix384")
    assert code == 0, err

    def boom(*a, **k):
        raise AssertionError("predicted again")

    monkeypatch.setattr(p, "predict", boom)
    monkeypatch.setattr(p, "unused_fields", boom)
    code, second, err = cli("hw", "show", "cloudmatrix384")
    assert code == 0, err
    assert second == first


def test_deployment_out_fits_the_system_and_reads_back(cli, tmp_path):
    """GB200 NVL72 x Kimi K2: the published counts of Kimi K2's instance sizes (EP72 decode +
    16-GPU prefill) overflow the 72-GPU rack; the default is then the planner's split, which
    fits, and simulate runs it."""
    from cmperf.export.defaults import deployment_file

    path = tmp_path / "d.yaml"
    path.write_text(yaml.safe_dump(deployment_file("gb200-nvl72", "kimi-k2")))
    dep = yaml.safe_load(path.read_text())
    gpus = sum(g["count"] * g["dies"] for g in dep["prefill"] + dep["decode"])
    assert gpus <= 72
    code, out, err = cli("simulate", "--hardware", "gb200-nvl72", "--model", "kimi-k2", "--deployment", str(path),
                         "--num-prompts", "100", "--format", "json")
    assert code == 0, err


def test_deployment_out_on_a_chip_is_one_line(cli, tmp_path):
    from helpers import one_line_error

    code, out, err = cli("hw", "show", "ascend-910c", "--deployment-out", str(tmp_path / "d.yaml"))
    one_line_error(code, err, "--deployment-out", "chip")


def test_a_dtype_on_a_slow_path_of_the_chip_gets_a_note_with_the_fix(cli):
    """GB300's INT8 peak (0.165 POPS, hardware/gb300.yaml) is below its FP8 (5 PFLOPS) and BF16
    (2.5): DeepSeek-R1's INT8 GEMMs land on a slow path, said with the FP8 fix; DeepSeek-V3's FP8
    on GB300 and R1's INT8 on the 910C (its fastest 8-bit path) get no note."""
    from cmperf.advice import slow_dtype_notes
    from cmperf.predict import load_specs

    notes = slow_dtype_notes(load_specs("gb300-nvl72", "deepseek-r1"))
    assert len(notes) == 1 and "int8" in notes[0] and "precision.matmul=fp8" in notes[0]
    assert slow_dtype_notes(load_specs("gb300-nvl72", "deepseek-v3")) == []
    assert slow_dtype_notes(load_specs("cloudmatrix384", "deepseek-r1")) == []
    code, out, err = cli("predict", "decode", "--hardware", "gb300-nvl72", "--model", "deepseek-r1", "-f", "json")
    assert code == 0 and "slow path" in err and "precision.matmul=fp8" in err


def test_hw_list_json_rows_are_records_with_relative_files(cli):
    code, out, err = cli("hw", "list", "--format", "json")
    assert code == 0, err
    rows = json.loads(out)
    assert all(set(r) == {"name", "kind", "description", "confidence", "file"} for r in rows)
    cm = next(r for r in rows if r["name"] == "cloudmatrix384")
    assert cm["kind"] == "system" and cm["file"] == "hardware/cloudmatrix384.yaml"
    code, out, err = cli("hw", "list")
    assert "/work/" not in out and "hardware/cloudmatrix384.yaml" in out


def test_numbers_read_as_numbers():
    """Counts as integers, SI prefixes where an exponent would be, large values grouped."""
    from cmperf.report import human, versus

    assert human(64.0) == "64" and human(12345.6) == "12,346"
    assert human(2.5e17) == "250P" and human(3.3e-5) == "33µ" and "e" not in human(1.6e-7)
    assert human(1.6e12, "B/s") == "1.6 TB/s"
    assert human(float("inf"), "B/s") == "∞" and human(float("-inf")) == "-∞"  # not "infE"
    assert versus(494.3210719793061, 494.3210719793061 * (1 + 1e-12)) == "tie" and versus(486.1, 494.3) == "-1.7%"


def test_a_wide_table_wraps_headers_between_words(monkeypatch, capsys):
    """plan's 18 runner-up columns at 200 columns (issue 24: 'prefill_in / stances'): the
    headers wrap, each word whole (a word cut by the wrap is not found in the output)."""
    import re

    import rich.console

    from cmperf.cli.plan import RUNNER_HEADERS
    from cmperf.report import print_table

    monkeypatch.setattr(rich.console.Console, "is_terminal", property(lambda self: True))
    monkeypatch.setenv("COLUMNS", "200")
    values = [2, "pd", 19, 32, 4, 8192, 1, 160, 2, "-", 43.75, 384, 494.3, "tie", "prefill capacity (the TTFT SLO)",
              2000, 27.6, 329.6]  # the default plan's second row
    row = dict(zip(RUNNER_HEADERS.values(), values))
    print_table([row, row])
    out = re.sub(r"\x1b\[[0-9;]*m", "", capsys.readouterr().out)
    assert max(map(len, out.splitlines())) <= 200
    for word in {w for h in RUNNER_HEADERS.values() for w in h.split()}:
        assert word in out, (word, out)


def test_plan_says_ties_as_ties(cli):
    """Under a 100 ms TPOT at 4K/256 the prefill side binds PD and AFD alike: the same goodput
    (about 495 requests/s) with different decode instances; the runners-up say 'tie'."""
    code, out, err = cli("plan", "--tpot-slo", "100", "--shapes", "pd,afd")
    assert code == 0, err
    assert re.search(r"tie with the best at [0-9,.]+ requests/s", out), out
    assert "goodput against the best" in out.replace("\n", " ") or "against" in out


def test_search_merges_rows_with_the_same_result(cli):
    """A dense model runs one microbatch either way: microbatches 1 and 2 give one result,
    shown once with the differing input named."""
    code, out, err = cli("search", "decode", "--model", "llama-3.1-70b", "--top", "4")
    assert code == 0, err
    assert "1, 2" in out and "microbatches 1 or 2" in out
    code, out, err = cli("search", "decode", "--model", "llama-3.1-70b", "--top", "4", "-f", "json")
    assert len(json.loads(out)["top"]) == 4  # the machine format keeps every row


def test_shell_completion_is_offered(cli):
    code, out, err = cli("--help")
    assert "--install-completion" in out and "--show-completion" in out


def test_csv_counts_are_integers(cli):
    """plan's CSV: instance counts and dies read 1 and 96, not 1.0 and 96.0; rates keep their decimals."""
    import csv
    import io

    code, out, err = cli("plan", "--npus", "64", "--shapes", "pd", "-f", "csv")
    assert code == 0, err
    rows = list(csv.DictReader(io.StringIO("".join(l for l in out.splitlines(True) if not l.startswith("#")))))
    assert rows[0]["prefill_instances"].isdigit() and rows[0]["decode_dies"].isdigit()
    assert "." in rows[0]["goodput_rps"]


def test_an_implausible_peak_is_warned_about_not_advised_on(cli):
    """A peak outside the range of any real part gets the plausibility warning; advising a
    faster dtype over it would be a second line before the one-line error its NaN gives."""
    code, out, err = cli("predict", "decode", "--set", "chip.die.peak_flops_per_s.int8=1e-300")
    lines = [line for line in err.splitlines() if not line.startswith("cmperf: warning:")]
    assert code == 2 and len(lines) == 1 and lines[0].startswith("cmperf: error:"), err
