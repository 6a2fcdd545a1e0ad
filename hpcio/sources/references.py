"""Bytes a sample names instead of holding: a file path or a member of a tar shard.

A reference is a string: ``tar://<shard>#<key>.<suffix>`` names the member
``<key>.<suffix>`` of a tar shard (the layout of JSON lines beside WebDataset-style
sidecar shards), anything else a file.  Relative shard and file paths are taken from the
*roots*: by default the directory of the source file that holds the reference, else the
``ref_root`` directories, tried in order.

A reference is data, written by whoever made the source: ``/etc/passwd``,
``../../secret`` or ``/proc/self/environ`` must not end up in a training shard because
a sample named it.  So a reference resolves only to a regular file inside a root (symbolic
links followed, then checked), of at most ``max_bytes``; ``anywhere=True`` lifts the
root rule (not the others) for users who name absolute paths on purpose.
"""

from __future__ import annotations

import os
import stat
from collections import OrderedDict
from collections.abc import Sequence

from .._paths import is_inside
from ..errors import DecodeError, DecompressionLimitError, PathEscapeError, ShardNotFoundError

__all__ = ["TAR_SCHEME", "DEFAULT_MAX_REF_BYTES", "References"]

TAR_SCHEME = "tar://"
#: The largest referenced file read by default (``-I ref_max_bytes=``): one sample's image
#: or audio clip, with room to spare, not a device or a whole disk image.
DEFAULT_MAX_REF_BYTES = 1 << 30


class References:
    """Resolves references into bytes, keeping at most ``max_open_tars`` tar shards open
    (their memory maps and member tables), least recently used closed first: a source
    refers to many shards, often in order, and an open shard answers a lookup without a
    scan of the tar."""

    def __init__(self, roots: str | Sequence[str], max_open_tars: int = 16, *,
                 max_bytes: int = DEFAULT_MAX_REF_BYTES, anywhere: bool = False):
        self.roots = [os.path.abspath(r) for r in ([roots] if isinstance(roots, str) else roots)]
        self._real_roots = [os.path.realpath(r) for r in self.roots]
        self.max_bytes, self.anywhere = int(max_bytes), bool(anywhere)
        self.max_open_tars = max(1, int(max_open_tars))
        self._tars: OrderedDict[str, tuple] = OrderedDict()

    @property
    def base_dir(self) -> str:
        return self.roots[0]

    def path(self, ref: str) -> str:
        """The file ``ref`` names: absolute, or in the first root that holds it (the first
        root when none does).  Raises PathEscapeError when it is not a regular file
        inside a root (unless ``anywhere``)."""
        if "\0" in ref:
            raise PathEscapeError(f"reference {ref!r} is not a file name")
        candidates = [ref] if os.path.isabs(ref) else [os.path.join(r, ref) for r in self.roots]
        path = next((c for c in candidates if os.path.lexists(c)), candidates[0])
        real = os.path.realpath(path)
        if not self.anywhere and not any(is_inside(real, r) for r in self._real_roots):
            roots = " or ".join(self.roots)
            raise PathEscapeError(f"reference {ref!r} resolves to {real}, outside {roots}: give -I ref_root=DIR "
                                  "for another directory, or -I ref_anywhere=true to read any path")
        return path

    def _regular(self, path: str, ref: str) -> os.stat_result:
        try:
            st = os.stat(path)
        except (FileNotFoundError, NotADirectoryError):
            raise ShardNotFoundError(f"referenced file {ref!r} not found at {path}") from None
        if not stat.S_ISREG(st.st_mode):
            raise PathEscapeError(f"reference {ref!r} names {path}, which is not a regular file")
        if st.st_size > self.max_bytes:
            raise DecompressionLimitError(f"referenced file {path} holds {st.st_size} bytes, more than "
                                          f"ref_max_bytes={self.max_bytes}")
        return st

    def resolve(self, ref: str) -> bytes:
        """The bytes ``ref`` names.

        Raises DecodeError for a malformed ``tar://`` reference, ShardNotFoundError for
        a missing file, shard or member, PathEscapeError for a path outside the roots or
        not a regular file, and DecompressionLimitError beyond ``max_bytes`` (the caller
        adds where the reference was found)."""
        if ref.startswith(TAR_SCHEME):
            return self._member(ref)
        path = self.path(ref)
        self._regular(path, ref)
        with open(path, "rb") as f:
            data = f.read(self.max_bytes + 1)  # a file that grew, or one whose size lies (/proc)
        if len(data) > self.max_bytes:
            raise DecompressionLimitError(f"referenced file {path} holds more than ref_max_bytes={self.max_bytes} bytes")
        return data

    def _member(self, ref: str) -> bytes:
        shard, sep, member = ref[len(TAR_SCHEME):].partition("#")
        if not sep or not shard or not member:
            raise DecodeError(f"bad tar reference {ref!r}: expected tar://<shard>#<key>.<suffix>")
        index, members = self._shard(shard)
        m = members.get(member)
        if m is None:
            raise ShardNotFoundError(f"tar member {member!r} not found in {index.path}")
        data = index.data(m)
        if len(data) > self.max_bytes:
            raise DecompressionLimitError(f"tar member {member!r} of {index.path} holds {len(data)} bytes, more "
                                          f"than ref_max_bytes={self.max_bytes}")
        return bytes(data)

    def _shard(self, shard: str) -> tuple:
        from ..formats.webdataset.reader import _Shard

        path = self.path(shard)
        entry = self._tars.get(path)
        if entry is not None:
            self._tars.move_to_end(path)
            return entry
        if not os.path.lexists(path):
            raise ShardNotFoundError(f"referenced tar shard {shard!r} not found at {path}")
        if not os.path.isfile(path):
            raise PathEscapeError(f"reference {shard!r} names {path}, which is not a regular file")
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
