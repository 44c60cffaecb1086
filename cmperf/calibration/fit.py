"""Fit the few parameters no table gives, from the evidence rows of a reference file
(docs/calibration.md). ``python -m cmperf.calibration`` re-fits and prints the values;
``--write`` stores them in the built-in spec files of a source checkout.

The objective is a weighted least squares over the evidence rows (known misses left out),
each error in units of its own tolerance (log(predicted / paper) / tolerance, or the
absolute error / tolerance), each row weighted by 1 / sqrt(rows in its group) so that the
twelve Table 7 rows count as one measurement series, not twelve. The search is a deterministic pattern search in the
log of each positive parameter (linear for fractions): a coarse grid of every combination,
then, from its best points, steps along each axis that halve when no step improves. Every
step evaluates all its candidate points in one vectorised ``predict`` call per phase (a
coarse grid once per distinct combination of the values each phase reads:
:func:`cmperf.calibration.validate._at_points`). The
model is piecewise smooth (max, ceil), where gradient solvers stall at kinks; a grid and a
pattern search do not, and they give the same result from any state of the spec files.

Each parameter of a fit is then checked (:func:`checks`): at a search bound, or unidentified
(the objective rises by less than ``FLAT`` when it alone moves by ``PROBE``). A parameter the
file's whole set of rows leaves so is not fitted: it keeps its spec value (:func:`fit_result`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..predict import Specs
from .reference import RefFile, load_reference
from .validate import predictions, specs_for

@dataclass(frozen=True)
class Param:
    path: str  # spec path (chip./system./model.)
    lo: float
    hi: float
    log: bool
    meaning: str


def params_of(ref: RefFile) -> list[Param]:
    """The parameters a reference file calibrates (its ``fit`` section)."""
    return [Param(p.path, p.lo, p.hi, p.log, p.meaning) for p in ref.fit]


COARSE_POINTS = 5  # per parameter (fewer when the grid would exceed MAX_GRID points)
MAX_GRID = 100_000
STARTS = 3  # best coarse points refined
MIN_STEP = 1e-3  # of each parameter's (transformed) range


def evidence(ref: RefFile, exclude_groups=()) -> RefFile:
    """The evidence rows of ``ref``, leaving out the named groups."""
    rows = [r for r in ref.rows if r.kind == "evidence" and r.fold not in set(exclude_groups)]
    return ref.model_copy(update={"rows": rows})


def _weighted_residuals(sub: RefFile, predicted: np.ndarray) -> np.ndarray:
    """Each row's error in units of its tolerance, weighted by 1/sqrt(group size)."""
    sizes = {}
    for r in sub.rows:
        sizes[r.fold] = sizes.get(r.fold, 0) + 1
    out = np.empty_like(predicted)
    for i, r in enumerate(sub.rows):
        if r.tolerance is not None:
            with np.errstate(divide="ignore", invalid="ignore"):
                e = np.log(np.maximum(predicted[i], 1e-300) / r.paper) / r.tolerance
        else:
            e = (predicted[i] - r.paper) / r.tolerance_abs
        out[i] = e / np.sqrt(sizes[r.fold])
    return np.where(np.isfinite(out), out, 1e6)


class _Space:
    """Parameters <-> unit coordinates (log for positive parameters, linear for fractions)."""

    def __init__(self, params: list[Param]):
        self.params = params
        self.lo = np.array([np.log(p.lo) if p.log else p.lo for p in params])
        self.hi = np.array([np.log(p.hi) if p.log else p.hi for p in params])

    def values(self, u: np.ndarray) -> dict[str, np.ndarray]:
        x = self.lo + np.clip(u, 0.0, 1.0) * (self.hi - self.lo)
        return {p.path: (np.exp(x[:, j]) if p.log else x[:, j]) for j, p in enumerate(self.params)}


def _predicted(sub: RefFile, specs: Specs, space: _Space, u: np.ndarray, fixed: dict[str, float]) -> np.ndarray:
    """Each row of ``sub`` (axis 0) at each point ``u`` (axis 1), the ``fixed`` values held."""
    sweeps = {k: list(v) for k, v in space.values(u).items()}
    sweeps.update({k: [v] * len(u) for k, v in fixed.items()})
    return predictions(sub, specs, sweeps, zipped=True)


def _cost(sub: RefFile, specs: Specs, space: _Space, u: np.ndarray, fixed: dict[str, float]) -> np.ndarray:
    return (_weighted_residuals(sub, _predicted(sub, specs, space, u, fixed)) ** 2).sum(axis=0)


def _grid_cost(sub: RefFile, specs: Specs, space: _Space, grid: np.ndarray, fixed: dict[str, float],
               shared: dict | None) -> np.ndarray:
    """:func:`_cost` of the coarse grid. With ``shared`` (a dict one cross-validation's fits
    pass along, holding ``"rows"``: every row its folds fit, a superset of ``sub``'s), the
    grid's predictions are made once for all the rows, and each fold sums its own rows'
    residuals: a row's prediction does not depend on the other rows evaluated with it, so
    the cost is the one :func:`_cost` computes (the coarse grid was most of a fold's time:
    4^8 points x 48 rows on the H800 file)."""
    if shared is None:
        return _cost(sub, specs, space, grid, fixed)
    every = shared["rows"]
    key = (tuple(p.path for p in space.params), grid.shape, tuple(sorted(fixed.items())))
    if key not in shared:
        shared[key] = _predicted(every, specs, space, grid, fixed)
    at = {r.id: i for i, r in enumerate(every.rows)}
    return (_weighted_residuals(sub, shared[key][[at[r.id] for r in sub.rows]]) ** 2).sum(axis=0)


def minimise(sub: RefFile, specs: Specs, params: list[Param], fixed: dict[str, float] | None = None) -> dict[str, float]:
    """Coarse grid over every parameter, then a pattern search from its best points; the
    ``fixed`` spec values hold throughout."""
    return _search(sub, specs, _Space(params), dict(fixed or {}))[0]


def _search(sub: RefFile, specs: Specs, space: _Space, fixed: dict[str, float],
            shared: dict | None = None) -> tuple[dict[str, float], np.ndarray]:
    """The minimum (values, and its unit coordinates) of :func:`minimise` (``shared``:
    :func:`_grid_cost`)."""
    params = space.params
    d = len(params)
    points = max(3, min(COARSE_POINTS, int(MAX_GRID ** (1 / d) + 1e-9)))
    axis = (np.arange(points) + 0.5) / points
    grid = np.stack(np.meshgrid(*[axis] * d, indexing="ij"), axis=-1).reshape(-1, d)
    cost = _grid_cost(sub, specs, space, grid, fixed, shared)
    order = np.argsort(cost, kind="stable")[:STARTS]
    centers, best = grid[order].copy(), cost[order].copy()
    step = np.full(len(centers), 0.5 / points)
    moves = np.vstack([np.eye(d), -np.eye(d)])
    while (step > MIN_STEP).any():
        cand = np.clip(centers[:, None, :] + step[:, None, None] * moves[None], 0.0, 1.0)
        c = _cost(sub, specs, space, cand.reshape(-1, d), fixed).reshape(len(centers), -1)
        k = np.argmin(c, axis=1)
        better = c[np.arange(len(centers)), k] < best - 1e-12
        centers[better] = cand[np.arange(len(centers)), k][better]
        best[better] = c[np.arange(len(centers)), k][better]
        step = np.where(better | (step <= MIN_STEP), step, step / 2)
    winner = centers[int(np.argmin(best))][None, :]
    return {k: float(v[0]) for k, v in space.values(winner).items()}, winner[0]


PROBE = 0.10  # relative move of each fitted value when checking that the rows identify it
AT_BOUND = 2 * MIN_STEP  # unit coordinates this close to 0 or 1: the value sits at a search bound


@dataclass(frozen=True)
class Check:
    """Whether the rows a fit used pin one of its parameters."""

    path: str
    value: float
    bound: str  # "lower" / "upper" when the value sits at that search bound, else ""
    rise: float  # the objective's rise when the value moves by PROBE (the larger of the two sides)


def checks(sub: RefFile, specs: Specs, space: _Space, u: np.ndarray, fixed: dict[str, float]) -> list[Check]:
    """Each parameter at the fit's minimum ``u``: at a search bound or not, and how much the
    objective rises when the parameter alone moves by -PROBE and +PROBE (in the search's own
    coordinates, clipped to the bounds; one vectorised evaluation of 1 + 2 d points)."""
    d = len(space.params)
    values = {k: float(v[0]) for k, v in space.values(u[None, :]).items()}
    up = np.array([np.log(1 + PROBE) if p.log else PROBE * values[p.path] for p in space.params])
    down = np.array([np.log(1 - PROBE) if p.log else -PROBE * values[p.path] for p in space.params])
    width = space.hi - space.lo
    points = np.vstack([u, u + np.diag(up / width), u + np.diag(down / width)])
    cost = _cost(sub, specs, space, points, fixed)
    rise = np.maximum(cost[1:1 + d], cost[1 + d:]) - cost[0]
    return [Check(p.path, values[p.path],
                  "lower" if u[j] <= AT_BOUND else "upper" if u[j] >= 1 - AT_BOUND else "", float(rise[j]))
            for j, p in enumerate(space.params)]


FLAT = 1e-4  # objective rise (squared tolerance units) below which the rows do not identify a parameter


def identified(c: Check) -> bool:
    """A parameter the rows pin: inside its search range, and the objective rises when it moves."""
    return not c.bound and c.rise >= FLAT


@dataclass(frozen=True)
class FitResult:
    """A fit's values and, for each parameter it searched, whether the rows identify it."""

    values: dict[str, float]  # the searched parameters and the measured ones
    checks: list[Check]  # one per searched parameter
    kept: tuple[str, ...] = ()  # parameters the whole file does not identify: held at their spec values

    @property
    def flagged(self) -> list[Check]:
        """The searched parameters these rows leave at a search bound or unidentified."""
        return [c for c in self.checks if not identified(c)]


def fit_rows(ref: RefFile, exclude_groups=()) -> RefFile:
    """The rows a fit is made to: the evidence rows of ``ref`` outside ``exclude_groups``,
    known misses left out (a row the structure cannot produce would pull every parameter
    toward it: it is predicted and reported, never fitted to)."""
    ev = evidence(ref, exclude_groups)
    return ev.model_copy(update={"rows": [r for r in ev.rows if not r.known_miss]})


def search(ref: RefFile, specs: Specs, exclude_groups=(), kept=(), shared: dict | None = None) -> FitResult:
    """The joint fit of the file's ``fit`` parameters (but ``kept``, which hold their spec
    values) to :func:`fit_rows`, with the check of each parameter, then each ``measured``
    parameter from its one row. Fits of one file that pass the same dict ``shared`` (the
    folds of a cross-validation) evaluate each coarse grid once (:func:`_grid_cost`)."""
    params = [p for p in params_of(ref) if p.path not in set(kept)]
    values, found = {}, []
    if shared is not None:
        shared.setdefault("rows", fit_rows(ref))
    if params:
        space = _Space(params)
        sub = fit_rows(ref, exclude_groups)
        values, u = _search(sub, specs, space, {}, shared)
        found = checks(sub, specs, space, u, {})
    for mea in ref.measured:
        rows = ref.model_copy(update={"rows": [r for r in ref.rows if r.id == mea.row]})
        values.update(minimise(rows, specs, [Param(mea.path, mea.lo, mea.hi, False, mea.meaning)], fixed=values))
    return FitResult(values, found, tuple(kept))


def fit_result(ref: RefFile | None = None, specs: Specs | None = None, shared: dict | None = None) -> FitResult:
    """The file's fit with no value invented: a parameter the whole file leaves unidentified
    or at a search bound keeps its spec value (the published or assumed one; ``--write``
    says so in its source), and the others are fitted again without it (``shared``:
    :func:`search`)."""
    ref = ref or load_reference()
    specs = specs or specs_for(ref)
    result = search(ref, specs, shared=shared)
    while result.flagged:
        result = search(ref, specs, kept=[*result.kept, *(c.path for c in result.flagged)], shared=shared)
    return result


def fit(ref: RefFile | None = None, specs: Specs | None = None) -> dict[str, float]:
    """The fitted values of :func:`fit_result` (the parameters it keeps are left out)."""
    return fit_result(ref, specs).values


def write(values: dict[str, float], specs: Specs, sources: dict[str, str] | None = None, force=()) -> list[str]:
    """Replace the ``value:`` of each fitted field in its spec file, in flow style
    (``name: {value: 1, source: ...}``) or block style (``name:`` then ``value: 1``); a
    field addressed through a mapping (``tiers.ib.bandwidth_Bps``) is found inside its
    parent block. ``sources`` (path -> text) also replaces the field's ``source:`` when it
    does not already say how the value was fitted (a hand-written ``fitted: ...`` stays),
    and always for the paths in ``force`` (a value the fit no longer identifies)."""
    from ..specs.loader import resolve

    files = {"chip": specs.hardware.chip_path, "system": specs.hardware.system_path,
             "model": resolve("model", specs.model.name)}
    if specs.stack_name is not None:  # a stack's host constants (docs/calibration.md#serving-evidence)
        files["stack"] = resolve("stack", specs.stack_name)
    done = []
    for path, v in values.items():
        root, *rest = path.split(".")
        f = Path(files[root])
        text = f.read_text()
        new = _replace_value(text, rest, f"{v:.4g}", (sources or {}).get(path), path in set(force))
        if new is None:
            raise SystemExit(f"calibration: cannot find field {'.'.join(rest)} with a `value:` in {f}")
        from ..report import write_atomic

        write_atomic(f, lambda tmp, new=new: Path(tmp).write_text(new, encoding="utf-8"), "--write", own=True, say=False)
        done.append(f"{f}: {path} = {v:.4g}")
    return done


_SOURCE = re.compile(r'(source:\s*)("(?:[^"\\]|\\.)*"|[^,}\n]+)')


def _with_source(line: str, source: str | None, force: bool = False) -> str:
    """``line`` with its ``source:`` string replaced by ``source``, unless it already
    starts with ``fitted`` or ``measured from row`` (with ``force``: in any case, the
    reading before kept only if it was a published one)."""
    mt = _SOURCE.search(line)
    before = mt.group(2).strip().strip('"') if mt else ""
    calibrated = before.lower().startswith(("fitted", "measured from row"))
    if source is None or mt is None or (calibrated and not force):
        return line
    text = source if calibrated or before.upper().startswith("ASSUMPTION") else \
        f"{source}; the published reading before the fit: {before}"
    quoted = '"' + text.replace('\\', '\\\\').replace('"', '\\"') + '"'
    return line[:mt.start(2)] + quoted + line[mt.end(2):]


def _replace_value(text: str, keys: list[str], value: str, source: str | None = None, force: bool = False) -> str | None:
    """The text with the value (and, if given, the source) of the nested field ``keys``
    replaced, or None."""
    lines = text.splitlines(keepends=True)
    start, indent = 0, -1
    for depth, key in enumerate(keys):
        pat = re.compile(rf"^(\s*){re.escape(key)}:(.*)$")
        for i in range(start, len(lines)):
            mt = pat.match(lines[i].rstrip("\n"))
            if mt and len(mt.group(1)) > indent:
                start, indent = i, len(mt.group(1))
                break
        else:
            return None
    head = lines[start]
    flow = re.compile(r"^(\s*\w+:\s*\{value:\s*)([^,}]+)")
    if flow.match(head):
        lines[start] = _with_source(flow.sub(lambda mt: mt.group(1) + value, head, count=1), source, force)
        return "".join(lines)
    found = False
    for i in range(start + 1, len(lines)):  # block style: the `value:` and `source:` under it
        if lines[i].strip() and len(lines[i]) - len(lines[i].lstrip()) <= indent:
            break
        sub = re.match(r"^(\s*)value:(\s*)(\S+)(.*)$", lines[i].rstrip("\n"))
        if sub and not found:
            lines[i] = f"{sub.group(1)}value:{sub.group(2)}{value}{sub.group(4)}\n"
            found = True
        elif re.match(r"^\s*source:", lines[i]):
            lines[i] = _with_source(lines[i], source, force)
    return "".join(lines) if found else None
