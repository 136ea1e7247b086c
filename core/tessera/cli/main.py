"""The ``tessera`` command line: argument parsing, dispatch and error reporting.

Every subcommand lives in its own module (``compile``, ``run``, ``inspect``, ``plugins``,
``quantize``, ``export``).
Reports go to stdout and progress to stderr. A :class:`~tessera.errors.TesseraError`, a bad
argument or an unreadable file ends the command with exit code 1 and one ``error: ...`` line.
"""

from __future__ import annotations

import argparse
import sys
import traceback
import warnings
from collections.abc import Sequence
from typing import Any, NoReturn

from tessera.cli import compile as compile_cmd
from tessera.cli import export as export_cmd
from tessera.cli import inspect as inspect_cmd
from tessera.cli import new_plugin as new_plugin_cmd
from tessera.cli import plugins as plugins_cmd
from tessera.cli import quantize as quantize_cmd
from tessera.cli import run as run_cmd
from tessera.cli import tune as tune_cmd
from tessera.cli.examples import HelpFormatter, epilog
from tessera.cli.shapes import ArgumentError
from tessera.errors import TesseraError


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser that raises instead of printing usage and exiting with code 2."""

    def error(self, message: str) -> NoReturn:
        raise ArgumentError(f"{message} (see '{self.prog} --help')")


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("tessera")
    except PackageNotFoundError:
        return "unknown"


def build_parser() -> argparse.ArgumentParser:
    """The ``tessera`` parser with all subcommands."""
    parser = _Parser(prog="tessera",
                     description="Tessera: a deep-learning compiler with pip-installable backends.",
                     epilog=epilog(""), formatter_class=HelpFormatter)
    parser.add_argument("--version", action="version", version=f"tessera {_version()}")
    parser.add_argument("-v", "--verbose", action="store_true",
                        help="on an error, also print the traceback and its causes (a "
                             "plugin's own exception behind a PluginError)")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND",
                                       parser_class=_Parser)
    for module in (compile_cmd, run_cmd, inspect_cmd, tune_cmd, plugins_cmd, quantize_cmd,
                   export_cmd, new_plugin_cmd):
        module.add_parser(subparsers)
    for name, sub in subparsers.choices.items():
        sub.epilog, sub.formatter_class = epilog(name), HelpFormatter
    for sub in subparsers.choices.values():  # also accepted after the command
        sub.add_argument("-v", "--verbose", action="store_true", default=argparse.SUPPRESS,
                         help="print tracebacks on errors (and more detail where a command "
                              "has it)")
    return parser


def _show_warning(message: Any, category: type[Warning], filename: str, lineno: int,
                  file: Any = None, line: str | None = None) -> None:
    print(f"warning: {message}", file=sys.stderr)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``tessera`` command with ``argv`` (default: ``sys.argv[1:]``); the exit code."""
    parser = build_parser()
    args = None
    with warnings.catch_warnings():
        warnings.showwarning = _show_warning
        try:
            args = parser.parse_args(list(argv) if argv is not None else None)
            if args.command is None:
                parser.print_help(sys.stderr)
                return 1
            return int(args.handler(args))
        except SystemExit as e:  # --help and --version
            return e.code if isinstance(e.code, int) else 0
        except (TesseraError, ArgumentError) as e:
            verbose = args is not None and getattr(args, "verbose", False)
            if verbose:
                traceback.print_exception(e, file=sys.stderr)
            code = _fail(str(e))
            if not verbose and isinstance(e, TesseraError) and e.__cause__ is not None:
                print("(tessera --verbose shows the traceback of the cause)", file=sys.stderr)
            return code
        except BrokenPipeError:
            return _closed_stdout()
        except OSError as e:
            return _fail(f"{e.strerror or e}: {e.filename}" if e.filename else str(e))
        except KeyboardInterrupt:
            print("error: interrupted", file=sys.stderr)
            return 130
        except Exception as e:  # noqa: BLE001 - a bug: one line, the traceback on request
            if args is not None and getattr(args, "verbose", False):
                traceback.print_exception(e, file=sys.stderr)
                return _fail(f"internal error in tessera {args.command}: "
                             f"{type(e).__name__}: {e}")
            where = f" {args.command}" if args is not None else ""
            return _fail(f"internal error in tessera{where}: {type(e).__name__}: {e} (a bug "
                         f"in Tessera or a plugin; tessera{where} --verbose shows the "
                         f"traceback)")


def _closed_stdout() -> int:
    """The reader of stdout went away (``tessera plugins -v | head``): stop quietly, as
    ``cat`` does, with the status of a SIGPIPE. Python's own flush of stdout at exit would
    fail again, so stdout is pointed at /dev/null first."""
    import os

    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # no real stdout (a test's capture): nothing to redirect
        pass
    return 141


def _fail(message: str) -> int:
    """Print ``error: message`` to stderr (no traceback); the exit code 1.

    A message is one line, except when an error lists several findings at once (all unsupported
    ops of a model): those stay whole, under the ``error:`` line.
    """
    print(f"error: {message.strip() or 'unknown error'}", file=sys.stderr)
    return 1

if __name__ == "__main__":
    sys.exit(main())
