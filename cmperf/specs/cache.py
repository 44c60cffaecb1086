"""On-disk cache of parsed and validated spec files, so that a cold ``cmperf predict`` neither
parses YAML in pure Python nor imports pydantic to re-check files it has already checked.

Cost it saves: parsing the three shipped spec files with the safe loader takes ~15 ms, and
validating them needs pydantic (~30 ms of imports) and the schema classes (~17 ms to build);
reading a JSON entry takes well under a millisecond. An entry is found by

    name = blake2b(code fingerprint | kind | the file's text), 256 bits

so an edited file (any byte) misses and is parsed and checked again in full, with every limit
of the loader (size, depth, aliases, duplicate keys); the code fingerprint (cmperf's version,
the Python version and the size and mtime of every module of cmperf/specs/, whose rules
accepted the entry: the loader, the YAML reader, the schema and its dtypes, this module)
retires every entry when those rules change. Entries are JSON (never pickle): ``yaml`` holds a
file's parsed mapping, ``chip``/``system``/``model`` the validated spec as plain data
(``model_dump``). Only what round-trips through JSON exactly is stored.

**An entry cannot change an answer.** Its first line is a checksum of the rest,

    checksum = blake2b(code fingerprint | kind | the file's text | the entry's JSON text)

so an entry edited, truncated, swapped for another file's or left from other code does not
match and is discarded (removed) and rebuilt from the file, without a word; so is one that is
not a regular file (a FIFO, a directory, a device, a link: opened without blocking or
following links), larger than ``MAX_ENTRY_BYTES``, unreadable, or of the wrong shape. The
cache only ever saves time: what it returns is what parsing and validating the file gave.

Where: ``$XDG_CACHE_HOME/cmperf`` or ``~/.cache/cmperf``; ``CMPERF_NO_CACHE=1`` turns it off.
A cache that cannot be read or written is skipped without a word.
"""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path
from typing import Any

try:  # the built-in module hashlib wraps: importing hashlib loads OpenSSL first (~2 ms of start-up)
    from _blake2 import blake2b
except ImportError:  # another interpreter
    from hashlib import blake2b

MAX_ENTRY_BYTES = 4_000_000  # the largest shipped entry is ~40 kB
_fingerprint: str | None = None


def cache_dir() -> Path | None:
    """The cache folder, or None when ``CMPERF_NO_CACHE`` is set (to anything but 0)."""
    if os.environ.get("CMPERF_NO_CACHE", "") not in ("", "0"):
        return None
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "cmperf"


def files_fingerprint(root: Path, paths) -> list[str]:
    """``name:size:mtime`` of each of ``paths`` (relative to ``root``): what changes when a file
    is edited or replaced (``?`` for one that cannot be read)."""
    out = []
    for p in sorted(paths):
        try:
            st = p.stat()
            out.append(f"{p.relative_to(root)}:{st.st_size}:{st.st_mtime_ns}")
        except OSError:
            out.append(f"{p}:?")
    return out


def _code() -> str:
    """cmperf's and Python's versions and the size and mtime of every module of cmperf/specs/."""
    global _fingerprint
    if _fingerprint is None:
        from .. import __version__

        here = Path(__file__).resolve().parent
        try:
            modules = [p for p in here.iterdir() if p.suffix == ".py"]
        except OSError:
            modules = []
        _fingerprint = "|".join([__version__, sys.version.split()[0], *files_fingerprint(here, modules)])
    return _fingerprint


def _hash(*parts: bytes) -> str:
    h = blake2b(digest_size=32)
    for p in parts:
        h.update(p)
    return h.hexdigest()


def _key(kind: str, text: str) -> bytes:
    return f"{_code()}|{kind}|".encode() + text.encode("utf-8", "surrogatepass")


def _entry(kind: str, text: str) -> Path | None:
    folder = cache_dir()
    if folder is None:
        return None
    return folder / f"{kind}-{_hash(_key(kind, text))}.json"


def _read_regular(path: Path) -> bytes | None:
    """The bytes of ``path`` when it is a regular file of at most MAX_ENTRY_BYTES, opened
    without blocking (a FIFO) or following a link; None otherwise."""
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(path, flags)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_ENTRY_BYTES:
            return None
        chunks, size = [], 0
        while True:
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                break
            size += len(chunk)
            if size > MAX_ENTRY_BYTES:
                return None
            chunks.append(chunk)
        return b"".join(chunks)
    except OSError:
        return None
    finally:
        os.close(fd)


def _discard(path: Path) -> None:
    """Remove what stands at an entry's place (a file, a link, a FIFO, an empty folder)."""
    try:
        if path.is_dir() and not path.is_symlink():
            path.rmdir()
        else:
            path.unlink()
    except OSError:
        pass


def get(kind: str, text: str) -> Any | None:
    """The entry of ``kind`` for a file's ``text`` when it is whole and was written for this
    text by this code (its checksum matches), or None; anything else at its place is removed."""
    path = _entry(kind, text)
    if path is None:
        return None
    if not os.path.lexists(path):
        return None
    data = _read_regular(path)
    obj = _verified(kind, text, data) if data is not None else None
    if obj is None:
        _discard(path)
    return obj


def _verified(kind: str, text: str, data: bytes) -> Any | None:
    """The entry's object when its first line is the checksum of the rest, and it is a
    mapping (of the spec kind it stands for); else None."""
    head, sep, body = data.partition(b"\n")
    if not sep or head.decode("ascii", "replace") != _hash(_key(kind, text), b"|", body):
        return None
    try:
        obj = json.loads(body.decode("utf-8"))
    except (ValueError, RecursionError):  # not UTF-8, not JSON, an integer too long to read
        return None
    if not isinstance(obj, dict) or (kind != "yaml" and obj.get("kind") != kind):
        return None
    return obj


def put(kind: str, text: str, obj: Any) -> None:
    """Store ``obj`` for ``text`` when JSON gives it back exactly (no dates, no non-string
    keys), with its checksum, written whole (a temporary file renamed over the entry) or not
    at all."""
    path = _entry(kind, text)
    if path is None:
        return
    try:
        data = json.dumps(obj, allow_nan=False)
        if json.loads(data) != obj or _kinds(json.loads(data)) != _kinds(obj):
            return
        body = data.encode("utf-8")
        path.parent.mkdir(parents=True, exist_ok=True)
    except (OSError, TypeError, ValueError, RecursionError):
        return
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0), 0o644)
        with os.fdopen(fd, "wb") as f:
            f.write(_hash(_key(kind, text), b"|", body).encode("ascii") + b"\n" + body)
        os.replace(tmp, path)
    except OSError:
        try:
            tmp.unlink()
        except OSError:
            pass


def _kinds(obj: Any) -> Any:
    """The types of every leaf (``1 == 1.0 == True`` would let a swap through ``==``)."""
    if isinstance(obj, dict):
        return {k: _kinds(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_kinds(v) for v in obj]
    return type(obj).__name__
