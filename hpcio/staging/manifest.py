"""The staging manifest: what a staged copy holds and the checksums that prove it.

A staged directory carries ``.hpcio-manifest.json``, written last and atomically, so
its presence means "every file listed here is complete".  While a copy runs, each
finished file is appended to a journal (``.hpcio-journal.<rank>.jsonl``) so an
interrupted copy resumes without re-reading what already landed.

Checksums use xxHash.  A file's digest is ``{"algo": "xxh64" | "xxh3_64", "digest":
hex}`` over the whole file, or, for files copied in chunks,
``{"algo": "xxh3_64-tree", "chunk_bytes": C, "digest": hex}``: the xxh3_64 of the
concatenated 8-byte big-endian xxh3_64 digests of the ``C``-byte chunks, which ranks
and threads compute independently.

>>> d = Digest.compute_bytes(b"hello", "xxh3_64")
>>> d.algo, len(d.digest)
('xxh3_64', 16)
"""

from __future__ import annotations

import dataclasses
import datetime
import glob
import json
import os
import socket

import xxhash

from .._durable import fsync_dir
from .._published import MANIFEST_NAME, journal_name  # its readers check them too
from .._version import __version__
from ..errors import CorruptShardError, StagingError

__all__ = [
    "MANIFEST_NAME",
    "JOURNAL_GLOB",
    "Digest",
    "FileRecord",
    "LinkRecord",
    "Manifest",
    "read_manifest",
    "write_manifest",
    "Journal",
    "read_journals",
    "journal_paths",
    "is_journal",
    "new_hasher",
    "TMP_MARK",
]

JOURNAL_GLOB = ".hpcio-journal.*.jsonl"
# A file being written is named ``<name>.tmp.<job>`` until it is complete and renamed.
TMP_MARK = ".tmp."
MANIFEST_VERSION = 1
# What parsing a damaged manifest or journal line raises: bad JSON, a missing key, a value
# of the wrong type (a list where an object belongs has no .get), nesting too deep.
_MALFORMED = (ValueError, KeyError, TypeError, AttributeError, RecursionError)
WHOLE_FILE_ALGOS = ("xxh64", "xxh3_64")
TREE_ALGO = "xxh3_64-tree"


def _json_str(record: dict, key: str) -> str:
    value = record[key]
    if not isinstance(value, str):
        raise TypeError(f"{key} is {value!r}, not a string")
    return value


def _json_int(record: dict, key: str) -> int:
    """``record[key]``, which must be a JSON integer: a float such as 1e400 (infinity
    to Python) or a boolean is refused rather than converted."""
    value = record[key]
    if type(value) is not int:
        raise TypeError(f"{key} is {value!r}, not an integer")
    return value


def new_hasher(algo: str):
    """A streaming xxHash object for a whole-file algorithm name."""
    if algo == "xxh64":
        return xxhash.xxh64()
    if algo in ("xxh3_64", TREE_ALGO):
        return xxhash.xxh3_64()
    raise StagingError(f"unknown checksum algorithm {algo!r}; known: {WHOLE_FILE_ALGOS + (TREE_ALGO,)}")


@dataclasses.dataclass(frozen=True)
class Digest:
    """A checksum and how it was computed."""

    algo: str
    digest: str
    chunk_bytes: int | None = None

    @classmethod
    def compute_bytes(cls, data: bytes, algo: str) -> Digest:
        h = new_hasher(algo)
        h.update(data)
        return cls(algo, h.hexdigest())

    @classmethod
    def from_tree(cls, chunk_digests: list[bytes], chunk_bytes: int) -> Digest:
        """Combine per-chunk ``xxh3_64().digest()`` values in file order."""
        return cls(TREE_ALGO, xxhash.xxh3_64(b"".join(chunk_digests)).hexdigest(), chunk_bytes)

    def to_json(self) -> dict:
        out: dict[str, str | int] = {"algo": self.algo, "digest": self.digest}
        if self.chunk_bytes is not None:
            out["chunk_bytes"] = self.chunk_bytes
        return out

    @classmethod
    def from_json(cls, data: dict) -> Digest:
        chunk_bytes = data.get("chunk_bytes")
        if chunk_bytes is not None:
            chunk_bytes = _json_int(data, "chunk_bytes")
        return cls(_json_str(data, "algo"), _json_str(data, "digest"), chunk_bytes)


@dataclasses.dataclass(frozen=True)
class FileRecord:
    """One staged file: relative path, size, checksum and where it came from."""

    path: str
    size: int
    digest: Digest
    source_mtime_ns: int

    def to_json(self) -> dict:
        return {
            "path": self.path,
            "size": self.size,
            **self.digest.to_json(),
            "source_mtime_ns": self.source_mtime_ns,
        }

    @classmethod
    def from_json(cls, data: dict) -> FileRecord:
        return cls(_json_str(data, "path"), _json_int(data, "size"), Digest.from_json(data),
                   _json_int(data, "source_mtime_ns"))


@dataclasses.dataclass(frozen=True)
class LinkRecord:
    """A symbolic link staged as a link: relative path and the target it holds."""

    path: str
    target: str

    def to_json(self) -> dict:
        return {"path": self.path, "target": self.target}

    @classmethod
    def from_json(cls, data: dict) -> LinkRecord:
        if not isinstance(data.get("path"), str) or not isinstance(data.get("target"), str):
            raise TypeError(f"link record {data!r} needs a str path and target")
        return cls(data["path"], data["target"])


@dataclasses.dataclass
class Manifest:
    """Everything ``.hpcio-manifest.json`` holds."""

    source: str
    files: list[FileRecord]
    created: str = ""
    host: str = ""
    job_id: str | None = None
    tool: str = f"hpcio {__version__}"
    links: list[LinkRecord] = dataclasses.field(default_factory=list)

    @property
    def total_bytes(self) -> int:
        return sum(f.size for f in self.files)

    def to_json(self) -> dict:
        return {
            "version": MANIFEST_VERSION,
            "tool": self.tool,
            "source": self.source,
            "created": self.created,
            "host": self.host,
            "job_id": self.job_id,
            "total_files": len(self.files),
            "total_bytes": self.total_bytes,
            "files": [f.to_json() for f in sorted(self.files, key=lambda r: r.path)],
            "links": [link.to_json() for link in sorted(self.links, key=lambda r: r.path)],
        }


def write_manifest(directory: str | os.PathLike, manifest: Manifest, tmp_suffix: str,
                   durable: bool = True) -> str:
    """Write the manifest atomically (temp name, fsync, rename, fsync dir); return its path.

    With ``durable=False`` nothing is fsynced: the rename alone makes it visible whole.
    """
    manifest.created = manifest.created or datetime.datetime.now(datetime.UTC).isoformat()
    manifest.host = manifest.host or socket.gethostname()
    final = os.path.join(directory, MANIFEST_NAME)
    tmp = f"{final}{TMP_MARK}{tmp_suffix}"
    data = json.dumps(manifest.to_json(), indent=1, sort_keys=True).encode() + b"\n"
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        if durable:
            os.fsync(f.fileno())
    os.rename(tmp, final)
    if durable:
        fsync_dir(directory)
    return final


def read_manifest(directory: str | os.PathLike) -> Manifest | None:
    """Read ``directory``'s manifest; ``None`` when there is none.

    Raises
    ------
    CorruptShardError
        The file exists but is not a manifest this version understands.
    """
    path = os.path.join(directory, MANIFEST_NAME)
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except (FileNotFoundError, NotADirectoryError):
        return None
    try:
        data = json.loads(raw)
        if data.get("version") != MANIFEST_VERSION:
            raise CorruptShardError(
                f"manifest version {data.get('version')!r} is not {MANIFEST_VERSION}", path=path
            )
        files = [FileRecord.from_json(f) for f in data["files"]]
        links = [LinkRecord.from_json(link) for link in data.get("links", [])]
        return Manifest(
            source=data["source"], files=files, created=data.get("created", ""),
            host=data.get("host", ""), job_id=data.get("job_id"), tool=data.get("tool", ""),
            links=links,
        )
    except _MALFORMED as exc:
        if isinstance(exc, CorruptShardError):
            raise
        raise CorruptShardError(f"not a valid staging manifest: {exc!r}", path=path) from None


class Journal:
    """Append-only record of files finished during one run (one file per rank)."""

    def __init__(self, directory: str | os.PathLike, rank: int, durable: bool = True):
        self.path = os.path.join(directory, journal_name(rank))
        self.durable = durable
        self._fd: int | None = None

    def append(self, record: FileRecord) -> None:
        # One write() per line with O_APPEND keeps lines whole even if threads interleave;
        # the fsync makes a resumed run trust only files that really landed.
        if self._fd is None:
            self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.write(self._fd, json.dumps(record.to_json(), sort_keys=True).encode() + b"\n")
        if self.durable:
            os.fsync(self._fd)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def is_journal(name: str) -> bool:
    """Whether the file name ``name`` is a journal's."""
    return name.startswith(".hpcio-journal.") and name.endswith(".jsonl")


def journal_paths(directory: str | os.PathLike) -> list[str]:
    """The journals in ``directory``."""
    return glob.glob(os.path.join(glob.escape(str(directory)), JOURNAL_GLOB))


def read_journals(directory: str | os.PathLike) -> dict[str, FileRecord]:
    """Records left by earlier runs' journals (a torn last line is ignored)."""
    records: dict[str, FileRecord] = {}
    for path in sorted(journal_paths(directory)):
        with open(path, "rb") as f:
            for line in f:
                try:
                    rec = FileRecord.from_json(json.loads(line))
                except _MALFORMED:
                    continue
                records[rec.path] = rec
    return records
