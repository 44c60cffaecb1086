"""Command line: ``cmperf hw|model|predict|validate|search ...`` (README.md has the tour).

One module per command: :mod:`.hw`, :mod:`.model`, :mod:`.predict`, :mod:`.validate`,
:mod:`.search`, :mod:`.compare`, :mod:`.plan`, :mod:`.simulate`, :mod:`.study`; :mod:`.options` holds the options they share. This package
builds the root ``app``, which imports a command's module only when that command runs (or
``--help`` lists them), and holds the entry point :func:`main`.

The CLI only parses flags, calls the Python API and renders; it computes nothing itself.
Bad input ends in one line on stderr and exit code 2, never a traceback. A command that writes
files gets ``--force`` and its outputs checked before it runs (:func:`_guard_outputs`;
docs/export.md, "Files cmperf writes").
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Mapping

# One BLAS thread unless the user asks for more, set before numpy loads: cmperf's arrays are a few
# thousand numbers, too small for BLAS threads, and OpenBLAS starting one per core costs ~0.1 s of
# CPU in every command (the wall time of a quiet machine does not show it; a busy one, or rate
# sweeps run side by side, pays it). The API, imported into another program, leaves its threads be.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import typer  # noqa: E402
from typer.core import TyperGroup

from .. import __version__
from ..errors import CmperfError

# Each command: the module that defines it and its typer app (or function). A module is
# imported, and its click command built, only when the command is looked up: `cmperf
# predict decode` builds predict alone (building every command took ~15 ms of start-up).
COMMANDS = {"hw": (".hw", "hw_app"), "model": (".model", "model_app"), "predict": (".predict", "predict_app"),
            "search": (".search", "search_app"), "compare": (".compare", "compare_app"),
            "validate": (".validate", "validate_cmd"), "plan": (".plan", "plan_cmd"),
            "simulate": (".simulate", "simulate_cmd"), "study": (".study", "study_cmd")}


class _Commands(Mapping):
    """The root's commands by name, each built on first look-up."""

    def __init__(self) -> None:
        self._built: dict = {}

    def __getitem__(self, name: str):
        if name not in COMMANDS:
            raise KeyError(name)
        if name not in self._built:
            module, attr = COMMANDS[name]
            obj = getattr(importlib.import_module(module, __package__), attr)
            if isinstance(obj, typer.Typer):
                cmd = typer.main.get_group(obj)
            else:
                single = typer.Typer(add_completion=False)
                single.command(name)(obj)
                cmd = typer.main.get_command(single)
            cmd.name = name
            _ascii_numbers(cmd)
            _guard_outputs(cmd)
            self._built[name] = cmd
        return self._built[name]

    def __iter__(self):
        return iter(COMMANDS)

    def __len__(self) -> int:
        return len(COMMANDS)


NUMBER_TYPES = ("IntParamType", "FloatParamType")  # click's number types (their ranges are subclasses)


def _ascii_numbers(cmd) -> None:
    """Make every number option and argument of ``cmd`` (and of its subcommands) refuse
    digits of other scripts: click reads numbers with int()/float(), which take '٣' as 3
    (typer 0.29 parsed them with pydantic, which refused them; typer 0.28 does not)."""
    import copy

    for p in cmd.params:
        if any(k.__name__ in NUMBER_TYPES for k in type(p.type).__mro__):
            p.type = _ascii_only(copy.copy(p.type))
    for sub in (getattr(cmd, "commands", None) or {}).values():
        _ascii_numbers(sub)


def _ascii_only(t):
    """The number type ``t`` (a copy: click's own is shared), converting ASCII text only and
    no digit groups: int()/float() read '1_000' as 1000, which nobody types for a count."""
    convert = t.convert

    def ascii_convert(value, param, ctx):
        if isinstance(value, str) and not value.isascii():
            t.fail(f"{value!r} is not a valid {t.name}: ASCII digits only", param, ctx)
        if isinstance(value, str) and "_" in value:
            t.fail(f"{value!r} is not a valid {t.name}: digits without '_' separators", param, ctx)
        return convert(value, param, ctx)

    t.convert = ascii_convert
    return t


FILE_FLAGS = ("--out", "--plot", "--html", "--deployment-out")  # options naming a file cmperf writes
DIR_FLAGS = ("--export",)  # options naming a directory cmperf writes files into


def _guard_outputs(cmd) -> None:
    """Give every command (and subcommand) that writes files a ``--force`` flag, and check its
    outputs before it runs: two flags naming one file, an export directory that cannot take the
    export or holds files of the user's (report.check_overwrite / export.check_export_dir: one
    line, exit 2). While it runs, each file written is said on stderr and --force lets cmperf
    replace files it did not write (report.writing)."""
    import functools

    from typer.core import TyperOption

    for sub in (getattr(cmd, "commands", None) or {}).values():
        _guard_outputs(sub)
    outputs = [(opt, p.name) for p in cmd.params if getattr(p, "param_type_name", "") == "option"
               for opt in p.opts if opt in FILE_FLAGS + DIR_FLAGS]
    if not outputs or cmd.callback is None or any(p.name == "force" for p in cmd.params):
        return
    cmd.params.append(TyperOption(param_decls=["--force"], is_flag=True, default=False,
                                  help="overwrite output files cmperf did not write (by default it refuses: "
                                       "docs/export.md, \"Files cmperf writes\")"))
    run = cmd.callback

    @functools.wraps(run)
    def guarded(*args, force: bool = False, **kwargs):
        from ..report import same_outputs, writing

        with writing(force=force, say=True):
            given = {flag: kwargs.get(name) for flag, name in outputs}
            same_outputs({f: v for f, v in given.items() if f in FILE_FLAGS})
            for flag in DIR_FLAGS:
                if given.get(flag) is not None:
                    _check_export(flag, given[flag], {f: v for f, v in given.items() if f in FILE_FLAGS})
            return run(*args, **kwargs)

    cmd.callback = guarded


def _check_export(flag: str, directory: str, files: dict) -> None:
    """An export directory, before any work: writable and free of the user's files
    (export.check_export_dir), and not also named by a file output."""
    import os

    from ..errors import ConfigError, short_path
    from ..export import _may_write, check_export_dir

    check_export_dir(directory, flag)
    where = os.path.realpath(directory)
    for f, path in files.items():
        if path is None or not str(path).strip():
            continue
        real = os.path.realpath(str(path))
        inside = os.path.dirname(real) == where and _may_write(os.path.basename(real))
        if real == where or inside:
            what = ": a file the export writes" if inside else ""
            raise ConfigError(f"{f} and {flag} name the same path ({short_path(path)}{what}): each output needs its own")


class _LazyGroup(TyperGroup):
    """The root group, whose commands are a :class:`_Commands`."""

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.commands = _Commands()

    def list_commands(self, ctx) -> list[str]:
        return list(self.commands)


app = typer.Typer(
    cls=_LazyGroup,
    no_args_is_help=True,
    add_completion=True,  # --install-completion / --show-completion (bash, zsh, fish, PowerShell): typer's
    pretty_exceptions_enable=False,
    help="Analytical performance model of DeepSeek-R1 serving on Huawei CloudMatrix384 (Ascend 910C).\n\n"
         "Example: cmperf predict decode --batch 64 --set chip.die.hbm_bandwidth_Bps=3.2e12",
)


def _version(value: bool):
    if value:
        typer.echo(f"cmperf {__version__}")
        raise typer.Exit()


@app.callback()
def _root(version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="print the version and exit")):
    pass



MAX_MESSAGE = 2000  # an error line longer than this is cut: no message echoes unbounded input


def main() -> None:
    """Entry point. Every bad input ends in one line ``cmperf: error: ...`` on stderr and exit
    code 2: our own input errors (CmperfError) and click's usage errors (a flag's type, a
    missing argument, an unknown command) alike. ``--help``, ``--version`` and a command given
    without arguments print their help as usual.

    The environment too: standard output closed, full or gone (a pipe whose reader left) is
    one line and exit 2; an output encoding that lacks a character cmperf prints ('±', 'µ')
    gets an ASCII spelling of it; Ctrl-C, SIGTERM and SIGHUP end the run with one line and
    exit 128 + the signal's number, any half-written output file removed (write_atomic)."""
    import importlib

    if sys.stdout is None or sys.stderr is None:  # started with a closed descriptor: nothing to print the result to
        if sys.stderr is not None:
            sys.stderr.write("cmperf: error: standard output is closed: nothing to write the result to\n")
        sys.exit(2)
    _spell_what_the_encoding_lacks()
    handlers = _signals_end_the_run()
    stdout = sys.stdout
    sys.stdout = _Output(stdout)
    click = importlib.import_module(typer.BadParameter.__module__)  # click's exceptions (typer may vendor click)
    help_error = getattr(click, "NoArgsIsHelpError", ())
    try:
        code = _run_app(click, help_error)
        sys.stdout.flush()
    except _Signal as e:
        _stop_output(stdout)
        sys.stderr.write(f"cmperf: interrupted ({e.name})\n")
        code = 128 + e.signum
    except OutputError as e:
        _stop_output(stdout)
        sys.stderr.write(f"cmperf: error: {e}\n")
        code = e.exit_code
    finally:  # as it was (main may run in a process that goes on: the tests)
        if isinstance(sys.stdout, _Output):
            sys.stdout = stdout
        _restore(handlers)
    sys.exit(code if isinstance(code, int) else 0)


def _run_app(click, help_error):
    """The app's exit code; click's and cmperf's errors end the process (:func:`_error`)."""
    code = 0
    try:
        code = app(standalone_mode=False)
    except help_error as e:
        e.show()  # the command's help, as typer shows it for a bare `cmperf predict`
        code = e.exit_code
    except click.BadParameter as e:
        typed = _typed(e)
        message = e.format_message()
        if typed is not None:  # click repeats what was typed (typer 0.28 whole): said once, cut to 40
            from ..errors import short

            message = message.replace(f"'{typed}'", repr(short(typed, 40))) + f" (got {short(typed, 40)!r})"
        _error(message, 2)
    except click.UsageError as e:
        _error(e.format_message(), 2)
    except click.ClickException as e:
        _error(e.format_message(), 2)
    except (getattr(click, "Abort", typer.Abort), typer.Abort):
        sys.stderr.write("cmperf: aborted\n")
        code = 1
    except OutputError:
        raise
    except CmperfError as e:
        _error(str(e), e.exit_code)
    return code


class OutputError(CmperfError):
    """Standard output cannot take what cmperf writes (closed, full, a pipe whose reader left)."""


class _Output:
    """sys.stdout, whose write errors (ENOSPC, EPIPE, EIO) are an :class:`OutputError`."""

    def __init__(self, stream):
        self._stream = stream

    def write(self, text):
        try:
            return self._stream.write(text)
        except OSError as e:
            raise OutputError(f"cannot write to standard output ({e.strerror or e})") from None

    def flush(self):
        try:
            self._stream.flush()
        except OSError as e:
            raise OutputError(f"cannot write to standard output ({e.strerror or e})") from None

    def __getattr__(self, name):
        return getattr(self._stream, name)


def _stop_output(stdout) -> None:
    """After standard output failed or the run was interrupted: nothing more reaches it (the
    interpreter's own flush at exit would fail again and print a traceback-like notice)."""
    import os

    sys.stdout = open(os.devnull, "w")
    try:
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, stdout.fileno())
        os.close(null)
    except (OSError, AttributeError, ValueError):  # not a real file (a test's capture)
        pass


class _Signal(BaseException):
    """SIGINT, SIGTERM or SIGHUP, raised where the run is so that cleanups run (not an Exception:
    nothing catches it by accident)."""

    def __init__(self, signum: int):
        import signal

        super().__init__(signum)
        self.signum = signum
        self.name = signal.Signals(signum).name


def _signals_end_the_run() -> dict:
    """Ctrl-C, SIGTERM and SIGHUP raise :class:`_Signal` (a signal the process was started
    ignoring, as nohup does, stays ignored); returns the handlers they had."""
    import signal

    def handler(signum, frame):
        raise _Signal(signum)

    old = {}
    for name in ("SIGINT", "SIGTERM", "SIGHUP"):
        sig = getattr(signal, name, None)
        if sig is not None and signal.getsignal(sig) is not signal.SIG_IGN:
            try:
                old[sig] = signal.signal(sig, handler)
            except ValueError:  # not the main thread
                pass
    return old


def _restore(handlers: dict) -> None:
    import signal

    for sig, h in handlers.items():
        signal.signal(sig, h)


# What an output encoding without these characters (PYTHONIOENCODING=ascii, a C locale) prints instead.
ASCII_SPELLING = {"±": "+/-", "µ": "u", "×": "x", "—": "-", "–": "-", "≤": "<=", "≥": ">=", "…": "...", "→": "->",
                  "≈": "~", "²": "^2", "⁷": "^7", "½": "1/2", "·": "*", "’": "'", "‘": "'", "“": '"', "”": '"', "−": "-"}


def _ascii_spelling(err: UnicodeEncodeError):
    return "".join(ASCII_SPELLING.get(c, "?") for c in err.object[err.start:err.end]), err.end


def _spell_what_the_encoding_lacks() -> None:
    """Standard output and error write what their encoding cannot hold in ASCII spelling."""
    import codecs

    codecs.register_error("cmperf-ascii", _ascii_spelling)
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        encoding = (getattr(stream, "encoding", None) or "").lower().replace("-", "")
        if reconfigure is not None and encoding not in ("utf8", "utf8sig"):
            try:
                reconfigure(errors="cmperf-ascii")
            except (ValueError, OSError):
                pass


def _typed(e) -> str | None:
    """What the user typed for the option a click BadParameter names (None: not found)."""
    opts = getattr(e.param, "opts", None) or []
    args = sys.argv[1:]
    for i, a in enumerate(args):
        for o in opts:
            if a == o and i + 1 < len(args):
                return args[i + 1]
            if a.startswith(o + "="):
                return a[len(o) + 1:]
    return None


def _error(message: str, code: int) -> None:
    from ..errors import short

    sys.stderr.write(f"cmperf: error: {short(message, MAX_MESSAGE)}\n")
    sys.exit(code)
