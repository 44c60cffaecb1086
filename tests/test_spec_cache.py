"""The spec cache (cmperf/specs/cache.py): a file parsed and validated once is read back as
JSON, so that a cold `cmperf predict` imports neither PyYAML nor pydantic; an edited file is
parsed and checked again in full; a cache that cannot be used only costs time."""

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from cmperf.errors import SpecError
from cmperf.predict import load_specs, predict

ROOT = Path(__file__).resolve().parents[1]
SYSTEM, CHIP = ROOT / "hardware" / "cloudmatrix384.yaml", ROOT / "hardware" / "ascend-910c.yaml"


@pytest.fixture
def cache(tmp_path, monkeypatch):
    folder = tmp_path / "xdg"
    monkeypatch.setenv("XDG_CACHE_HOME", str(folder))
    monkeypatch.delenv("CMPERF_NO_CACHE", raising=False)
    return folder / "cmperf"


def _copy_specs(tmp_path: Path) -> Path:
    (tmp_path / CHIP.name).write_text(CHIP.read_text())
    (tmp_path / SYSTEM.name).write_text(SYSTEM.read_text())
    return tmp_path / SYSTEM.name


def test_cached_specs_give_the_same_prediction_and_dataframes(cache):
    fresh = load_specs()  # parses, validates and fills the cache
    assert {"chip", "model", "system"} <= {p.name.split("-")[0] for p in cache.iterdir()}
    cached = load_specs()  # all three files from the cache, as plain data
    assert cached._plain is not None and fresh._plain is None
    a = predict("decode", {"batch": [8, 96]}, fresh)
    b = predict("decode", {"batch": [8, 96]}, cached)
    assert isinstance(b.table, pd.DataFrame)
    pd.testing.assert_frame_equal(a.table, b.table)
    # the validated objects are still there for the API, built on first use
    assert cached.model.name == "deepseek-r1" and cached.hardware.chip.die.hbm_bandwidth_Bps.source


def test_an_edited_file_is_parsed_and_checked_again(cache, tmp_path):
    system = _copy_specs(tmp_path)
    load_specs(str(system))
    text = system.read_text()
    system.write_text(text.replace("kind: system\n", "kind: system\nkind: system\n", 1))  # a duplicate key
    with pytest.raises(SpecError, match="given twice"):
        load_specs(str(system))
    system.write_text(text.replace("nodes: {value: 48,", "nodes: {value: -48,", 1))  # one byte: a bad value
    assert "nodes: {value: -48," in system.read_text()
    with pytest.raises(SpecError, match="nodes"):
        load_specs(str(system))


def test_an_unusable_cache_is_skipped(cache, tmp_path, monkeypatch):
    base = predict("decode", {}, load_specs()).columns["tpot_ms"].iat[0]
    for entry in cache.iterdir():  # every entry garbage: read as a miss
        entry.write_text("{not json")
    assert predict("decode", {}, load_specs()).columns["tpot_ms"].iat[0] == base
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocked))  # the cache folder cannot be made
    assert predict("decode", {}, load_specs()).columns["tpot_ms"].iat[0] == base


def test_no_cache_writes_nothing(cache, monkeypatch):
    monkeypatch.setenv("CMPERF_NO_CACHE", "1")
    load_specs()
    assert not cache.exists()


def test_a_cached_prediction_imports_neither_pydantic_nor_yaml_nor_pandas(cache):
    script = ("import sys\nsys.argv = ['cmperf', 'predict', 'decode']\nfrom cmperf.cli import main\n"
              "try:\n    main()\nexcept SystemExit:\n    pass\n"
              "print(sorted(m for m in ('pydantic', 'yaml', 'pandas') if m in sys.modules), file=sys.stderr)")
    env = {**__import__("os").environ, "XDG_CACHE_HOME": str(cache.parent)}
    runs = [subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=60)
            for _ in range(2)]
    first, second = (json.loads(r.stderr.strip().splitlines()[-1].replace("'", '"')) for r in runs)
    assert "pandas" not in first and "pydantic" in first  # the first run validates the files
    assert second == []
    assert runs[0].stdout == runs[1].stdout and "tpot_ms" in runs[1].stdout
