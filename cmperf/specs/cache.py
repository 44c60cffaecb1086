"""On-disk cache of parsed and validated spec files, so that a cold ``cmperf predict`` neither
parses YAML in pure Python nor imports pydantic to re-check files it has already checked.

Cost it saves: parsing the three shipped spec files with the safe loader takes ~15 ms, and
validating them needs pydantic (~30 ms of imports) and the schema classes (~17 ms to build);
reading a JSON entry takes well under a millisecond. An entry is found by

    key = blake2b(code fingerprint | kind | the file's text), 256 bits

so an edited file (any byte) misses and is parsed and checked again in full, with every limit
of the loader (size, depth, aliases, duplicate keys); the code fingerprint (cmperf's version
and the size and mtime of the loader and schema modules) retires every entry when the rules
that accepted it change. Entries are JSON (never pickle): ``yaml`` holds a file's parsed
mapping, ``chip``/``system``/``model`` the validated spec as plain data (``model_dump``). Only
what round-trips through JSON exactly is stored.

Where: ``$XDG_CACHE_HOME/cmperf`` or ``~/.cache/cmperf``; ``CMPERF_NO_CACHE=1`` turns it off.
A cache that cannot be read or written is skipped without a word: it only ever saves time.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

try:  # the built-in module hashlib wraps: importing hashlib loads OpenSSL first (~2 ms of start-up)
    from _blake2 import blake2b
except ImportError:  # another interpreter
    from hashlib import blake2b

_fingerprint: str | None = None


def cache_dir() -> Path | None:
    """The cache folder, or None when ``CMPERF_NO_CACHE`` is set (to anything but 0)."""
    if os.environ.get("CMPERF_NO_CACHE", "") not in ("", "0"):
        return None
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "cmperf"


def _code() -> str:
    """cmperf's version and the size and mtime of the modules whose rules an entry passed."""
    global _fingerprint
    if _fingerprint is None:
        from .. import __version__

        here = Path(__file__).resolve().parent
        parts = [__version__]
        for name in ("loader.py", "safe_yaml.py", "schema.py", "cache.py"):
            try:
                st = (here / name).stat()
                parts.append(f"{name}:{st.st_size}:{st.st_mtime_ns}")
            except OSError:
                parts.append(f"{name}:?")
        _fingerprint = "|".join(parts)
    return _fingerprint


def _entry(kind: str, text: str) -> Path | None:
    folder = cache_dir()
    if folder is None:
        return None
    digest = blake2b(f"{_code()}|{kind}|".encode() + text.encode("utf-8", "surrogatepass"), digest_size=32).hexdigest()
    return folder / f"{kind}-{digest}.json"


def get(kind: str, text: str) -> Any | None:
    """The entry of ``kind`` for a file's ``text``, or None (none, unreadable, not JSON)."""
    path = _entry(kind, text)
    if path is None:
        return None
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def put(kind: str, text: str, obj: Any) -> None:
    """Store ``obj`` for ``text`` when JSON gives it back exactly (no dates, no non-string
    keys), written whole (a temporary file renamed over the entry) or not at all."""
    path = _entry(kind, text)
    if path is None:
        return
    try:
        data = json.dumps(obj, allow_nan=False)
        if json.loads(data) != obj or _kinds(json.loads(data)) != _kinds(obj):
            return
        path.parent.mkdir(parents=True, exist_ok=True)
    except (OSError, TypeError, ValueError, RecursionError):
        return
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(data)
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
