"""Design-space search under a latency SLO (README.md, "Search").

    >>> from cmperf.search import search
    >>> r = search("decode", {"batch": list(range(1, 257)), "microbatches": [1, 2]}, slo_ms=50)
    >>> r.top[["batch", "tpot_ms", "throughput_per_npu"]]

A search is one call of :func:`cmperf.predict.predict` per chunk of the grid: the grid (a
cartesian product of the scenario inputs and of swept spec fields) is cut into a few
order-preserving chunks of ~16K configurations, each evaluated as numpy arrays by the same
code as ``cmperf predict``. Nothing loops over configurations; a single prediction is a grid
of one. The SLO filter, the top-N and the Pareto frontier are array operations on the result.
"""

from __future__ import annotations

import math
from pathlib import Path
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping

import numpy as np
import pandas as pd

from .errors import ConfigError, parse_number, short, short_path  # parse_number: here before, kept importable
from .predict import Specs, inert_fields, load_specs, predict
from .defaults import PHASE_DEFAULTS
from .scenario import check_inputs

SEARCH_PHASES = ("decode", "prefill")
LATENCY = {"decode": "tpot_ms", "prefill": "ttft_ms"}
SLO_FLAG = {"decode": "--tpot-slo", "prefill": "--ttft-slo"}
THROUGHPUT = "throughput_per_npu"
# Columns a search adds to the prediction table (README.md, "Search": the --out CSV).
SEARCH_COLUMNS = ("slo_ms", "meets_slo", "on_pareto", "rank")
# Rows per predict() call. Chunks of 10-30K rows keep the intermediate arrays in cache and run
# ~2.5x faster than one call over 100K rows (benchmarks/search_speed.py).
CHUNK_ROWS = 16384
MAX_CONFIGS = 2_000_000


# --------------------------------------------------------------------------- parsing
def parse_list(text: str | int | float | None, flag: str, integer: bool = False, words: Mapping[str, Any] | None = None,
               allowed: Iterable[float] | None = None) -> list | None:
    """``"8,16,32"``, ``"8:256:8"`` (start:stop:step, stop included; step 1 if omitted) or a mix
    (``"1,2,4:64:4"``) -> a list of numbers. ``words`` maps names (``auto``, ``on``) to values;
    ``allowed``, when given, lists the only numbers that may be typed (``--microbatches``: 1 or
    2; ``auto`` is the word, not the 0 that stands for it inside). An absent flag (None) stays
    absent: None (the system's default applies)."""
    if text is None:
        return None
    words = words or {}
    if not isinstance(text, str):
        return [text]
    out: list = []
    for item in (s.strip() for s in text.split(",")):
        if not item:
            raise ConfigError(f"{flag} {short(text)}: empty item (expected comma-separated values or start:stop:step)")
        if item in words:
            out.append(words[item])
        elif ":" in item:
            out.extend(_parse_range(item, flag, integer))
        else:
            out.append(parse_number(item, flag, integer, words))
        if allowed is not None and item not in words and any(x not in allowed for x in out):
            choices = ", ".join([*map(str, allowed), *words])
            raise ConfigError(f"{flag} {short(item, 40)}: expected {choices}")
    if not integer and all(isinstance(x, float) and x.is_integer() and abs(x) < 2**53 for x in out):
        out = [int(x) for x in out]  # batch 8 stays 8 (not 8.0) in tables and JSON
    return out


def _parse_range(item: str, flag: str, integer: bool) -> list:
    parts = item.split(":")
    if len(parts) not in (2, 3):
        raise ConfigError(f"{flag} {short(item)}: a range is start:stop or start:stop:step (e.g. 8:256:8)")
    start, stop = (parse_number(p, flag, integer) for p in parts[:2])
    step = parse_number(parts[2], flag, integer) if len(parts) == 3 else 1
    if step <= 0:
        raise ConfigError(f"{flag} {short(item)}: the step must be > 0")
    if stop < start:
        raise ConfigError(f"{flag} {short(item)}: stop {short(parts[1], 30)} is below start {short(parts[0], 30)}")
    count = int(math.floor((stop - start) / step + 1e-9)) + 1
    if count > MAX_CONFIGS:
        raise ConfigError(f"{flag} {short(item)}: {count:,} values; at most {MAX_CONFIGS:,} configurations can be searched")
    values = start + step * np.arange(count)
    return [int(v) for v in values] if integer else [float(v) for v in values]


def parse_sweeps(items: Iterable[str]) -> dict[str, list[float]]:
    """``["system.tiers.ub.bandwidth_Bps=100e9,200e9", ...]`` -> {path: [values]} (paths are
    checked against the specs by :func:`check_sweeps`)."""
    out: dict[str, list[float]] = {}
    for item in items:
        key, sep, text = item.partition("=")
        key = key.strip()
        if not sep or not key or not text.strip():
            raise ConfigError(f"--sweep {short(item)}: expected KEY.PATH=V1,V2,... or KEY.PATH=START:STOP:STEP "
                              f"(e.g. system.tiers.ub.bandwidth_Bps=100e9,135e9,200e9)")
        if key.endswith(".value"):  # a sourced pair is addressed by its own path
            key = key[: -len(".value")]
        if key in out:
            raise ConfigError(f"--sweep {short(key)}: given twice (put all its values in one --sweep)")
        values = [float(v) for v in parse_list(text, f"--sweep {short(key)}")]  # spec fields are floats
        out[key] = list(dict.fromkeys(values))
    return out


def set_text(path: str, value: float) -> str:
    """The ``--set`` a swept value stands for, written as a user would type it (24, not 24.0:
    a count field takes whole numbers only)."""
    typed = int(value) if float(value).is_integer() and abs(value) < 2**53 else value
    return f"{path}={typed!r}"


def check_sweeps(sweeps: Mapping[str, list], hardware: str, model: str, sets: Iterable[str] = ()) -> None:
    """Every swept path must be a numeric spec field, and every one of its values must pass the
    spec schema (a whole number of cores, a fraction within (0, 1], ...): apply each as a
    ``--set`` override and let the loader say what is wrong. Each value is checked with the
    other swept fields at their file values; a check that involves the scenario (whole experts
    per die) is made per row by the grid's validation."""
    from .errors import SpecError
    from .specs.loader import load_hardware, load_model, split_overrides

    sets = list(sets)
    fixed = {s.partition("=")[0].strip() for s in sets}
    for path, values in sweeps.items():
        if path in fixed:
            raise ConfigError(f"--sweep {short(path)}: the same field is fixed by --set; give it one or the other")
        if not path.startswith(("chip.", "system.", "model.")):
            raise ConfigError(f"--sweep {short(path)}: the path must start with chip., system. or model. "
                              f"(e.g. system.tiers.ub.bandwidth_Bps=100e9,200e9)")
        for v in sorted(set(values)):
            overrides = split_overrides([*sets, set_text(path, v)])
            try:
                if path.startswith("model."):
                    load_model(model, overrides)
                else:
                    load_hardware(hardware, overrides)
            except SpecError as e:  # the loader names the flag it was given; here it came from --sweep
                raise SpecError(str(e).replace(f"--set {path}", f"--sweep {path}")) from None


# --------------------------------------------------------------------------- grid
def grid_axes(phase: str, values: Mapping[str, Any], sweeps: Mapping[str, list] | None = None) -> list[list[tuple[str, list]]]:
    """The grid as blocks of axes, in :func:`cmperf.scenario.make_grid` order (swept spec
    fields last). Decode with MTP both on and off gets two blocks: the MTP-off block takes
    only the first ``mtp_k`` / ``mtp_acceptance`` (they do not matter there), so that no
    configuration is evaluated twice."""
    defaults = PHASE_DEFAULTS[phase]
    values = check_inputs(phase, values)  # every value of every axis, before any row is evaluated
    axes: dict[str, list] = {}
    for k in defaults:  # an input not given keeps its default (not an axis: predict fills it in)
        v = values.get(k)
        if v is None:
            continue
        v = list(v) if isinstance(v, (list, tuple, np.ndarray, pd.Series)) else [v]
        axes[k] = list(dict.fromkeys(v))  # a repeated value would only repeat rows
    tail = [(k, list(v)) for k, v in (sweeps or {}).items()]
    blocks = [axes]
    if phase == "decode" and 0 in axes.get("mtp", []) and len(axes["mtp"]) > 1:
        on = {**axes, "mtp": [x for x in axes["mtp"] if x != 0]}
        off = {**axes, "mtp": [0], **{k: axes[k][:1] for k in ("mtp_k", "mtp_acceptance") if k in axes}}
        blocks = [on, off]
    return [list(b.items()) + tail for b in blocks]


def grid_size(blocks: list[list[tuple[str, list]]]) -> int:
    return sum(math.prod(len(v) for _, v in axes) for axes in blocks)


def chunks(axes: list[tuple[str, list]], rows: int = CHUNK_ROWS) -> list[list[tuple[str, list]]]:
    """Cut a product of axes into sub-products of about ``rows`` configurations that, evaluated
    in order, give the rows of the whole product in order: split the slowest-varying axis that
    has more than one value, recursing into the next one when a single value is still too big.
    The loop runs over axis values, never over configurations."""
    total = math.prod(len(v) for _, v in axes)
    if total <= rows:
        return [axes]
    i = next(j for j, (_, v) in enumerate(axes) if len(v) > 1)
    key, vals = axes[i]
    per_value = total // len(vals)
    if per_value <= rows:
        step = max(1, rows // per_value)
        return [axes[:i] + [(key, vals[j:j + step])] + axes[i + 1:] for j in range(0, len(vals), step)]
    out = []
    for x in vals:
        out.extend(chunks(axes[:i] + [(key, [x])] + axes[i + 1:], rows))
    return out


# --------------------------------------------------------------------------- evaluation
@dataclass
class Grid:
    """Every configuration of a grid, evaluated: valid rows in ``table``, rejected ones
    counted in ``invalid`` (their inputs and ``reason``)."""

    phase: str
    table: pd.DataFrame
    invalid: pd.DataFrame
    sweeps: dict[str, list] = field(default_factory=dict)


def evaluate(phase: str, values: Mapping[str, Any], specs: Specs | None = None,
             sweeps: Mapping[str, list] | None = None,
             on_chunk: Callable[[int, int], None] | None = None, chunk_rows: int = CHUNK_ROWS) -> Grid:
    """Evaluate the whole grid (a few vectorised predict() calls). ``on_chunk(done, total)``
    is called after each chunk, e.g. to advance a progress bar."""
    if phase not in SEARCH_PHASES:
        raise ConfigError(f"unknown phase '{phase}' for a search (expected one of: {', '.join(SEARCH_PHASES)})")
    specs = specs or load_specs()
    sweeps = {k: list(v) for k, v in (sweeps or {}).items()}
    blocks = grid_axes(phase, values, sweeps)
    total = grid_size(blocks)
    if total > MAX_CONFIGS:
        raise ConfigError(f"the grid has {total:,} configurations; at most {MAX_CONFIGS:,} can be searched "
                          f"(narrow a range or coarsen its step)")
    parts = [c for axes in blocks for c in chunks(axes, chunk_rows)]
    tables, invalids, done = [], [], 0
    for part in parts:
        vals = {k: v for k, v in part if k not in sweeps}
        sw = {k: v for k, v in part if k in sweeps}
        res = _predict(phase, vals, specs, sw)
        if len(res.table):
            tables.append(res.table)
        if len(res.invalid):
            invalids.append(res.invalid)
        done += math.prod(len(v) for _, v in part)
        if on_chunk is not None:
            on_chunk(done, total)
    invalid = pd.concat(invalids, ignore_index=True) if invalids else pd.DataFrame(columns=["reason"])
    if not tables:
        raise ConfigError(f"all {total:,} configurations of the grid are invalid, e.g.: {invalid['reason'].iat[0]}")
    table = tables[0] if len(tables) == 1 else pd.concat(tables, ignore_index=True)
    return Grid(phase, table, invalid, sweeps)


def _predict(phase, values, specs, sweeps):
    try:
        return predict(phase, values, specs, sweeps=sweeps or None, strict=False)
    except (TypeError, ValueError, IndexError) as e:
        if not sweeps:
            raise
        # A structural field (a layer or expert count) cannot be an array over the grid.
        raise ConfigError(f"--sweep {', '.join(sweeps)}: the cost model cannot vary this field across a grid "
                          f"({type(e).__name__}: {e}); run one search per value with --set instead") from None


# --------------------------------------------------------------------------- selection
def pareto_mask(latency: np.ndarray, throughput: np.ndarray) -> np.ndarray:
    """True where no other point is at least as good in both latency and throughput and
    better in one (of identical points, the first). Sort by latency (ties: higher throughput
    first), then keep points whose throughput beats the running maximum of all before them."""
    latency = np.asarray(latency, dtype=float)
    throughput = np.asarray(throughput, dtype=float)
    mask = np.zeros(len(latency), dtype=bool)
    if len(latency) == 0:
        return mask
    order = np.lexsort((-throughput, latency))
    t = throughput[order]
    best_before = np.concatenate([[-np.inf], np.maximum.accumulate(t)[:-1]])
    mask[order[t > best_before]] = True
    return mask


@dataclass
class SearchResult:
    """A search: every configuration (``table``, with meets_slo / on_pareto / rank), the
    best ``top`` meeting the SLO and fitting in memory, and the Pareto ``pareto`` frontier of
    throughput per NPU against latency over the configurations that fit."""

    phase: str
    slo_ms: float
    table: pd.DataFrame
    invalid: pd.DataFrame
    sweeps: dict[str, list]
    top_n: int

    @property
    def latency(self) -> str:
        return LATENCY[self.phase]

    @property
    def top(self) -> pd.DataFrame:
        t = self.table[self.table["rank"].notna()]
        return t.sort_values("rank").reset_index(drop=True)

    @property
    def pareto(self) -> pd.DataFrame:
        t = self.table[self.table["on_pareto"]]
        return t.sort_values(self.latency).reset_index(drop=True)

    @property
    def best(self) -> pd.Series | None:
        top = self.top
        return top.iloc[0] if len(top) else None

    @property
    def featured(self) -> pd.Series:
        """The configuration a report details: the best; if none qualifies, the fastest that
        fits; if none fits, the fastest."""
        if self.best is not None:
            return self.best
        fits = self.table[self.table["fits"]]
        src = fits if len(fits) else self.table
        return src.loc[src[self.latency].idxmin()]

    def summary(self) -> dict[str, Any]:
        fits = self.table["fits"].to_numpy(dtype=bool)
        return {"phase": self.phase, "latency": self.latency, "slo_ms": self.slo_ms,
                "configurations": int(len(self.table) + len(self.invalid)), "evaluated": int(len(self.table)),
                "dropped_invalid": int(len(self.invalid)), "fit_in_memory": int(fits.sum()),
                "meet_slo": int(self.table["meets_slo"].sum()), "pareto_points": int(self.table["on_pareto"].sum()),
                "sweeps": self.sweeps}

    def inert_sweeps(self) -> list[str]:
        """Swept fields that changed no output anywhere (:func:`cmperf.predict.inert_fields`:
        within every group of rows that differ only in that field, every output of predict
        is identical; the cost model does not read the field, or it never limits these
        configurations)."""
        t = self.table
        inputs = [*PHASE_DEFAULTS[self.phase], *self.sweeps]
        outputs = [c for c in t.columns if c not in inputs and c not in SEARCH_COLUMNS and t[c].dtype.kind in "biuf"]
        return inert_fields(t, inputs, [k for k in self.sweeps if k in t.columns], outputs)

    def invalid_examples(self, n: int = 3) -> list[str]:
        return list(dict.fromkeys(self.invalid["reason"].astype(str)))[:n] if len(self.invalid) else []

    def nothing_meets(self) -> str:
        """Why no configuration qualifies, with the closest one (empty when some do)."""
        if self.table["meets_slo"].any():
            return ""
        lat, flag = self.latency, SLO_FLAG[self.phase]
        fits = self.table["fits"].to_numpy(dtype=bool)
        if not fits.any():
            need = self.table["memory_per_die_bytes"].min()
            return (f"none of the {len(self.table):,} configurations fits in memory (the smallest needs "
                    f"{need / 1e9:.1f} GB per die, a die has {self.table['hbm_per_die_bytes'].iat[0] / 1e9:.1f} GB)")
        row = self.featured
        what = f"batch {row['batch']:g}" if self.phase == "decode" else f"{row['tokens_per_npu']:g} tokens per NPU"
        return (f"no configuration meets {flag} {self.slo_ms:g} ms while fitting in memory; the fastest that fits "
                f"has {lat} {row[lat]:.2f} ms ({what}, {row['dies']:g} dies, EP {row['ep']:g})")


def search(phase: str, values: Mapping[str, Any] | None = None, slo_ms: float = 50.0, specs: Specs | None = None,
           sweeps: Mapping[str, list] | None = None, top: int = 10,
           on_chunk: Callable[[int, int], None] | None = None) -> SearchResult:
    """Evaluate the grid and rank it: configurations that fit in memory and meet the SLO
    (TPOT for decode, TTFT for prefill), best ``top`` by throughput per NPU (ties: lower latency,
    then less memory per die)."""
    if not (isinstance(slo_ms, (int, float)) and not math.isnan(slo_ms) and slo_ms > 0):  # inf: no SLO
        raise ConfigError(f"{SLO_FLAG.get(phase, '--slo')} {slo_ms}: the SLO must be a positive number of milliseconds")
    if int(top) != top or top < 1:
        raise ConfigError(f"--top {top}: expected a positive integer")
    from .predict import given_values

    grid = evaluate(phase, given_values(values, "search"), specs, sweeps, on_chunk)
    return rank(grid, slo_ms, int(top))


def rank(grid: Grid, slo_ms: float, top: int) -> SearchResult:
    """Add meets_slo, on_pareto and rank (1..top, empty elsewhere) to an evaluated grid."""
    t = grid.table
    lat = t[LATENCY[grid.phase]].to_numpy(dtype=float)
    thr = t[THROUGHPUT].to_numpy(dtype=float)
    fits = t["fits"].to_numpy(dtype=bool)
    ok = fits & (lat <= slo_ms)
    on_pareto = np.zeros(len(t), dtype=bool)
    on_pareto[fits] = pareto_mask(lat[fits], thr[fits])
    ranks = pd.array(np.full(len(t), pd.NA), dtype="Int64")
    cand = np.flatnonzero(ok)
    mem = t["memory_per_die_bytes"].to_numpy(dtype=float)
    best = cand[np.lexsort((mem[cand], lat[cand], -thr[cand]))][:top]  # ties: faster, then more HBM headroom
    ranks[best] = np.arange(1, len(best) + 1)
    table = t.drop(columns=list(SEARCH_COLUMNS), errors="ignore").assign(
        slo_ms=float(slo_ms), meets_slo=ok, on_pareto=on_pareto, rank=ranks)
    return SearchResult(grid.phase, float(slo_ms), table, grid.invalid, grid.sweeps, top)


def read_results(path: str, slo_ms: float | None = None, top: int | None = None) -> SearchResult:
    """A search saved with ``--out`` (one row per configuration), re-ranked under ``slo_ms``
    (default: the SLO it was searched with) and ``top`` (default: as many as it ranked)."""
    from .report import read_provenance

    if Path(path).exists() and not Path(path).is_file():
        raise ConfigError(f"{short_path(path)}: not a regular file (expected a CSV written by cmperf search --out)")
    try:
        t = pd.read_csv(path, skiprows=read_provenance(path)[1])  # after the '# key: value' lines
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such file (expected a CSV written by cmperf search --out)") from None
    except (OSError, ValueError, pd.errors.ParserError) as e:
        raise ConfigError(f"{path}: cannot read it as CSV ({e})") from None
    need = {"phase", "fits", THROUGHPUT, "slo_ms", "rank"}
    if not need <= set(t.columns) or t.empty:
        missing = ", ".join(sorted(need - set(t.columns))) or "rows"
        raise ConfigError(f"{path}: not a cmperf search result (missing: {missing}); write one with cmperf search ... --out FILE.csv")
    phase = str(t["phase"].iat[0])
    if phase not in SEARCH_PHASES or LATENCY[phase] not in t.columns:
        raise ConfigError(f"{path}: phase '{phase}' is not a searchable phase ({', '.join(SEARCH_PHASES)})")
    t = check_results(t, phase, path)
    slo = float(t["slo_ms"].iat[0]) if slo_ms is None else slo_ms
    if not (not math.isnan(slo) and slo > 0 and (math.isfinite(slo) or slo_ms is None)):  # a file searched without an SLO: inf
        where = "--slo" if slo_ms is not None else f"{short_path(path)}: slo_ms"
        raise ConfigError(f"{where} {short(slo)}: the SLO must be a positive number of milliseconds")
    n = top if top is not None else int(t["rank"].max()) if t["rank"].notna().any() else 10
    if n < 1:
        raise ConfigError(f"--top {n}: expected a positive integer")
    sweeps = {c: sorted(t[c].unique().tolist()) for c in t.columns if c.startswith(("chip.", "system.", "model."))}
    grid = Grid(phase, t.assign(fits=t["fits"].astype(bool)), pd.DataFrame(columns=["reason"]), sweeps)
    return rank(grid, slo, n)


def check_results(t: pd.DataFrame, phase: str, path: str) -> pd.DataFrame:
    """A search CSV's cells checked before they are ranked: one phase; ``fits``/``meets_slo``/
    ``on_pareto`` true or false; latency and SLO positive, throughput and memory non-negative,
    every input and swept spec value a finite number (``attention_share`` may be empty: unset),
    ``rank`` empty or a whole number >= 1; one SLO on every line. The first bad cell is named by line and column."""
    def bad(rows, col, expected):
        i = int(np.flatnonzero(np.asarray(rows))[0])
        raise ConfigError(f"{short_path(path)}: line {i + 2}, column '{short(col, 40)}': expected {expected}, "
                          f"found {short(t[col].iat[i], 40)!r}")

    phases = t["phase"].astype(str)
    if (phases != phase).any():
        bad(phases != phase, "phase", f"'{phase}' on every line (one search per file)")
    for col in ("fits", "meets_slo", "on_pareto"):
        if col in t.columns and t[col].dtype != bool:
            text = t[col].astype(str).str.strip().str.lower()
            if (~text.isin(["true", "false", "1", "0"])).any():
                bad(~text.isin(["true", "false", "1", "0"]), col, "True or False")
            t = t.assign(**{col: text.isin(["true", "1"])})
    slo_text = t["slo_ms"].astype(str).str.strip()
    if (slo_text != slo_text.iat[0]).any():
        bad(slo_text != slo_text.iat[0], "slo_ms", f"line 2's SLO {short(slo_text.iat[0], 20)!r} (one SLO per search)")
    positive = [LATENCY[phase], "slo_ms"]
    non_negative = [THROUGHPUT, "memory_per_die_bytes", "hbm_per_die_bytes"]
    inputs = [c for c in PHASE_DEFAULTS[phase] if c in t.columns and c != "attention_share"]
    swept = [c for c in t.columns if c.startswith(("chip.", "system.", "model."))]
    for col in [c for c in (*positive, *non_negative, *inputs, *swept) if c in t.columns]:
        x = pd.to_numeric(t[col], errors="coerce").to_numpy(dtype=float)
        if col == "expert_imbalance":  # may read 'default' where a default balance was searched
            x = np.where(t[col].astype(str) == "default", 1.0, x)
        low = 0.0 if col in non_negative or col in inputs or col in swept else None
        problem = ~np.isfinite(x) | ((x <= 0) if low is None else (x < low))
        if col == "slo_ms":  # inf: searched without an SLO
            problem = np.isnan(x) | (x <= 0)
        if problem.any():
            bad(problem, col, "a finite number" + (" > 0" if low is None else " >= 0"))
    if "attention_share" in t.columns:
        x = pd.to_numeric(t["attention_share"], errors="coerce").to_numpy(dtype=float)
        if (t["attention_share"].notna() & ~((x > 0) & (x < 1))).any():
            bad(t["attention_share"].notna() & ~((x > 0) & (x < 1)), "attention_share", "empty or a number within (0, 1)")
    r = pd.to_numeric(t["rank"], errors="coerce")
    wrong = (t["rank"].notna() & r.isna()) | (r.notna() & ((r < 1) | (r % 1 != 0)))
    if wrong.any():
        bad(wrong, "rank", "empty or a whole number >= 1")
    return t


def inputs_of(phase: str, row: Mapping[str, Any], sweeps: Iterable[str] = ()) -> tuple[dict, dict]:
    """The scenario inputs and swept spec values of one result row (to re-run it alone)."""
    values = {k: _scalar(row[k]) for k in PHASE_DEFAULTS[phase] if k in row and not _unset(row[k])}
    return values, {k: [float(row[k])] for k in sweeps}


def _unset(x) -> bool:
    """An input left at its 'unset' default reads back as NaN (attention_share): not a value."""
    return isinstance(x, (float, np.floating)) and math.isnan(x)


def _scalar(x):
    return x.item() if isinstance(x, np.generic) else x


def breakdown(result: SearchResult, specs: Specs, row: pd.Series | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Per-operator breakdown of one configuration (default: ``result.featured``), re-evaluated
    as a grid of one."""
    row = result.featured if row is None else row
    values, sweeps = inputs_of(result.phase, row, result.sweeps)
    return predict(result.phase, values, specs, sweeps=sweeps or None).breakdown(0)


from . import callable_module  # noqa: E402  (``from cmperf import search``: cmperf/__init__.py)

callable_module(__name__, "search")
