"""Serving evidence: released end-to-end runs replayed through ``cmperf simulate``
(docs/calibration.md#serving-evidence). Each row gives a deployment, the stack's per-run flags,
its logged accept length, the workload and bench_serving's traffic; the simulation predicts
the metrics the run logged. The hardware model is calibrated elsewhere; the stack's host
constants that no micro-benchmark publishes (the file's ``fit:``) are fitted to the runs
(:func:`fit_serving`), and each run is reported at the fit to the OTHER runs
(leave-one-run-out): a run used to fit is never its own validation.

Speed (CPU, ``benchmarks/serving_fit_speed.py``): a run's step-time grids (``predict``) are
~0.035 s per batch of points, its engine up to ~0.07 s per point (the HT run's 3,328 requests);
the fit of sglang-a3-serving.yaml ~10 s over 122 points (all its folds). The fit evaluates its points in batches: one simulate call per
run with the batch as a zipped sweep of stack paths, whose grids come from one vectorised
``predict`` per instance (``simulate(..., sweeps=)``), every (run, point) once and only where a
fold needs it: not the run it leaves out, nor a run no fit sees (:class:`_Points`).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from ..errors import SpecError, short
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


def _run_inputs(ref: dict, r: dict):
    """(specs, workload, deployment, traffic) of one run as the document gives it: the stack's
    per-run flags, and its logged accept length as the acceptance that gives it (solved by
    :func:`cmperf.schedule.decode.acceptance_for` at the run's draft count)."""
    from ..plan.workload import SLO, Workload, fixed
    from ..predict import load_specs
    from ..schedule.decode import acceptance_for
    from ..simulate import Traffic
    from ..simulate.deployment import DeploymentSpec, InstanceGroup

    stack_sets = list(r.get("stack_sets", []))
    if "accept_length" in r:
        k = int(dict(x.split("=", 1) for x in stack_sets).get("mtp_draft_tokens", 0)) or \
            int(load_specs(ref["hardware"], ref["model"], [], ref["stack"]).stack_view().mtp_draft_tokens)
        try:
            a = acceptance_for(float(r["accept_length"]), k)
        except (TypeError, ValueError) as e:
            raise SpecError(f"row {r['id']}: accept_length: {e}") from None
        stack_sets.append(f"mtp_acceptance={a:.6g}")
    sets = [*r.get("sets", []), *(f"stack.{x}" for x in stack_sets)]
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
    return specs, workload, dep, traffic


def simulated(ref: dict, sweeps: dict[str, list] | None = None, seed: int = 0,
              inputs: dict | None = None) -> dict[str, np.ndarray]:
    """Each run's simulated metrics (run id -> array (metrics of the run, points)): at the
    spec values of the files, or at each of the points of ``sweeps`` (stack paths -> values,
    taken together; one vectorised step-time evaluation per run and instance). ``inputs``:
    run id -> its :func:`_run_inputs`, kept there by a caller that simulates the runs again
    (the fit: the specs are loaded and the acceptance solved once per run)."""
    from ..simulate import simulate

    out = {}
    for r in ref["rows"]:
        if inputs is None:
            specs, workload, dep, traffic = _run_inputs(ref, r)
        else:
            if r["id"] not in inputs:
                inputs[r["id"]] = _run_inputs(ref, r)
            specs, workload, dep, traffic = inputs[r["id"]]
        res = simulate(specs, workload, dep, traffic, seed, sweeps=sweeps or None)
        res = res if sweeps else [res]
        out[r["id"]] = np.array([[x.metrics[m] for x in res] for m in r["measured"]], dtype=float)
    return out


def replay(path: Path, seed: int = 0, values: dict[str, float] | None = None):
    """One row per (run, metric): measured, simulated, error (%), target, within; at the
    spec values of the files, or with ``values`` (stack path -> value) in their place."""
    import pandas as pd

    ref = load_serving(path)
    sim = simulated(ref, {k: [v] for k, v in values.items()} if values else None, seed)
    out = []
    for r in ref["rows"]:
        for j, (metric, measured) in enumerate(r["measured"].items()):
            out.append(_row(ref, r["id"], metric, measured, float(sim[r["id"]][j, 0])))
    return pd.DataFrame(out)


def _row(ref: dict, rid: str, metric: str, measured: float, sim: float) -> dict:
    err = 100 * (sim / measured - 1)
    target = 100 * ref["targets"][metric]
    return {"id": rid, "metric": metric, "measured": measured, "simulated": sim, "error_pct": err,
            "target_pct": target, "within": bool(math.isfinite(err) and abs(err) <= target)}


# --------------------------------------------------------------------------- the stack's fit
COARSE = 3  # grid points per parameter (log-spaced between its bounds, at the cells' centres)
MIN_STEP = 0.002  # of each parameter's log range: the pattern search stops below it (~0.6 % of a value for a range of 20)
def _residuals(ref: dict, sim: dict[str, np.ndarray], runs) -> np.ndarray:
    """Each metric's error in units of its target, log(simulated / measured) / target, of the
    ``runs`` (ids), stacked: (metrics, points)."""
    parts = []
    for r in ref["rows"]:
        if r["id"] not in runs:
            continue
        measured = np.array(list(r["measured"].values()), dtype=float)[:, None]
        target = np.array([ref["targets"][m] for m in r["measured"]], dtype=float)[:, None]
        with np.errstate(divide="ignore", invalid="ignore"):
            e = np.log(np.maximum(sim[r["id"]], 1e-300) / measured) / target
        parts.append(np.where(np.isfinite(e), e, 1e6))
    return np.vstack(parts)


class _Points:
    """Simulated metrics of the runs at the points asked for so far (unit coordinates of the
    parameters' log ranges), evaluated in batches, each (run, point) once and only where a
    fold asks for it: a fold's candidates need the runs it fits, not the run it leaves out
    nor a run no fit sees (``not_fitted``), which are simulated at the fold's minimum alone."""

    def __init__(self, ref: dict, params: list[dict], seed: int):
        self.ref, self.params, self.seed = ref, params, seed
        self.lo = np.log([p["lo"] for p in params])
        self.hi = np.log([p["hi"] for p in params])
        self.sim: dict[tuple, dict[str, np.ndarray]] = {}
        self.inputs: dict = {}  # run id -> its inputs (simulated)

    def values(self, u) -> dict[str, float]:
        x = np.exp(self.lo + np.clip(np.asarray(u, dtype=float), 0.0, 1.0) * (self.hi - self.lo))
        return {p["path"]: float(v) for p, v in zip(self.params, x)}

    @staticmethod
    def key(u) -> tuple:
        return tuple(round(float(c), 9) for c in u)

    def need(self, us, runs=None) -> None:
        """The metrics of ``runs`` (ids; default: every run of the file) at the points ``us``."""
        self.need_all([(us, runs)])

    def need_all(self, asks) -> None:
        """Every ``(points, runs)`` of ``asks``, in one simulate call per run (of the points
        that lack it): a call's step-time grids cost about as much as its engine runs."""
        for r in self.ref["rows"]:
            new = [u for us, runs in asks if runs is None or r["id"] in runs for u in map(self.key, us)
                   if r["id"] not in self.sim.get(u, {})]
            new = list(dict.fromkeys(new))
            if not new:
                continue
            vals = [self.values(u) for u in new]
            sweeps = {p["path"]: [v[p["path"]] for v in vals] for p in self.params}
            m = simulated({**self.ref, "rows": [r]}, sweeps, self.seed, inputs=self.inputs)[r["id"]]
            for i, u in enumerate(new):
                self.sim.setdefault(u, {})[r["id"]] = m[:, i:i + 1]

    def cost(self, u, runs) -> float:
        return float((_residuals(self.ref, self.sim[self.key(u)], runs) ** 2).sum())


def _fold_search(pts: _Points, folds: dict[str, set]) -> dict[str, np.ndarray]:
    """Each fold's minimum (unit coordinates): the best point of a coarse grid, then a pattern
    search — steps along each axis, kept when one improves, halved when none does — with the
    candidate points of every fold evaluated together (the folds share most of them)."""
    d = len(pts.params)
    axis = (np.arange(COARSE) + 0.5) / COARSE
    grid = np.stack(np.meshgrid(*[axis] * d, indexing="ij"), axis=-1).reshape(-1, d)
    pts.need(grid, set().union(*folds.values()))
    best = {f: min(grid, key=lambda u: pts.cost(u, runs)) for f, runs in folds.items()}
    step = {f: 0.5 / COARSE for f in folds}
    moves = np.vstack([np.eye(d), -np.eye(d)])
    while any(x > MIN_STEP for x in step.values()):
        live = [f for f in folds if step[f] > MIN_STEP]
        cand = {f: np.clip(best[f] + step[f] * moves, 0.0, 1.0) for f in live}
        pts.need_all([(cand[f], folds[f]) for f in live])
        for f in live:
            c = min(cand[f], key=lambda u: pts.cost(u, folds[f]))
            if pts.cost(c, folds[f]) < pts.cost(best[f], folds[f]) - 1e-12:
                best[f] = c
            else:
                step[f] /= 2
    return best


def fit_serving(path: Path, seed: int = 0) -> dict:
    """The stack's host constants of the file's ``fit:`` section, fitted to every run and,
    for each run, to the others alone (leave-one-run-out); each run's metrics at the fit that
    did not see it; the runs each constant's fit moves (elasticity of a metric > ELASTIC when
    the constant moves by 10 %); and the folds that hold out a family of runs
    (:func:`group_folds`). Returns {"values" (all runs and each leave-one-run-out fold), "rows",
    "moves", "evaluations", "params", "group_folds", "counts"}."""
    import pandas as pd

    ref = load_serving(path)
    params = ref.get("fit") or []
    if not params:
        raise SpecError(f"{path}: no `fit:` section (the stack constants to fit)")
    for p in params:
        ok = isinstance(p, dict) and str(p.get("path", "")).startswith("stack.") and all(
            isinstance(p.get(k), (int, float)) and not isinstance(p.get(k), bool) for k in ("lo", "hi"))
        if not ok or not 0 < p["lo"] < p["hi"] or not p.get("meaning"):
            raise SpecError(f"{path}: fit: expected entries {{path: stack.FIELD, lo: > 0, hi: > lo, meaning: ...}} "
                            f"(got {short(str(p), 120)})")
    runs = [r["id"] for r in ref["rows"] if not r.get("not_fitted")]
    fewest = min((sum(len(r["measured"]) for r in ref["rows"] if r["id"] in runs and r["id"] != rid) for rid in runs),
                 default=0)
    if len(runs) < 2 or 3 * len(params) > fewest:
        raise SpecError(f"{path}: fit: {len(params)} constants need at least {3 * len(params)} metrics in every "
                        f"leave-one-run-out fold (at most one constant per three rows); the fitted runs give {fewest}")
    folds = {"all runs": set(runs), **{f"without {rid}": set(runs) - {rid} for rid in runs}}
    groups = group_folds(ref, runs, 3 * len(params))
    folds |= {name: fit for name, (fit, _) in groups.items() if fit is not None}
    pts = _Points(ref, params, seed)
    best = _fold_search(pts, folds)
    values = {f: pts.values(u) for f, u in best.items()}
    # each run at the fit that did not see it, and every run at the fit to all (in sample)
    pts.need_all([([best[f"without {rid}"]], {rid}) for rid in runs] + [([best["all runs"]], None)]
                 + [([best[name]], held) for name, (fit, held) in groups.items() if fit is not None])
    rows = []
    for r in ref["rows"]:
        fitted = not r.get("not_fitted")  # a run the fit never sees: the full fit predicts it
        held = pts.sim[pts.key(best[f"without {r['id']}" if fitted else "all runs"])][r["id"]]
        full = pts.sim[pts.key(best["all runs"])][r["id"]]
        for j, (metric, measured) in enumerate(r["measured"].items()):
            row = _row(ref, r["id"], metric, measured, float(held[j, 0]))
            row["in_sample_error_pct"] = 100 * (float(full[j, 0]) / measured - 1) if fitted else float("nan")
            row["fold"] = f"without {r['id']}" if fitted else f"not fitted ({r['not_fitted']})"
            rows.append(row)
    families = []
    for name, (fit, held) in groups.items():
        entry = {"fold": name, "fitted": sorted(fit) if fit is not None else [], "predicted": sorted(held)}
        if fit is None:
            entry["note"] = (f"not identifiable: the other runs give {_metrics(ref, set(runs) - held)} metrics for "
                             f"{len(params)} constants (three a constant)")
        else:
            sim = pts.sim[pts.key(best[name])]
            errs = [_row(ref, r["id"], m, v, float(sim[r["id"]][j, 0]))
                    for r in ref["rows"] if r["id"] in held for j, (m, v) in enumerate(r["measured"].items())]
            entry |= {"values": values[name], "within": sum(e["within"] for e in errs), "metrics": len(errs),
                      "median_abs_error_pct": float(np.median([abs(e["error_pct"]) for e in errs])),
                      "errors": {f"{e['id']} {e['metric']}": e["error_pct"] for e in errs}}
        families.append(entry)
    moves = _moves(ref, pts, params, best["all runs"])
    return {"values": {k: v for k, v in values.items() if k not in groups}, "rows": pd.DataFrame(rows), "moves": moves,
            "evaluations": len(pts.sim), "params": params, "group_folds": families,
            "counts": {"fitted_runs": len(runs), "fitted_metrics": _metrics(ref, set(runs)),
                       "runs": len(ref["rows"]), "metrics": _metrics(ref, {r["id"] for r in ref["rows"]})}}


def fit_counts(f: dict, stack: str) -> str:
    """What a fit of :func:`fit_serving` fitted, counted: its constants, the metrics and runs
    it fitted to, and those it only predicts (runs marked ``not_fitted``)."""
    c = f["counts"]
    out = (f"{len(f['params'])} constants of stack {stack} fitted to {c['fitted_metrics']} metrics of "
           f"{c['fitted_runs']} runs")
    if c["runs"] > c["fitted_runs"]:
        out += (f"; {c['metrics'] - c['fitted_metrics']} metrics of {c['runs'] - c['fitted_runs']} more run(s) "
                f"never fitted, predicted by the fit to all")
    return out


def group_fold_table(f: dict):
    """The family and length folds of a fit (:func:`group_folds`) as a table: what each fold
    fitted and predicted, its constants, and its predicted metrics' errors."""
    import pandas as pd

    rows = []
    for g in f["group_folds"]:
        row = {"fold": g["fold"], "fitted": ", ".join(g["fitted"]) or "-", "predicted": ", ".join(g["predicted"])}
        if "note" in g:
            row["result"] = g["note"]
        else:
            errs = "; ".join(f"{k} {v:+.1f} %" for k, v in g["errors"].items())
            consts = ", ".join(f"{k.split('.', 1)[1]} {v:.4g}" for k, v in g["values"].items())
            row["result"] = f"{g['within']} of {g['metrics']} within (median |error| {g['median_abs_error_pct']:.1f} %) at {consts}: {errs}"
        rows.append(row)
    return pd.DataFrame(rows, columns=["fold", "fitted", "predicted", "result"])


def _metrics(ref: dict, runs: set) -> int:
    """Measured metrics of ``runs`` (ids)."""
    return sum(len(r["measured"]) for r in ref["rows"] if r["id"] in runs)


def _family(r: dict) -> str:
    """A run's serving family: PD-disaggregated or co-located (its deployment)."""
    return "co-located" if "colocated" in r.get("deployment", {}) else "PD"


def group_folds(ref: dict, runs: list[str], need: int) -> dict[str, tuple]:
    """Folds that hold out a whole family of runs, beside leave-one-run-out (docs/calibration.md
    #serving-evidence): name -> (runs fitted, or None when they give fewer than ``need``
    metrics; runs predicted).

    - family: fit on the runs of the other serving families alone (PD-disaggregated vs
      co-located), predict the family's runs, those never fitted included (a co-located run
      predicted by constants that never saw a co-located scheduler);
    - length: fit on all but the runs of the longest (shortest) prompts among the fitted runs,
      predict those: the prompt-length extrapolation the constants must carry."""
    rows = {r["id"]: r for r in ref["rows"]}
    out = {}
    for fam in sorted({_family(r) for r in rows.values()}):
        held = {rid for rid, r in rows.items() if _family(r) == fam}
        fit = set(runs) - held
        if held and len(held) < len(rows):
            out[f"fit without the {fam} runs"] = (fit if _metrics(ref, fit) >= need else None, held)
    lengths = {rid: rows[rid].get("workload", {}).get("prompt_len") for rid in runs}
    if None not in lengths.values() and len(set(lengths.values())) > 1:
        for which, ell in (("longest", max(lengths.values())), ("shortest", min(lengths.values()))):
            held = {rid for rid, v in lengths.items() if v == ell}
            fit = set(runs) - held
            out[f"fit without the {which} prompts ({ell:,} tokens)"] = (fit if _metrics(ref, fit) >= need else None, held)
    return out


ELASTIC = 0.05  # a metric moves with a constant when d log(metric) / d log(constant) exceeds this


def _moves(ref: dict, pts: _Points, params: list[dict], u) -> dict[str, list[str]]:
    """For each fitted constant, the (run, metric) pairs whose simulated value moves with it
    at the full fit: elasticity d log(metric) / d log(constant) above ELASTIC (two points at
    +-10 %)."""
    out = {}
    width = pts.hi - pts.lo
    shift = np.diag(np.log(1.1) / width)  # row j: constant j moved by 10 %
    ups, downs = np.asarray(u, dtype=float) + shift, np.asarray(u, dtype=float) - shift
    pts.need(np.vstack([ups, downs]))
    for j, p in enumerate(params):
        a, b = pts.sim[pts.key(ups[j])], pts.sim[pts.key(downs[j])]
        moved = []
        for r in ref["rows"]:
            e = np.log(a[r["id"]][:, 0] / b[r["id"]][:, 0]) / (2 * np.log(1.1))
            moved += [f"{r['id']} {m}" for m, x in zip(r["measured"], e) if abs(x) > ELASTIC]
        out[p["path"]] = moved
    return out


def stack_sources(path: Path, f: dict) -> dict[str, str]:
    """The ``source:`` of each fitted constant: what it is, the runs it was fitted to and the
    metrics that move with it."""
    ref = load_serving(path)
    runs = [r["id"] for r in ref["rows"] if not r.get("not_fitted")]
    out = {}
    for p in f["params"]:
        folds = [v[p["path"]] for k, v in f["values"].items() if k != "all runs"]
        metrics = sorted({m.split(" ", 1)[1] for m in f["moves"][p["path"]] if m.split(" ")[0] in runs})
        out[p["path"]] = (f"fitted: {p['meaning']}; jointly to the {_metrics(ref, set(runs))} metrics of runs {', '.join(runs)} "
                          f"of cmperf/reference/{Path(path).name} (it moves their {', '.join(metrics) or 'none'}); "
                          f"leave-one-run-out folds {min(folds):.3g} ... {max(folds):.3g} "
                          f"(docs/calibration.md#serving-evidence)")
    return out


# --------------------------------------------------------------------------- what a log bounds
def burst_rate_needed_tps(concurrency: float, prompts: float, p99_ttft_s: float, prompt_tokens: float) -> float:
    """The least prompt-token rate (tokens/s) a closed-loop run's first wave needs by its logged
    P99 TTFT: ``concurrency`` requests are sent at once; at most 1 % of all ``prompts`` have a
    TTFT above the P99, so at least concurrency - 0.01 x prompts of the first wave had their
    prompt prefilled by then (docs/calibration.md#serving-evidence, "what the logs bound")."""
    return (concurrency - 0.01 * prompts) * prompt_tokens / p99_ttft_s


def wave_rate_allowed_tps(prompts: float, median_ttft_s: float, prompt_tokens: float, pass_prompts: float,
                          latency_s: float = 0.0) -> float:
    """The most prompt-token rate (tokens/s) a single-wave run (every prompt sent at once) allows,
    by its logged median TTFT, when a prompt's TTFT is its prefill queue and pass plus
    ``latency_s`` of anything outside them: at the median at most half the prompts have their
    first token, and prefilling at X tokens/s in passes of ``pass_prompts`` prompts (all the
    deployment's instances together) would have finished at least X (t - latency) / p -
    pass_prompts of them by then; so X <= (N / 2 + pass_prompts) p / (t - latency)."""
    return (prompts / 2 + pass_prompts) * prompt_tokens / (median_ttft_s - latency_s)
