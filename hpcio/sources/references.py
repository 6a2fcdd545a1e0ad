"""Bytes a sample names instead of holding: a file path or a member of a tar shard.

A reference is a string: ``tar://<shard>#<key>.<suffix>`` names the member
``<key>.<suffix>`` of a tar shard (the layout of JSON lines beside WebDataset-style
sidecar shards), anything else a file.  Relative shard and file paths are taken from a
base directory, by default the directory of the source file that holds the reference.
"""

from __future__ import annotations

import os
from collections import OrderedDict

from ..errors import DecodeError, ShardNotFoundError

__all__ = ["TAR_SCHEME", "References"]

TAR_SCHEME = "tar://"


class References:
    """Resolves references into bytes, keeping at most ``max_open_tars`` tar shards open
    (their memory maps and member tables), least recently used closed first: a source
    refers to many shards, often in order, and an open shard answers a lookup without a
    scan of the tar."""

    def __init__(self, base_dir: str, max_open_tars: int = 16):
        self.base_dir = base_dir
        self.max_open_tars = max(1, int(max_open_tars))
        self._tars: OrderedDict[str, tuple] = OrderedDict()

    def path(self, ref: str) -> str:
        """The file ``ref`` names (absolute, or relative to the base directory)."""
        return os.path.join(self.base_dir, ref)

    def resolve(self, ref: str) -> bytes:
        """The bytes ``ref`` names.

        Raises DecodeError for a malformed ``tar://`` reference and ShardNotFoundError for
        a missing file, shard or member, naming what is missing (the caller adds where
        the reference was found)."""
        if ref.startswith(TAR_SCHEME):
            return self._member(ref)
        try:
            with open(self.path(ref), "rb") as f:
                return f.read()
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            raise ShardNotFoundError(f"referenced file {ref!r} not found at {self.path(ref)}") from None

    def _member(self, ref: str) -> bytes:
        shard, sep, member = ref[len(TAR_SCHEME):].partition("#")
        if not sep or not shard or not member:
            raise DecodeError(f"bad tar reference {ref!r}: expected tar://<shard>#<key>.<suffix>")
        index, members = self._shard(shard)
        m = members.get(member)
        if m is None:
            raise ShardNotFoundError(f"tar member {member!r} not found in {index.path}")
        return bytes(index.data(m))

    def _shard(self, shard: str) -> tuple:
        from ..formats.webdataset.reader import _Shard

        path = self.path(shard)
        entry = self._tars.get(path)
        if entry is not None:
            self._tars.move_to_end(path)
            return entry
        if not os.path.isfile(path):
            raise ShardNotFoundError(f"referenced tar shard {shard!r} not found at {path}")
        index = _Shard(path, key_dots=0)
        members = {f"{key}.{index.suffixes[m]}": m for j, key in enumerate(index.keys) for m in index.members(j)}
        entry = self._tars[path] = (index, members)
        if len(self._tars) > self.max_open_tars:
            _path, (old, _members) = self._tars.popitem(last=False)
            old.close()
        return entry

    def close(self) -> None:
        while self._tars:
            _path, (index, _members) = self._tars.popitem()
            index.close()
