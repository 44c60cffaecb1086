"""A progress bar on stderr for the commands that evaluate many things (search, plan, simulate)."""

from __future__ import annotations

import time


QUIET_S = 30.0  # a run projected longer than this says so once on stderr when it is not a terminal
MEASURE_S = 10.0  # off a terminal, the projection waits this long: a run's first items (imports, a full fit) cost more


class ProgressBar:
    """A rich progress bar on stderr, advanced by ``bar(done, total)``; it appears only when
    the work is projected to take more than a second and stderr is a terminal (off a terminal,
    one line when, after MEASURE_S, it is projected to take more than QUIET_S in all: projected
    from the first item alone, `validate --cross-validate` said 101 s for a 17 s run). ``label``
    names what is counted. With ``every_s``, a run off a terminal that said it runs says again
    every ``every_s`` seconds how far it is (a study of hours, in a log)."""

    def __init__(self, label: str = "evaluating configurations", every_s: float | None = None, clock=time.perf_counter) -> None:
        self.label = label
        self.clock = clock
        self.t0 = clock()
        self.bar = None
        self.task = None
        self.terminal = None
        self.every_s = every_s
        self.said = None  # off a terminal: when the last line was written

    def _line(self, done: int, total: int, elapsed: float) -> None:
        import sys

        left = elapsed * (total - done) / max(done, 1)
        sys.stderr.write(f"cmperf: {self.label}: {done:,} of {total:,} in {elapsed:,.0f} s, about {left:,.0f} s left\n")
        self.said = self.clock()

    def __call__(self, done: int, total: int) -> None:
        if self.bar is False and self.said is not None and self.every_s and done < total \
                and self.clock() - self.said >= self.every_s:
            self._line(done, total, self.clock() - self.t0)
            return
        if self.bar is None:
            elapsed = self.clock() - self.t0
            if done >= total or elapsed * total / max(done, 1) < 1.0:
                return
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

            console = Console(stderr=True)
            if self.terminal is None:
                self.terminal = console.is_terminal
            if not self.terminal:
                if elapsed < MEASURE_S:  # not yet: the first items are no measure of the rest
                    return
                self.bar = False
                projected = elapsed * total / max(done, 1)
                if projected > QUIET_S:  # off a terminal a long run says once that it runs, and how long
                    import sys

                    sys.stderr.write(f"cmperf: {self.label}: {done:,} of {total:,} in {elapsed:,.0f} s, about "
                                     f"{projected:,.0f} s in all (a bar is shown on a terminal)\n")
                    self.said = self.clock()
                return
            self.bar = Progress(TextColumn(self.label), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                                console=console, transient=True)
            self.bar.start()
            self.task = self.bar.add_task("work", total=total)
        if self.bar:
            self.bar.update(self.task, completed=done)

    def close(self) -> None:
        if self.bar:
            self.bar.stop()
