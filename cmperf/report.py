"""Rendering: rich tables for people, JSON and CSV for programs (stdout carries only the
data), and whole-or-nothing file writes.

A table to render is a pandas DataFrame or a list of records (dicts, one per row): the
command line renders predictions from their numpy columns as records, so that printing a
table or JSON never imports pandas; CSV goes through pandas (imported then)."""

from __future__ import annotations

import json
import math
import os
import re
import sys
import tempfile
from contextlib import contextmanager, nullcontext
from contextvars import ContextVar
from pathlib import Path
from typing import Any, Iterable, Mapping

import numpy as np

from .errors import ConfigError, short, short_path

FORMATS = ("table", "json", "csv")

_PREFIX = [(1e18, "E"), (1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")]
_SMALL = [(1e-3, "m"), (1e-6, "µ"), (1e-9, "n"), (1e-12, "p"), (1e-15, "f"), (1e-18, "a")]


def human(value: Any, unit: str = "") -> str:
    """1.6e12, 'B/s' -> '1.6 TB/s'; seconds to ms/us; plain numbers with thousands separators."""
    if isinstance(value, (bool, np.bool_)):
        return "yes" if value else "no"
    if isinstance(value, str) or value is None:
        return "" if value is None else value
    v = float(value)
    if math.isnan(v):
        return "-"
    if math.isinf(v):
        return "∞" if v > 0 else "-∞"
    if unit == "s":
        for scale, u in ((1, "s"), (1e-3, "ms"), (1e-6, "us"), (1e-9, "ns")):
            if abs(v) >= scale or u == "ns":
                return f"{v / scale:.3g} {u}" if v else "0 s"
    if unit in ("B", "B/s", "FLOP/s", "FLOP", "params", "op/s"):
        for scale, p in _PREFIX:
            if abs(v) >= scale:
                return f"{v / scale:.4g} {p}{unit}"
        return f"{v:.4g} {unit}"
    if v.is_integer() and abs(v) < 1e15:
        return f"{int(v):,} {unit}".strip()
    if abs(v) >= 1e15 or (v != 0 and abs(v) < 1e-4):  # an SI prefix, never an exponent
        for scale, p in _PREFIX + _SMALL:
            if abs(v) >= scale:
                return f"{v / scale:.4g} {p}{unit}".strip() if unit else f"{v / scale:.4g}{p}"
    if abs(v) >= 1e4:
        return f"{v:,.0f} {unit}".strip()
    return f"{v:.4g} {unit}".strip()


TIE = 1e-9  # relative difference below which two rates are the same (float round-off of one plan)


def versus(value: float, best: float) -> str:
    """``value`` against ``best`` in words: 'tie' within TIE, else the relative difference."""
    if not (math.isfinite(value) and math.isfinite(best)) or best == 0:
        return "-"
    d = value / best - 1
    return "tie" if abs(d) <= TIE else f"{d:+.1%}"


def _jsonable(x: Any) -> Any:
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if isinstance(x, np.generic):
        x = x.item()
    if isinstance(x, float) and (math.isnan(x) or math.isinf(x)):
        return None
    return x


def json_records(records: list[dict]) -> list[dict]:
    """Rows as JSON shows them: ``microbatches`` 0 (auto: the faster of one and two) reads
    ``"auto"``."""
    return [{**r, "microbatches": "auto"} if r.get("microbatches") == 0 else r for r in records]


def print_json(obj: Any) -> None:
    sys.stdout.write(json.dumps(_jsonable(obj), indent=2) + "\n")


def _frame(table: Any):
    """A DataFrame of a table given as a DataFrame or a list of records."""
    import pandas as pd

    return table if isinstance(table, pd.DataFrame) else pd.DataFrame(table)


def _rows(table: Any) -> tuple[list[str], list[list[Any]]]:
    """(column names, rows) of a DataFrame or a list of records."""
    if isinstance(table, list):
        names = list(dict.fromkeys(k for r in table for k in r))
        return names, [[r.get(c) for c in names] for r in table]
    return [str(c) for c in table.columns], [list(r) for r in table.itertuples(index=False)]


def provenance(command: str, hardware: str | None, model: str | None, sets: Iterable[str] = (),
               sweeps: Iterable[str] = (), **more: Any) -> dict[str, Any]:
    """What a report was made with: the cmperf version, the command, the hardware and model
    (a file path made absolute), every ``--set`` and ``--sweep`` as given, and ``more``."""
    from . import __version__

    def spec(name):
        return str(Path(name).resolve()) if name and Path(name).is_file() else name

    return {"cmperf": __version__, "command": command, "hardware": spec(hardware), "model": spec(model),
            "set": list(sets), "sweep": list(sweeps), **more}


def csv_text(tables: Any, prov: Mapping[str, Any] | None = None) -> str:
    """A CSV report: first the provenance, one ``# key: value`` line each (a ``set`` or
    ``sweep`` line per override), then the table. ``tables`` may map names to several
    tables; each then follows a ``# table: NAME`` line, after a blank line."""
    lines = []
    for k, v in (prov or {}).items():
        for item in (v if isinstance(v, list) else [v]):
            if item is not None:
                lines.append(f"# {k}: {item}\n")
    named = tables if isinstance(tables, Mapping) else {None: tables}
    for i, (name, table) in enumerate(named.items()):
        if name is not None:
            lines.append(f"{chr(10) if i else ''}# table: {name}\n")
        lines.append(_whole_numbers(_frame(table)).to_csv(index=False))
    return "".join(lines)


def _whole_numbers(df):
    """``df`` with each float column whose values are all whole numbers written as integers
    (a count reads ``64``, not ``64.0``; an empty cell stays empty)."""
    out = None
    for c in df.columns:
        col = df[c]
        if col.dtype.kind != "f":
            continue
        x = col.to_numpy(dtype=float)
        ok = x[np.isfinite(x)]
        if len(ok) and np.array_equal(ok, np.round(ok)) and np.all(np.abs(ok) < 2 ** 53) and not np.isinf(x).any():
            out = df.copy() if out is None else out
            out[c] = col.astype("Int64")
    return df if out is None else out


def read_provenance(path: Any) -> tuple[dict[str, Any], int]:
    """The ``# key: value`` lines heading a CSV report (a path or an open text file), with
    ``set`` and ``sweep`` as lists, and how many lines they take (pandas: ``read_csv(path,
    skiprows=n)``)."""
    prov: dict[str, Any] = {"set": [], "sweep": []}
    n = 0
    with (nullcontext(path) if hasattr(path, "readline") else open(path, encoding="utf-8", errors="replace")) as f:
        for line in f:
            if not line.startswith("# ") or line.startswith("# table: "):
                break
            key, _, value = line[2:].rstrip("\n").partition(": ")
            if key in ("set", "sweep"):
                prov[key].append(value)
            else:
                prov[key] = value
            n += 1
    return prov, n


def print_csv(df: Any, prov: Mapping[str, Any] | None = None) -> None:
    sys.stdout.write(csv_text(df, prov))


def print_table(df: Any, title: str | None = None, units: dict[str, str] | None = None) -> None:
    """A rich table of a DataFrame or a list of records; numbers right-aligned and in human units."""
    from rich.console import Console
    from rich.table import Table

    units = units or {}
    names, rows = _rows(df)
    console = Console()
    width = console.width if console.is_terminal else 200
    t = Table(title=title, title_justify="left", header_style="bold")
    # each column at least its header's longest word (a header wraps between words, never inside
    # one) where the table still fits the width so; else rich shares the width as it can
    cells = [[v if isinstance(v, str) else human(v, units.get(c, "")) for c, v in zip(names, r)] for r in rows]
    longest = [max(map(len, str(c).split()), default=1) for c in names]
    widest = [max([longest[j]] + [max(map(len, row[j].split()), default=0) for row in cells]) for j in range(len(names))]
    whole_words = sum(w + 3 for w in widest) + 1 <= width
    for j, c in enumerate(names):
        numeric = all(isinstance(r[j], (int, float, np.number, np.bool_)) for r in rows if r[j] is not None)
        t.add_column(c, justify="right" if numeric and rows else "left", overflow="fold",
                     min_width=longest[j] if whole_words else None)
    for row in cells:
        t.add_row(*row)
    Console(width=width).print(t)


def print_records(records: list[dict], fmt: str, title: str) -> None:
    """Facts (section, quantity, value, unit, note) in the requested format."""
    if fmt == "json":
        print_json(records)
    elif fmt == "csv":
        print_csv(records)
    else:
        shown = [{k: human(r["value"], r["unit"]) if k == "value" else v for k, v in r.items() if k != "unit"}
                 for r in records]
        print_table(shown, title)


def print_frame(df: Any, fmt: str, title: str, out: str | Path | None = None,
                prov: Mapping[str, Any] | None = None) -> None:
    """A result table in the requested format (JSON records, CSV, or a rich table), after
    writing it whole to ``out`` as CSV when given; ``prov`` heads the CSV and sits beside the
    JSON records."""
    if out:
        write_csv(df, out, prov, "--out")
    if fmt == "json":
        records = json_records(_frame(df).to_dict(orient="records"))
        print_json({"rows": records, "provenance": prov} if prov else records)
    elif fmt == "csv":
        print_csv(df, prov)
    else:
        print_table(df, title)


def check_format(fmt: str) -> str:
    if fmt not in FORMATS:
        raise ConfigError(f"--format {fmt}: expected one of {', '.join(FORMATS)}")
    return fmt


def check_parent_dir(path: str | Path, flag: str = "", own: bool = False) -> None:
    """An output file must be writable where it is named, before any work is done: a path (not
    empty), not a directory, not a FIFO or device (a file is written whole by renaming a
    temporary file over it), in a directory that exists and can be written (we never create
    directories), and not a file of the user's (:func:`check_overwrite`; ``own``: the caller
    knows the file is cmperf's to rewrite, an export folder's by its manifest or a built-in spec
    file calibration edits)."""
    label = f"{flag} " if flag else ""
    text = str(path)
    if not text.strip():
        raise ConfigError(f"{label}'{short(text, 20)}': expected the path of a file to write")
    try:
        _check_output(Path(text), text, label)
        if not own:
            check_overwrite(text, flag)
    except OSError as e:  # a name too long, a loop of links: the system's own words
        raise ConfigError(f"{label}{short(text)}: cannot write there ({os_reason(e, text)})") from None


def os_reason(e: OSError, path: str) -> str:
    """Why the system refused ``path``, in its words; a name too long also says how long."""
    import errno

    reason = e.strerror or str(e)
    if e.errno == errno.ENAMETOOLONG:
        longest = max((len(part.encode()) for part in Path(path).parts), default=0)
        reason += f": a name of {longest} bytes" if longest > 255 else f": a path of {len(path.encode())} bytes"
    return reason


# --------------------------------------------------------------------------- whose file it is
# cmperf overwrites a file only if it wrote it (docs/export.md, "Files cmperf writes"): every file
# it writes carries its mark, "written by cmperf VERSION" (a CSV report's first line "# cmperf:
# VERSION" is its mark too), and an export folder's export.json records each file's SHA-256.
# Anything else is the user's: refused unless --force (an empty file holds nothing to lose).
MARK = "written by cmperf"
MARK_PATTERN = re.compile(rb"written by cmperf \d+\.\d+")  # the mark with its version: not prose quoting it
CSV_MARK = re.compile(rb"# cmperf: \d+\.\d+")  # a CSV report's first line, with the version (not a note of the user's)
MARK_LINES = 20  # a text file's mark is in its first lines (YAML, HTML, JSON: 1 or 2; SVG and PostScript metadata: ~12)
MARK_WINDOW = 65536  # a binary file's mark is in its first or last bytes (PDF and Parquet keep theirs at the end)
BINARY_MAGIC = (b"%PDF", b"\x89PNG", b"PAR1", b"GIF8", b"\xff\xd8\xff", b"II*\x00", b"MM\x00*", b"RIFF",
                b"\xc5\xd0\xd3\xc6")  # pdf, png, parquet, gif, jpeg, tiff, webp, binary eps (avif: 'ftyp' at byte 4)
_FORCE: ContextVar[bool] = ContextVar("cmperf_force", default=False)
_SAY: ContextVar[bool] = ContextVar("cmperf_say", default=False)


def mark() -> str:
    """The mark cmperf puts in each file it writes: ``written by cmperf VERSION``."""
    from . import __version__

    return f"{MARK} {__version__}"


@contextmanager
def writing(force: bool = False, say: bool = False):
    """Within: overwrite files cmperf did not write (``force``: the CLI's --force) and say one
    line on stderr per file written (``say``: the CLI). The API, outside, does neither."""
    tokens = _FORCE.set(force), _SAY.set(say)
    try:
        yield
    finally:
        _FORCE.reset(tokens[0])
        _SAY.reset(tokens[1])


def forced() -> bool:
    return _FORCE.get()


def cmperf_wrote(path: str | Path) -> bool:
    """Whether the file at ``path`` is cmperf's to overwrite: empty; a CSV report (its first
    line ``# cmperf: VERSION``); a text file with the mark (:func:`mark`) in its first
    MARK_LINES lines; a binary file (an image, a PDF, a Parquet file) with the mark in its
    first or last MARK_WINDOW bytes. A file that quotes the mark further down (these docs, a
    test) is not cmperf's."""
    try:
        with open(path, "rb") as f:
            head = f.read(MARK_WINDOW)
            f.seek(0, os.SEEK_END)
            size = f.tell()
            tail = b""
            if size > MARK_WINDOW:
                f.seek(max(MARK_WINDOW, size - MARK_WINDOW))
                tail = f.read(MARK_WINDOW)
    except OSError:
        return False
    if size == 0 or CSV_MARK.match(head):
        return True
    if head.startswith(BINARY_MAGIC) or head[4:8] == b"ftyp" or b"\x00" in head:
        return bool(MARK_PATTERN.search(head) or MARK_PATTERN.search(tail))
    return any(MARK_PATTERN.search(line) for line in head.split(b"\n", MARK_LINES)[:MARK_LINES])


def check_overwrite(path: str | Path, flag: str = "") -> None:
    """Refuse to replace an existing file cmperf did not write (unless --force): one line naming
    the flag and the file."""
    p = Path(path)
    if forced() or not p.is_file() or cmperf_wrote(p):
        return
    label = f"{flag} " if flag else ""
    raise ConfigError(f"{label}{short_path(path)}: the file exists and cmperf did not write it (no '{MARK}' "
                      f"mark): not replaced; name another file, or pass --force to overwrite it")


def same_outputs(paths: Mapping[str, Any]) -> None:
    """Two output flags naming one file (``--out a.csv --html a.csv``): one line naming both."""
    seen: dict[str, str] = {}
    for flag, path in paths.items():
        if path is None or not str(path).strip():
            continue
        try:
            key = os.path.realpath(str(path))
            st = os.stat(key) if os.path.isfile(key) else None
        except (OSError, ValueError):
            continue
        if st is not None:  # a hard link is the same file by another name
            key = f"inode {st.st_dev}:{st.st_ino}"
        if key in seen:
            raise ConfigError(f"{seen[key]} and {flag} name the same file ({short_path(path)}): "
                              f"each output needs its own file")
        seen[key] = flag


def say_wrote(path: str | Path, what: str = "") -> None:
    """``cmperf: wrote PATH[: what]`` on stderr, in the CLI (:func:`writing`)."""
    if _SAY.get():
        sys.stderr.write(f"cmperf: wrote {short_path(path)}{': ' + what if what else ''}\n")


def probe_dir(directory: str | Path) -> str | None:
    """None when a file can be made in ``directory`` (made and removed: the permission bits
    do not say so for root, nor on a read-only mount), else why not, in the system's words."""
    import errno

    try:
        fd, tmp = tempfile.mkstemp(prefix=".cmperf-probe.", dir=directory)
    except OSError as e:
        if e.errno == errno.ENOENT and Path(directory).is_dir():  # procfs, sysfs: no new file, whoever asks
            return "the file system takes no new files there"
        return e.strerror or str(e)
    os.close(fd)
    Path(tmp).unlink(missing_ok=True)
    return None


def marked_html(text: str) -> str:
    """An HTML page with cmperf's mark as a comment after its doctype."""
    first, nl, rest = text.partition("\n")
    comment = f"<!-- {mark()} -->"
    if first.lower().startswith("<!doctype"):
        return f"{first}\n{comment}\n{rest}" if nl else f"{first}\n{comment}\n"
    return f"{comment}\n{text}"


def write_parquet(df: Any, path: str | Path) -> None:
    """``df`` to a Parquet file whose schema metadata carries cmperf's mark (in the file's footer)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.Table.from_pandas(df, preserve_index=False)
    table = table.replace_schema_metadata({**(table.schema.metadata or {}), b"cmperf": mark().encode()})
    pq.write_table(table, str(path))


def _check_output(p: Path, text: str, label: str) -> None:
    if text.endswith(("/", os.sep)) or p.is_dir():
        raise ConfigError(f"{label}{short(text)}: is a directory (expected the path of a file to write)")
    if p.exists() and not p.is_file():
        raise ConfigError(f"{label}{short(text)}: not a regular file (a FIFO, socket or device); "
                          f"cmperf writes whole files only")
    parent = p.resolve().parent
    if not parent.is_dir():
        what = "is not a directory" if parent.exists() else "does not exist"
        raise ConfigError(f"{label}{short(text)}: directory {short_path(p.parent)} {what}")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise ConfigError(f"{label}{short(text)}: directory {short_path(parent)} is not writable")
    why = probe_dir(parent)  # the mode bits do not bind root, nor say a mount is read-only
    if why:
        raise ConfigError(f"{label}{short(text)}: cannot write there: directory {short_path(parent)} is not writable ({why})")
    if p.exists() and not os.access(p, os.W_OK):
        raise ConfigError(f"{label}{short(text)}: the file is not writable")


def write_atomic(path: str | Path, write: Any, flag: str = "", own: bool = False, say: bool = True) -> None:
    """Write a file whole or not at all: ``write(tmp_path)`` then rename over ``path``, after
    :func:`check_parent_dir` (an existing file not cmperf's is refused unless --force or
    ``own``); in the CLI, one line on stderr says so (``say``: False where the caller says it in
    its own words). The file gets the mode a plain ``open()`` would give it: an existing file
    keeps its own, a new one 0666 less the umask (mkstemp alone would leave 0600). The one
    writer of every file cmperf writes."""
    check_parent_dir(path, flag, own)
    target = Path(path).resolve() if Path(path).is_symlink() else Path(path)  # write through a link, not over it
    if target.exists():
        mode = target.stat().st_mode & 0o7777
    else:
        umask = os.umask(0)
        os.umask(umask)
        mode = 0o666 & ~umask
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
        os.close(fd)
        write(tmp)
        os.chmod(tmp, mode)
        os.replace(tmp, target)
    except OSError as e:
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)
        raise ConfigError(f"{flag + ' ' if flag else ''}{short_path(path)}: cannot write the file ({e.strerror or e})") from None
    except BaseException:
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)
        raise
    if say:
        say_wrote(path)


def write_csv(df: Any, path: str | Path, prov: Mapping[str, Any] | None = None, flag: str = "") -> None:
    """``csv_text`` of the table(s) to ``path``, whole or not at all (``flag`` names the
    option in an error). Its first line, ``# cmperf: VERSION``, is cmperf's mark (with or
    without the rest of the provenance)."""
    from . import __version__

    text = csv_text(df, {"cmperf": __version__, **(prov or {})})
    write_atomic(path, lambda tmp: Path(tmp).write_text(text, encoding="utf-8"), flag)


def warn(message: str) -> None:
    sys.stderr.write(f"cmperf: warning: {message}\n")


def note_line(message: str) -> None:
    """A choice cmperf made for the user (a derived default, an adapted dtype), on stderr."""
    sys.stderr.write(f"cmperf: note: {message}\n")


def columns_present(df: Any, cols: Iterable[str]) -> list[str]:
    return [c for c in cols if c in df.columns]


def unit_of(name: str) -> str:
    """The unit a field's name carries by the SI-suffix convention (``hbm_bandwidth_Bps`` ->
    ``B/s``, ``latency_s`` -> ``s``, ``peak_flops_per_s.int8`` -> ``FLOP/s``), for human()."""
    n = name.lower()
    if "flops_per_s" in n:
        return "FLOP/s"
    for suffix, unit in (("_bps", "B/s"), ("_bytes", "B"), ("_b", "B"), ("_per_s", "op/s"), ("_s", "s")):
        if n.endswith(suffix):
            return unit
    return ""


def misfit(row, phase: str) -> str:
    """The warning of a configuration that does not fit in HBM: what a die needs and has."""
    B = lambda c: human(row[c], "B")  # noqa: E731
    if phase == "afd":
        side = "attention" if not row["attention_fits"] else "expert"
        return (f"does not fit: an {side} die needs {B(f'{side}_memory_per_die_bytes')} "
                f"(weights {B(f'{side}_weights_per_die_bytes')}) but a die has {B('hbm_per_die_bytes')}")
    return (f"does not fit: needs {B('memory_per_die_bytes')} per die (weights {B('weights_per_die_bytes')}, "
            f"KV {B('kv_cache_per_die_bytes')}, buffers {B('buffers_per_die_bytes')}) but a die has {B('hbm_per_die_bytes')}")
