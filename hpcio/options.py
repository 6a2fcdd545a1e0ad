"""Reader and writer options, checked before anything is read or written.

A format's reader and writer options are the named keyword parameters of its ``Reader``
and ``Writer`` (a ``**options`` catch-all adds none): an unknown one is refused with
the valid list before a file is opened or created, so a typo never costs a long read or
leaves partial output behind.

>>> check_options({"cache_dirr": None}, ["cache_dir", "lazy"], "mds reader")
Traceback (most recent call last):
...
hpcio.errors.OptionError: unknown mds reader option 'cache_dirr'; valid options: cache_dir, lazy
"""

from __future__ import annotations

import inspect
from collections.abc import Iterable, Mapping

from .errors import OptionError

__all__ = ["option_names", "check_options", "check_reader_options", "check_writer_options"]

_KEYWORD = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)


def option_names(callable_, skip: Iterable[str] = ("path",)) -> list[str]:
    """The named keyword parameters of ``callable_`` (a class: its ``__init__``), in
    order, without ``self`` and the names in ``skip``."""
    try:
        params = inspect.signature(callable_).parameters.values()
    except (TypeError, ValueError):  # no signature to read: nothing can be checked
        return []
    return [p.name for p in params if p.kind in _KEYWORD and p.name not in ("self", *skip)]


def check_options(options: Mapping, valid: Iterable[str], what: str) -> None:
    """OptionError naming the first key of ``options`` not in ``valid``, and the valid
    names, unless every key is valid."""
    valid = list(valid)
    unknown = [key for key in options if key not in valid]
    if unknown:
        names = ", ".join(sorted(valid)) or "none"
        raise OptionError(f"unknown {what} option {unknown[0]!r}; valid options: {names}")


def reader_option_names(reader) -> list[str]:
    """The options a user may give the reader class ``reader``."""
    return option_names(reader, skip=("path",))


def check_reader_options(module, options: Mapping, extra: Iterable[str] = ()) -> None:
    """Refuse options the reader of format ``module`` does not take (``extra``: further
    names the caller handles itself)."""
    check_options(options, [*reader_option_names(module.Reader), *extra], f"{module.NAME} reader")


def check_writer_options(module, options: Mapping, skip: Iterable[str] = ("path",)) -> None:
    """Refuse options the writer of format ``module`` does not take (``skip``: names the
    caller sets itself, which the user may not)."""
    check_options(options, option_names(module.Writer, skip), f"{module.NAME} writer")
