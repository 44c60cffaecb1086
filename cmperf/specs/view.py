"""Read-only numeric view of validated specs, for the vectorised cost model.

``SpecView(spec, overrides)`` gives attribute access like the pydantic model, but unwraps
sourced values to their number and substitutes a numpy array wherever a dotted path is
swept (``overrides={"die.hbm_bandwidth_Bps": np.array([...])}``). So a formula written once,
``bytes / v.die.hbm_bandwidth_Bps``, evaluates a single point or a whole sweep.
"""

from __future__ import annotations

from typing import Any, Mapping

from pydantic import BaseModel

from .schema import Sourced, SourcedChoice


class SpecView:
    __slots__ = ("_obj", "_over", "_prefix")

    def __init__(self, obj: BaseModel, overrides: Mapping[str, Any] | None = None, _prefix: str = ""):
        self._obj = obj
        self._over = overrides or {}
        self._prefix = _prefix

    def __getattr__(self, name: str) -> Any:
        path = f"{self._prefix}{name}"
        if path in self._over:
            return self._over[path]
        if isinstance(self._obj, dict):
            if name not in self._obj:
                raise AttributeError(name)
            value = self._obj[name]
        else:
            value = getattr(self._obj, name)
        if isinstance(value, (Sourced, SourcedChoice)):
            return value.value
        if isinstance(value, (BaseModel, dict)):
            return SpecView(value, self._over, f"{path}.")
        return value

    def __getitem__(self, name: str) -> Any:
        return self.__getattr__(name)

    def keys(self) -> list[str]:
        """The fields (or, for a mapping such as ``tiers``, the names) in order."""
        return list(self._obj) if isinstance(self._obj, dict) else list(type(self._obj).model_fields)

    @property
    def spec(self) -> BaseModel:
        """The underlying validated spec (sources, names)."""
        return self._obj


class HardwareView:
    """Views of a system and its chip, as the cost model reads them (``hw.chip``, ``hw.system``)."""

    __slots__ = ("system", "chip")

    def __init__(self, system: SpecView, chip: SpecView):
        self.system, self.chip = system, chip
