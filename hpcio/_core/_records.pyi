"""Sample dicts and columns built straight from MDS records (compiled)."""
from collections.abc import Callable, Iterator

import numpy as np
from numpy.typing import NDArray
from typing_extensions import disjoint_base

KIND_STR: int
KIND_BYTES: int
KIND_INT: int
KIND_JSON: int
KIND_VIEW: int
KIND_BYTES_LIST: int
KIND_BYTES_DICT: int
KIND_PICKLE: int
MAX_COLUMNS: int

def mds_samples(buf, starts: NDArray[np.int64], ends: NDArray[np.int64], names: tuple,
                sizes: tuple, kinds: tuple, cols: tuple, json_loads: Callable
                ) -> tuple[list[dict] | None, int]:
    """Dicts of columns ``cols`` of the records ``buf[starts[j]:ends[j]]``; ``(samples, -1)``,
    or ``(None, j)`` when record j is malformed or a value cannot be built."""

@disjoint_base
class RecordSamples(Iterator[dict]):
    """The sample dicts of the records ``buf[starts[j]:ends[j]]`` built one at a time (the
    arguments of :func:`mds_samples`); record j, when the kernel cannot build it, is
    ``fallback(j)``."""
    def __new__(cls, buf, starts: NDArray[np.int64], ends: NDArray[np.int64], names: tuple,
                sizes: tuple, kinds: tuple, cols: tuple, json_loads: Callable,
                fallback: Callable[[int], dict]) -> RecordSamples: ...
    def __iter__(self) -> RecordSamples: ...
    def __next__(self) -> dict: ...

@disjoint_base
class RecordPacker:
    """Packs the MDS record of a sample dict of plain values (``str``/``int``/``json``
    columns of those types, ``bytes`` values in any column); ``pack`` returns None for
    anything else, which the caller's general encoder then packs or refuses."""
    def __init__(self, names: tuple, kinds: tuple, sizes: tuple, json_dumps: Callable[[object], str]) -> None: ...
    def pack(self, sample: object) -> bytes | None: ...

def mds_samples_pread(fd: int, whole, starts: NDArray[np.int64], ends: NDArray[np.int64], names: tuple,
                      sizes: tuple, kinds: tuple, cols: tuple, json_loads: Callable
                      ) -> tuple[list[dict] | None, int]:
    """:func:`mds_samples` reading each record's values from ``fd`` with ``pread``; KIND_VIEW
    values slice ``whole`` (the file's mapping) untouched."""

def mds_samples_files(wholes: list, file_of: NDArray[np.int32], starts: NDArray[np.int64],
                      ends: NDArray[np.int64], names: tuple, sizes: tuple, kinds: tuple, cols: tuple,
                      json_loads: Callable) -> tuple[list[dict] | None, int]:
    """:func:`mds_samples` for records ``wholes[file_of[j]][starts[j]:ends[j]]`` of several
    mapped files, in the order given."""

def mds_samples_pread_files(fds: NDArray[np.int32], wholes: list, file_of: NDArray[np.int32],
                            starts: NDArray[np.int64], ends: NDArray[np.int64], names: tuple, sizes: tuple,
                            kinds: tuple, cols: tuple, json_loads: Callable) -> tuple[list[dict] | None, int]:
    """:func:`mds_samples_pread` for records of several files: record j lies in
    ``fds[file_of[j]]``, whose mapping is ``wholes[file_of[j]]``."""

def mds_columns_pread(fd: int, starts: NDArray[np.int64], ends: NDArray[np.int64], sizes: tuple,
                      copied: tuple, viewed: tuple, path: str | None = None
                      ) -> tuple[list[tuple[NDArray[np.uint8], NDArray[np.int64]]] | None,
                                 list[tuple[NDArray[np.int64], NDArray[np.int64]]] | None, int]:
    """Columns of the records ``[starts[j], ends[j])`` of file ``fd`` read with ``pread``:
    ``(data, offsets)`` per column of ``copied``, ``(begin, end)`` file offsets per column of
    ``viewed``, and -1; or ``(None, None, j)`` when record j is malformed.  A read that fails
    or ends early raises, naming ``path`` and the byte offset."""

def mds_columns(bufs: list, buf_of: NDArray[np.int32], starts: NDArray[np.int64],
                ends: NDArray[np.int64], sizes: tuple, cols: tuple
                ) -> tuple[list[tuple[NDArray[np.uint8], NDArray[np.int64]]] | None, int]:
    """Columns ``cols`` of the records ``bufs[buf_of[j]][starts[j]:ends[j]]`` as
    ``(data, offsets)`` pairs; ``(columns, -1)``, or ``(None, j)`` when record j is
    malformed."""

def mds_lengths(bufs: list, buf_of: NDArray[np.int32], starts: NDArray[np.int64],
                ends: NDArray[np.int64], sizes: tuple, col: int, utf8: bool,
                first: NDArray[np.int64] | None = None
                ) -> tuple[NDArray[np.int64] | None, int]:
    """``len()`` of column ``col``'s value in each record (bytes, or characters with
    ``utf8``), without copying or decoding, and where it starts in its record into
    ``first``; ``(lengths, -1)``, or ``(None, j)`` when record j is malformed or its value
    is not UTF-8."""

def utf8_lengths(data, offsets: NDArray[np.uint64]) -> NDArray[np.int64]:
    """Characters (``len(str)``) of the UTF-8 values ``data[offsets[j]:offsets[j + 1]]``;
    raises DecodeError naming the value and byte where one is not UTF-8."""

def loads_exact(buf) -> object:
    """The JSON document in ``buf`` as Python's json reads it: orjson, or Python's json
    for text that may hold an integer orjson would read as a float."""

def json_wide_int(buf) -> bool:
    """Whether the JSON text in ``buf`` may hold an integer orjson would read as a float
    (below -2^63, or 2^64 and more): a run of digits out of that range."""

def loads_json_values(buf, offsets: NDArray[np.int64], json_loads: Callable) -> list | None:
    """The JSON values ``buf[offsets[j]:offsets[j + 1]]``, each decoded by its own
    ``json_loads`` call from C, or None when one of them does not decode (decode them one by
    one to find it)."""

def json_columns(data, offsets: NDArray[np.int64]) -> tuple[list[bytes], list[tuple]]:
    """The JSON objects ``data[offsets[j]:offsets[j + 1]]`` split into one column per key
    (key names as JSON strings; ``("str" | "json", data, offsets)``, ``("int" | "float" |
    "bool", array)`` or ``("list", offsets, elements)`` per key).  ValueError names the
    document and byte of one that is not JSON or lacks the first document's keys."""

def bytes_list(buf) -> list[bytes]:
    """The MDS ``list[bytes]`` value in ``buf``; DecodeError naming the fault."""

def bytes_dict(buf) -> dict:
    """The MDS ``dict[bytes]`` value in ``buf``; DecodeError naming the fault."""

def values_of_kind(buf, starts: NDArray[np.int64], ends: NDArray[np.int64], kind: int,
                   json_loads: Callable) -> list:
    """The values of kind ``kind`` (not KIND_VIEW) at ``buf[starts[j]:ends[j]]``; raises the
    first value's error."""
