"""One conversion at a time into an output: an advisory lock beside it, naming its holder.

Two runs into one ``DST`` would write each other's partial output (and the second would
be told to ``--resume`` an output the first is still writing).  Rank 0 of a run holds
``.DST.hpcio-lock`` with ``flock`` from before the sources are listed until the output is
published or the run ends; the file says who holds it (host, pid, start time), so the
second run names the first and stops.  The kernel drops a ``flock`` when its holder dies,
so a killed run never leaves a lock behind.  Where the filesystem has no ``flock``
(Lustre mounted without ``-o flock``), the file is created with ``O_EXCL`` instead, and a
holder on this host that is no longer alive is taken over.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import socket
import time

from .._processes import alive
from ..errors import ConversionLockedError

__all__ = ["OutputLock", "lock_path"]


def lock_path(dst: str) -> str:
    """The lock file of conversions into ``dst``: hidden, beside it."""
    dst = os.path.abspath(dst).rstrip(os.sep)
    parent, name = os.path.split(dst)
    return os.path.join(parent, f".{name}.hpcio-lock")


class OutputLock:
    """The lock of conversions into ``dst``, held between ``acquire`` and ``release``."""

    def __init__(self, dst: str):
        self.path = lock_path(dst)
        self.fd = -1

    def acquire(self) -> None:
        """Take the lock, or raise :class:`ConversionLockedError` naming its holder."""
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        while True:
            try:
                fd, created = _open_or_create(self.path)
            except FileNotFoundError:  # removed by its holder between the two opens
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = _holder(fd)
                os.close(fd)
                raise self._locked(holder) from None
            except OSError as exc:
                os.close(fd)
                if exc.errno not in (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL):
                    raise
                if created:
                    os.unlink(self.path)
                self._acquire_exclusive()
                return
            try:
                same = os.fstat(fd).st_ino == os.stat(self.path).st_ino
            except FileNotFoundError:
                same = False
            if same:  # else its holder removed it as we opened it: take the new one
                break
            os.close(fd)
        self.fd = fd
        self._write_holder()

    def _acquire_exclusive(self) -> None:
        """The lock as a file created with O_EXCL, for filesystems without ``flock``."""
        for _ in range(2):
            try:
                self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
            except FileExistsError:
                with open(self.path, "rb") as f:
                    holder = _parse(f.read())
                if holder.get("host") == socket.gethostname() and not alive(holder.get("pid")):
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(self.path)  # its holder died on this host
                    continue
                raise self._locked(holder) from None
            self._write_holder()
            return
        raise self._locked({})

    def _write_holder(self) -> None:
        record = {"host": socket.gethostname(), "pid": os.getpid(), "started": time.time()}
        data = json.dumps(record).encode()
        os.ftruncate(self.fd, 0)
        os.pwrite(self.fd, data, 0)

    def _locked(self, holder: dict) -> ConversionLockedError:
        who = (f"pid {holder['pid']} on {holder['host']}, since "
               f"{time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(holder['started']))}"
               if {"host", "pid", "started"} <= set(holder) else "a process that did not say who it is")
        return ConversionLockedError(
            f"another conversion is writing this output ({who}); wait for it to end, or stop it and run "
            "this command again (with --resume to keep what it wrote)", path=self.path)

    def release(self) -> None:
        """Remove the lock file and let go of it (a no-op when not held)."""
        if self.fd < 0:
            return
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)
        os.close(self.fd)
        self.fd = -1

    def __enter__(self):
        self.acquire()
        return self

    def __exit__(self, *exc):
        self.release()


def _open_or_create(path: str) -> tuple[int, bool]:
    """A descriptor of ``path``, and whether this call created the file."""
    try:
        return os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644), True
    except FileExistsError:
        return os.open(path, os.O_RDWR | os.O_CLOEXEC), False


def _holder(fd: int) -> dict:
    """The holder a lock file names (empty when it is being written)."""
    try:
        return _parse(os.pread(fd, 4096, 0))
    except OSError:
        return {}


def _parse(data: bytes) -> dict:
    try:
        record = json.loads(data or b"{}")
    except ValueError:
        return {}
    return record if isinstance(record, dict) else {}
