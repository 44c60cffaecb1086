"""The Python API (docs/api.md): `from cmperf import predict, search, plan, simulate,
load_specs`, each imported on first use (``import cmperf`` stays cheap), and a call that
gives no specs answers from the defaults read once per process."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[1]


def test_the_api_names_import_from_the_package():
    import cmperf
    from cmperf import Plan, Prediction, SearchResult, SimResult, load_specs, plan, predict, search, simulate

    assert {"predict", "search", "plan", "simulate", "load_specs"} <= set(cmperf.__all__) <= set(dir(cmperf))
    for name in cmperf.__all__:
        assert getattr(cmperf, name) is not None, name
    assert isinstance(predict("decode", {"batch": 64}), Prediction)
    assert callable(search) and callable(plan) and callable(simulate) and callable(load_specs)
    assert all(isinstance(t, type) for t in (Plan, SearchResult, SimResult))


def test_every_name_the_api_page_lists_is_exported():
    import cmperf

    page = (REPO / "docs" / "api.md").read_text(encoding="utf-8")
    table = [line for line in page.splitlines() if line.startswith("| `")]
    names = {n for line in table for n in re.findall(r"`(\w+)", line.split("|")[1])}
    assert names and names <= set(cmperf.__all__), names - set(cmperf.__all__)


def test_import_cmperf_imports_none_of_the_model():
    """`cmperf --version` pays for `import cmperf`: the API's names must not load numpy."""
    code = "import sys, cmperf; print(cmperf.__version__, 'numpy' in sys.modules, 'cmperf.predict' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out[1:] == ["False", "False"], out


def test_predict_without_specs_is_predict_on_the_default_specs():
    """Same numbers, bit for bit, as on `load_specs()` given; the specs object is the same one
    from call to call (read once), the prediction a new one."""
    from cmperf import load_specs, predict
    from cmperf.predict import default_specs

    values = {"batch": [1, 64, 96], "kv_len": [1024, 4096]}
    a, b = predict("decode", values), predict("decode", values, load_specs())
    assert a.columns.columns == b.columns.columns
    for c in a.columns.columns:
        x, y = np.asarray(a.columns[c]), np.asarray(b.columns[c])
        assert (x == y).all() or (x.dtype.kind == "f" and np.array_equal(x, y, equal_nan=True)), c
    assert default_specs() is default_specs()
    assert predict("decode", {"batch": 64}) is not predict("decode", {"batch": 64})


def test_the_default_specs_are_read_again_when_a_file_changes(monkeypatch):
    import cmperf.predict as P

    first = P.default_specs()
    stamps = P._file_stamps
    monkeypatch.setattr(P, "_file_stamps", lambda paths: (*stamps(paths), "edited"))
    assert P.default_specs() is not first


def test_simulate_checks_its_seed_and_warmup_where_they_enter():
    """The Python API gets the CLI's one-line errors, not numpy's (issue 23 item 4)."""
    from cmperf import simulate
    from cmperf.errors import ConfigError
    from cmperf.simulate import Traffic

    for kw in ({"seed": -1}, {"seed": 2 ** 63}, {"warmup": 1.0}, {"warmup": float("nan")}):
        with pytest.raises(ConfigError, match="simulate: (seed|warmup)"):
            simulate(traffic=Traffic(num_prompts=10), **kw)
