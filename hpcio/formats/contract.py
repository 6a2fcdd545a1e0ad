"""The typed contract of a format module, and :func:`check_format`, which enforces it.

A format is a module (or any object with these attributes) satisfying :class:`Format`.
Optional capabilities are further protocols; a module offers one by defining its names,
and then they must have the signatures given here, because the CLI and the converter call
them without special-casing a format.  :func:`check_format` compares every name a module
defines against these protocols; :func:`hpcio.registry.register_format` refuses a module
it finds problems in, and ``FormatTests.test_contract`` runs it for every format.

Signatures are compared by what a caller relies on: the number and kind of the
positional parameters (their names are free) and the defaults of those a caller may leave
out, every keyword parameter of the protocol present by name with the same default (a
protocol parameter without default may get one), and no extra parameter the caller would
not pass unless it has a default.  Where a protocol takes ``**options``, the
implementation may instead name the options it knows.
"""

from __future__ import annotations

import inspect
import os
import types
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import numpy as np

from ..registry import Capabilities
from .reports import InspectReport, VerifyReport

__all__ = [
    "Format",
    "LoadsLibraries",
    "Inspectable",
    "Verifiable",
    "ShardedWriting",
    "ShardWriter",
    "EncodedRecords",
    "RecordEncoder",
    "RecordWriter",
    "PlacedRecords",
    "check_format",
]


class Format(Protocol):
    """What every format module exposes (:mod:`hpcio.registry` finds it by ``NAME``).

    ``Reader(path, **options)`` and ``Writer(path, **options)`` are subclasses of
    :class:`hpcio.formats.base.Reader` and :class:`~hpcio.formats.base.Writer` (or
    classes with the same methods).  A reader may also offer
    ``Reader.sample_nbytes(start=0, stop=None)``: an int64 array with the stored size of
    samples ``[start, stop)`` (to the end when ``stop`` is None), read from the index without
    touching the data, so the converter balances shards by bytes (without it, sizes are
    estimated from the file sizes).  The converter asks for windows of samples, so that
    no process holds the size of every sample; a sample's size is the same in any window.
    """

    NAME: str
    CAPABILITIES: Capabilities
    Reader: type
    Writer: type

    def sniff(self, path: str | os.PathLike) -> bool:
        """True when ``path`` holds a dataset of this format; cheap (a few bytes read)."""


class LoadsLibraries(Protocol):
    def load_libraries(self) -> None:
        """Import now the libraries the reader and writer import on first use, so a timed
        job does not pay for it (:func:`hpcio.registry.load_libraries`)."""


class Inspectable(Protocol):
    def inspect(self, path: str | os.PathLike) -> InspectReport:
        """What the dataset at ``path`` holds, without decoding its samples."""


class Verifiable(Protocol):
    def verify(self, path: str | os.PathLike, *, allow_pickle: bool = False,
               max_errors: int = 1000) -> VerifyReport:
        """Decode every sample and compare every checksum the format stores.

        Never raises for damaged data: each problem becomes an entry of ``errors`` located
        with :func:`hpcio.formats.reports.problem`, and checking goes on (at most
        ``max_errors`` entries are kept; ``ok`` is False if there was any).  Values that
        run code when decoded (pickles) are checked but not decoded unless
        ``allow_pickle``.
        """


class ShardedWriting(Protocol):
    """How :mod:`hpcio.convert` writes one dataset from many processes.

    The format's ``Writer`` also satisfies :class:`ShardWriter`; the converter does the
    rest (temporary names, fsync, rename, resume, publishing the directory atomically).
    """

    def merge_index(self, directory: str | os.PathLike, parts: Sequence[dict | None],
                    **options) -> Any:
        """Write the dataset-level index of ``directory`` from ``parts``, the
        ``index_part()`` dicts in shard order, atomically (temporary name, fsync,
        rename).  A format without a dataset index (self-describing shards) only checks
        that the parts' files exist."""


class ShardWriter(Protocol):
    def __init__(self, path: str | os.PathLike, *, shard_id: int, num_shards: int,
                 **options) -> None:
        """Write every sample received into the single shard ``shard_id`` of
        ``num_shards`` inside the directory ``path`` (no size-based roll-over) and no
        dataset-level index.  The shard's bytes depend only on the samples, ``shard_id``,
        ``num_shards`` and the options (no times, host names or process ids), so any
        number of processes produce identical files."""

    def index_part(self) -> dict | None:
        """After ``close()``: a JSON-able dict describing the shard written (for MDS its
        ``index.json`` entry), None when the shard received no sample and has no file."""


class EncodedRecords(Protocol):
    """With :class:`ShardedWriting`: the converter encodes each sample on the rank that
    read it and sends the owner of its shard the record bytes, not the sample.  The
    format's ``Writer`` also satisfies :class:`RecordWriter`."""

    def record_options(self, sample: Mapping, **options) -> dict:
        """The writer options that fix what a writer would take from ``sample`` as its
        first one (MDS: the columns), ``{}`` when ``options`` already fix it; raises what
        that writer would raise for ``sample``."""

    def record_encoder(self, path: str | os.PathLike, **options) -> RecordEncoder:
        """The encoder of the records ``Writer(path, **options)`` would store."""


class RecordEncoder(Protocol):
    def record(self, sample: Mapping, number: int) -> bytes:
        """The bytes the writer stores for ``sample``, raising the same errors
        (``number`` names the sample in them)."""


class RecordWriter(Protocol):
    def write_record(self, record) -> None:
        """Append a record (any bytes-like object) as ``write`` would have."""


class PlacedRecords(Protocol):
    """With :class:`EncodedRecords`: each rank writes the records it made straight into
    their shard's file, and only their lengths cross between ranks."""

    def record_layout(self, shard_id: int, lengths: np.ndarray, **options) -> tuple | None:
        """``(file name, head, index part)`` of the shard ``shard_id`` whose records, in
        order, have ``lengths`` (at least one), when ``Writer(shard_id=...)`` would write
        it as one file holding ``head`` then the records back to back, ``index part``
        being its ``index_part()``; None when these options make the file something else
        (MDS: a whole-shard compression, or file hashes other than ``xxh3_64``)."""

    def record_digests(self, index: dict, files: dict) -> dict:
        """Optional: ``index`` completed with checksums of the shard's published
        ``files`` (``{name: {"bytes", "xxh3"}}``), which no single rank wrote whole."""


# --- checking -----------------------------------------------------------------------------
_MODULE_HOOKS = {  # module-level hook -> the protocol defining it
    "sniff": Format,
    "load_libraries": LoadsLibraries,
    "inspect": Inspectable,
    "verify": Verifiable,
    "merge_index": ShardedWriting,
    "record_options": EncodedRecords,
    "record_encoder": EncodedRecords,
    "record_layout": PlacedRecords,
    "record_digests": PlacedRecords,
}
_POSITIONAL = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
_BY_KEYWORD = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
_EMPTY = inspect.Parameter.empty


def _protocol_signature(protocol: type, name: str) -> inspect.Signature:
    """The signature a protocol gives ``name``, without ``self`` and annotations (which
    are not compared, and would clutter the messages)."""
    sig = inspect.signature(vars(protocol)[name])
    params = [p.replace(annotation=_EMPTY) for p in list(sig.parameters.values())[1:]]
    return sig.replace(parameters=params, return_annotation=_EMPTY)


def signature_problems(func, expected: inspect.Signature) -> list[str]:
    """Why ``func`` cannot be called as ``expected`` says (empty when it can)."""
    try:
        params = list(inspect.signature(func).parameters.values())
    except (TypeError, ValueError):
        return []  # a builtin without a signature: nothing to compare
    want = list(expected.parameters.values())
    problems = []
    want_pos = [p for p in want if p.kind in _POSITIONAL]
    have_pos = [p for p in params if p.kind in _POSITIONAL]
    var_pos = any(p.kind is inspect.Parameter.VAR_POSITIONAL for p in params)
    if len(have_pos) < len(want_pos) and not var_pos:
        problems.append(f"takes {len(have_pos)} positional parameters, the contract passes {len(want_pos)}")
    for w, p in zip(want_pos, have_pos):
        if w.default is not _EMPTY and p.default != w.default:  # the caller may leave it out
            problems.append(f"parameter {p.name!r} defaults to {_show(p.default)}, the contract says {w.default!r}")
    for p in have_pos[len(want_pos):]:
        if p.default is _EMPTY:
            problems.append(f"parameter {p.name!r} needs a default: the contract does not pass it")
    have = {p.name: p for p in params}
    var_kw = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params)
    for w in want:
        if w.kind is not inspect.Parameter.KEYWORD_ONLY:
            continue
        p = have.get(w.name)
        if p is None or p.kind not in _BY_KEYWORD:
            problems.append(f"lacks the keyword parameter {w.name!r}"
                            + (" (taking it through **kwargs hides its default)" if var_kw else ""))
        elif w.default is not _EMPTY and p.default != w.default:
            problems.append(f"parameter {w.name!r} defaults to {_show(p.default)}, the contract says {w.default!r}")
    takes_options = any(w.kind is inspect.Parameter.VAR_KEYWORD for w in want)
    wanted = {w.name for w in want}
    for p in params:
        if p.kind is inspect.Parameter.KEYWORD_ONLY and p.name not in wanted and p.default is _EMPTY \
                and not takes_options:
            problems.append(f"keyword parameter {p.name!r} needs a default: the contract does not pass it")
    return problems


def _show(default) -> str:
    return "nothing" if default is _EMPTY else repr(default)


def _problems(owner: str, name: str, func, protocol: type, attr: str | None = None) -> list[str]:
    if isinstance(func, types.ModuleType):
        return [f"{owner}.{name} is a module, not the {name} hook (import it under another name)"]
    if not callable(func):
        return [f"{owner}.{name} is not callable"]
    expected = _protocol_signature(protocol, attr or name)
    return [f"{owner}.{name}{expected}: {why}" for why in signature_problems(func, expected)]


def check_format(module) -> list[str]:
    """The ways ``module`` breaks the format contract; empty when it keeps it.

    Missing required names, required names of the wrong type, and optional hooks whose
    signature differs from their protocol's (an incomplete hook group counts: a
    ``record_encoder`` without ``Writer.write_record`` is a problem).
    """
    label = getattr(module, "__name__", repr(module))
    problems = [f"{label} lacks {attr}" for attr in ("NAME", "CAPABILITIES", "sniff", "Reader", "Writer")
                if not hasattr(module, attr)]
    if problems:
        return problems
    if not isinstance(module.NAME, str) or not module.NAME:
        problems.append(f"{label}.NAME must be a non-empty str, not {module.NAME!r}")
    if not isinstance(module.CAPABILITIES, Capabilities):
        problems.append(f"{label}.CAPABILITIES must be a hpcio.registry.Capabilities, "
                        f"not {type(module.CAPABILITIES).__name__}")
    for cls in ("Reader", "Writer"):
        if not isinstance(getattr(module, cls), type):
            problems.append(f"{label}.{cls} must be a class")
    if problems:
        return problems
    for name, protocol in _MODULE_HOOKS.items():
        if hasattr(module, name):
            problems += _problems(label, name, getattr(module, name), protocol)
    return problems + _writer_problems(module, label)


def _writer_problems(module, label: str) -> list[str]:
    writer = module.Writer
    owner = f"{label}.Writer"
    problems = []
    sample_nbytes = getattr(module.Reader, "sample_nbytes", None)
    if sample_nbytes is not None and callable(sample_nbytes):
        problems += [f"{label}.Reader.sample_nbytes(start=0, stop=None): {why}"
                     for why in signature_problems(sample_nbytes, _SAMPLE_NBYTES)]
    if hasattr(module, "merge_index"):
        problems += _method(owner, writer, "__init__", ShardWriter, "the sharded-writing hook")
        problems += _method(owner, writer, "index_part", ShardWriter, "the sharded-writing hook")
    encodes = [h for h in ("record_options", "record_encoder") if hasattr(module, h)]
    if encodes:
        group = "the encoded-record hook"
        problems += [f"{label} lacks {h}, part of {group}"
                     for h in ("record_options", "record_encoder", "merge_index") if not hasattr(module, h)]
        problems += _method(owner, writer, "write_record", RecordWriter, group)
    if hasattr(module, "record_layout") and not hasattr(module, "record_encoder"):
        problems.append(f"{label} has record_layout but not record_encoder, which the placed-record hook needs")
    return problems


_SELF = inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)
_SAMPLE_NBYTES = inspect.Signature([
    _SELF, *(inspect.Parameter(name, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=default)
             for name, default in (("start", 0), ("stop", None)))])


def _method(owner: str, cls: type, name: str, protocol: type, group: str) -> list[str]:
    method = getattr(cls, name, None)
    if method is None:
        return [f"{owner} lacks {name}, part of {group}"]
    expected = _protocol_signature(protocol, name)
    expected = expected.replace(parameters=[_SELF, *expected.parameters.values()])
    return [f"{owner}.{name}{_protocol_signature(protocol, name)}: {why}"
            for why in signature_problems(method, expected)]
