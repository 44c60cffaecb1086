"""Replay published results: ``cmperf validate [FILE ...]`` (docs/calibration.md).

Rows of one phase are evaluated together, as one grid: one vectorised ``predict`` call per
phase, for one set of spec values or many (sensitivity, the fit, cross-validation).
"""

from __future__ import annotations

import re
from typing import Any, Iterable, Mapping, Optional

import numpy as np
import pandas as pd
from pydantic import BaseModel

from ..errors import SpecError, short
from ..predict import PHASES, Specs, load_specs, predict
from ..specs.schema import Count, Sourced
from .reference import RefFile

def specs_for(ref: RefFile, sets=()) -> Specs:
    """The specs a reference file's rows are evaluated on (its hardware, model and overrides)."""
    return load_specs(ref.hardware, ref.model, [*ref.sets, *sets])


def spec_value(specs: Specs, path: str, sweeps: Mapping[str, Any] | None = None) -> float:
    """The number at a dotted spec path (``chip.efficiency.matmul_compute``)."""
    hw, m = specs.views(sweeps)
    root, *rest = path.split(".")
    node = {"chip": hw.chip, "system": hw.system, "model": m, "stack": hw.stack}.get(root)
    if node is None or not rest:
        raise SpecError(f"metric '{path}': a spec path must start with chip., system., model. or stack. "
                        f"(stack.: the serving stack the file's rows run under)")
    try:
        for k in rest:
            node = getattr(node, k)
    except AttributeError:
        raise SpecError(f"metric '{short(path)}': no such spec field") from None
    if isinstance(node, (bool, str)) or node is None or not isinstance(node, (int, float, np.ndarray, np.number)):
        what = f"a section (its fields: {', '.join(node.keys())})" if hasattr(node, "keys") else \
            f"a {type(node).__name__} field" if node is not None else "an empty optional field"
        raise SpecError(f"metric '{short(path)}': {what}, not a number")
    return float(np.asarray(node).ravel()[0])


def predictions(ref: RefFile, specs: Specs, sweeps: Mapping[str, Iterable[float]] | None = None,
                zipped: bool = False) -> np.ndarray:
    """Predicted metric of every row of ``ref`` (axis 0) for every combination of the swept
    spec values (axis 1, cartesian-product order, last path fastest; with ``zipped``, the
    swept lists are points taken together): one vectorised ``predict`` call per phase."""
    sweeps = {k: list(v) for k, v in (sweeps or {}).items()}
    if not sweeps:
        n = 1
    elif zipped:
        n = len(next(iter(sweeps.values())))
    else:
        n = int(np.prod([len(v) for v in sweeps.values()]))
    out = np.full((len(ref.rows), n), np.nan)
    for phase in PHASES:
        idx = [i for i, r in enumerate(ref.rows) if r.phase == phase]
        if not idx:
            continue
        result, point = _at_points(phase, [ref.rows[i].scenario for i in idx], specs, sweeps, zipped, n)
        m = int(point.max()) + 1  # points evaluated per row
        if len(result.invalid_columns):
            first = int(result.invalid.index[0]) // m  # rows are repeated m times, row slowest
            reason = re.sub(r"--([a-z][a-z-]*)", lambda mt: "scenario." + mt.group(1).replace("-", "_"),
                            str(result.invalid["reason"].iat[0]))
            raise SpecError(f"reference row {ref.rows[idx[first]].id}: {reason}")
        table = result.columns  # the arrays: no DataFrame of a fit's thousands of points (a sixth of its time)
        for j, i in enumerate(idx):
            r = ref.rows[i]
            if r.metric not in table.columns:
                raise SpecError(f"reference row {r.id}: unknown {phase} metric '{r.metric}'")
            out[i] = table[r.metric].to_numpy()[j * m:(j + 1) * m][point]
    for i, r in enumerate(ref.rows):
        if r.phase != "spec":
            continue
        if r.metric not in sweeps:  # a spec field is one number; swept only if its own path is swept
            try:
                out[i] = spec_value(specs, r.metric)
            except SpecError as e:
                raise SpecError(f"reference row {r.id}: {e}") from None
        elif zipped:
            out[i] = sweeps[r.metric]
        else:
            axes = [np.asarray(v, dtype=float) for v in sweeps.values()]
            grids = np.meshgrid(*axes, indexing="ij")
            out[i] = grids[list(sweeps).index(r.metric)].ravel()
    return out


DISTINCT_FROM = 256  # points from which a zipped evaluation looks for the values it reads (two or three calls, not one)


def _at_points(phase: str, scenarios: list[dict], specs: Specs, sweeps: dict[str, list], zipped: bool, n: int):
    """``predict`` of ``scenarios`` at the ``n`` points of ``sweeps``, and for each point the
    index of the evaluated point that answers for it. Zipped points (a fit's grid: thousands of
    points over every fitted parameter) are evaluated once per distinct combination of the swept
    values the phase's cost model reads (:func:`cmperf.specs.view.overridden_reads`): a GEMM row
    of the H800 file reads 6 of its 9 parameters, a collective row 4, so 3^9 grid points are
    3^6 and 3^4 evaluations (a point's answer does not depend on the other points evaluated with
    it, nor on a value never read; the same numbers as every point evaluated). The values read
    are found by evaluating one point, then the distinct combinations of what it read, until
    an evaluation reads nothing new; a read of a value no sweep names (the rates a swept unit
    count carries) evaluates every point, and so does a call of fewer than DISTINCT_FROM points
    (a pattern search's steps: the calls would cost more than the points they save)."""
    def run(points):
        return predict(phase, rows=scenarios, specs=specs, sweeps=points or None, zip_sweeps=zipped, strict=False)

    every = np.arange(n)
    try:
        cols = {k: np.asarray(v, dtype=float) for k, v in sweeps.items()}
    except (TypeError, ValueError):
        cols = {}
    if not zipped or n < DISTINCT_FROM or len(cols) != len(sweeps):
        return run(sweeps), every
    from ..specs.view import overridden_reads

    rel = {k: k.split(".", 1)[-1] for k in sweeps}  # as a view names its overridden fields
    read: set[str] = set()
    while True:
        if read:
            keys = sorted(read)
            _, first, point = np.unique(np.column_stack([cols[k] for k in keys]), axis=0, return_index=True,
                                        return_inverse=True)
        else:
            first, point = np.zeros(1, dtype=int), np.zeros(n, dtype=int)
        with overridden_reads() as seen:
            result = run({k: [v[i] for i in first] for k, v in sweeps.items()})
        if not seen <= set(rel.values()):
            return run(sweeps), every
        now = {k for k in sweeps if rel[k] in seen}  # a path two specs share counts for both
        if now <= read:
            return result, np.asarray(point).ravel()
        read |= now


def errors(ref: RefFile, predicted: np.ndarray) -> np.ndarray:
    """Error of each row (axis 0) in its tolerance's unit: percent for a relative tolerance,
    the metric's own unit for an absolute one; ``predicted`` may carry more axes."""
    paper = np.array([r.paper for r in ref.rows])
    relative = np.array([r.tolerance is not None for r in ref.rows])
    shape = (-1,) + (1,) * (np.ndim(predicted) - 1)
    rel = 100 * (predicted - paper.reshape(shape)) / np.where(relative, paper, 1.0).reshape(shape)
    return np.where(relative.reshape(shape), rel, predicted - paper.reshape(shape))


def evaluate(ref: RefFile, specs: Specs | None = None, sweeps: Mapping[str, Any] | None = None) -> pd.DataFrame:
    """Predicted vs paper for every row of ``ref``; ``sweeps`` (path -> value) overrides
    spec fields for this evaluation (used by sensitivity and cross-validation)."""
    specs = specs or specs_for(ref)
    predicted = predictions(ref, specs, {k: [v] for k, v in (sweeps or {}).items()})[:, 0]
    out = pd.DataFrame([{
        "id": r.id, "kind": r.kind, "group": r.fold, "where": r.where, "metric": r.metric, "predicted": p,
        "paper": r.paper, "unit": "%" if r.tolerance is not None else "abs",
        "tolerance": 100 * r.tolerance if r.tolerance is not None else r.tolerance_abs,
        "derived_from": r.derived_from or "", "description": r.description, "known_miss": r.known_miss or "",
    } for r, p in zip(ref.rows, predicted)])
    out["error"] = errors(ref, predicted)
    out["within"] = out["error"].abs() <= out["tolerance"] * (1 + 1e-9)
    out["pass"] = out["within"] | (out["known_miss"] != "")  # a known miss does not fail the file
    return out


def summary(res: pd.DataFrame) -> dict:
    """The headline: evidence rows only (relative rows in %, absolute rows in their unit);
    derived and spec rows are counted apart."""
    ev = res[res["kind"] == "evidence"]
    rel, ab = ev[ev["unit"] == "%"], ev[ev["unit"] == "abs"]
    return {
        "evidence_rows": len(ev), "evidence_failed": int((~ev["pass"]).sum()),
        "evidence_mean_abs_error_pct": float(rel["error"].abs().mean()) if len(rel) else float("nan"),
        "evidence_max_abs_error_pct": float(rel["error"].abs().max()) if len(rel) else float("nan"),
        "evidence_max_abs_error_abs": float(ab["error"].abs().max()) if len(ab) else float("nan"),
        "evidence_within": int(ev["within"].sum()), "known_misses": int((ev["known_miss"] != "").sum()),
        "known_misses_now_within": int(((ev["known_miss"] != "") & ev["within"]).sum()),
        "rows": len(res), "failed": int((~res["pass"]).sum()),
        "derived_rows": int((res["kind"] == "derived").sum()), "spec_rows": int((res["kind"] == "spec").sum()),
    }


def spec_parts(specs: Specs) -> list[tuple[str, Any]]:
    """(label, validated spec) of the chip, system, model and, when there is one, the serving stack."""
    parts = [("chip", specs.hardware.chip), ("system", specs.hardware.system), ("model", specs.model)]
    if specs.stack is not None:
        from ..specs.schema import StackSpec

        parts.append(("stack", StackSpec.model_validate(specs.stack)))
    return parts


def fitted_parameters(specs: Specs) -> pd.DataFrame:
    """Every number of the specs (the stack's too) whose source says it was fitted, with the
    rows it was fitted to."""
    rows = []
    for label, spec in spec_parts(specs):
        for path, value in _walk(spec, label):
            if value.source.lower().startswith(("fitted", "measured from row")):
                rows.append({"parameter": path, "value": value.value, "source": value.source})
    return pd.DataFrame(rows, columns=["parameter", "value", "source"])


def sourced_parameters(specs: Specs) -> list[tuple[str, float]]:
    """Every sourced number of the hardware specs (for sensitivity)."""
    out = []
    for label, spec in (("chip", specs.hardware.chip), ("system", specs.hardware.system)):
        out += [(p, v.value) for p, v in _walk(spec, label) if not isinstance(v, Count)]
    return out


def _walk(obj, prefix: str) -> Iterable[tuple[str, Sourced]]:
    """Every sourced number under ``obj``, with its dotted path (through models and the
    name-keyed mappings such as ``tiers``)."""
    if isinstance(obj, Sourced):
        yield prefix, obj
    elif isinstance(obj, BaseModel):
        for name in type(obj).model_fields:
            yield from _walk(getattr(obj, name), f"{prefix}.{name}")
    elif isinstance(obj, dict):
        for key, v in obj.items():
            yield from _walk(v, f"{prefix}.{key}")


HEADLINE = ("P1", "P2", "D1", "D2", "L1", "L2", "A1-96", "T7-D256", "T7-C256")


def sensitivity(ref: RefFile, specs: Specs | None = None, step: float = 0.10,
                params: Optional[list[str]] = None) -> pd.DataFrame:
    """Percent change of each headline row when each parameter moves by -step and +step.

    All the moves are one zipped sweep (one vectorised ``predict`` call per phase): point 0
    holds every parameter at its value, and each further point moves one of them (a
    parameter the vectorised model cannot sweep with the others is moved alone)."""
    specs = specs or specs_for(ref)
    rows = [r for r in ref.rows if r.id in HEADLINE] or [r for r in ref.rows if r.phase != "spec"]
    sub = ref.model_copy(update={"rows": rows})
    ids = [r.id for r in rows]
    candidates = [(p, v) for p, v in sourced_parameters(specs) if v != 0 and (params is None or p in params)]
    moves = [(path, value, value * (1 + sign * step)) for path, value in candidates for sign in (-1, +1)]
    try:
        points = {path: [value] * (1 + len(moves)) for path, value in candidates}
        for j, (path, _, moved) in enumerate(moves):
            points[path][1 + j] = moved
        predicted = predictions(sub, specs, points, zipped=True) if candidates else np.empty((len(rows), 1))
        base, moved_rows = predicted[:, 0], predicted[:, 1:]
    except (TypeError, ValueError, IndexError):  # a field that shapes the model: one evaluation per move
        base = predictions(sub, specs)[:, 0]
        moved_rows = np.column_stack([predictions(sub, specs, {path: [moved]})[:, 0] for path, _, moved in moves]) \
            if moves else np.empty((len(rows), 0))
    out = []
    for c, (path, value) in enumerate(candidates):
        entry = {"parameter": path, "value": value}
        for k, sign in enumerate((-1, +1)):
            change = 100 * (moved_rows[:, 2 * c + k] - base) / base
            for i, rid in enumerate(ids):
                entry[f"{rid} {'-' if sign < 0 else '+'}{int(step * 100)}%"] = change[i]
        out.append(entry)
    df = pd.DataFrame(out)
    change_cols = [c for c in df.columns if c not in ("parameter", "value")]
    df["max_abs_change_pct"] = df[change_cols].abs().max(axis=1)
    return df.sort_values("max_abs_change_pct", ascending=False).reset_index(drop=True)
