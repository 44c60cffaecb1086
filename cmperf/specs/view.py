"""Read-only numeric view of validated specs, for the vectorised cost model.

``SpecView(spec, overrides)`` gives attribute access like the pydantic model, but unwraps
sourced values to their number and substitutes a numpy array wherever a dotted path is
swept (``overrides={"die.hbm_bandwidth_Bps": np.array([...])}``). So a formula written once,
``bytes / v.die.hbm_bandwidth_Bps``, evaluates a single point or a whole sweep.

The spec may be the pydantic model or the same spec as plain data (its ``model_dump``, as
the spec cache keeps it: :mod:`.cache`); a sourced pair, a record of exactly ``value`` and
``source``, reads as its value in both. Nothing here imports pydantic.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Mapping

SOURCED = frozenset({"value", "source"})


def _fields(obj: Any):
    """The field names of a pydantic model (its class's ``model_fields``), else None."""
    fields = getattr(type(obj), "model_fields", None)
    return fields if isinstance(fields, dict) else None


def _sourced(obj: Any) -> bool:
    """A sourced pair (Sourced, SourcedChoice and their subclasses), as a model or plain data."""
    if isinstance(obj, dict):
        return obj.keys() == SOURCED
    fields = _fields(obj)
    return fields is not None and fields.keys() == SOURCED


class SpecView:
    """A field read once is kept in the view's ``__dict__`` (so that the next read of it is a
    plain attribute lookup, not a call of ``__getattr__``): a view is a snapshot of its spec
    and overrides, made for one evaluation (:meth:`cmperf.predict.Specs.views`)."""

    def __init__(self, obj: Any, overrides: Mapping[str, Any] | None = None, _prefix: str = ""):
        d = self.__dict__
        d["_obj"], d["_over"], d["_prefix"] = obj, overrides or {}, _prefix

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):  # copy/pickle probing a protocol: not a field
            raise AttributeError(name)
        value = self._read(name)
        if not hasattr(SpecView, name):  # a field named like a method is read with [] each time
            self.__dict__[name] = value
        return value

    def _read(self, name: str) -> Any:
        path = f"{self._prefix}{name}"
        if path in self._over:
            for seen in _READS:
                seen.add(path)
            return self._over[path]
        if isinstance(self._obj, dict):
            if name not in self._obj:
                raise AttributeError(name)
            value = self._obj[name]
        else:
            value = getattr(self._obj, name)
        if _sourced(value):
            return value["value"] if isinstance(value, dict) else value.value
        if isinstance(value, dict) or _fields(value) is not None:
            return SpecView(value, self._over, f"{path}.")
        return value

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"a spec view is read-only ({name})")

    def __getitem__(self, name: str) -> Any:
        d = self.__dict__
        return d[name] if name in d and not name.startswith("_") else self.__getattr__(name)

    def keys(self) -> list[str]:
        """The fields (or, for a mapping such as ``tiers``, the names) in order."""
        return list(self._obj) if isinstance(self._obj, dict) else list(type(self._obj).model_fields)

    @property
    def spec(self) -> Any:
        """The underlying spec (a validated model, or its plain data on the cached path)."""
        return self._obj


KEEP = {"on": True}  # off inside :func:`uncached`
_READS: list[set] = []  # the sets :func:`overridden_reads` is filling


@contextmanager
def overridden_reads():
    """Within it, the paths of the overridden (swept) fields any view reads are added to the
    set it yields, as the view names them (relative to its spec: ``efficiency.matmul_compute``
    for ``chip.efficiency.matmul_compute``). A value the cost model never read cannot have
    moved its answer: the fit evaluates a row once per distinct combination of the values it
    reads (cmperf/calibration/validate.py ``_at_points``)."""
    seen: set = set()
    _READS.append(seen)
    try:
        yield seen
    finally:
        _READS.remove(seen)


@contextmanager
def uncached():
    """Within it, nothing derived is kept or reused (:func:`remember`, the stages' constants, the
    fused kernels' runs, the specs' views): the path a first prediction takes, for tests that
    hold a warm call's answer to it."""
    before = KEEP["on"]
    KEEP["on"] = False
    try:
        yield
    finally:
        KEEP["on"] = before


def memo(view) -> dict | None:
    """A dict kept with ``view`` (a SpecView or HardwareView) for what the cost model derives
    from it alone or with numbers of one configuration (a stage's constants, a model's weights per
    die): a view is a read-only snapshot of its specs and overrides, so what it gave once it
    gives again, and a what-if (--set, a sweep) is read through views of its own. None for
    anything else (a validated model passed in directly: nothing is kept)."""
    if isinstance(view, SpecView):
        return view.__dict__.setdefault("_memo", {})
    if isinstance(view, HardwareView):
        return view.memo
    return None


def remember(view, key, build):
    """``build()``, once per ``view`` and ``key`` (:func:`memo`)."""
    if not KEEP["on"]:
        return build()
    kept = view.__dict__.get("_memo") if type(view) is SpecView else None  # a view's, kept before
    if kept is None:
        kept = memo(view)
    if kept is None:
        return build()
    try:
        hit = kept.get(key, kept)
    except TypeError:  # a key holding something unhashable (a validated model, not its view)
        return build()
    if hit is kept:
        if len(kept) >= 65536:  # a long session of distinct configurations: start again
            kept.clear()
        hit = kept[key] = build()
    return hit


class HardwareView:
    """Views of a system and its chip, as the cost model reads them (``hw.chip``, ``hw.system``),
    and of the serving stack that runs on them (``hw.stack``; None: the bare cost model, no
    host time; cmperf/cost/host.py)."""

    __slots__ = ("system", "chip", "stack", "fusion", "memo")

    def __init__(self, system: SpecView, chip: SpecView, stack: SpecView | None = None, fusion=()):
        # fusion: the serving stack's fused kernel groups (cmperf/cost/fusion.py); none: every kernel apart
        self.system, self.chip, self.stack, self.fusion = system, chip, stack, tuple(tuple(g) for g in fusion)
        self.memo: dict = {}  # what the cost model derived from these views (:func:`remember`)

    @property
    def system_npus(self) -> int:
        """NPUs (packages) of the whole system: nodes x chips per node."""
        return int(self.system.nodes) * int(self.system.node.chips)

    @property
    def system_dies(self) -> int:
        """Dies of the whole system: its NPUs x dies per package."""
        return self.system_npus * int(self.chip.dies_per_package)
