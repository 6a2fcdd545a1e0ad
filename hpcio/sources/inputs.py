"""The inputs of a conversion: which source datasets, how many samples, how big.

A source is one path a registered format, or a source-only format (a Hugging Face
dataset saved to disk), can read: a JSONL file, an MDS directory, a JINX shard, ...  A
directory that no format claims is expanded into the sorted entries inside it that one
does.  Measuring a source opens its reader once for the sample count and, when the
reader offers ``sample_nbytes()``, the stored size of every sample; otherwise the
source's bytes on disk are spread evenly over its samples.  Readers are opened with the
field options of :mod:`.fields` taken out of the reader options and applied to what
they read.
"""

from __future__ import annotations

import os
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import registry
from ..errors import FormatSniffError, HpcioError, OptionError, ShardNotFoundError, UnknownFormatError
from ..formats.base import even_sizes
from ..options import check_options, reader_option_names
from . import huggingface
from .fields import FIELD_OPTIONS, DecodedReader, FieldDecoder, split_options

__all__ = ["Source", "expand_sources", "measure_source", "source_totals", "size_windows", "sample_sizes",
           "disk_bytes", "ReaderCache", "BLOCK_BYTES", "SIZE_WINDOW", "open_reader", "source_format",
           "load_libraries", "check_source_options", "check_options_taken"]

# Formats the converter reads but hpcio does not write: consulted before the registry.
_SOURCE_ONLY = {huggingface.NAME: huggingface, **{alias: huggingface for alias in huggingface.ALIASES}}


def source_format(name: str):
    """The module that reads sources in format ``name``: a source-only format, else the
    registered format of that name."""
    module = _SOURCE_ONLY.get(name)
    if module is not None:
        return module
    try:
        return registry.get_format(name)
    except UnknownFormatError:
        known = ", ".join([*registry.available_formats(), huggingface.NAME])
        raise UnknownFormatError(f"unknown format {name!r}; known source formats: {known}") from None


def check_source_options(reader_options, format: str | None = None) -> None:
    """OptionError for a reader option that the reader of ``format`` (without it: of any
    source format) does not take, checked before any source is read.  (One format's
    reader options, given its module: :func:`hpcio.options.check_reader_options`.)"""
    if format is not None:
        modules = [source_format(format)]
    else:
        modules = list(dict.fromkeys(_SOURCE_ONLY.values()))
        for name in registry.available_formats():
            try:
                modules.append(registry.get_format(name))
            except (HpcioError, ImportError):
                continue  # a format that cannot load reads no source
    valid = dict.fromkeys(name for module in modules for name in reader_option_names(module.Reader))
    what = "reader" if format is None else f"{modules[0].NAME} reader"
    check_options(dict(reader_options or {}), [*valid, *FIELD_OPTIONS], what)


def check_options_taken(sources: list[Source], reader_options) -> None:
    """OptionError for a reader option that none of ``sources``' formats takes: each
    source's reader is given only the options of its format, so one that no format takes
    would otherwise change nothing, without a word."""
    _fields, options = split_options(reader_options)
    formats = sorted({source.format for source in sources})
    taken = {name for f in formats for name in reader_option_names(source_format(f).Reader)}
    unused = [key for key in options if key not in taken]
    if unused:
        raise OptionError(f"reader option {unused[0]!r} is taken by none of the sources' formats "
                          f"({', '.join(formats)}); their options: {', '.join(sorted(taken)) or 'none'}")


def _sniff(path: str):
    """The format module that claims ``path`` (FormatSniffError if none does)."""
    for module in dict.fromkeys(_SOURCE_ONLY.values()):
        if module.sniff(path):
            return module
    return registry.sniff_format(path)


def load_libraries(names) -> None:
    """Import now the libraries the source or output formats ``names`` import on first
    use (:func:`hpcio.registry.load_libraries`, source-only formats included)."""
    names = set(names)
    for name in sorted(names & set(_SOURCE_ONLY)):
        _SOURCE_ONLY[name].load_libraries()
    registry.load_libraries(names - set(_SOURCE_ONLY))


# Reader options the converter gives a source format unless the user gives them:
# a WebDataset sample's key is data (joins, lineage), which webdataset always yields.
_SOURCE_DEFAULTS = {"webdataset": {"include_key": True}}


def open_reader(source: Source, reader_options: dict | None = None):
    """A reader of ``source``: its format's reader given the reader options that format
    takes (sources of several formats share one set), wrapped in a
    :class:`~.fields.DecodedReader` when field options ask for (or default to) decoding."""
    field_options, options = split_options(reader_options)
    module = source_format(source.format)
    taken = set(reader_option_names(module.Reader))
    options = {**_SOURCE_DEFAULTS.get(module.NAME, {}), **{k: v for k, v in options.items() if k in taken}}
    reader = module.Reader(source.path, **options)
    try:
        decoder = FieldDecoder(field_options, source.path, source.format, reader)
    except BaseException:
        reader.close()
        raise
    return DecodedReader(reader, decoder) if decoder.active else reader


@dataclass(frozen=True)
class Source:
    """One input dataset: its path, format name and identity on disk."""

    path: str
    format: str
    nbytes: int
    mtime_ns: int

    def to_json(self) -> dict:
        return {"path": self.path, "format": self.format, "nbytes": self.nbytes, "mtime_ns": self.mtime_ns}


def disk_bytes(path: str) -> tuple[int, int]:
    """(total bytes, newest mtime in ns) of a file, or of every file under a directory."""
    if os.path.isfile(path):
        st = os.stat(path)
        return st.st_size, st.st_mtime_ns
    total, newest = 0, 0
    for root, dirs, files in os.walk(path):
        dirs.sort()
        for name in sorted(files):
            st = os.stat(os.path.join(root, name))
            total += st.st_size
            newest = max(newest, st.st_mtime_ns)
    return total, newest


def _source(path: str, fmt: str) -> Source:
    nbytes, mtime = disk_bytes(path)
    return Source(path=path, format=fmt, nbytes=nbytes, mtime_ns=mtime)


def expand_sources(paths, format: str | None = None) -> list[Source]:
    """The sources named by ``paths`` (files or directories), in the order given.

    With ``format`` every path is read as that format; otherwise each is sniffed, and a
    directory no format claims contributes the sorted files inside it that one does.
    """
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    sources: list[Source] = []
    for raw in paths:
        path = os.path.abspath(os.fspath(raw))
        if not os.path.exists(path):
            raise ShardNotFoundError("no such source file or directory", path=path)
        if format is not None:
            sources.append(_source(path, source_format(format).NAME))
            continue
        try:
            sources.append(_source(path, _sniff(path).NAME))
            continue
        except FormatSniffError:
            if not os.path.isdir(path):
                raise
        found = []
        for name in sorted(os.listdir(path)):
            if name.startswith("."):
                continue
            inner = os.path.join(path, name)
            try:
                found.append(_source(inner, _sniff(inner).NAME))
            except FormatSniffError:
                continue
        if not found:
            raise FormatSniffError("no readable dataset in this directory", path=path)
        sources.extend(found)
    return sources


# Samples whose sizes are asked of a reader at a time: no array of every sample's size.
SIZE_WINDOW = 1 << 16
# Samples a rank reads in one call when the format has no decoding units of its own: large
# enough for sequential reads, small enough that one block's samples are cheap to hold.
BLOCK_BYTES = 16 << 20


def measure_source(source: Source, reader_options: dict | None = None, reader=None) -> np.ndarray:
    """The stored size in bytes of every sample of ``source`` (int64 array).

    ``reader`` is an open reader of ``source`` to use (it is left open); otherwise one is
    opened with ``reader_options`` and closed here.
    """
    own = reader is None
    if own:
        reader = open_reader(source, reader_options)
    try:
        return sample_sizes(source, reader, 0, len(reader))
    finally:
        if own:
            reader.close()


def source_totals(source: Source, reader_options: dict | None = None,
                  window: int = SIZE_WINDOW) -> tuple[int, int]:
    """The number of samples of ``source`` and their stored bytes, summed ``window``
    sizes at a time (:func:`size_windows`)."""
    reader = open_reader(source, reader_options)
    try:
        return len(reader), sum(int(sizes.sum()) for _start, sizes, _blocks in size_windows(source, reader, window))
    finally:
        reader.close()


def size_windows(source: Source, reader, window: int = SIZE_WINDOW):
    """``(start, sizes, blocks)`` for consecutive windows of the samples of ``source``
    (its open ``reader``): the sizes of samples ``start ..`` (:func:`sample_sizes`), and
    the first samples of the blocks that start among them.  Blocks are what a conversion
    reads on one rank: the units the format decodes whole (Parquet row groups), else runs
    of about :data:`BLOCK_BYTES`.  The reader lets go of the pages it read for each
    window, so a pass over a source larger than memory keeps none of it resident."""
    n = len(reader)
    own = reader.block_starts()
    own = None if own is None else np.asarray(own, dtype=np.int64)
    offset, block = 0, -1  # bytes before the window, block of its last sample
    for start in range(0, n, window):
        stop = min(n, start + window)
        sizes = sample_sizes(source, reader, start, stop)
        reader.drop_pages()
        if own is not None:
            blocks = own[(own >= start) & (own < stop)]
        else:
            ends = offset + np.cumsum(sizes)
            index = (ends - sizes) // BLOCK_BYTES
            blocks = (np.flatnonzero(np.diff(index, prepend=block)) + start).astype(np.int64)
            offset, block = int(ends[-1]), int(index[-1])
        yield start, sizes, blocks


def sample_sizes(source: Source, reader, start: int, stop: int) -> np.ndarray:
    """The stored sizes of samples ``start .. stop`` of ``source`` (int64 array), from
    its open ``reader``: the format's own (``sample_nbytes``), else the bytes on disk
    spread evenly over the samples."""
    sizer = getattr(reader, "sample_nbytes", None)
    if sizer is not None:
        return np.asarray(sizer(start, stop), dtype=np.int64)
    return even_sizes(source.nbytes, len(reader), start, stop)


# Formats whose readers keep the index they build when opened in their ``cache_dir``.
_INDEXED_IN_CACHE_DIR = frozenset({"jsonl"})


class ReaderCache:
    """Open readers by source index, closing the least recently used beyond ``limit``
    (a rank reads from every source, and thousands of open files would exhaust the
    descriptor limit).

    ``index_dir``: where readers that build an index of their file when opened (JSON
    Lines' line index) keep it, unless the reader options say where.  Every process
    opening the source then maps the index the first one built, rather than holding and
    building its own."""

    def __init__(self, sources: list[Source], limit: int = 32, reader_options: Mapping | None = None,
                 index_dir: str | None = None):
        self.sources = sources
        self.limit = limit
        self.reader_options = dict(reader_options or {})
        self.index_dir = index_dir
        self._open: OrderedDict[int, Any] = OrderedDict()

    def get(self, index: int):
        reader = self._open.get(index)
        if reader is not None:
            self._open.move_to_end(index)
            return reader
        source = self.sources[index]
        options = self.reader_options
        if self.index_dir is not None and source.format in _INDEXED_IN_CACHE_DIR and "cache_dir" not in options:
            options = {**options, "cache_dir": self.index_dir}
        reader = open_reader(source, options)
        self._open[index] = reader
        if len(self._open) > self.limit:
            _, old = self._open.popitem(last=False)
            old.close()
        return reader

    def close(self) -> None:
        while self._open:
            _, reader = self._open.popitem()
            reader.close()
