"""Where one sample lies in a dataset or source, format by format.

:func:`place` opens the format's reader and reads its own index: the offset table of an
MDS shard, of a JINX file or of a MessagePack file, the member headers of a tar, the
line index of a JSON Lines file, the row groups of Parquet.  Formats that store samples
in compressed chunks (Zarr, HDF5) or as whole files (image folders) have no byte range
of one sample: the place says what is known instead.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

__all__ = ["Place", "place"]

# Bytes counted for newlines at a time while a JSON Lines sample's line is found.
_COUNT_CHUNK = 64 << 20


@dataclass(frozen=True)
class Place:
    """Where a sample lies: bytes ``[start, stop)`` of ``file`` when known, with the
    1-based ``line`` (JSON Lines, JINX), the 0-based ``row`` within ``file`` (Parquet
    rows, MessagePack objects) or the tar ``members`` that hold it; ``note`` says what
    the range is, or why there is none."""

    file: str | None
    start: int | None = None
    stop: int | None = None
    line: int | None = None
    row: int | None = None
    members: tuple[str, ...] | None = None
    note: str = ""

    def to_json(self) -> dict:
        return {"file": self.file, "start": self.start, "stop": self.stop, "line": self.line,
                "row": self.row, "members": None if self.members is None else list(self.members),
                "note": self.note}


def place(path: str, format: str, index: int, reader_options: dict | None = None) -> Place:
    """Where sample ``index`` (in ``[0, len)``) of the dataset ``path`` in ``format`` lies."""
    from ..sources.fields import split_options
    from ..sources.inputs import source_format

    _fields, options = split_options(reader_options)
    reader = source_format(format).Reader(path, **options)
    try:
        where = _PLACES.get(format)
        if where is None:
            return Place(None, note=f"sample {index} of the {format} dataset; {format} keeps no byte "
                                    "range of one sample")
        return where(reader, index)
    finally:
        reader.close()


def _mds(reader, i: int) -> Place:
    starts = np.concatenate([[0], np.cumsum(reader.shard_sizes())])
    k = int(np.searchsorted(starts, i, side="right")) - 1
    shard = reader.cache.get(k)
    _lidx, starts, ends = shard.extents([i - shard.base])
    start, stop = int(starts[0]), int(ends[0])
    if shard.in_file:
        note = f"record {i - shard.base} of the shard's offset table"
    else:
        note = (f"record {i - shard.base} of the shard's offset table, in the shard decompressed "
                f"(the file is {shard.info.compression.name}-compressed whole)")
    return Place(shard.path, start, stop, note=note)


def _jinx(reader, i: int) -> Place:
    shard, local = reader._locate(i) if len(reader.shards) > 1 else (reader.shards[0], i)
    start, stop = int(shard.index[local]), int(shard.index[local + 1])
    note = f"line {local + 1} of the JINX file"
    if os.path.isfile(shard.binx_path):
        note += f"; values stored apart are in {os.path.basename(shard.binx_path)}"
    return Place(shard.path, start, stop, line=local + 1, note=note)


def _webdataset(reader, i: int) -> Place:
    from .._core import _tar

    shard, j = reader._locate(i)
    names, headers, offsets, _sizes, _end, _error = _tar.scan(memoryview(shard.map), path=shard.path, partial=True)
    members = list(shard.members(j))
    first = int(np.searchsorted(offsets, shard.data_offsets[members[0]]))
    last_end = int(shard.data_offsets[members[-1]]) + int(shard.sizes[members[-1]])
    keep = [int(np.searchsorted(offsets, shard.data_offsets[m])) for m in members]
    member_names = tuple(name if isinstance(name, str) else bytes(name).decode("utf-8", "replace")
                         for name in (names[m] for m in keep))
    note = f"sample {j} of the tar (key {shard.keys[j]!r}): its members' headers and data"
    if not os.path.basename(shard.path).endswith(".tar"):
        note += ", in the tar decompressed"
    return Place(shard.path, int(headers[first]), -(-last_end // 512) * 512, members=member_names, note=note)


def _jsonl(reader, i: int) -> Place:
    start, stop = int(reader.starts[i]), int(reader.ends[i])
    data = np.frombuffer(reader.buf, dtype=np.uint8) if len(reader.buf) else np.zeros(0, np.uint8)
    # The line a text editor shows: one more than the newlines before the sample, blank
    # lines (which the reader skips) counted.
    newlines = sum(int(np.count_nonzero(data[at:min(start, at + _COUNT_CHUNK)] == 0x0A))
                   for at in range(0, start, _COUNT_CHUNK))
    del data
    note = f"line {newlines + 1} of the file"
    if reader.path.lower().endswith((".zst", ".zstd", ".gz")):
        note += "; bytes of the file decompressed"
    return Place(reader.path, start, stop, line=newlines + 1, note=note)


def _parquet(reader, i: int) -> Place:
    g = int(np.searchsorted(reader.cum, i, side="right")) - 1
    file_index, group = reader.groups[g]
    # the file's row groups are consecutive in the reader's: its first is g - group (no
    # footer read, which a reader that took them from the hash manifest has not opened)
    row = i - int(reader.cum[g - group])
    return Place(reader.paths[file_index], row=row,
                 note=f"row {row} of the file (row group {group}); Parquet stores it by column, "
                      "so no byte range holds it alone")


def _msgpack(reader, i: int) -> Place:
    k = int(np.searchsorted(reader.cum, i, side="right")) - 1
    j = i - int(reader.cum[k])
    start, stop = reader.object_span(k, j)
    return Place(reader.paths[k], start, stop, row=j, note=f"object {j} of the file")


_PLACES = {"mds": _mds, "jinx": _jinx, "webdataset": _webdataset, "jsonl": _jsonl,
           "parquet": _parquet, "msgpack": _msgpack}
