"""Generated bad inputs: command lines, spec/reference/CSV files and output paths that a careless
or hostile user could give cmperf. Shared by tests/test_bad_input.py (in-process, fast) and
benchmarks/bad_input_campaign.py (each case in a subprocess with a timeout, counted).

A case is ``(name, argv, expect)``: ``expect`` is ``"error"`` when the input is wrong and must
end in one ``cmperf: error:`` line and exit 2, or ``"any"`` when it may also be legitimate (then
exit 0 or 1 with no NaN, inf or negative time in the output is fine too).
"""

from __future__ import annotations

import json
import math
import os
import re
import stat
from pathlib import Path

from cmperf.specs.loader import resolve

CHIP = Path(resolve("chip", "ascend-910c"))
SYSTEM = Path(resolve("system", "cloudmatrix384"))
MODEL = Path(resolve("model", "deepseek-r1"))

WEIRD_NUMBERS = ["nan", "inf", "-inf", "NaN", "1e-300", "-1", "0", "1e300", "abc", "", "1e", "0x10", "1_000", "٣"]
ERROR_LINE = re.compile(r"^cmperf: error: \S")
# Outputs empty by design (cmperf/predict.py EMPTY_BY_DESIGN) and inputs left unset.
MAY_BE_EMPTY = {"stream_a_us", "stream_b_us", "attention_share"}
MAY_BE_NEGATIVE = {"microbatch_gain", "microbatch_layer_saving"}


# --------------------------------------------------------------------------- command lines
def flag_cases() -> list[tuple[str, list[str], str]]:
    """Every numeric flag of predict and search with every weird number; sentinels; impossible
    combinations; usage errors."""
    out = []
    decode = ["--batch", "--prompt-len", "--output-len", "--kv-len", "--dies", "--ep", "--tp", "--mtp-k",
              "--mtp-acceptance", "--expert-imbalance", "--redundant-experts", "--shared-copies", "--attention-share",
              "--microbatches"]
    prefill = ["--tokens-per-npu", "--prompt-len", "--dies", "--ep", "--attn-tp", "--expert-imbalance",
               "--redundant-experts", "--shared-copies", "--microbatches"]
    for phase, flags in (("decode", decode), ("prefill", prefill)):
        for flag in flags:
            for v in WEIRD_NUMBERS:
                # 1e300, 0, -1 are wrong for every flag here; a few (e.g. --redundant-experts 0) are legitimate
                legit = (v == "0" and flag in ("--redundant-experts", "--mtp-acceptance")) or (v == "1_000" and flag in (
                    "--prompt-len", "--kv-len", "--output-len", "--tokens-per-npu", "--batch", "--mtp-k")) or (
                    v == "1e-300" and flag == "--mtp-acceptance")
                out.append((f"predict {phase} {flag} {v!r}", ["predict", phase, flag, v, "-f", "json"],
                            "any" if legit else "error"))
    afd = ["--batch", "--attention-dies", "--expert-dies", "--kv-len", "--microbatches", "--mtp-acceptance"]
    for flag in afd:
        for v in WEIRD_NUMBERS:
            legit = (v == "0" and flag == "--mtp-acceptance") or (v == "1_000" and flag in ("--kv-len", "--batch")) or (
                v == "1e-300" and flag == "--mtp-acceptance")
            out.append((f"predict afd {flag} {v!r}", ["predict", "afd", flag, v, "-f", "json"], "any" if legit else "error"))
    for v in WEIRD_NUMBERS:  # prefill's cached prefix: 0 and 1_000 tokens are legitimate
        out.append((f"predict prefill --cached-len {v!r}", ["predict", "prefill", "--cached-len", v, "-f", "json"],
                    "any" if v in ("0", "1_000") else "error"))
    # the planner: every numeric flag with every weird number (a few are legitimate plans)
    plan = ["--npus", "--supernode", "--rate", "--prompt-len", "--output-len", "--prefix-hit", "--block-tokens",
            "--working-set-tokens", "--ttft-slo", "--tpot-slo", "--top"]
    for flag in plan:
        for v in WEIRD_NUMBERS:
            legit = (v == "0" and flag in ("--prefix-hit", "--top")) or (v == "1_000" and flag in (
                "--rate", "--prompt-len", "--output-len", "--working-set-tokens", "--ttft-slo", "--tpot-slo", "--top")) or (
                v == "1e-300" and flag in ("--rate", "--working-set-tokens", "--ttft-slo", "--tpot-slo")) or (
                v == "1e300" and flag == "--rate") or (  # a rate no deployment meets, an SLO none can: exit 1, said why
                v == "1_000" and flag in ("--npus", "--block-tokens")) or (v == "1e-300" and flag == "--prefix-hit")
            out.append((f"plan {flag} {v!r}", ["plan", "--shapes", "pd", "--npus", "64", flag, v, "-f", "json"]
                        if flag != "--npus" else ["plan", "--shapes", "pd", flag, v, "-f", "json"], "any" if legit else "error"))
    slo = {"decode": "--tpot-slo", "prefill": "--ttft-slo"}
    for phase in ("decode", "prefill"):
        for v in ["nan", "inf", "-1", "0", "abc"]:
            out.append((f"search {phase} SLO {v}", ["search", phase, slo[phase], v, "-f", "json"], "error"))
        for v in ["0", "-1", "abc", "1.5"]:
            out.append((f"search {phase} --top {v}", ["search", phase, slo[phase], "50", "--top", v, "-f", "json"], "error"))
    for flag, v in [("--batch", "0:8"), ("--batch", "nan,8"), ("--batch", "8:1"), ("--batch", "1:1e12"), ("--batch", "1:8:0"),
                    ("--batch", ",,"), ("--microbatches", "0"), ("--microbatches", "3"), ("--mtp", "maybe"),
                    ("--ep", "0"), ("--ep", "-1"), ("--shared-copies", "-1"), ("--expert-imbalance", "nan"),
                    ("--mtp-acceptance", "inf"), ("--kv-len", "nan"), ("--dies", "1.5")]:
        out.append((f"search decode {flag} {v}", ["search", "decode", "--tpot-slo", "50", "--batch", "8", flag, v,
                                                  "-f", "json"] if flag != "--batch" else
                    ["search", "decode", "--tpot-slo", "50", flag, v, "-f", "json"], "error"))
    for sweep in ["chip.die.matrix_units=24,24.5", "chip.die.hbm_bandwidth_Bps=nan", "chip.die.hbm_bandwidth_Bps=-1,1e12",
                  "model.moe.routed_experts=0", "chip.die.nope=1", "chip.die=1,2", "system.tiers.ub.bandwidth_Bps=inf",
                  "chip.efficiency.matmul_compute=0.5,1.5", "chip.die.hbm_bandwidth_Bps=", "=1,2", "x"]:
        out.append((f"search --sweep {sweep}", ["search", "decode", "--tpot-slo", "50", "--batch", "8", "--sweep", sweep,
                                                "-f", "json"], "error"))
    for s in ["chip.die.hbm_bandwidth_Bps=nan", "chip.die.hbm_bandwidth_Bps=inf", "chip.die.hbm_bandwidth_Bps=-inf",
              "chip.die.hbm_bandwidth_Bps=" + "9" * 5000, "chip.die.hbm_bandwidth_Bps=[", "chip.die.hbm_bandwidth_Bps=*a",
              "chip.die.hbm_bandwidth_Bps=" + "[" * 100 + "]" * 100, "chip.die.hbm_bandwidth_Bps={a: 1}",
              "chip.die.hbm_bandwidth_Bps=" + "x" * 100000, "chip.die.matrix_units=24.5", "chip.die=1", "chip.die.x.y=1",
              "model.moe.routed_experts=4", "model.first_dense_layers=100", "system.kv_transfer_tier=zzz",
              "chip.die.hbm_bandwidth_Bps=1e-300", "chip.die.peak_flops_per_s.int8=1e-300", "system.nodes=0",
              "chip.efficiency.matmul_compute=1.5", "gpu.x=1", "chip.die.hbm_bandwidth_Bps", "=1", "chip.=1"]:
        out.append((f"--set {s[:60]}", ["predict", "decode", "--set", s, "-f", "json"], "error"))
    out += [
        ("predict decode --dies 7 (32+32 experts)", ["predict", "decode", "--dies", "7", "--redundant-experts", "32",
                                                     "--shared-copies", "32"], "error"),
        ("predict decode --expert-imbalance 500", ["predict", "decode", "--expert-imbalance", "500"], "error"),
        ("predict prefill --tokens-per-npu 100", ["predict", "prefill", "--tokens-per-npu", "100"], "error"),
        ("predict decode --attention-share 1e-300", ["predict", "decode", "--attention-share", "1e-300"], "error"),
        ("predict decode --format xml", ["predict", "decode", "--format", "xml"], "error"),
        ("predict decode --kv-dtype fp64", ["predict", "decode", "--kv-dtype", "fp64"], "error"),
        ("predict decode --nope", ["predict", "decode", "--nope"], "error"),
        ("predict decode --batch (missing)", ["predict", "decode", "--batch"], "error"),
        ("nosuch command", ["nosuch"], "error"),
        ("hw show /tmp", ["hw", "show", "/tmp"], "error"),
        ("predict --hardware /tmp", ["predict", "decode", "--hardware", "/tmp"], "error"),
        ("predict --hardware /dev/null", ["predict", "decode", "--hardware", "/dev/null"], "error"),
        ("predict --model /dev/zero", ["predict", "decode", "--model", "/dev/zero"], "error"),
        ("hw show chip --set system", ["hw", "show", "ascend-910c", "--set", "system.nodes=3"], "error"),
        ("model show --context 0", ["model", "show", "deepseek-r1", "--context", "0"], "error"),
        ("compare --with batch=nan", ["compare", "decode", "--with", "batch=nan"], "error"),
        ("compare --with ep=0", ["compare", "decode", "--with", "ep=0"], "error"),
        ("validate missing file", ["validate", "/no/such/ref.yaml"], "error"),
        ("search report missing", ["search", "report", "/no/such.csv"], "error"),
        ("search report /tmp", ["search", "report", "/tmp"], "error"),
    ]
    return out


# --------------------------------------------------------------------------- spec files
def _leaves(text: str) -> list[tuple[int, int, int]]:
    """(line, start, end) of every `value: NUMBER` in a spec file's text."""
    return [(i, m.start(1), m.end(1)) for i, line in enumerate(text.splitlines())
            for m in re.finditer(r"value: (-?[0-9][0-9_.eE+-]*)", line)]


def spec_file_cases(tmp: Path) -> list[tuple[str, list[str], str]]:
    """Each shipped spec file broken in every way listed in issue 11: encodings, nesting,
    aliases, duplicate keys, .inf/.nan, every numeric field replaced by weird values."""
    out = []
    for kind, src in (("chip", CHIP), ("system", SYSTEM), ("model", MODEL)):
        text = src.read_text()

        def case(name, data, expect="error", kind=kind, src=src):
            d = tmp / f"{kind}-{len(out)}"
            d.mkdir(parents=True, exist_ok=True)
            if kind == "chip":  # a system file next to the broken chip picks it up
                (d / src.name).write_bytes(data)
                (d / "sys.yaml").write_text(SYSTEM.read_text())
                argv = ["predict", "decode", "--hardware", str(d / "sys.yaml"), "-f", "json"]
            elif kind == "system":
                (d / "sys.yaml").write_bytes(data)
                argv = ["predict", "decode", "--hardware", str(d / "sys.yaml"), "-f", "json"]
            else:
                (d / "m.yaml").write_bytes(data)
                argv = ["predict", "decode", "--model", str(d / "m.yaml"), "-f", "json"]
            out.append((f"{kind} file: {name}", argv, expect))

        case("UTF-16", text.encode("utf-16"))
        case("UTF-16 without BOM", text.encode("utf-16-le"))
        case("binary", os.urandom(2048))
        case("one Latin-1 byte", text.replace("name:", "n\u00e4me:", 1).encode("latin-1", errors="replace"))
        case("NUL byte", text.encode() + b"\x00")
        case("nested 5,000 deep", (text + "\nextra: " + "[" * 5000 + "]" * 5000 + "\n").encode())
        case("nested 5,000 deep (block)", (text + "\n" + "".join(" " * i + f"k{i}:\n" for i in range(400)) + " " * 400 + "v\n").encode())
        laughs = "".join(f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 9)}]\n" for i in range(1, 10))
        case("billion laughs", (text + "\nl0: &l0 lol\n" + laughs).encode())
        bomb = "l0: &l0 lol\n" + laughs  # the same, expanded into a field that echoes its input when wrong
        case("billion laughs in a field", (bomb + re.sub(r"(?m)^description: .*$", "description: *l9", text, count=1)).encode())
        case("billion laughs as the kind", (bomb + re.sub(r"(?m)^kind: .*$", "kind: *l9", text, count=1)).encode())
        case("empty", b"")
        case("a list", b"- 1\n- 2\n")
        case("3 MB", (text + "\n# " + "x" * 3_000_000 + "\n").encode())
        first_key = text.splitlines()[[i for i, l in enumerate(text.splitlines()) if re.match(r"^[a-z_]+:", l)][0]].split(":")[0]
        case("duplicate top-level key", (text + f"\n{first_key}: again\n").encode())
        case("tab indentation", text.replace("  ", "\t", 3).encode())
        for i, (line, a, b) in enumerate(_leaves(text)):
            lines = text.splitlines()
            for v in (".inf", ".nan", "-1", "0", "1e-300", "1e300", "'12'", "[1, 2]", "{value: 1}", "null", "true", "1.5",
                      "!!int 1.5", "!!timestamp x", "9" * 5000):
                if v in ("1.5", "1e300", "true", "!!int 1.5", "!!timestamp x", "9" * 5000) and i % 3:  # a few hundred cases
                    continue
                changed = lines[:line] + [lines[line][:a] + v + lines[line][b:]] + lines[line + 1:]
                # some replacements are legitimate for some fields (1.5 as a bandwidth): either is fine
                legit = v in ("1.5", "1e300", "true", "'12'", "1e-300", "0")  # 0: a latency or reserve may be zero
                case(f"line {line + 1} value {v}", ("\n".join(changed) + "\n").encode(), "any" if legit else "error")
                if len(out) > 400:
                    break
    return out


# --------------------------------------------------------------------------- reference files
REF_ROW = ("name: t\nsource: test\nrows:\n  - {{id: A, description: d, where: w, phase: {phase}, metric: {metric}, "
           "paper: {paper}, {tol}, scenario: {scenario}}}\n")


def reference_cases(tmp: Path) -> list[tuple[str, list[str], str]]:
    rows = [
        ("decode", "tpot_ms", "50", "tolerance: 0.1", "{batch: many}"),
        ("decode", "tpot_ms", "50", "tolerance: 0.1", "{batch: [8, 16]}"),
        ("decode", "tpot_ms", "50", "tolerance: 0.1", "{batch: {a: 1}}"),
        ("decode", "tpot_ms", "50", "tolerance: 0.1", "{batch: .nan}"),
        ("decode", "tpot_ms", "50", "tolerance: 0.1", "{batch: 0}"),
        ("decode", "tpot_ms", "50", "tolerance: 0.1", "{ep: 0}"),
        ("decode", "tpot_ms", "50", "tolerance: 0.1", "{ep: -1}"),
        ("decode", "tpot_ms", "50", "tolerance: 0.1", "{dies: 7, redundant_experts: 32, shared_copies: 32}"),
        ("decode", "tpot_ms", "50", "tolerance: 0.1", "{kv_len: .inf}"),
        ("decode", "tpot_ms", "50", "tolerance: 0.1", "{expert_imbalance: 1000}"),
        ("decode", "tpot_ms", "50", "tolerance: 0.1", "{batchh: 8}"),
        ("decode", "tpot_ms", "50", "tolerance: 0.1", "{mtp: maybe}"),
        ("decode", "tpot_ms", "50", "tolerance: .inf", "{batch: 8}"),
        ("decode", "tpot_ms", "50", "tolerance: 'inf'", "{batch: 8}"),
        ("decode", "tpot_ms", "50", "tolerance: -1", "{batch: 8}"),
        ("decode", "tpot_ms", "50", "tolerance: 0", "{batch: 8}"),
        ("decode", "tpot_ms", ".nan", "tolerance: 0.1", "{batch: 8}"),
        ("decode", "tpot_ms", "'nan'", "tolerance: 0.1", "{batch: 8}"),
        ("decode", "tpot_ms", "0", "tolerance: 0.1", "{batch: 8}"),
        ("decode", "nope_ms", "50", "tolerance: 0.1", "{batch: 8}"),
        ("decode", "[1]", "50", "tolerance: 0.1", "{batch: 8}"),
        ("spec", "chip.die", "50", "tolerance: 0.1", "{}"),
        ("spec", "chip.name", "50", "tolerance: 0.1", "{}"),
        ("spec", "chip.die.nope", "50", "tolerance: 0.1", "{}"),
        ("spec", "gpu.x", "50", "tolerance: 0.1", "{}"),
        ("spec", "chip.die.hbm_bandwidth_Bps", "50", "tolerance: 0.1", "{batch: 8}"),
        ("nope", "tpot_ms", "50", "tolerance: 0.1", "{}"),
        ("prefill", "ttft_ms", "50", "tolerance: 0.1", "{tokens_per_npu: 100}"),
        ("gemm", "gemm_TFLOPS", "50", "tolerance: 0.1", "{dtype: 3}"),
        ("gemm", "gemm_TFLOPS", "50", "tolerance: 0.1", "{m: 1.5}"),
        ("collective", "dispatch_us", "50", "tolerance: 0.1", "{tokens: .inf}"),
    ]
    out = []
    for i, (phase, metric, paper, tol, scenario) in enumerate(rows):
        p = tmp / f"ref-{i}.yaml"
        p.write_text(REF_ROW.format(phase=phase, metric=metric, paper=paper, tol=tol, scenario=scenario))
        out.append((f"reference row: {phase} {metric} paper {paper} {tol} {scenario}", ["validate", str(p)], "error"))
    p = tmp / "ref-utf16.yaml"
    p.write_bytes(REF_ROW.format(phase="decode", metric="tpot_ms", paper=50, tol="tolerance: 0.1",
                                 scenario="{batch: 8}").encode("utf-16"))
    out.append(("reference file: UTF-16", ["validate", str(p)], "error"))
    p = tmp / "ref-dup.yaml"
    p.write_text(REF_ROW.format(phase="decode", metric="tpot_ms", paper=50, tol="tolerance: 0.1, tolerance: 0.2",
                                scenario="{batch: 8}"))
    out.append(("reference file: duplicate key", ["validate", str(p)], "error"))
    return out


# --------------------------------------------------------------------------- search CSVs
def csv_cases(tmp: Path, good: Path) -> list[tuple[str, list[str], str]]:
    """A search CSV (``good``, written by cmperf search --out) with one cell made bad."""
    import pandas as pd

    from cmperf.report import read_provenance

    skip = read_provenance(good)[1]  # the '# key: value' lines cmperf writes before the table
    head = "".join(good.read_text().splitlines(keepends=True)[:skip])
    t = pd.read_csv(good, skiprows=skip).astype(object)
    out = []
    edits = [(0, "tpot_ms", -1), (1, "tpot_ms", "fast"), (2, "tpot_ms", float("nan")), (0, "tpot_ms", float("inf")),
             (0, "throughput_per_npu", -5), (0, "throughput_per_npu", "x"), (0, "fits", "maybe"), (0, "batch", "nan"),
             (0, "slo_ms", 0), (0, "slo_ms", "x"), (0, "rank", 0), (0, "rank", 1.5), (0, "rank", "first"),
             (1, "phase", "prefill"), (0, "phase", "gemm"), (0, "memory_per_die_bytes", -1), (0, "ep", "all")]
    for row, col, value in edits:
        bad = t.copy()
        bad.loc[row, col] = value
        p = tmp / f"bad-{len(out)}.csv"
        p.write_text(head + bad.to_csv(index=False))
        out.append((f"search CSV: line {row + 2} {col} = {value!r}", ["search", "report", str(p), "-f", "json"], "error"))
    for name, data in (("binary", os.urandom(1000)), ("UTF-16", good.read_text().encode("utf-16")), ("empty", b""),
                       ("header only", good.read_text().splitlines()[0].encode() + b"\n"),
                       ("other CSV", b"a,b\n1,2\n"), ("ragged", good.read_bytes() + b"1,2\n")):
        p = tmp / f"bad-{len(out)}.csv"
        p.write_bytes(data)
        out.append((f"search CSV: {name}", ["search", "report", str(p), "-f", "json"], "error"))
    out.append(("search report --top 0", ["search", "report", str(good), "--top", "0"], "error"))
    out.append(("search report --slo nan", ["search", "report", str(good), "--slo", "nan"], "error"))
    return out


# --------------------------------------------------------------------------- output paths
def private_device(tmp: Path) -> Path | None:
    """A character device of our own (a copy of /dev/null's node) to point --out at: never the
    system's /dev/null, which a cmperf that renames over its output would replace by a file.
    None where device nodes cannot be made (not root)."""
    node = tmp / "null-device"
    if not node.exists():
        try:
            os.mknod(node, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
        except (PermissionError, AttributeError, OSError):
            return None
    return node


def output_cases(tmp: Path) -> list[tuple[str, list[str], str]]:
    fifo = tmp / "fifo.csv"
    if not fifo.exists():
        os.mkfifo(fifo)
    afile = tmp / "a-file"
    afile.write_text("x")
    paths = {"empty": "", "a directory": str(tmp), "a directory with slash": f"{tmp}/", "missing parent": str(tmp / "no" / "x.csv"),
             "parent is a file": str(afile / "x.csv"), "FIFO": str(fifo),
             "unwritable (sysfs)": "/sys/x.csv", "unwritable (procfs)": "/proc/x.csv", "name too long": str(tmp / ("x" * 300))}
    device = private_device(tmp)
    if device is not None:
        paths["device"] = str(device)
    out = []
    for name, path in paths.items():
        out.append((f"predict --out {name}", ["predict", "decode", "--out", path, "-f", "json"], "error"))
        out.append((f"search --out {name}", ["search", "decode", "--tpot-slo", "50", "--batch", "8", "--out", path, "-f", "json"], "error"))
        out.append((f"search --plot {name}", ["search", "decode", "--tpot-slo", "50", "--batch", "8", "--plot", path, "-f", "json"], "error"))
        out.append((f"compare --out {name}", ["compare", "decode", "--out", path, "-f", "json"], "error"))
    return out


# --------------------------------------------------------------------------- judging a run
def bad_output(stdout: str) -> str:
    """'' or what is wrong with a successful run's JSON: a NaN, inf or null outside the fields
    empty by design, or a negative time, rate or size."""
    try:
        data = json.loads(stdout)
    except ValueError:
        return "" if stdout.strip() == "" or not stdout.lstrip().startswith(("{", "[")) else "unreadable JSON"

    def walk(x, key=""):
        if isinstance(x, dict):
            for k, v in x.items():
                found = walk(v, str(k))
                if found:
                    return found
        elif isinstance(x, list):
            for v in x:
                found = walk(v, key)
                if found:
                    return found
        elif x is None and key not in MAY_BE_EMPTY and key.endswith(("_ms", "_us", "_npu", "_bytes", "_s", "_GBps")):
            return f"{key} is null"
        elif isinstance(x, float) and not math.isfinite(x):
            return f"{key} is {x}"
        elif isinstance(x, (int, float)) and not isinstance(x, bool) and x < 0 and key not in MAY_BE_NEGATIVE \
                and key.endswith(("_ms", "_us", "_npu", "_bytes", "_GBps", "_TFLOPS")):
            return f"{key} is negative ({x})"
        return ""

    return walk(data)


def judge(expect: str, code, stdout: str, stderr: str) -> str:
    """One of: 'clear error', 'unclear error', 'traceback', 'silent acceptance', 'bad output', 'ok'."""
    if code == "timeout":
        return "hang"
    if "Traceback" in stderr or code not in (0, 1, 2):
        return "traceback"
    lines = [line for line in stderr.splitlines() if line.strip() and not line.startswith("cmperf: warning:")]
    if code == 2:
        if len(lines) == 1 and ERROR_LINE.match(lines[0]) and len(lines[0]) <= 2100:
            return "clear error"
        return "unclear error"
    problem = bad_output(stdout)
    if problem:
        return "bad output"
    return "silent acceptance" if expect == "error" else "ok"
