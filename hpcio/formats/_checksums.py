"""The hash manifest: the xxh3_64 of every file of a dataset whose format has no place
for a checksum of its own (WebDataset tars, MessagePack streams, JSON Lines).

A writer hashes each file as it writes it and publishes, after the files, one manifest
beside them: ``hashes.json`` in the dataset directory, or ``<file>.hashes.json`` beside a
single-file dataset (``data.jsonl.hashes.json``).  It is JSON, in the shape of an MDS
``raw_data`` entry::

    {"files": {"shard-000000.tar": {"bytes": 10240, "hashes": {"xxh3_64": "9c1f..."},
                                    "samples": 12}}}

``samples`` (WebDataset and MessagePack) is the file's sample count: hpcio's reader then
knows the dataset's length without scanning every file at open, and scans each when it
first reads it (which is also what lets such a dataset read through a node cache).
Parquet entries record each file's row groups and schema too, for the same reason
(:mod:`hpcio.formats._parquet_manifest`).

No reader of the formats themselves looks at it (webdataset, msgpack and JSON tools read
the files unchanged); hpcio's readers check it with ``validate_hashes=True`` and
``hpcio verify`` always does.  A file the manifest does not name is not checked.
"""

from __future__ import annotations

import os

import orjson

from .._hashing import DEFAULT_HASH, file_digest, new_hash, recorded_hashes
from .._paths import resolve_inside
from ..errors import ChecksumMismatchError, CorruptShardError, ShardNotFoundError

__all__ = ["MANIFEST_NAME", "HashedFile", "Manifest", "recorded_entries", "recorded_samples", "validate_files",
           "verify_files"]

MANIFEST_NAME = "hashes.json"
_SINGLE_SUFFIX = ".hashes.json"


class HashedFile:
    """A binary file being written whose bytes are hashed and counted as they go."""

    def __init__(self, file):
        self.file = file
        self.hash = new_hash()
        self.nbytes = 0

    def write(self, data) -> int:
        self.hash.update(data)
        self.nbytes += len(data)
        return self.file.write(data)

    def entry(self) -> dict:
        """The manifest entry of the bytes written so far."""
        return {"bytes": self.nbytes, "hashes": {DEFAULT_HASH: self.hash.hexdigest()}}

    def __getattr__(self, name):
        return getattr(self.file, name)


class Manifest:
    """The entries a writer gathers for the files it publishes.

    ``hashes`` is the writer option (None: ``["xxh3_64"]``; ``[]``: no manifest, the
    files alone, byte for byte what the writer wrote before it recorded hashes)."""

    def __init__(self, hashes, fmt: str):
        self.enabled = bool(recorded_hashes(hashes, fmt))
        self.files: dict[str, dict] = {}

    def wrap(self, file):
        """``file`` hashed as it is written (itself when no hashes are recorded)."""
        return HashedFile(file) if self.enabled else file

    def record(self, final_path: str, file, **facts) -> None:
        """Record the file published as ``final_path``, written through :meth:`wrap`, with
        the writer's ``facts`` about it (a tar's ``samples``)."""
        if self.enabled:
            self.files[os.path.basename(final_path)] = {**file.entry(), **facts}

    def encode(self, target: str) -> bytes | None:
        """The bytes of the manifest to publish at ``target``: the entries of a manifest
        already there (writers sharing a directory), updated with this writer's; None
        when there is nothing to record."""
        if not self.enabled or not self.files:
            return None
        try:
            files = _load(target) or {}
        except CorruptShardError:
            files = {}  # replaced whole: its files are not checked until written again
        files.update(self.files)
        return orjson.dumps({"files": dict(sorted(files.items()))}, option=orjson.OPT_INDENT_2) + b"\n"

    def add_part(self, directory: str, part: dict, what: str) -> str:
        """The path of the file a sharded-writing ``part`` names in ``directory``
        (``what``: "HDF5 shard", for the errors), which must lie inside it and exist; its
        entry, when the part carries one, is recorded for :meth:`add_to`."""
        path = resolve_inside(directory, part["file"], what=f"{what} name", source=directory)
        if not os.path.isfile(path):
            raise ShardNotFoundError(f"{what} named by an index part is missing", path=path)
        if "hashes" in part:
            self.files[os.path.basename(path)] = part["hashes"]
        return path

    def add_to(self, pending, directory: str) -> None:
        """Write the ``hashes.json`` of this manifest's files into ``directory`` under a
        temporary name of ``pending`` (a :class:`~hpcio.formats.base.PendingFiles`),
        added last so it is published after the files it names (a visible manifest
        always finds its files)."""
        target = os.path.join(directory, MANIFEST_NAME)
        data = self.encode(target)
        if data is not None:
            with open(pending.add(target), "wb") as f:
                f.write(data)


def manifest_path(dataset: str, single_file: bool) -> str:
    """Where the manifest of a dataset goes: beside a single file, or in its directory."""
    return dataset + _SINGLE_SUFFIX if single_file else os.path.join(dataset, MANIFEST_NAME)


def _load(path: str) -> dict | None:
    """The ``files`` of the manifest at ``path``; None when there is none."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return None
    try:
        files = orjson.loads(data)["files"]
        if not isinstance(files, dict) or not all(isinstance(e, dict) for e in files.values()):
            raise TypeError
    except orjson.JSONDecodeError as exc:
        raise CorruptShardError(f"garbled hash manifest: {exc.msg}", path=path, offset=exc.pos) from None
    except (TypeError, KeyError):
        raise CorruptShardError('garbled hash manifest: expected {"files": {name: {"bytes", "hashes"}}}',
                                path=path) from None
    return files


class _Recorded:
    """The manifest entries of data files, each manifest loaded once (a garbled one
    raises the first time it is asked for, and then counts as absent)."""

    def __init__(self):
        self._manifests: dict[str, dict | None] = {}

    def manifest(self, path: str) -> dict | None:
        if path not in self._manifests:
            self._manifests[path] = None
            self._manifests[path] = _load(path)
        return self._manifests[path]

    def entry(self, file: str) -> tuple[str, dict] | tuple[None, None]:
        """``(manifest path, entry)`` naming ``file``, else ``(None, None)``."""
        for manifest in (file + _SINGLE_SUFFIX, os.path.join(os.path.dirname(file), MANIFEST_NAME)):
            files = self.manifest(manifest)
            if files is not None and os.path.basename(file) in files:
                return manifest, files[os.path.basename(file)]
        return None, None


def check_file(file: str, manifest: str, entry: dict, algo: str = DEFAULT_HASH) -> None:
    """Raise :class:`ChecksumMismatchError` unless ``file`` has the size and hash its
    manifest ``entry`` records (CorruptShardError for an entry that is not one)."""
    name = os.path.basename(manifest)
    hashes, size = entry.get("hashes"), entry.get("bytes")
    if not isinstance(hashes, dict) or not isinstance(size, int):
        raise CorruptShardError(f"garbled hash manifest entry for {os.path.basename(file)}: {entry!r}", path=manifest)
    if algo not in hashes:
        raise CorruptShardError(
            f"{name} records no {algo} hash for this file (it has: {', '.join(sorted(hashes)) or 'none'})", path=file)
    actual = os.path.getsize(file)
    if actual != size:
        raise ChecksumMismatchError(f"file is {actual} bytes, {name} says {size}", path=file, offset=min(actual, size))
    got = file_digest(file)
    if got != hashes[algo]:
        raise ChecksumMismatchError(
            f"{algo} mismatch: {name} says {hashes[algo]}, bytes [0, {actual}) of the file hash to {got}",
            path=file, offset=0)


def validate_files(files, validate_hashes) -> int:
    """What a reader given ``validate_hashes`` checks at open: each of ``files`` against
    its manifest entry; True checks the files a manifest names, an algorithm name (only
    ``"xxh3_64"`` is recorded) requires every file to have one.  Returns the number
    checked."""
    if not validate_hashes:
        return 0
    algo = DEFAULT_HASH if validate_hashes is True else validate_hashes
    recorded = _Recorded()
    checked = 0
    for file in files:
        manifest, entry = recorded.entry(file)
        if entry is None:
            if validate_hashes is not True:
                raise CorruptShardError(f"no hash manifest records a {algo} hash for this file", path=file)
            continue
        check_file(file, manifest, entry, algo)
        checked += 1
    return checked


def recorded_entries(files) -> list[dict | None]:
    """The manifest entry of each of ``files`` (None where no manifest names it, or its
    manifest is garbled): what a node cache fetches and checks each file against."""
    recorded = _Recorded()
    out: list[dict | None] = []
    for file in files:
        try:
            _, entry = recorded.entry(file)
        except CorruptShardError:
            entry = None
        out.append(entry)
    return out


def recorded_samples(files, plausible=None) -> list[int | None]:
    """The sample count the manifest records for each of ``files`` (WebDataset tars,
    MessagePack streams), None where it records none or a size the file no longer has,
    where the manifest is garbled, or where the count cannot describe a file of that
    size: a count is a shortcut for a scan, never a reason to fail, and never trusted
    beyond the file (``plausible(samples, size, file)``, default
    :func:`plausible_tar_samples`)."""
    plausible = plausible_tar_samples if plausible is None else plausible
    counts: list[int | None] = []
    for file, entry in zip(files, recorded_entries(files)):
        samples = None if entry is None else entry.get("samples")
        size = _size(file)
        if (isinstance(samples, int) and not isinstance(samples, bool) and entry.get("bytes") == size
                and plausible(samples, size, file)):
            counts.append(samples)
        else:
            counts.append(None)
    return counts


# A tar member takes a 512-byte header at least; an archive of no member is its end
# blocks only, at most one 10,240-byte record.
_TAR_BLOCK, _TAR_RECORD = 512, 10240


def plausible_tar_samples(samples: int, size: int | None, file: str | None = None) -> bool:
    """Whether a tar of ``size`` bytes can hold ``samples`` samples: each needs a member
    (512 bytes at least), and no sample means no member: the file (when given) starts
    with a zero block, the end of an archive.

    >>> plausible_tar_samples(0, 10240), plausible_tar_samples(0, 20480), plausible_tar_samples(10**15, 20480)
    (True, False, False)
    """
    if size is None or samples < 0:
        return False
    if samples == 0:
        if size > _TAR_RECORD:
            return False
        if file is None:
            return True
        try:
            with open(file, "rb") as f:
                return not any(f.read(_TAR_BLOCK))
        except OSError:
            return False
    return samples <= size // _TAR_BLOCK


def _size(file: str) -> int | None:
    try:
        return os.path.getsize(file)
    except OSError:
        return None


def verify_files(check, files, dataset) -> None:
    """Check ``files`` against their manifest entries into the Verification ``check``:
    each mismatch, and each file the manifest of the directory ``dataset`` names that is
    missing, is one problem; ``hashes_checked`` counts the files compared."""
    dataset = os.fspath(dataset) if isinstance(dataset, (str, os.PathLike)) else ""
    recorded = _Recorded()
    for file in files:
        try:
            manifest, entry = recorded.entry(file)
            if entry is not None:
                check.report["hashes_checked"] += 1
                check_file(file, manifest, entry)
        except (CorruptShardError, OSError) as exc:
            check.fail(exc)
    if os.path.isdir(dataset):
        manifest = os.path.join(dataset, MANIFEST_NAME)
        try:
            listed = recorded.manifest(manifest) or {}
        except CorruptShardError as exc:
            check.fail(exc)
            listed = {}
        present = {os.path.basename(f) for f in files}
        for name in sorted(set(listed) - present):
            check.fail(ShardNotFoundError(f"{MANIFEST_NAME} names {name!r}, which is missing", path=manifest))
