"""The process group a job runs in: one process, or an MPI communicator.

This is the only module that imports mpi4py.  ``from mpi4py import MPI`` calls
``MPI_Init``, which a plain ``import hpcio`` or ``hpcio stage`` on a login node must not pay
for, and which fails where no MPI library is installed: mpi4py is imported only when a
launcher (:mod:`hpcio.distributed.launcher`) says this process is one of several tasks, or
when the caller hands in a communicator.  An MPI the program already started is used
without importing anything.

Every caller (the converter, staging, the command line, :func:`~hpcio.distributed.infer_context`)
speaks to the group through :class:`Comm`: :class:`SerialComm` for a lone process, so a
job has one code path, and :class:`MPIComm` around an mpi4py communicator.
:func:`get_comm` chooses between them.
"""

from __future__ import annotations

import sys
from typing import Any, Protocol, runtime_checkable

from ..errors import MissingDependencyError, UsageError
from .launcher import check_mpi_world, launcher_world_size, mpi_library

__all__ = ["Comm", "SerialComm", "MPIComm", "get_comm", "running_comm", "import_mpi"]


@runtime_checkable
class Comm(Protocol):
    """The collective operations hpcio's jobs use.  Every rank of the group calls a
    collective method with the same arguments, in the same order."""

    rank: int
    size: int

    def bcast(self, obj, root: int = 0) -> Any:
        """``obj`` of rank ``root``, on every rank."""

    def allgather(self, obj) -> list:
        """Every rank's ``obj``, in rank order, on every rank."""

    def gather(self, obj, root: int = 0) -> list | None:
        """Every rank's ``obj`` in rank order on rank ``root``; None on the others."""

    def alltoall(self, objs: list) -> list:
        """Send ``objs[r]`` to rank ``r``; returns what each rank sent to this one."""

    def exchange_bytes(self, pieces: list) -> list:
        """Send the bytes-like objects ``pieces[r]`` (a list) to rank ``r``, back to back as
        raw bytes (no pickling); returns what each rank sent to this one, one memoryview
        per rank."""

    def barrier(self) -> None:
        """Wait until every rank has called it."""

    def split_node(self) -> Comm:
        """The ranks sharing this rank's node, as a group of their own.  Collective."""

    def free(self) -> None:
        """Release a group :meth:`split_node` made."""

    def send_progress(self, obj) -> object | None:
        """Start sending ``obj`` to rank 0 without waiting; returns a request or None."""

    def poll_progress(self) -> list:
        """Progress messages that have arrived at rank 0, without waiting."""

    def recv_progress(self) -> Any:
        """The next progress message at rank 0 (waits for it)."""

    def wait_all(self, requests: list) -> None:
        """Wait for the requests :meth:`send_progress` returned."""

    def abort(self, code: int = 1) -> None:
        """End every process of the group."""


class SerialComm:
    """A group of one process."""

    rank = 0
    size = 1

    def bcast(self, obj, root: int = 0):
        return obj

    def allgather(self, obj) -> list:
        return [obj]

    def gather(self, obj, root: int = 0):
        return [obj]

    def alltoall(self, objs: list) -> list:
        return list(objs)

    def exchange_bytes(self, pieces: list) -> list:
        return [memoryview(b"".join(p)).cast("B") for p in pieces]

    def barrier(self) -> None:
        pass

    def split_node(self) -> SerialComm:
        return self

    def free(self) -> None:
        pass

    def send_progress(self, obj) -> None:
        return None

    def poll_progress(self) -> list:
        return []

    def recv_progress(self):
        raise UsageError("no other process sends progress")

    def wait_all(self, requests: list) -> None:
        pass

    def abort(self, code: int = 1) -> None:
        """A lone process just exits."""
        sys.exit(code)


_PROGRESS_TAG = 7341
_EXCHANGE_TAG = 7342
# Raw bytes for another rank travel in chunks of this size (the last one shorter), each
# packed into one of two reused buffers while the other one is in flight.  Below MPI's
# int count limit, so libraries older than MPI-4 can count every message in bytes.
_CHUNK_BYTES = 8 << 20


def import_mpi():
    """``mpi4py.MPI`` (initialising MPI), or MissingDependencyError naming the install."""
    try:
        from mpi4py import MPI
    except ImportError as exc:
        raise MissingDependencyError(
            "MPI support needs mpi4py and an MPI library: pip install mpi4py mpich"
        ) from exc
    return MPI


class MPIComm:
    """An mpi4py communicator (``COMM_WORLD`` by default); ``comm`` is the mpi4py one."""

    def __init__(self, comm=None):
        MPI = import_mpi()
        self.MPI = MPI
        self.comm = MPI.COMM_WORLD if comm is None else comm
        self.rank = self.comm.Get_rank()
        self.size = self.comm.Get_size()

    def bcast(self, obj, root=0):
        return self.comm.bcast(obj, root=root)

    def allgather(self, obj):
        return self.comm.allgather(obj)

    def gather(self, obj, root=0):
        return self.comm.gather(obj, root=root)

    def alltoall(self, objs):
        return self.comm.alltoall(objs)

    def exchange_bytes(self, pieces):
        import numpy as np

        from .._core._io import pack_pieces

        MPI = self.MPI
        totals = [0 if dest == self.rank else sum(map(len, p)) for dest, p in enumerate(pieces)]
        sizes = self.comm.alltoall(totals)
        received = [np.empty(n, np.uint8) for n in sizes]
        received[self.rank] = np.frombuffer(b"".join(pieces[self.rank]), np.uint8)
        requests = []
        # Every rank posts all its receives before it waits for any of its sends, so no two
        # ranks wait for each other.  Messages of one sender and tag arrive in order:
        # chunk k from a rank lands at k * _CHUNK_BYTES.
        for source, into in enumerate(received):
            if source != self.rank:
                for lo in range(0, len(into), _CHUNK_BYTES):
                    requests.append(self.comm.Irecv([into[lo : lo + _CHUNK_BYTES], MPI.BYTE], source,
                                                    _EXCHANGE_TAG))
        # Each destination's pieces (many small records) are packed into contiguous chunks:
        # a chunk costs MPI one copy, where a datatype listing the pieces where they are
        # (MPI_Type_create_hindexed) took ten times as long as the same bytes contiguous.
        # The two chunk buffers are reused, so after the first chunks the packing writes
        # into memory already faulted in.
        chunks = [np.empty(min(_CHUNK_BYTES, max(totals)), np.uint8) for _ in range(2)] if any(totals) else []
        in_flight = [None, None]
        sent = 0
        for step in range(1, self.size):
            dest = (self.rank + step) % self.size
            index = offset = 0
            left = totals[dest]
            while left:
                slot = sent % 2
                if in_flight[slot] is not None:
                    in_flight[slot].Wait()
                index, offset, n = pack_pieces(pieces[dest], index, offset, chunks[slot])
                in_flight[slot] = self.comm.Isend([chunks[slot][:n], MPI.BYTE], dest, _EXCHANGE_TAG)
                left -= n
                sent += 1
        MPI.Request.Waitall(requests + [r for r in in_flight if r is not None])
        return [memoryview(r) for r in received]

    def barrier(self):
        self.comm.Barrier()

    def split_node(self) -> MPIComm:
        return MPIComm(self.comm.Split_type(self.MPI.COMM_TYPE_SHARED))

    def free(self) -> None:
        self.comm.Free()

    def send_progress(self, obj):
        return self.comm.isend(obj, dest=0, tag=_PROGRESS_TAG)

    def poll_progress(self):
        got = []
        while self.comm.iprobe(source=self.MPI.ANY_SOURCE, tag=_PROGRESS_TAG):
            got.append(self.comm.recv(source=self.MPI.ANY_SOURCE, tag=_PROGRESS_TAG))
        return got

    def recv_progress(self):
        return self.comm.recv(source=self.MPI.ANY_SOURCE, tag=_PROGRESS_TAG)

    def wait_all(self, requests):
        for req in requests:
            req.wait()

    def abort(self, code=1):
        sys.stdout.flush()
        sys.stderr.flush()
        self.comm.Abort(code)


def running_comm() -> MPIComm | None:
    """``COMM_WORLD`` of an MPI the program already started, of any size, else None.

    Never imports mpi4py: a program that did not start MPI is not an MPI program.
    """
    mpi = sys.modules.get("mpi4py.MPI")
    if mpi is None or not mpi.Is_initialized() or mpi.Is_finalized():
        return None
    return MPIComm()


def get_comm(comm=None, *, use_mpi: bool = True, missing_ok: bool = False) -> Comm:
    """The group to run a job in.

    ``comm``, if given: a :class:`Comm` as it is, an mpi4py communicator wrapped in
    :class:`MPIComm`.  Else MPI's ``COMM_WORLD`` when it holds more than one process: an
    MPI the program already started, or one this call starts because the launcher
    started more than one task (unless ``use_mpi`` is false).  Else a lone process
    (:class:`SerialComm`).

    A world smaller than the launcher's task count is refused
    (:class:`~hpcio.errors.MPIWorldMismatchError`) before anything is written.  Without
    mpi4py under such a launcher, :class:`~hpcio.errors.MissingDependencyError`; with
    ``missing_ok``, a lone process (the caller tells the tasks apart by the launcher's
    variables).
    """
    if isinstance(comm, Comm):
        return comm
    if comm is not None:
        return MPIComm(comm)
    tasks = launcher_world_size()
    world = running_comm()
    if world is None and use_mpi and tasks > 1:
        try:
            world = MPIComm()
        except MissingDependencyError as exc:
            if missing_ok:
                return SerialComm()
            raise MissingDependencyError(
                "running under an MPI launcher needs mpi4py: pip install 'hpcio[mpi]'"
            ) from exc.__cause__
    if world is None:
        return SerialComm()
    if tasks > 1:
        check_mpi_world(world.size, library=mpi_library(world.MPI))
    return world if world.size > 1 else SerialComm()
