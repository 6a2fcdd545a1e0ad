"""Runtime context inference from Slurm, torchrun and explicit values."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from hpcio.distributed import RuntimeContext, cpus_per_task, infer_context, recommended_num_workers

SLURM = {
    "SLURM_PROCID": "5",
    "SLURM_LOCALID": "1",
    "SLURM_NTASKS": "16",
    "SLURM_STEP_NUM_TASKS": "8",
    "SLURM_NODEID": "2",
    "SLURM_CPUS_PER_TASK": "10",
}
TORCHRUN = {"RANK": "3", "LOCAL_RANK": "3", "WORLD_SIZE": "4", "GROUP_RANK": "0"}


def test_slurm_step_variables():
    ctx = infer_context(SLURM)
    assert (ctx.rank, ctx.world_size, ctx.local_rank, ctx.node, ctx.source) == (5, 8, 1, 2, "slurm")


def test_slurm_ntasks_when_no_step_count():
    env = {k: v for k, v in SLURM.items() if k != "SLURM_STEP_NUM_TASKS"}
    assert infer_context(env).world_size == 16


def test_slurm_comes_before_torchrun():
    assert infer_context({**TORCHRUN, **SLURM}).source == "slurm"


def test_torchrun_variables():
    ctx = infer_context(TORCHRUN)
    assert (ctx.rank, ctx.world_size, ctx.local_rank, ctx.source) == (3, 4, 3, "torchrun")


def test_explicit_values_override():
    ctx = infer_context(SLURM, rank=0, world_size=2, seed=9, epoch=4)
    assert (ctx.rank, ctx.world_size, ctx.seed, ctx.epoch, ctx.source) == (0, 2, 9, 4, "explicit")
    assert infer_context(SLURM, seed=1).source == "slurm"


def test_defaults_without_any_launcher():
    assert infer_context({}) == RuntimeContext()


def test_mesh_and_consumer_numbering():
    ctx = RuntimeContext(rank=7, world_size=8, tp_size=4, worker_id=1, num_workers=3)
    assert (ctx.dp_rank, ctx.dp_size, ctx.tp_rank, ctx.is_dp_leader) == (1, 2, 3, False)
    assert (ctx.consumer, ctx.consumers) == (1 * 2 + 1, 6)


@pytest.mark.parametrize(
    "fields, message",
    [
        ({"rank": 4, "world_size": 4}, r"rank 4 is not in \[0, 4\)"),
        ({"worker_id": 2, "num_workers": 2}, r"worker 2 is not in \[0, 2\)"),
        ({"world_size": 6, "tp_size": 4}, "tensor-parallel size 4 does not divide world size 6"),
    ],
)
def test_invalid_context(fields, message):
    with pytest.raises(ValueError, match=message):
        RuntimeContext(**fields)


def test_bad_environment_and_fields():
    with pytest.raises(ValueError, match=r"environment variable SLURM_PROCID='x' is not an integer"):
        infer_context({"SLURM_PROCID": "x", "SLURM_NTASKS": "2"})
    with pytest.raises(TypeError, match="unknown context fields: ranks"):
        infer_context({}, ranks=1)


def test_cpus_per_task_prefers_slurm_then_affinity():
    assert cpus_per_task(SLURM) == 10
    assert cpus_per_task({}) == len(os.sched_getaffinity(0))
    assert recommended_num_workers(SLURM) == 9
    assert recommended_num_workers({"SLURM_CPUS_PER_TASK": "1"}) == 0


def test_torch_distributed_and_worker_info_are_read_when_present():
    # A fresh interpreter: gloo process group of one, as torchrun would set up.
    code = (
        "import torch.distributed as dist\n"
        "dist.init_process_group('gloo', init_method='tcp://127.0.0.1:0', rank=0, world_size=1)\n"
        "from hpcio.distributed import infer_context\n"
        "c = infer_context({})\n"
        "print(c.source, c.rank, c.world_size)\n"
        "dist.destroy_process_group()\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["torch.distributed", "0", "1"]


def test_import_hpcio_does_not_import_mpi4py_or_torch():
    code = "import sys, hpcio, hpcio.distributed; print('mpi4py' in sys.modules, 'torch' in sys.modules)"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False", "False"]


@pytest.mark.parametrize(
    "blocked, statement, message",
    [
        ("torch", "import hpcio.torch", "hpcio.torch needs PyTorch: pip install torch"),
        (
            "mpi4py",
            "from hpcio.distributed.comm import import_mpi; import_mpi()",
            "MPI support needs mpi4py and an MPI library: pip install mpi4py mpich",
        ),
    ],
)
def test_missing_optional_dependency_says_what_to_install(blocked, statement, message):
    # sys.modules[name] = None makes `import name` fail as if it were not installed.
    code = (
        f"import sys; sys.modules[{blocked!r}] = None\n"
        "from hpcio.errors import MissingDependencyError\n"
        f"try:\n    {statement}\nexcept MissingDependencyError as exc:\n    print(exc)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == message
