"""Command line: ``cmperf hw|model|predict|validate|search ...`` (README.md has the tour).

One module per command: :mod:`.hw`, :mod:`.model`, :mod:`.predict`, :mod:`.validate`,
:mod:`.search`; :mod:`.options` holds the options they share. This package builds the root
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


MAX_MESSAGE = 2000  # an error line longer than this is cut: no message echoes unbounded input


def main() -> None:
    """Entry point. Every bad input ends in one line ``cmperf: error: ...`` on stderr and exit
    code 2: our own input errors (CmperfError) and click's usage errors (a flag's type, a
    missing argument, an unknown command) alike. ``--help``, ``--version`` and a command given
    without arguments print their help as usual."""
    import importlib

    click = importlib.import_module(typer.BadParameter.__module__)  # click's exceptions (typer may vendor click)
    help_error = getattr(click, "NoArgsIsHelpError", ())
    try:
        code = app(standalone_mode=False)
    except help_error as e:
        e.show()  # the command's help, as typer shows it for a bare `cmperf predict`
        code = e.exit_code
    except click.BadParameter as e:
        _error(e.format_message() + _found(e), 2)
    except click.UsageError as e:
        _error(e.format_message(), 2)
    except click.ClickException as e:
        _error(e.format_message(), 2)
    except (getattr(click, "Abort", typer.Abort), typer.Abort):
        sys.stderr.write("cmperf: aborted\n")
        code = 1
    except CmperfError as e:
        _error(str(e), e.exit_code)
    sys.exit(code if isinstance(code, int) else 0)


def _found(e) -> str:
    """`` (got VALUE)``: what the user typed for the option a click BadParameter names."""
    from ..errors import short

    opts = getattr(e.param, "opts", None) or []
    args = sys.argv[1:]
    for i, a in enumerate(args):
        for o in opts:
            if a == o and i + 1 < len(args):
                return f" (got {short(args[i + 1], 40)!r})"
            if a.startswith(o + "="):
                return f" (got {short(a[len(o) + 1:], 40)!r})"
    return ""


def _error(message: str, code: int) -> None:
    from ..errors import short

    sys.stderr.write(f"cmperf: error: {short(message, MAX_MESSAGE)}\n")
    sys.exit(code)
