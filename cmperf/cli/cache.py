"""Answers a command derives from spec files alone (``hw show``'s NOT USED marks and default
deployments), kept in the spec cache (cmperf/specs/cache.py) so that asking twice costs a file
read, not a re-run of the predictions.

An entry is found by the JSON of everything the answer depends on (the specs as plain data,
the --set values, the question) and by the size and mtime of every module of cmperf: any code
change retires it. ``CMPERF_NO_CACHE=1`` turns it off, as for the spec cache.
"""

from __future__ import annotations

import dataclasses
import json
import numbers
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
    """``compute()``, or what it gave before for the same ``key`` (JSON-able; or a function that
    makes it, such as one of :func:`plain`, whose TypeError means: computed, not cached) and code."""
    from ..specs import cache

    try:
        text = json.dumps({"code": code_fingerprint(), "key": key() if callable(key) else key}, sort_keys=True, default=str)
    except (TypeError, ValueError):
        return compute()
    hit = cache.get(kind, text)
    if hit is not None:
        return hit["value"]
    value = compute()
    cache.put(kind, text, {"kind": kind, "value": value})
    return value


def specs_key(specs) -> dict:
    """The specs an answer is computed from, as plain data for a key: the system, chip and model
    (the validated files' data as the spec cache gave them, not validated again; else, as
    after --set, their dump) and the serving stack."""
    if specs._plain is not None:
        parts = {k: specs._plain[k] for k in ("system", "chip", "model")}
    else:
        parts = {"system": specs.hardware.system.model_dump(mode="json"), "chip": specs.hardware.chip.model_dump(mode="json"),
                 "model": specs.model.model_dump(mode="json")}
    return {**parts, "stack": specs.stack, "stack_name": specs.stack_name}


def plain(obj: Any) -> Any:
    """``obj`` as JSON data for a key, value for value: a dataclass field by field (with its
    class's name), an array as its dtype and the list of its values, a number as a Python
    number. Anything else is a TypeError (never its str(), which could make two values one key:
    numpy prints a long array with '...')."""
    if obj is None or isinstance(obj, (str, bool)):
        return obj
    if isinstance(obj, numbers.Integral):
        return int(obj)
    if isinstance(obj, numbers.Real):
        return float(obj)
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {"class": type(obj).__name__, **{f.name: plain(getattr(obj, f.name)) for f in dataclasses.fields(obj)}}
    if isinstance(obj, dict):
        if not all(isinstance(k, str) for k in obj):
            raise TypeError("a key's mapping has keys other than strings")
        return {k: plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [plain(v) for v in obj]
    if type(obj).__module__ == "numpy" and type(obj).__name__ == "ndarray":
        return {"dtype": str(obj.dtype), "shape": list(obj.shape), "values": plain(obj.ravel().tolist())}
    raise TypeError(f"no plain form of {type(obj).__name__} for a cache key")
