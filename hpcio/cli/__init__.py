"""The ``hpcio`` command line.

Each subcommand is one module of this package exposing ``HELP`` (one line),
``add_arguments(parser)`` and ``run(args) -> int`` (the exit code);
:mod:`hpcio.cli.main` discovers them, so adding a command is adding a module.
Commands stay thin: they parse arguments and call the public API.
"""
