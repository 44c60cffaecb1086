"""Progress of the long commands (cmperf/cli/progress.py): `validate` (all forms) and the
calibration count their work in steps that end at the total, so that a bar on a terminal
fills exactly once; the bar itself appears only on a terminal (stderr here is not one)."""

from __future__ import annotations

from pathlib import Path

import pytest

H200 = str(Path(__file__).resolve().parents[1] / "cmperf" / "reference" / "h200-cluster-microbenchmarks.yaml")  # the quickest file with a fit


@pytest.fixture
def ticks(monkeypatch):
    """Every (done, total) the commands' progress bars are given."""
    from cmperf.cli import progress

    seen: list[tuple[int, int]] = []
    real = progress.ProgressBar.__call__

    def record(self, done, total):
        seen.append((done, total))
        real(self, done, total)

    monkeypatch.setattr(progress.ProgressBar, "__call__", record)
    return seen


def _counts_up_to_the_total(seen):
    assert seen, "no progress reported"
    totals = {t for _, t in seen}
    assert len(totals) == 1, totals
    done = [d for d, _ in seen]
    assert done == sorted(done) and done[-1] == totals.pop() and done[0] >= 1


def test_validate_counts_its_files(cli, ticks):
    from cmperf.calibration.reference import builtin_references

    code, out, err = cli("validate", "--format", "json")
    assert code == 0 and err == "", err  # no bar: stderr is not a terminal
    _counts_up_to_the_total(ticks)
    assert ticks[-1][1] == len(builtin_references())


def test_validate_cross_validate_counts_every_fit(cli, ticks):
    """One step for the file and one for each fit (the file's own, then each fold's)."""
    from cmperf.calibration.crossval import folds
    from cmperf.calibration.reference import load_reference

    code, _, err = cli("validate", H200, "--cross-validate", "--format", "json")
    assert code == 0, err
    _counts_up_to_the_total(ticks)
    assert ticks[-1][1] == 1 + 1 + len(folds(load_reference(H200)))


def test_the_calibration_counts_its_fits(ticks, capsys):
    from cmperf.calibration.__main__ import main

    assert main([H200]) == 0
    _counts_up_to_the_total(ticks)
    assert ticks[-1][1] == 1  # without --write: the fit alone
