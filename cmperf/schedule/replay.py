"""Trace and replay of a one-row prediction (docs/model.md §3, "a one-row prediction replayed").

A warm single-row ``predict()`` spends its time in Python around the arithmetic: building ~80
operators with numpy scalars, stacking them into tables, the schedules' and pipelines'
bookkeeping. The arithmetic that depends on the row's numbers is a few thousand float
operations. So the cost model (a phase's schedule and its memory) is run once per *structure*
with **traced** values in place of the row's continuous inputs (batch, lengths, acceptance,
...): each carries its concrete value and records every operation done on it as a line of
Python over floats; what does not depend on them (the specs, the instance's dies, TP, EP, the
microbatch flag, ...) is folded into constants. Every Python-level decision taken on a traced
value (``if np.any(C > 0)``, a ``float()`` of it) is recorded as a **guard**. The lines are
compiled into one function; a later call with the same structure runs it on its own numbers,
and a guard that fails sends the call down the normal path (where it may be traced again).

The formulas stay where they are (cmperf/cost, cmperf/schedule): the trace reads them, it
holds no copy. The replay is the same sequence of IEEE operations the normal one-row path
performs, so it gives the same bits: + - * / and comparisons are exact in both; numpy's
maximum, minimum and where are written out with numpy's NaN rule; ceil and floor keep the
sign of a zero; transcendental functions (log2, power, ...) call the same numpy ufunc (the
``**`` of two numpy scalars, libm's pow, stays Python's ``**``). Python's floats raise where
numpy returns inf or NaN (a division by zero, an overflowing power): such a call falls back to
the normal path. Each trace is checked once against the normal path's answer, to the bit,
before it is kept.

A structure is traced on its third call (questions asked once or twice never pay for a trace), at most
:data:`TRACES` times (guards that keep failing: the normal path), and only where the
answer's kept things are on (not inside ``uncached()``); a trace lives with the spec views it
was made on (a what-if reads views of its own).
"""

from __future__ import annotations

import math
import os
import re
import threading

import numpy as np

from ..cost.roofline import Traced
from ..specs.view import KEEP, memo

TRACES = 4  # traces kept per structure (each a different outcome of its guards)
AFTER = 3  # a structure is traced on this call (those before take the normal path: a trace costs ~50 of them)
INT_LIMIT = 2 ** 31  # a traced integer input beyond it: the normal path (int64 and Python ints agree below it)
# the row's inputs that are traced (continuous); every other input is part of the structure
TRACED = frozenset({"batch", "prompt_len", "output_len", "kv_len", "mtp_acceptance", "expert_imbalance",
                    "chunk_tokens", "attention_share", "tokens_per_npu", "cached_len", "pool_len"})
DEBUG = bool(os.environ.get("CMPERF_REPLAY_DEBUG"))


class Miss(Exception):
    """A guard of a replay failed: the call takes the normal path."""


class Untraceable(Exception):
    """The trace met an operation it does not record."""


_REC: list = [None]  # the active recorder


def _say(*a) -> None:
    if DEBUG:
        import sys
        print("replay:", *a, file=sys.stderr)


# --------------------------------------------------------------------------- recording
class Recorder:
    def __init__(self):
        self.lines: list[str] = []
        self.n = 0
        self.known: dict[str, Tr] = {}  # expression -> its value (an expression is computed once)
        self.guards: set[str] = set()

    def emit(self, expr: str, value) -> "Tr":
        """A traced value computed by ``expr`` (the same expression computed before: its value)."""
        hit = self.known.get(expr)
        if hit is not None:
            return hit
        if expr.isidentifier():  # a value already named
            return Tr(expr, value)
        name = f"v{self.n}"
        self.n += 1
        self.lines.append(f"    {name} = {expr}")
        out = self.known[expr] = Tr(name, value)
        return out

    def guard(self, cond: str) -> None:
        line = f"    if not ({cond}): raise Miss"
        if DEBUG:  # where the decision was taken
            import sys
            f = sys._getframe(1)
            while f is not None and f.f_code.co_filename.endswith("replay.py"):
                f = f.f_back
            where = [] 
            while f is not None and len(where) < 3:
                where.append(f"{f.f_code.co_filename.rsplit('/', 1)[-1]}:{f.f_lineno}")
                f = f.f_back
            line += "  # " + " < ".join(where)
        if line not in self.guards:  # a decision taken again on the same value
            self.guards.add(line)
            self.lines.append(line)


def _rec() -> Recorder:
    r = _REC[0]
    if r is None:
        raise Untraceable("a traced value used outside a trace")
    return r


def _kind(x) -> str:
    if type(x) is Tr:
        return x.v.dtype.kind
    if isinstance(x, (bool, np.bool_)):
        return "b"
    if isinstance(x, (int, np.integer)):
        return "i"
    if isinstance(x, (float, np.floating)):
        return "f"
    raise Untraceable(f"a {type(x).__name__} among traced numbers")


def _lit(x) -> str:
    """Python source of a value: a traced value's name, a constant's literal."""
    if type(x) is Tr:
        return x.name
    if isinstance(x, (bool, np.bool_)):
        return "True" if x else "False"
    if isinstance(x, (int, np.integer)):
        return repr(int(x))
    if isinstance(x, float) or type(x) is np.float64:
        f = float(x)
        if f != f:
            return "NAN"
        if f in (math.inf, -math.inf):
            return "INF" if f > 0 else "(-INF)"
        return repr(f)
    raise Untraceable(f"a constant of type {type(x).__name__}: {x!r}")


def _val(x):
    """The concrete value (a numpy scalar for a traced one)."""
    return x.v if type(x) is Tr else x


def _conv(x, kind: str) -> str:
    """``x``'s source as a value of ``kind`` (numpy's promotion of a where / maximum)."""
    k = _kind(x)
    s = _lit(x)
    if k == kind or (k == "i" and kind == "u"):
        return s
    if kind == "f":
        return f"float({s})" if type(x) is Tr else _lit(float(_val(x)))
    if kind in "iu" and k == "b":
        return f"int({s})" if type(x) is Tr else repr(int(_val(x)))
    raise Untraceable(f"{k} as {kind}")


def _scalar(v):
    """A numpy scalar as the replay holds it (a Python number)."""
    return v.item() if isinstance(v, np.generic) else v


# how each ufunc's element is written (a, b: sources; ka, kb: kinds; r: the concrete result)
def _render(name: str, xs: list, r) -> str:
    s = [_lit(x) for x in xs]
    kinds = [_kind(x) for x in xs]
    rk = np.asarray(r).dtype.kind
    if name in ("add", "multiply") and rk == "b":
        return f"({s[0]} {'or' if name == 'add' else 'and'} {s[1]})"
    if name == "add":
        return f"({s[0]} + {s[1]})"
    if name == "subtract":
        return f"({s[0]} - {s[1]})"
    if name == "multiply":
        return f"({s[0]} * {s[1]})"
    if name in ("divide", "true_divide"):
        if type(xs[1]) is not Tr:
            return f"({s[0]} / {s[1]})" if _val(xs[1]) != 0 else f"_div0({s[0]}, {s[1]})"
        return f"({s[0]} / {s[1]} if {s[1]} else _div0({s[0]}, {s[1]}))"
    if name in ("maximum", "minimum"):
        a, b = _conv(xs[0], rk), _conv(xs[1], rk)
        op = ">=" if name == "maximum" else "<="
        nan = f" or {a} != {a}" if rk == "f" else ""
        return f"({a} if {a} {op} {b}{nan} else {b})"
    cmp = {"greater": ">", "greater_equal": ">=", "less": "<", "less_equal": "<=", "equal": "==", "not_equal": "!="}
    if name in cmp:
        return f"({s[0]} {cmp[name]} {s[1]})"
    if name == "logical_and":
        return f"(bool({s[0]}) and bool({s[1]}))"
    if name == "logical_or":
        return f"(bool({s[0]}) or bool({s[1]}))"
    if name == "logical_not" or (name == "invert" and kinds[0] == "b"):
        return f"(not {s[0]})"
    if name == "isnan":
        return f"({s[0]} != {s[0]})" if kinds[0] == "f" else "False"
    if name == "negative":
        return f"(-{s[0]})"
    if name == "absolute":
        return f"abs({s[0]})"
    if name in ("ceil", "floor") and kinds[0] == "f":
        return f"_{name}({s[0]})"
    return f"_uf[{name!r}]({', '.join(s)})"


def _same_value(name: str, xs: list, r):
    """The operand an operation leaves as it is (x * 1, x / 1, x - 0 of a float x: exact in
    IEEE), else None."""
    if len(xs) != 2 or name not in ("multiply", "divide", "true_divide", "subtract"):
        return None
    a, b = xs
    if name == "multiply" and type(a) is not Tr:
        a, b = b, a
    if type(a) is not Tr or type(b) is Tr or a.v.dtype != np.asarray(r).dtype or isinstance(b, (bool, np.bool_)):
        return None
    unit = 0 if name == "subtract" else 1
    return a if b == unit else None


def _elem(ufunc, xs: list) -> tuple:
    """(source or None for a constant, concrete value) of ``ufunc`` on elements ``xs``."""
    r = ufunc(*[_val(x) for x in xs])
    if not any(type(x) is Tr for x in xs):
        return None, r
    same = _same_value(ufunc.__name__, xs, r)
    if same is not None:
        return same.name, r
    return _render(ufunc.__name__, xs, r), r


def _put(src: str | None, value):
    return value if src is None else _rec().emit(src, value)


# --------------------------------------------------------------------------- traced values
class Tr(Traced):
    """A traced number: its name in the replay's source and its concrete value (a numpy
    scalar). Arithmetic on it records a line; a decision taken on it records a guard."""

    __slots__ = ("name", "v")
    __hash__ = None  # a traced value keys no cache
    __array_priority__ = 100
    ndim, shape, size = 0, (), 1

    def __init__(self, name: str, v):
        self.name, self.v = name, v

    @property
    def dtype(self):
        return self.v.dtype

    # -- decisions: guards
    def __bool__(self) -> bool:
        out = bool(self.v)
        _rec().guard(self.name if out else f"not {self.name}")
        return out

    def _exact(self):
        v = self.v
        _rec().guard(f"{self.name} != {self.name}" if v != v else f"{self.name} == {_lit(v)}")
        return v

    def __float__(self) -> float:
        return float(self._exact())

    def __int__(self) -> int:
        return int(self._exact())

    __index__ = __int__

    def __format__(self, spec: str) -> str:
        return format(self._exact(), spec)

    def __repr__(self) -> str:
        return f"Tr({self.name}={self.v!r})"

    # -- numpy
    def __array_ufunc__(self, ufunc, method, *inputs, **kw):
        return _ufunc(ufunc, method, inputs, kw)

    def __array_function__(self, func, types, args, kwargs):
        return _afunc(func, args, kwargs)

    def item(self):
        return self

    def tolist(self):
        return self

    def astype(self, dtype, *a, **k):
        return _astype(self, np.dtype(dtype))

    def any(self, *a, **k):
        return _astype(self, np.dtype(bool))

    def all(self, *a, **k):
        return _astype(self, np.dtype(bool))

    # -- arithmetic (on numpy scalars: the concrete value is what the normal path computes)
    def _bin(self, other, op, name, swap=False):
        if isinstance(other, np.ndarray):
            return NotImplemented
        if not isinstance(other, (Tr, bool, int, float, np.generic)):
            return NotImplemented
        a, b = (other, self) if swap else (self, other)
        r = op(_val(a), _val(b))
        if name == "power_op":
            return _rec().emit(f"_spow({_lit(a)}, {_lit(b)})", r)
        same = _same_value(name, [a, b], r)
        if same is not None:
            return same
        return _rec().emit(_render(name, [a, b], r), r)

    def __add__(self, o): return self._bin(o, lambda a, b: a + b, "add")
    def __radd__(self, o): return self._bin(o, lambda a, b: a + b, "add", True)
    def __sub__(self, o): return self._bin(o, lambda a, b: a - b, "subtract")
    def __rsub__(self, o): return self._bin(o, lambda a, b: a - b, "subtract", True)
    def __mul__(self, o): return self._bin(o, lambda a, b: a * b, "multiply")
    def __rmul__(self, o): return self._bin(o, lambda a, b: a * b, "multiply", True)
    def __truediv__(self, o): return self._bin(o, lambda a, b: a / b, "divide")
    def __rtruediv__(self, o): return self._bin(o, lambda a, b: a / b, "divide", True)
    def __pow__(self, o): return self._bin(o, lambda a, b: a ** b, "power_op")
    def __rpow__(self, o): return self._bin(o, lambda a, b: a ** b, "power_op", True)
    def __lt__(self, o): return self._bin(o, lambda a, b: a < b, "less")
    def __le__(self, o): return self._bin(o, lambda a, b: a <= b, "less_equal")
    def __gt__(self, o): return self._bin(o, lambda a, b: a > b, "greater")
    def __ge__(self, o): return self._bin(o, lambda a, b: a >= b, "greater_equal")
    def __eq__(self, o): return self._bin(o, lambda a, b: a == b, "equal")
    def __ne__(self, o): return self._bin(o, lambda a, b: a != b, "not_equal")
    def __and__(self, o): return self._bin(o, lambda a, b: a & b, "logical_and")
    def __rand__(self, o): return self._bin(o, lambda a, b: a & b, "logical_and", True)
    def __or__(self, o): return self._bin(o, lambda a, b: a | b, "logical_or")
    def __ror__(self, o): return self._bin(o, lambda a, b: a | b, "logical_or", True)

    def __floordiv__(self, o): return _ufunc(np.floor_divide, "__call__", (self, o), {})
    def __rfloordiv__(self, o): return _ufunc(np.floor_divide, "__call__", (o, self), {})
    def __mod__(self, o): return _ufunc(np.remainder, "__call__", (self, o), {})
    def __rmod__(self, o): return _ufunc(np.remainder, "__call__", (o, self), {})

    def __neg__(self):
        return _rec().emit(f"(-{self.name})", -self.v)

    def __pos__(self):
        return self

    def __abs__(self):
        return _rec().emit(f"abs({self.name})", abs(self.v))

    def __invert__(self):
        if self.v.dtype.kind != "b":
            raise Untraceable("~ of a number")
        return _rec().emit(f"(not {self.name})", ~self.v)


class TArr(np.ndarray):
    """An object array holding traced values (and constants): numpy's functions on it record
    each element's operation (:func:`_ufunc`, :func:`_afunc`)."""

    def __array_ufunc__(self, ufunc, method, *inputs, **kw):
        return _ufunc(ufunc, method, inputs, kw)

    def __array_function__(self, func, types, args, kwargs):
        return _afunc(func, args, kwargs)

    def astype(self, dtype, *a, **k):
        return _astype(self, np.dtype(dtype))

    def __getitem__(self, idx):
        r = super().__getitem__(idx)
        t = type(r)
        return np.float64(r) if t is float else np.int64(r) if t is int else np.bool_(r) if t is bool else r

    def argmax(self, axis=None, **k):
        return _arg(self, axis, ">")

    def argmin(self, axis=None, **k):
        return _arg(self, axis, "<")


def _arg(x, axis, op: str):
    """numpy's argmax (``op`` '>') or argmin of ``x`` along ``axis``, the choice guarded: the
    chosen element beats every element before it and is not beaten by one after."""
    a = _plain(x)
    if axis is None:
        a, axis = a.reshape(-1), 0
    a = np.moveaxis(a, axis, -1)
    values = _concrete(a)
    if values.dtype.kind == "f" and np.isnan(values).any():
        raise Untraceable("argmax over NaN")
    pick = values.argmax(axis=-1) if op == ">" else values.argmin(axis=-1)
    for idx in np.ndindex(a.shape[:-1]):
        j = int(pick[idx])
        xj = a[idx + (j,)]
        for i in range(a.shape[-1]):
            xi = a[idx + (i,)]
            if i == j or (type(xi) is not Tr and type(xj) is not Tr):
                continue
            strict = op if i < j else op + "="
            _rec().guard(f"{_lit(xj)} {strict} {_lit(xi)}")
    return pick


def _plain(x) -> np.ndarray:
    """``x`` as a plain object array (a traced number: 0-d)."""
    if isinstance(x, np.ndarray):
        if x.dtype == object:
            return x.view(np.ndarray)
        out = np.empty(x.shape, dtype=object)  # each element a numpy scalar (as indexing the array gives)
        if x.size:
            out.reshape(-1)[:] = list(x.reshape(-1))
        return out
    out = np.empty((), dtype=object)
    out[()] = x
    return out


def _wrap(a: np.ndarray) -> TArr:
    return a.view(TArr)


def _has_tr(x) -> bool:
    if type(x) is Tr or type(x) is TArr:
        return True
    if isinstance(x, (list, tuple)):
        return any(_has_tr(v) for v in x)
    if isinstance(x, np.ndarray) and x.dtype == object:
        return any(type(v) is Tr for v in x.flat)
    return False


def _astype(x, dtype: np.dtype):
    """``x`` (a traced number or TArr) converted to ``dtype``, element by element."""
    kind = dtype.kind
    if kind == "O":
        return x
    a = _plain(x)
    out = np.empty(a.shape, dtype=object)
    for idx in np.ndindex(a.shape):
        e = a[idx]
        if type(e) is not Tr:
            out[idx] = dtype.type(e)
            continue
        k = e.v.dtype.kind
        v = e.v.astype(dtype)
        if k == kind:
            out[idx] = e
        elif kind == "f":
            out[idx] = _rec().emit(f"float({e.name})", v)
        elif kind in "iu":
            out[idx] = _rec().emit(f"int({e.name})", v)
        elif kind == "b":
            out[idx] = _rec().emit(f"({e.name} != 0)", v)
        else:
            raise Untraceable(f"astype {dtype}")
    if type(x) is Tr:
        return out[()]
    return _wrap(out)


def _ufunc(ufunc, method, inputs, kw):
    if method == "__call__":
        return _call(ufunc, inputs, kw)
    if method in ("reduce", "accumulate"):
        return _reduce(ufunc, method, inputs[0], kw)
    raise Untraceable(f"{ufunc.__name__}.{method}")


def _call(ufunc, inputs, kw):
    out = kw.pop("out", None)
    where = kw.pop("where", True)
    if kw.pop("dtype", None) not in (None, float, np.float64) or kw or ufunc.nout != 1:
        raise Untraceable(f"{ufunc.__name__} with {sorted(kw)}")
    if isinstance(out, tuple):
        out = out[0]
    parts = [_plain(x) for x in inputs]
    conditional = where is not True
    if conditional and out is None:
        raise Untraceable(f"{ufunc.__name__} with where= and no out=")
    if conditional:
        parts.append(_plain(where))
    if out is not None:
        parts.append(_plain(out))
    parts = np.broadcast_arrays(*parts)
    n = len(inputs)
    if not conditional and out is None:  # the constants at once (numpy on their values), the traced one by one
        traced = np.zeros(parts[0].shape, dtype=bool)
        for p in parts:
            if p.size:
                traced |= np.asarray(_IS_TR(p), dtype=bool)
        res = _plain(np.asarray(ufunc(*[_concrete(p) for p in parts])))
        for idx in np.argwhere(traced):
            idx = tuple(idx)
            res[idx] = _put(*_elem(ufunc, [p[idx] for p in parts]))
        return res[()] if res.shape == () else _wrap(res)
    res = np.empty(parts[0].shape, dtype=object)
    for idx in np.ndindex(res.shape):
        xs = [p[idx] for p in parts[:n]]
        if conditional:
            w, o = parts[n][idx], parts[n + 1][idx]
            if type(w) is not Tr:
                res[idx] = _put(*_elem(ufunc, xs)) if w else o
                continue
            src, r = _elem(ufunc, xs)
            rs = _lit(r) if src is None else src
            res[idx] = _rec().emit(f"({rs} if {w.name} else {_lit(o)})", r if w.v else _val(o))
            continue
        res[idx] = _put(*_elem(ufunc, xs))
    if out is not None:
        if not isinstance(out, TArr):
            raise Untraceable("out= a plain array")
        out[...] = res
        return out
    if res.shape == ():  # numpy gives a 0-d result as a scalar
        return res[()]
    return _wrap(res)


def _reduce(ufunc, method, x, kw):
    axis = kw.pop("axis", 0)
    keepdims = kw.pop("keepdims", False)
    kw.pop("dtype", None)
    if kw.pop("out", None) is not None or kw.pop("where", True) is not True:
        raise Untraceable(f"{ufunc.__name__}.{method} into out= or where=")
    if "initial" in kw and kw["initial"] is np._NoValue:
        del kw["initial"]
    if kw or keepdims:
        raise Untraceable(f"{ufunc.__name__}.{method} with {sorted(kw)}")
    a = _plain(x)
    if axis is None:
        a, axis = a.reshape(-1), 0
    a = np.moveaxis(a, axis, 0)
    if ufunc is np.add and method == "reduce" and len(a) > 2:
        raise Untraceable("a sum of several by numpy (pairwise)")  # the cost model adds one after another
    acc = a[0].copy() if a[0].ndim else a[0]
    steps = [acc]
    for row in a[1:]:
        acc = _call(ufunc, (acc, row) if a.ndim == 1 else (_wrap(_plain(acc)), _wrap(row)), {})
        steps.append(acc)
    if method == "reduce":
        return acc if a.ndim == 1 else _wrap(_plain(acc))
    return _wrap(np.moveaxis(np.stack([_plain(s) for s in steps]), 0, axis))


_IS_TR = np.frompyfunc(lambda v: type(v) is Tr, 1, 1)


def _concrete(x) -> np.ndarray:
    """The concrete values of ``x`` as a typed array (the normal path's dtype)."""
    a = _plain(x)
    return np.array([_val(e) for e in a.flat]).reshape(a.shape) if a.size else np.array([], dtype=float).reshape(a.shape)


def _afunc(func, args, kwargs):
    name = func.__name__
    if name == "where" and len(args) == 3 and not kwargs:
        c, x, y = (_plain(v) for v in args)
        rd = np.where(_concrete(c), _concrete(x), _concrete(y)).dtype
        rk = rd.kind
        c, x, y = np.broadcast_arrays(c, x, y)
        res = np.empty(c.shape, dtype=object)
        for idx in np.ndindex(c.shape):
            ci, xi, yi = c[idx], x[idx], y[idx]
            if type(ci) is not Tr:
                pick = xi if ci else yi
                if type(pick) is Tr and _kind(pick) != rk:
                    pick = _rec().emit(_conv(pick, rk), pick.v.astype(rd))
                res[idx] = _cast(pick, rd)
                continue
            r = _cast(xi if ci.v else yi, rd)
            res[idx] = _rec().emit(f"({_conv(xi, rk)} if {ci.name} else {_conv(yi, rk)})", _val(r) if type(r) is Tr else r)
        return _wrap(res)
    if name in ("ndim", "shape", "size"):
        return getattr(_plain(args[0]), name)
    if name == "broadcast_to":
        return _wrap(np.broadcast_to(_plain(args[0]), *args[1:], **kwargs))
    if name == "broadcast_arrays":
        return [_wrap(a) for a in np.broadcast_arrays(*(_plain(a) for a in args))]
    if name in ("stack", "concatenate"):
        return _wrap(func(*(([_plain(a) for a in args[0]],) + tuple(args[1:])), **kwargs))
    if name in ("zeros_like", "ones_like", "full_like", "empty_like"):
        proto = _concrete(args[0])
        out = func(proto, *args[1:], **kwargs)
        return _wrap(_plain(out)) if out.shape else out[()]
    if name in ("copy", "array_equal"):
        return func._implementation(*args, **kwargs)
    if name == "isclose" and len(args) == 2 and not kwargs:
        a, b = np.broadcast_arrays(_plain(args[0]), _plain(args[1]))
        res = np.empty(a.shape, dtype=object)
        for idx in np.ndindex(a.shape):
            ai, bi = a[idx], b[idx]
            r = np.isclose(_val(ai), _val(bi))
            res[idx] = r if type(ai) is not Tr and type(bi) is not Tr else _rec().emit(
                f"_isclose({_lit(ai)}, {_lit(bi)})", r)
        return res[()] if res.shape == () else _wrap(res)
    if name in ("any", "all", "max", "amax", "min", "amin") and len(args) == 1:
        uf = {"any": np.logical_or, "all": np.logical_and, "max": np.maximum, "amax": np.maximum,
              "min": np.minimum, "amin": np.minimum}[name]
        a = _plain(args[0]).reshape(-1)
        if name in ("any", "all"):
            a = _plain(_astype(_wrap(a), np.dtype(bool)))
        return _reduce(uf, "reduce", _wrap(a), {"axis": 0, **kwargs})
    try:
        return func._implementation(*args, **kwargs)
    except Untraceable:
        raise
    except Exception as e:  # noqa: BLE001 - any failure of numpy's own code on traced values: not traceable
        raise Untraceable(f"np.{name}: {type(e).__name__}: {e}") from None


def _cast(x, dtype: np.dtype):
    """A constant (or traced value of the right kind) as ``dtype``."""
    if type(x) is Tr:
        return x if x.v.dtype == dtype else Tr(x.name, x.v.astype(dtype)) if x.v.dtype.kind == dtype.kind else x
    return dtype.type(x)


# --------------------------------------------------------------------------- numpy, while tracing
_REAL = {}


def _creation(name):
    real = getattr(np, name)

    def make(*args, **kwargs):
        if threading.get_ident() != _TRACING[0]:  # another thread: numpy as it is
            return real(*args, **kwargs)
        if name in ("array", "asarray", "asanyarray", "ascontiguousarray"):
            obj = args[0] if args else kwargs.get("object", kwargs.get("a"))
            if _has_tr(obj):
                dtype = args[1] if len(args) > 1 else kwargs.get("dtype")
                out = obj if type(obj) in (Tr, TArr) else _nested(obj)
                if type(out) is Tr:
                    out = _wrap(_plain(out))
                elif name == "array" and kwargs.get("copy", True):
                    out = _wrap(_plain(out).copy())
                if dtype is not None:
                    out = _astype(out, np.dtype(dtype))
                return out
            return real(*args, **kwargs)
        if name == "full" and (_has_tr(args[1] if len(args) > 1 else kwargs.get("fill_value"))):
            shape = args[0]
            fill = args[1] if len(args) > 1 else kwargs["fill_value"]
            out = np.empty(shape, dtype=object)
            out[...] = _plain(fill)
            return _wrap(out)
        out = real(*args, **kwargs)
        if isinstance(out, np.ndarray) and out.dtype.kind == "f":
            return _wrap(_plain(out))
        return out
    return make


def _nested(obj):
    """A nested list of traced values and arrays as one object array."""
    if isinstance(obj, (list, tuple)):
        parts = [_nested(v) for v in obj]
        shapes = {np.shape(p) for p in parts}
        if len(shapes) > 1:
            raise ValueError("setting an array element with a sequence (ragged)")
        shape = shapes.pop() if parts else ()
        out = np.empty((len(parts),) + shape, dtype=object)
        for i, p in enumerate(parts):
            if shape:
                out[i, ...] = _plain(p)
            else:
                out[i] = _plain(p)[()] if isinstance(p, np.ndarray) else p
        return out
    if isinstance(obj, np.ndarray):
        return _plain(obj)
    return obj


PATCHED = ("array", "asarray", "asanyarray", "ascontiguousarray", "zeros", "ones", "empty", "full")


_TRACING = [None]  # the thread that traces (numpy's creation functions are patched for it alone)
_ONE = threading.Lock()  # one trace at a time


class _Patched:
    def __enter__(self):
        _TRACING[0] = threading.get_ident()
        for name in PATCHED:
            _REAL[name] = getattr(np, name)
        for name in PATCHED:
            setattr(np, name, _creation(name))

    def __exit__(self, *exc):
        for name in PATCHED:
            setattr(np, name, _REAL[name])
        _TRACING[0] = None


# --------------------------------------------------------------------------- the replay's helpers
def _div0(a, b):
    return (np.float64(a) / np.float64(b)).item()


def _ceil(x):
    r = float(math.ceil(x))
    return r if r != 0.0 else math.copysign(0.0, x)


def _floor(x):
    r = float(math.floor(x))
    return r if r != 0.0 else math.copysign(0.0, x)


def _spow(a, b):
    r = a ** b
    if type(r) is complex:
        raise ArithmeticError("a negative number to a fractional power")
    return r


class _Ufuncs(dict):
    def __missing__(self, name):
        uf = getattr(np, name)
        fn = self[name] = lambda *a: uf(*a).item()
        return fn


NAMESPACE = {"Miss": Miss, "INF": math.inf, "NAN": math.nan, "_div0": _div0, "_ceil": _ceil, "_floor": _floor,
             "_spow": _spow, "_uf": _Ufuncs(), "_isclose": lambda a, b: bool(np.isclose(a, b)),
             "abs": abs, "float": float, "int": int, "bool": bool}


# --------------------------------------------------------------------------- traces
class Trace:
    """One compiled replay: ``fn(*inputs)`` -> the outputs' values, and each output's
    (name, dtype, shape) as the normal path gives it."""

    def __init__(self, fn, outputs: list, source: str):
        self.fn, self.outputs, self.source = fn, outputs, source
        dtypes = list(dict.fromkeys(dt for _, dt, _ in outputs))
        self.groups = [(dt, [i for i, (_, d, _) in enumerate(outputs) if d == dt]) for dt in dtypes]

    def run(self, inputs: list) -> dict:
        """The outputs for ``inputs`` (the traced inputs' numbers), each a one-row column (a
        row of one block per dtype)."""
        values = self.fn(*inputs)
        rows = [None] * len(values)
        for dt, at in self.groups:
            block = np.array([values[i] for i in at], dtype=dt).reshape(-1, 1)
            for j, i in enumerate(at):
                rows[i] = block[j]
        return {name: row for (name, _, _), row in zip(self.outputs, rows)}


class Entry:
    __slots__ = ("m", "traces", "seen", "dead")

    def __init__(self, m):
        self.m, self.traces, self.seen, self.dead = m, [], 0, False


def structure(phase: str, cols: dict) -> tuple | None:
    """The row's structure (every input but the traced ones, by value; the traced ones by
    name and type) and its traced inputs; None where the row is not one of numbers."""
    key, traced = [phase], []
    for k, v in cols.items():
        t = type(v)
        if t is not np.float64 and t is not np.int64 and t is not np.bool_:
            return None
        if k in TRACED and t is not np.bool_:
            if t is np.int64 and not -INT_LIMIT < v < INT_LIMIT:
                return None
            key.append((k, t))
            traced.append(k)
        else:
            key.append((k, t, v.item()))
    return tuple(key), traced


def evaluate(phase: str, hw, m, cols: dict, run):
    """The outputs of ``run(hw, m, cols)`` (a phase's schedule and memory, without its
    schedules) for a one-row ``cols`` by a replay where one holds, else None (the caller takes
    the normal path); the structure is traced on its :data:`AFTER`-th call."""
    if not KEEP["on"]:
        return None
    found = structure(phase, cols)
    kept = memo(hw)
    if found is None or kept is None:
        return None
    key, traced = found
    entry = kept.get(("replay", key))
    if entry is None or entry.m is not m:
        entry = kept[("replay", key)] = Entry(m)
    if entry.dead:
        return None
    inputs = [cols[k].item() for k in traced]
    for t in entry.traces:
        try:
            return t.run(inputs)
        except (Miss, ArithmeticError, ValueError, TypeError) as e:
            if DEBUG:
                tb = e.__traceback__
                while tb.tb_next is not None:
                    tb = tb.tb_next
                _say("miss:", type(e).__name__, t.source.splitlines()[tb.tb_lineno - 1].strip())
            continue
    entry.seen += 1
    if entry.seen < AFTER or len(entry.traces) >= TRACES or not _ONE.acquire(blocking=False):
        return None
    try:
        t = make_trace(hw, m, cols, traced, run)
    finally:
        _ONE.release()
    if t is None:
        entry.dead = True
        return None
    entry.traces.append(t)
    return None  # this call answers by the normal path (the trace was checked against it)


def make_trace(hw, m, cols: dict, traced: list, run) -> Trace | None:
    """A :class:`Trace` of ``run`` on ``cols`` (None where it cannot be made, or its replay
    differs from the normal path in any bit)."""
    rec = Recorder()
    row = dict(cols)
    for i, k in enumerate(traced):
        row[k] = Tr(f"a{i}", cols[k])
    _REC[0], before = rec, KEEP["on"]
    KEEP["on"] = False  # nothing derived while tracing is kept (it may hold traced values)
    try:
        with _Patched():
            got = run(hw, m, row)
        outputs = {k: v for k, v in got.items() if not k.startswith("_")}
        returned = [_output(v) for v in outputs.values()]
    except Exception as e:  # noqa: BLE001 - whatever stops a trace (an Untraceable, raised through numpy's loops)
        _say("untraceable:", e)
        if DEBUG:
            import traceback
            traceback.print_exc(limit=-8)
        return None
    finally:
        _REC[0], KEEP["on"] = None, before
    normal = {k: v for k, v in run(hw, m, cols).items() if not k.startswith("_")}
    if normal.keys() != outputs.keys():
        return None
    source = "def replay({}):\n{}\n    return ({},)\n".format(
        ", ".join(f"a{i}" for i in range(len(traced))), "\n".join(inlined(live(rec.lines, returned), returned)),
        ", ".join(returned))
    space = dict(NAMESPACE)
    exec(compile(source, "<cmperf replay>", "exec"), space)
    spec = [(k, np.asarray(v).dtype, np.shape(v)) for k, v in normal.items()]
    t = Trace(space["replay"], spec, source)
    try:
        mine = t.run([cols[k].item() for k in traced])
    except (Miss, ArithmeticError, ValueError) as e:
        _say("replay failed on its own trace:", type(e).__name__, e)
        return None
    bad = [k for k in normal if not _same(np.asarray(normal[k]).reshape(-1), mine[k])]
    if bad:
        _say("replay differs from the normal path:", bad)
        return None
    _say(f"traced: {len(rec.lines)} lines, {source.count(chr(10))} live, {len(traced)} inputs")
    return t


NAMES = re.compile(r"\bv\d+\b")


def live(lines: list[str], returned: list[str]) -> list[str]:
    """The lines an output or a guard needs (the others' values are never read: the trace
    records what the breakdown would show too)."""
    needed = set(NAMES.findall(" ".join(returned)))
    out = []
    for line in reversed(lines):
        body = line.strip()
        if body.startswith("if "):
            needed.update(NAMES.findall(body))
            out.append(line)
            continue
        name, _, expr = body.partition(" = ")
        if name in needed:
            needed.update(NAMES.findall(expr))
            out.append(line)
    return out[::-1]


def inlined(lines: list[str], returned: list[str], depth: int = 40) -> list[str]:
    """The lines with each value read once written into the line that reads it (no name
    stored and loaded: the same operations, each still computed before its reader), at most
    ``depth`` deep."""
    uses: dict[str, int] = {}
    for text in [*(line.partition(" = ")[2] if " = " in line else line for line in lines), *returned]:
        for name in NAMES.findall(text):
            uses[name] = uses.get(name, 0) + 1
    for name in NAMES.findall(" ".join(returned)):
        uses[name] = uses.get(name, 0) + 2  # an output keeps its name
    pending: dict[str, tuple[str, int]] = {}
    out = []

    def fill(text: str) -> tuple[str, int]:
        deep = 0

        def sub(match):
            nonlocal deep
            hit = pending.pop(match.group(0), None)
            if hit is None:
                return match.group(0)
            deep = max(deep, hit[1])
            return hit[0]
        return NAMES.sub(sub, text), deep + 1

    for line in lines:
        body = line.strip()
        if body.startswith("if "):
            out.append("    " + fill(body)[0])
            continue
        name, _, expr = body.partition(" = ")
        expr, deep = fill(expr)
        if uses.get(name, 0) == 1 and deep < depth:
            pending[name] = (expr if expr.startswith("(") or expr.isidentifier() else f"({expr})", deep)
        else:
            out.append(f"    {name} = {expr}")
    for name, (expr, _) in pending.items():  # (none: a value read once is read after it is made)
        out.append(f"    {name} = {expr}")
    return out


def _output(v) -> str:
    if isinstance(v, np.ndarray):
        if v.size != 1:
            raise Untraceable("an output of several values")
        v = v.reshape(-1)[0]
    return _lit(v)


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    return bool(np.array_equal(a, b, equal_nan=a.dtype.kind in "fc"))
