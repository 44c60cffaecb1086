"""User-facing errors. The CLI prints ``cmperf: error: <message>`` and exits 2."""

from __future__ import annotations


class CmperfError(Exception):
    """Bad input: a spec file, a flag or a configuration. The message is one clear line
    naming what is wrong, where, and what was expected."""

    exit_code = 2


class SpecError(CmperfError):
    """A spec file cannot be found, parsed or validated."""


class ConfigError(CmperfError):
    """A flag value or parallel configuration is invalid or impossible."""
