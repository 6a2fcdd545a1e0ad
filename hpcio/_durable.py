"""Durability on POSIX file systems: the one place that makes a directory's entries stick."""

from __future__ import annotations

import os

__all__ = ["fsync_dir"]


def fsync_dir(path: str | os.PathLike) -> None:
    """Make renames and creations inside directory ``path`` durable (a rename is only
    on disk once its directory is fsynced)."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
