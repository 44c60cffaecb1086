"""The workload a deployment serves (docs/model.md §9.1): how requests arrive, how long their
prompts and outputs are, how much of each prompt is already cached, and the SLOs.

A length is a distribution summarised by what the planner's formulas need (the simulation
draws from the distribution itself):

    mean            E[L]
    scv             Var[L] / E[L]^2   (squared coefficient of variation; 0 for a fixed length)
    p90             the 90th percentile
    second moment   E[L^2] = E[L]^2 (1 + scv)

It is given as a fixed value (``4096``), as a mean and p90 (``4096:8192``, a log-normal
with that mean and p90), as a named shape (``exp:4096``, exponential: scv 1), as a file of
its CDF or histogram (``cdf:FILE``), or as the samples of a CSV trace
(``prompt_len,output_len[,prefix_hit_tokens][,arrival_s]`` per row; arrival times, seconds,
replayed by the simulation).

Two quantities follow from the lengths:

* tokens a prefill computes per request: the prompt minus its cached prefix, the prefix
  rounded down to whole KV blocks (EMS caches blocks of 128-512 tokens, paper §4.4);
* the KV length a decode step attends, averaged over the time requests spend in the batch.
  A request of prompt P and output O is in the batch for O steps and attends P + j at step
  j, so the time-weighted mean is E[P O + O^2 / 2] / E[O]; with P and O independent,
  E[P] + E[O] (1 + scv_O) / 2 (the paper's fixed lengths give prompt + output / 2).
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import ConfigError, short

Z90 = 1.2815515655446004  # standard normal 90th percentile
MAX_TRACE_ROWS = 1_000_000
MAX_TOKENS = 1e9  # as the scenario inputs (cmperf/scenario.py MAX_INPUT)
MAX_TRACE_BYTES = 64_000_000


@dataclass(frozen=True)
class Lengths:
    """A distribution of token counts (module docstring). ``samples`` when it came from a trace."""

    mean: float
    scv: float
    p90: float
    text: str  # how the user gave it, for reports
    samples: np.ndarray | None = None
    table: tuple | None = None  # (tokens, cumulative share, "cdf" | "hist") of a distribution file

    @property
    def second_moment(self) -> float:
        return self.mean ** 2 * (1.0 + self.scv)


def fixed(value: float, text: str | None = None) -> Lengths:
    return Lengths(mean=float(value), scv=0.0, p90=float(value), text=text or f"{value:g}")


def from_samples(x: np.ndarray, text: str) -> Lengths:
    x = np.asarray(x, dtype=float)
    mean = float(x.mean())
    return Lengths(mean=mean, scv=float(x.var() / mean ** 2), p90=float(np.quantile(x, 0.9)), text=text, samples=x)


def lognormal(mean: float, p90: float, text: str, flag: str) -> Lengths:
    """The log-normal with this mean and p90: ln(p90 / mean) = z90 s - s^2 / 2, the smaller
    root s; it exists while p90 / mean <= exp(z90^2 / 2) = 2.27."""
    if p90 < mean:
        raise ConfigError(f"{flag} {text}: the p90 ({p90:g}) must be at least the mean ({mean:g})")
    c = math.log(p90 / mean)
    disc = Z90 ** 2 - 2.0 * c
    if disc < 0:
        raise ConfigError(f"{flag} {text}: a p90 more than {math.exp(Z90 ** 2 / 2):.2f}x the mean has no log-normal shape; "
                          f"give the distribution as cdf:FILE (tokens,cdf or tokens,share) or a CSV trace")
    s = Z90 - math.sqrt(disc)
    return Lengths(mean=mean, scv=math.expm1(s * s), p90=p90, text=text)


def exponential(mean: float, text: str) -> Lengths:
    return Lengths(mean=mean, scv=1.0, p90=mean * math.log(10.0), text=text)


MAX_TABLE_ROWS = 100_000


def from_table(path: str, flag: str) -> Lengths:
    """A length distribution from a CSV file (``cdf:FILE``): a header ``tokens,cdf`` (an
    empirical CDF: increasing token counts and cumulative shares ending at 1; linear between
    points, the first point's share at its count) or ``tokens,share`` (a histogram: each count
    with its share, normalised). Mean, scv and p90 are the distribution's own: for a CDF the
    pieces are uniform, E[L] = sum dF (a + b) / 2, E[L^2] = sum dF (a^2 + a b + b^2) / 3."""
    p = Path(path)
    where = f"{flag} cdf:{path}"
    if not p.is_file():
        raise ConfigError(f"{where}: no such file (expected a CSV of tokens,cdf or tokens,share)")
    try:
        with open(p, encoding="utf-8-sig", newline="") as f:
            rows = list(csv.reader(f))
    except (UnicodeDecodeError, csv.Error, OSError):
        raise ConfigError(f"{where}: cannot read it as UTF-8 CSV text") from None
    if not rows or [h.strip() for h in rows[0]] not in (["tokens", "cdf"], ["tokens", "share"]):
        raise ConfigError(f"{where}: header must be tokens,cdf or tokens,share")
    kind = "cdf" if rows[0][1].strip() == "cdf" else "hist"
    body = rows[1:]
    if not 1 <= len(body) <= MAX_TABLE_ROWS:
        raise ConfigError(f"{where}: expected 1 to {MAX_TABLE_ROWS:,} rows after the header (found {len(body):,})")
    vals = np.empty((len(body), 2))
    for i, r in enumerate(body):
        try:
            if len(r) != 2 or not all(c.strip().isascii() for c in r):
                raise ValueError
            vals[i] = [float(r[0]), float(r[1])]
        except ValueError:
            raise ConfigError(f"{where}: line {i + 2}: expected two numbers") from None
    x, y = vals[:, 0], vals[:, 1]
    if not (np.isfinite(vals).all() and (x >= 1).all() and (x <= MAX_TOKENS).all() and (y >= 0).all()):
        raise ConfigError(f"{where}: token counts must be 1 to {MAX_TOKENS:g} and shares >= 0, all finite")
    if np.any(np.diff(x) <= 0):
        raise ConfigError(f"{where}: token counts must increase row by row")
    if kind == "cdf":
        if np.any(np.diff(y) < 0) or abs(y[-1] - 1.0) > 1e-6:
            raise ConfigError(f"{where}: the cdf must not decrease and must end at 1 (ends at {y[-1]:g})")
        dF = np.diff(y)
        m1 = y[0] * x[0] + np.sum(dF * (x[:-1] + x[1:]) / 2)
        m2 = y[0] * x[0] ** 2 + np.sum(dF * (x[:-1] ** 2 + x[:-1] * x[1:] + x[1:] ** 2) / 3)
        p90 = float(np.interp(0.9, y, x)) if y[0] < 0.9 else float(x[0])
        F = y
    else:
        if not y.sum() > 0:
            raise ConfigError(f"{where}: the shares sum to 0")
        w = y / y.sum()
        m1, m2 = float(np.sum(w * x)), float(np.sum(w * x * x))
        F = np.cumsum(w)
        p90 = float(x[np.searchsorted(F, 0.9 - 1e-12)])
    return Lengths(mean=float(m1), scv=float(max(m2 / m1 ** 2 - 1.0, 0.0)), p90=p90, text=f"cdf:{p.name}",
                   table=(x, F, kind))


def sample_lengths(x: Lengths, n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` whole token counts >= 1 drawn from a workload length: its samples in turn, its table
    by inverse transform, its fixed value, or its exponential / log-normal of that mean and scv
    (the simulation's requests and the planner's packing of whole prompts draw from it)."""
    if x.samples is not None:
        return np.resize(np.asarray(x.samples, dtype=float), n)
    if x.table is not None:  # a CDF (linear between points) or a histogram (discrete), by inverse transform
        tokens, F, kind = x.table
        u = rng.random(n)
        v = np.interp(u, F, tokens) if kind == "cdf" else tokens[np.minimum(np.searchsorted(F, u), len(tokens) - 1)]
        return np.maximum(np.rint(v), 1.0)
    if x.scv == 0:
        return np.full(n, max(round(x.mean), 1), dtype=float)
    if x.text.startswith("exp:"):
        v = rng.exponential(x.mean, n)
    else:  # log-normal with this mean and scv
        s2 = math.log1p(x.scv)
        v = rng.lognormal(math.log(x.mean) - s2 / 2, math.sqrt(s2), n)
    return np.maximum(np.rint(v), 1.0)


def parse_lengths(text: str, flag: str) -> Lengths:
    """``4096`` | ``MEAN:P90`` | ``exp:MEAN`` | ``cdf:FILE`` (module docstring, :func:`from_table`)."""
    t = str(text).strip()
    if t.startswith("cdf:"):
        return from_table(t[4:], flag)
    shown = t if len(t) <= 40 else t[:37] + "..."

    def number(s: str) -> float:
        try:
            x = float(s) if s.isascii() else float("nan")  # float() reads other scripts' digits ('٣' = 3)
        except ValueError:
            raise ConfigError(f"{flag} {shown}: expected a token count, MEAN:P90 or exp:MEAN") from None
        if not math.isfinite(x) or not 1 <= x <= MAX_TOKENS:
            raise ConfigError(f"{flag} {shown}: token counts must be finite, >= 1 and at most {MAX_TOKENS:g}")
        return x

    if t.startswith("exp:"):
        return exponential(number(t[4:]), t)
    if ":" in t:
        mean, _, p90 = t.partition(":")
        return lognormal(number(mean), number(p90), t, flag)
    return fixed(number(t), t)


SLO_STATS = {"mean": None, "p50": 0.5, "p90": 0.9, "p99": 0.99}  # statistic an SLO bounds -> its quantile (None: the mean)


def stat_quantile(stat: str) -> float | None:
    """The quantile an SLO statistic names (``p50`` -> 0.5), None for the mean."""
    return SLO_STATS[stat]


@dataclass(frozen=True)
class SLO:
    """The service-level objectives and the statistic of the requests' latencies each bounds
    (mean, p50, p90 or p99; docs/model.md §9.3): ``TTFT_stat <= ttft_s`` and ``TPOT_stat <= tpot_s``."""

    ttft_s: float
    tpot_s: float
    ttft_stat: str = "mean"  # a key of SLO_STATS
    tpot_stat: str = "mean"

    def __post_init__(self):
        for name in ("ttft_stat", "tpot_stat"):
            if getattr(self, name) not in SLO_STATS:
                raise ConfigError(f"SLO {name} {str(getattr(self, name))[:40]!r}: expected one of {', '.join(SLO_STATS)}")

    def text(self) -> str:
        """The SLOs in words: 'TTFT p90 <= 2,000 ms, TPOT mean <= 50 ms'."""
        return (f"TTFT {self.ttft_stat} <= {self.ttft_s * 1e3:,.6g} ms, TPOT {self.tpot_stat} <= "
                f"{self.tpot_s * 1e3:,.6g} ms")


@dataclass(frozen=True)
class Workload:
    prompt: Lengths
    output: Lengths
    prefix_hit: float  # share of prompt tokens whose KV is found in the cache pool (0..1)
    slo: SLO
    arrival_rate_per_s: float | None = None  # None: find the largest rate that meets the SLOs
    block_tokens: float = 1.0  # cached prefixes count in whole KV blocks (the planner sets the system's: 128-512, paper §4.4)
    cached_samples: np.ndarray | None = None  # per-request cached tokens, from a trace
    arrival_samples: np.ndarray | None = None  # per-request arrival times (s), from a trace
    hit_concentration: float = 2.0  # a request's hit share ~ Beta(k h, k (1 - h)), k this (inf: every request h); ASSUMPTION
    pool_part: float | None = None  # share of a served prefix read from the pool, its tail (the rest in HBM); None until served (cmperf.cost.pool.served_hit)

    @property
    def cached_tokens(self) -> float:
        """Mean cached prefix per request: the hit share of the prompt in whole blocks."""
        if self.cached_samples is not None:
            return float(np.mean(self.cached_samples))
        return float(math.floor(self.prefix_hit * self.prompt.mean / self.block_tokens) * self.block_tokens)

    @property
    def computed(self) -> Lengths:
        """Prompt tokens a prefill computes per request (prompt minus cached prefix)."""
        if self.prompt.samples is not None:
            cached = self.cached_samples if self.cached_samples is not None else \
                np.floor(self.prefix_hit * self.prompt.samples / self.block_tokens) * self.block_tokens
            return from_samples(np.maximum(self.prompt.samples - cached, 1.0), self.prompt.text)
        new = max(self.prompt.mean - self.cached_tokens, 1.0)
        scale = new / self.prompt.mean  # the cached share scales every length alike
        return Lengths(mean=new, scv=self.prompt.scv, p90=self.prompt.p90 * scale, text=self.prompt.text)

    @property
    def decode_kv_len(self) -> float:
        """Time-weighted mean KV length a decode step attends (module docstring)."""
        if self.prompt.samples is not None and self.output.samples is not None:
            p, o = self.prompt.samples, self.output.samples
            return float(np.sum(p * o + o * o / 2.0) / np.sum(o))
        return self.prompt.mean + self.output.second_moment / (2.0 * self.output.mean)


def read_trace(path: str, with_arrivals: bool = False) -> tuple:
    """A CSV of ``prompt_len,output_len[,prefix_hit_tokens][,arrival_s]`` rows (with
    ``with_arrivals``, the arrival times too: seconds, finite, >= 0, or None) (a header line naming the
    columns is required; a UTF-8 byte-order mark before it is read as none). Read row by row:
    at most MAX_TRACE_ROWS rows are ever held (the count is checked as they come, before
    memory), every cell checked: whole, finite, prompt and output from 1 to MAX_TOKENS,
    0 <= cached < prompt; an error names the file and the line."""
    from array import array

    p = Path(path)
    where = f"--trace {path}"
    if not p.exists():
        raise ConfigError(f"{where}: no such file")
    if not p.is_file():
        raise ConfigError(f"{where}: not a regular file (a directory, FIFO or device); expected a CSV file")
    if p.stat().st_size > MAX_TRACE_BYTES:
        raise ConfigError(f"{where}: {p.stat().st_size:,} bytes; at most {MAX_TRACE_BYTES:,}")
    _count_rows(p, where)
    need = ["prompt_len", "output_len"]
    line = 1
    try:
        with open(p, encoding="utf-8-sig", newline="") as f:
            rows = csv.reader(f)
            first = next(rows, None)
            if first is None:
                raise ConfigError(f"{where}: empty file (expected a header prompt_len,output_len[,prefix_hit_tokens])")
            header = [h.strip() for h in first]
            if header[:2] != need or header[2:] not in ([], ["prefix_hit_tokens"], ["arrival_s"], ["prefix_hit_tokens", "arrival_s"]):
                raise ConfigError(f"{where}: header must be prompt_len,output_len[,prefix_hit_tokens][,arrival_s] "
                                  f"(found {','.join(header)[:80]!r})")
            columns = [array("d") for _ in header]
            for line, r in enumerate(rows, start=2):
                if line - 1 > MAX_TRACE_ROWS:
                    raise ConfigError(f"{where}: more than {MAX_TRACE_ROWS:,} request rows (at most {MAX_TRACE_ROWS:,})")
                if len(r) != len(header):
                    raise ConfigError(f"{where}: line {line} has {len(r)} cells, expected {len(header)}")
                for j, cell in enumerate(r):
                    columns[j].append(_trace_cell(cell, header[j], where, line))
    except (UnicodeDecodeError, csv.Error, OSError) as e:
        what = "not UTF-8 text" if isinstance(e, UnicodeDecodeError) else short(str(getattr(e, "strerror", None) or e), 80)
        raise ConfigError(f"{where}: cannot read line {line + 1} ({what})") from None
    data = np.column_stack([np.frombuffer(c, dtype=float) for c in columns]) if len(columns[0]) else None
    if data is None:
        raise ConfigError(f"{where}: no request rows after the header")
    bad = np.flatnonzero(data[:, 0] + data[:, 1] > MAX_TOKENS)  # the KV a request ends with: its own bound
    if len(bad):
        raise ConfigError(f"{where}: line {bad[0] + 2}, prompt_len + output_len = {data[bad[0], 0] + data[bad[0], 1]:,.0f} "
                          f"tokens of context; at most {MAX_TOKENS:,.0f}")
    col = {h: j for j, h in enumerate(header)}
    if "prefix_hit_tokens" in col:
        bad = np.flatnonzero(data[:, col["prefix_hit_tokens"]] >= data[:, 0])
        if len(bad):
            raise ConfigError(f"{where}: line {bad[0] + 2}, prefix_hit_tokens must be below prompt_len")
    if "arrival_s" in col:
        check_arrivals(data[:, col["arrival_s"]], where, first_line=2)
    name = Path(path).name
    cached = data[:, col["prefix_hit_tokens"]] if "prefix_hit_tokens" in col else None
    out = (from_samples(data[:, 0], name), from_samples(data[:, 1], name), cached)
    if with_arrivals:
        return (*out, data[:, col["arrival_s"]] if "arrival_s" in col else None)
    return out


def check_arrivals(arrivals, where: str, first_line: int | None = None) -> np.ndarray:
    """Arrival times in seconds that a replay can follow: finite, >= 0 and in order (a trace
    whose rows are not sorted by time would be replayed in row order, each request at its
    row's time: the gaps negative). ``first_line``: the file line of the first time (an error
    names the first row out of order by its line; else by its index)."""
    a = np.asarray(arrivals, dtype=float).reshape(-1)
    bad = np.flatnonzero(~np.isfinite(a) | (a < 0))
    if len(bad):
        at = f"line {bad[0] + first_line}" if first_line is not None else f"arrival {bad[0]}"
        raise ConfigError(f"{where}: {at}, arrival_s: expected seconds, finite and >= 0 (found {short(a[bad[0]], 40)})")
    back = np.flatnonzero(np.diff(a) < 0)
    if len(back):
        i = back[0] + 1
        at, before = ((f"line {i + first_line}", f"line {i - 1 + first_line}") if first_line is not None
                      else (f"arrival {i}", f"arrival {i - 1}"))
        fix = "the rows must be in order of arrival: sort the file by arrival_s" if first_line is not None else \
            "the times must be in order of arrival: sort them"
        raise ConfigError(f"{where}: {at}, arrival_s {a[i]:g} is before {before}'s {a[i - 1]:g} ({fix})")
    return a


def _count_rows(p: Path, where: str) -> None:
    """Refuse a trace of more than MAX_TRACE_ROWS rows before parsing any (its lines counted
    1 MB at a time: no more than that is held)."""
    lines = 0
    try:
        with open(p, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                lines += chunk.count(b"\n")
                if lines > MAX_TRACE_ROWS + 1:
                    raise ConfigError(f"{where}: more than {MAX_TRACE_ROWS:,} request rows (at most {MAX_TRACE_ROWS:,})")
    except OSError as e:
        raise ConfigError(f"{where}: cannot read the file ({e.strerror or e})") from None


def _trace_cell(cell: str, column: str, where: str, line: int) -> float:
    """One cell of a trace: a whole number of tokens, >= 1 (>= 0 for prefix_hit_tokens), at most
    MAX_TOKENS; an arrival time: seconds, finite, >= 0."""
    if column == "arrival_s":
        try:
            x = float(cell) if cell.strip().isascii() and "_" not in cell else math.nan
        except ValueError:
            x = math.nan
        if not (math.isfinite(x) and 0 <= x <= 1e9):
            raise ConfigError(f"{where}: line {line}, arrival_s: expected seconds from 0 to 1e9 (found {cell.strip()[:40]!r})")
        return x
    low = 0 if column == "prefix_hit_tokens" else 1
    try:
        x = float(cell) if cell.strip().isascii() and "_" not in cell else math.nan
    except ValueError:
        x = math.nan
    if not math.isfinite(x) or x != math.floor(x) or not low <= x <= MAX_TOKENS:
        raise ConfigError(f"{where}: line {line}, {column}: expected a whole number of tokens from {low} to "
                          f"{MAX_TOKENS:g} (found {cell.strip()[:40]!r})")
    return x
