"""CPUs for ranks that share a node: each rank bound to its own slice for the job.

A launcher that starts several ranks on the same CPUs (``mpiexec`` without ``-bind-to``)
leaves them competing for every CPU, and a library with a thread pool (pyarrow) in each
rank runs as many threads as the node has CPUs.  :func:`share_node_cpus` gives each such
rank a slice, as ``-bind-to core`` or ``srun --cpu-bind=cores`` would have done, and
gives every thread its CPUs back afterwards.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable

from ..distributed.comm import Comm
from ..distributed.context import cpus_per_task

__all__ = ["cpu_share", "share_node_cpus"]


def cpu_share(task_cpus: int, shared_cpus: int, sharing: int) -> int:
    """Threads for one of ``sharing`` processes that may all run on the same
    ``shared_cpus`` CPUs, at most ``task_cpus`` (what the task was given), at least 1.

    >>> cpu_share(2, 2, 2), cpu_share(8, 64, 8), cpu_share(4, 4, 1), cpu_share(4, 4, 8)
    (1, 8, 4, 1)
    """
    return max(1, min(task_cpus, shared_cpus // max(1, sharing)))


def share_node_cpus(comm: Comm, decodes_parquet: bool) -> Callable[[], None]:
    """Give each rank its own share of the CPUs it would otherwise share with other ranks
    on its node, for the job; returns the function that gives them back.  Collective
    (every rank calls it).

    Ranks a launcher left on the same CPUs are bound each to a slice of them: unbound,
    they read, encode and exchange slower.  Parquet decoding is capped to the same share,
    since every rank would otherwise decode with as many threads as it has CPUs.  Ranks a
    launcher binds to CPUs of their own share nothing and keep theirs.
    """
    if comm.size == 1:
        return lambda: None
    cpus = tuple(sorted(os.sched_getaffinity(0)))
    me = (socket.gethostname(), cpus)
    everyone = comm.allgather(me)
    sharing = everyone.count(me)
    if sharing == 1:
        return lambda: None
    share = cpu_share(cpus_per_task(), len(cpus), sharing)
    undo = []
    if sharing * share <= len(cpus):  # else too few CPUs for a slice each: left as they are
        local = everyone[: comm.rank].count(me)
        affinities = _bind_threads(cpus[local * share : (local + 1) * share])
        undo.append(lambda: _restore_threads(affinities, cpus))
    if decodes_parquet:
        import pyarrow as pa

        before = pa.cpu_count()
        if share < before:
            pa.set_cpu_count(share)
            undo.append(lambda: pa.set_cpu_count(before))

    def restore() -> None:
        for step in reversed(undo):
            step()

    return restore


def _threads() -> list[int]:
    """The thread ids of this process (0, the calling thread, without procfs)."""
    try:
        return [int(tid) for tid in os.listdir("/proc/self/task")]
    except OSError:
        return [0]


def _bind_threads(cpus) -> dict:
    """Set the CPU affinity of every thread of this process to ``cpus``
    (``sched_setaffinity(0)`` sets only the calling thread's, and thread pools, pyarrow's,
    may already run); returns each thread's affinity before."""
    before = {}
    for tid in _threads():
        try:
            before[tid] = os.sched_getaffinity(tid)
            os.sched_setaffinity(tid, cpus)
        except OSError:  # the thread ended meanwhile
            pass
    return before


def _restore_threads(before: dict, default) -> None:
    """Give every thread back its affinity in ``before``; threads started since get
    ``default``."""
    for tid in _threads():
        try:
            os.sched_setaffinity(tid, before.get(tid, default))
        except OSError:  # the thread ended meanwhile
            pass
