"""Entry points: ``hpcio`` (:func:`main`) and ``hpcio-convert`` (:func:`convert_main`).

Subcommands are discovered from the modules of :mod:`hpcio.cli`: every public module
other than this one is a command named after it (``_`` becomes ``-``) and exposes
``HELP``, ``add_arguments(parser)`` and ``run(args) -> int``.

Warnings print as one line, ``hpcio: warning: <message>``, without Python's source
line; ``--traceback`` keeps Python's own format.  The entry point owns its process, so
it may change how warnings show; the library never does.

Errors hpcio raises on purpose (:class:`hpcio.HpcioError`) and operating-system errors
(missing file, permission denied) are user errors: one line on stderr and exit code 1
(2 for an unknown option, a usage error as argparse's own are).
``--traceback`` shows the full traceback instead.  Anything else is a bug and keeps its
traceback.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import pkgutil
import sys
import warnings
from types import ModuleType

from .._version import __version__
from ..errors import HpcioError, MissingDependencyError, OptionError
from ._parser import new_parser

__all__ = ["main", "convert_main", "build_parser", "command_modules"]

_NOT_COMMANDS = {"main"}
_REQUIRED = ("HELP", "add_arguments", "run")


class _Unavailable:
    """Stands in for a command module that failed to import, so the rest still work."""

    def __init__(self, name: str, error: BaseException):
        self.name = name
        self.error = error
        self.HELP = f"(unavailable: {_one_line(error)})"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("rest", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)

    def run(self, args: argparse.Namespace) -> int:
        raise MissingDependencyError(
            f"the {self.name!r} command cannot load: {_one_line(self.error)}"
        ) from self.error


def command_modules() -> dict[str, ModuleType | _Unavailable]:
    """Command name -> module, for every command module of :mod:`hpcio.cli`, sorted."""
    from .. import cli

    commands: dict[str, ModuleType | _Unavailable] = {}
    for info in sorted(pkgutil.iter_modules(cli.__path__), key=lambda m: m.name):
        if info.name.startswith("_") or info.name in _NOT_COMMANDS:
            continue
        command = info.name.replace("_", "-")
        try:
            module = importlib.import_module(f"{cli.__name__}.{info.name}")
        except Exception as exc:  # one broken command must not take the others down
            commands[command] = _Unavailable(command, exc)
            continue
        missing = [attr for attr in _REQUIRED if not hasattr(module, attr)]
        if missing:
            commands[command] = _Unavailable(
                command, TypeError(f"module {module.__name__} lacks {', '.join(missing)}")
            )
        else:
            commands[command] = module
    return commands


def _add_common(parser: argparse.ArgumentParser, default=False) -> None:
    parser.add_argument(
        "--traceback",
        action="store_true",
        default=default,
        help="show the full traceback of an error instead of one line",
    )


def build_parser() -> argparse.ArgumentParser:
    """The ``hpcio`` parser with one subparser per discovered command."""
    parser = new_parser(
        prog="hpcio",
        description="Convert, stage and read training-data shards on HPC clusters.",
    )
    parser.add_argument("--version", action="version", version=f"hpcio {__version__}")
    _add_common(parser)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, module in command_modules().items():
        cmd = sub.add_parser(name, help=module.HELP, description=module.HELP)
        # SUPPRESS: given after the command, it must not reset one given before it
        _add_common(cmd, default=argparse.SUPPRESS)
        module.add_arguments(cmd)
        cmd.set_defaults(_module=module)
    return parser


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


@contextlib.contextmanager
def _warnings_in_one_line(prog: str):
    """Show each warning as ``prog: warning: message`` on stderr while the command runs."""

    def show(message, category, filename, lineno, file=None, line=None):
        print(f"{prog}: warning: {_one_line(message)}", file=file or sys.stderr, flush=True)

    with warnings.catch_warnings():
        warnings.showwarning = show
        yield


def _run(module, args: argparse.Namespace, prog: str) -> int:
    try:
        if args.traceback:
            return int(module.run(args) or 0)
        with _warnings_in_one_line(prog):
            return int(module.run(args) or 0)
    except OptionError as exc:  # a usage error, found before any input was read
        if args.traceback:
            raise
        print(f"{prog}: error: {_one_line(exc)}", file=sys.stderr)
        return 2
    except (HpcioError, OSError) as exc:
        if args.traceback:
            raise
        print(f"{prog}: error: {_one_line(exc)}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return 130


def main(argv: list[str] | None = None) -> int:
    """Run ``hpcio`` with ``argv`` (default ``sys.argv[1:]``); return the exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    return _run(args._module, args, parser.prog)


def convert_main(argv: list[str] | None = None) -> int:
    """``hpcio-convert``: the ``convert`` command as a program of its own.

    It is the entry point MPI launchers run (``mpiexec -n 64 hpcio-convert ...``).
    """
    module = command_modules().get("convert")
    if module is None or isinstance(module, _Unavailable):
        why = "" if module is None else f": {_one_line(module.error)}"
        print(
            f"hpcio-convert: error: conversion is not available in this build{why}",
            file=sys.stderr,
        )
        return 2
    parser = new_parser(prog="hpcio-convert", description=module.HELP)
    parser.add_argument("--version", action="version", version=f"hpcio {__version__}")
    _add_common(parser)
    module.add_arguments(parser)
    args = parser.parse_args(argv)
    return _run(module, args, parser.prog)


if __name__ == "__main__":
    sys.exit(main())
