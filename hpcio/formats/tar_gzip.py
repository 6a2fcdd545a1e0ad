"""Gzip-compressed tar shards (``.tar.gz``, ``.tgz``) opened for random access.

webdataset streams such shards; random access needs the tar's bytes in a file that can
be mapped, so a shard is decompressed once, in 4 MiB steps (memory stays bounded by the
step, not the shard), into an anonymous temporary file that disappears when the shard
is closed, or into ``cache_dir`` where it is kept, keyed by the source's path, size and
modification time, and reused by later readers.
"""

from __future__ import annotations

import gzip
import hashlib
import os
import shutil
import tempfile
import zlib

from ..errors import CorruptShardError, TruncatedShardError

__all__ = ["GZIP_SUFFIXES", "is_gzip_name", "is_gzip_file", "open_decompressed"]

GZIP_SUFFIXES = (".tar.gz", ".tgz")
_STEP = 4 << 20


def is_gzip_name(name: str) -> bool:
    return name.endswith(GZIP_SUFFIXES)


def is_gzip_file(path: str) -> bool:
    """Whether ``path`` starts with the gzip magic bytes."""
    with open(path, "rb") as f:
        return f.read(2) == b"\x1f\x8b"


def _decompress_into(path: str, out) -> None:
    try:
        with gzip.open(path, "rb") as src:
            shutil.copyfileobj(src, out, _STEP)
    except EOFError as e:
        raise TruncatedShardError(f"gzip stream ends early: {e}", path=path) from None
    except (gzip.BadGzipFile, zlib.error) as e:
        raise CorruptShardError(f"gzip stream is damaged: {e}", path=path) from None


def cache_key(path: str) -> str:
    """A name for what ``path`` decompresses to: it changes when the file is replaced
    or rewritten (its path, size and modification time)."""
    st = os.stat(path)
    return hashlib.sha1(f"{os.path.abspath(path)}:{st.st_size}:{st.st_mtime_ns}".encode()).hexdigest()[:16]


def open_decompressed(path: str, cache_dir: str | None = None):
    """A binary file object holding the decompressed tar of the gzip shard ``path``."""
    if cache_dir is None:
        out = tempfile.TemporaryFile(prefix="hpcio-tgz-")
        try:
            _decompress_into(path, out)
        except BaseException:
            out.close()
            raise
        out.seek(0)
        return out
    key = cache_key(path)
    name = os.path.basename(path)
    target = os.path.join(cache_dir, f"{key}.{name[: -len('.gz')] if name.endswith('.gz') else name[:-4] + '.tar'}")
    if not os.path.isfile(target):
        os.makedirs(cache_dir, exist_ok=True)
        tmp = f"{target}.{os.getpid()}.tmp"
        try:
            with open(tmp, "wb") as out:  # type: ignore[assignment]  # the name is reused
                _decompress_into(path, out)
            os.replace(tmp, target)
        finally:
            if os.path.exists(tmp):
                os.remove(tmp)
    return open(target, "rb")
