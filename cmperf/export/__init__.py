"""Export a chosen deployment (``cmperf plan|simulate --export DIR``): the deployment file
``--deployment`` reads back, and the launch command or config of the serving stacks that run
it (docs/export.md).

Each launcher writes only flags of its stack's documented list (launchers.yaml, every flag with
its source); a value cmperf cannot derive from the deployment is left to the stack's default.

The mapping, per instance of ``dies`` dies with attention TP ``t`` (one rank per die on Ascend,
SGLASC; one rank per GPU elsewhere, DYN-H100):

    ranks              R = dies / dies_per_rank         (--tp-size R, vLLM: TP t x DP R/t)
    DP attention       D = R / t                         (--dp-size D, --enable-dp-attention if D > 1)
    experts            EP = R (MoE)                      (--ep-size R, --enable-expert-parallel)
    nodes              ceil(NPUs / NPUs per node)        (--nnodes)
    decode batch       B = ceil(batch per NPU x NPUs)    (--max-running-requests B, --max-num-seqs B / D)
    prefill tokens     tokens per NPU x NPUs per DP group (--max-prefill-tokens, --max-num-batched-tokens)

The batch is the plan's at its planned rate: the cap that keeps TPOT within its SLO.
TensorRT-LLM under Dynamo (--tensor-parallel-size R, --enable-attention-dp at attention TP 1,
--max-batch-size per attention-DP rank) and what no stack expresses (AFD; a partial attention
TP on TensorRT-LLM): docs/export.md.
"""

from __future__ import annotations

import json
import math
import os
import shlex
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from ..errors import ConfigError

LAUNCHERS = Path(__file__).with_name("launchers.yaml")
# which launchers a vendor's chips run (the stacks' own platform pages: SGLASC / VASC for Ascend)
BY_VENDOR = {"huawei": ("sglang", "vllm", "mindie"), "nvidia": ("sglang", "vllm", "dynamo", "trtllm"),
             "amd": ("sglang", "vllm")}
FILES = {"sglang": "sglang.sh", "vllm": "vllm.sh", "mindie": "mindie-config.json", "dynamo": "dynamo-sglang.yaml",
         "trtllm": "dynamo-trtllm.sh"}


@lru_cache(maxsize=1)
def documented() -> dict:
    """The launchers' documented flags (launchers.yaml)."""
    import yaml

    return yaml.safe_load(LAUNCHERS.read_text())


@dataclass
class Instance:
    """One kind of instance of a chosen deployment."""

    role: str  # prefill | decode | colocated | afd
    count: int
    dies: int
    tp: int  # attention TP (prefill) or TP (decode)
    batch_per_npu: float = 0.0  # decode requests per NPU at the planned rate
    tokens_per_npu: float = 0.0  # prompt tokens per NPU per pass (prefill; the chunk, co-located)
    attention_dies: int = 0
    expert_dies: int = 0


@dataclass
class Chosen:
    """A deployment as ``cmperf plan`` chose it (or ``simulate`` ran it), and its numbers."""

    shape: str  # pd | colocated | afd
    instances: list[Instance]
    numbers: dict = field(default_factory=dict)  # goodput_rps, ttft_ms, tpot_ms, ... at the planned rate

    def describe(self) -> str:
        """``19 x prefill 32 dies (TP 4) + 1 x decode 160 dies``."""
        def one(i):
            if i.role == "afd":
                return f"{i.count} x AFD ({i.attention_dies} attention + {i.expert_dies} expert dies)"
            return f"{i.count} x {i.role} {i.dies} dies" + (f" (TP {i.tp})" if i.tp > 1 else "")
        return " + ".join(one(i) for i in self.instances)

    def deployment_spec(self):
        """The :class:`cmperf.simulate.deployment.DeploymentSpec` that simulates it."""
        from ..simulate.deployment import DeploymentSpec, InstanceGroup

        groups = {"prefill": [], "decode": []}
        for i in self.instances:
            if i.role == "afd":
                inputs = {"attention_dies": i.attention_dies, "expert_dies": i.expert_dies}
            else:
                inputs = {"dies": i.dies, ("attn_tp" if i.role == "prefill" else "tp"): i.tp}
            groups["prefill" if i.role == "prefill" else "decode"].append(InstanceGroup(i.count, inputs))
        return DeploymentSpec(prefill=groups["prefill"], decode=groups["decode"],
                              decode_phase="afd" if self.shape == "afd" else "decode", colocated=self.shape == "colocated")

    def deployment_file(self) -> dict:
        """The YAML ``--deployment`` reads (cmperf/simulate/deployment.py: from_file)."""
        out: dict[str, list] = {}
        for i in self.instances:
            if i.role == "afd":
                out.setdefault("afd", []).append({"count": i.count, "attention_dies": i.attention_dies,
                                                  "expert_dies": i.expert_dies})
            else:
                out.setdefault(i.role, []).append({"count": i.count, "dies": i.dies,
                                                   ("attn_tp" if i.role == "prefill" else "tp"): i.tp})
        return out


def from_plan(best: dict) -> Chosen:
    """The best row of a plan (Plan.best) as a :class:`Chosen`."""
    n = lambda k: int(round(float(best.get(k) or 0)))  # noqa: E731
    shape = str(best["shape"])
    dec_batch, pre_tokens = float(best.get("decode_batch_per_npu") or 0), float(best.get("prefill_tokens_per_npu") or 0)
    if shape == "colocated":
        inst = [Instance("colocated", n("decode_instances"), n("decode_dies"), n("decode_tp") or 1, dec_batch, pre_tokens)]
    else:
        inst = [Instance("prefill", n("prefill_instances"), n("prefill_dies"), n("prefill_tp") or 1, 0.0, pre_tokens)]
        if shape == "afd":
            inst.append(Instance("afd", n("decode_instances"), n("attention_dies") + n("expert_dies"), 1, dec_batch,
                                 attention_dies=n("attention_dies"), expert_dies=n("expert_dies")))
        else:
            inst.append(Instance("decode", n("decode_instances"), n("decode_dies"), n("decode_tp") or 1, dec_batch))
    keys = ("goodput_rps", "max_rps", "rate_rps", "ttft_ms", "tpot_ms", "npus", "binding")
    c = Chosen(shape, inst, {k: best[k] for k in keys if k in best})
    c.numbers["split"] = c.describe()
    return c


def from_deployment(dep, dec_inputs: list, pre_inputs: list, numbers: dict | None = None) -> Chosen:
    """A simulated deployment (a DeploymentSpec and the resolved inputs of its groups)."""
    inst = []
    for g, i in zip(dep.prefill, pre_inputs):
        inst.append(Instance("prefill", g.count, int(i["dies"]), int(i.get("attn_tp") or 1),
                             tokens_per_npu=float(i.get("tokens_per_npu") or 0)))
    for g, i in zip(dep.decode, dec_inputs):
        if dep.decode_phase == "afd":
            inst.append(Instance("afd", g.count, int(i["attention_dies"] + i["expert_dies"]), 1, float(i.get("batch") or 0),
                                 attention_dies=int(i["attention_dies"]), expert_dies=int(i["expert_dies"])))
        else:
            inst.append(Instance("colocated" if dep.colocated else "decode", g.count, int(i["dies"]), int(i.get("tp") or 1),
                                 float(i.get("batch") or 0)))
    shape = "afd" if dep.decode_phase == "afd" else "colocated" if dep.colocated else "pd"
    return Chosen(shape, inst, dict(numbers or {}))


# --------------------------------------------------------------------------- launchers
@dataclass
class Context:
    """What a launcher needs besides the deployment: the system, the model, the stack."""

    vendor: str
    dies_per_package: int
    chips_per_node: int
    model_name: str
    moe: bool
    mtp_modules: int
    redundant_experts: dict  # role -> redundant routed experts of that instance (EP = its ranks)
    stack: dict | None  # the plan's stack profile (plain data) or None
    stack_name: str
    ttft_slo_ms: float
    tpot_slo_ms: float
    mtp_on: bool

    def ranks(self, dies: int) -> int:
        """One rank per die on Ascend (SGLASC: tp 16 on a 16-die node), per GPU elsewhere."""
        return dies if self.vendor == "huawei" else max(1, dies // self.dies_per_package)

    def nodes(self, dies: int) -> int:
        return max(1, math.ceil(dies / self.dies_per_package / self.chips_per_node))

    def stack_value(self, key: str, default=None):
        """A field of the stack profile (its ``value``), ``default`` where none."""
        v = None if self.stack is None else self.stack.get(key)
        v = v.get("value") if isinstance(v, dict) else v
        return default if v is None else v

    @property
    def drafts(self) -> int:
        """Draft tokens each request verifies a step: the stack's ``mtp_draft_tokens`` (1 where
        it says none) when MTP is on, else 0."""
        return int(self.stack_value("mtp_draft_tokens", 1) or 1) if self.mtp_on else 0


def context(specs, slo) -> Context:
    """The :class:`Context` of ``specs`` (a predict.Specs) and the workload's SLO."""
    from ..deployment import _published, expert_layout

    hw, m = specs.views()
    stack = specs.stack
    red = {}
    if m.moe is not None:
        for role, phase in (("prefill", "prefill"), ("decode", "decode"), ("colocated", "decode")):
            pub = _published(hw, phase)
            red[role] = (pub["shared_copies_per_die"], pub["redundant_per_die"])
    mtp = bool(hw.system.deployment is not None and getattr(hw.system.deployment.decode, "mtp", False))
    return Context(vendor=str(specs.hardware.chip.vendor), dies_per_package=int(hw.chip.dies_per_package),
                   chips_per_node=int(hw.system.node.chips), model_name=str(m.name), moe=m.moe is not None,
                   mtp_modules=int(m.mtp.modules), redundant_experts={"layout": red, "model": m, "fn": expert_layout},
                   stack=dict(stack) if stack is not None else None, stack_name=specs.stack_name or "none",
                   ttft_slo_ms=float(slo.ttft_s * 1e3), tpot_slo_ms=float(slo.tpot_s * 1e3),
                   mtp_on=mtp and int(m.mtp.modules) > 0)


def _redundant(ctx: Context, role: str, ep: int) -> int:
    lay = ctx.redundant_experts
    if not ctx.moe or role not in lay["layout"]:
        return 0
    s, r = lay["layout"][role]
    red, _ = lay["fn"](lay["model"], [float(ep)], s, r)
    return int(red[0])


def _cuda_graph_bs(per_rank: int) -> list[int]:
    """The per-rank batches to capture: powers of two below the largest, and the largest."""
    sizes = [b for b in (1, 2, 4, 8, 16, 32, 64, 128, 256, 512) if b < per_rank]
    return sizes + [per_rank]


def sglang_args(i: Instance, ctx: Context, pd: bool) -> list[str]:
    """SGLang server flags of one instance (launchers.yaml: sglang)."""
    ranks = ctx.ranks(i.dies)
    attn_tp = max(1, min(ctx.ranks(i.tp), ranks))
    dp = max(1, ranks // attn_tp)
    npus = i.dies / ctx.dies_per_package
    a = ["--model-path", "$MODEL_PATH", "--tp-size", str(ranks)]
    if dp > 1:
        a += ["--dp-size", str(dp), "--enable-dp-attention", "--moe-dense-tp-size", "1"]
        if i.role != "prefill":
            a.append("--enable-dp-lm-head")
    if ctx.moe:
        a += ["--ep-size", str(ranks)]
        red = _redundant(ctx, i.role, ranks)
        if red > 0:
            a += ["--ep-num-redundant-experts", str(red)]
    nodes = ctx.nodes(i.dies)
    if nodes > 1:
        a += ["--nnodes", str(nodes), "--node-rank", "$NODE_RANK", "--dist-init-addr", "$HEAD_ADDR"]
    group_npus = i.tp / ctx.dies_per_package  # NPUs of one attention DP group (cmperf's TP counts dies)
    if i.role in ("decode", "colocated", "afd") and i.batch_per_npu > 0:
        per_rank = max(1, math.ceil(i.batch_per_npu * npus / dp - 1e-9))
        a += ["--max-running-requests", str(per_rank * dp), "--cuda-graph-bs", *map(str, _cuda_graph_bs(per_rank))]
    if i.role == "prefill":
        a += ["--max-prefill-tokens", str(int(i.tokens_per_npu * group_npus)), "--chunked-prefill-size", "-1"]
        if ctx.stack_value("prefill_graph") == "eager":
            a.append("--disable-cuda-graph")
    elif i.role == "colocated" and i.tokens_per_npu > 0:
        a += ["--chunked-prefill-size", str(int(i.tokens_per_npu * group_npus))]
    page = ctx.stack_value("kv_block_tokens")
    if page:
        a += ["--page-size", str(int(page))]
    if ctx.stack_value("two_batch_overlap") and ctx.moe:
        a.append("--enable-two-batch-overlap")
    if pd:
        a += ["--disaggregation-mode", i.role]
        if ctx.vendor == "huawei":
            a += ["--disaggregation-transfer-backend", "ascend"]
    if ctx.mtp_on:
        k = ctx.drafts
        a += ["--speculative-algorithm", "NEXTN", "--speculative-num-steps", str(k), "--speculative-eagle-topk", "1",
              "--speculative-num-draft-tokens", str(k + 1)]
    return a


def vllm_args(i: Instance, ctx: Context, pd: bool) -> list[str]:
    """vLLM (vLLM-Ascend) flags of one instance (launchers.yaml: vllm)."""
    ranks = ctx.ranks(i.dies)
    tp = max(1, min(ctx.ranks(i.tp), ranks))
    dp = max(1, ranks // tp)
    npus = i.dies / ctx.dies_per_package
    a = ["$MODEL_PATH", "--tensor-parallel-size", str(tp)]
    if dp > 1:
        a += ["--data-parallel-size", str(dp)]
        nodes = ctx.nodes(i.dies)
        if nodes > 1:
            a += ["--data-parallel-size-local", str(max(1, dp // nodes)), "--data-parallel-start-rank", "$DP_START_RANK",
                  "--data-parallel-address", "$HEAD_ADDR"]
    if ctx.moe and ranks > 1:
        a.append("--enable-expert-parallel")
    seqs = max(1, math.ceil(i.batch_per_npu * npus / dp - 1e-9))
    if i.role != "prefill" and i.batch_per_npu > 0:
        a += ["--max-num-seqs", str(seqs)]
    tokens = i.tokens_per_npu * npus / dp
    if i.role == "colocated" and tokens > 0 and i.batch_per_npu > 0:
        # vLLM V1's one budget serves the running requests first, 1 + drafts each (vllm 0.11.0
        # v1/core/sched/scheduler.py, docs/model.md §12.3): the plan's chunk is the prompts' rest
        tokens += seqs * (1 + ctx.drafts)
    if tokens > 0:
        a += ["--max-num-batched-tokens", str(int(tokens))]
    page = ctx.stack_value("kv_block_tokens")
    if page:
        a += ["--block-size", str(int(page))]
    if ctx.mtp_on:
        k = ctx.drafts
        a += ["--speculative-config", json.dumps({"method": "deepseek_mtp", "num_speculative_tokens": k})]
    if pd:
        connector = "MooncakeConnector" if ctx.vendor == "huawei" else "NixlConnector"
        role = "kv_producer" if i.role == "prefill" else "kv_consumer"
        a += ["--kv-transfer-config", json.dumps({"kv_connector": connector, "kv_role": role})]
    return a


class Inexpressible(Exception):
    """A stack's documented flags cannot express an instance (the message says why)."""


def trtllm_args(i: Instance, ctx: Context, pd: bool) -> tuple[list[str], dict]:
    """The ``python3 -m dynamo.trtllm`` flags of one instance and its engine YAML (the
    TensorRT-LLM keys --extra-engine-args names; launchers.yaml: trtllm). Dynamo's attention
    DP is all ranks or none (attention_dp_size = tensor_parallel_size or 1): an attention TP
    between 1 and the instance's ranks raises :class:`Inexpressible`."""
    ranks = ctx.ranks(i.dies)
    attn_tp = max(1, min(ctx.ranks(i.tp), ranks))
    if 1 < attn_tp < ranks:
        raise Inexpressible(f"the {i.role} instance's attention TP {attn_tp} of {ranks} GPUs: Dynamo's TensorRT-LLM "
                            "attention DP is all ranks or none (--enable-attention-dp: attention_dp_size = "
                            "tensor_parallel_size)")
    dp = ranks // attn_tp  # attention-DP ranks: every GPU (attention TP 1) or one
    npus = i.dies / ctx.dies_per_package
    k = ctx.drafts
    # the KV block: the plan's stack's when it is this one, else Dynamo's default (launchers.yaml)
    doc = documented()["trtllm"]
    default_block = int(doc["flags"]["--kv-block-size"]["default"])
    block = int(ctx.stack_value("kv_block_tokens", 0) or 0) if ctx.stack_name == doc["stack"]["value"] else 0
    a = ["--model", "$MODEL_PATH", "--tensor-parallel-size", str(ranks)]
    if dp > 1:
        a.append("--enable-attention-dp")
    if ctx.moe:
        a += ["--expert-parallel-size", str(ranks)]
    engine: dict[str, Any] = {}
    per_rank = 0
    if i.role != "prefill" and i.batch_per_npu > 0:
        per_rank = max(1, math.ceil(i.batch_per_npu * npus / dp - 1e-9))  # the cap of each attention-DP rank
        a += ["--max-batch-size", str(per_rank)]
        if ctx.stack_value("decode_graph", "graph") == "graph":
            engine["cuda_graph_config"] = {"enable_padding": True, "batch_sizes": _cuda_graph_bs(per_rank)}
    tokens = i.tokens_per_npu * npus / dp + per_rank * (1 + k)  # a pass's prompt tokens + a step's decode tokens
    if tokens > 0:
        step = block or default_block
        tokens = math.ceil(tokens / step - 1e-9) * step  # a multiple of the KV block (AIC-WHL trtllm.rule)
        a += ["--max-num-tokens", str(int(tokens))]
    if block:
        a += ["--kv-block-size", str(block)]
    if ctx.nodes(i.dies) > 1:
        a += ["--gpus-per-node", str(ctx.chips_per_node)]
    if i.role == "colocated" and i.tokens_per_npu > 0:
        engine["enable_chunked_prefill"] = True  # each iteration carries a chunk of prompt tokens
    if pd:
        a += ["--disaggregation-mode", i.role]
        engine["cache_transceiver_config"] = {"backend": "DEFAULT"}
        engine["disable_overlap_scheduler"] = i.role == "prefill"
    if k:
        engine["speculative_config"] = {"decoding_type": "MTP", "num_nextn_predict_layers": k}
    if engine:
        a += ["--extra-engine-args", f"trtllm-{i.role}.yaml"]
    return a, engine


def mindie_fields(chosen: Chosen, ctx: Context) -> dict:
    """The MindIE config.json fields the reference names (launchers.yaml: mindie)."""
    out: dict[str, Any] = {"cacheBlockSize": int(min(128, ctx.stack_value("kv_block_tokens", 128) or 128))}
    pre = next((i for i in chosen.instances if i.role in ("prefill", "colocated")), None)
    if pre is not None and pre.tokens_per_npu > 0:
        out["maxPrefillTokens"] = int(pre.tokens_per_npu * pre.tp / ctx.dies_per_package)  # one attention DP group's pass
    out["prefillTimeMsPerReq"] = int(round(ctx.ttft_slo_ms))
    out["decodeTimeMsPerReq"] = int(round(ctx.tpot_slo_ms))
    return out


def _script(lines: list[str], header: list[str]) -> str:
    return "#!/bin/sh\n" + "".join(f"# {h}\n" for h in header) + "\n".join(lines) + "\n"


def _command(program: str, args: list[str]) -> str:
    """A shell line: shell variables ($MODEL_PATH ...) left for the shell, the rest quoted."""
    return " ".join([program] + [f'"{a}"' if a.startswith("$") else shlex.quote(a) for a in args])


def launch_files(chosen: Chosen, ctx: Context) -> dict[str, str]:
    """File name -> text of every launcher that runs ``chosen`` on this vendor's chips;
    ``notes.txt`` says which are not written and why."""
    doc = documented()
    notes = [f"cmperf export: {chosen.numbers.get('split', chosen.shape)}; planned with stack {ctx.stack_name}.",
             "Shell variables to set: MODEL_PATH (the weights), HEAD_ADDR (host:port of node 0 of an instance), "
             "NODE_RANK / DP_START_RANK (this node's).",
             "Each flag comes from its stack's documentation (cmperf/export/launchers.yaml gives the source of each)."]
    files: dict[str, str] = {}
    names = BY_VENDOR.get(ctx.vendor, ("sglang", "vllm"))
    if chosen.shape == "afd":
        notes.append("No launcher written: no stack cmperf exports to runs an attention-FFN disaggregated (AFD) decode "
                     "instance, so none can launch this deployment (a PD launcher in its place would run another one). "
                     "Plan it with --shapes pd (or colocated) to get launch commands. Where each stack was searched:")
        notes += [f"  {n}: {doc[n]['afd']['source']}" for n in names]
        files["notes.txt"] = "\n".join(notes) + "\n"
        return files
    pd = chosen.shape == "pd"
    header = [f"{chosen.numbers.get('split', '')}", "one command per instance (run each instance's on each of its nodes)"]
    for name in names:
        if name == "sglang":
            prog = doc["sglang"]["program"]["value"]
            lines = []
            for i in chosen.instances:
                lines += [f"# {i.count} x {i.role} instance of {i.dies} dies", _command(prog, sglang_args(i, ctx, pd))]
            if pd:
                r = doc["sglang"]["router"]["program"]["value"]
                lines += ["# the router (SGLASC): add each instance's URL as the router's documentation says",
                          "# " + _command(r, ["--pd-disaggregation", "--policy", "cache_aware", "--mini-lb"])]
            files[FILES[name]] = _script(lines, header)
        elif name == "vllm":
            prog = doc["vllm"]["program"]["value"]
            lines = []
            for i in chosen.instances:
                lines += [f"# {i.count} x {i.role} instance of {i.dies} dies", _command(prog, vllm_args(i, ctx, pd))]
            if ctx.vendor == "huawei":
                header = header + ["vLLM-Ascend: the KV connector (MooncakeConnector) is an ASSUMPTION: "
                                   "vLLM-Ascend's own connectors are not in the reference"]
            files[FILES[name]] = _script(lines, header)
        elif name == "mindie":
            files[FILES[name]] = json.dumps(mindie_fields(chosen, ctx), indent=2) + "\n"
            notes.append("mindie-config.json: the MindIE config.json fields the reference names, flat: copy each "
                         "into its section of the file (their nesting and MindIE's parallelism fields are MISSING).")
        elif name == "dynamo":
            import yaml

            workers = {f"{i.role}_worker": {"count": i.count, "sglang_args": sglang_args(i, ctx, pd)}
                       for i in chosen.instances}
            files[FILES[name]] = "# Dynamo's SGLang workers (DYN-H100, DYN-GB200): each worker's SGLang flags\n" + \
                yaml.safe_dump(workers, sort_keys=False)
        elif name == "trtllm":
            files.update(_trtllm_files(chosen, ctx, pd, header, notes))
    files["notes.txt"] = "\n".join(notes) + "\n"
    return files


def _trtllm_files(chosen: Chosen, ctx: Context, pd: bool, header: list[str], notes: list[str]) -> dict[str, str]:
    """``dynamo-trtllm.sh`` and each instance kind's engine YAML, or none of them (and a note)
    where an instance is one Dynamo's TensorRT-LLM flags cannot express."""
    import yaml

    prog = documented()["trtllm"]["program"]["value"]
    try:
        built = [(i, *trtllm_args(i, ctx, pd)) for i in chosen.instances]
    except Inexpressible as e:
        notes.append(f"Not written: dynamo-trtllm.sh: {e}.")
        return {}
    out, lines = {}, []
    for i, args, engine in built:
        nodes = ctx.nodes(i.dies)
        lines += [f"# {i.count} x {i.role} instance of {i.dies} GPUs" +
                  (f" over {nodes} nodes: one Dynamo component with multinode.nodeCount {nodes} "
                   "(launchers.yaml: trtllm.multinode)" if nodes > 1 else ""), _command(prog, args)]
        if engine:
            out[f"trtllm-{i.role}.yaml"] = (f"# TensorRT-LLM engine arguments of the {i.role} worker "
                                            "(--extra-engine-args; launchers.yaml: trtllm.engine)\n" +
                                            yaml.safe_dump(engine, sort_keys=False))
    out[FILES["trtllm"]] = _script(lines, header + ["TensorRT-LLM under NVIDIA Dynamo: run each worker beside "
                                                    "python3 -m dynamo.frontend (Dynamo's recipes)"])
    notes.append("dynamo-trtllm.sh: max-batch-size is per attention-DP rank (each GPU with attention DP); the "
                 "engine keys are TensorRT-LLM's, as NVIDIA's aiconfigurator writes them.")
    return out


EXPORT_JSON = "export.json"  # what was planned, its numbers, and the manifest: each file written and its SHA-256
ALWAYS = ("deployment.yaml", "notes.txt", EXPORT_JSON)


def _may_write(name: str) -> bool:
    """Whether an export may write a file of this name (whatever the stack and shape)."""
    return name in ALWAYS or name in FILES.values() or (name.startswith("trtllm-") and name.endswith(".yaml"))


def _sha256(data: bytes) -> str:
    import hashlib

    return hashlib.sha256(data).hexdigest()


def _manifest(d: Path) -> dict[str, str | None] | None:
    """The files cmperf's export.json in ``d`` says it wrote (name -> SHA-256; None: an export
    of before the digests, trusted by name), or None when there is no export.json of cmperf's."""
    from ..report import MARK

    try:
        data = json.loads((d / EXPORT_JSON).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or not isinstance(data.get("files"), list):
        return None
    if str(data.get("written_by", "")).startswith(MARK) and isinstance(data.get("sha256"), dict):
        return {str(k): str(v) for k, v in data["sha256"].items()}
    if isinstance(data.get("provenance"), dict) and "cmperf" in data["provenance"]:  # an export of cmperf 0.1 before the digests
        return {str(n): None for n in data["files"]}
    return None


def _theirs(d: Path, names) -> list[str]:
    """Of the files ``names`` in ``d``, those cmperf did not write: not recorded by its
    export.json, or changed since (an edited launch script is the user's); empty ones excepted."""
    manifest = _manifest(d)
    out = []
    for name in names:
        p = d / name
        if not (p.exists() or p.is_symlink()):
            continue
        if not p.is_file():
            out.append(name)
            continue
        if p.stat().st_size == 0:
            continue
        if name == EXPORT_JSON:
            if manifest is None:
                out.append(name)
            continue
        if manifest is None or name not in manifest:
            out.append(name)
        elif manifest[name] is not None and manifest[name] != _sha256(p.read_bytes()):
            out.append(name)
    return out


def check_export_dir(directory: str, flag: str = "--export", names=None) -> None:
    """Before any work: ``directory`` names a directory cmperf can write the export into (an
    existing one, or one it can make), and none of the files it would replace there (``names``;
    default: every name an export may write) is the user's, unless --force. One line naming
    ``flag`` and what was found."""
    from ..errors import short, short_path
    from ..report import forced, probe_dir

    text = str(directory)
    if not text.strip():
        raise ConfigError(f"{flag} '{short(text, 20)}': expected the path of a directory to write the export into")
    d = Path(text)
    try:
        if d.is_dir():
            why = probe_dir(d)
            if why:
                raise ConfigError(f"{flag} {short_path(text)}: the directory is not writable ({why})")
            listed = [p.name for p in d.iterdir() if _may_write(p.name)] if names is None else list(names)
            theirs = [] if forced() else _theirs(d, listed)
            if theirs:
                one = len(theirs) == 1
                raise ConfigError(f"{flag} {short_path(text)}: {', '.join(theirs)} {'is' if one else 'are'} not "
                                  f"{'a file' if one else 'files'} cmperf wrote there (its export.json does not record "
                                  f"{'it' if one else 'them'} as written, or {'it has' if one else 'they have'} changed "
                                  f"since): not replaced; name another directory, or pass --force to overwrite")
            return
        if d.exists() or d.is_symlink():
            raise ConfigError(f"{flag} {short_path(text)}: is a file, not a directory (expected a directory to write the export into)")
        parent = d.absolute().parent
        while not (parent.exists() or parent.is_symlink()) and parent != parent.parent:
            parent = parent.parent
        if not parent.is_dir():
            raise ConfigError(f"{flag} {short_path(text)}: cannot make the directory: {short_path(parent)} is not a directory")
        why = probe_dir(parent)
        if why:
            raise ConfigError(f"{flag} {short_path(text)}: cannot make the directory: {short_path(parent)} is not writable ({why})")
        try:
            most = os.pathconf(parent, "PC_NAME_MAX")
        except (OSError, ValueError):
            most = 255
        longest = max(len(part.encode()) for part in d.parts)
        if longest > most:
            raise ConfigError(f"{flag} {short(text)}: cannot make the directory (File name too long: a name of "
                              f"{longest} bytes, the file system takes {most})")
    except OSError as e:  # a name too long, a loop of links: the system's own words
        from ..report import os_reason

        raise ConfigError(f"{flag} {short(text)}: cannot write there ({os_reason(e, text)})") from None


def write(directory: str, chosen: Chosen, ctx: Context | None, provenance: dict | None = None) -> list[str]:
    """Write ``deployment.yaml``, ``export.json`` (what was planned, its numbers, and each file
    written with its SHA-256: cmperf's record that the files are its own) and the launch files
    into ``directory`` (made if absent), each file whole or not at all; a file there that cmperf
    did not write is refused unless --force (:func:`check_export_dir`). Returns the paths written."""
    import yaml

    from ..report import mark, write_atomic

    check_export_dir(directory, names=())
    d = Path(directory)
    try:
        d.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        from ..errors import short
        from ..report import os_reason

        raise ConfigError(f"--export {short(directory)}: cannot make the directory ({os_reason(e, directory)})") from None
    files = {"deployment.yaml": "# cmperf export: read back with --deployment deployment.yaml\n" +
             yaml.safe_dump(chosen.deployment_file(), sort_keys=False)}
    if ctx is not None:
        files.update(launch_files(chosen, ctx))
    check_export_dir(directory, names=[*files, EXPORT_JSON])
    digests = {name: _sha256(text.encode("utf-8")) for name, text in files.items()}
    # a file of an earlier export that this one does not write (another vendor's launcher), still
    # as cmperf wrote it: still cmperf's, so the manifest keeps its digest
    for name, digest in (_manifest(d) or {}).items():
        if name not in files and name != EXPORT_JSON and (d / name).is_file() and name not in _theirs(d, [name]):
            digests[name] = digest or _sha256((d / name).read_bytes())
    files[EXPORT_JSON] = json.dumps({"written_by": mark(), "shape": chosen.shape, "numbers": _plain(chosen.numbers),
                                     "stack": ctx.stack_name if ctx else None,
                                     "files": sorted(files), "sha256": digests,
                                     "provenance": _plain(provenance or {})}, indent=2) + "\n"
    written = []
    for name, text in files.items():
        path = d / name
        write_atomic(path, lambda tmp, text=text: Path(tmp).write_text(text, encoding="utf-8"), "--export", own=True)
        written.append(str(path))
    return written


def written_message(directory: str, written: list[str]) -> str:
    """The line the CLI prints after an export's one line per file, when no launcher is among
    them (an AFD deployment): that notes.txt says why ('' otherwise)."""
    names = [Path(w).name for w in written]
    if not set(names) - {"deployment.yaml", "notes.txt", EXPORT_JSON}:
        return (f"cmperf: no launch command in {directory}: no exported stack can run this deployment "
                f"({directory}/notes.txt says why)\n")
    return ""


def _plain(v):
    if isinstance(v, dict):
        return {str(k): _plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    if hasattr(v, "item"):
        return v.item()
    return v
