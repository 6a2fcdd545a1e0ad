"""Run under ``mpiexec -n N python -m mpi4py``: DDP-style steps over pipelines.

Every rank iterates each pipeline and joins one gloo ``all_reduce`` per step, as a
training loop does; a rank with fewer steps would leave the others waiting.  Rank 0
prints one line per pipeline with the steps of every rank.
"""

import os
import shutil
import sys
import tempfile

import numpy as np
import torch
import torch.distributed as dist
from mpi4py import MPI

import hpcio
from hpcio.demo import generate
from hpcio.pipeline import Pipeline


def tokens(sample):
    return {"id": sample["id"], "tokens": np.frombuffer(sample["text"].encode(), np.uint8).astype(np.int64)}


def short(sample):
    return len(sample["text"]) < 2500


def pipelines(ds):
    return {
        "select": Pipeline(ds, seed=3, steps_per_epoch=10).select(short).map(tokens).batch(8),
        "select-budget": Pipeline(ds, seed=3).select(short).map(tokens)
        .batch(max_tokens=12000, token_field="tokens", lengths="text"),
        "budget": Pipeline(ds, seed=3).map(tokens).batch(max_tokens=12000, token_field="tokens", lengths="text"),
        "bucketed": Pipeline(ds, seed=3).map(tokens)
        .batch(max_tokens=12000, token_field="tokens", lengths="text", buckets=4),
        "packed": Pipeline(ds, seed=3).map(tokens).pack(4096, eos=0, lengths="text").batch(4),
    }


def main():
    n = int(sys.argv[1])
    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    root = comm.bcast(tempfile.mkdtemp(prefix="hpcio-steps-") if rank == 0 else None)
    if rank == 0:
        with hpcio.open_writer(os.path.join(root, "text"), format="mds") as w:
            for s in generate("text", n, seed=0):
                w.write({"id": s["id"], "text": s["text"]})
    comm.Barrier()
    dist.init_process_group("gloo", init_method=f"file://{root}/rendezvous", rank=rank, world_size=size)
    ds = hpcio.open(os.path.join(root, "text"))
    for name, pipe in pipelines(ds).items():
        steps = 0
        for batch in pipe:
            total = torch.tensor([len(batch)], dtype=torch.int64)
            dist.all_reduce(total)  # every rank must join every step
            steps += 1
        counts = comm.gather(steps, root=0)
        if rank == 0:
            print(f"STEPS {name} {counts}", flush=True)
    dist.destroy_process_group()
    comm.Barrier()
    if rank == 0:
        shutil.rmtree(root)
        print("DONE", flush=True)


main()
