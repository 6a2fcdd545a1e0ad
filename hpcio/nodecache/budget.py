"""The byte limit of a node cache, held over every dataset under its directory.

Each dataset of a cache directory has its own residency table (:mod:`.store`); the limit
is the directory's.  A fetch counts the resident bytes of every dataset there (each
table's header keeps its own total), and makes room by evicting from the datasets this
process has open: a mixture of tens of datasets read through one cache stays under one
limit, not one per dataset.  Room decisions take ``<directory>/budget.lock`` before any
dataset's table lock, so two processes evicting from each other's datasets never wait on
each other in a cycle.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import threading
from collections.abc import Callable

import numpy as np

from .store import RESIDENT_WORD, Store, resident_word

__all__ = ["Budget"]


class Budget:
    """The limit of the cache directory ``directory``; ``opened()`` lists the stores this
    process has open there (the datasets it can evict from)."""

    def __init__(self, directory: str, limit: int, opened: Callable[[], list[Store]]):
        self.directory, self.limit, self.opened = directory, limit, opened
        self._pid, self._fd = -1, -1
        self._threads = threading.RLock()

    @contextlib.contextmanager
    def locked(self):
        """The directory's room lock: one thread of one process of the node at a time."""
        with self._threads:
            if self._pid != os.getpid():
                self._pid = os.getpid()
                self._fd = os.open(os.path.join(self.directory, "budget.lock"),
                                   os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
            fcntl.flock(self._fd, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(self._fd, fcntl.LOCK_UN)

    def stores(self, first: Store) -> list[Store]:
        """``first``, then the other datasets open here, one store per dataset."""
        out, roots = [first], {first.root}
        for store in self.opened():
            if store.root not in roots:
                roots.add(store.root)
                out.append(store)
        return out

    def used(self) -> int:
        """Bytes resident or being fetched over every dataset of the directory."""
        mine = {store.root: store for store in self.opened()}
        total = 0
        with os.scandir(self.directory) as entries:
            for entry in entries:
                if not entry.is_dir(follow_symlinks=False):
                    continue
                store = mine.get(entry.path)
                total += store.resident_bytes() if store is not None else _recorded(entry.path)
        return total


def _recorded(root: str) -> int:
    """The resident bytes a dataset's table header records (0 when it has no table)."""
    try:
        fd = os.open(os.path.join(root, "meta", "state"), os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return 0
    try:
        words = np.frombuffer(os.pread(fd, 8 * (RESIDENT_WORD + 1), 0), dtype=np.int64)
    finally:
        os.close(fd)
    return resident_word(words)
