"""What the launcher says about this process, and the check that MPI agrees with it.

Launchers announce the tasks they start through the environment:

* MPICH / Hydra, Intel MPI, Slurm's ``--mpi=pmi2``: ``PMI_SIZE`` and ``PMI_RANK``
* Open MPI's ``mpirun``: ``OMPI_COMM_WORLD_SIZE`` and ``OMPI_COMM_WORLD_RANK``
* PMIx launchers: ``PMIX_RANK`` (and ``PMIX_SIZE`` where set)
* Slurm ``srun``: ``SLURM_STEP_NUM_TASKS`` and ``SLURM_PROCID`` in every task

``SLURM_NTASKS`` alone is not a task count: the batch script itself runs with it (and with
``SLURM_PROCID=0``) as one process.  It counts only beside a non-zero ``SLURM_PROCID``,
which no batch shell has.

A launcher and an MPI library that do not speak the same process-management interface
(``srun --mpi=none`` with the mpich wheel, say) start N tasks that each initialise MPI as a
world of one: every task then believes it is alone and they overwrite each other's output.
:func:`check_mpi_world` refuses that before anything is written.  Nothing here imports
mpi4py; callers pass the size their communicator reports.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from ..errors import MPIWorldMismatchError

__all__ = ["launcher_tasks", "launcher_world_size", "launcher_rank", "check_mpi_world", "mismatch_message",
           "mpi_library"]

_SIZE_VARS = ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "PMIX_SIZE", "SLURM_STEP_NUM_TASKS")
_RANK_VARS = ("PMI_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "SLURM_PROCID")
_LOCAL_RANK_VARS = ("MPI_LOCALRANKID", "OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID")


def _int(env: Mapping[str, str], name: str) -> int | None:
    value = env.get(name, "").strip()
    return int(value) if value.isdigit() else None


def launcher_tasks(env: Mapping[str, str] | None = None) -> tuple[int, str | None]:
    """The number of tasks the launcher started and the variable that says so.

    >>> launcher_tasks({"SLURM_NTASKS": "2", "SLURM_STEP_NUM_TASKS": "2", "SLURM_PROCID": "0"})
    (2, 'SLURM_STEP_NUM_TASKS')
    >>> launcher_tasks({"SLURM_NTASKS": "8", "SLURM_PROCID": "0"})  # the batch script itself
    (1, None)
    """
    env = os.environ if env is None else env
    for name in _SIZE_VARS:
        size = _int(env, name)
        if size:
            return size, name
    size, procid = _int(env, "SLURM_NTASKS"), _int(env, "SLURM_PROCID")
    if size and procid:
        return size, "SLURM_NTASKS"
    return 1, None


def launcher_world_size(env: Mapping[str, str] | None = None) -> int:
    """The number of tasks the launcher started (1 when not under a launcher).

    >>> launcher_world_size({"PMI_SIZE": "4", "PMI_RANK": "1"})
    4
    >>> launcher_world_size({"SLURM_NTASKS": "8"})
    1
    """
    return launcher_tasks(env)[0]


def launcher_rank(env: Mapping[str, str] | None = None, local: bool = False) -> int:
    """This process's rank (node-local when ``local``) according to the launcher."""
    env = os.environ if env is None else env
    for name in _LOCAL_RANK_VARS if local else _RANK_VARS:
        rank = _int(env, name)
        if rank is not None:
            return rank
    return 0


def mpi_library(MPI) -> str:
    """The first line of the loaded MPI library's version string (``MPICH Version: 4.3``),
    given the already imported ``mpi4py.MPI`` module."""
    text = MPI.Get_library_version().replace("\0", "")  # Open MPI pads it with NULs
    return " ".join((text.strip().splitlines() or [""])[0].split())


def mismatch_message(tasks: int, variable: str, mpi_size: int, library: str | None = None) -> str:
    """The refusal :func:`check_mpi_world` raises, naming the fix.

    >>> print(mismatch_message(2, "SLURM_STEP_NUM_TASKS", 1))  # doctest: +NORMALIZE_WHITESPACE
    the launcher started 2 tasks (SLURM_STEP_NUM_TASKS=2) but MPI sees a world of 1: the tasks
    would each run alone and overwrite each other's output, so nothing was written. Launch
    with `srun --mpi=pmi2` for MPICH-based MPIs (the mpich wheel, Intel MPI, Cray MPICH),
    `srun --mpi=pmix` for Open MPI, or the site's default MPI plugin (`srun --mpi=list`
    shows them); with mpiexec, use the one that belongs to the MPI library mpi4py loads
    """
    loaded = f" (this process loaded {library})" if library else ""
    return (
        f"the launcher started {tasks} tasks ({variable}={tasks}) but MPI sees a world of {mpi_size}: "
        "the tasks would each run alone and overwrite each other's output, so nothing was written. "
        "Launch with `srun --mpi=pmi2` for MPICH-based MPIs (the mpich wheel, Intel MPI, Cray MPICH), "
        "`srun --mpi=pmix` for Open MPI, or the site's default MPI plugin (`srun --mpi=list` shows them); "
        f"with mpiexec, use the one that belongs to the MPI library mpi4py loads{loaded}"
    )


def check_mpi_world(mpi_size: int, env: Mapping[str, str] | None = None, library: str | None = None) -> None:
    """Raise :class:`~hpcio.errors.MPIWorldMismatchError` when the launcher started more
    tasks than the MPI world holds (``library``: the MPI library's name, for the message).

    >>> check_mpi_world(2, {"PMI_SIZE": "2"})
    >>> check_mpi_world(1, {"SLURM_NTASKS": "4", "SLURM_PROCID": "0"})  # a batch shell
    """
    tasks, variable = launcher_tasks(env)
    if tasks > mpi_size:
        raise MPIWorldMismatchError(mismatch_message(tasks, variable, mpi_size, library))
