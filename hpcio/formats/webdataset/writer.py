"""Writing WebDataset shards: fixed member order, owner and time, so equal samples
give equal shard bytes."""

from __future__ import annotations

import os
import tarfile
from collections.abc import Mapping

from ..._paths import check_relative_name
from ...errors import OptionError, SchemaError, UnsupportedValueError
from .. import _nested
from .._checksums import Manifest, manifest_path
from ..base import FileWriter, PendingFiles
from .members import member_suffix

SHARD_PATTERN = "shard-%06d.tar"
# A fixed modification time (2020-01-01) keeps shards byte-identical across runs.
FIXED_MTIME = 1577836800


class Writer(FileWriter):
    """Writes samples into ``path/shard-%06d.tar`` with count and size rollover.

    Parameters
    ----------
    max_count
        Samples per shard before a new shard starts.
    max_size
        Bytes per shard (data and headers) before a new shard starts; a single sample
        larger than this gets a shard of its own.
    pattern
        Shard file name pattern (``%d`` style), e.g. ``"rank0003-%06d.tar"`` so parallel
        writers never collide.
    start_shard
        Number of the first shard.
    shard_id, num_shards
        The sharded-writing hook (:mod:`hpcio.formats.contract`): every sample goes into the
        single shard ``shard-<shard_id>.tar`` (no roll-over); :meth:`index_part` then
        describes it for :func:`merge_index`.
    hashes
        ``["xxh3_64"]`` (None, the default): the xxh3_64 of every shard is recorded in
        ``hashes.json`` beside the shards (:mod:`hpcio.formats._checksums`), which
        ``validate_hashes=True`` and ``hpcio verify`` check; ``[]`` writes the tars alone.
        The tars are the same either way.

    A sample's key is its ``__key__`` field when present, else its position
    (``%09d``; under the hook ``<shard_id>-<position>``, so keys stay unique over the
    dataset).  Keys must be unique, non-empty and free of dots (a dot would split the
    key for every reader); fields are written sorted by name.
    """

    def __init__(self, path, max_count: int = 10_000, max_size: int = 1 << 30,
                 pattern: str = SHARD_PATTERN, start_shard: int = 0,
                 shard_id: int | None = None, num_shards: int | None = None, hashes=None, **options):
        super().__init__(path)
        if options:
            raise OptionError(f"unknown WebDataset writer options: {', '.join(options)}")
        self.manifest = Manifest(hashes, "WebDataset")
        self.shard_id = shard_id
        if shard_id is not None:
            max_count, max_size, start_shard = float("inf"), float("inf"), shard_id  # type: ignore[assignment]
        self.max_count = max_count
        self.max_size = max_size
        self.pattern = pattern
        self.shard_number = start_shard
        self.pending = PendingFiles(self.path)
        self.file = None
        self.shard_count = 0
        self.shard_size = 0
        self.last_key: str | None = None
        self.shard_names: list[str] = []

    def _open_shard(self):
        final = os.path.join(self.path, self.pattern % self.shard_number)
        self.shard_number += 1
        self.shard_names.append(os.path.basename(final))
        self.open_file(final)
        self.shard_count = 0
        self.shard_size = 0

    def _finish_shard(self):
        # two zero blocks end the archive; pad to tar's 10 KiB record like tarfile does
        end = 1024
        total = self.shard_size + end
        end += -total % tarfile.RECORDSIZE
        self.file.write(b"\0" * end)
        self.close_file()

    def _header(self, name: str, size: int) -> bytes:
        info = tarfile.TarInfo(name)
        info.size = size
        info.mtime = FIXED_MTIME
        info.mode = 0o444
        info.uid = info.gid = 0
        info.uname = info.gname = ""
        return info.tobuf(tarfile.GNU_FORMAT, "utf-8", "surrogateescape")

    def file_facts(self) -> dict:
        return {"samples": self.shard_count}

    def write(self, sample: Mapping) -> None:
        index = self.count
        key = sample.get("__key__")
        if key is None:
            key = f"{index:09d}" if self.shard_id is None else f"{self.shard_id:06d}-{index:09d}"
        key = check_relative_name(str(key), what="sample key", source=self.path, sample=index)
        base = key.rsplit("/", 1)[-1]
        if not base or "." in base:
            raise UnsupportedValueError(
                f"sample key {key!r} must be non-empty and contain no '.'", path=self.path, sample=index)
        if key == self.last_key:
            raise SchemaError(f"sample key {key!r} repeats the previous sample's key",
                              path=self.path, sample=index)
        members = []
        for field, value in _nested.split_fields(sample, sample_index=index, path=self.path):
            suffix, data = member_suffix(field, value, sample=index, path=self.path)
            name = f"{key}.{suffix}"
            members.append((self._header(name, len(data)), data))
        size = sum(len(h) + len(d) + (-len(d) % 512) for h, d in members)
        if self.file is not None and (self.shard_count >= self.max_count
                                      or (self.shard_count and self.shard_size + size > self.max_size)):
            self._finish_shard()
        if self.file is None:
            self._open_shard()
        for header, data in members:
            self.file.write(header)
            self.file.write(data)
            pad = -len(data) % 512
            if pad:
                self.file.write(b"\0" * pad)
        self.shard_size += size
        self.shard_count += 1
        self.last_key = key
        self.count += 1

    def close(self) -> None:
        with self.aborting():
            if self.file is not None:
                self._finish_shard()
            # under the hook merge_index writes the manifest of every rank's shard
            self.publish(None if self.shard_id is not None else manifest_path(self.path, False))

    def index_part(self) -> dict | None:
        """The shard written under the sharded-writing hook (file name and sample count);
        None when no sample was written (the shard has no file)."""
        if not self.shard_names:
            return None
        part = {"file": self.shard_names[0], "samples": self.count}
        entry = self.manifest.files.get(self.shard_names[0])
        return part if entry is None else {**part, "hashes": entry}


def merge_index(directory, parts, **options) -> None:
    """The sharded-writing hook's last step: WebDataset has no dataset index (readers
    list the ``.tar`` files), so this checks that every shard a part names exists and
    writes the ``hashes.json`` of the shards whose parts carry their hashes.  Shards that
    received no sample (None) have no file."""
    directory = os.fspath(directory)
    manifest = Manifest(None, "WebDataset")
    for part in parts:
        if part is None:
            continue
        manifest.add_part(directory, part, "WebDataset shard")
    pending = PendingFiles()
    manifest.add_to(pending, directory)
    pending.publish()
