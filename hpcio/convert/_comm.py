"""The converter's view of the process group: one process, or an MPI communicator.

mpi4py is imported only when the launcher says this process is one of several tasks
(:mod:`hpcio.distributed.launcher`): ``from mpi4py import MPI`` calls ``MPI_Init``, which a
plain ``python`` run must not pay for, and which fails where no MPI library is installed.
A world smaller than the launcher's task count is refused before anything is written.
"""

from __future__ import annotations

import sys

from ..distributed.launcher import check_mpi_world, launcher_world_size, mpi_library
from ..errors import MissingDependencyError, UsageError

__all__ = ["Comm", "SerialComm", "MPIComm", "launcher_world_size", "get_comm"]


class Comm:
    """The few collective operations the converter needs."""

    rank: int = 0
    size: int = 1

    def bcast(self, obj, root: int = 0):
        return obj

    def allgather(self, obj) -> list:
        return [obj]

    def gather(self, obj, root: int = 0):
        return [obj]

    def alltoall(self, objs: list) -> list:
        """Send ``objs[r]`` to rank ``r``; returns what each rank sent to this one."""
        return list(objs)

    def exchange_bytes(self, pieces: list) -> list:
        """Send the bytes-like objects ``pieces[r]`` (a list) to rank ``r``, back to back as
        raw bytes (no pickling); returns what each rank sent to this one, one memoryview
        per rank."""
        return [memoryview(b"".join(p)).cast("B") for p in pieces]

    def barrier(self) -> None:
        pass

    def send_progress(self, obj) -> object | None:
        """Start sending ``obj`` to rank 0 without waiting; returns a request or None."""
        return None

    def poll_progress(self) -> list:
        """Progress messages that have arrived at rank 0, without waiting."""
        return []

    def recv_progress(self):
        """The next progress message at rank 0 (waits for it)."""
        raise UsageError("no other process sends progress")

    def wait_all(self, requests: list) -> None:
        pass

    def abort(self, code: int = 1) -> None:
        """End every process of the group (a lone process just exits)."""
        sys.exit(code)


class SerialComm(Comm):
    """A group of one process."""


_PROGRESS_TAG = 7341
_EXCHANGE_TAG = 7342
# Raw bytes for another rank travel in chunks of this size (the last one shorter), each
# packed into one of two reused buffers while the other one is in flight.  Below MPI's
# int count limit, so libraries older than MPI-4 can count every message in bytes.
_CHUNK_BYTES = 8 << 20


class MPIComm(Comm):
    """An mpi4py communicator (``COMM_WORLD`` by default)."""

    def __init__(self, comm=None):
        try:
            from mpi4py import MPI
        except ImportError as exc:
            raise MissingDependencyError(
                "running under an MPI launcher needs mpi4py: pip install 'hpcio[mpi]'"
            ) from exc
        self._MPI = MPI
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

        MPI = self._MPI
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

    def send_progress(self, obj):
        return self.comm.isend(obj, dest=0, tag=_PROGRESS_TAG)

    def poll_progress(self):
        got = []
        while self.comm.iprobe(source=self._MPI.ANY_SOURCE, tag=_PROGRESS_TAG):
            got.append(self.comm.recv(source=self._MPI.ANY_SOURCE, tag=_PROGRESS_TAG))
        return got

    def recv_progress(self):
        return self.comm.recv(source=self._MPI.ANY_SOURCE, tag=_PROGRESS_TAG)

    def wait_all(self, requests):
        for req in requests:
            req.wait()

    def abort(self, code=1):
        sys.stdout.flush()
        sys.stderr.flush()
        self.comm.Abort(code)


def get_comm(comm=None) -> Comm:
    """The group to convert with: ``comm`` (an mpi4py communicator) if given, else MPI
    ``COMM_WORLD`` under a launcher with more than one task, else a single process."""
    if isinstance(comm, Comm):
        return comm
    if comm is not None:
        return MPIComm(comm)
    if launcher_world_size() > 1:
        world = MPIComm()
        check_mpi_world(world.size, library=mpi_library(world._MPI))
        return world
    return SerialComm()
