"""``hpcio.locate(path, index)``: where a sample lies, and where it came from.

>>> import hpcio, os, tempfile
>>> tmp = tempfile.mkdtemp()
>>> src = os.path.join(tmp, "raw.jsonl")
>>> with open(src, "w") as f:
...     _ = f.write("".join(f'{{"text": "sample {i}"}}\\n' for i in range(40)))
>>> _ = hpcio.convert(src, os.path.join(tmp, "shards"), to="mds", num_shards=2, progress=False)
>>> where = hpcio.locate(os.path.join(tmp, "shards"), 7)
>>> hpcio.open(os.path.join(tmp, "shards"))[7]["text"] == f"sample {where.source_place.line - 1}"
True
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from ..errors import IndexOutOfRangeError, LineageNotFoundError
from .places import Place, place
from .record import load_lineage

__all__ = ["Location", "locate"]


@dataclass(frozen=True)
class Location:
    """Where sample ``index`` of ``dataset`` lies (``place``) and, for a dataset hpcio
    converted, the source it came from: ``source`` (its path), ``source_format``, the
    sample's 0-based number there (``source_sample``), its global id in the conversion
    and ``source_place`` (line, row or tar members).  Without a lineage record the
    source fields are None and ``note`` says why."""

    dataset: str
    format: str
    index: int
    place: Place
    shard: int | None = None  # the conversion plan's shard number
    source: str | None = None
    source_format: str | None = None
    source_sample: int | None = None
    global_id: int | None = None
    source_place: Place | None = None
    note: str = ""

    def to_json(self) -> dict:
        return {"dataset": self.dataset, "format": self.format, "index": self.index,
                "place": self.place.to_json(), "shard": self.shard, "source": self.source,
                "source_format": self.source_format, "source_sample": self.source_sample,
                "global_id": self.global_id,
                "source_place": None if self.source_place is None else self.source_place.to_json(),
                "note": self.note}


def locate(path, index: int, *, format: str | None = None) -> Location:
    """Where sample ``index`` of the dataset at ``path`` lies and where it came from.

    ``index`` counts as ``hpcio.open(path)[index]`` does (negative from the end).
    Raises :class:`~hpcio.errors.IndexOutOfRangeError` outside the dataset.  The source
    is found through the lineage record ``hpcio convert`` writes
    (:mod:`hpcio.lineage.record`); reading it needs the sources where they were.
    """
    from ..registry import get_format, sniff_format

    path = os.path.abspath(os.fspath(path))
    module = get_format(format) if format else sniff_format(path)
    reader = module.Reader(path)
    try:
        n = len(reader)
    finally:
        reader.close()
    i = int(index)
    if not -n <= i < n:
        raise IndexOutOfRangeError(f"sample {i} is out of range: the dataset holds {n} samples "
                                  f"(indexes {-n} to {n - 1})", path=path)
    i %= n
    here = place(path, module.NAME, i)
    try:
        lineage = load_lineage(path)
    except LineageNotFoundError as exc:
        return Location(path, module.NAME, i, here, note=str(exc))
    if len(lineage) != n:
        return Location(path, module.NAME, i, here,
                        note=f"the lineage record describes {len(lineage)} samples, the dataset holds {n}: "
                             "it was changed after it was converted")
    origin = lineage.source_of(i)
    source = lineage.sources[origin.source]
    found = dict(shard=origin.shard, source=source["path"], source_format=source["format"],
                 source_sample=origin.sample, global_id=origin.global_id)
    note = _changed(source)
    if note is not None:
        return Location(path, module.NAME, i, here, **found, note=note)
    options = lineage.record["options"].get("reader_options") or {}
    return Location(path, module.NAME, i, here, **found,
                    source_place=place(source["path"], source["format"], origin.sample, options))


def _changed(source: dict) -> str | None:
    """Why the source can no longer be read as it was converted, or None."""
    from ..sources.inputs import disk_bytes

    if not os.path.exists(source["path"]):
        return "the source is no longer there: its line, row or member cannot be read"
    nbytes, mtime = disk_bytes(source["path"])
    if (nbytes, mtime) != (source["nbytes"], source["mtime_ns"]):
        return (f"the source changed since the conversion ({nbytes} bytes, mtime {mtime} ns; the record "
                f"says {source['nbytes']} bytes, mtime {source['mtime_ns']} ns): its line, row or member "
                "is not looked up")
    return None
