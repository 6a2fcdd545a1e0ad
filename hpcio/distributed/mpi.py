"""The only module that touches mpi4py, and only when asked.

``from mpi4py import MPI`` calls ``MPI_Init``, which a plain ``import hpcio`` must never
do; :func:`initialized_comm` only looks at an MPI that the program already started.
"""

from __future__ import annotations

import sys

from ..errors import MissingDependencyError

__all__ = ["initialized_comm", "import_mpi", "allgather_indices"]


def initialized_comm():
    """``MPI.COMM_WORLD`` if the program imported mpi4py and MPI is running, else None.

    Never imports mpi4py: a program that did not start MPI is not an MPI program.
    """
    mpi = sys.modules.get("mpi4py.MPI")
    if mpi is None:
        return None
    if not mpi.Is_initialized() or mpi.Is_finalized():
        return None
    return mpi.COMM_WORLD


def import_mpi():
    """``mpi4py.MPI`` (initialising MPI), or MissingDependencyError naming the install."""
    try:
        from mpi4py import MPI
    except ImportError as exc:
        raise MissingDependencyError(
            "MPI support needs mpi4py and an MPI library: pip install mpi4py mpich"
        ) from exc
    return MPI


def allgather_indices(comm, indices):
    """Every rank's index array, gathered to all ranks as a list (rank order)."""
    import numpy as np

    return [np.asarray(a, dtype=np.int64) for a in comm.allgather(np.asarray(indices))]
