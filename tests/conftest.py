import sys

import pytest


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
