"""Writing many bytes-like pieces to a file with one system call per batch, never joining
them into one buffer first (a shard of records would be copied once more)."""

from __future__ import annotations

import os

__all__ = ["write_pieces"]


def write_pieces(fd: int, pieces: list, offset: int | None = None) -> None:
    """Write ``pieces`` back to back to ``fd``: at its position (``writev``), or from byte
    ``offset`` without moving it (``pwritev``, which lets processes write their parts of
    one file at once).  Short writes are resumed where they stopped."""
    limit = min(os.sysconf("SC_IOV_MAX"), 1024)
    for lo in range(0, len(pieces), limit):
        batch = pieces[lo : lo + limit]
        total = sum(len(p) for p in batch)
        done = os.writev(fd, batch) if offset is None else os.pwritev(fd, batch, offset)
        if done < total:
            rest = memoryview(b"".join(batch))[done:]  # a short write: the rest, in order
            at = done
            while rest:
                n = os.write(fd, rest) if offset is None else os.pwrite(fd, rest, offset + at)
                rest, at = rest[n:], at + n
        if offset is not None:
            offset += total
