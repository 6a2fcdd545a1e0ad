"""Run under ``mpiexec -n N python -m mpi4py``: every rank reads its part, rank 0 checks.

Usage: ``mpi_split_check.py N_SAMPLES SEED [MDS_DIR]``.  Without ``MDS_DIR`` the
samples come from an in-memory reader; with it, from real MDS shards.
"""

import shutil
import sys
import tempfile

import json_format
import numpy as np
from mpi4py import MPI

import hpcio
import hpcio.torch as ht
from hpcio.dataset import Dataset
from hpcio.distributed import epoch_order, infer_context, split_indices
from hpcio.formats.base import Reader
from hpcio.pipeline import Pipeline

json_format.register()
SQUARED = []


class RangeReader(Reader):
    def __init__(self, n):
        super().__init__("memory://range")
        self.n = n

    def __len__(self):
        return self.n

    def read(self, i, fields=None):
        return {"id": self.check_index(i)}


def square(sample):
    SQUARED.append(sample["id"])
    return {"id": int(sample["id"]), "sq": int(sample["id"]) ** 2}


def check_cache(comm, ds, n, seed):
    """Each rank writes its cache part once; a second run reads the cache only."""
    size, rank = comm.Get_size(), comm.Get_rank()
    root = comm.bcast(tempfile.mkdtemp(prefix="hpcio-cache-") if rank == 0 else None)
    pipe = Pipeline(ds, seed=seed).map(square).cache(root, format="testjson", timeout=120)
    first = [s["id"] for s in pipe]
    lo, hi = rank * n // size, (rank + 1) * n // size
    if sorted(SQUARED) != list(range(lo, hi)):
        raise AssertionError(f"rank {rank} computed {SQUARED}, expected its part {lo}..{hi}")
    comm.Barrier()
    SQUARED.clear()
    again = [s["id"] for s in Pipeline(ds, seed=seed).map(square).cache(root, format="testjson")]
    if SQUARED or again != first:
        raise AssertionError(f"rank {rank}: second run recomputed {SQUARED}")
    parts = comm.gather(first, root=0)
    if rank == 0:
        union = sorted(sum(parts, []))
        if union != sorted(epoch_order(n, seed, 0)[: n // size * size].tolist()):
            raise AssertionError("cached pipeline union is not the epoch order minus its tail")
        shutil.rmtree(root)
        print(f"CACHE OK size={size} parts={len(parts)}", flush=True)


def main():
    n, seed = int(sys.argv[1]), int(sys.argv[2])
    ds = hpcio.open(sys.argv[3]) if len(sys.argv) > 3 else Dataset(RangeReader(n))
    comm = MPI.COMM_WORLD
    size, rank = comm.Get_size(), comm.Get_rank()
    ctx = infer_context()
    if (ctx.source, ctx.rank, ctx.world_size) != ("mpi", rank, size):
        raise AssertionError(f"rank {rank}: inferred {ctx}")
    mine = split_indices(n, ctx.rank, ctx.world_size, seed=seed, epoch=1)
    # The adapter, with nothing but the MPI context, reads exactly the same samples.
    it = ht.IterableDataset(ds, batch_size=3, seed=seed, epoch=1, collate_fn=list)
    read = [int(s["id"]) for batch in it for s in batch]
    if sorted(read) != sorted(split_indices(n, rank, size, seed=seed, epoch=1, batch_size=3).tolist()):
        raise AssertionError(f"rank {rank}: adapter read {read}")
    if len(read) != n // size:
        raise AssertionError(f"rank {rank}: {len(read)} samples, expected {n // size}")
    parts = comm.gather(np.asarray(read), root=0)
    if rank == 0:
        union = np.concatenate(parts)
        if len(np.unique(union)) != len(union):
            raise AssertionError("ranks share samples")
        order = epoch_order(n, seed, 1)
        if sorted(union.tolist()) != sorted(order[: n // size * size].tolist()):
            raise AssertionError("the union is not the epoch order minus its tail")
        print(f"OK size={size} per_rank={n // size} mine={len(mine)}", flush=True)
    check_cache(comm, ds, n, seed)


main()
