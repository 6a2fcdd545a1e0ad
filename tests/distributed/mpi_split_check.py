"""Run under ``mpiexec -n N python -m mpi4py``: every rank reads its part, rank 0 checks.

Usage: ``mpi_split_check.py N_SAMPLES SEED [MDS_DIR]``.  Without ``MDS_DIR`` the
samples come from an in-memory reader; with it, from real MDS shards.
"""

import sys

import numpy as np
from mpi4py import MPI

import hpcio
import hpcio.torch as ht
from hpcio.dataset import Dataset
from hpcio.distributed import epoch_order, infer_context, split_indices
from hpcio.formats.base import Reader


class RangeReader(Reader):
    def __init__(self, n):
        super().__init__("memory://range")
        self.n = n

    def __len__(self):
        return self.n

    def read(self, i, fields=None):
        return {"id": self.check_index(i)}


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


main()
