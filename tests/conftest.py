import os
import sys

import pytest


_CACHE = {}


def pytest_configure(config):
    """The spec cache (cmperf/specs/cache.py) in a folder of the test session's own, not the
    user's ~/.cache (set before collection: some test modules load specs when imported): every
    run starts empty, fills it, and later loads read from it. The pytest-xdist workers share
    the folder of the session that started them (inherited through the environment; entries are
    written whole, cmperf/specs/cache.py), so that an answer one worker derived is read by the
    others; the starting session removes it."""
    import tempfile

    shared = os.environ.get("CMPERF_TEST_CACHE_DIR")
    if shared and os.environ.get("PYTEST_XDIST_WORKER") and os.path.isdir(shared):
        _CACHE["old"], _CACHE["dir"], _CACHE["owned"] = os.environ.get("XDG_CACHE_HOME"), shared, False
    else:
        _CACHE["old"] = os.environ.get("XDG_CACHE_HOME")
        _CACHE["dir"], _CACHE["owned"] = tempfile.mkdtemp(prefix="cmperf-test-cache-"), True
        os.environ["CMPERF_TEST_CACHE_DIR"] = _CACHE["dir"]
    os.environ["XDG_CACHE_HOME"] = _CACHE["dir"]


def pytest_unconfigure(config):
    import shutil

    folder = _CACHE.pop("dir", "")
    if _CACHE.pop("owned", False):
        shutil.rmtree(folder, ignore_errors=True)
        os.environ.pop("CMPERF_TEST_CACHE_DIR", None)
    old = _CACHE.pop("old", None)
    if old is None:
        os.environ.pop("XDG_CACHE_HOME", None)
    else:
        os.environ["XDG_CACHE_HOME"] = old


@pytest.fixture(autouse=True)
def _ctrl_c_as_in_a_shell():
    """Ctrl-C (SIGINT) handled as in a process a shell starts. A pytest-xdist worker (the
    suite runs on every core: pyproject's addopts) ignores SIGINT, so that Ctrl-C stops the
    controller alone; the command line keeps a signal it was started ignoring ignored (as it
    should), and so would its children: the tests of what Ctrl-C does would see nothing."""
    import signal

    old = signal.getsignal(signal.SIGINT)
    if old is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    hup = signal.getsignal(signal.SIGHUP)  # the same for SIGHUP under nohup (a suite run in the background)
    if hup is signal.SIG_IGN:
        signal.signal(signal.SIGHUP, signal.SIG_DFL)
    yield
    if old is signal.SIG_IGN:
        signal.signal(signal.SIGINT, old)
    if hup is signal.SIG_IGN:
        signal.signal(signal.SIGHUP, hup)


@pytest.fixture
def cli(capsys, monkeypatch):
    """Run the cmperf CLI in-process: returns (exit code, stdout, stderr)."""
    from cmperf.cli import main

    def run(*args):
        monkeypatch.setattr(sys, "argv", ["cmperf", *map(str, args)])
        code = 0
        try:
            main()
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        out = capsys.readouterr()
        return code, out.out, out.err

    return run


@pytest.fixture(scope="session")
def specs():
    from cmperf.predict import load_specs

    return load_specs()


@pytest.fixture(scope="session")
def model(specs):
    return specs.model
