"""The lineage record a conversion leaves in its output: where every sample came from.

``hpcio convert`` writes, beside the dataset it publishes, ``.hpcio/lineage.json`` (and
up to two binary sidecars in the same directory).  Peer readers look only at their own
index (``index.json``, the tar or JINX files, the HDF5 metadata), and a hidden directory
is none of those; ``hpcio stage`` copies it with the rest.

zarr-python is the exception: listing a group's members opens every entry of its
directory and warns about each one that is not a Zarr node.  In a Zarr store ``.hpcio``
is therefore a Zarr group of its own: the record is its ``hpcio`` attribute
(``{"lineage": record}``) and each sidecar an uncompressed int64 array of one chunk,
whose chunk file holds exactly the bytes the sidecar file would.  The root's
``zarr.json`` stays small, since every open of the store reads it.

The record stores the plan's compact description rather than a position per sample: the
sources in order with their sample counts, the selection (``first`` and ``num_samples``,
or a sidecar of ids), the order's ``seed``, the plan's shard ``bounds`` and, per shard,
how many samples it holds.  A dataset index then maps to a plan shard and a rank within
it; the plan gives the shard's planned global ids (ascending, as the writer stored them),
and the ids the shard did not write (filtered, or bad under ``skip_bad``) are taken out
using ``lineage-dropped.i64``.  The global id names the source and the sample in it.
The record is a function of the inputs and options only, so every rank count writes the
same bytes.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass

import numpy as np

from ..errors import CorruptShardError, LineageNotFoundError

__all__ = [
    "LINEAGE_DIR",
    "LINEAGE_NAME",
    "DROPPED_NAME",
    "SELECTION_NAME",
    "LINEAGE_VERSION",
    "ZARR_META",
    "ZARR_ATTR",
    "DIGEST_BYTES_ENV",
    "Lineage",
    "id_runs",
    "load_lineage",
    "lineage_path",
    "source_digest",
]

LINEAGE_DIR = ".hpcio"
LINEAGE_NAME = "lineage.json"
DROPPED_NAME = "lineage-dropped.i64"
SELECTION_NAME = "lineage-selection.i64"
LINEAGE_VERSION = 1
# A Zarr store's lineage: the group ``.hpcio`` (``zarr.json``, attribute "hpcio").
ZARR_META = "zarr.json"
ZARR_ATTR = "hpcio"
# Sources larger than this in all (bytes) are recorded by size and mtime alone: hashing
# them would read the whole input a second time.
DIGEST_BYTES_ENV = "HPCIO_LINEAGE_DIGEST_BYTES"
DEFAULT_DIGEST_BYTES = 4 * 2**30


def lineage_path(dataset: str) -> str:
    """Where the lineage record of the dataset at ``dataset`` lives: ``.hpcio/zarr.json``
    in a Zarr store that has one, else ``.hpcio/lineage.json``."""
    state = os.path.join(os.fspath(dataset), LINEAGE_DIR)
    zarr_meta = os.path.join(state, ZARR_META)
    return zarr_meta if os.path.isfile(zarr_meta) else os.path.join(state, LINEAGE_NAME)


def id_runs(ids: np.ndarray) -> np.ndarray:
    """The ascending ``ids`` as ``(start, stop)`` runs of consecutive ids, an (n, 2) array.

    >>> id_runs(np.array([3, 4, 5, 9, 11, 12])).tolist()
    [[3, 6], [9, 10], [11, 13]]
    """
    ids = np.asarray(ids, dtype=np.int64)
    if not len(ids):
        return np.zeros((0, 2), np.int64)
    breaks = np.flatnonzero(np.diff(ids) != 1) + 1
    starts = ids[np.concatenate([[0], breaks])]
    stops = ids[np.concatenate([breaks - 1, [len(ids) - 1]])] + 1
    return np.column_stack([starts, stops]).astype(np.int64)


def digest_limit() -> int:
    """Bytes of sources the converter hashes for the record: ``$HPCIO_LINEAGE_DIGEST_BYTES``
    (0: none), else 4 GiB."""
    text = os.environ.get(DIGEST_BYTES_ENV)
    if not text:
        return DEFAULT_DIGEST_BYTES
    from ..units import parse_bytes

    try:
        return max(0, int(text))
    except ValueError:
        return parse_bytes(text, what=f"${DIGEST_BYTES_ENV}")


# Bytes of a source hashed at a time: read into one buffer rather than mapped, so a
# source larger than memory leaves no more than this resident in the converting process.
_HASH_CHUNK = 8 << 20


def _file_digest(path: str) -> str:
    from .._hashing import new_hash

    h = new_hash()
    buf = bytearray(_HASH_CHUNK)
    with open(path, "rb", buffering=0) as f, memoryview(buf) as view:
        while n := f.readinto(view):
            h.update(view[:n])
    return h.hexdigest()


def source_digest(path: str) -> str:
    """xxh3-64 of a source: of the file, or, for a directory, of the lines
    ``<relative path>\\0<xxh3 of the file>\\n`` of its files in sorted order."""
    from .._hashing import new_hash

    if os.path.isfile(path):
        return _file_digest(path)
    h = new_hash()
    for root, dirs, files in os.walk(path):
        dirs.sort()
        for name in sorted(files):
            full = os.path.join(root, name)
            h.update(f"{os.path.relpath(full, path)}\0{_file_digest(full)}\n".encode())
    return h.hexdigest()


def _array_digest(data: np.ndarray) -> str:
    from .._hashing import new_hash

    h = new_hash()
    h.update(memoryview(np.ascontiguousarray(data, dtype="<i8")).cast("B"))  # type: ignore[arg-type]
    return h.hexdigest()


def write_lineage(directory: str, record: dict, dropped: np.ndarray, selection: np.ndarray | None) -> None:
    """Write the record and its sidecars into ``directory/.hpcio`` (a staging directory
    about to be renamed into place, so no reader sees them half-written); as a Zarr group
    when ``directory`` is a Zarr store (its root holds ``zarr.json``).

    ``dropped`` holds the (start, stop) runs of the global ids the shards did not write;
    ``selection`` the selected ids, when the conversion was given a selection."""
    from ..convert.resume import write_json_atomic

    state = os.path.join(directory, LINEAGE_DIR)
    group = _zarr_group(state) if os.path.isfile(os.path.join(directory, ZARR_META)) else None
    if group is None:
        os.makedirs(state, exist_ok=True)

    def put(name: str, data: np.ndarray) -> str:
        if group is None:
            _write_array(os.path.join(state, name), data)
            return name
        return _write_zarr_array(group, name.removesuffix(".i64"), data)

    record = dict(record)
    dropped = np.ascontiguousarray(dropped, dtype="<i8").reshape(-1, 2)
    record["dropped"] = {"file": put(DROPPED_NAME, dropped) if len(dropped) else None, "runs": len(dropped),
                         "samples": int((dropped[:, 1] - dropped[:, 0]).sum()),
                         "xxh3_64": _array_digest(dropped) if len(dropped) else None}
    if selection is not None:
        selection = np.ascontiguousarray(selection, dtype="<i8")
        record["plan"] = {**record["plan"], "selection": {"file": put(SELECTION_NAME, selection),
                                                          "count": len(selection),
                                                          "xxh3_64": _array_digest(selection)}}
    if group is None:
        write_json_atomic(os.path.join(state, LINEAGE_NAME), record)
    else:
        group.attrs[ZARR_ATTR] = {"lineage": record}


def _zarr_group(state: str):
    from ..formats.zarr import _zarr

    return _zarr().open_group(state, mode="w-")


def _write_zarr_array(group, name: str, data: np.ndarray) -> str:
    """Store ``data`` as the array ``name`` of ``group`` in a single uncompressed chunk;
    returns the chunk file's path relative to the group, which holds the int64 values
    exactly as :func:`_write_array` writes them."""
    from zarr.codecs import BytesCodec

    arr = group.create_array(name, shape=data.shape, dtype="int64", chunks=tuple(max(1, n) for n in data.shape),
                             serializer=BytesCodec(endian="little"), compressors=None, filters=None,
                             fill_value=0, config={"write_empty_chunks": True})
    if data.size:
        arr[...] = data
    return f"{name}/{arr.metadata.encode_chunk_key((0,) * data.ndim)}"


def _write_array(path: str, data: np.ndarray) -> None:
    tmp = f"{path}.tmp.{os.getpid()}"
    with open(tmp, "wb") as f:
        f.write(memoryview(data).cast("B"))  # type: ignore[arg-type]
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


@dataclass(frozen=True)
class SourceSample:
    """Sample ``sample`` (0-based, as its reader numbers them) of source ``source`` (its
    position in the record's ``sources``), global id ``global_id``."""

    source: int
    sample: int
    global_id: int
    shard: int  # the plan's shard the sample went into


class Lineage:
    """A loaded lineage record: ``record`` is the JSON object; :meth:`source_of` maps a
    dataset index to the source sample it came from."""

    def __init__(self, dataset: str, record: dict):
        self.dataset = os.fspath(dataset)
        self.record = record
        self.state = os.path.join(self.dataset, LINEAGE_DIR)
        if record.get("lineage_version") != LINEAGE_VERSION:
            raise CorruptShardError(f"lineage version {record.get('lineage_version')!r} is not "
                                    f"{LINEAGE_VERSION}, the one this hpcio reads", path=lineage_path(dataset))
        self.sources = record["sources"]
        self.first_id = np.array([s["first_id"] for s in self.sources] +
                                 [sum(s["samples"] for s in self.sources)], dtype=np.int64)
        self.shard_samples = np.asarray(record["shards"]["samples"], dtype=np.int64)
        self.starts = np.concatenate([[0], np.cumsum(self.shard_samples)]).astype(np.int64)
        self._plan = None
        self._dropped: np.ndarray | None = None

    def __len__(self) -> int:
        return int(self.starts[-1])

    def plan(self):
        """The conversion's :class:`~hpcio.convert.plan.ShardPlan`, rebuilt from the record."""
        if self._plan is None:
            from ..convert.plan import ShardPlan

            p = self.record["plan"]
            selection = None
            if p["selection"] is not None:
                selection = self._array(p["selection"]["file"], p["selection"]["count"]).reshape(-1)
            bounds = np.asarray(p["bounds"], dtype=np.int64)
            self._plan = ShardPlan(num_samples=p["num_samples"], bounds=bounds,
                                   shard_bytes=np.zeros(len(bounds) - 1, np.int64), seed=p["seed"],
                                   order=p["order"], first=p["first"], selection=selection)
        return self._plan

    def dropped(self) -> np.ndarray:
        """The (start, stop) runs of the global ids no shard wrote."""
        if self._dropped is None:
            d = self.record["dropped"]
            self._dropped = (np.zeros((0, 2), np.int64) if not d["runs"]
                             else self._array(d["file"], 2 * d["runs"]).reshape(-1, 2))
        return self._dropped

    def _array(self, name: str, count: int) -> np.ndarray:
        if not count:
            return np.zeros(0, np.int64)
        path = os.path.join(self.state, name)
        try:
            size = os.path.getsize(path)
        except OSError:
            raise LineageNotFoundError(f"the lineage sidecar {name} is missing", path=path) from None
        if size != 8 * count:
            raise CorruptShardError(f"the lineage sidecar holds {size} bytes, the record says {8 * count} "
                                    f"({count} int64)", path=path)
        return np.memmap(path, dtype="<i8", mode="r")

    def shard_ids(self, k: int) -> np.ndarray:
        """The global ids shard ``k`` holds, in its sample order (ascending)."""
        ids = self.plan().shard(k)
        runs = self.dropped()
        if len(runs):
            at = np.searchsorted(runs[:, 0], ids, side="right") - 1
            inside = (at >= 0) & (ids < runs[np.maximum(at, 0), 1])
            ids = ids[~inside]
        if len(ids) != self.shard_samples[k]:
            raise CorruptShardError(f"the lineage gives shard {k} {len(ids)} samples, its record says "
                                    f"{int(self.shard_samples[k])}", path=lineage_path(self.dataset))
        return ids

    def shard_runs(self, k: int) -> list[tuple[int, int, int]]:
        """Where shard ``k``'s samples came from, in its sample order, as runs
        ``(source, first sample, stop)`` of consecutive samples of one source."""
        runs = []
        for start, stop in id_runs(self.shard_ids(k)).tolist():
            # a run of global ids may span the end of one source and the start of the next
            while start < stop:
                src = int(np.searchsorted(self.first_id, start, side="right")) - 1
                end = min(stop, int(self.first_id[src + 1]))
                runs.append((src, start - int(self.first_id[src]), end - int(self.first_id[src])))
                start = end
        return runs

    def source_of(self, index: int) -> SourceSample:
        """The source sample that dataset sample ``index`` (in ``[0, len)``) came from."""
        k = int(np.searchsorted(self.starts, index, side="right")) - 1
        gid = int(self.shard_ids(k)[index - int(self.starts[k])])
        src = int(np.searchsorted(self.first_id, gid, side="right")) - 1
        return SourceSample(source=src, sample=gid - int(self.first_id[src]), global_id=gid, shard=k)


def load_lineage(dataset) -> Lineage:
    """The lineage record of the dataset at ``dataset``; :class:`LineageNotFoundError`
    when it has none."""
    dataset = os.fspath(dataset)
    path = lineage_path(dataset)
    try:
        with open(path, encoding="utf-8") as f:
            record = json.load(f)
    except FileNotFoundError:
        raise LineageNotFoundError(
            "no lineage record (.hpcio/lineage.json): hpcio writes one when it converts a "
            "dataset, so this one was written otherwise or before hpcio kept lineage",
            path=dataset) from None
    except ValueError as exc:
        raise CorruptShardError(f"unreadable lineage record: {exc}", path=path) from None
    if os.path.basename(path) == ZARR_META:
        attrs = record.get("attributes") if isinstance(record, dict) else None
        record = attrs.get(ZARR_ATTR) if isinstance(attrs, dict) else None
        record = record.get("lineage") if isinstance(record, dict) else None
        if not isinstance(record, dict):
            raise CorruptShardError(f"the group {LINEAGE_DIR} has no {ZARR_ATTR}.lineage attribute",
                                    path=path)
    return Lineage(dataset, record)
