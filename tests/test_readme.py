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
    "cmperf validate --cross-validate": "~20 s of CPU; its held-out errors are checked below from the bands file",
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


FILE_SUFFIXES = (".csv", ".json", ".yaml", ".yml", ".png", ".svg", ".pdf", ".html", ".parquet", ".txt")
WRITE_FLAGS = ("--out", "--export", "--deployment-out", "--plot", "--html")
CHUNKS = 16  # groups of commands the suite's workers share (pytest-xdist): small enough that no group is a long tail


def _scratch_names(cmd: str) -> set[str]:
    """The files and folders of the scratch folder a command names (its first path part): every
    value of a flag that writes, and every file-like argument that is not in the repository."""
    args = shlex.split(cmd)[1:]
    names = set()
    for i, a in enumerate(args):
        written = i > 0 and args[i - 1] in WRITE_FLAGS
        if written or (a.endswith(FILE_SUFFIXES) and not (REPO / a).exists()):
            names.add(Path(a).parts[0])
    return names


def command_chunks() -> list[list[str]]:
    """The README's commands (each distinct one once) in CHUNKS groups: commands that name the
    same scratch file (one writes it, a later one reads it) stay in one group, in the README's
    order; the groups are dealt to the chunks by size, so that the workers of the suite share
    them."""
    cmds = list(dict.fromkeys(c for c in readme_commands() if c not in SLOW))
    group = list(range(len(cmds)))  # union-find over commands sharing a scratch name

    def root(i):
        while group[i] != i:
            i = group[i]
        return i

    first: dict[str, int] = {}
    for i, c in enumerate(cmds):
        for n in _scratch_names(c):
            group[root(i)] = root(first.setdefault(n, i))
    members: dict[int, list[int]] = {}
    for i in range(len(cmds)):
        members.setdefault(root(i), []).append(i)
    chunks: list[list[int]] = [[] for _ in range(CHUNKS)]
    for g in sorted(members.values(), key=len, reverse=True):
        min(chunks, key=len).extend(g)
    return [[cmds[i] for i in sorted(c)] for c in chunks if c]


def test_the_chunks_hold_every_command_once():
    chunks = command_chunks()
    flat = [c for chunk in chunks for c in chunk]
    assert sorted(flat) == sorted(set(c for c in readme_commands() if c not in SLOW))
    together = [chunk for chunk in chunks if "cmperf search report decode.csv --slo 30 --plot decode30.png" in chunk]
    assert together and any(c.startswith("cmperf search decode") and "--out decode.csv" in c for c in together[0])


@pytest.mark.parametrize("chunk", range(CHUNKS))
def test_every_readme_command_runs(chunk, cli, tmp_path, monkeypatch):
    chunks = command_chunks()
    if chunk >= len(chunks):
        pytest.skip("fewer groups of commands than chunks")
    (tmp_path / "tests").mkdir()
    os.symlink(REPO / "tests" / "data", tmp_path / "tests" / "data")
    os.symlink(REPO / "examples", tmp_path / "examples")  # cmperf study examples/study.yaml
    monkeypatch.chdir(tmp_path)
    if any(shlex.split(cmd)[1:3] == ["validate", "--serving"] for cmd in chunks[chunk]):
        # the serving fit (~10-15 s of CPU) is the session's one, which
        # tests/test_serving_fit.py also checks: computed once (tests/helpers.py), and the
        # command reads it from the answer cache as it would on its second run
        from helpers import shared_serving_fit

        from cmperf.calibration.serving import SERVING_FILES, load_serving

        for p in SERVING_FILES:
            if load_serving(p).get("fit"):
                shared_serving_fit(p)
    for cmd in chunks[chunk]:
        code, out, err = cli(*shlex.split(cmd)[1:])
        assert "Traceback" not in err, (cmd, err)
        assert code == 0, (cmd, err)


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
        "TPOT 51.38 ms and 1,868 tokens/s per NPU": f"TPOT {d['tpot_ms']:.2f} ms and {d['throughput_per_npu']:,.0f} tokens/s per NPU",
        "cmperf gives 50.24 ms and 1,911": f"cmperf gives {d1['tpot_ms']:.2f} ms and {d1['throughput_per_npu']:,.0f}",
        "+7.5 % over one": f"+{100 * d['microbatch_gain']:.1f} % over one",
        "needs 473.5 GB per die": f"needs {long['memory_per_die_bytes'] / 1e9:.1f} GB per die",
        "at 128K is 8 per NPU": f"at 128K is {long['max_batch_per_npu']:g} per NPU",
        "EP48, DeepSeek-V3 FP8, 395 requests per GPU": f"EP{gb['ep']:g}, DeepSeek-V3 FP8, {gb['batch']:g} requests per GPU",
        "**494.5 requests/s (29,672 per minute)**": f"**{b['goodput_rps']:.1f} requests/s ({b['goodput_rpm']:,.0f} per minute)**",
        "waits 129 ms for a place": f"waits {b['ttft_queue_ms']:.0f} ms for a place",
        "607 ms for the running pass": f"{b['ttft_align_ms']:.0f} ms for the running pass",
        "a 1,216 ms pass": f"a {b['ttft_prefill_ms']:,.0f} ms pass",
        "a 6 ms KV transfer": f"a {b['ttft_kv_transfer_ms']:.0f} ms KV transfer",
        "waits 23 ms for the decode step": f"waits {b['ttft_decode_join_ms']:.0f} ms for the decode step",
        "holds 43.0 requests per NPU at TPOT 27.1 ms": f"holds {b['decode_batch_per_npu']:.1f} requests per NPU at TPOT {b['tpot_ms']:.1f} ms",
        "serves 165.7 requests/s here, 0.34 of PD's": f"serves {ratio['colocated_goodput_rps']:.1f} requests/s here, "
                                                    f"{ratio['colocated_vs_pd_goodput']:.2f} of PD's",
        "50 % hits: 715.9": f"50 % hits: {hits['0.5']:.1f}",
        "90 %: 1,419.0": f"90 %: {hits['0.9']:,.1f}",
        "VPC plane (680.8 and\n1,273.8)": f"VPC plane ({vpc['0.5']:.1f} and\n{vpc['0.9']:,.1f})",
        "serves 68.8 requests/s": f"serves {h100['goodput_rps']:.1f} requests/s",
        "co-located instances serve\n1.45×": f"co-located instances serve\n{node['colocated_vs_pd_goodput']:.2f}×",
    }


def test_every_quoted_number_is_what_the_tool_prints(cli):
    phrases = quoted(cli)
    missing = [phrase for phrase in phrases if phrase not in README]
    assert not missing, f"the README no longer quotes: {missing}"
    wrong = {phrase: now for phrase, now in phrases.items() if phrase != now}
    assert not wrong, f"README phrase -> what the tool prints now: {wrong}"


def _op_us(prediction, section, op):
    """Time of one call of an operator in a `--breakdown` JSON (one microbatch)."""
    (row,) = [r for r in prediction["breakdown"] if r["section"] == section and r["op"] == op]
    return row["time_us"]


def next_quoted(cli) -> dict[str, str]:
    """The quotes of the deployment defaults of the new systems and of "Next machines and
    models" (whitespace-insensitive: README phrase -> the phrase rebuilt from the output)."""
    gb3 = _json(cli, "predict", "decode", "--hardware", "gb300-nvl72")
    a950 = _json(cli, "predict", "decode", "--hardware", "atlas-950-superpod")
    v32, qn, oss = (_json(cli, "predict", "decode", "--model", m, "--kv-len", "131072", "--breakdown")
                    for m in ("deepseek-v3.2", "qwen3-next-80b-a3b", "gpt-oss-120b"))
    state = [f for f in _json(cli, "model", "show", "qwen3-next-80b-a3b")
             if f["section"] == "state per sequence, linear layers" and f["quantity"] == "bf16"]
    systems = ("cloudmatrix384", "atlas-950-superpod", "gb300-nvl72", "h200-cluster")
    cmp = {w: {r["system"]: r for r in _json(cli, "compare", "decode", "--model", "deepseek-v3.2", "--hardware",
                                             ",".join(systems), *w)}
           for w in ((), ("--with", "kv_len=131072"))}
    short, long = cmp[()], cmp[("--with", "kv_len=131072")]
    pl = _json(cli, "plan", "--hardware", "atlas-950-superpod")
    b, ratio = pl["best"], pl["aggregated_vs_disaggregated"]
    phrases = {
        "GB200's EP48: 650 requests per GPU (768 capped by HBM)":
            f"GB200's EP{gb3['ep']:g}: {gb3['batch']:g} requests per GPU (768 capped by HBM)",
        "CloudMatrix384's EP320 on 320 NPUs, 96 per NPU: TPOT 65.72 ms":
            f"CloudMatrix384's EP{a950['ep']:g} on {a950['dies']:g} NPUs, {a950['batch']:g} per NPU: TPOT {a950['tpot_ms']:.2f} ms",
        "DeepSeek-V3.2 holds 6 requests per NPU (KV cache 31.3 GB per die) at TPOT 20.70 ms":
            f"DeepSeek-V3.2 holds {v32['batch']:g} requests per NPU (KV cache {v32['kv_cache_per_die_bytes'] / 1e9:.1f} GB "
            f"per die) at TPOT {v32['tpot_ms']:.2f} ms",
        "scores all 131,072 cached keys in 167.8 µs":
            f"scores all {v32['kv_len']:,.0f} cached keys in {_op_us(v32, 'moe_layer', 'indexer_scores'):.1f} µs",
        "attends to the 2,048 it keeps in 22.4 µs":
            f"attends to the 2,048 it keeps in {_op_us(v32, 'moe_layer', 'sparse_attention_core'):.1f} µs",
        "Qwen3-Next-80B-A3B holds 32 per NPU (52.17 GB) at TPOT 52.12 ms":
            f"Qwen3-Next-80B-A3B holds {qn['batch']:g} per NPU ({qn['kv_cache_per_die_bytes'] / 1e9:.2f} GB) at TPOT "
            f"{qn['tpot_ms']:.2f} ms",
        "`linear_attention` takes 25.2 µs per microbatch":
            f"`linear_attention` takes {_op_us(qn, 'moe_layer_linear', 'linear_attention'):.1f} µs per microbatch",
        "(39.52 MB per sequence in BF16:": f"({state[0]['value'] / 1e6:.2f} MB per sequence in BF16:",
        "a full-attention layer's `attention_core` 1,597 µs":
            f"a full-attention layer's `attention_core` {_op_us(qn, 'moe_layer', 'attention_core'):,.0f} µs",
        "gpt-oss-120b holds 22 per NPU (53.2 GB) at TPOT 51.84 ms":
            f"gpt-oss-120b holds {oss['batch']:g} per NPU ({oss['kv_cache_per_die_bytes'] / 1e9:.1f} GB) at TPOT "
            f"{oss['tpot_ms']:.2f} ms",
        "a 128-token window layer's attention takes 3.4 µs, a full layer's 2,196 µs":
            f"a 128-token window layer's attention takes {_op_us(oss, 'moe_layer_window', 'window_attention_core'):.1f} µs, "
            f"a full layer's {_op_us(oss, 'moe_layer', 'attention_core'):,.0f} µs",
        "at its Table 4 set-up's 4,096-token cache, the others at prompt + output/2 = 4,224":
            f"at its Table 4 set-up's {short['cloudmatrix384']['kv_len']:,.0f}-token cache, the others at prompt + "
            f"output/2 = {short['h200-cluster']['kv_len']:,.0f}",
        "the best deployment is AFD, 849 prefill instances of 8 dies (TP 4) and 15 AFD decode instances of 64 "
        "attention + 16 expert dies (7,992 NPUs), serving 7,121 requests/s, bound by the prefill TTFT":
            f"the best deployment is {b['shape'].upper()}, {b['prefill_instances']:g} prefill instances of "
            f"{b['prefill_dies']:g} dies (TP {b['prefill_tp']:g}) and {b['decode_instances']:g} AFD decode instances of "
            f"{b['attention_dies']:g} attention + {b['expert_dies']:g} expert dies ({b['npus']:,.0f} NPUs), serving "
            f"{b['goodput_rps']:,.0f} requests/s, bound by the "
            + ("prefill TTFT" if b["binding"] == "prefill capacity (the TTFT SLO)" else b["binding"]),
        "The best PD split serves 7,057 requests/s, the best co-located one 0.73 of PD's":
            f"The best PD split serves {ratio['pd_goodput_rps']:,.0f} requests/s, the best co-located one "
            f"{ratio['colocated_vs_pd_goodput']:.2f} of PD's",
    }
    for s in systems:  # the table: one row per system
        a, c = short[s], long[s]
        phrases[f"| {s} |"] = (f"| {s} | {a['confidence']} | {a['tpot_ms']:.2f} ms | {a['throughput_per_npu']:,.0f} | "
                               f"{c['tpot_ms']:.2f} ms | {c['batch']:g} |")
        assert a["band_floor"] and c["band_floor"], s  # "Every band below is a floor"
    band = {s: f"{100 * (short[s]['tpot_ms_hi'] / short[s]['tpot_ms'] - 1):.3g}" for s in systems}
    assert band["gb300-nvl72"] == band["atlas-950-superpod"]
    phrases["take ±24 % (floor), the H200 ±11 % (floor)"] = (f"take ±{band['gb300-nvl72']} % (floor), "
                                                           f"the H200 ±{band['h200-cluster']} % (floor)")
    return phrases


def test_next_machines_quotes_are_what_the_tool_prints(cli):
    readme = " ".join(README.split())
    phrases = next_quoted(cli)
    rows = {p: next((line for line in README.splitlines() if line.startswith(p)), None) for p in phrases if p.startswith("| ")}
    missing = [p for p in phrases if p not in readme]
    assert not missing, f"the README no longer quotes: {missing}"
    wrong = {p: now for p, now in phrases.items() if rows.get(p, p) != now}
    assert not wrong, f"README phrase -> what the tool prints now: {wrong}"


def test_quoted_bands_and_held_out_errors_are_the_stored_ones():
    """The bands and held-out errors the README quotes, against the bands file the calibration
    writes (`python -m cmperf.calibration --write`) and the held-out errors it names."""
    from cmperf.bands import band_for

    text = {"cloudmatrix384": "±7.5 % for decode, ±3 % for prefill", "h800-cluster": "H800 ±17 %", "h100-cluster": "H100 ±24 %",
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
    assert "P1 +2.94 % held out" in bands and "within 2.94 %" in README
    assert "D1 +2.99 % held out" in bands and "within 2.99 %" in README
    assert "D2 -0.34 % held out" in bands and "and 0.34 % at batch 8" in README


def test_quoted_held_out_errors_of_the_other_groups():
    """The per-layer, Table 7 and ablation errors the README quotes are no band's: the paper's
    cross-validation (`cmperf validate --cross-validate`, ~8 s of CPU) computes them here."""
    from cmperf.calibration.crossval import cross_validate

    g = cross_validate().groups.set_index("group")
    assert g["predicts"].all()
    phrases = {
        "per-layer and per-stream times within 11.22 %": f"per-layer and per-stream times within {g.loc['L', 'held_out_max_abs_error']:.2f} %",
        "dispatch/combine within 13.62 %": f"dispatch/combine within {g.loc['T7', 'held_out_max_abs_error']:.2f} %",
        "gains within 7.6 points": f"gains within {100 * g.loc['A1', 'held_out_max_abs_error']:.1f} points",
    }
    readme = " ".join(README.split())
    assert [p for p in phrases if p not in readme] == []
    assert {p: now for p, now in phrases.items() if p != now} == {}
