"""A snapshot of the request-level simulation's outputs, to hold a speed change of the engine
(cmperf/simulate/) to "outputs identical to the bit".

    python benchmarks/simulate_snapshot.py save /tmp/sim-before.pkl     # on the code before
    python benchmarks/simulate_snapshot.py compare /tmp/sim-before.pkl  # on the code after

The set (43 runs, ~10 s of CPU): PD, AFD and co-located deployments (chunked prefill
on and off, KV preemption), MTP, prefix hits with a KV pool and a working set, every prefill
router (the stacks' shared, round_robin and random, least_load by ``--set``; no stack), a
closed loop, bursty and trace arrivals, fixed, log-normal, exponential and sampled lengths, a
warm-up, a sweep, on cloudmatrix384, h800-cluster, h100-cluster x llama-3.1-70b and
gb200-nvl72; the stub-step runs of the tests (hand-derived co-located iterations, pool,
preemption); and the serving fit's simulated metrics of cmperf/reference/sglang-a3-serving.yaml
(at the files' values and at a sweep of its fitted constants). Every run keeps its metrics,
every per-request array, the recorded intervals and queue samples, and each instance's busy
time, KV peak and preemptions; ``compare`` prints each entry that differs (numbers bit for bit,
NaN equal to NaN) and exits 1 if any does.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks.answers_snapshot import same, save_or_compare  # noqa: E402

REQ_FIELDS = ("arrival_s", "prompt", "output", "cached", "steps", "send_s", "prefill_start_s", "prefill_end_s",
              "kv_arrive_s", "first_token_s", "finish_s", "pool_B", "blocks", "kv_B", "write_B", "write_blocks")


def _record(res) -> dict:
    req, st = res.requests, res.stats
    return {"metrics": dict(res.metrics), **{f"req.{k}": np.asarray(getattr(req, k)) for k in REQ_FIELDS},
            "intervals": np.asarray(st.intervals, dtype=float), "queue": np.asarray(st.queue, dtype=float),
            "prefill_busy": list(st.prefill_busy_s), "decode_busy": list(st.decode_busy_s),
            "settings": repr(res.settings), "instances": repr(res.instances)}


def _engine_runs() -> dict:
    """The tests' runs on a stub step time (tests/test_simulate_story.py), through Simulation."""
    from cmperf.simulate.engine import CoLocatedInstance, Requests, Simulation, Stats

    class Step:
        npus = 1.0
        kv_tokens_per_rank = 1e9
        dies_per_rank = 1.0

        def step(self, batch_per_npu, kv, chunk_per_npu=0.0):
            return 0.010 + 1e-5 * chunk_per_npu + 1e-7 * kv

        @staticmethod
        def pool_read_s(B, n):
            return 1e-3 * B / 1e6 + 1e-4 * n

        @staticmethod
        def pool_write_s(B, n):
            return 2e-3 * B / 1e6

    class Small(Step):
        kv_tokens_per_rank = 2500.0

    out = {}
    for name, pred, n, out_len, budget, chunked, ranks in (
            ("chunked", Step(), 6, 3.0, 600.0, True, 1), ("whole", Step(), 6, 3.0, 600.0, False, 1),
            ("preempt", Small(), 4, 1001.0, 2000.0, True, 1), ("ranks", Step(), 40, 50.0, 3000.0, True, 4)):
        rng = np.random.default_rng(5)
        z = np.zeros(n)
        req = Requests(arrival_s=np.sort(rng.random(n)) * 0.05, prompt=np.full(n, 1000.0), output=np.full(n, out_len),
                       cached=np.full(n, 600.0), steps=np.full(n, int(out_len) - 1), pool_B=z + 6e6, blocks=z + 6,
                       write_B=z + 4e6, write_blocks=z + 4)
        stats = Stats()
        inst = CoLocatedInstance(0, pred, ranks, 1.0, math.inf, "least_kv" if ranks > 1 else "round_robin", req, stats,
                                 budget, math.inf, chunked)
        Simulation(req, [], [inst], math.inf, stats).run()
        out[("engine", name)] = {**{f"req.{k}": np.asarray(getattr(req, k)) for k in REQ_FIELDS},
                                 "intervals": np.asarray(stats.intervals, dtype=float),
                                 "busy": inst.busy, "preemptions": inst.preemptions, "peak": inst.peak_kv}
    return out


def runs() -> dict:
    from cmperf.calibration.serving import SERVING_FILES, load_serving, simulated
    from cmperf.errors import CmperfError
    from cmperf.plan.workload import SLO, Workload, exponential, fixed, from_samples, lognormal
    from cmperf.predict import load_specs
    from cmperf.simulate import DeploymentSpec, InstanceGroup, Traffic, simulate

    out: dict = {}
    slo = SLO(ttft_s=2.0, tpot_s=0.05)

    def put(key, fn):
        try:
            r = fn()
        except CmperfError as e:
            out[key] = f"error: {e}"
            return
        for i, x in enumerate(r if isinstance(r, list) else [r]):
            out[key + (i,)] = _record(x)

    def W(P=fixed(4096), O=fixed(256), **kw):
        return Workload(prompt=P, output=O, prefix_hit=kw.pop("prefix_hit", 0.0), slo=slo, **kw)

    cm = load_specs("cloudmatrix384", "deepseek-r1")
    pd_small = DeploymentSpec(prefill=[InstanceGroup(2, {"dies": 32, "attn_tp": 4})], decode=[InstanceGroup(1, {"dies": 64})])
    paper = DeploymentSpec(prefill=[InstanceGroup(6, {"dies": 32, "attn_tp": 4})], decode=[InstanceGroup(1, {"dies": 320})])
    logn = lognormal(2048, 4000, "2048:4000", "--prompt-len")
    # PD on the paper's system: Poisson, closed loop, bursty, trace arrivals, length shapes, warm-up, MTP off
    put(("cm", "default"), lambda: simulate(cm, W(), None, Traffic(rate_rps=20.0, num_prompts=600), seed=1))
    put(("cm", "paper", "rate140"), lambda: simulate(cm, W(), paper, Traffic(rate_rps=140.0, num_prompts=2000), seed=0))
    put(("cm", "small", "conc"), lambda: simulate(cm, W(), pd_small, Traffic(max_concurrency=48, num_prompts=300), seed=4))
    put(("cm", "small", "inf"), lambda: simulate(cm, W(), pd_small, Traffic(num_prompts=200), seed=2))
    put(("cm", "small", "bursty"), lambda: simulate(cm, W(P=logn, O=exponential(300, "exp:300")), pd_small,
                                                    Traffic(rate_rps=10.0, burstiness=3.0, num_prompts=400), seed=3,
                                                    warmup=0.1))
    rng = np.random.default_rng(11)
    trace = tuple(np.cumsum(rng.exponential(0.1, 150)).tolist())
    samples = from_samples(rng.integers(500, 8000, 150).astype(float), "trace")
    put(("cm", "small", "trace"), lambda: simulate(cm, W(P=samples, O=fixed(128)), pd_small,
                                                   Traffic(arrivals_s=trace, num_prompts=300), seed=5))
    put(("cm", "small", "mtp2"), lambda: simulate(cm, W(), DeploymentSpec(
        prefill=[InstanceGroup(2, {"dies": 32, "attn_tp": 4})], decode=[InstanceGroup(1, {"dies": 64, "mtp_k": 2})]),
        Traffic(rate_rps=12.0, num_prompts=300), seed=6))
    put(("cm", "small", "nomtp"), lambda: simulate(cm, W(), DeploymentSpec(
        prefill=[InstanceGroup(2, {"dies": 32, "attn_tp": 4})], decode=[InstanceGroup(1, {"dies": 64, "mtp": 0})]),
        Traffic(rate_rps=12.0, num_prompts=300), seed=6))
    # prefix hits on the pool, with and without a working set; per-request cached samples
    for h in (0.5, 0.9):
        put(("cm", "hit", h), lambda: simulate(cm, W(prefix_hit=h), pd_small, Traffic(rate_rps=15.0, num_prompts=300), seed=4))
    put(("cm", "hit", "ws"), lambda: simulate(cm, W(prefix_hit=0.6), pd_small, Traffic(rate_rps=15.0, num_prompts=300),
                                              seed=4, working_set_tokens=1e13))
    put(("cm", "hit", "samples"), lambda: simulate(cm, W(P=fixed(4096), cached_samples=rng.integers(0, 4000, 50).astype(float)),
                                                   pd_small, Traffic(rate_rps=15.0, num_prompts=200), seed=4))
    # AFD
    afd = DeploymentSpec(prefill=[InstanceGroup(2, {"dies": 32, "attn_tp": 4})],
                         decode=[InstanceGroup(1, {"attention_dies": 32, "expert_dies": 64})], decode_phase="afd")
    put(("cm", "afd"), lambda: simulate(cm, W(), afd, Traffic(rate_rps=10.0, num_prompts=300), seed=2))
    # co-located: chunked, whole prompts, preemption, a pool
    coloc = DeploymentSpec(decode=[InstanceGroup(1, {"dies": 32})], colocated=True)
    put(("cm", "coloc"), lambda: simulate(cm, W(), coloc, Traffic(max_concurrency=32, num_prompts=128), seed=2))
    put(("cm", "coloc", "hit"), lambda: simulate(cm, W(prefix_hit=0.5), coloc, Traffic(rate_rps=4.0, num_prompts=150), seed=2))
    put(("cm", "coloc16"), lambda: simulate(cm, W(), DeploymentSpec(decode=[InstanceGroup(1, {"dies": 16})], colocated=True),
                                            Traffic(rate_rps=5.0, num_prompts=100)))
    # routers: every stack's and none
    for stack in ("sglang", "vllm", "xdeepserve", "cloudmatrix-infer", None):
        s = load_specs("cloudmatrix384", "deepseek-r1", [], stack) if stack else load_specs("cloudmatrix384", "deepseek-r1", [], "none")
        put(("cm", "stack", stack or "none"), lambda: simulate(s, W(P=logn), pd_small, Traffic(rate_rps=12.0, num_prompts=300), seed=7))
    s = load_specs("cloudmatrix384", "deepseek-r1", ["stack.prefill_router=least_load"], "sglang")
    put(("cm", "router", "least_load"), lambda: simulate(s, W(P=logn), pd_small, Traffic(rate_rps=12.0, num_prompts=300), seed=7))
    s = load_specs("cloudmatrix384", "deepseek-r1", ["stack.dp_balance=least_kv"], "sglang")
    put(("cm", "dp", "least_kv"), lambda: simulate(s, W(P=logn), pd_small, Traffic(rate_rps=12.0, num_prompts=300), seed=7))
    # a sweep of stack constants (the serving fit's path)
    put(("cm", "sweep"), lambda: simulate(load_specs("cloudmatrix384", "deepseek-r1", [], "sglang-ascend"), W(), pd_small, Traffic(rate_rps=12.0, num_prompts=200), seed=1,
                                          sweeps={"stack.spec_step_s": [3e-3, 1e-2, 3e-2], "stack.prefill_overhead_s": [0.02, 0.1, 0.5]}))
    # other systems
    h800 = load_specs("h800-cluster", "deepseek-r1")
    put(("h800", "default"), lambda: simulate(h800, W(), None, Traffic(rate_rps=6.0, num_prompts=400), seed=1))
    put(("h800", "hit"), lambda: simulate(h800, W(prefix_hit=0.5), None, Traffic(rate_rps=6.0, num_prompts=300), seed=1))
    h100 = load_specs("h100-cluster", "llama-3.1-70b")
    put(("h100", "default"), lambda: simulate(h100, W(P=fixed(2048)), None, Traffic(rate_rps=4.0, num_prompts=300), seed=1))
    for stack in ("sglang", "vllm"):
        s = load_specs("h100-cluster", "llama-3.1-70b", [], stack)
        dep = DeploymentSpec(decode=[InstanceGroup(1, {"dies": 8})], colocated=True)
        for rate in (1.0, 6.0):
            put(("h100", "coloc", stack, rate), lambda: simulate(s, W(P=logn, O=fixed(512)), dep,
                                                                 Traffic(rate_rps=rate, num_prompts=300), seed=1))
        put(("h100", "coloc", stack, "conc"), lambda: simulate(s, W(P=fixed(3000), O=fixed(2000)), dep,
                                                               Traffic(max_concurrency=256, num_prompts=400), seed=1))
    gb = load_specs("gb200-nvl72", "deepseek-r1")
    put(("gb200", "default"), lambda: simulate(gb, W(), None, Traffic(rate_rps=10.0, num_prompts=400), seed=1))
    put(("gb200", "coloc"), lambda: simulate(gb, W(), DeploymentSpec(decode=[InstanceGroup(2, {"dies": 8})], colocated=True),
                                             Traffic(rate_rps=2.0, num_prompts=150), seed=1))
    out.update(_engine_runs())
    # the serving fit's replay (files' values and a sweep of the fitted constants)
    for path in SERVING_FILES:
        ref = load_serving(path)
        out[("serving", path.name)] = simulated(ref)
        params = ref.get("fit") or []
        if params:
            n = 3
            sweeps = {p["path"]: [p["lo"] * (p["hi"] / p["lo"]) ** ((i + 0.5) / n) for i in range(n)] for p in params}
            out[("serving", path.name, "sweep")] = simulated(ref, sweeps)
    return out


def differences(before: dict, now: dict) -> list:
    """(run, what differs) of every run whose outputs are not the same to the bit."""
    differ = []
    for k in sorted(before.keys() | now.keys(), key=repr):
        if k not in now or k not in before:
            differ.append((k, "missing"))
            continue
        a, b = before[k], now[k]
        if isinstance(a, dict) and isinstance(b, dict):
            bad = [f for f in a.keys() | b.keys() if f not in a or f not in b or not same(a[f], b[f])]
            if bad:
                differ.append((k, sorted(map(str, bad))[:8]))
        elif not same(a, b):
            differ.append((k, "value"))
    return differ


def main() -> int:
    return save_or_compare(runs, "runs", differences)


if __name__ == "__main__":
    sys.exit(main())
