"""Serving evidence: released end-to-end runs replayed through ``cmperf simulate``
(docs/calibration.md#serving-evidence). Each row gives a deployment, the stack's per-run flags,
the workload and bench_serving's traffic; the simulation predicts the metrics the run logged.
Nothing is fitted to these rows: their errors are held-out errors of the hardware model, the
stack's facts and the simulation together."""

from __future__ import annotations

import math
from pathlib import Path

from ..specs.loader import read_yaml
from .reference import REFERENCE_DIR

SERVING_FILES = sorted(REFERENCE_DIR.glob("*-serving.yaml"))
METRICS = ("output_throughput_tps", "mean_tpot_ms", "mean_ttft_ms")


def load_serving(path: Path) -> dict:
    """A serving-evidence file, checked against its schema and each row against its system
    (cmperf/calibration/serving_schema.py): one line naming the file, the row and the field."""
    from ..errors import short_path
    from .serving_schema import check_rows, validated

    raw = validated(read_yaml(Path(path)), short_path(path))
    check_rows(raw, short_path(path))
    return raw


def replay(path: Path, seed: int = 0, progress=None):
    """One row per (run, metric): measured, simulated, error (%), target, within;
    ``progress(done, total)`` after each run simulated."""
    import pandas as pd

    from ..plan.workload import SLO, Workload, fixed
    from ..predict import load_specs
    from ..simulate import Traffic, simulate
    from ..simulate.deployment import DeploymentSpec, InstanceGroup

    ref = load_serving(path)
    out = []
    for done, r in enumerate(ref["rows"], 1):
        sets = [*r.get("sets", []), *(f"stack.{s}" for s in r.get("stack_sets", []))]
        specs = load_specs(ref["hardware"], ref["model"], sets, ref["stack"])
        d = r["deployment"]
        phase = "afd" if "afd" in d else "decode"
        group = lambda g: InstanceGroup(g["count"], {k: v for k, v in g.items() if k != "count"})  # noqa: E731
        if "colocated" in d:
            dep = DeploymentSpec(decode=[group(g) for g in d["colocated"]], colocated=True)
        else:
            dep = DeploymentSpec(prefill=[group(g) for g in d["prefill"]], decode=[group(g) for g in d.get(phase, [])],
                                 decode_phase=phase)
        w = r["workload"]
        workload = Workload(prompt=fixed(w["prompt_len"]), output=fixed(w["output_len"]), prefix_hit=0.0,
                            slo=SLO(ttft_s=1e6, tpot_s=1e6))
        t = r["traffic"]
        rate = t.get("request_rate")
        traffic = Traffic(rate_rps=None if rate in (None, "inf") else float(rate), max_concurrency=t.get("max_concurrency"),
                          num_prompts=t["num_prompts"])
        m = simulate(specs, workload, dep, traffic, seed).metrics
        for metric, measured in r["measured"].items():
            sim = m[metric]
            err = 100 * (sim / measured - 1)
            target = 100 * ref["targets"][metric]
            out.append({"id": r["id"], "metric": metric, "measured": measured, "simulated": sim, "error_pct": err,
                        "target_pct": target, "within": bool(math.isfinite(err) and abs(err) <= target)})
        if progress:
            progress(done, len(ref["rows"]))
    return pd.DataFrame(out)
