"""Evicting files from the page cache and measuring how much of them is resident.

A cold benchmark must read from storage, whatever wrote or last read the files (another
tool's writer, ``cp``, a previous pass).  :func:`evict` writes back dirty pages and asks
the kernel to drop each file's cached pages (``POSIX_FADV_DONTNEED``); :func:`resident`
then checks with ``mincore`` that they are gone, so a run that could not evict (tmpfs and
``/dev/shm`` *are* memory; Spectrum Scale's pagepool and some FUSE mounts ignore the
advice) says so instead of reporting a cache figure as a storage one.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import mmap
import os
from collections.abc import Iterable

import numpy as np

from ..errors import ShardReadError

__all__ = ["evict", "resident", "Residency"]

_libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p]
_MAP_FAILED = ctypes.c_void_p(-1).value
_PAGE = mmap.PAGESIZE


def evict(paths: Iterable[str]) -> None:
    """Write back and drop the cached pages of every file in ``paths``."""
    for p in paths:
        fd = os.open(p, os.O_RDONLY)
        try:
            os.fdatasync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def load(paths: Iterable[str]) -> None:
    """Read every file in ``paths`` into the page cache."""
    for p in paths:
        fd = os.open(p, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_SEQUENTIAL)
            while os.read(fd, 8 << 20):
                pass
        finally:
            os.close(fd)


class Residency(tuple):
    """``(resident_bytes, total_bytes)`` of a set of files."""

    __slots__ = ()

    def __new__(cls, resident_bytes: int, total_bytes: int):
        return super().__new__(cls, (resident_bytes, total_bytes))

    @property
    def resident_bytes(self) -> int:
        return self[0]

    @property
    def total_bytes(self) -> int:
        return self[1]

    @property
    def fraction(self) -> float:
        return self.resident_bytes / self.total_bytes if self.total_bytes else 0.0


def _resident_bytes(path: str, offset: int = 0, length: int | None = None) -> tuple[int, int]:
    """``(cached, total)`` bytes of ``path``'s bytes ``[offset, offset + length)`` (to the
    end when ``length`` is None), counted in whole pages."""
    size = os.path.getsize(path)
    start = offset // _PAGE * _PAGE
    end = size if length is None else min(size, offset + length)
    if end <= start:
        return 0, 0
    fd = os.open(path, os.O_RDONLY)
    try:
        addr = _libc.mmap(None, end - start, mmap.PROT_READ, mmap.MAP_SHARED, fd, start)
        if addr in (None, _MAP_FAILED):
            err = ctypes.get_errno()
            raise ShardReadError.from_errno(err, f"mmap for mincore: {os.strerror(err)}", path)
        try:
            pages = (end - start + _PAGE - 1) // _PAGE
            vec = ctypes.create_string_buffer(pages)
            if _libc.mincore(addr, end - start, vec) != 0:
                err = ctypes.get_errno()
                raise ShardReadError.from_errno(err, f"mincore: {os.strerror(err)}", path)
            cached = int(np.count_nonzero(np.frombuffer(vec.raw, np.uint8) & 1))
        finally:
            _libc.munmap(addr, end - start)
    finally:
        os.close(fd)
    return min(cached * _PAGE, end - start), end - start


def resident_range(path: str, offset: int, length: int) -> int:
    """How many bytes of the pages holding ``path``'s bytes ``[offset, offset + length)``
    are in the page cache now."""
    return _resident_bytes(path, offset, length)[0]


def resident(paths: Iterable[str]) -> Residency:
    """How many bytes of ``paths`` are in the page cache now (``mincore``)."""
    cached = total = 0
    for p in paths:
        c, t = _resident_bytes(p)
        cached += c
        total += t
    return Residency(cached, total)
