"""Distributed reading: who reads what, in which order, on every rank and worker.

:mod:`~hpcio.distributed.context` finds the rank, world size and worker of the calling
process; :mod:`~hpcio.distributed.order` computes epoch orders position by position;
:mod:`~hpcio.distributed.split` holds the pure splitting functions;
:mod:`~hpcio.distributed.launcher` reads what the launcher says about this process;
:mod:`~hpcio.distributed.comm` holds the process group the converter, staging and the
command line run in (:func:`~hpcio.distributed.comm.get_comm`) and is the only module that
imports mpi4py, lazily (``hpcio info`` asks a child process for the MPI library's version).
"""

import importlib
from typing import TYPE_CHECKING

# Bound on first use (PEP 562): reading a dataset imports ``order`` alone, not the context
# module and what it imports (dataclasses, pathlib).
_HOMES = {
    "RuntimeContext": "context", "cpus_per_task": "context", "infer_context": "context",
    "recommended_num_workers": "context",
    "ORDER_ALGORITHM": "order", "BlockOrder": "order", "GlobalOrder": "order", "IndexMap": "order",
    "ConsumerOrder": "split", "circular_shift": "split", "consumed_position": "split", "consumer_order": "split",
    "contiguous_part": "split", "epoch_order": "split", "per_consumer": "split", "split_indices": "split",
}

if TYPE_CHECKING:
    from .context import RuntimeContext, cpus_per_task, infer_context, recommended_num_workers
    from .order import ORDER_ALGORITHM, BlockOrder, GlobalOrder, IndexMap
    from .split import (
        ConsumerOrder,
        circular_shift,
        consumed_position,
        consumer_order,
        contiguous_part,
        epoch_order,
        per_consumer,
        split_indices,
    )


def __getattr__(name: str):
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{home}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_HOMES})


__all__ = [
    "RuntimeContext",
    "infer_context",
    "cpus_per_task",
    "recommended_num_workers",
    "epoch_order",
    "split_indices",
    "consumer_order",
    "ConsumerOrder",
    "IndexMap",
    "GlobalOrder",
    "BlockOrder",
    "ORDER_ALGORITHM",
    "per_consumer",
    "consumed_position",
    "contiguous_part",
    "circular_shift",
]
