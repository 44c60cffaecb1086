"""The README says what the tool prints: every `cmperf` command of its shell blocks runs (in
order, in a scratch folder, so that `search report decode.csv` finds the file an earlier
command wrote), and every number its prose quotes is the number the tool computes now.

When a change moves a quoted number, this test fails until the README says the new one: the
README is not allowed to drift from the tool."""

from __future__ import annotations

import json
import os
import re
import shlex
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text(encoding="utf-8")

# Commands the run leaves out, each with why (their outputs are checked elsewhere).
SLOW = {
    "cmperf validate --cross-validate": "1-2 minutes on 2 cores; its held-out errors are checked below from the bands file",
}


def readme_commands() -> list[str]:
    """Every `cmperf ...` line of the README's bash blocks, continuation lines joined, comments cut."""
    out = []
    for block in re.findall(r"```bash\n(.*?)```", README, flags=re.S):
        text = block.replace("\\\n", " ")
        for line in text.splitlines():
            line = line.split(" #")[0].strip()
            if line.startswith("cmperf "):
                out.append(line)
    return out


def test_the_readme_has_commands():
    cmds = readme_commands()
    assert len(cmds) > 40 and "cmperf predict decode" in cmds and "cmperf plan" in cmds


def test_every_readme_command_runs(cli, tmp_path, monkeypatch):
    (tmp_path / "tests").mkdir()
    os.symlink(REPO / "tests" / "data", tmp_path / "tests" / "data")
    monkeypatch.chdir(tmp_path)
    ran = 0
    for cmd in readme_commands():
        if cmd in SLOW:
            continue
        code, out, err = cli(*shlex.split(cmd)[1:])
        assert "Traceback" not in err, (cmd, err)
        assert code == 0, (cmd, err)
        ran += 1
    assert ran >= 40


# --------------------------------------------------------------------------- quoted numbers
def _json(cli, *args):
    code, out, err = cli(*args, "--format", "json")
    assert code == 0, err
    return json.loads(out)


def quoted(cli) -> dict[str, str]:
    """README phrase -> the same phrase with the number the tool computes now."""
    d = _json(cli, "predict", "decode")
    d1 = _json(cli, "predict", "decode", "--batch", "96", "--kv-len", "4096")
    long = _json(cli, "predict", "decode", "--kv-len", "131072", "--batch", "96")
    gb = _json(cli, "predict", "decode", "--hardware", "gb200-nvl72")
    p = _json(cli, "plan")
    b, ratio = p["best"], p["aggregated_vs_disaggregated"]
    h100 = _json(cli, "plan", "--hardware", "h100-cluster", "--model", "llama-3.1-70b")["best"]
    node = _json(cli, "plan", "--hardware", "h100-cluster", "--model", "llama-3.1-70b", "--npus", "8", "--prompt-len",
                 "1024", "--output-len", "64", "--ttft-slo", "5000", "--tpot-slo", "200")["aggregated_vs_disaggregated"]
    hits = {h: _json(cli, "plan", "--prefix-hit", h)["best"]["goodput_rps"] for h in ("0.5", "0.9")}
    vpc = {h: _json(cli, "plan", "--prefix-hit", h, "--pool-path", "vpc")["best"]["goodput_rps"] for h in ("0.5", "0.9")}
    return {
        "TPOT 51.26 ms and 1,873 tokens/s per NPU": f"TPOT {d['tpot_ms']:.2f} ms and {d['throughput_per_npu']:,.0f} tokens/s per NPU",
        "cmperf gives 50.12 ms and 1,915": f"cmperf gives {d1['tpot_ms']:.2f} ms and {d1['throughput_per_npu']:,.0f}",
        "+7.5 % over one": f"+{100 * d['microbatch_gain']:.1f} % over one",
        "needs 473.5 GB per die": f"needs {long['memory_per_die_bytes'] / 1e9:.1f} GB per die",
        "at 128K is 8 per NPU": f"at 128K is {long['max_batch_per_npu']:g} per NPU",
        "EP48, DeepSeek-V3 FP8, 395 requests per GPU": f"EP{gb['ep']:g}, DeepSeek-V3 FP8, {gb['batch']:g} requests per GPU",
        "**494.3 requests/s (29,659 per minute)**": f"**{b['goodput_rps']:.1f} requests/s ({b['goodput_rpm']:,.0f} per minute)**",
        "waits 157 ms for a place": f"waits {b['ttft_queue_ms']:.0f} ms for a place",
        "608 ms for the running pass": f"{b['ttft_align_ms']:.0f} ms for the running pass",
        "a 1,223 ms pass": f"a {b['ttft_prefill_ms']:,.0f} ms pass",
        "a 12 ms KV transfer": f"a {b['ttft_kv_transfer_ms']:.0f} ms KV transfer",
        "holds 58.6 requests per NPU at TPOT 37.0 ms": f"holds {b['decode_batch_per_npu']:.1f} requests per NPU at TPOT {b['tpot_ms']:.1f} ms",
        "serves 167.2 requests/s here, 0.34 of PD's": f"serves {ratio['colocated_goodput_rps']:.1f} requests/s here, "
                                                    f"{ratio['colocated_vs_pd_goodput']:.2f} of PD's",
        "50 % hits: 713.8": f"50 % hits: {hits['0.5']:.1f}",
        "90 %: 1,427.5": f"90 %: {hits['0.9']:,.1f}",
        "VPC plane (678.9 and\n1,270.9)": f"VPC plane ({vpc['0.5']:.1f} and\n{vpc['0.9']:,.1f})",
        "serves 76.5 requests/s": f"serves {h100['goodput_rps']:.1f} requests/s",
        "co-located instances serve\n1.52×": f"co-located instances serve\n{node['colocated_vs_pd_goodput']:.2f}×",
    }


def test_every_quoted_number_is_what_the_tool_prints(cli):
    phrases = quoted(cli)
    missing = [phrase for phrase in phrases if phrase not in README]
    assert not missing, f"the README no longer quotes: {missing}"
    wrong = {phrase: now for phrase, now in phrases.items() if phrase != now}
    assert not wrong, f"README phrase -> what the tool prints now: {wrong}"


def test_quoted_bands_and_held_out_errors_are_the_stored_ones():
    """The bands and held-out errors the README quotes, against the bands file the calibration
    writes (`python -m cmperf.calibration --write`) and the held-out errors it names."""
    from cmperf.bands import band_for

    text = {"cloudmatrix384": "±8 % for decode, ±3 % for prefill", "h800-cluster": "H800 ±17 %", "h100-cluster": "H100 ±24 %",
            "h200-cluster": "H200 ±11 %", "h20-cluster": "H20 ±4.5 %", "b200-cluster": "B200 ±19.5 %",
            "gb200-nvl72": "GB200 ±20 %", "mi300x-cluster": "MI300X ±23.5 %"}
    # the systems without evidence of their own, each named in the README's list of them
    widest = "band, ±24 %: the 910B, the Atlas 350 cluster, the Atlas 950 and 960 SuperPoDs, GB300 NVL72 and\nMI355X"
    text |= {s: widest for s in ("atlas-800t-a2", "atlas-350-cluster", "atlas-950-superpod", "atlas-960-superpod",
                                 "gb300-nvl72", "mi355x-cluster")}
    for system, phrase in text.items():
        assert phrase in README, phrase
        numbers = [float(x) for x in re.findall(r"±([\d.]+) %", phrase)]
        decode = band_for("decode", system)
        assert numbers[0] == pytest.approx(100 * decode.relative), system
        assert numbers[-1] == pytest.approx(100 * band_for("prefill", system).relative), system
        assert decode.floor == (system != "cloudmatrix384"), system
    bands = (REPO / "cmperf" / "reference" / "prediction-bands.yaml").read_text()
    assert "P1 +2.64 % held out" in bands and "within 2.64 %" in README
    assert "D1 +2.59 % held out" in bands and "within 2.59 %" in README
    assert "D2 -0.32 % held out" in bands and "and 0.32 % at batch 8" in README


def test_quoted_held_out_errors_of_the_other_groups():
    """The per-layer, Table 7 and ablation errors the README quotes are no band's: the paper's
    cross-validation (`cmperf validate --cross-validate`, ~30 s) computes them here."""
    from cmperf.calibration.crossval import cross_validate

    g = cross_validate().groups.set_index("group")
    assert g["predicts"].all()
    phrases = {
        "per-layer and per-stream times within 10.96 %": f"per-layer and per-stream times within {g.loc['L', 'held_out_max_abs_error']:.2f} %",
        "dispatch/combine within 12.58 %": f"dispatch/combine within {g.loc['T7', 'held_out_max_abs_error']:.2f} %",
        "gains within 7.2 points": f"gains within {100 * g.loc['A1', 'held_out_max_abs_error']:.1f} points",
    }
    readme = " ".join(README.split())
    assert [p for p in phrases if p not in readme] == []
    assert {p: now for p, now in phrases.items() if p != now} == {}
