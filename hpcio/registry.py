"""The format registry: one place that knows every format by name.

A format is a module exposing the same names (so the CLI and the tests never
special-case one): ``NAME``, ``CAPABILITIES``, ``sniff(path)``, ``Reader`` and ``Writer``,
and optional hooks with fixed signatures; :mod:`hpcio.formats.contract` states them as
protocols and :func:`check_format` checks a module against them.  Built-in formats are
registered by module path and imported on first use, so ``import hpcio`` stays cheap and
optional backends (zarr, h5py) are only imported when their format is used.  Installed
distributions add formats through the entry-point group ``hpcio.formats``, read on the
first lookup of an unknown name.
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType

from ._struct import Struct
from .errors import (
    CapabilityError,
    FormatContractError,
    FormatPluginError,
    FormatSniffError,
    HpcioError,
    UnknownFormatError,
)

__all__ = [
    "Capabilities",
    "register_format",
    "unregister_format",
    "get_format",
    "available_formats",
    "sniff_format",
    "load_libraries",
    "check_format",
    "format_hook",
    "plugin_errors",
    "ENTRY_POINT_GROUP",
]


class Capabilities(Struct):
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

    _fields = ("random_access", "append", "partial_read", "batch_read")
    _defaults = {"random_access": True, "append": False, "partial_read": False, "batch_read": False}
    __slots__ = _fields
    random_access: bool
    append: bool
    partial_read: bool
    batch_read: bool

    def to_json(self) -> dict:
        return self._asdict()


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
# name -> module, import path, or (for installed packages) importlib.metadata.EntryPoint
_registered: dict = dict(_BUILTIN)

#: The entry-point group through which installed distributions register formats, as
#: numcodecs codecs do: ``[project.entry-points."hpcio.formats"] myfmt = "mypkg.myfmt"``.
ENTRY_POINT_GROUP = "hpcio.formats"
_REQUIRED = ("NAME", "CAPABILITIES", "sniff", "Reader", "Writer")
_entry_points_scanned = False
_plugin_errors: dict[str, HpcioError] = {}  # format name -> why its entry point failed


def register_format(module: ModuleType | str, name: str | None = None) -> None:
    """Register a format module (or its import path) under ``name`` (default ``NAME``).

    A module is checked against the format contract (:func:`check_format`) now, an
    import path when first used; FormatContractError lists the problems found.
    """
    if isinstance(module, str):
        if name is None:
            module = importlib.import_module(module)
        else:
            _registered[name] = module
            return
    _require_contract(module, f"format module {getattr(module, '__name__', module)!r}")
    _registered[name or module.NAME] = module


def unregister_format(name: str) -> None:
    """Forget the format registered as ``name`` (a no-op if there is none)."""
    _registered.pop(name, None)


def check_format(module) -> list[str]:
    """The ways ``module`` breaks the format contract (:mod:`hpcio.formats.contract`)."""
    from .formats.contract import check_format as check

    return check(module)


def _require_contract(module, what: str) -> None:
    problems = check_format(module)
    if problems:
        raise FormatContractError(f"{what} breaks the format contract: " + "; ".join(problems))


def _scan_entry_points() -> None:
    """Add the formats of the ``hpcio.formats`` entry points, once, without importing
    them.  Registered names win: an installed package never replaces a built-in format."""
    global _entry_points_scanned
    if _entry_points_scanned:
        return
    _entry_points_scanned = True
    from importlib.metadata import entry_points

    for ep in entry_points(group=ENTRY_POINT_GROUP):
        if ep.name in _registered or ep.name in _ALIASES:
            _plugin_errors.setdefault(ep.name, FormatPluginError(
                f"{_describe(ep)} names the format {ep.name!r}, which is already registered; ignored"))
        else:
            _registered[ep.name] = ep


def _describe(ep) -> str:
    dist = getattr(ep, "dist", None)
    owner = f"distribution {dist.name} {dist.version}" if dist is not None else "an unknown distribution"
    return f"entry point {ep.name} = {ep.value} (group {ENTRY_POINT_GROUP}) of {owner}"


def _load_entry_point(name: str, ep) -> ModuleType:
    try:
        module = ep.load()
    except Exception as exc:  # a broken plugin must say which one it is, whatever it raised
        error: HpcioError = FormatPluginError(f"{_describe(ep)} fails to import: {type(exc).__name__}: {exc}")
        _plugin_errors[name] = error
        raise error from exc
    problems = check_format(module)
    if not problems and module.NAME != name:
        problems = [f"its NAME is {module.NAME!r}, not the entry point's name"]
    if problems:
        error = FormatContractError(f"{_describe(ep)} breaks the format contract: " + "; ".join(problems))
        _plugin_errors[name] = error
        raise error
    return module


def plugin_errors() -> dict[str, HpcioError]:
    """Format name -> the error of each ``hpcio.formats`` entry point that failed to load
    so far (or names a format already registered)."""
    _scan_entry_points()
    return dict(_plugin_errors)


def available_formats() -> list[str]:
    """Names of the registered formats, in sniffing order (the built-in ones first, then
    those of installed packages, which are listed but not imported)."""
    _scan_entry_points()
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
    if entry is None and not _entry_points_scanned:
        _scan_entry_points()
        entry = _registered.get(key)
    if entry is None:
        raise UnknownFormatError(
            f"unknown format {name!r}; known formats: {', '.join(_registered)}"
        )
    if isinstance(entry, str):
        module = importlib.import_module(entry)
        if _BUILTIN.get(key) == entry:
            _check_required(module)
        else:
            _require_contract(module, f"format module {entry!r}")
        _registered[key] = entry = module
    elif not isinstance(entry, ModuleType) and hasattr(entry, "load") and hasattr(entry, "group"):
        _registered[key] = entry = _load_entry_point(key, entry)
    return entry


def _check_required(module: ModuleType) -> None:
    """The names every format must have; a built-in format's optional hooks are checked
    by the conformance suite (``FormatTests.test_contract``) and where they are called."""
    missing = [attr for attr in _REQUIRED if not hasattr(module, attr)]
    if missing:
        raise FormatContractError(f"format module {module.__name__} lacks {', '.join(missing)}")


def format_hook(module: ModuleType, hook: str):
    """The optional hook ``hook`` (``inspect``, ``verify``, ...) of a format module.

    CapabilityError when the format has none; FormatContractError when its signature is
    not the contract's, rather than a TypeError from deep inside the call.
    """
    func = getattr(module, hook, None)
    if func is None:
        raise CapabilityError(f"format {module.NAME!r} has no {hook}")
    prefix = f"{getattr(module, '__name__', repr(module))}.{hook}"
    problems = [p for p in check_format(module) if p.startswith(prefix) and p[len(prefix):][:1] in ("(", " ")]
    if problems:
        raise FormatContractError(f"format {module.NAME!r}: " + "; ".join(problems))
    return func


def sniff_format(path: str | os.PathLike) -> ModuleType:
    """The first registered format whose ``sniff(path)`` says yes."""
    path = os.fspath(path)
    if not os.path.exists(path):
        from .errors import ShardNotFoundError

        raise ShardNotFoundError("no such file or directory", path=path)
    tried = set()
    for scan in (False, True):  # installed packages' formats only if no built-in claims it
        if scan:
            _scan_entry_points()
        for name in [n for n in _registered if n not in tried]:
            tried.add(name)
            try:
                module = get_format(name)
            except (ImportError, FormatContractError):
                continue  # a format that cannot load cannot claim the path
            if module.sniff(path):
                return module
    broken = "".join(f"; {name} did not load: {err}" for name, err in _plugin_errors.items())
    raise FormatSniffError(
        f"cannot tell the format; name it (format= in Python, --format or --from on the command line): one of "
        f"{', '.join(_registered)}{broken}", path=path
    )


def load_libraries(names) -> None:
    """Import now the libraries the formats ``names`` would import on first use (their
    optional ``load_libraries()``), e.g. before a timed job starts."""
    for name in sorted(set(names)):
        hook = getattr(get_format(name), "load_libraries", None)
        if hook is not None:
            hook()
