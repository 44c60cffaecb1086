"""plan/simulate --export (cmperf/export): the deployment file reads back to the same numbers,
and every launch command parses with a parser built from its stack's documented flags alone
(cmperf/export/launchers.yaml, each flag with its source)."""

import argparse
import json
import shlex
from pathlib import Path

import pytest
import yaml

from cmperf.export import documented, from_plan, launch_files, context, write


def parser(flags: dict) -> argparse.ArgumentParser:
    """An argparse parser that knows exactly the documented ``flags`` (unknown ones fail)."""
    p = argparse.ArgumentParser(exit_on_error=False, add_help=False)
    p.add_argument("positional", nargs="*")
    for flag, spec in flags.items():
        kind = spec["type"]
        if kind == "bool":
            p.add_argument(flag, action="store_true")
        elif kind == "list":
            p.add_argument(flag, nargs="+", type=int)
        elif kind == "json":
            p.add_argument(flag, type=json.loads)
        else:
            p.add_argument(flag, type={"int": int, "str": str}[kind])
    return p


ENV = {"MODEL_PATH": "/models/m", "NODE_RANK": "0", "HEAD_ADDR": "10.0.0.1:5000", "DP_START_RANK": "0"}


def placeholders(words: list[str]) -> list[str]:
    """Shell variables the user sets, given example values."""
    return [ENV.get(w[1:], w) if w.startswith("$") else w for w in words]


def commands(text: str, program: str) -> list[argparse.Namespace]:
    """Each command line of a written script that runs ``program``, parsed (shell variables
    stand for what the user sets: given placeholder values)."""
    doc = documented()
    name = next(k for k, v in doc.items() if v["program"]["value"] == program)
    p = parser(doc[name]["flags"])
    out = []
    for line in text.splitlines():
        if not line.startswith(program + " "):
            continue
        words = shlex.split(line[len(program):])
        words = placeholders(words)
        args, unknown = p.parse_known_args(words)
        assert not unknown, (name, unknown)
        out.append(args)
    return out


@pytest.fixture(scope="module")
def cm_plan():
    from cmperf.plan.planner import plan
    from cmperf.plan.workload import SLO, Workload, parse_lengths

    w = Workload(prompt=parse_lengths("4096", "p"), output=parse_lengths("256", "o"), prefix_hit=0.0,
                 slo=SLO(2.0, 0.05, "mean"), arrival_rate_per_s=None)
    return plan(w, shape_names=("pd", "afd"))


def test_every_documented_flag_has_a_source():
    for name, launcher in documented().items():
        assert launcher["program"]["source"], name
        assert isinstance(launcher["afd"]["value"], bool) and len(launcher["afd"]["source"]) > 8, name
        keys = {**launcher["flags"], **launcher.get("router", {}).get("flags", {}), **launcher.get("engine", {})}
        for flag, spec in keys.items():
            assert len(spec.get("source", "")) > 8, (name, flag)
            assert spec["type"] in ("int", "str", "bool", "list", "json"), (name, flag)


def flat(d: dict, prefix: str = "") -> dict:
    """A nested engine YAML as its dotted keys (launchers.yaml: trtllm.engine)."""
    out = {}
    for k, v in d.items():
        out.update(flat(v, f"{prefix}{k}.") if isinstance(v, dict) else {f"{prefix}{k}": v})
    return out


def check_engine(text: str):
    """An engine YAML holds only documented TensorRT-LLM keys, each of its documented type."""
    keys = documented()["trtllm"]["engine"]
    kinds = {"bool": bool, "int": int, "str": str, "list": list}
    engine = flat(yaml.safe_load(text))
    for k, v in engine.items():
        assert k in keys, k
        assert isinstance(v, kinds[keys[k]["type"]]), (k, v)
    return engine


def test_deployment_file_reads_back_to_the_same_numbers(cm_plan, tmp_path):
    from cmperf.plan.planner import evaluate
    from cmperf.simulate.deployment import from_file

    best = cm_plan.best
    write(str(tmp_path), from_plan(best), None)
    ev = evaluate(cm_plan.specs, cm_plan.workload, from_file(str(tmp_path / "deployment.yaml")))
    for k in ("goodput_rps", "ttft_ms", "tpot_ms", "npus"):
        assert ev[k] == pytest.approx(best[k], rel=1e-9), k


def test_afd_deployment_reads_back(cm_plan, tmp_path):
    from cmperf.plan.planner import evaluate
    from cmperf.simulate.deployment import from_file

    afd = cm_plan.table[cm_plan.table["shape"] == "afd"].iloc[0].to_dict()
    files = write(str(tmp_path), from_plan(afd), context(cm_plan.specs, cm_plan.workload.slo))
    dep = from_file(str(tmp_path / "deployment.yaml"))
    assert dep.decode_phase == "afd"
    ev = evaluate(cm_plan.specs, cm_plan.workload, dep)
    assert ev["goodput_rps"] == pytest.approx(afd["goodput_rps"], rel=1e-9)
    # no stack documents a flag for attention-FFN disaggregation: no launcher (not a PD one in
    # its place), and the note names each stack and where it was looked for
    names = {Path(f).name for f in files}
    assert names == {"deployment.yaml", "notes.txt", "export.json"}
    notes = (tmp_path / "notes.txt").read_text()
    assert "attention-FFN" in notes
    for stack in ("sglang", "vllm", "mindie"):  # an Ascend system's launchers
        assert f"  {stack}: " + documented()[stack]["afd"]["source"] in notes
    from cmperf.export import written_message

    assert "no launch command" in written_message(str(tmp_path), files)  # the CLI's line says so


def test_sglang_and_vllm_commands_on_cloudmatrix(cm_plan):
    """Hand-derived from the plan's best row: one SGLang rank per die on Ascend (SGLASC),
    DP attention of the instance's attention TP, EP over every rank, the decode batch cap
    the batch per NPU x NPUs (at least), and each role named for PD disaggregation."""
    best = cm_plan.best
    files = launch_files(from_plan(best), context(cm_plan.specs, cm_plan.workload.slo))
    assert {"sglang.sh", "vllm.sh", "mindie-config.json", "notes.txt"} <= set(files)
    pre, dec = commands(files["sglang.sh"], "python -m sglang.launch_server")
    assert pre.disaggregation_mode == "prefill" and dec.disaggregation_mode == "decode"
    assert pre.tp_size == int(best["prefill_dies"]) and dec.tp_size == int(best["decode_dies"])
    assert pre.dp_size * int(best["prefill_tp"]) == pre.tp_size
    assert pre.enable_dp_attention and dec.enable_dp_attention
    assert pre.ep_size == pre.tp_size and dec.ep_size == dec.tp_size
    npus = best["decode_dies"] / 2
    assert best["decode_batch_per_npu"] * npus <= dec.max_running_requests < (best["decode_batch_per_npu"] + 2) * npus
    assert max(dec.cuda_graph_bs) * dec.dp_size == dec.max_running_requests
    assert dec.nnodes == int(best["decode_dies"]) // 16  # 8 NPUs (16 dies) per node
    # prefill: the tokens of one pass of an attention DP group (tokens per NPU x its NPUs)
    assert pre.max_prefill_tokens == int(best["prefill_tokens_per_npu"] * best["prefill_tp"] / 2)
    vp, vd = commands(files["vllm.sh"], "vllm serve")
    assert vp.tensor_parallel_size * vp.data_parallel_size == int(best["prefill_dies"])
    assert vp.enable_expert_parallel and vd.enable_expert_parallel
    assert vp.kv_transfer_config["kv_role"] == "kv_producer" and vd.kv_transfer_config["kv_role"] == "kv_consumer"
    assert vd.max_num_seqs * vd.data_parallel_size == dec.max_running_requests
    mindie = json.loads(files["mindie-config.json"])
    assert set(mindie) <= set(documented()["mindie"]["flags"])
    assert mindie["decodeTimeMsPerReq"] == 50 and mindie["prefillTimeMsPerReq"] == 2000


def test_gpu_system_writes_dynamo_workers_and_one_rank_per_gpu():
    from cmperf.plan.planner import plan
    from cmperf.plan.workload import SLO, Workload, parse_lengths

    w = Workload(prompt=parse_lengths("2000", "p"), output=parse_lengths("100", "o"), prefix_hit=0.0,
                 slo=SLO(2.0, 0.05, "mean"), arrival_rate_per_s=None)
    p = plan(w, hardware="gb200-nvl72", shape_names=("pd",))
    files = launch_files(from_plan(p.best), context(p.specs, w.slo))
    assert "mindie-config.json" not in files and "dynamo-sglang.yaml" in files
    workers = yaml.safe_load(files["dynamo-sglang.yaml"])
    sg = parser(documented()["sglang"]["flags"])
    for role in ("prefill", "decode"):
        args = sg.parse_args(placeholders(workers[f"{role}_worker"]["sglang_args"]))
        assert args.tp_size == int(p.best[f"{role}_dies"])  # one rank per GPU (dies_per_package 1)
        assert "--disaggregation-transfer-backend" not in workers[f"{role}_worker"]["sglang_args"]
    # TensorRT-LLM under Dynamo: one rank per GPU, attention DP over all of them (attention TP
    # 1), EP over all; the decode cap per attention-DP rank covers the plan's batch per GPU
    pre, dec = commands(files["dynamo-trtllm.sh"], "python3 -m dynamo.trtllm")
    for args, role in ((pre, "prefill"), (dec, "decode")):
        assert args.disaggregation_mode == role and args.tensor_parallel_size == int(p.best[f"{role}_dies"])
        assert args.expert_parallel_size == args.tensor_parallel_size
        assert args.enable_attention_dp == (int(p.best[f"{role}_tp"]) == 1)
        assert args.max_num_tokens % args.kv_block_size == 0 if args.kv_block_size else args.max_num_tokens % 32 == 0
        engine = check_engine(files[args.extra_engine_args])
        assert engine["cache_transceiver_config.backend"] == "DEFAULT"
        assert engine["disable_overlap_scheduler"] == (role == "prefill")  # AIC's rule
    assert p.best["decode_batch_per_npu"] <= dec.max_batch_size < p.best["decode_batch_per_npu"] + 1
    assert p.specs.stack_name == "sglang" and dec.kv_block_size is None  # SGLang's 1-token page is not TensorRT-LLM's
    assert max(yaml.safe_load(files["trtllm-decode.yaml"])["cuda_graph_config"]["batch_sizes"]) == dec.max_batch_size
    assert pre.max_num_tokens >= p.best["prefill_tokens_per_npu"] and pre.max_batch_size is None
    # an instance wider than a GB200 tray (4 GPUs) is one Dynamo component over ceil(GPUs / 4)
    # nodes (Dynamo's profiler, set_multinode_config; launchers.yaml: trtllm.multinode)
    for role in ("prefill", "decode"):
        gpus = int(p.best[f"{role}_dies"])
        line = next(ln for ln in files["dynamo-trtllm.sh"].splitlines() if f"{role} instance of {gpus} GPUs" in ln)
        assert (f"multinode.nodeCount {-(-gpus // 4)}" in line) == (gpus > 4)


def test_trtllm_cannot_express_a_partial_attention_tp():
    """Dynamo's TensorRT-LLM attention DP is all ranks or none: an instance of 8 GPUs at
    attention TP 4 gets no TensorRT-LLM launcher, and the note says why; the other stacks'
    launchers are still written."""
    from cmperf.export import Chosen, Instance
    from cmperf.plan.workload import SLO
    from cmperf.predict import load_specs

    ctx = context(load_specs("gb200-nvl72", None, []), SLO(2.0, 0.05, "mean"))
    chosen = Chosen("pd", [Instance("prefill", 2, 8, 4, tokens_per_npu=8192.0),
                           Instance("decode", 1, 8, 1, batch_per_npu=64.0)])
    files = launch_files(chosen, ctx)
    assert "dynamo-trtllm.sh" not in files and not any(f.startswith("trtllm-") for f in files)
    assert "attention TP 4 of 8 GPUs" in files["notes.txt"]
    pre, dec = commands(files["sglang.sh"], "python -m sglang.launch_server")
    assert pre.dp_size == 2 and dec.dp_size == 8


def test_plan_export_cli(cli, tmp_path):
    code, out, err = cli("plan", "--npus", "128", "--shapes", "pd", "--export", str(tmp_path / "ex"), "--format", "json")
    assert code == 0, err
    assert "wrote" in err and "deployment.yaml" in err
    manifest = json.loads((tmp_path / "ex" / "export.json").read_text())
    assert manifest["numbers"]["goodput_rps"] == pytest.approx(json.loads(out)["best"]["goodput_rps"])
    code, out2, err = cli("plan", "--npus", "128", "--deployment", str(tmp_path / "ex" / "deployment.yaml"), "--format", "json")
    assert code == 0, err
    assert json.loads(out2)["best"]["goodput_rps"] == pytest.approx(json.loads(out)["best"]["goodput_rps"], rel=1e-9)


def test_export_into_a_file_is_one_line(cli, tmp_path):
    from helpers import one_line_error

    f = tmp_path / "f"
    f.write_text("x")
    code, out, err = cli("plan", "--npus", "64", "--shapes", "pd", "--export", str(f))
    one_line_error(code, err, "--export")


def test_simulate_export_reads_back_to_the_same_run(cli, tmp_path):
    """simulate --export writes the deployment it ran: simulating that file (same seed) gives
    the same metrics."""
    args = ("simulate", "--num-prompts", "200", "--request-rate", "50", "--format", "json")
    code, out, err = cli(*args, "--export", str(tmp_path / "ex"))
    assert code == 0, err
    assert (tmp_path / "ex" / "sglang.sh").exists()
    code, out2, err = cli(*args, "--deployment", str(tmp_path / "ex" / "deployment.yaml"))
    assert code == 0, err
    a, b = json.loads(out), json.loads(out2)
    for k in ("mean_ttft_ms", "mean_tpot_ms", "request_throughput_rps", "npus"):
        assert a[k] == b[k], k


def check_launchers(files: dict):
    """Every written launcher parses against its stack's documented list alone."""
    doc = documented()
    for name, text in files.items():
        if name.endswith(".sh"):
            progs = {"sglang.sh": ["sglang"], "vllm.sh": ["vllm"], "dynamo-trtllm.sh": ["trtllm"]}[name]
            for launcher in progs:
                assert commands(text, doc[launcher]["program"]["value"]), name
        elif name == "dynamo-sglang.yaml":
            sg = parser(doc["sglang"]["flags"])
            for worker in yaml.safe_load(text).values():
                sg.parse_args(placeholders(worker["sglang_args"]))
        elif name.startswith("trtllm-"):
            check_engine(text)
        elif name == "mindie-config.json":
            assert set(json.loads(text)) <= set(doc["mindie"]["flags"])


def export_and_read_back(p, w, d: Path) -> str:
    """Write the best deployment of plan ``p`` into ``d``, parse every launcher, and check
    deployment.yaml evaluates to the plan's numbers; returns the shape."""
    from cmperf.plan.planner import evaluate
    from cmperf.simulate.deployment import from_file

    written = write(str(d), from_plan(p.best), context(p.specs, w.slo))
    files = {Path(f).name: Path(f).read_text() for f in written}
    assert {"deployment.yaml", "notes.txt", "export.json"} <= set(files), d.name
    check_launchers(files)
    ev = evaluate(p.specs, p.workload, from_file(str(d / "deployment.yaml")))
    for k in ("goodput_rps", "ttft_ms", "tpot_ms", "npus"):
        assert ev[k] == pytest.approx(p.best[k], rel=1e-9), (d.name, k)
    return p.best["shape"]


def test_every_system_exports_and_reads_back(tmp_path):
    """plan --export on every shipped system with its defaults (its model and stack, the
    default workload; 16 NPUs of PD keep it cheap — benchmarks/export_matrix.py walks every
    whole system at its default shapes): the files are written, each launcher parses against
    its documented list, deployment.yaml evaluates to the plan's numbers."""
    from cmperf.plan import default_workload
    from cmperf.plan.planner import plan
    from cmperf.specs.loader import list_builtin

    w = default_workload()
    planned = 0
    for system, _ in list_builtin("system"):
        p = plan(w, hardware=system, npus=16, shape_names=("pd",))
        if p.best is None:
            assert p.message, system  # says why nothing fits
            continue
        planned += export_and_read_back(p, w, tmp_path / system) == "pd"
    assert planned >= 8


def test_colocated_export_reads_back(tmp_path):
    """A co-located plan's deployment.yaml (``colocated:`` instances) is one plan --deployment
    evaluates (it refused any deployment without one prefill and one decode group); its vllm.sh
    budget holds the chunk and the running requests' tokens."""
    from cmperf.plan import default_workload
    from cmperf.plan.planner import plan

    w = default_workload()
    p = plan(w, hardware="h800-cluster", npus=16, shape_names=("colocated",))
    assert export_and_read_back(p, w, tmp_path) == "colocated"
    (args,) = commands((tmp_path / "dynamo-trtllm.sh").read_text(), "python3 -m dynamo.trtllm")
    assert args.disaggregation_mode is None  # aggregated: Dynamo's default
    engine = check_engine((tmp_path / args.extra_engine_args).read_text())
    assert engine["enable_chunked_prefill"] is True
    # vLLM V1 serves the running requests' 1 + drafts tokens out of --max-num-batched-tokens before
    # the prompts' (docs/model.md §12.3): the plan's chunk (its prompts' tokens per DP rank) plus
    # --max-num-seqs x (1 + drafts)
    (v,) = commands((tmp_path / "vllm.sh").read_text(), "vllm serve")
    best = p.best
    ranks = v.tensor_parallel_size * (v.data_parallel_size or 1)
    chunk = best["prefill_tokens_per_npu"] * best["decode_dies"] / ranks  # one GPU a die
    drafts = v.speculative_config["num_speculative_tokens"] if v.speculative_config else 0
    assert v.max_num_batched_tokens == int(chunk * v.tensor_parallel_size + v.max_num_seqs * (1 + drafts))

