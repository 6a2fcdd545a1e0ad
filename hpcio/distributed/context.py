"""Who am I in the job: rank, world size, node, dataloader worker, seed and epoch.

:func:`infer_context` reads, in this order, the first of: an initialised mpi4py;
Slurm's step variables; torchrun's variables; an initialised ``torch.distributed``.
DataLoader worker id and count come from ``torch.utils.data.get_worker_info()``.
Explicit keyword arguments always win.  Nothing here imports mpi4py or torch: a
library that was not imported by the program cannot be what runs it.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass

from ..errors import InvalidArgumentError, OptionError

__all__ = ["RuntimeContext", "infer_context", "cpus_per_task", "recommended_num_workers"]


@dataclass(frozen=True)
class RuntimeContext:
    """The position of one data consumer in a job.

    Attributes
    ----------
    rank, world_size : int
        Global process rank and count.
    local_rank, node : int
        Rank within the node, and the node's index.
    worker_id, num_workers : int
        DataLoader worker and count (0 and 1 outside workers).
    seed, epoch : int
        Shuffle seed and epoch.
    tp_size : int
        Tensor-parallel group size.  Ranks ``rank // tp_size`` form one data-parallel
        rank: the ``tp_size`` peers of a group receive identical data, different groups
        disjoint data (tensor-parallel innermost, the usual Megatron layout).
    source : str
        Where rank and world size came from: ``mpi``, ``slurm``, ``torchrun``,
        ``torch.distributed``, ``explicit`` or ``default``.

    >>> ctx = RuntimeContext(rank=5, world_size=8, tp_size=2)
    >>> ctx.dp_rank, ctx.dp_size, ctx.tp_rank
    (2, 4, 1)
    """

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    node: int = 0
    worker_id: int = 0
    num_workers: int = 1
    seed: int = 0
    epoch: int = 0
    tp_size: int = 1
    source: str = "default"

    def __post_init__(self):
        if self.world_size < 1 or not 0 <= self.rank < self.world_size:
            raise InvalidArgumentError(f"rank {self.rank} is not in [0, {self.world_size})")
        if self.num_workers < 1 or not 0 <= self.worker_id < self.num_workers:
            raise InvalidArgumentError(f"worker {self.worker_id} is not in [0, {self.num_workers})")
        if self.tp_size < 1 or self.world_size % self.tp_size:
            raise InvalidArgumentError(
                f"tensor-parallel size {self.tp_size} does not divide world size "
                f"{self.world_size}"
            )

    @property
    def dp_rank(self) -> int:
        """Data-parallel rank: which disjoint part of the data this rank reads."""
        return self.rank // self.tp_size

    @property
    def dp_size(self) -> int:
        """Number of data-parallel ranks (disjoint parts)."""
        return self.world_size // self.tp_size

    @property
    def tp_rank(self) -> int:
        """Position within the tensor-parallel group (peers read the same data)."""
        return self.rank % self.tp_size

    @property
    def consumer(self) -> int:
        """Index of this (data-parallel rank, worker) among all consumers, worker-major."""
        return self.worker_id * self.dp_size + self.dp_rank

    @property
    def consumers(self) -> int:
        """Number of distinct data consumers: ``dp_size * num_workers``."""
        return self.dp_size * self.num_workers

    @property
    def is_dp_leader(self) -> bool:
        """True on one rank per data-parallel group (``tp_rank == 0``)."""
        return self.tp_rank == 0

    def replace(self, **changes) -> RuntimeContext:
        """A copy with ``changes`` applied (validated like the constructor)."""
        return dataclasses.replace(self, **changes)


def _env_int(env: Mapping[str, str], *names: str) -> int | None:
    for name in names:
        value = env.get(name)
        if value not in (None, ""):
            try:
                return int(value)
            except ValueError:
                raise InvalidArgumentError(f"environment variable {name}={value!r} is not an integer") from None
    return None


def _from_mpi(env: Mapping[str, str]) -> dict | None:
    from .comm import running_comm

    comm = running_comm()
    if comm is None:
        return None
    found = {"rank": comm.rank, "world_size": comm.size, "source": "mpi"}
    # Launchers export the node-local rank; asking MPI would need a collective call.
    local = _env_int(env, "SLURM_LOCALID", "MPI_LOCALRANKID", "OMPI_COMM_WORLD_LOCAL_RANK")
    if local is not None:
        found["local_rank"] = local
    node = _env_int(env, "SLURM_NODEID")
    if node is not None:
        found["node"] = node
    return found


def _from_launcher_env(env: Mapping[str, str], source: str, *, rank: str, world: tuple[str, ...],
                       local_rank: str, node: str) -> dict | None:
    """The context a launcher exported in ``env`` under the given variable names (the
    first of ``world`` that is set counts), or None when rank or world size is missing."""
    found_rank = _env_int(env, rank)
    found_world = _env_int(env, *world)
    if found_rank is None or found_world is None:
        return None
    return {
        "rank": found_rank,
        "world_size": found_world,
        "local_rank": _env_int(env, local_rank) or 0,
        "node": _env_int(env, node) or 0,
        "source": source,
    }


def _from_slurm(env: Mapping[str, str]) -> dict | None:
    # The step's task count describes the processes srun started; SLURM_NTASKS is the
    # allocation's and is the fallback when only it is set.
    return _from_launcher_env(env, "slurm", rank="SLURM_PROCID",
                              world=("SLURM_STEP_NUM_TASKS", "SLURM_NTASKS"),
                              local_rank="SLURM_LOCALID", node="SLURM_NODEID")


def _from_torchrun(env: Mapping[str, str]) -> dict | None:
    return _from_launcher_env(env, "torchrun", rank="RANK", world=("WORLD_SIZE",),
                              local_rank="LOCAL_RANK", node="GROUP_RANK")


def _from_torch_distributed(env: Mapping[str, str]) -> dict | None:
    dist = sys.modules.get("torch.distributed")
    if dist is None or not dist.is_available() or not dist.is_initialized():
        return None
    return {
        "rank": dist.get_rank(),
        "world_size": dist.get_world_size(),
        "source": "torch.distributed",
    }


def _worker_info() -> dict:
    data = sys.modules.get("torch.utils.data")
    if data is None:
        return {}
    info = data.get_worker_info()
    if info is None:
        return {}
    return {"worker_id": info.id, "num_workers": info.num_workers}


_SOURCES = (_from_mpi, _from_slurm, _from_torchrun, _from_torch_distributed)


def infer_context(env: Mapping[str, str] | None = None, **explicit) -> RuntimeContext:
    """The :class:`RuntimeContext` of the calling process.

    Parameters
    ----------
    env : mapping, optional
        Environment to read (default ``os.environ``).
    **explicit
        Any :class:`RuntimeContext` field; these override what was inferred.

    >>> infer_context({"SLURM_PROCID": "3", "SLURM_NTASKS": "4", "SLURM_NODEID": "1"})
    RuntimeContext(rank=3, world_size=4, local_rank=0, node=1, worker_id=0, num_workers=1, seed=0, epoch=0, tp_size=1, source='slurm')
    >>> infer_context({"RANK": "1", "WORLD_SIZE": "2"}, rank=0).rank
    0
    """
    env = os.environ if env is None else env
    unknown = set(explicit) - {f.name for f in dataclasses.fields(RuntimeContext)}
    if unknown:
        raise OptionError(f"unknown context fields: {', '.join(sorted(unknown))}")
    values: dict = {}
    for source in _SOURCES:
        found = source(env)
        if found is not None:
            values.update(found)
            break
    values.update(_worker_info())
    if {"rank", "world_size"} & set(explicit):
        values["source"] = "explicit"
    values.update(explicit)
    return RuntimeContext(**values)


def cpus_per_task(env: Mapping[str, str] | None = None) -> int:
    """CPUs this process may use: ``SLURM_CPUS_PER_TASK``, else its CPU affinity.

    ``os.cpu_count()`` counts the whole node, which on a shared GPU node is many times
    what the task was given.

    >>> cpus_per_task({"SLURM_CPUS_PER_TASK": "8"})
    8
    """
    env = os.environ if env is None else env
    slurm = _env_int(env, "SLURM_CPUS_PER_TASK")
    if slurm is not None and slurm > 0:
        return slurm
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def recommended_num_workers(env: Mapping[str, str] | None = None) -> int:
    """DataLoader workers for this task: ``cpus_per_task() - 1`` (one CPU for the
    training process itself), at least 0.

    >>> recommended_num_workers({"SLURM_CPUS_PER_TASK": "10"})
    9
    """
    return max(0, cpus_per_task(env) - 1)
