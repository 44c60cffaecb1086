"""Command line: ``cmperf hw|model|predict|validate|search ...`` (README.md has the tour).

One module per command: :mod:`.hw`, :mod:`.model`, :mod:`.predict`, :mod:`.validate`,
:mod:`.search`, :mod:`.compare`, :mod:`.plan`; :mod:`.options` holds the options they share. This package builds the root
``app`` from them and holds the entry point :func:`main`.

The CLI only parses flags, calls the Python API and renders; it computes nothing itself.
Bad input ends in one line on stderr and exit code 2, never a traceback.
"""

from __future__ import annotations

import sys

import typer

from .. import __version__
from ..errors import CmperfError
from .hw import hw_app
from .model import model_app
from .predict import predict_app
from .compare import compare_app
from .search import search_app
from .validate import validate_cmd
from .plan import plan_cmd

app = typer.Typer(
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    help="Analytical performance model of DeepSeek-R1 serving on Huawei CloudMatrix384 (Ascend 910C).\n\n"
         "Example: cmperf predict decode --batch 64 --set chip.die.hbm_bandwidth_Bps=3.2e12",
)
app.add_typer(hw_app, name="hw")
app.add_typer(model_app, name="model")
app.add_typer(predict_app, name="predict")
app.add_typer(search_app, name="search")
app.add_typer(compare_app, name="compare")


def _version(value: bool):
    if value:
        typer.echo(f"cmperf {__version__}")
        raise typer.Exit()


@app.callback()
def _root(version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="print the version and exit")):
    pass


app.command("validate")(validate_cmd)
app.command("plan")(plan_cmd)


def main() -> None:
    """Entry point: typer handles usage errors itself (message + exit 2); our own input
    errors arrive here as CmperfError."""
    try:
        app()
    except CmperfError as e:
        sys.stderr.write(f"cmperf: error: {e}\n")
        sys.exit(e.exit_code)

