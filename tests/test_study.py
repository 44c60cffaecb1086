"""cmperf study (cmperf/study): a grid of questions answered the same on every executor (serial,
a local process pool, a Dask LocalCluster), the answers obeying the physics the planner does,
and a self-contained HTML report that a browser renders."""

import shutil
import subprocess
from pathlib import Path

import pandas as pd
import pytest

from cmperf import study

TINY = """
title: tiny
hardware: [cloudmatrix384]
npus: [32, 64]
workload:
  - {prompt_len: 2048, output_len: 128}
set:
  - {}
  - {chip.die.hbm_bandwidth_Bps: 3.2e12}
shapes: [pd]
"""


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    path = tmp_path_factory.mktemp("study") / "tiny.yaml"
    path.write_text(TINY)
    s = study.load(str(path))
    return s, study.run(s, "serial")


def test_the_grid_is_every_combination(tiny):
    s, df = tiny
    assert len(s.questions) == 4 and list(df["question"]) == [0, 1, 2, 3]
    assert (df["error"] == "").all(), df["error"].tolist()
    assert set(df["model"]) == {"deepseek-r1"} and set(df["stack"]) == {"cloudmatrix-infer"}  # the system's


def test_answers_follow_the_physics(tiny):
    """More NPUs never serve fewer requests; more HBM bandwidth never fewer (same budget)."""
    _, df = tiny
    base = df[df["what_if"] == "-"].set_index("npus_budget")["goodput_rps"]
    fast = df[df["what_if"] != "-"].set_index("npus_budget")["goodput_rps"]
    assert base[64] >= base[32] > 0
    for n in (32, 64):
        assert fast[n] >= base[n]
    assert (df["npus"] <= df["npus_budget"]).all()


def test_local_pool_gives_identical_answers(tiny):
    s, serial = tiny
    pd.testing.assert_frame_equal(study.run(s, "local", workers=2), serial, check_exact=True)


def test_dask_local_cluster_gives_identical_answers(tiny):
    distributed = pytest.importorskip("distributed")
    s, serial = tiny
    import dask

    # workers forked from this process (cmperf already imported) rather than spawned afresh: the
    # same answers, a few seconds sooner
    with dask.config.set({"distributed.worker.multiprocessing-method": "fork"}), \
            distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
        got = study.run(s, "dask", address=cluster.scheduler_address)
    pd.testing.assert_frame_equal(got, serial, check_exact=True)


def test_bad_study_files_are_one_line(cli, tmp_path):
    from helpers import one_line_error

    for text, names in (("hardwares: [x]\n", ["hardwares"]), ("npus: [0]\n", ["npus[0]"]),
                        ("workload: [{prompt: 1}]\n", ["workload[0]", "prompt"]), ("shapes: [pdd]\n", ["shapes"]),
                        ("simulate: {num_prompts: 1}\n", ["simulate.num_prompts"])):
        f = tmp_path / "s.yaml"
        f.write_text(text)
        code, out, err = cli("study", str(f))
        one_line_error(code, err, str(f), *names)
    f.write_text("hardware: cloudmatrix384\n")
    code, out, err = cli("study", str(f), "--executor", "dask")
    one_line_error(code, err, "--executor dask")


def test_cli_writes_csv_parquet_and_html(cli, tmp_path, tiny):
    _, serial = tiny
    f = tmp_path / "s.yaml"
    f.write_text("hardware: cloudmatrix384\nnpus: 32\nworkload: {prompt_len: 2048, output_len: 128}\nshapes: pd\n")
    outs = [tmp_path / "a.csv"]
    code, out, err = cli("study", str(f), "--out", str(outs[0]), "--html", str(tmp_path / "r.html"), "--executor", "serial")
    assert code == 0, err
    assert "1 questions, 1 answered" in out or "1 answered" in out
    got = pd.read_csv(outs[0], comment="#")
    assert got["goodput_rps"].iat[0] == pytest.approx(serial["goodput_rps"].iat[0], rel=1e-12)
    page = (tmp_path / "r.html").read_text()
    assert page.count("data:image/png;base64,") == 2 and "http" not in page.replace("http-equiv", "")
    pytest.importorskip("pyarrow")
    code, out, err = cli("study", str(f), "--out", str(tmp_path / "a.parquet"), "--executor", "serial", "-f", "json")
    assert code == 0, err
    assert pd.read_parquet(tmp_path / "a.parquet")["goodput_rps"].iat[0] == serial["goodput_rps"].iat[0]


CHROMIUM = "/usr/bin/chromium"


@pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="Debian's chromium is not installed")
def test_the_report_renders_in_a_browser(tiny, tmp_path):
    """Headless Chromium opens the page and its screenshot is not blank: the figures drew."""
    from PIL import Image
    import numpy as np

    from cmperf.study.report import html_report

    s, df = tiny
    page = tmp_path / "r.html"
    page.write_text(html_report(df, s.title, {"cmperf": "test"}))
    shot = tmp_path / "shot.png"
    subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                    "--disable-component-update", "--disable-sync", "--no-first-run", f"--user-data-dir={tmp_path / 'profile'}",
                    "--window-size=1200,900", f"--screenshot={shot}", page.as_uri()],
                   check=True, capture_output=True, timeout=60)
    img = np.asarray(Image.open(shot).convert("RGB"), dtype=float)
    assert img.shape[0] >= 800 and img.shape[1] >= 1000
    non_white = (img.sum(axis=2) < 600).mean()
    blue = ((img[..., 2] > 150) & (img[..., 0] < 100)).mean()  # the goodput bars (matplotlib's tab:blue)
    assert non_white > 0.02 and blue > 0.005, (non_white, blue)
    shutil.rmtree(tmp_path / "profile", ignore_errors=True)
