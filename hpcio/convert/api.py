"""``hpcio.convert(src, dst, to, **options)``: a conversion called from Python.

:mod:`hpcio` binds this function as ``hpcio.convert`` after importing this package, so
the name is the function while ``from hpcio.convert import ...`` still reaches the package
(an import finds a loaded package in ``sys.modules``; only its first import sets the
parent's attribute).  ``import hpcio.convert.driver as driver`` would look the name up on
:mod:`hpcio` and find the function: write ``from hpcio.convert import driver``.
"""

from __future__ import annotations

__all__ = ["convert"]


def convert(src, dst, to: str, *, comm=None, **options) -> dict:
    """Convert the datasets ``src`` into the sharded dataset ``dst`` in format ``to``.

    Every MPI rank calls this with the same arguments (under ``mpiexec``/``srun`` the
    ranks share the work; without a launcher one process does it all).  The output is
    byte-identical whatever the number of ranks.

    Parameters
    ----------
    src
        A path or list of paths: files or directories of a readable format.
    dst
        The output directory; it must not exist (or be empty).
    to
        Output format name (``mds``, ``jinx``, ``webdataset``, ``zarr``, ``hdf5``).
    comm
        An mpi4py communicator (or :class:`hpcio.distributed.comm.Comm`) to use instead
        of ``COMM_WORLD`` (:func:`hpcio.distributed.comm.get_comm`).
    **options
        The fields of :class:`hpcio.convert.spec.ConvertOptions` (shard count,
        compression, map and filter, fault tolerance, resume, ...).  An unknown one is an
        :class:`~hpcio.errors.OptionError` listing the valid ones, raised before any
        source is read.

    Returns
    -------
    dict
        The summary (same on every rank): shard and sample counts, bad samples,
        bytes, ranks, and seconds from the moment every rank had the sources listed and
        their formats' libraries imported; ``phases``, each rank's seconds in each
        phase of that time (:class:`hpcio.convert.clock.PhaseClock`); ``peak_rss_bytes``,
        each rank's peak resident memory.
    """
    from .driver import run_conversion
    from .spec import ConvertOptions

    return run_conversion(src, dst, to, ConvertOptions.from_keywords(options, also_valid=("comm",)), comm=comm)
