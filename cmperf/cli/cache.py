"""Answers a command derives from spec files alone (``hw show``'s NOT USED marks and default
deployments), kept in the spec cache (cmperf/specs/cache.py) so that asking twice costs a file
read, not a re-run of the predictions.

An entry is found by the JSON of everything the answer depends on (the specs as plain data,
the --set values, the question) and by the size and mtime of every module of cmperf: any code
change retires it. ``CMPERF_NO_CACHE=1`` turns it off, as for the spec cache.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

_code: str | None = None


def code_fingerprint() -> str:
    """The size and mtime of every Python module and data file of the cmperf package."""
    global _code
    if _code is None:
        from ..specs.cache import files_fingerprint

        root = Path(__file__).resolve().parent.parent
        files = [p for p in root.rglob("*") if p.suffix in (".py", ".yaml") and "__pycache__" not in p.parts]
        _code = "|".join(files_fingerprint(root, files))
    return _code


def cached(kind: str, key: Any, compute: Callable[[], Any]) -> Any:
    """``compute()``, or what it gave before for the same ``key`` (JSON-able) and code."""
    from ..specs import cache

    try:
        text = json.dumps({"code": code_fingerprint(), "key": key}, sort_keys=True, default=str)
    except (TypeError, ValueError):
        return compute()
    hit = cache.get(kind, text)
    if hit is not None:
        return hit["value"]
    value = compute()
    cache.put(kind, text, {"kind": kind, "value": value})
    return value
