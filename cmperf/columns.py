"""A grid as named numpy columns: the table the core of a prediction builds, without pandas.

A prediction is one row per configuration and one column per input or output. The core
(cmperf/predict.py, cmperf/scenario.py) keeps it as :class:`Columns`, equally long 1-D numpy
arrays under their names in order; the Python API turns it into a pandas DataFrame at its
edge (``Columns.to_frame``), and the command line renders it straight from the arrays. So
``cmperf predict`` never imports pandas (0.2 s of a 0.5 s start).

A column is a :class:`Col`, a numpy array that also answers the pandas spellings the
vectorised checks of cmperf/scenario.py use (``col.iat[i]``, ``col.isin(values)``,
``col.isna()``), so one check reads the same on a DataFrame and on Columns. The cartesian
product of input lists (first column slowest, like ``itertools.product``) is
:func:`product`: numpy repeat/tile, the loop runs over columns, not configurations.
"""

from __future__ import annotations

import math
from typing import Any, Iterable, Mapping

import numpy as np


class Col(np.ndarray):
    """A 1-D column: a numpy array with ``.iat[i]``, ``.isin(values)``, ``.isna()``, ``.to_numpy()``."""

    @property
    def iat(self) -> np.ndarray:
        return np.asarray(self)

    def isin(self, values: Iterable[Any]) -> np.ndarray:
        """Whether each value is one of ``values`` (a few: compared one by one, as ``np.isin``
        answers without its sort)."""
        a, values = np.asarray(self), list(values)
        if len(values) > 8:
            return np.isin(a, values)
        out = np.zeros(a.shape, dtype=bool)
        for v in values:
            out |= a == v
        return out

    def to_numpy(self, dtype: Any = None) -> np.ndarray:
        return np.asarray(self, dtype=dtype)

    def isna(self) -> np.ndarray:
        """NaN or None, as pandas counts a missing value."""
        a = np.asarray(self)
        if a.dtype.kind == "f":
            return np.isnan(a)
        if a.dtype == object:
            return np.array([v is None or (isinstance(v, float) and v != v) for v in a], dtype=bool)
        return np.zeros(len(a), dtype=bool)


def infer(values: Iterable[Any]) -> np.ndarray:
    """A column from a list, typed as pandas would: int, float or bool; any text makes it
    an object column (``[1.0, 'default']`` keeps the number a number)."""
    values = list(values)
    try:
        out = np.asarray(values)
    except ValueError:  # cells of several shapes: an object column below
        out = None
    if out is not None and out.dtype.kind in "biuf":  # numbers alone (text makes a text or object array): no look at each
        return out
    if any(isinstance(v, str) for v in values):
        out = np.empty(len(values), dtype=object)
        out[:] = values
        return out
    return np.asarray(values)


class Columns:
    """Equally long named columns in order (a table of one row per configuration)."""

    __slots__ = ("_data", "_n")

    def __init__(self, data: Mapping[str, Any] | None = None, n: int | None = None):
        data = dict(data or {})
        if n is None:
            n = len(next(iter(data.values()))) if data else 0
        self._n = int(n)
        self._data: dict[str, np.ndarray] = {}
        for k, v in data.items():
            self[k] = v

    @classmethod
    def from_records(cls, records: list[Mapping[str, Any]], names: Iterable[str]) -> "Columns":
        names = list(names)
        return cls({k: infer(r.get(k) for r in records) for k in names}, n=len(records))

    @property
    def columns(self) -> list[str]:
        return list(self._data)

    def __len__(self) -> int:
        return self._n

    def __contains__(self, name: object) -> bool:
        return name in self._data

    def __getitem__(self, name: str) -> Col:
        return self._data[name].view(Col)

    def __setitem__(self, name: str, values: Any) -> None:
        """A column of this length, or one value for every row."""
        if isinstance(values, np.ndarray) and values.ndim == 1:
            a = values
        elif isinstance(values, (list, tuple)):
            a = infer(values)
        else:
            a = np.repeat(infer([values.item() if isinstance(values, np.ndarray) else values]), self._n)
        if len(a) != self._n:
            raise ValueError(f"column {name}: {len(a)} values for {self._n} rows")
        self._data[name] = a

    def insert(self, pos: int, name: str, values: Any) -> None:
        self[name] = values
        order = [k for k in self._data if k != name]
        order.insert(pos, name)
        self._data = {k: self._data[k] for k in order}

    @classmethod
    def _made(cls, data: dict, n: int) -> "Columns":
        """Columns of ``data`` as it is (1-D arrays of ``n`` rows each, made by a method here)."""
        out = cls.__new__(cls)
        out._data, out._n = data, n
        return out

    def copy(self) -> "Columns":
        return Columns._made({k: v.copy() for k, v in self._data.items()}, self._n)

    def take(self, index: np.ndarray) -> "Columns":
        """The rows a boolean mask or an integer index selects, in that order."""
        index = np.asarray(index)
        n = int(index.sum()) if index.dtype == bool else len(index)
        return Columns._made({k: v[index] for k, v in self._data.items()}, n)

    def drop(self, names: Iterable[str]) -> "Columns":
        names = set(names)
        return Columns._made({k: v for k, v in self._data.items() if k not in names}, self._n)

    def arrays(self) -> dict[str, np.ndarray]:
        return dict(self._data)

    def records(self) -> list[dict[str, Any]]:
        """One dict of Python values per row (what ``DataFrame.to_dict('records')`` gives)."""
        lists = {k: v.tolist() for k, v in self._data.items()}
        return [{k: lists[k][i] for k in lists} for i in range(self._n)]

    def record(self, i: int) -> dict[str, Any]:
        """Row ``i`` as one dict of Python values (``records()[i]``, without the other rows)."""
        return {k: v[i:i + 1].tolist()[0] for k, v in self._data.items()}

    def to_frame(self):
        """The pandas DataFrame of these columns (the Python API's edge)."""
        import pandas as pd

        return pd.DataFrame(self._data, index=pd.RangeIndex(self._n), columns=self.columns)


def product(cols: Mapping[str, list]) -> Columns:
    """Cartesian product of the value lists (first column slowest, like itertools.product)."""
    n = math.prod(len(v) for v in cols.values())
    if n == 1:  # one configuration: each value its column
        return Columns({k: infer(v) for k, v in cols.items()}, 1)
    data, inner = {}, n
    for k, v in cols.items():
        values = infer(v)
        if n == 0:
            data[k] = values[:0]
            continue
        inner //= len(v)
        data[k] = np.tile(np.repeat(values, inner), n // (inner * len(v)))
    return Columns(data, n)
