"""A launcher that starts N tasks while MPI sees a world of one is refused, by both
``hpcio convert`` and ``hpcio stage``, before anything is written.

The launcher is simulated by its variables in a plain one-process run: exactly what
``srun -n 2 --mpi=none`` gives each task with an MPI that does not speak Slurm's default
interface (each task initialises MPI as a singleton).
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from hpcio.distributed.launcher import check_mpi_world, launcher_rank, launcher_tasks, mismatch_message
from hpcio.errors import MPIWorldMismatchError

pytest.importorskip("mpi4py")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SRUN_NONE = {"SLURM_NTASKS": "2", "SLURM_STEP_NUM_TASKS": "2", "SLURM_PROCID": "0", "SLURM_LOCALID": "0",
             "SLURM_JOB_ID": "4242"}


@pytest.mark.parametrize(
    "environ, tasks",
    [
        ({}, (1, None)),
        ({"PMI_SIZE": "4", "PMI_RANK": "0"}, (4, "PMI_SIZE")),
        ({"OMPI_COMM_WORLD_SIZE": "3", "OMPI_COMM_WORLD_RANK": "2"}, (3, "OMPI_COMM_WORLD_SIZE")),
        ({"PMIX_SIZE": "2", "PMIX_RANK": "1"}, (2, "PMIX_SIZE")),
        (SRUN_NONE, (2, "SLURM_STEP_NUM_TASKS")),
        ({"SLURM_NTASKS": "16", "SLURM_PROCID": "0"}, (1, None)),  # the batch shell
        ({"SLURM_NTASKS": "16", "SLURM_PROCID": "5"}, (16, "SLURM_NTASKS")),
        ({"PMI_SIZE": "x"}, (1, None)),
    ],
)
def test_launcher_tasks(environ, tasks):
    assert launcher_tasks(environ) == tasks


def test_launcher_rank():
    env = {"SLURM_PROCID": "5", "SLURM_LOCALID": "1", "PMI_RANK": "3"}
    assert (launcher_rank(env), launcher_rank(env, local=True), launcher_rank({})) == (3, 1, 0)


def test_check_mpi_world_names_the_fix():
    check_mpi_world(2, {"PMI_SIZE": "2"})
    with pytest.raises(MPIWorldMismatchError) as info:
        check_mpi_world(1, SRUN_NONE, library="MPICH Version: 4.3.0")
    assert str(info.value) == (
        "the launcher started 2 tasks (SLURM_STEP_NUM_TASKS=2) but MPI sees a world of 1: the tasks would "
        "each run alone and overwrite each other's output, so nothing was written. Launch with "
        "`srun --mpi=pmi2` for MPICH-based MPIs (the mpich wheel, Intel MPI, Cray MPICH), `srun --mpi=pmix` "
        "for Open MPI, or the site's default MPI plugin (`srun --mpi=list` shows them); with mpiexec, use "
        "the one that belongs to the MPI library mpi4py loads (this process loaded MPICH Version: 4.3.0)"
    )


def _loaded_library() -> str:
    code = "from mpi4py import MPI; from hpcio.distributed.launcher import mpi_library; print(mpi_library(MPI))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": ROOT})
    return out.stdout.strip()


def _run(args, tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PMI_", "PMIX_", "OMPI_", "SLURM_"))}
    env.update(SRUN_NONE, PYTHONPATH=ROOT)
    return subprocess.run([sys.executable, "-m", "hpcio.cli.main", *args], capture_output=True, text=True,
                          env=env, cwd=tmp_path, timeout=120)


@pytest.fixture
def jsonl(tmp_path):
    path = tmp_path / "src.jsonl"
    path.write_text("".join(f'{{"id": {i}, "text": "{"w" * i}"}}\n' for i in range(50)))
    return path


def test_convert_refuses_a_singleton_world(tmp_path, jsonl):
    out = _run(["convert", str(jsonl), str(tmp_path / "out"), "--to", "mds"], tmp_path)
    assert out.returncode == 1
    expected = mismatch_message(2, "SLURM_STEP_NUM_TASKS", 1, _loaded_library())
    assert out.stderr.strip() == f"hpcio: error: {expected}"
    assert sorted(os.listdir(tmp_path)) == ["src.jsonl"]  # no output, no partial directory


def test_stage_refuses_a_singleton_world(tmp_path, jsonl):
    out = _run(["stage", str(jsonl.parent), str(tmp_path / "copy")], tmp_path)
    assert out.returncode == 1
    expected = mismatch_message(2, "SLURM_STEP_NUM_TASKS", 1, _loaded_library())
    assert out.stderr.strip() == f"hpcio: error: {expected}"
    assert sorted(os.listdir(tmp_path)) == ["src.jsonl"]


def test_stage_without_mpi_elects_a_copier(tmp_path, jsonl):
    """``--no-mpi`` opts out of MPI: the first task copies, as before."""
    (tmp_path / "src").mkdir()
    jsonl.rename(tmp_path / "src" / "src.jsonl")
    out = _run(["stage", "--no-mpi", "--quiet", str(tmp_path / "src"), str(tmp_path / "copy")], tmp_path)
    assert out.returncode == 0, out.stderr
    assert (tmp_path / "copy" / "src.jsonl").read_bytes() == (tmp_path / "src" / "src.jsonl").read_bytes()
