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
    if expect == "warning":  # legitimate but off: an answer with a line that says what is off
        said = any(line.startswith(("cmperf: warning:", "cmperf: note:")) for line in stderr.splitlines())
        return "ok" if said else "silent acceptance"
    return "silent acceptance" if expect == "error" else "ok"


# --------------------------------------------------------------------------- issue 17's families
# A case may carry a fourth element, options of the campaign's runner: ``env`` (variables),
# ``stdout`` ("full": /dev/full, "closed": no descriptor 1), ``signal`` ((signal name, seconds
# after the start)), ``leftovers`` (a directory that must hold nothing but what it held).
def plan_cases(tmp: Path, big: bool = True) -> list[tuple]:
    """plan's flags beyond numbers, and its --trace files (``big``: the 4 and 64 MB ones too)."""
    tmp.mkdir(parents=True, exist_ok=True)
    many = ",".join(str(i) for i in range(1, 65))
    hits = ",".join(f"{i / 100:g}" for i in range(64))
    small = ["--npus", "32", "--shapes", "pd", "-f", "json"]
    out = [
        ("plan --rate x --prefix-hit 64 x 64", ["plan", "--rate", many, "--prefix-hit", hits], "error"),
        ("plan --sweep 1,000 values", ["plan", "--sweep", "system.tiers.ub.bandwidth_Bps=" + ",".join(
            f"{100e9 + i * 1e9:g}" for i in range(1000))], "error"),
        ("plan --rate 65 values", ["plan", "--rate", ",".join(str(i) for i in range(1, 66))], "error"),
        ("plan --kv-tier die_to_die", ["plan", "--kv-tier", "die_to_die", *small], "error"),
        ("plan --pool-path die_to_die", ["plan", "--pool-path", "die_to_die", "--prefix-hit", "0.5", *small], "error"),
        ("plan --kv-tier nosuch", ["plan", "--kv-tier", "nosuch", *small], "error"),
        ("plan h800 --kv-tier nvlink 64 NPUs", ["plan", "--hardware", "h800-cluster", "--kv-tier", "nvlink", "--npus", "64"],
         "error"),
        ("plan --pool-path on h800 (no pool)", ["plan", "--hardware", "h800-cluster", "--pool-path", "ib", *small], "error"),
        ("plan --shapes none", ["plan", "--shapes", "nope", "--npus", "32"], "error"),
        ("plan --shapes ,", ["plan", "--shapes", ",", "--npus", "32"], "error"),
        ("plan --supernode 100", ["plan", "--supernode", "100"], "error"),
        ("plan --supernode 1000", ["plan", "--supernode", "1000"], "error"),
        ("plan --ttft-stat p99", ["plan", "--ttft-stat", "p99", *small], "error"),
        ("plan --prompt-len 4096:1", ["plan", "--prompt-len", "4096:1", *small], "error"),
        ("plan --prompt-len 100:10000", ["plan", "--prompt-len", "100:10000", *small], "error"),
        ("plan --output-len exp:1e9", ["plan", "--output-len", "exp:1e9", *small], "error"),
        ("plan --output-len exp:abc", ["plan", "--output-len", "exp:abc", *small], "error"),
        ("plan --prompt-len 1", ["plan", "--prompt-len", "1", *small], "any"),
        ("plan --prompt-len 2", ["plan", "--prompt-len", "2", *small], "any"),
        ("plan --prompt-len 3", ["plan", "--prompt-len", "3", *small], "any"),
        ("plan --prefix-hit 0.5 --sweep block_tokens 128,512", ["plan", "--prefix-hit", "0.5", *small, "--sweep",
                                                                "system.memory_pool.block_tokens=128,512"], "any"),
        ("plan --sweep block_tokens 128.5", ["plan", "--prefix-hit", "0.5", *small, "--sweep",
                                            "system.memory_pool.block_tokens=128.5"], "error"),
        ("plan --sweep and --set the same field", ["plan", *small, "--set", "chip.die.hbm_bandwidth_Bps=2e12",
                                                   "--sweep", "chip.die.hbm_bandwidth_Bps=1e12,2e12"], "error"),
        ("plan --trace and --prefix-hit with a cached column", None, "error"),
    ]
    traces = {
        "BOM": (b"\xef\xbb\xbfprompt_len,output_len\n4096,256\n", "any"),
        "UTF-16": ("prompt_len,output_len\n4096,256\n".encode("utf-16"), "error"),
        "binary": (os.urandom(3000), "error"),
        "empty": (b"", "error"),
        "header only": (b"prompt_len,output_len\n", "error"),
        "wrong header": (b"prompt,output\n4096,256\n", "error"),
        "ragged": (b"prompt_len,output_len\n4096,256\n4096\n", "error"),
        "a 2e9 output": (b"prompt_len,output_len\n4096,2000000000\n", "error"),
        "a 1e9 prompt + output": (b"prompt_len,output_len\n1000000000,1000000000\n", "error"),
        "a fraction": (b"prompt_len,output_len\n4096.5,256\n", "error"),
        "a zero": (b"prompt_len,output_len\n0,256\n", "error"),
        "nan": (b"prompt_len,output_len\nnan,256\n", "error"),
        "digit groups": (b"prompt_len,output_len\n4_096,256\n", "error"),
        "cached >= prompt": (b"prompt_len,output_len,prefix_hit_tokens\n4096,256,4096\n", "error"),
        "cached column": (b"prompt_len,output_len,prefix_hit_tokens\n4096,256,1024\n8192,128,0\n", "any"),
        "a NUL byte": (b"prompt_len,output_len\n4096,2\x0056\n", "error"),
        "a blank line": (b"prompt_len,output_len\n4096,256\n\n4096,256\n", "error"),
        "a 200 kB cell": (b"prompt_len,output_len\n" + b"9" * 200_000 + b",1\n", "error"),
        "1,000,001 rows": (b"prompt_len,output_len\n" + b"1,1\n" * 1_000_001, "error"),
        "16 million rows": (b"prompt_len,output_len\n" + b"1,1\n" * 15_999_990, "error"),
    }
    for name, (data, expect) in traces.items():
        if not big and len(data) > 1_000_000:
            continue
        p = tmp / f"trace-{len(out)}.csv"
        p.write_bytes(data)
        out.append((f"plan --trace {name}", ["plan", "--trace", str(p), *small], expect))
    cached = tmp / "trace-cached.csv"
    cached.write_bytes(traces["cached column"][0])
    out = [c if c[1] is not None else (c[0], ["plan", "--trace", str(cached), "--prefix-hit", "0.3", *small], c[2])
           for c in out]
    fifo = tmp / "trace-fifo.csv"
    if not fifo.exists():
        os.mkfifo(fifo)
    out += [("plan --trace FIFO", ["plan", "--trace", str(fifo), *small], "error"),
            ("plan --trace directory", ["plan", "--trace", str(tmp), *small], "error"),
            ("plan --trace missing", ["plan", "--trace", str(tmp / "nope.csv"), *small], "error")]
    return out


def compare_cases(tmp: Path) -> list[tuple]:
    """compare's --with values and its set-up files (--config)."""
    tmp.mkdir(parents=True, exist_ok=True)
    out = []
    for w in ["batch=", "batch=null", "batch=[8,16]", "batch={a: 1}", "h800-cluster:batch=", "batch=1:30", "batch=0x10",
              "batch=abc", "nope=1", "nosuch-system:batch=8", "batch", ":batch=8", "batch=1e300", "batch=-1"]:
        out.append((f"compare --with {w}", ["compare", "decode", "--with", w, "-f", "json"], "error"))
    out.append(("compare --with batch=64", ["compare", "decode", "--with", "batch=64", "-f", "json"], "any"))
    out.append(("compare --set unknown system", ["compare", "decode", "--set", "nosuch:chip.die.hbm_bandwidth_Bps=1e12"],
                "error"))
    out.append(("compare --hardware nosuch", ["compare", "decode", "--hardware", "nosuch"], "error"))
    setups = {
        "a list value": "decode: {batch: [8, 16]}",
        "a null value": "decode: {batch: null}",
        "an unknown input": "decode: {batchh: 8}",
        "a mapping value": "decode: {batch: {a: 1}}",
        "an unknown model": "decode: {batch: 8}\n    model: nosuch",
        "a bad --set": "sets: ['chip.die.hbm_bandwidth_Bps=-1']",
        "a sexagesimal set": "sets: ['chip.die.hbm_bandwidth_Bps=1:30']",
    }
    for name, body in setups.items():
        p = tmp / f"setup-{len(out)}.yaml"
        model = "" if "model:" in body else "\n    model: deepseek-r1"
        p.write_text(f"name: mine\nsource: s\nsystems:\n  cloudmatrix384:\n    {body}{model}\n")
        out.append((f"compare --config {name}", ["compare", "decode", "--config", str(p), "-f", "json"], "error"))
    for name, data in (("empty", b""), ("no systems", b"name: x\nsource: s\nsystems: {}\n"), ("binary", os.urandom(500)),
                       ("a list", b"- 1\n")):
        p = tmp / f"setup-{len(out)}.yaml"
        p.write_bytes(data)
        out.append((f"compare --config {name}", ["compare", "decode", "--config", str(p)], "error"))
    return out


def hf_cases(tmp: Path) -> list[tuple]:
    """model import and --model of a config.json gone wrong, and what sits beside it."""
    src = Path(__file__).parent / "data" / "hf-configs" / "llama-3.1-70b.json"
    if not src.is_file():
        return []
    text = src.read_text()
    base = json.loads(text)
    out = []

    def case(name, data, expect="error", sources=None, argv_extra=()):
        d = tmp / f"hf-{len(out)}"
        d.mkdir(parents=True, exist_ok=True)
        p = d / "config.json"
        p.write_bytes(data if isinstance(data, bytes) else data.encode())
        if sources == "fifo":
            os.mkfifo(d / "SOURCES.md")
        elif sources == "dir":
            (d / "SOURCES.md").mkdir()
        elif sources is not None:
            (d / "SOURCES.md").write_bytes(sources)
        out.append((f"config.json: {name}", ["model", "import", str(p), *argv_extra], expect))

    case("a 5,001-digit integer", text.replace('"vocab_size": 128256', '"vocab_size": ' + "9" * 5001))
    case("a 400-digit float", text.replace('"rms_norm_eps": 1e-05', '"rms_norm_eps": 1' + "0" * 400 + '.5'))
    case("NaN", text.replace('"rms_norm_eps": 1e-05', '"rms_norm_eps": NaN'))
    case("Infinity", text.replace('"rms_norm_eps": 1e-05', '"rms_norm_eps": Infinity'))
    case("nested 10,000 deep", text[:-2] + ', "x": ' + "[" * 10000 + "]" * 10000 + "}\n")
    case("a key twice", text.replace('{', '{"hidden_size": 1, ', 1))
    case("a list", "[1, 2]")
    case("UTF-16", text.encode("utf-16"))
    case("binary", os.urandom(2000))
    case("empty", b"")
    case("hidden_size a string", json.dumps({**base, "hidden_size": "8192"}))
    case("hidden_size true", json.dumps({**base, "hidden_size": True}))
    case("hidden_size 0", json.dumps({**base, "hidden_size": 0}))
    case("no num_hidden_layers", json.dumps({k: v for k, v in base.items() if k != "num_hidden_layers"}))
    case("an unknown model_type", json.dumps({**base, "model_type": "nosuch"}))
    case("a model_type with a line break", json.dumps({**base, "model_type": "llama\nkind: chip"}))
    case("a key with a line break", json.dumps({**base, "weird\nkey: 1\n- x": 3, "sep\u2028key": 4}), "any")
    case("--name with a line break", text, "any", argv_extra=("--name", "a\nkind: chip"))
    case("SOURCES.md not UTF-8", text, "any", sources=b"| config.json | \xe9t\xe9 |\n")
    case("SOURCES.md a FIFO", text, "any", sources="fifo")
    case("SOURCES.md a folder", text, "any", sources="dir")
    case("SOURCES.md 3 MB", text, "any", sources=b"x" * 3_000_000)
    out.append(("config.json as --model", ["predict", "decode", "--hardware", "h100-cluster", "--model",
                                           str(tmp / "hf-0" / "config.json")], "error"))
    return out


def what_if_cases() -> list[tuple]:
    """Absurd what-ifs: implausible ones are predicted with a warning; impossible ones are errors."""
    implausible = ["chip.efficiency.matmul_compute=1e-9", "chip.die.hbm_bandwidth_Bps=1e30",
                   "chip.die.peak_flops_per_s.int8=1e30", "system.tiers.rdma.latency_s=10", "chip.die.matrix_units=1",
                   "chip.die.vector_units=1", "chip.die.matrix_units=100000", "system.tiers.ub.bandwidth_Bps=1e15",
                   "system.collectives.step_time_cv=5", "chip.latency.kernel_launch_s=1"]
    impossible = ["system.kv_transfer_tier=die_to_die", "system.memory_pool.tier=die_to_die",
                  "system.tiers.ub.domain_chips=1000", "system.kv_transfer_tier=[x]", "system.kv_transfer_tier={a: 1}",
                  "system.memory_pool.tier=[ub]", "system.expert_parallel.decode.tiers=[[ub]]",
                  "chip.die.hbm_bandwidth_Bps=1:30", "chip.die.hbm_bandwidth_Bps=0x10", "chip.die.hbm_bandwidth_Bps=0o17",
                  "model.tie_word_embeddings=yes", "system.nodes=47"]
    out = [(f"what-if {s}", ["predict", "decode", "--set", s, "-f", "json"], "any") for s in implausible]
    out += [(f"what-if {s}", ["predict", "decode", "--set", s, "-f", "json"], "error") for s in impossible]
    out += [("what-if ub above its nominal (both set)", ["predict", "decode", "--set", "system.tiers.ub.bandwidth_Bps=300e9",
                                                        "--set", "system.tiers.ub.nominal_Bps=200e9"], "error"),
            ("what-if h800 comm_units 200", ["predict", "prefill", "--hardware", "h800-cluster", "--set",
                                            "system.overlap.prefill.comm_units=200"], "error"),
            ("what-if h800 KV over nvlink", ["predict", "prefill", "--hardware", "h800-cluster", "--set",
                                            "system.kv_transfer_tier=nvlink"], "error"),
            ("what-if one cube core, two microbatches", ["predict", "decode", "--set", "chip.die.matrix_units=1",
                                                         "--microbatches", "2"], "error"),
            ("what-if search --sweep matrix_units 1,24", ["search", "decode", "--tpot-slo", "1000", "--batch", "8",
                                                          "--sweep", "chip.die.matrix_units=1,24", "-f", "json"], "any")]
    return out


def reference_file_cases(tmp: Path) -> list[tuple]:
    """Reference files a user may give validate: long plain ones are files, not alias bombs."""
    tmp.mkdir(parents=True, exist_ok=True)
    row = ("  - {{id: R{i}, description: d, where: w, phase: spec, metric: chip.die.hbm_bandwidth_Bps, paper: 1.6e12, "
           "tolerance: 0.01}}\n")
    out = []
    for name, body, expect in (
            ("6,000 plain rows", "".join(row.format(i=i) for i in range(6000)), "any"),
            ("a row id twice", row.format(i=1) * 2, "error"),
            ("nine aliases of nine", "l0: &l0 x\n" + "".join(f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 9)}]\n"
                                                             for i in range(1, 10)), "error")):
        p = tmp / f"ref-{len(out)}.yaml"
        head = "name: t\nsource: test\nhardware: cloudmatrix384\n"
        p.write_text(head + (body if body.startswith("l0") else "rows:\n" + body))
        out.append((f"reference file: {name}", ["validate", str(p), "-f", "json"], expect))
    p = tmp / "ref-bom.yaml"
    p.write_bytes(b"\xef\xbb\xbf" + ("name: t\nsource: test\nrows:\n" + row.format(i=0)).encode())
    out.append(("reference file: a byte-order mark", ["validate", str(p), "-f", "json"], "any"))
    return out


def environment_cases(tmp: Path) -> list[tuple]:
    """Output streams, encodings, signals and the spec cache: cases with runner options."""
    tmp.mkdir(parents=True, exist_ok=True)
    out = []
    for argv in (["predict", "decode"], ["hw", "show", "cloudmatrix384"], ["plan", "--npus", "32", "--shapes", "pd"],
                 ["validate", str(Path(resolve("system", "cloudmatrix384")).parents[1] / "cmperf" / "reference" /
                                  "h800-microbenchmarks.yaml")], ["compare", "decode"], ["search", "decode", "--tpot-slo", "50"]):
        name = " ".join(argv[:2])
        out.append((f"stream: {name} with PYTHONIOENCODING=ascii", argv, "any", {"env": {"PYTHONIOENCODING": "ascii"}}))
        out.append((f"stream: {name} in a C locale", argv, "any", {"env": {"LC_ALL": "C", "LANG": "C", "PYTHONUTF8": "0"}}))
        out.append((f"stream: {name} to a full disk", argv, "error", {"stdout": "full"}))
        out.append((f"stream: {name} with stdout closed", argv, "error", {"stdout": "closed"}))
    for sig in ("SIGINT", "SIGTERM", "SIGHUP"):
        for label, argv in (("search --out", ["search", "decode", "--batch", "1:256:1", "--kv-len", "1024:131072:256"]),
                            ("plan --out", ["plan", "--npus", "64", "--rate", ",".join(str(i) for i in range(1, 40))])):
            d = tmp / f"sig-{len(out)}"
            d.mkdir(exist_ok=True)
            (d / "f.csv").write_text("old\n")
            out.append((f"signal: {sig} during {label}", [*argv, "--out", str(d / "f.csv"), "--force"], "interrupted",
                        {"signal": (sig, 5.0), "leftovers": str(d)}))
    # the spec cache, every entry corrupted one way (the runner copies a filled cache first)
    for how in ("valid JSON lie", "wrong type", "truncated", "binary", "FIFO", "folder", "link to /dev/zero", "empty"):
        out.append((f"cache: every entry {how}", ["predict", "decode", "-f", "json"], "same",
                    {"cache": how}))
    return out


# --------------------------------------------------------------------------- issue 23's families
SIM = ["--num-prompts", "10", "--request-rate", "5", "-f", "json"]
TRAFFIC_WEIRD = WEIRD_NUMBERS + ["1e-320", "1e-160", "+inf", "Infinity", "9223372036854775808", "0.5", "1.5"]


def round3_flag_cases() -> list[tuple]:
    """Issue 23's flag families: simulate's traffic flags with every weird number, stack limits
    by --set, deployment shapes by flag, plan's given shapes with a budget, model contexts, a
    stack of another vendor."""
    out = []
    legit = {  # values that are a legitimate run of each flag (the rest must be one clear line)
        "--seed": {"0"}, "--request-rate": {"inf", "1e300", "+inf", "Infinity", "0.5", "1.5", "1_000", "9223372036854775808"},
        "--burstiness": {"0.5", "1.5"}, "--warmup": {"0", "0.5", "1e-300", "1e-320", "1e-160"}, "--num-prompts": set(),
        "--max-concurrency": set()}
    for flag, ok in legit.items():
        for v in TRAFFIC_WEIRD:
            argv = ["simulate", "--num-prompts", "10", "--request-rate", "5", flag, v, "-f", "json"]
            out.append((f"simulate {flag} {v!r}", argv, "any" if v in ok else "error"))
    for field in ("max_running_per_rank", "max_prefill_tokens", "max_prefill_requests", "kv_block_tokens",
                  "chunked_prefill_tokens", "mtp_draft_tokens", "scheduler_overhead_s", "prefill_overhead_s",
                  "eager_launch_s", "mtp_acceptance"):
        for v in ("0", "-1", "1e30", "nan", "9" * 401, "1.5", "abc"):
            legit_v = (v == "0" and field in ("chunked_prefill_tokens", "mtp_draft_tokens", "scheduler_overhead_s",
                                               "prefill_overhead_s", "eager_launch_s"))
            out.append((f"simulate --set stack.{field}={v[:20]}", ["simulate", "--set", f"stack.{field}={v}", *SIM],
                        "any" if legit_v else "error"))
    out.append(("plan --verify stack.max_running_per_rank=0", ["plan", "--shapes", "pd", "--npus", "64", "--verify",
                                                               "--set", "stack.max_running_per_rank=0"], "error"))
    for shape in ("0x32", "1x0", "-1x32", "1x32:tp=0", "1x32:tp=3", "1x1000000", "100000000x32", "1x" + "9" * 60, "6x32x2",
                  "1x32+8", "x", ""):
        out.append((f"simulate --prefill {shape[:30]}", ["simulate", "--prefill", shape, "--decode", "1x32", *SIM], "error"))
    out += [
        ("simulate 1,760 NPUs on 384", ["simulate", "--prefill", "100x32", "--decode", "1x320", *SIM], "error"),
        ("simulate --colocated 1x1000", ["simulate", "--colocated", "1x1000", *SIM], "error"),
        ("simulate --afd 1x0+96", ["simulate", "--prefill", "1x32", "--afd", "1x0+96", *SIM], "error"),
        ("simulate --decode 1x320:tp=7", ["simulate", "--prefill", "1x32", "--decode", "1x320:tp=7", *SIM], "error"),
        ("simulate 33-die instance", ["simulate", "--prefill", "1x33", "--decode", "1x32", *SIM], "warning"),
        ("simulate 1-die DeepSeek-R1", ["simulate", "--prefill", "1x1", "--decode", "1x32", *SIM], "warning"),
        ("plan shapes over --npus 10", ["plan", "--prefill", "6x32", "--decode", "1x320", "--npus", "10"], "error"),
        ("plan shapes --npus -1", ["plan", "--prefill", "6x32", "--decode", "1x320", "--npus", "-1"], "error"),
        ("plan --prefill 1x1000000", ["plan", "--prefill", "1x1000000", "--decode", "1x32"], "error"),
        ("predict h100 --stack vllm-ascend", ["predict", "decode", "--hardware", "h100-cluster", "--stack", "vllm-ascend",
                                              "-f", "json"], "warning"),
        ("predict gpt-oss --kv-len 8x context", ["predict", "decode", "--hardware", "h100-cluster", "--model", "gpt-oss-120b",
                                                 "--kv-len", "1048576", "-f", "json"], "warning"),
        ("simulate prompts past the context", ["simulate", "--hardware", "h100-cluster", "--model", "qwen3-30b-a3b",
                                               "--prompt-len", "60000", *SIM], "warning"),
    ]
    for m in ("gpt-oss-120b", "deepseek-v3.2", "qwen3-next-80b-a3b", "glm-4.5", "deepseek-r1"):
        for v in ("9223372036854775808", "0", "-1", "1e9", "nan"):
            out.append((f"model show {m} --context {v}", ["model", "show", m, "--context", v, "-f", "json"], "error"))
        out.append((f"model show {m} --context 10M", ["model", "show", m, "--context", "10000000", "-f", "json"], "warning"))
    return out


def _serving_variants() -> dict:
    """Issue 23 item 1's serving files, as changes of one released row (data, row) -> None."""
    import copy

    def set_(path, value):
        def f(d, r):
            obj = d if path[0] == "" else r
            for k in path[1:-1]:
                obj = obj[k]
            obj[path[-1]] = value
        return f

    def pop(path):
        def f(d, r):
            obj = d if path[0] == "" else r
            for k in path[1:-1]:
                obj = obj[k]
            obj.pop(path[-1])
        return f

    out = {"deployment {}": set_(["r", "deployment"], {}), "deployment a string": set_(["r", "deployment"], "6x32"),
           "deployment a list": set_(["r", "deployment"], [1, 2]),
           "no deployment": pop(["r", "deployment"]), "no workload": pop(["r", "workload"]), "no measured": pop(["r", "measured"]),
           "no targets": pop(["", "targets"]), "no rows": set_(["", "rows"], []), "rows a string": set_(["", "rows"], "x"),
           "target of 0": set_(["", "targets", "mean_tpot_ms"], 0), "target of nan": set_(["", "targets", "mean_tpot_ms"], float("nan")),
           "no target for a metric": pop(["", "targets", "mean_ttft_ms"]),
           "misspelled metric": set_(["r", "measured", "p99_ttft_msec"], 1.0), "measured {}": set_(["r", "measured"], {}),
           "a row a string": lambda d, r: d["rows"].append("x"), "a row a number": lambda d, r: d["rows"].append(3),
           "two rows one id": lambda d, r: d["rows"].append(copy.deepcopy(r)),
           "unknown row field": set_(["r", "colour"], "red"), "unknown top field": set_(["", "colour"], "red"),
           "stack_sets not a list": set_(["r", "stack_sets"], "max_running_per_rank=2"),
           "stack_sets unknown field": set_(["r", "stack_sets"], ["nope=1"]),
           "sets bad": set_(["r", "sets"], ["chip.die.hbm_bandwidth_Bps=-1"]),
           "hardware nosuch": set_(["", "hardware"], "nosuch"), "stack nosuch": set_(["", "stack"], "nosuch")}
    for v in (0, -3, "19.5 ms", float("nan"), float("inf"), None, [1], True):
        out[f"measured {v!r}"] = set_(["r", "measured", "mean_tpot_ms"], v)
    for k in ("prompt_len", "output_len"):
        for v in (0, -1, "3.5K", 1.5, 10**12, None):
            out[f"{k} {v!r}"] = set_(["r", "workload", k], v)
    for k, vals in (("num_prompts", (0, -1, 10**7, 1.5, "32")), ("max_concurrency", (0, -1, 10**12, "x")),
                    ("request_rate", (0, -1, float("nan"), "fast", 1e-320))):
        for v in vals:
            out[f"traffic.{k} {v!r}"] = set_(["r", "traffic", k], v)
    out["no num_prompts"] = pop(["r", "traffic", "num_prompts"])
    for field in ("max_running_per_rank", "max_prefill_tokens", "max_prefill_requests", "kv_block_tokens"):
        out[f"stack_sets {field}=0"] = set_(["r", "stack_sets"], [f"{field}=0"])
    for k, v in (("dies", -16), ("dies", 0), ("attn_tp", 3), ("count", 100), ("count", 10**9), ("batch", 8), ("dies", "16")):
        out[f"prefill[0].{k} {v!r}"] = lambda d, r, k=k, v=v: r["deployment"]["prefill"][0].update({k: v})
    return out


def round3_file_cases(tmp: Path) -> list[tuple]:
    """Issue 23's file families: deployment files, serving-evidence files, traces, plot names."""
    import yaml

    tmp.mkdir(parents=True, exist_ok=True)
    out = []
    base = {"prefill": [{"count": 1, "dies": 32}], "decode": [{"count": 1, "dies": 32}]}
    groups = {"dies -32": {"dies": -32}, "dies 0": {"dies": 0}, "dies 32.5": {"dies": 32.5}, "dies '32'": {"dies": "32"},
              "dies true": {"dies": True}, "dies null": {"dies": None}, "dies 10^12": {"dies": 10**12},
              "attn_tp 3": {"attn_tp": 3}, "attn_tp 0": {"attn_tp": 0}, "count 0": {"count": 0}, "count 10^6": {"count": 10**6},
              "count 10^401": {"count": 10**401}, "batch 8": {"batch": 8}, "tp (prefill)": {"tp": 2}, "no count": None}
    for name, change in groups.items():
        d = {k: [dict(g) for g in v] for k, v in base.items()}
        if change is None:
            d["prefill"][0].pop("count")
        else:
            d["prefill"][0].update(change)
        p = tmp / f"dep-{len(out)}.yaml"
        p.write_text(yaml.safe_dump(d))
        out.append((f"deployment file: prefill[0] {name}", ["simulate", "--deployment", str(p), *SIM], "error"))
    for name, text in (("{}", "{}\n"), ("a string", "6x32\n"), ("a list", "[1, 2]\n"), ("prefill a number", "prefill: 3\ndecode: []\n"),
                       ("unknown group", "nope: []\n"), ("decode batch", "prefill: [{count: 1, dies: 32}]\ndecode: [{count: 1, dies: 32, batch: 8}]\n"),
                       ("10^6 instances", "prefill: [{count: 1000000, dies: 32}]\ndecode: [{count: 1, dies: 32}]\n"),
                       ("over the system", "prefill: [{count: 20, dies: 32}]\ndecode: [{count: 1, dies: 320}]\n"),
                       ("colocated and prefill", "prefill: [{count: 1, dies: 32}]\ncolocated: [{count: 1, dies: 32}]\n"),
                       ("afd without expert_dies", "prefill: [{count: 1, dies: 32}]\nafd: [{count: 1, attention_dies: 32}]\n"),
                       ("empty file", "")):
        p = tmp / f"dep-{len(out)}.yaml"
        p.write_text(text)
        out.append((f"deployment file: {name}", ["simulate", "--deployment", str(p), *SIM], "error"))
    good = tmp / "dep-good.yaml"
    good.write_text(yaml.safe_dump(base))
    out.append(("deployment file and --prefill", ["simulate", "--deployment", str(good), "--prefill", "1x32", "--decode", "1x32",
                                                 *SIM], "error"))
    out.append(("plan: deployment file and --prefill", ["plan", "--deployment", str(good), "--prefill", "1x32", "--decode", "1x32"],
                "error"))
    out.append(("plan: deployment file over --npus 16", ["plan", "--deployment", str(good), "--npus", "16"], "error"))
    ref = Path(__file__).resolve().parents[1] / "cmperf" / "reference" / "sglang-a3-serving.yaml"
    for name, change in _serving_variants().items():
        d = yaml.safe_load(ref.read_text())
        d["rows"] = d["rows"][1:2]
        change(d, d["rows"][0])
        p = tmp / f"serving-{len(out)}.yaml"
        p.write_text(yaml.safe_dump(d))
        out.append((f"serving file: {name}", ["validate", "--serving", str(p)], "error"))
    for name, rows in (("huge output", "100,10\n600000000,600000000\n"), ("zero prompt", "0,10\n"), ("nan", "nan,10\n"),
                       ("1e400", "1e400,10\n"), ("negative", "-5,10\n"), ("fraction", "10.5,3\n")):
        p = tmp / f"trace-{len(out)}.csv"
        p.write_text("prompt_len,output_len\n" + rows)
        out.append((f"trace: {name}", ["simulate", "--trace", str(p), *SIM], "error"))
    hf = Path(__file__).resolve().parent / "data" / "hf-configs"
    for config, key, value in (("gpt-oss-120b", "sliding_window", 200_000), ("deepseek-v3.2", "index_topk", 10**6),
                               ("llama-3.1-70b", "num_hidden_layers", 10**9), ("deepseek-v3", "num_nextn_predict_layers", 10**6),
                               ("llama-3.1-70b", "max_position_embeddings", 10**12), ("llama-3.1-70b", "max_position_embeddings", 0),
                               ("llama-3.1-70b", "max_position_embeddings", "128K")):
        c = json.loads((hf / f"{config}.json").read_text())
        c[key] = value
        p = tmp / f"config-{len(out)}.json"
        p.write_text(json.dumps(c))
        bad = key == "max_position_embeddings"
        out.append((f"import {config} {key}={value!r}", ["model", "import", str(p)], "error" if bad else "warning"))
    for name in ("", "a\nb", "x" * 201):
        out.append((f"import --name {name[:10]!r}", ["model", "import", str(hf / "llama-3.1-70b.json"), "--name", name], "error"))
    for suffix in (".pdf", ".svg", ".jpg", ".png", ".jpeg", ".tiff"):
        out.append((f"plot x{suffix}", ["simulate", "--plot", str(tmp / f"plot{suffix}"), *SIM], "any"))
    for name in ("x.docx", "x", "x.png.bak", "x.PDFX"):
        out.append((f"plot {name}", ["simulate", "--plot", str(tmp / name), *SIM], "error"))
    return out


# --------------------------------------------------------------------------- issue 33's families
USERS_BYTES = b"a user's own data\n\x00\xff\n"  # what a file cmperf did not write holds


def writer_cases(tmp: Path) -> list[tuple]:
    """Issue 33: every writer meets a user's file (refused, the file byte for byte: runner option
    ``kept``, the files that must keep USERS_BYTES), two flags naming one file, and bad export
    targets (an empty name, too long, a file, below a file, a folder that takes no file)."""
    tmp.mkdir(parents=True, exist_ok=True)
    hf = Path(__file__).resolve().parent / "data" / "hf-configs"
    study = tmp / "study.yaml"
    study.write_text("hardware: cloudmatrix384\nnpus: 32\nworkload: {prompt_len: 2048, output_len: 128}\nshapes: pd\n")
    writers = {"predict --out": (["predict", "decode", "--out"], "csv"),
               "search --out": (["search", "decode", "--tpot-slo", "50", "--batch", "8", "--out"], "csv"),
               "search --plot": (["search", "decode", "--tpot-slo", "50", "--batch", "8", "--plot"], "png"),
               "compare --out": (["compare", "decode", "--out"], "csv"),
               "plan --out": (["plan", "--npus", "32", "--shapes", "pd", "--out"], "csv"),
               "plan --plot": (["plan", "--npus", "32", "--shapes", "pd", "--plot"], "svg"),
               "simulate --out": (["simulate", *SIM, "--out"], "csv"),
               "simulate --plot": (["simulate", *SIM, "--plot"], "pdf"),
               "study --out": (["study", str(study), "--executor", "serial", "--out"], "csv"),
               "study --html": (["study", str(study), "--executor", "serial", "--html"], "html"),
               "hw show --deployment-out": (["hw", "show", "cloudmatrix384", "--deployment-out"], "yaml"),
               "model import --out": (["model", "import", str(hf / "qwen3-8b.json"), "--out"], "yaml")}
    out = []
    for name, (argv, suffix) in writers.items():
        f = tmp / f"users-{len(out)}.{suffix}"
        f.write_bytes(USERS_BYTES)
        out.append((f"writer: {name} over a user's file", [*argv, str(f)], "error", {"kept": [str(f)]}))
    for command in (["plan", "--npus", "32", "--shapes", "pd"], ["simulate", *SIM]):
        d = tmp / f"export-{len(out)}"
        d.mkdir()
        kept = [d / "sglang.sh", d / "deployment.yaml", d / "export.json"]
        for f in kept:
            f.write_bytes(USERS_BYTES)
        out.append((f"writer: {command[0]} --export over a user's files", [*command, "--export", str(d)], "error",
                     {"kept": [str(f) for f in kept]}))
        afile = tmp / f"a-file-{len(out)}"
        afile.write_bytes(USERS_BYTES)
        for label, target in (("''", ""), ("a name too long", str(tmp / ("x" * 300))), ("a file", str(afile)),
                              ("below a file", str(afile / "ex")), ("procfs", "/proc"), ("below procfs", "/proc/cmperf/ex"),
                              ("sysfs", "/sys/cmperf-ex")):
            out.append((f"writer: {command[0]} --export {label}", [*command, "--export", target], "error",
                        {"kept": [str(afile)]}))
    same = tmp / "same.csv"
    for argv in (["search", "decode", "--tpot-slo", "50", "--batch", "8", "--out", str(same), "--plot", str(same)],
                 ["plan", "--npus", "32", "--out", str(same), "--plot", str(same)],
                 ["study", str(study), "--out", str(same), "--html", str(same)]):
        out.append((f"writer: {argv[0]} two flags on one file", argv, "error"))
    return out


def round3_cases(tmp: Path) -> list[tuple]:
    return [*round3_flag_cases(), *round3_file_cases(tmp)]


# --------------------------------------------------------------------------- issue 33's families
def _without(text: str, start: str, indent: str) -> str:
    """``text`` without the block that begins with the line ``start`` (and every line under it
    indented deeper than ``indent``)."""
    lines = text.splitlines(keepends=True)
    i = next(n for n, line in enumerate(lines) if line.rstrip("\n") == start)
    j = i + 1
    while j < len(lines) and (lines[j].startswith(indent + " ") or not lines[j].strip()):
        j += 1
    return "".join(lines[:i] + lines[j:])


def system_without(what: str) -> str:
    """The shipped CloudMatrix384 system file with one required entry deleted: the whole
    ``collectives.call_floor_s``, one kind of it, one tier of one kind, or a published
    deployment's ``dies``."""
    text = SYSTEM.read_text()
    if what == "call_floor_s":
        return _without(text, "  call_floor_s:", "  ")
    if what == "call_floor_s.all_gather":
        return _without(text, "    all_gather:", "    ")
    if what == "call_floor_s.all_reduce.ub":
        head, _, tail = text.partition("    all_reduce:\n")
        lines = tail.splitlines(keepends=True)
        return head + "    all_reduce:\n" + "".join(lines[:1] + lines[2:])  # die_to_die, then (no ub) rdma, vpc
    group = what.split(".")[1]  # deployment.decode.dies / deployment.prefill.dies
    top, _, section = text.partition("\ndeployment:\n")
    head, _, tail = section.partition(f"\n  {group}:\n")
    return top + "\ndeployment:\n" + head + f"\n  {group}:\n" + re.sub(r"^    dies: \d+\n", "", tail, count=1, flags=re.M)


def round4_cases(tmp: Path) -> list[tuple]:
    """Issue 33's boundaries, one per input kind, as command lines: plan's --verify-prompts, a
    given deployment larger than the system, trace rows out of arrival order, a system file
    without a required collective floor or a published deployment's dies, a deployment file's
    group without dies, a serving file whose fit: names a stack field that does not exist, a
    misspelt swept path."""
    import yaml

    tmp.mkdir(parents=True, exist_ok=True)
    small = ["--npus", "32", "--shapes", "pd", "-f", "json"]
    out = []
    for v in ("0", "-1", "1.5", "nan", "10000001"):
        out.append((f"plan --verify-prompts {v}", ["plan", "--verify-prompts", v, *small], "error"))
    out += [("plan 1,760 NPUs on 384", ["plan", "--prefill", "100x32", "--decode", "1x320", "-f", "json"], "error"),
            ("plan 1,760 NPUs with --npus 2000", ["plan", "--prefill", "100x32", "--decode", "1x320", "--npus", "2000",
                                                  "-f", "json"], "any"),
            ("search --sweep a misspelt path", ["search", "decode", "--tpot-slo", "50", "--batch", "8", "--sweep",
                                                "chip.die.hbm_bandwith_Bps=1e12,2e12", "-f", "json"], "error")]
    for name, rows, expect in (("out of order", "4096,256,0\n4096,256,2\n4096,256,1\n", "error"),
                               ("in order", "4096,256,0\n4096,256,1\n4096,256,1\n", "any"),
                               ("negative time", "4096,256,0\n4096,256,-1\n", "error")):
        p = tmp / f"trace-{len(out)}.csv"
        p.write_text("prompt_len,output_len,arrival_s\n" + rows)
        out.append((f"trace: arrivals {name} (simulate)", ["simulate", "--trace", str(p), "--num-prompts", "3", "-f", "json"],
                    expect))
        out.append((f"trace: arrivals {name} (plan)", ["plan", "--trace", str(p), *small], expect))
    for what in ("call_floor_s", "call_floor_s.all_gather", "call_floor_s.all_reduce.ub", "deployment.decode.dies",
                 "deployment.prefill.dies"):
        p = tmp / f"sys-{len(out)}.yaml"
        p.write_text(system_without(what))
        out.append((f"system file: no {what}", ["predict", "decode", "--hardware", str(p), "-f", "json"], "error"))
    for name, text in (("prefill", "prefill: [{count: 6}]\ndecode: [{count: 1, dies: 320}]\n"),
                       ("decode", "prefill: [{count: 6, dies: 32}]\ndecode: [{count: 1}]\n")):
        p = tmp / f"dep-{len(out)}.yaml"
        p.write_text(text)
        out.append((f"deployment file: {name} without dies", ["simulate", "--deployment", str(p), "--num-prompts", "10",
                                                              "-f", "json"], "error"))
    ref = Path(__file__).resolve().parents[1] / "cmperf" / "reference" / "sglang-a3-serving.yaml"
    for path in ("stack.spec_stepp_s", "stack.nope", "stack.name"):
        d = yaml.safe_load(ref.read_text())
        d["fit"][0]["path"] = path
        p = tmp / f"serving-{len(out)}.yaml"
        p.write_text(yaml.safe_dump(d))
        out.append((f"serving file: fit path {path}", ["validate", "--serving", str(p), "-f", "json"], "error"))
    return out
