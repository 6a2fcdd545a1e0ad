"""How many processes run this staging, and the communicator that joins them.

mpi4py is imported only when the launcher says there is more than one process
(``from mpi4py import MPI`` calls ``MPI_Init``, which a plain ``hpcio stage`` on a login
node must not pay for or fail on).  A communicator-shaped stand-in covers the single
process case so the staging engine has one code path.  Launcher detection and the
refusal of a world smaller than the launcher's task count live in
:mod:`hpcio.distributed.launcher`, shared with the converter.
"""

from __future__ import annotations

import sys
from typing import Mapping

from ..distributed.launcher import check_mpi_world, launcher_rank, launcher_world_size, mpi_library

__all__ = ["SelfComm", "launcher_world", "launcher_rank", "get_comm"]


def launcher_world(env: Mapping[str, str] | None = None) -> int:
    """Number of processes the launcher (mpiexec, srun) started; 1 outside one."""
    return launcher_world_size(env)


class SelfComm:
    """The subset of an mpi4py communicator the staging engine uses, for one process."""

    rank = 0
    size = 1

    def bcast(self, obj, root=0):
        return obj

    def allgather(self, obj):
        return [obj]

    def Barrier(self):
        return None


def get_comm(use_mpi: bool = True):
    """``MPI.COMM_WORLD`` when running under MPI with more than one process, else ``None``.

    mpi4py is used when it is already initialised, or when the launcher reports more
    than one process and ``use_mpi`` is true.  ``None`` means "no usable MPI": the caller
    falls back to launcher variables to elect who copies (``--no-mpi``, or no mpi4py).
    MPI that sees fewer processes than the launcher started is refused
    (:class:`~hpcio.errors.MPIWorldMismatchError`), before anything is written.
    """
    mod = sys.modules.get("mpi4py.MPI")
    if mod is not None and mod.Is_initialized() and not mod.Is_finalized():
        comm = mod.COMM_WORLD
        return comm if comm.Get_size() > 1 else None
    if not use_mpi or launcher_world() <= 1:
        return None
    try:
        from mpi4py import MPI
    except ImportError:
        return None
    comm = MPI.COMM_WORLD
    check_mpi_world(comm.Get_size(), library=mpi_library(MPI))
    return comm if comm.Get_size() > 1 else None
