"""What hpcio's Parquet writer records of each file in its hash manifest, so that a
reader opens no file when it opens the dataset.

Beside the size and xxh3_64 of every hash manifest (:mod:`hpcio.formats._checksums`),
an entry holds what a reader would otherwise read from the file's footer::

    {"bytes": 5012, "hashes": {"xxh3_64": "9c1f..."}, "samples": 64,
     "row_groups": [16, 16, 16, 16], "row_group_bytes": [812, 812, 812, 806],
     "schema": "/////..."}

``row_groups`` are the row groups' row counts, ``row_group_bytes`` their uncompressed
sizes (what ``Reader.will_read`` sizes its cache of decoded row groups with), ``schema``
the Arrow schema of the footer, serialized (IPC) and base64-encoded.  When every file has
a plausible entry the reader opens each file on its first read and checks its footer
against the entry then: on a node cache's mirror the files are links to the shared tier
until fetched, and a footer read at open would go around the cache.  Files written by
other tools have no entry, and are opened at open as before.
"""

from __future__ import annotations

import base64
import os

from .._hashing import DEFAULT_HASH, file_digest
from ..errors import CapabilityError, CorruptShardError, SchemaError
from ._checksums import MANIFEST_NAME, Manifest, recorded_entries

__all__ = ["schema_text", "parse_schema", "footer_groups", "file_entry", "recorded_layouts", "check_footer",
           "check_node_cache", "merge_index"]


def schema_text(schema) -> str:
    """The Arrow ``schema`` as the manifest records it: its IPC bytes in base64."""
    return base64.b64encode(schema.serialize().to_pybytes()).decode("ascii")


def parse_schema(pa, text: str, path: str):
    """The Arrow schema :func:`schema_text` made ``text`` of (CorruptShardError naming
    the file whose manifest entry holds it when it is not one)."""
    try:
        return pa.ipc.read_schema(pa.py_buffer(base64.b64decode(text, validate=True)))
    except (ValueError, pa.ArrowException) as exc:  # binascii.Error is a ValueError
        raise CorruptShardError(f"the schema its hash manifest records is not an Arrow schema: {exc}",
                                path=path) from None


def footer_groups(meta) -> tuple[list[int], list[int]]:
    """The rows and uncompressed bytes of each row group a footer (FileMetaData) lists."""
    groups = [meta.row_group(g) for g in range(meta.num_row_groups)]
    return [g.num_rows for g in groups], [g.total_byte_size for g in groups]


def file_entry(pq, path: str) -> dict:
    """The manifest entry of the Parquet file just written at ``path``: its size and
    xxh3_64 (hashed from the page cache, where the file still is) and its footer's facts."""
    meta = pq.read_metadata(path)
    rows, sizes = footer_groups(meta)
    return {"bytes": os.path.getsize(path), "hashes": {DEFAULT_HASH: file_digest(path)},
            "samples": meta.num_rows, "row_groups": rows, "row_group_bytes": sizes,
            "schema": schema_text(meta.schema.to_arrow_schema())}


def _counts(value, n: int | None = None) -> bool:
    return (isinstance(value, list) and (n is None or len(value) == n)
            and all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in value))


def recorded_layouts(paths) -> list[dict | None]:
    """The manifest entry of each of ``paths`` when it records the footer's facts for a
    file of the size the file has, else None (no entry, a garbled one, or a file changed
    since): a plausible entry is a shortcut for reading the footer, a wrong one is found
    when the file is first read (:func:`check_footer`)."""
    out: list[dict | None] = []
    for path, entry in zip(paths, recorded_entries(paths)):
        try:
            size = os.path.getsize(path)
        except OSError:
            size = None
        ok = (isinstance(entry, dict) and entry.get("bytes") == size and _counts(entry.get("row_groups"))
              and _counts(entry.get("row_group_bytes"), len(entry["row_groups"]))
              and entry.get("samples") == sum(entry["row_groups"]) and isinstance(entry.get("schema"), str))
        out.append(entry if ok else None)
    return out


def check_footer(f, entry: dict, path: str, first_sample: int) -> None:
    """Raise CorruptShardError naming ``path`` when the footer of the opened ParquetFile
    ``f`` disagrees with the manifest ``entry`` the reader trusted at open (its row
    groups then number the dataset's samples); ``first_sample`` is the file's first."""
    rows, sizes = footer_groups(f.metadata)
    if len(rows) != len(entry["row_groups"]):
        raise CorruptShardError(f"the file's footer records {len(rows)} row groups, its hash manifest "
                                f"{len(entry['row_groups'])}", path=path, sample=first_sample)
    for g, (got, size, want, want_size) in enumerate(zip(rows, sizes, entry["row_groups"], entry["row_group_bytes"])):
        if (got, size) != (want, want_size):
            raise CorruptShardError(f"row group {g} holds {got} rows of {size} bytes decoded by the file's footer, "
                                    f"{want} rows of {want_size} bytes by its hash manifest", path=path,
                                    sample=first_sample + sum(rows[:g]))
    if schema_text(f.schema_arrow) != entry["schema"]:
        raise CorruptShardError("the file's schema (columns and their metadata) differs from the one its hash "
                                "manifest records", path=path, sample=first_sample)


def check_node_cache(path, paths) -> None:
    """Why the Parquet dataset at ``path`` (its files ``paths``) cannot read through a node
    cache, raised as CapabilityError: it is a single file (the cache mirrors a directory),
    or its manifest does not record every file's footer, which a reader would then read
    at open through the shared tier, around the cache."""
    if not os.path.isdir(path):
        raise CapabilityError("a node cache mirrors a directory of Parquet files: pass the directory, not a "
                              "file", path=str(path))
    missing = [p for p, entry in zip(paths, recorded_layouts(paths)) if entry is None]
    if missing:
        raise CapabilityError(
            f"{MANIFEST_NAME} records no row groups for {len(missing)} of the {len(paths)} Parquet files, so "
            "opening them would read every such file's footer through the shared tier, around the node cache; "
            f"rewrite them with hpcio, which records them in {MANIFEST_NAME} (hpcio convert SRC DST --to "
            "parquet), or convert them to MDS (--to mds)", path=missing[0])


def merge_index(directory, parts, **options) -> None:
    """The sharded-writing hook's last step: Parquet has no dataset index (readers list
    the ``.parquet`` files), so this checks that every file a part names exists and that
    the files holding samples agree on their columns (the reader requires it), then
    writes the ``hashes.json`` of the parts' entries.  Shards that received no sample
    (None) have no file."""
    directory = os.fspath(directory)
    manifest = Manifest(None, "Parquet")
    kinds = None
    for part in parts:
        if part is None:
            continue
        path = manifest.add_part(directory, part, "Parquet file")
        if kinds is not None and part["kinds"] != kinds:
            raise SchemaError(_kind_conflict(part["kinds"], kinds), path=path)
        kinds = part["kinds"] if kinds is None else kinds
    from .base import PendingFiles

    pending = PendingFiles()
    manifest.add_to(pending, directory)
    pending.publish()


def _kind_conflict(kinds: dict, expected: dict) -> str:
    """Why the column kinds of one file (``kinds``) do not match the dataset's."""
    if kinds.keys() != expected.keys():
        return f"fields {sorted(kinds)} differ from the dataset's {sorted(expected)}"
    name = next(n for n in expected if kinds[n] != expected[n])
    return (f"field {name!r} is {kinds[name]} here but {expected[name]} in the shards before; name its "
            "kind with the writer option schema=")
