"""The commands users run: defaults, every flag, output formats, breakdowns that add up."""

import io
import json
import os
import shutil
import subprocess
import sys

import pandas as pd
import pytest

from cmperf.predict import predict

DECODE_KEYS = {"phase", "throughput_per_npu", "tpot_ms", "iteration_ms", "layer_us", "tokens_per_s_per_tflops",
               "memory_per_die_bytes", "fits"}
PREFILL_KEYS = {"phase", "throughput_per_npu", "ttft_ms", "tokens_per_s_per_tflops", "memory_per_die_bytes", "fits"}


def test_help_lists_every_command_with_example(cli):
    code, out, _ = cli("--help")
    assert code == 0
    for cmd in ("hw", "model", "predict", "validate"):
        assert cmd in out
    assert "Example" in out
    code, out, _ = cli("predict", "--help")
    assert "decode" in out and "prefill" in out


def test_version(cli):
    code, out, _ = cli("--version")
    assert code == 0 and out.startswith("cmperf ")


@pytest.mark.parametrize("cmd", [("hw", "list"), ("model", "list"), ("hw", "show", "ascend-910c"),
                                 ("hw", "show", "cloudmatrix384"), ("model", "show", "deepseek-r1", "--context", "32768")])
def test_listing_and_show(cli, cmd):
    code, out, err = cli(*cmd)
    assert code == 0, err
    code, out, _ = cli(*cmd, "--format", "json")
    assert code == 0
    assert isinstance(json.loads(out), list)
    code, out, _ = cli(*cmd, "--format", "csv")
    assert code == 0 and len(pd.read_csv(io.StringIO(out))) > 0


@pytest.mark.parametrize("phase,keys", [("decode", DECODE_KEYS), ("prefill", PREFILL_KEYS)])
def test_predict_defaults_json(cli, phase, keys):
    code, out, err = cli("predict", phase, "--format", "json")
    assert code == 0, err
    data = json.loads(out)  # nothing but JSON on stdout
    assert keys <= set(data)
    assert data["phase"] == phase and data["fits"] is True


def test_predict_decode_every_flag(cli, tmp_path):
    out_csv = tmp_path / "d.csv"
    code, out, err = cli("predict", "decode", "--batch", "32", "--prompt-len", "2048", "--output-len", "512",
                         "--kv-len", "2000", "--dies", "320", "--ep", "160", "--microbatches", "2", "--mtp",
                         "--mtp-k", "2", "--mtp-acceptance", "0.8", "--expert-imbalance", "1.2",
                         "--redundant-experts", "32", "--shared-copies", "32", "--kv-dtype", "int8",
                         "--hardware", "cloudmatrix384", "--model", "deepseek-r1",
                         "--set", "system.tiers.ub.bandwidth_Bps=270e9", "--breakdown", "--format", "json",
                         "--out", out_csv)
    assert code == 0, err
    data = json.loads(out)
    assert data["ep"] == 160 and data["microbatches_used"] == 2 and data["kv_len"] == 2000
    assert data["tokens_per_iteration"] == pytest.approx(1 + 0.8 + 0.64)
    assert len(data["breakdown"]) > 10
    assert pd.read_csv(out_csv, comment="#")["tpot_ms"].iat[0] == pytest.approx(data["tpot_ms"])


def test_predict_prefill_every_flag(cli):
    code, out, err = cli("predict", "prefill", "--tokens-per-npu", "8192", "--prompt-len", "2048", "--dies", "64",
                         "--ep", "64", "--attn-tp", "8", "--microbatches", "1", "--no-mtp", "--expert-imbalance",
                         "default", "--redundant-experts", "0", "--shared-copies", "64", "--kv-dtype", "bf16",
                         "--format", "json")
    assert code == 0, err
    data = json.loads(out)
    assert data["microbatches_used"] == 1 and data["mtp"] == 0 and data["expert_imbalance"] > 1


def test_table_output_and_breakdown(cli):
    code, out, err = cli("predict", "decode", "--batch", "8", "--breakdown")
    assert code == 0, err
    assert "tpot_ms" in out and "attention_core" in out and "dispatch" in out


@pytest.mark.parametrize("phase,values,total", [
    ("decode", {"batch": 96, "microbatches": 2}, "iteration_ms"),
    ("decode", {"batch": 8, "microbatches": 1}, "iteration_ms"),
    ("prefill", {"microbatches": 2}, "forward_ms"),
    ("prefill", {"microbatches": 1}, "forward_ms"),
])
def test_breakdown_combines_to_total(phase, values, total):
    """The per-operator table, combined by each section's stated rule, bounds the section
    times, and the sections add up to the reported total."""
    r = predict(phase, values)
    ops, sections = r.breakdown(0)
    assert sections["total_ms"].sum() == pytest.approx(r.table[total].iat[0], rel=1e-9)
    n = values["microbatches"]
    one = predict(phase, {**values, "microbatches": 1}).breakdown(0)[1].set_index("section")["time_us"]
    for _, sec in sections.iterrows():
        o = ops[ops["section"] == sec["section"]]
        if sec["section"].endswith("_fill_drain"):
            assert sec["time_us"] >= -1e-6  # the first and last layer never beat the steady state
            continue
        serial = o["time_us"].sum()
        if "microbatch" not in sec["rule"]:  # ops in series
            assert sec["time_us"] == pytest.approx(serial, rel=1e-9)
        elif n == 1:  # one microbatch: every op and every barrier wait in series
            assert sec["time_us"] >= serial * (1 - 1e-9)
            if phase == "decode" and sec["section"] == "moe_layer":
                assert sec["time_us"] == pytest.approx(serial + r.table["barrier_wait_us"].iat[0], rel=1e-9)
        else:  # two microbatches: no faster than either lane's work, no slower than in series
            lanes = o.groupby("stream")["time_us"].sum()
            assert sec["time_us"] >= 2 * lanes.max() * (1 - 1e-9)
            assert sec["time_us"] <= one[sec["section"]] * 2 * (1 + 1e-9)
            if phase == "decode" and sec["section"] == "moe_layer":
                a, b = lanes["A (attention)"], lanes["B (moe)"]
                w = r.table["barrier_wait_us"].iat[0] / 2  # per microbatch
                assert sec["time_us"] == pytest.approx(max(2 * a, 2 * b, a + b + w), rel=1e-9)


def test_microbatch_auto_takes_faster(cli):
    one = predict("decode", {"batch": 8, "microbatches": 1}).table["tpot_ms"].iat[0]
    two = predict("decode", {"batch": 8, "microbatches": 2}).table["tpot_ms"].iat[0]
    auto = predict("decode", {"batch": 8}).table["tpot_ms"].iat[0]
    assert auto == pytest.approx(min(one, two))


def test_not_fitting_warns_with_numbers(cli):
    code, out, err = cli("predict", "decode", "--batch", "1000", "--format", "json")
    assert code == 0
    assert json.loads(out)["fits"] is False
    assert "does not fit" in err and "GB per die" in err and "64 GB" in err


def test_installed_console_script_from_any_directory(tmp_path):
    exe = shutil.which("cmperf") or os.path.join(os.path.dirname(sys.executable), "cmperf")
    if not os.path.exists(exe):
        pytest.skip("console script not installed")
    res = subprocess.run([exe, "model", "show", "deepseek-r1", "--format", "json"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    total = next(r for r in json.loads(res.stdout) if r["quantity"].startswith("total (main"))
    assert total["value"] == pytest.approx(671e9, rel=0.01)
