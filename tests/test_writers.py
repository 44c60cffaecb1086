"""Outputs never destroy a user's data (issue #33): every writer of cmperf refuses to replace a
file it did not write unless --force (the user's bytes stay, byte for byte), refuses two
outputs naming one file, writes whole files (report.write_atomic), says each file it wrote, and
meets a bad target with one line and exit 2. docs/export.md, "Files cmperf writes"."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from helpers import one_line_error

USER = b"my own numbers, typed by hand\n\x00\xff keep me\n"  # what a user's file holds
CONFIGS = Path(__file__).parent / "data" / "hf-configs"
STUDY = "hardware: cloudmatrix384\nnpus: 32\nworkload: {prompt_len: 2048, output_len: 128}\nshapes: pd\n"


def _users(path: Path) -> Path:
    path.write_bytes(USER)
    return path


def _refused(cli, path: Path, flag: str, *argv):
    """The command, given the user's file at ``path`` for ``flag``: one line naming the flag,
    the file and --force; the file byte for byte as it was, nothing else left in its folder."""
    before = sorted(p.name for p in path.parent.iterdir())
    code, out, err = cli(*argv)
    one_line_error(code, err, flag, str(path), "--force", "did not write")
    assert path.read_bytes() == USER
    assert sorted(p.name for p in path.parent.iterdir()) == before  # no temporary file left


# --------------------------------------------------------------------------- one file per flag
FILE_CASES = {
    "predict --out": (["predict", "decode", "-f", "json", "--out"], "a.csv"),
    "search --out": (["search", "decode", "--tpot-slo", "50", "--batch", "8", "-f", "json", "--out"], "s.csv"),
    "search --plot": (["search", "decode", "--tpot-slo", "50", "--batch", "8", "-f", "json", "--plot"], "s.png"),
    "compare --out": (["compare", "decode", "-f", "json", "--out"], "c.csv"),
    "plan --out": (["plan", "--npus", "32", "--shapes", "pd", "-f", "json", "--out"], "p.csv"),
    "simulate --out": (["simulate", "--num-prompts", "10", "--request-rate", "5", "-f", "json", "--out"], "r.csv"),
    "hw show --deployment-out": (["hw", "show", "cloudmatrix384", "-f", "json", "--deployment-out"], "d.yaml"),
    "model import --out": (["model", "import", str(CONFIGS / "qwen3-8b.json"), "--out"], "m.yaml"),
}


@pytest.mark.parametrize("case", list(FILE_CASES))
def test_a_users_file_is_kept_and_cmperfs_own_is_replaced(cli, tmp_path, case):
    argv, name = FILE_CASES[case]
    flag = argv[-1]
    path = _users(tmp_path / name)
    _refused(cli, path, flag, *argv, path)
    code, out, err = cli(*argv, path, "--force")  # on demand: replaced, and said
    assert code == 0, err
    assert path.read_bytes() != USER and f"cmperf: wrote {path}" in err
    code, out, err = cli(*argv, path)  # cmperf's own file now: replaced without --force
    assert code == 0, err
    assert f"cmperf: wrote {path}" in err


def test_each_file_written_is_one_line(cli, tmp_path):
    out, plot = tmp_path / "s.csv", tmp_path / "s.png"
    code, _, err = cli("search", "decode", "--tpot-slo", "50", "--batch", "8", "-f", "json", "--out", out, "--plot", plot)
    assert code == 0, err
    assert [line for line in err.splitlines() if line.startswith("cmperf: wrote")] == [f"cmperf: wrote {out}",
                                                                                       f"cmperf: wrote {plot}"]


def test_an_empty_file_holds_nothing_to_lose(cli, tmp_path):
    path = tmp_path / "a.csv"
    path.touch()
    code, _, err = cli("predict", "decode", "-f", "json", "--out", path)
    assert code == 0 and path.read_text().startswith("# cmperf: "), err


def test_a_link_to_a_users_file_is_refused(cli, tmp_path):
    target = _users(tmp_path / "data.csv")
    (tmp_path / "link.csv").symlink_to(target)
    code, _, err = cli("predict", "decode", "-f", "json", "--out", tmp_path / "link.csv")
    one_line_error(code, err, "--out", "--force")
    assert target.read_bytes() == USER and (tmp_path / "link.csv").is_symlink()


# --------------------------------------------------------------------------- two flags, one file
@pytest.mark.parametrize("argv", [
    ["search", "decode", "--tpot-slo", "50", "--batch", "8", "--out", "{a}", "--plot", "{a}"],
    ["plan", "--npus", "32", "--out", "{a}", "--plot", "{a}"],
    ["simulate", "--num-prompts", "10", "--out", "{a}", "--plot", "{a}"],
    ["study", "{study}", "--out", "{a}", "--html", "{a}"],
    ["study", "{study}", "--out", "{a}", "--html", "{link}"],  # one file by two names
])
def test_two_outputs_naming_one_file_are_one_line(cli, tmp_path, argv):
    (tmp_path / "s.yaml").write_text(STUDY)
    a = tmp_path / "a.csv"
    (tmp_path / "link.csv").symlink_to(a)
    args = [x.format(a=a, study=tmp_path / "s.yaml", link=tmp_path / "link.csv") for x in argv]
    code, out, err = cli(*args)
    flags = [x for x in argv if x.startswith("--") and x in ("--out", "--plot", "--html")]
    one_line_error(code, err, *flags, "same file")
    assert not a.exists()


def test_an_export_folder_is_not_also_a_file_output(cli, tmp_path):
    code, _, err = cli("plan", "--npus", "32", "--shapes", "pd", "--out", tmp_path / "ex", "--export", tmp_path / "ex")
    one_line_error(code, err, "--out", "--export")
    code, _, err = cli("plan", "--npus", "32", "--shapes", "pd", "--out", tmp_path / "ex" / "deployment.yaml",
                       "--export", tmp_path / "ex")
    one_line_error(code, err, "--out", "--export", "a file the export writes")
    assert not (tmp_path / "ex").exists()


def test_a_hard_link_is_the_same_file(cli, tmp_path):
    (tmp_path / "a.csv").write_text("# cmperf: 0.1.0\n")
    os.link(tmp_path / "a.csv", tmp_path / "b.png")
    code, _, err = cli("search", "decode", "--tpot-slo", "50", "--batch", "8", "--out", tmp_path / "a.csv",
                       "--plot", tmp_path / "b.png")
    one_line_error(code, err, "--out", "--plot", "same file")


# --------------------------------------------------------------------------- study: csv, parquet, html
def test_study_keeps_the_users_files(cli, tmp_path):
    f = tmp_path / "s.yaml"
    f.write_text(STUDY)
    out, html = _users(tmp_path / "a.csv"), _users(tmp_path / "b.html")
    _refused(cli, out, "--out", "study", f, "--out", out, "--html", tmp_path / "new.html", "--executor", "serial")
    assert not (tmp_path / "new.html").exists()  # refused before any work
    _refused(cli, html, "--html", "study", f, "--out", tmp_path / "new.csv", "--html", html, "--executor", "serial")
    code, _, err = cli("study", f, "--out", tmp_path / "n.csv", "--html", tmp_path / "n.html", "--executor", "serial")
    assert code == 0, err
    assert f"cmperf: wrote {tmp_path / 'n.csv'}" in err and f"cmperf: wrote {tmp_path / 'n.html'}" in err
    code, _, err = cli("study", f, "--out", tmp_path / "n.csv", "--html", tmp_path / "n.html", "--executor", "serial")
    assert code == 0, err  # its own files: replaced
    page = (tmp_path / "n.html").read_text()
    assert page.lower().startswith("<!doctype") and "<!-- written by cmperf" in page


def test_study_parquet_carries_the_mark(cli, tmp_path):
    pytest.importorskip("pyarrow")
    import pandas as pd

    from cmperf.report import cmperf_wrote

    f = tmp_path / "s.yaml"
    f.write_text(STUDY)
    out = _users(tmp_path / "a.parquet")
    _refused(cli, out, "--out", "study", f, "--out", out, "--executor", "serial")
    out.unlink()
    for _ in range(2):  # the second replaces the first: cmperf's
        code, _, err = cli("study", f, "--out", out, "--executor", "serial", "-f", "json")
        assert code == 0, err
    assert cmperf_wrote(out) and len(pd.read_parquet(out)) == 1


# --------------------------------------------------------------------------- export folders
def _export(cli, d, *more):
    return cli("plan", "--npus", "32", "--shapes", "pd", "-f", "json", "--export", d, *more)


def test_export_keeps_the_users_launch_script_and_its_own_edits(cli, tmp_path):
    d = tmp_path / "ex"
    d.mkdir()
    _users(d / "sglang.sh")
    code, _, err = _export(cli, d)
    one_line_error(code, err, "--export", "sglang.sh", "--force")
    assert (d / "sglang.sh").read_bytes() == USER and sorted(p.name for p in d.iterdir()) == ["sglang.sh"]
    code, _, err = _export(cli, d, "--force")
    assert code == 0, err
    written = [line for line in err.splitlines() if line.startswith("cmperf: wrote")]
    manifest = json.loads((d / "export.json").read_text())
    assert len(written) == len(manifest["files"]) + 1  # one line per file, export.json too
    assert manifest["written_by"].startswith("written by cmperf") and set(manifest["sha256"]) == set(manifest["files"])
    code, _, err = _export(cli, d)  # its own, unchanged: replaced
    assert code == 0, err
    edited = (d / "vllm.sh").read_bytes() + b"# my tuning\n"
    (d / "vllm.sh").write_bytes(edited)  # a launch script the user changed is the user's
    code, _, err = _export(cli, d)
    one_line_error(code, err, "--export", "vllm.sh", "changed")
    assert (d / "vllm.sh").read_bytes() == edited


def test_simulate_export_keeps_the_users_files(cli, tmp_path):
    d = tmp_path / "ex"
    d.mkdir()
    _users(d / "deployment.yaml")
    _users(d / "export.json")
    code, _, err = cli("simulate", "--num-prompts", "10", "--request-rate", "5", "-f", "json", "--export", d)
    line = one_line_error(code, err, "--export", "--force")
    assert "deployment.yaml" in line and "export.json" in line
    assert (d / "deployment.yaml").read_bytes() == USER and (d / "export.json").read_bytes() == USER


def test_an_export_of_before_the_digests_is_cmperfs(tmp_path):
    """An export.json of cmperf 0.1 (no digests, no mark) still vouches for the files it lists."""
    from cmperf.export import _theirs

    (tmp_path / "export.json").write_text(json.dumps({"shape": "pd", "files": ["sglang.sh"],
                                                      "provenance": {"cmperf": "0.1.0"}}))
    (tmp_path / "sglang.sh").write_text("#!/bin/sh\n")
    _users(tmp_path / "vllm.sh")
    assert _theirs(tmp_path, ["export.json", "sglang.sh", "vllm.sh"]) == ["vllm.sh"]


def _bad_targets(tmp_path: Path) -> dict:
    (tmp_path / "a-file").write_text("x")
    return {"empty": ("", "expected the path of a directory"),
            "name too long": (str(tmp_path / ("x" * 300)), "too long"),
            "too long, in a folder to make": (str(tmp_path / "new" / ("x" * 300)), "too long"),
            "a file": (str(tmp_path / "a-file"), "not a directory"),
            "below a file": (str(tmp_path / "a-file" / "ex"), "not a directory"),
            "read-only (procfs)": ("/proc", "not writable"),
            "below a read-only folder": ("/proc/cmperf-ex/ex", "not writable")}


@pytest.mark.parametrize("command", [["plan", "--npus", "32", "--shapes", "pd"],
                                     ["simulate", "--num-prompts", "10", "--request-rate", "5"]])
def test_bad_export_targets_are_one_line(cli, tmp_path, command):
    for name, (target, needle) in _bad_targets(tmp_path).items():
        before = sorted(p.name for p in tmp_path.iterdir())
        code, out, err = cli(*command, "-f", "json", "--export", target)
        one_line_error(code, err, "--export", needle)
        assert sorted(p.name for p in tmp_path.iterdir()) == before, name
        assert (tmp_path / "a-file").read_text() == "x"


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into a folder of mode 0555")
def test_a_read_only_folder_is_one_line(cli, tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    try:
        code, _, err = cli("plan", "--npus", "32", "--shapes", "pd", "--export", ro)
        one_line_error(code, err, "--export", "not writable")
        code, _, err = cli("predict", "decode", "--out", ro / "a.csv")
        one_line_error(code, err, "--out", "not writable")
    finally:
        ro.chmod(0o755)


def test_an_empty_export_name_no_longer_writes_into_the_current_folder(cli, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, _, err = cli("simulate", "--num-prompts", "10", "--request-rate", "5", "-f", "json", "--export", "")
    one_line_error(code, err, "--export")
    assert list(tmp_path.iterdir()) == []


# --------------------------------------------------------------------------- calibration --write
def test_calibration_write_in_a_read_only_checkout_is_one_line(tmp_path, monkeypatch, capsys):
    """--write whose spec file sits in a folder that takes no file: one line and exit 2 before
    any fit (it was a traceback after the fit); the file as it was."""
    import cmperf.calibration.__main__ as calibration
    from cmperf.calibration import serving

    def no_fit(*a, **k):
        raise AssertionError("fitted before checking the files --write rewrites")

    monkeypatch.setattr(serving, "fit_serving", no_fit)
    monkeypatch.setattr(calibration, "write_targets", lambda *a, **k: [Path("/proc/version")])
    before = Path("/proc/version").read_bytes()
    assert calibration.main(["--stack", "sglang-ascend", "--write"]) == 2
    one_line_error(2, capsys.readouterr().err, "--write", "/proc/version", "not writable")
    assert calibration.main(["--write"]) == 2
    one_line_error(2, capsys.readouterr().err, "--write", "not writable")
    assert Path("/proc/version").read_bytes() == before


def test_calibration_checks_each_file_it_would_rewrite(tmp_path):
    """A file --write would rewrite that is missing is one line naming --write; a writable
    one passes, and the check leaves nothing behind."""
    import cmperf.calibration.__main__ as calibration
    from cmperf.errors import ConfigError

    with pytest.raises(ConfigError, match="--write"):
        calibration.check_write_targets([tmp_path / "missing.yaml"])
    (tmp_path / "ok.yaml").write_text("x: 1\n")
    calibration.check_write_targets([tmp_path / "ok.yaml"])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ok.yaml"]  # the probe left nothing


# --------------------------------------------------------------------------- the marks, per format
@pytest.mark.parametrize("fmt", ["png", "pdf", "svg", "eps", "jpg", "tif", "webp", "gif"])
def test_every_image_format_carries_the_mark(tmp_path, fmt):
    pytest.importorskip("matplotlib")
    from cmperf.plots import _pyplot, _save
    from cmperf.report import cmperf_wrote

    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(2, 2))
    ax.plot([0, 1])
    path = tmp_path / f"f.{fmt}"
    _save(fig, path)
    _save(fig, path)  # its own: replaced
    plt.close(fig)
    assert cmperf_wrote(path)


def test_the_api_refuses_too_and_forces_on_demand(tmp_path, capsys):
    """write_atomic is the one writer: the API refuses a user's file as the CLI does (silently
    otherwise), and report.writing(force=True) replaces it."""
    from cmperf.errors import ConfigError
    from cmperf.report import write_atomic, writing

    path = _users(tmp_path / "x.txt")
    with pytest.raises(ConfigError, match="did not write"):
        write_atomic(path, lambda tmp: Path(tmp).write_text("new"))
    assert path.read_bytes() == USER
    with writing(force=True):
        write_atomic(path, lambda tmp: Path(tmp).write_text("new"))
    assert path.read_text() == "new" and capsys.readouterr().err == ""


def test_a_file_of_an_earlier_export_stays_cmperfs(tmp_path):
    """An export that does not write a file an earlier one wrote (another vendor's launcher)
    keeps its digest: the file is still cmperf's to replace later; edited, it is the user's."""
    import hashlib

    from cmperf.export import _theirs

    d = tmp_path
    (d / "dynamo-sglang.yaml").write_text("old: launcher\n")
    digest = hashlib.sha256(b"old: launcher\n").hexdigest()
    (d / "export.json").write_text(json.dumps({"written_by": "written by cmperf 0.1.0", "files": ["dynamo-sglang.yaml"],
                                               "sha256": {"dynamo-sglang.yaml": digest}}))
    from cmperf.export import write

    class Chosen:  # the least an export needs: no stack context, the deployment file only
        shape = "pd"
        numbers: dict = {}

        def deployment_file(self):
            return {"prefill": [{"count": 1, "dies": 32}], "decode": [{"count": 1, "dies": 32}]}

    write(str(d), Chosen(), None)
    manifest = json.loads((d / "export.json").read_text())
    assert manifest["sha256"]["dynamo-sglang.yaml"] == digest and "dynamo-sglang.yaml" not in manifest["files"]
    assert _theirs(d, ["dynamo-sglang.yaml", "deployment.yaml"]) == []
    (d / "dynamo-sglang.yaml").write_text("my: edit\n")
    assert _theirs(d, ["dynamo-sglang.yaml"]) == ["dynamo-sglang.yaml"]


def test_a_file_quoting_the_mark_is_not_cmperfs(tmp_path):
    """The docs quote the mark, a test holds it in a string: neither is a file cmperf wrote
    (a text file's mark counts in its first lines only, with its version)."""
    from cmperf.report import cmperf_wrote

    doc = tmp_path / "notes.md"
    doc.write_text("# my notes\n" + "text\n" * 30 + "the mark is 'written by cmperf 0.1.0'\n")
    prose = tmp_path / "prose.txt"
    prose.write_text("files written by cmperf VERSION are replaced\n")
    assert not cmperf_wrote(doc) and not cmperf_wrote(prose)
    assert not cmperf_wrote(Path(__file__).resolve().parents[1] / "docs" / "export.md")
    assert not cmperf_wrote(Path(__file__).resolve().parents[1] / "cmperf" / "report.py")
    yaml = tmp_path / "d.yaml"
    yaml.write_text("# written by cmperf 0.1.0: hw show x --deployment-out\nprefill: []\n")
    assert cmperf_wrote(yaml)


def test_a_users_csv_that_starts_like_cmperfs_is_still_the_users(cli, tmp_path):
    """'# cmperf: my notes' is not cmperf's first line (that one carries its version): kept."""
    out = tmp_path / "notes.csv"
    out.write_text("# cmperf: my notes\n1,2\n")
    code, _, err = cli("search", "decode", "--tpot-slo", "50", "--batch", "8", "--out", out)
    one_line_error(code, err, "--out", "notes.csv", "--force")
    assert out.read_text() == "# cmperf: my notes\n1,2\n"
