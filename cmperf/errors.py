"""User-facing errors. The CLI prints ``cmperf: error: <message>`` and exits 2."""

from __future__ import annotations

import math
from typing import Any, Mapping


class CmperfError(Exception):
    """Bad input: a spec file, a flag or a configuration. The message is one clear line
    naming what is wrong, where, and what was expected."""

    exit_code = 2


class SpecError(CmperfError):
    """A spec file cannot be found, parsed or validated."""


class ConfigError(CmperfError):
    """A flag value or parallel configuration is invalid or impossible."""


def short(value, limit: int = 80) -> str:
    """``value`` as an error message may echo it: numpy scalars as plain numbers (``nan``, not
    ``np.float64(nan)``), strings as written, on one line, at most ``limit`` characters."""
    if hasattr(value, "item") and getattr(value, "shape", None) == ():
        value = value.item()  # a numpy scalar
    text = value if isinstance(value, str) else repr(value)
    text = " ".join(text.split()) if any(c.isspace() and c != " " for c in text) else text  # \x1e, \u2028 break lines too
    return text if len(text) <= limit else text[: limit - 1] + "…"


PATH_LIMIT = 1000  # a file's path in a message: whole (the file system bounds it), one line; cut past this


def short_path(path) -> str:
    """A file path as an error message names it: whole unless longer than PATH_LIMIT (a path
    cut to 80 characters no longer names the file)."""
    return short(str(path), PATH_LIMIT)


def parse_number(item: str, flag: str, integer: bool = False, words: Mapping[str, Any] | None = None):
    """One number a user typed (ASCII digits only), finite, whole when ``integer``; else one line naming ``flag``."""
    try:
        if not item.isascii():  # float() reads other scripts' digits ('٣' = 3)
            raise ValueError(item)
        x = float(item)
    except ValueError:
        names = f" or one of: {', '.join(words)}" if words else ""
        raise ConfigError(f"{flag} {short(item)}: expected {'an integer' if integer else 'a number'}{names}") from None
    if not math.isfinite(x):
        raise ConfigError(f"{flag} {short(item)}: expected a finite number")
    if integer:
        if not x.is_integer():
            raise ConfigError(f"{flag} {short(item)}: expected an integer")
        return int(x)
    return x


def whole_number(v, where: str, least: int = 1, most: int | None = None) -> int:
    """``v`` as an int when it is a whole number (an int or a numpy integer; not a bool, not
    a float) from ``least`` to ``most``; else one line naming ``where``, the range and what was
    found. Every count the user gives by value (a deployment file's group, the API's ``npus``)
    is checked here."""
    import numbers

    ok = isinstance(v, numbers.Integral) and not isinstance(v, bool)
    if not ok or v < least or (most is not None and v > most):
        got = (repr(short(v, 40)) if isinstance(v, str) else short(v, 40) if isinstance(v, (numbers.Number, bool)) or v is None
               else f"a {type(v).__name__}")
        upto = f" to {most:,}" if most is not None else " or more"
        raise ConfigError(f"{where}: expected a whole number from {least:,}{upto} (got {got})")
    return int(v)


def nearest(name: str, options) -> str:
    """' (did you mean 'x'?)' for the option closest to a misspelt ``name`` (difflib), or ''."""
    import difflib

    found = difflib.get_close_matches(str(name), [str(o) for o in options], n=1, cutoff=0.6)
    return f" (did you mean {found[0]!r}?)" if found else ""
