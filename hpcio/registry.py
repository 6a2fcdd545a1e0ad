"""The format registry: one place that knows every format by name.

A format is a module under :mod:`hpcio.formats` exposing the same names (so the CLI and
the tests never special-case one): ``NAME``, ``CAPABILITIES``, ``sniff(path)``,
``Reader`` and ``Writer``.  Built-in formats are registered by module path and imported
on first use, so ``import hpcio`` stays cheap and optional backends (zarr, h5py) are only
imported when their format is used.  A format whose reader or writer imports a library
on first use may also offer ``load_libraries()``, which imports it at once
(:func:`load_libraries`).
"""

from __future__ import annotations

import importlib
import os
from dataclasses import asdict, dataclass
from types import ModuleType

from .errors import FormatSniffError, UnknownFormatError

__all__ = [
    "Capabilities",
    "register_format",
    "unregister_format",
    "get_format",
    "available_formats",
    "sniff_format",
    "load_libraries",
]


@dataclass(frozen=True)
class Capabilities:
    """What a format's reader and writer can do.

    random_access
        ``ds[i]`` costs O(1) reads (an index exists), so global shuffle is cheap.
    append
        A writer can add samples to an existing dataset.
    partial_read
        A field can be read without decoding the others (lazy samples, columnar).
    batch_read
        ``Reader.read_many`` has a vectorised path, not a per-sample loop.
    """

    random_access: bool = True
    append: bool = False
    partial_read: bool = False
    batch_read: bool = False

    def to_json(self) -> dict:
        return asdict(self)


# Sniffing order matters: the most specific layouts first, plain line formats last.
_BUILTIN: dict[str, str] = {
    "mds": "hpcio.formats.mds",
    "jinx": "hpcio.formats.jinx",
    "webdataset": "hpcio.formats.webdataset",
    "zarr": "hpcio.formats.zarr",
    "hdf5": "hpcio.formats.hdf5",
    "parquet": "hpcio.formats.parquet",
    "msgpack": "hpcio.formats.msgpack",
    "imagefolder": "hpcio.formats.imagefolder",
    "jsonl": "hpcio.formats.jsonl",
}
_ALIASES = {"wds": "webdataset", "h5": "hdf5", "json": "jsonl"}
_registered: dict[str, str | ModuleType] = dict(_BUILTIN)

_REQUIRED = ("NAME", "CAPABILITIES", "sniff", "Reader", "Writer")


def register_format(module: ModuleType | str, name: str | None = None) -> None:
    """Register a format module (or its import path) under ``name`` (default ``NAME``)."""
    if isinstance(module, str):
        if name is None:
            module = importlib.import_module(module)
        else:
            _registered[name] = module
            return
    _check_module(module)
    _registered[name or module.NAME] = module


def unregister_format(name: str) -> None:
    """Forget the format registered as ``name`` (a no-op if there is none)."""
    _registered.pop(name, None)


def _check_module(module: ModuleType) -> None:
    missing = [attr for attr in _REQUIRED if not hasattr(module, attr)]
    if missing:
        raise TypeError(f"format module {module.__name__} lacks {', '.join(missing)}")


def available_formats() -> list[str]:
    """Names of the registered formats, in sniffing order."""
    return list(_registered)


def get_format(name: str) -> ModuleType:
    """The format module registered as ``name`` (aliases: wds, h5, json).

    >>> get_format("nope")
    Traceback (most recent call last):
    ...
    hpcio.errors.UnknownFormatError: unknown format 'nope'; known formats: mds, jinx, webdataset, zarr, hdf5, parquet, msgpack, imagefolder, jsonl
    """
    key = _ALIASES.get(name, name)
    entry = _registered.get(key)
    if entry is None:
        raise UnknownFormatError(
            f"unknown format {name!r}; known formats: {', '.join(_registered)}"
        )
    if isinstance(entry, str):
        module = importlib.import_module(entry)
        _check_module(module)
        _registered[key] = entry = module
    return entry


def sniff_format(path: str | os.PathLike) -> ModuleType:
    """The first registered format whose ``sniff(path)`` says yes."""
    path = os.fspath(path)
    if not os.path.exists(path):
        from .errors import ShardNotFoundError

        raise ShardNotFoundError("no such file or directory", path=path)
    for name in _registered:
        try:
            module = get_format(name)
        except ImportError:
            continue  # a format whose module is not available cannot claim the path
        if module.sniff(path):
            return module
    raise FormatSniffError(
        f"cannot tell the format; pass format= one of {', '.join(_registered)}", path=path
    )


def load_libraries(names) -> None:
    """Import now the libraries the formats ``names`` would import on first use (their
    optional ``load_libraries()``), e.g. before a timed job starts."""
    for name in sorted(set(names)):
        hook = getattr(get_format(name), "load_libraries", None)
        if hook is not None:
            hook()
