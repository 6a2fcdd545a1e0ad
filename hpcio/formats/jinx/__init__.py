"""JINX: JSON lines with an index footer and a BINX sidecar, byte-compatible with mldataforge.

A JINX file is one compact JSON object per sample, then a footer line (JSON: the
offset index and the writer's settings), then the footer's byte offset in decimal.
Binary values are stored inline, base-encoded (``a85``, ``b64``, ``hex``), or in the
``.binx`` sidecar; each stored key carries its type and codec as suffixes
(``text.str.zst``, ``img.raw.bin``).  The byte layout is in ``docs/formats/jinx.md``.

The reader maps the file, finds the footer and decodes the index in C (no temporary
files), and returns **lazy samples**: a :class:`JinxSample` decodes a value (sidecar
read, base decoding, decompression) only when it is accessed, so touching small
metadata fields costs one ``orjson.loads`` per sample.

The package: ``shard`` (one mapped file: footer, index, sidecar, value decoding),
``values`` (suffix meanings, codecs, .npy/.pt), ``sample`` (:class:`JinxSample`),
``reader``, ``encoder`` (sample -> JSON line) and ``writer``, ``tools`` (join, split)
and ``inspection`` (inspect, verify).

>>> import hpcio, os, tempfile
>>> path = os.path.join(tempfile.mkdtemp(), "toy.jinx")
>>> with hpcio.open_writer(path, format="jinx") as w:
...     w.write({"id": 0, "blob": b"\\x00\\x01", "text": "hello"})
>>> s = hpcio.open(path)[0]
>>> list(s), bytes(s["blob"])
(['id', 'blob', 'text'], b'\\x00\\x01')
"""

from __future__ import annotations

import os
from pathlib import Path

from ...registry import Capabilities
from .inspection import inspect, verify
from .reader import Reader
from .sample import JinxSample
from .shard import NAME, SHARD_GLOB, sidecar_path
from .tools import join, split
from .values import COMPRESSIONS, ENCODINGS, NUMPY_SCALARS
from .writer import Writer, merge_index

__all__ = [
    "NAME",
    "CAPABILITIES",
    "COMPRESSIONS",
    "ENCODINGS",
    "NUMPY_SCALARS",
    "sniff",
    "Reader",
    "Writer",
    "merge_index",
    "JinxSample",
    "join",
    "split",
    "inspect",
    "verify",
    "sidecar_path",
]

CAPABILITIES = Capabilities(random_access=True, append=False, partial_read=True, batch_read=True)


def sniff(path) -> bool:
    """True for a JINX file (ends with a decimal offset line pointing at an
    ``{"index.`` footer) or a directory of ``shard-*.jinx`` files."""
    path = os.fspath(path)
    if os.path.isdir(path):
        files = sorted(Path(path).glob(SHARD_GLOB))
        return bool(files) and _sniff_file(str(files[0]))
    return os.path.isfile(path) and _sniff_file(path)


def _sniff_file(path: str) -> bool:
    try:
        with open(path, "rb") as f:
            size = f.seek(0, os.SEEK_END)
            if size < 4:
                return False
            f.seek(max(0, size - 24))
            tail = f.read()
            if not tail.endswith(b"\n"):
                return False
            last = tail[:-1].rsplit(b"\n", 1)
            if len(last) != 2 or not last[1].isdigit():
                return False
            fo = int(last[1])
            if fo >= size:
                return False
            f.seek(fo)
            return f.read(8) == b'{"index.'
    except OSError:
        return False
