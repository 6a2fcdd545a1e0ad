"""MDS (Mosaic Data Shard): read and write, byte-compatible with mosaicml-streaming.

A dataset is a directory holding ``index.json`` and ``shard.NNNNN.mds[.<ext>]`` files
(byte layout: ``specs/formats.md`` section 1).  The :class:`Writer` produces the same
bytes as streaming's ``MDSWriter`` for the same samples and options, plus mldataforge's
sample-level compression (``compression="sample::zstd"``) and hpcio's
``sample::blosc2``; the :class:`Reader` reads them by index, in batches and in bulk.

The package follows the format's seams: ``index`` (``index.json``), ``compact_index``
(``index.hpcio``, its mappable form), ``compression``
(compression names and hashes), ``encodings`` (column values <-> bytes), ``layout``
(records <-> columns), ``shards`` (an open shard), ``reader`` and ``batches`` (reading),
``writer``, ``verify`` (inspect and verify) and ``streaming`` (the reader
mosaicml-streaming uses through :func:`register_streaming_reader`).  This module is the
format's surface, the same names every format module exposes.

Values: see :mod:`hpcio.formats.mds.encodings` (numeric dtype columns give numpy
scalars as streaming does; image columns give their bytes unless ``decode_images``).

>>> import hpcio, tempfile, os
>>> d = os.path.join(tempfile.mkdtemp(), "ds")
>>> with hpcio.open_writer(d, format="mds", columns={"id": "int", "text": "str"}) as w:
...     w.write({"id": 7, "text": "seven"})
>>> hpcio.open(d)[0]
{'id': 7, 'text': 'seven'}
"""

from __future__ import annotations

from ...registry import Capabilities
from .compact_index import COMPACT_NAME, update_compact_index, write_compact_index
from .compression import Compression, parse_compression
from .index import INDEX_NAME, NAME, sniff
from .reader import Reader
from .verify import inspect, verify
from .writer import (
    DEFAULT_SIZE_LIMIT,
    RecordEncoder,
    Writer,
    infer_columns,
    merge_index,
    record_digests,
    record_encoder,
    record_layout,
    record_options,
)

__all__ = [
    "NAME",
    "CAPABILITIES",
    "INDEX_NAME",
    "COMPACT_NAME",
    "update_compact_index",
    "write_compact_index",
    "DEFAULT_SIZE_LIMIT",
    "sniff",
    "Reader",
    "Writer",
    "RecordEncoder",
    "infer_columns",
    "merge_index",
    "record_options",
    "record_encoder",
    "record_layout",
    "record_digests",
    "inspect",
    "verify",
    "register_streaming_reader",
    "parse_compression",
    "Compression",
]

CAPABILITIES = Capabilities(random_access=True, append=False, partial_read=True, batch_read=True)

# The public classes carry the name users import them by, in reprs and pickles alike;
# which module of the package defines them is not part of the API.
for _cls in (Compression, Reader, RecordEncoder, Writer):
    _cls.__module__ = __name__
del _cls


def register_streaming_reader() -> type:
    """Make mosaicml-streaming read MDS shards through hpcio (``_readers["mds"]``).

    Afterwards every ``StreamingDataset`` in this process reads ``sample::<algo>``
    shards (which stock streaming deletes, see ``docs/formats/mds.md``) and plain ones,
    and the column encodings hpcio adds (``list[bytes]``, ``dict[bytes]``), which streaming's
    ``MDSWriter`` then writes too.  Returns the reader class installed.  streaming is
    imported here, not with hpcio.
    """
    from .streaming import install

    return install()
