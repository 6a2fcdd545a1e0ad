"""hpcio's MDS shard reader as mosaicml-streaming's ``_readers["mds"]``.

Stock streaming treats any non-null ``compression`` as whole-shard compression: on a
``sample::zstd`` shard it finds a raw file but no zip, deletes the raw file and fails
(``specs/formats.md`` section 6.1).  :func:`install` swaps in :class:`MDSSampleReader`,
which tells streaming "no shard compression" for ``sample::<algo>`` shards and
decompresses each record itself; whole-shard compression is left to streaming as before.
Sample values are decoded by streaming's own ``decode_sample``, so a ``StreamingDataset``
returns exactly what it returns for an uncompressed dataset.

:func:`install` also registers the column encodings hpcio adds to streaming's
(``list[bytes]``, ``dict[bytes]``: :mod:`hpcio.formats.mds.streaming_encodings`), so a
``StreamingDataset`` reads them and streaming's ``MDSWriter`` writes them.

Importing this module imports streaming; :func:`hpcio.formats.mds.register_streaming_reader`
is the lazy entry point.
"""

from __future__ import annotations

import os
import struct

from streaming.base.format import _readers
from streaming.base.format.mds.reader import MDSReader

from ...codecs import max_decoded_bytes
from ...errors import IndexOutOfRangeError
from . import streaming_encodings
from .compression import parse_compression

__all__ = ["MDSSampleReader", "install"]

_PAIR = struct.Struct("<2I")


class MDSSampleReader(MDSReader):
    """streaming's ``MDSReader`` that also reads ``sample::<algo>`` shards.

    Records are read through a memory map opened once per process (worker processes
    inherit nothing but the path, so pickling drops the map).
    """

    def __init__(self, dirname, split, column_encodings, column_names, column_sizes,
                 compression, hashes, raw_data, samples, size_limit, zip_data):
        parsed = parse_compression(compression)
        self.sample_compression = parsed if parsed is not None and parsed.per_sample else None
        if self.sample_compression is not None:
            compression = None  # the container itself is not compressed
        super().__init__(dirname, split, column_encodings, column_names, column_sizes,
                         compression, hashes, raw_data, samples, size_limit, zip_data)
        self._map = None
        self._map_pid = None

    def __getstate__(self):
        state = self.__dict__.copy()
        state["_map"] = None
        state["_map_pid"] = None
        return state

    def _buffer(self):
        if self._map is None or self._map_pid != os.getpid():
            from ..._core import _io

            filename = os.path.join(self.dirname, self.split, self.raw_data.basename)
            self._map = _io.MappedShard(filename)
            self._map_pid = os.getpid()
        else:
            self._map.check_size()
        return self._map.buffer()

    def get_sample_data(self, idx: int) -> bytes:
        if not 0 <= idx < self.samples:
            raise IndexOutOfRangeError(
                f"index {idx} out of range for a shard of {self.samples} samples",
                path=self.raw_data.basename,
            )
        buf = self._buffer()
        begin, end = _PAIR.unpack_from(buf, 4 + 4 * idx)
        data = buf[begin:end]
        if self.sample_compression is not None:
            return self.sample_compression.decompress(
                data, max_decoded_bytes(), path=self.raw_data.basename, offset=begin, sample=idx
            )
        return data.tobytes()


def install() -> type:
    """Register :class:`MDSSampleReader` as streaming's MDS reader and hpcio's column
    encodings beside streaming's; returns the reader class."""
    streaming_encodings.register()
    _readers["mds"] = MDSSampleReader
    return MDSSampleReader
