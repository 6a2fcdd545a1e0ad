"""The version of a staged dataset its readers opened, checked whenever they open a shard.

``hpcio stage`` into a destination that holds an earlier version withdraws the
destination's manifest (:data:`MANIFEST_NAME`) before it replaces any file, and writes a
new one (a new file) once every file is in place.  A reader that opened the dataset while
a manifest was there keeps that manifest's identity (inode, size, mtime); each time it
opens a shard file, after opening it, it checks the manifest is still the same one.  A
shard opened while it is the same is of the version the reader opened (files are replaced
by rename, so a descriptor keeps its inode); one opened once it has changed may be of
another, and raises :class:`~hpcio.errors.DatasetChangedError` instead of mixing them.
A dataset without a manifest but with rank 0's journal is being staged (or a staging
stopped part-way), and is refused at open; one with neither (not staged by hpcio) is not
checked.
"""

from __future__ import annotations

import os

from .errors import DatasetChangedError

__all__ = ["MANIFEST_NAME", "Version", "journal_name"]

#: The staging manifest: written last, so its presence means "complete".
MANIFEST_NAME = ".hpcio-manifest.json"


def journal_name(rank: int) -> str:
    """The journal a staging run's rank keeps until the manifest is published (rank 0's
    is made before any file is replaced)."""
    return f".hpcio-journal.{rank}.jsonl"


def _identity(path: str) -> tuple[int, int, int] | None:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return st.st_ino, st.st_size, st.st_mtime_ns


class Version:
    """The manifest identity of the dataset in ``directory`` when it was opened."""

    __slots__ = ("manifest", "identity")

    def __init__(self, directory: str):
        self.manifest = os.path.join(directory, MANIFEST_NAME)
        self.identity = _identity(self.manifest)
        if self.identity is None and os.path.exists(os.path.join(directory, journal_name(0))):
            raise DatasetChangedError(
                "the dataset is being staged, or a staging run stopped part-way (a journal, no manifest): wait "
                "for it to end, or run the same hpcio stage again to finish it", path=directory)

    def check(self, opened: str) -> None:
        """Raise DatasetChangedError when the dataset was staged again since it was opened
        (``opened``: the shard file just opened, named in the error)."""
        if self.identity is None:
            return
        now = _identity(self.manifest)
        if now != self.identity:
            state = "is being staged again" if now is None else "was staged again"
            raise DatasetChangedError(
                f"the dataset {state} since this reader opened it: this shard may be of the new version "
                "and the samples read so far of the old one; open the dataset again to read the new version",
                path=opened)
