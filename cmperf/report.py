"""Rendering: rich tables for people, JSON and CSV for programs (stdout carries only the
data), and whole-or-nothing file writes."""

from __future__ import annotations

import json
import math
import os
import sys
import tempfile
from pathlib import Path
from typing import Any, Iterable

import numpy as np
import pandas as pd

from .errors import ConfigError, short

FORMATS = ("table", "json", "csv")

_PREFIX = [(1e18, "E"), (1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")]


def human(value: Any, unit: str = "") -> str:
    """1.6e12, 'B/s' -> '1.6 TB/s'; seconds to ms/us; plain numbers with thousands separators."""
    if isinstance(value, (bool, np.bool_)):
        return "yes" if value else "no"
    if isinstance(value, str) or value is None:
        return "" if value is None else value
    v = float(value)
    if math.isnan(v):
        return "-"
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
    return f"{v:.4g} {unit}".strip()


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


def print_json(obj: Any) -> None:
    sys.stdout.write(json.dumps(_jsonable(obj), indent=2) + "\n")


def print_csv(df: pd.DataFrame) -> None:
    df.to_csv(sys.stdout, index=False)


def print_table(df: pd.DataFrame, title: str | None = None, units: dict[str, str] | None = None) -> None:
    from rich.console import Console
    from rich.table import Table

    units = units or {}
    t = Table(title=title, title_justify="left", header_style="bold")
    for c in df.columns:
        t.add_column(str(c), justify="right" if pd.api.types.is_numeric_dtype(df[c]) else "left",
                     overflow="fold")
    for _, row in df.iterrows():
        t.add_row(*[human(row[c], units.get(c, "")) if not isinstance(row[c], str) else row[c] for c in df.columns])
    console = Console()
    Console(width=console.width if console.is_terminal else 200).print(t)


def print_records(records: list[dict], fmt: str, title: str) -> None:
    """Facts (section, quantity, value, unit, note) in the requested format."""
    df = pd.DataFrame(records)
    if fmt == "json":
        print_json(records)
    elif fmt == "csv":
        print_csv(df)
    else:
        shown = df.assign(value=[human(v, u) for v, u in zip(df["value"], df["unit"])]).drop(columns="unit")
        print_table(shown, title)


def check_format(fmt: str) -> str:
    if fmt not in FORMATS:
        raise ConfigError(f"--format {fmt}: expected one of {', '.join(FORMATS)}")
    return fmt


def check_parent_dir(path: str | Path, flag: str = "") -> None:
    """An output file must be writable where it is named, before any work is done: a path (not
    empty), not a directory, not a FIFO or device (a file is written whole by renaming a
    temporary file over it), in a directory that exists and can be written (we never create
    directories)."""
    label = f"{flag} " if flag else ""
    text = str(path)
    if not text.strip():
        raise ConfigError(f"{label}'{short(text, 20)}': expected the path of a file to write")
    try:
        _check_output(Path(text), text, label)
    except OSError as e:  # a name too long, a loop of links: the system's own words
        raise ConfigError(f"{label}{short(text)}: cannot write there ({e.strerror or e})") from None


def _check_output(p: Path, text: str, label: str) -> None:
    if text.endswith(("/", os.sep)) or p.is_dir():
        raise ConfigError(f"{label}{short(text)}: is a directory (expected the path of a file to write)")
    if p.exists() and not p.is_file():
        raise ConfigError(f"{label}{short(text)}: not a regular file (a FIFO, socket or device); "
                          f"cmperf writes whole files only")
    parent = p.resolve().parent
    if not parent.is_dir():
        what = "is not a directory" if parent.exists() else "does not exist"
        raise ConfigError(f"{label}{short(text)}: directory {short(str(p.parent))} {what}")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise ConfigError(f"{label}{short(text)}: directory {short(str(parent))} is not writable")
    if p.exists() and not os.access(p, os.W_OK):
        raise ConfigError(f"{label}{short(text)}: the file is not writable")


def write_atomic(path: str | Path, write: Any, flag: str = "") -> None:
    """Write a file whole or not at all: ``write(tmp_path)`` then rename over ``path``. The file
    gets the mode a plain ``open()`` would give it: an existing file keeps its own, a new one
    0666 less the umask (mkstemp alone would leave 0600)."""
    check_parent_dir(path, flag)
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
        raise ConfigError(f"{flag + ' ' if flag else ''}{short(str(path))}: cannot write the file ({e.strerror or e})") from None
    except BaseException:
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)
        raise


def write_csv(df: pd.DataFrame, path: str | Path, flag: str = "") -> None:
    write_atomic(path, lambda tmp: df.to_csv(tmp, index=False), flag)


def warn(message: str) -> None:
    sys.stderr.write(f"cmperf: warning: {message}\n")


def columns_present(df: pd.DataFrame, cols: Iterable[str]) -> list[str]:
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
