"""How many processes run this staging, and the communicator that joins them.

mpi4py is imported only when the launcher says there is more than one process
(``from mpi4py import MPI`` calls ``MPI_Init``, which a plain ``hpcio stage`` on a login
node must not pay for or fail on).  A communicator-shaped stand-in covers the single
process case so the staging engine has one code path.
"""

from __future__ import annotations

import os
import sys
from typing import Mapping

__all__ = ["SelfComm", "launcher_world", "launcher_rank", "get_comm"]

# Launchers and the variable each sets to the number of processes.  SLURM_NTASKS is not
# here: it is also set in the batch shell, where no parallel step runs.
_SIZE_VARS = ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "PMIX_SIZE", "SLURM_STEP_NUM_TASKS")
_RANK_VARS = ("PMI_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "SLURM_PROCID")
_LOCAL_RANK_VARS = ("MPI_LOCALRANKID", "OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID")


def _first_int(env: Mapping[str, str], names) -> int | None:
    for name in names:
        value = env.get(name, "").strip()
        if value.isdigit():
            return int(value)
    return None


def launcher_world(env: Mapping[str, str] | None = None) -> int:
    """Number of processes the launcher (mpiexec, srun) started; 1 outside one."""
    return _first_int(os.environ if env is None else env, _SIZE_VARS) or 1


def launcher_rank(env: Mapping[str, str] | None = None, local: bool = False) -> int:
    """This process's (node-local when ``local``) rank according to the launcher."""
    return _first_int(os.environ if env is None else env, _LOCAL_RANK_VARS if local else _RANK_VARS) or 0


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
    falls back to launcher variables to elect who copies.
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
    return comm if comm.Get_size() > 1 else None
