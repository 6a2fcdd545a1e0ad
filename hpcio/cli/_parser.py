"""The one argument-parser factory every ``hpcio`` command uses.

Prefix matching is off (``allow_abbrev=False``): with it, ``--shards 4`` would be taken
as ``--shards-multiple-of 4`` and a typo would silently become another option.
Subparsers are made with the parser's own class, so they inherit the rule.
"""

from __future__ import annotations

import argparse

__all__ = ["ArgumentParser", "new_parser"]


class ArgumentParser(argparse.ArgumentParser):
    """:class:`argparse.ArgumentParser` with ``allow_abbrev=False``."""

    def __init__(self, *args, **kwargs):
        kwargs["allow_abbrev"] = False
        super().__init__(*args, **kwargs)


def new_parser(**kwargs) -> ArgumentParser:
    """A parser for an ``hpcio`` command (``kwargs`` as for :class:`argparse.ArgumentParser`)."""
    return ArgumentParser(**kwargs)
