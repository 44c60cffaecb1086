"""Find, parse and validate spec files; apply ``--set key.path=value`` overrides.

A spec is named either by a built-in name (``ascend-910c``, ``cloudmatrix384``,
``deepseek-r1``) or by a path to a YAML file of the user's own; a model may also be a Hugging
Face ``config.json`` (a path ending in ``.json``, imported by :mod:`.hf_import`). Built-in
specs ship inside the wheel (``cmperf/_data``) and, in a source checkout, are read from the
repository's ``hardware/`` and ``models/`` folders.
"""

from __future__ import annotations

import copy
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Mapping

if TYPE_CHECKING:
    from pydantic import BaseModel

    from .schema import ChipSpec, ModelSpec, SystemSpec

from ..errors import CmperfError, SpecError, short
from . import cache

# PyYAML, pydantic and the schema classes are imported where a file is parsed or validated:
# a prediction from specs already in the cache (:mod:`.cache`) needs none of them.

SPEC_DIRS = {"chip": "hardware", "system": "hardware", "model": "models", "stack": "stacks"}


# Limits of what a spec, reference or set-up file may be (docs/specs.md, "Input checks"): the
# shipped files are below 20 kB, 8 levels deep and 2,000 nodes; these caps are far above them
# and far below what could exhaust memory or the stack.
MAX_FILE_BYTES = 1_000_000
MAX_DEPTH = 32
MAX_NODES = 100_000  # values the aliases of a document add once expanded (a "billion laughs" fails fast)


def builtin_dirs(folder: str) -> list[Path]:
    pkg = Path(__file__).resolve().parent.parent
    return [p for p in (pkg / "_data" / folder, pkg.parent / folder) if p.is_dir()]


def list_builtin(kind: str) -> list[tuple[str, Path]]:
    """Built-in specs of one kind as (name, path), sorted by name."""
    found: dict[str, Path] = {}
    for d in builtin_dirs(SPEC_DIRS[kind]):
        for f in sorted(d.glob("*.yaml")):
            if f.stem not in found and _peek_kind(f) == kind:
                found[f.stem] = f
    return sorted(found.items())


_KIND_LINE = re.compile(r"^kind:[ \t]*([A-Za-z]+)[ \t]*(?:#.*)?$", re.M)


def _peek_kind(path: Path) -> str | None:
    """The ``kind:`` of a built-in spec file: its top-level ``kind: NAME`` line when it has
    one (parsing the whole file only to look at one field doubled the YAML time of a
    prediction's start-up), else the parsed field."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    line = _KIND_LINE.search(text)
    if line is not None:
        return line.group(1)
    try:
        raw = read_yaml(path)
    except CmperfError:
        return None
    return raw.get("kind") if isinstance(raw, dict) else None


def _looks_like_path(text: str) -> bool:
    return any(s in text for s in ("/", "\\")) or text.endswith((".yaml", ".yml")) or Path(text).is_file()


def resolve(kind: str, name_or_path: str | Path, near: Path | None = None) -> Path:
    """The file for a spec name or path; a clear error when there is none."""
    try:
        return _resolve(kind, str(name_or_path), near)
    except OSError as e:  # a name too long for the file system, a loop of links
        raise SpecError(f"{short(str(name_or_path))}: cannot read a {kind} spec there ({e.strerror or e})") from None


def _resolve(kind: str, text: str, near: Path | None) -> Path:
    if _looks_like_path(text) or (kind == "model" and text.endswith(".json")):
        p = Path(text).expanduser()
        if p.is_dir():
            raise SpecError(f"{short(text)}: is a directory, not a {kind} spec file (expected a YAML file)")
        if not p.is_file():
            expected = "a readable YAML file" + (" or Hugging Face config.json" if kind == "model" else "")
            raise SpecError(f"{short(text)}: no such {kind} spec file (expected {expected})")
        return p
    if near is not None and (near / f"{text}.yaml").is_file():
        return near / f"{text}.yaml"
    for d in builtin_dirs(SPEC_DIRS[kind]):
        if (d / f"{text}.yaml").is_file() and _peek_kind(d / f"{text}.yaml") == kind:
            return d / f"{text}.yaml"
    names = ", ".join(n for n, _ in list_builtin(kind)) or "none"
    raise SpecError(f"unknown {kind} spec '{short(text)}' (expected one of: {names}, or a path to a YAML file)")


def hardware_kind(name_or_path: str | Path) -> str:
    """'chip' or 'system' for a built-in hardware name or a hardware YAML path."""
    text = str(name_or_path)
    for kind in ("system", "chip"):
        if text in dict(list_builtin(kind)):
            return kind
    try:
        looks = _looks_like_path(text)
    except OSError as e:
        raise SpecError(f"{short(text)}: cannot read a hardware spec there ({e.strerror or e})") from None
    if not looks:
        names = ", ".join(n for k in ("chip", "system") for n, _ in list_builtin(k))
        raise SpecError(f"unknown hardware spec '{short(text)}' (expected one of: {names}, or a path to a YAML file)")
    path = resolve("system", text)
    kind = read_yaml(path).get("kind")
    if kind not in ("chip", "system"):
        raise SpecError(f"{path}: field 'kind': expected 'chip' or 'system', got {short(kind, 40)!r}")
    return kind


def read_text(path: Path, what: str = "file") -> str:
    """A small UTF-8 text file, whole: a clear error for a directory, a FIFO or device, a file
    above MAX_FILE_BYTES, and any encoding problem (binary, UTF-16, a Latin-1 byte)."""
    path = Path(path)
    if path.is_dir():
        raise SpecError(f"{path}: is a directory (expected a {what})")
    if path.exists() and not path.is_file():
        raise SpecError(f"{path}: not a regular file (expected a {what})")
    try:
        if path.stat().st_size > MAX_FILE_BYTES:
            raise SpecError(f"{path}: {path.stat().st_size:,} bytes; a {what} may have at most {MAX_FILE_BYTES:,}")
        with open(path, "rb") as f:
            data = f.read(MAX_FILE_BYTES + 1)
    except OSError as e:
        raise SpecError(f"{path}: cannot read file ({e.strerror})") from None
    if len(data) > MAX_FILE_BYTES:
        raise SpecError(f"{path}: more than {MAX_FILE_BYTES:,} bytes; a {what} may have at most {MAX_FILE_BYTES:,}")
    if data.startswith((b"\xff\xfe", b"\xfe\xff")) or b"\x00" in data:
        raise SpecError(f"{path}: not UTF-8 text (UTF-16 or binary: it holds NUL bytes); save it as UTF-8")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = data[:e.start].count(b"\n") + 1
        raise SpecError(f"{path}: not UTF-8 text (byte 0x{data[e.start]:02x} at line {line}); save it as UTF-8") from None


def parse_yaml(text: str, loader: Any = None) -> Any:
    """YAML text -> Python objects, with the limits of :class:`.safe_yaml._Loader` (read from
    libyaml's events where PyYAML has libyaml: :class:`.safe_yaml._EventLoader`), or with the
    ``loader`` given. PyYAML's own constructors fail on some misused tags (``!!timestamp x``,
    ``!!bool maybe``) with plain Python exceptions: they become a YAMLError too."""
    import yaml

    from .safe_yaml import _EventLoader

    try:
        return yaml.load(text, Loader=loader or _EventLoader)
    except (ValueError, TypeError, KeyError, AttributeError, OverflowError, IndexError) as e:
        raise yaml.YAMLError(f"a value cannot be read ({type(e).__name__}: {short(str(e), 60)}); check its tag (!!...)") from None


_parsed: dict[tuple, dict] = {}  # (path, mtime, size) -> mapping: a file re-read (a sweep's values) is parsed once


def read_yaml(path: Path) -> dict[str, Any]:
    """A YAML file's top-level mapping (a fresh copy: callers may edit it)."""
    try:
        st = Path(path).stat()
        key = (str(Path(path).resolve()), st.st_mtime_ns, st.st_size)
    except OSError:
        key = None
    if key in _parsed:
        return copy.deepcopy(_parsed[key])
    raw = _read_yaml(path)
    if key is not None and len(_parsed) < 64:
        _parsed[key] = copy.deepcopy(raw)
    return raw


def _read_yaml(path: Path) -> dict[str, Any]:
    """Read, check and parse a YAML file; a file parsed before (same text) comes from the
    on-disk cache (:mod:`.cache`), and a newly parsed one goes into it."""
    text = read_text(path, "YAML file")
    raw = cache.get("yaml", text)
    if isinstance(raw, dict):
        return raw
    import yaml

    try:
        raw = parse_yaml(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        if "maximum nesting depth" in problem:  # libyaml's own cap (1,000 flow levels) met while it scans ahead
            problem = f"nested deeper than {MAX_DEPTH} levels"
        raise SpecError(f"{path}: malformed YAML at {where}{short(problem, 120)}") from None
    except RecursionError:  # a guard: _Loader's depth cap stops nesting first
        raise SpecError(f"{path}: malformed YAML: nested too deep (at most {MAX_DEPTH} levels)") from None
    if not isinstance(raw, dict):
        raise SpecError(f"{path}: expected a mapping of fields at the top level, got {type(raw).__name__}")
    cache.put("yaml", text, raw)
    return raw


# --------------------------------------------------------------------------- overrides
_DECIMAL = re.compile(r"[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?")


def parse_value(text: str, where: str = "--set") -> Any:
    """A --set/--with value as YAML 1.2 reads it: a decimal int or float (1e12 forms too),
    true/false, a string, or a flow list/mapping of them (``[ub, rdma]``); never nan or inf,
    and never YAML 1.1's other numbers (``1:30`` as 90, ``0x10`` as 16, ``1_000``: strings)."""
    t = text.strip()
    if t.isascii() and _DECIMAL.fullmatch(t):  # int() and float() read other scripts' digits ('٣' = 3): ASCII only
        value = int(t) if t.lstrip("+-").isdigit() and len(t) <= 4000 else float(t)
        if isinstance(value, float) and not math.isfinite(value):
            raise SpecError(f"{where}: expected a finite number, got {short(t, 40)}")
        return value
    import yaml

    from .safe_yaml import _ValueLoader

    try:
        return parse_yaml(t, _ValueLoader)
    except yaml.YAMLError as e:
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise SpecError(f"{where}: cannot read the value {short(t, 40)} ({short(problem, 80)})") from None


def apply_override(raw: dict, path: str, value: Any, label: str) -> None:
    """Set ``path`` (dotted, without the spec prefix) in a raw spec mapping, in place.

    A path that ends on a sourced ``{value, source}`` pair sets its value and marks the
    source as an override. A last key the file leaves out (an optional field such as
    ``precision.experts``) is added when the schema has it there: as a sourced pair when the
    schema's field is one, else as the bare value."""
    keys = path.split(".")
    node: Any = raw
    for i, k in enumerate(keys):
        optional = _schema_fields(label, keys[:-1]) if isinstance(node, dict) and k not in node and i == len(keys) - 1 else {}
        if k in optional and not isinstance(value, (dict, list)):
            node[k] = {"value": value, "source": f"--set override of {label}.{path}"} if optional[k] else value
            return
        if not isinstance(node, dict) or k not in node:
            raise no_field(f"--set {label}.{short(path)}", keys, i, node)
        if i == len(keys) - 1:
            if isinstance(node[k], dict) and "value" in node[k]:
                node[k] = {**node[k], "value": value, "source": f"--set override of {label}.{path}"}
            elif isinstance(node[k], dict):
                raise SpecError(f"--set {label}.{short(path)}: '{k}' is a section, not a number (its fields: {', '.join(sorted(node[k]))})")
            else:
                node[k] = value
        node = node[k]


def no_field(flag: str, keys: list[str], i: int, node: Any) -> SpecError:
    """The error of a spec path (``keys``) whose ``i``-th key is not a field of ``node``: what
    the user wrote (``flag``), the section, the nearest field's name and every field there."""
    from ..errors import nearest

    k = keys[i]
    where = ".".join(keys[:i]) or "(top level)"
    fields = _fields_of(node)
    options = ", ".join(sorted(fields)) if fields is not None else "none (not a mapping)"
    hint = nearest(k, fields) if fields else ""
    return SpecError(f"{flag}: no field {short(k, 40)!r} under {short(where)}{hint} (expected one of: {options})")


def _fields_of(node: Any) -> dict | None:
    """The fields of a spec section: a mapping's items, a pydantic model's fields; None for a value."""
    if isinstance(node, dict):
        return node
    if node is None or isinstance(node, (int, float, str, list)):
        return None
    from pydantic import BaseModel

    if isinstance(node, BaseModel):
        return {**{n: getattr(node, n) for n in type(node).model_fields}, **(node.model_extra or {})}
    return None


def check_field(data: Any, path: str, flag: str) -> None:
    """That ``path`` (dotted, without the spec prefix) names one number of a validated spec
    (``data``: its plain data or its pydantic model; a sourced ``{value, source}`` pair or a
    bare value, or an optional field left unset): else the error --set gives, with ``flag``
    (what the user wrote) in front."""
    keys = path.split(".")
    node = data
    for i, k in enumerate(keys):
        fields = _fields_of(node)
        if fields is None or k not in fields:
            raise no_field(flag, keys, i, node)
        node = fields[k]
    fields = _fields_of(node)
    if fields is not None and "value" not in fields:
        raise SpecError(f"{flag}: '{keys[-1]}' is a section, not a number (its fields: {', '.join(sorted(fields))})")
    leaf = fields["value"] if fields is not None else node
    if isinstance(leaf, (str, bool, list, tuple)):
        shown = repr(short(leaf, 40)) if isinstance(leaf, str) else short(leaf, 40)
        raise SpecError(f"{flag}: '{keys[-1]}' is not a number (it is {shown})")


# What a --set of one field carries along (docs/specs.md, "What a --set carries along").
# A die's rates are its units' rates summed: one unit of a die does peak / matrix_units, and a
# what-if that changes how many units a die has keeps what one unit does, so the rates it sums
# scale with the count (a die with one cube core has 1/24 of the 910C die's peaks, not 24
# times the peak per core). A tier's achievable bandwidth is a share of its nominal rate: a
# what-if of a faster link keeps the share, so the nominal rate scales with it (the achievable
# rate above the nominal is an error of the file). Neither applies to a field set as well.
UNIT_RATES = {"die.matrix_units": "die.peak_flops_per_s", "die.vector_units": "die.vector_ops_per_s"}


def carried(kind: str, raw: Any) -> dict[str, str]:
    """Field path -> the path a --set of it carries along, in a raw spec of ``kind``."""
    if kind == "chip":
        return dict(UNIT_RATES)
    tiers = raw.get("tiers") if kind == "system" and isinstance(raw, dict) else None
    return {f"tiers.{t}.bandwidth_Bps": f"tiers.{t}.nominal_Bps" for t in tiers} if isinstance(tiers, dict) else {}


def carried_scale(follower: str, new, old, given: Iterable[str]):
    """The factor the field(s) at ``follower`` take when the field they follow moves from
    ``old`` to ``new`` (scalars or numpy arrays), or None when the follower is ``given`` as
    well (a set or swept path at or under it)."""
    if any(g == follower or g.startswith(follower + ".") for g in given):
        return None
    return new / float(old)


def keep_carried(kind: str, raw: dict, base: dict, overrides: Mapping[str, Any]) -> None:
    """In the raw mapping ``raw`` of a spec of ``kind`` (``base``: before the ``--set``
    ``overrides``), scale the fields a --set carries along (:func:`carried`), in place; each
    scaled value's source says so. A value that is not a positive number is left to
    validation (a count that is not whole too)."""
    for moved, follower in carried(kind, base).items():
        if moved not in overrides:
            continue
        new, old = _raw_value(raw, moved), _raw_value(base, moved)
        if not all(isinstance(x, (int, float)) and not isinstance(x, bool) and x > 0 for x in (new, old)):
            continue
        factor = carried_scale(follower, new, old, overrides)
        if factor is None or factor == 1:
            continue
        node = _raw_node(raw, follower)
        pairs = node.values() if isinstance(node, dict) and "value" not in node else [node]
        for pair in (p for p in pairs if isinstance(p, dict)):
            v = pair.get("value")
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                pair["value"] = v * float(factor)
                pair["source"] = f"scaled x {new:g}/{old:g} with --set {kind}.{moved}; {pair.get('source')}"


def _raw_node(raw: Any, path: str) -> Any:
    node = raw
    for k in path.split("."):
        node = node.get(k) if isinstance(node, dict) else None
    return node


def _raw_value(raw: Any, path: str) -> Any:
    node = _raw_node(raw, path)
    return node.get("value") if isinstance(node, dict) else node


def _schema_fields(kind: str, keys: list[str]) -> dict[str, bool]:
    """The fields the schema of ``kind`` allows under the dotted ``keys`` (through optional
    fields and name-keyed mappings such as ``tiers``), each with whether it is a sourced
    ``{value, source}`` pair; empty when the path leaves the schema."""
    import typing

    from pydantic import BaseModel

    from .schema import SPEC_KINDS

    def targets(tp):  # (model, keyed by free names?) pairs a type annotation may hold
        if isinstance(tp, type) and issubclass(tp, BaseModel):
            return [(tp, False)]
        args = typing.get_args(tp)
        if typing.get_origin(tp) is dict and len(args) == 2:
            return [(m, True) for m, _ in targets(args[1])]
        return [t for a in args for t in targets(a)]

    current = [(SPEC_KINDS[kind], False)] if kind in SPEC_KINDS else []
    for k in keys:
        nxt = []
        for m, keyed in current:
            if keyed:  # a free name of a mapping: its value is the model itself
                nxt.append((m, False))
            elif k in m.model_fields:
                nxt += targets(m.model_fields[k].annotation)
        current = nxt
    fields = {name: f.annotation for m, keyed in current if not keyed for name, f in m.model_fields.items()}
    return {name: any(not keyed and {"value", "source"} <= set(t.model_fields) for t, keyed in targets(tp))
            for name, tp in fields.items()}


# --------------------------------------------------------------------------- validation
def error_message(e: dict) -> str:
    """What one pydantic error (an item of ``ValidationError.errors()``) says, for a user: an
    unknown or missing field in words, else pydantic's message with what was found when it is a
    short scalar."""
    kind = e["type"]
    if kind == "extra_forbidden":
        return "unknown field (not in the schema; check the spelling)"
    if kind == "missing":
        return "required field is missing"
    msg = e["msg"].removeprefix("Value error, ")
    found = e.get("input")
    if isinstance(found, (int, float, str, bool)) and len(repr(found)) <= 40 and kind != "value_error":
        msg += f" (got {found!r})"
    return msg


def _format_validation(path: Path, err,  overrides: Mapping[str, Any] | None = None,
                       label: str = "", extra: list[str] | None = None) -> str:
    """Every problem pydantic found, in one line: where (the file's field, or the --set flag
    that wrote it), what is wrong, and what was found when it is a short scalar."""
    problems = []
    for e in err.errors():
        loc = ".".join(str(x) for x in e["loc"]) or "(top level)"
        key = loc.removesuffix(".value")
        where = f"--set {label}.{key}={short(overrides[key], 40)}" if overrides and key in overrides else f"field '{loc}'"
        kind = e["type"]
        msg = error_message(e)
        if not (kind == "value_error" and loc == "(top level)" and extra):  # the reference checks, said below
            problems.append(f"{where}: {msg}")
    problems += [p for p in extra or [] if p not in " ".join(problems)]
    head = f"{path}: " if not problems or not problems[0].startswith("--set") else ""
    count = f"{len(problems)} problems: " if len(problems) > 1 else ""
    return head + count + "; ".join(problems)


def validate(kind: str, raw: Mapping, path: Path, overrides: Mapping[str, Any] | None = None,
             label: str = "") -> BaseModel:
    from pydantic import ValidationError

    from .schema import SPEC_KINDS, system_reference_problems

    schema = SPEC_KINDS[kind]
    found = raw.get("kind")
    if found != kind:
        raise SpecError(f"{path}: field 'kind': expected '{kind}', got {short(found, 40)!r}")
    try:
        return schema.model_validate(raw)
    except ValidationError as e:
        extra = system_reference_problems(raw) if kind == "system" else []
        message = _format_validation(path, e, overrides, label, extra)
        raise SpecError(message) from None


_warned_json: set[Path] = set()


def read_hf_model(path: Path) -> dict[str, Any]:
    """A model given as a Hugging Face config.json: imported (:mod:`.hf_import`), its unmapped
    fields warned about on stderr once per file and process."""
    import sys

    from .hf_import import import_hf_file

    raw, unmapped = import_hf_file(path)
    if path.resolve() not in _warned_json:
        _warned_json.add(path.resolve())
        for item in unmapped:
            sys.stderr.write(f"cmperf: warning: {path}: unmapped config field {item}\n")
    return raw


def load(kind: str, name_or_path: str | Path, overrides: Mapping[str, Any] | None = None,
         label: str | None = None, near: Path | None = None) -> tuple[BaseModel, Path]:
    path = resolve(kind, name_or_path, near)
    hf = kind == "model" and path.suffix.lower() == ".json"
    raw = read_hf_model(path) if hf else read_yaml(path)
    if not overrides:
        spec = validate(kind, raw, path, overrides, label or kind)
        if not hf:  # the file as it is passed: its plain data, for cached_spec
            _remember(kind, raw, spec)
        return spec, path
    base = copy.deepcopy(raw)
    for key, value in overrides.items():
        apply_override(raw, key, value, label or kind)
    keep_carried(kind, raw, base, overrides)
    try:
        return validate(kind, raw, path, overrides, label or kind), path
    except SpecError as e:
        try:
            validate(kind, base, path)
        except SpecError:
            raise e from None  # the file has problems of its own: named with the file
        # the file alone is valid: the --set flags made it invalid, so they, not the file, are named
        flags = ", ".join(f"--set {label or kind}.{k}={short(v, 40)}" for k, v in overrides.items())
        message = str(e).removeprefix(f"{path}: ")
        raise SpecError(message if message.startswith("--set") else f"{flags}: {message}") from None


def _remember(kind: str, raw: dict, spec: BaseModel) -> None:
    """Cache the validated ``spec`` of a file's parsed mapping ``raw`` as plain data."""
    import json

    try:
        key = json.dumps(raw, allow_nan=False)
    except (TypeError, ValueError, RecursionError):  # a date or a non-string key: not cached
        return
    cache.put(kind, key, spec.model_dump(mode="json"))


def cached_spec(kind: str, name_or_path: str | Path, near: Path | None = None) -> tuple[dict, Path] | None:
    """(plain data, path) of a spec file that passed :func:`validate` before, unchanged, as
    :func:`load` with no overrides found it (``model_dump`` of the spec); None when it has not,
    or when anything is amiss (the caller then loads the file in full and reports any problem).
    Neither PyYAML nor pydantic is imported when both the file and its validation are cached."""
    import json

    if cache.cache_dir() is None:
        return None
    try:
        path = resolve(kind, name_or_path, near)
        if kind == "model" and path.suffix.lower() == ".json":
            return None
        raw = _read_yaml(path)
        plain = cache.get(kind, json.dumps(raw, allow_nan=False))
    except (CmperfError, TypeError, ValueError, RecursionError):
        return None
    return (plain, path) if isinstance(plain, dict) and plain.get("kind") == kind else None


# --------------------------------------------------------------------------- bundles
@dataclass(frozen=True)
class Hardware:
    """A system together with the chip it is built from."""

    system: SystemSpec
    chip: ChipSpec
    system_path: Path
    chip_path: Path


def split_overrides(sets: Iterable[str]) -> dict[str, dict[str, Any]]:
    """``["chip.die.hbm_bandwidth_Bps=3.2e12", ...]`` -> {"chip": {"die.hbm_bandwidth_Bps": 3.2e12}}."""
    out: dict[str, dict[str, Any]] = {"chip": {}, "system": {}, "model": {}, "stack": {}}
    for item in sets:
        if "=" not in item:
            raise SpecError(f"--set {short(item)}: expected KEY.PATH=VALUE, e.g. chip.die.hbm_bandwidth_Bps=3.2e12")
        key, value = item.split("=", 1)
        prefix, _, rest = key.strip().partition(".")
        if prefix not in out or not rest:
            raise SpecError(f"--set {short(item)}: the path must start with chip., system., model. or stack. (e.g. system.tiers.ub.bandwidth_Bps=270e9)")
        out[prefix][rest] = parse_value(value, f"--set {short(key.strip(), 80)}")
    return out


def load_hardware(name_or_path: str | Path = "cloudmatrix384", sets: Mapping[str, Mapping[str, Any]] | None = None) -> Hardware:
    """A system and its chip; every problem of both files in one error."""
    parts, problems = load_hardware_parts(name_or_path, sets)
    if problems:
        raise SpecError(" | ".join(problems))
    return Hardware(*parts)


def load_hardware_parts(name_or_path: str | Path, sets: Mapping[str, Mapping[str, Any]] | None = None):
    """((system, chip, system path, chip path), problems): the chip a broken system file
    names is still read and checked, so that both files' problems can be named together
    (None for what could not be loaded)."""
    sets = sets or {}
    problems: list[str] = []
    system = spath = chip = cpath = None
    try:
        system, spath = load("system", name_or_path, sets.get("system"), "system")
    except CmperfError as e:
        problems.append(str(e))
    try:
        near = spath.parent if spath is not None else _yaml_parent(name_or_path)
        chip_name = system.chip if system is not None else _raw_chip_name(name_or_path)
        if chip_name is not None:
            chip, cpath = load("chip", chip_name, sets.get("chip"), "chip", near=near)
    except CmperfError as e:
        problems.append(str(e))
    return (system, chip, spath, cpath), problems


def _yaml_parent(name_or_path) -> Path | None:
    path = Path(name_or_path)
    return path.parent if path.suffix in (".yaml", ".yml") else None


def _raw_chip_name(name_or_path) -> str | None:
    """The ``chip:`` a system file names, read without validating it (None if unreadable)."""
    try:
        raw = read_yaml(resolve("system", name_or_path))
    except CmperfError:
        return None
    chip = raw.get("chip") if isinstance(raw, dict) else None
    return chip if isinstance(chip, str) else None


def load_model(name_or_path: str | Path = "deepseek-r1", sets: Mapping[str, Mapping[str, Any]] | None = None) -> tuple[ModelSpec, Path]:
    return load("model", name_or_path, (sets or {}).get("model"), "model")


def load_chip(name_or_path: str | Path, sets: Mapping[str, Mapping[str, Any]] | None = None) -> tuple[ChipSpec, Path]:
    return load("chip", name_or_path, (sets or {}).get("chip"), "chip")
