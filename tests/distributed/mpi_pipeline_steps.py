"""Run under ``mpiexec -n N python -m mpi4py``: DDP-style steps over pipelines.

``mpi_pipeline_steps.py N_DOCS``: every rank iterates each pipeline and joins one gloo
``all_reduce`` per step, as a training loop does; a rank with fewer steps would leave
the others waiting.  Rank 0 prints one line per pipeline with the steps of every rank.

``mpi_pipeline_steps.py N_DOCS stop DIR`` takes 3 steps of each of
:func:`checkpoint_pipelines` through ``hpcio.torch.DataLoader`` and writes every rank's
state and the positions read to ``DIR``; ``... resume DIR`` loads those states (at this
run's world size) and reads to the end.
"""

import json
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


def tokens_kept(sample):
    return {**tokens(sample), **{k: v for k, v in sample.items() if k.startswith("__")}}


def checkpoint_pipelines(ds):
    """The pipelines stopped and resumed: a select on content (steps_per_epoch), a token
    budget, bucketed and packed batches (planned)."""
    return {
        "select": Pipeline(ds, seed=5, provenance=True, steps_per_epoch=3).shuffle(32).select(short)
        .map(tokens_kept).batch(max_tokens=12000, token_field="tokens"),
        "budget": Pipeline(ds, seed=5, provenance=True, plan_window=64).map(tokens_kept)
        .batch(max_tokens=12000, token_field="tokens", lengths="text"),
        "bucketed": Pipeline(ds, seed=5, provenance=True, plan_window=64).map(tokens_kept)
        .batch(max_tokens=12000, token_field="tokens", lengths="text", buckets=4),
        "packed": Pipeline(ds, seed=5, provenance=True, plan_window=64)
        .shuffle(32).map(tokens_kept).pack(4096, eos=0, lengths="text").batch(2),
    }


def _positions(item):
    return [int(p) for x in item for p in (x["__position__"] if "cu_seqlens" in x else [x["__position__"]])]


def checkpointed(comm, n: int, mode: str, root: str) -> None:
    """Stop each pipeline after 3 steps (2 DataLoader workers per rank), or resume it
    from the saved states (no worker) and read to the end of the epoch."""
    import hpcio.torch as ht

    rank = comm.Get_rank()
    path = os.path.join(root, "text")
    if rank == 0 and mode == "stop":
        with hpcio.open_writer(path, format="mds") as w:
            for s in generate("text", n, seed=0):
                w.write({"id": s["id"], "text": s["text"]})
    comm.Barrier()
    for name, pipe in checkpoint_pipelines(hpcio.open(path)).items():
        data = ht.PipelineDataset(pipe)
        loader = ht.DataLoader(data, num_workers=2 if mode == "stop" else 0)
        loaded = None
        if mode == "resume":
            with open(os.path.join(root, f"state-{name}.json")) as f:
                loaded = json.load(f)
            data.load_state_dict(loaded)  # a list: every rank's state
        read, steps = [], 0
        for k, item in enumerate(loader):
            read.extend(_positions(item))
            steps += 1
            if mode == "stop" and k == 2:
                break
        states = comm.allgather(data.state_dict())
        parts = comm.gather(read, root=0)
        counts = comm.gather(steps, root=0)
        if rank == 0:
            planned = pipe.step_policy == "planned"
            if planned and any(s != states[0] for s in states):
                raise AssertionError(f"ranks saved different states: {states}")
            left = _left(pipe, loaded[0], comm) if loaded and planned else []
            with open(os.path.join(root, f"{mode}-{name}.json"), "w") as f:
                json.dump({"read": parts, "left": left, "steps": counts}, f)
            if mode == "stop":
                with open(os.path.join(root, f"state-{name}.json"), "w") as f:
                    json.dump(states, f)
            print(f"{mode.upper()} {name} OK size={comm.Get_size()} steps={counts}", flush=True)


def _left(pipe, state, comm):
    """Positions of the groups a run at this size leaves as the epoch's remainder."""
    from hpcio.distributed import RuntimeContext

    groups = list(pipe.plan(RuntimeContext(seed=5)).groups())
    rest = groups[len(groups) - (len(groups) - state["position"]) % comm.Get_size():]
    # a batch is window offsets; a group of packed rows, rows of (offset, start, length)
    return sorted(int(wp[o]) for wp, g in rest
                  for o in (g.tolist() if isinstance(g, np.ndarray) else [x for row in g for x in row[:, 0].tolist()]))


def main():
    n = int(sys.argv[1])
    comm = MPI.COMM_WORLD
    if len(sys.argv) > 2:
        checkpointed(comm, n, sys.argv[2], sys.argv[3])
        return
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
