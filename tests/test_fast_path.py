"""A warm prediction answers exactly as a first one (issue 24: the Python API's kept GEMM times,
tilings, fused-kernel runs, weights per die and spec views; cmperf/specs/view.py ``remember``).

The matrix (every system x model, decode and prefill at their defaults) is walked in one process:
each question first on the uncached path (``uncached()``: nothing kept, nothing reused), then
twice on the warm path (the second call reads only what the first kept); every output must be
the same to the last bit. A what-if after a warm call must change the answer as a fresh process
would: a kept value belongs to the views of the specs it was derived from."""

from __future__ import annotations

import numpy as np
import pytest

from cmperf.errors import CmperfError
from cmperf.predict import load_specs, predict, system_model
from cmperf.specs.loader import list_builtin
from cmperf.specs.view import uncached

SYSTEMS = [n for n, _ in list_builtin("system")]
MODELS = [n for n, _ in list_builtin("model")]


def _answer(phase, values, specs):
    """The prediction's columns (or the error it raises), for comparison."""
    try:
        r = predict(phase, values, specs, strict=False)
    except CmperfError as e:
        return f"error: {e}"
    return {c: np.asarray(r.columns[c]) for c in r.columns.columns}


def _same(a, b) -> bool:
    if isinstance(a, str) or isinstance(b, str):
        return a == b
    return a.keys() == b.keys() and all(
        a[c].shape == b[c].shape and (np.array_equal(a[c], b[c], equal_nan=True) if a[c].dtype.kind in "fc"
                                      else np.array_equal(a[c], b[c])) for c in a)


def test_warm_calls_answer_as_the_uncached_path_on_every_system_and_model():
    """Decode on every system x model; prefill on every system with its own model and on
    CloudMatrix384 with every model (its kernels are the decode's, timed on other shapes)."""
    differ, compared = [], 0
    for system in SYSTEMS:
        for model in MODELS:
            try:
                specs = load_specs(system, model)
            except CmperfError:
                continue
            prefill = system == "cloudmatrix384" or model == system_model(system)
            for phase in ("decode", "prefill") if prefill else ("decode",):
                values = {}
                with uncached():
                    first = _answer(phase, values, specs)
                warm = [_answer(phase, values, specs) for _ in range(2)]
                compared += 1
                if not all(_same(first, w) for w in warm):
                    differ.append(f"{system} x {model} {phase} {values}")
    assert compared > 180 and not differ, differ


def test_a_what_if_after_a_warm_call_changes_the_answer():
    """A --set (new specs) and a sweep after warm calls on the defaults: each answers as on
    the uncached path; more HBM bandwidth never makes decode slower, less never faster (its
    weights and KV are read from HBM every step)."""
    for _ in range(3):
        base = predict("decode", {"batch": 64}).columns["tpot_ms"][0]
    path = "chip.die.hbm_bandwidth_Bps"  # the file's: 1.6e12
    tpot = {}
    for bw in (1.0e12, 3.2e12):
        specs = load_specs(sets=[f"{path}={bw:g}"])
        warm = [predict("decode", {"batch": 64}, specs).columns["tpot_ms"][0] for _ in range(2)]
        with uncached():
            fresh = predict("decode", {"batch": 64}, specs).columns["tpot_ms"][0]
        assert warm == [fresh, fresh]
        tpot[bw] = fresh
    swept = predict("decode", {"batch": 64}, load_specs(), sweeps={path: [1.0e12, 3.2e12]}).columns["tpot_ms"]
    assert list(swept) == [tpot[1.0e12], tpot[3.2e12]]
    assert tpot[3.2e12] < base < tpot[1.0e12]
    assert predict("decode", {"batch": 64}).columns["tpot_ms"][0] == base  # the defaults' answer is untouched


@pytest.mark.parametrize("phase", ["decode", "prefill"])
def test_one_row_equals_its_row_of_a_grid(phase):
    """The one-row path (numpy scalars, kept GEMM times) and the vectorised grid (arrays,
    nothing kept) give each configuration the same numbers, to rounding (numpy's array loops
    of exp, log and power may round the last bit unlike its scalar ones)."""
    key, values = ("batch", [1, 8, 64, 160]) if phase == "decode" else ("prompt_len", [256, 1024, 4096])
    specs = load_specs()
    grid = predict(phase, {key: values}, specs).columns
    for i, v in enumerate(values):
        one = predict(phase, {key: v}, specs).columns
        for c in one.columns:
            if one[c].dtype.kind in "fc":
                np.testing.assert_allclose(one[c], grid[c][i:i + 1], rtol=1e-12, atol=0, err_msg=f"{v} {c}")
