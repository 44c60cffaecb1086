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


# --------------------------------------------------------------------------- a cache that cannot lie
def _fresh_process_state():
    """Forget what this process memoised of the files (as a new process would)."""
    from cmperf import deployment
    from cmperf.specs import loader

    loader._parsed.clear()
    deployment._REFERENCES.clear()


def _answer(hardware="cloudmatrix384"):
    _fresh_process_state()
    r = predict("decode", {}, load_specs(hardware)).columns
    return float(r["tpot_ms"].iat[0]), float(r["memory_per_die_bytes"].iat[0])


def _no_cache_answer(monkeypatch, hardware="cloudmatrix384"):
    monkeypatch.setenv("CMPERF_NO_CACHE", "1")
    try:
        return _answer(hardware)
    finally:
        monkeypatch.delenv("CMPERF_NO_CACHE")


def _with_valid_json_changed(text: str) -> str:
    """A chip entry's JSON, still a valid spec dump, with a negative HBM bandwidth."""
    head, _, body = text.partition("\n")
    obj = json.loads(body)
    obj["die"]["hbm_bandwidth_Bps"]["value"] = -1.6e12
    return head + "\n" + json.dumps(obj)


def _corruptions(tmp_path):
    """Every way an entry can be off: (name, what to do to an entry's path)."""
    import os

    def write(content):
        return lambda p: p.write_bytes(content if isinstance(content, bytes) else content.encode())

    def fifo(p):
        p.unlink()
        os.mkfifo(p)

    def folder(p):
        p.unlink()
        p.mkdir()
        (p / "inside").write_text("x")  # a folder that cannot simply be removed

    def link(target):
        def f(p):
            p.unlink()
            p.symlink_to(target)
        return f

    huge = tmp_path / "huge"
    huge.write_bytes(b"0" * 5_000_000)
    return {
        "valid JSON, a negative HBM bandwidth (checksum kept)": lambda p: p.write_text(_with_valid_json_changed(p.read_text()))
        if p.name.startswith("chip-") else None,
        "the checksum recomputed by hand over a lie": "recomputed",
        "a wrong type (a list)": write('x\n[1, 2]'),
        "a wrong type (a number in a field)": lambda p: p.write_text(p.read_text().replace('"value": 1600000000000.0', '"value": "fast"')),
        "truncated": lambda p: p.write_bytes(p.read_bytes()[: len(p.read_bytes()) // 2]),
        "empty": write(b""),
        "binary": write(bytes(range(256)) * 8),
        "not UTF-8": lambda p: p.write_bytes(p.read_bytes().replace(b"{", b"\xff{", 1)),
        "a 5,001-digit integer": write("0" * 64 + "\n" + "{\"kind\": " + "9" * 5001 + "}"),
        "nested 100,000 deep": write("0" * 64 + "\n" + "[" * 100_000),
        "a FIFO": fifo,
        "a folder": folder,
        "a link to /dev/zero": link("/dev/zero"),
        "a link to a 5 MB file": link(huge),
        "a dangling link": link(tmp_path / "nowhere"),
        "another entry's content": "swapped",
    }


def test_a_corrupted_entry_never_changes_an_answer(cache, tmp_path, monkeypatch):
    """Every entry corrupted in every way of issue 17: the answer is what CMPERF_NO_CACHE=1
    gives, nothing is raised or printed, and the entry is rebuilt whole."""
    import os

    from cmperf.specs import cache as cache_mod

    truth = _no_cache_answer(monkeypatch)
    assert _answer() == truth  # fills the cache
    names = sorted(p.name for p in cache.iterdir())
    assert any(n.startswith(k) for n in names for k in ("yaml-", "chip-", "system-", "model-"))
    for what, corrupt in _corruptions(tmp_path).items():
        for name in names:
            p = cache / name
            if corrupt == "recomputed":  # a lie with a checksum over the lie, but not the code's: still refused
                head, _, body = p.read_text().partition("\n")
                p.write_text(cache_mod._hash(b"someone else's key|", body.replace("1600000000000.0", "-1.0").encode())
                             + "\n" + body.replace("1600000000000.0", "-1.0"))
            elif corrupt == "swapped":
                other = next(n for n in names if n != name)
                p.write_bytes((cache / other).read_bytes())
            elif corrupt(p) is None and not os.path.lexists(p):
                continue
        assert _answer() == truth, what
        for name in names:  # rebuilt: regular files again, each read back
            p = cache / name
            if what != "a folder":
                assert p.is_file() and not p.is_symlink(), (what, name)
        if what == "a folder":
            for name in names:
                import shutil

                shutil.rmtree(cache / name, ignore_errors=True)
            assert _answer() == truth


def test_a_fifo_entry_does_not_block_a_process(cache, tmp_path):
    """The reproduction of issue 17 as a user meets it, in a process of its own: a FIFO in
    place of every entry, and a valid JSON lie, give the uncached answer."""
    import os

    env = {**os.environ, "XDG_CACHE_HOME": str(cache.parent)}
    run = lambda extra={}: subprocess.run([sys.executable, "-m", "cmperf.cli", "predict", "decode", "-f", "json"],  # noqa: E731
                                          capture_output=True, text=True, env={**env, **extra}, timeout=60)
    truth = json.loads(run({"CMPERF_NO_CACHE": "1"}).stdout)["tpot_ms"]
    run()
    for p in list(cache.iterdir()):
        if p.name.startswith("chip-"):
            p.write_text(_with_valid_json_changed(p.read_text()))
        else:
            p.unlink()
            os.mkfifo(p)
    r = run()
    assert r.returncode == 0 and r.stderr == "" and json.loads(r.stdout)["tpot_ms"] == truth


def test_the_fingerprint_covers_every_module_of_the_specs_package():
    """A change to any rule an entry passed (dtypes.py among them) retires it."""
    from cmperf.specs import cache as cache_mod

    cache_mod._fingerprint = None
    code = cache_mod._code()
    here = Path(cache_mod.__file__).parent
    for p in here.glob("*.py"):
        assert f"{p.name}:" in code
    assert "dtypes.py:" in code and "schema.py:" in code
