"""A real ``mpiexec`` run (mpich wheel): each rank checks its samples, rank 0 the union;
then each rank writes its pipeline cache part once and a second run only reads."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).with_name("mpi_split_check.py")
MPIEXEC = shutil.which("mpiexec", path=os.path.dirname(sys.executable)) or shutil.which("mpiexec")


def run_mpi(nprocs: int, *args: str) -> str:
    if MPIEXEC is None:
        pytest.fail("mpiexec not found: pip install mpich mpi4py (the [mpi] extra)")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    for var in [v for v in env if v.startswith(("SLURM_", "PMI_", "PMIX_"))]:
        del env[var]  # a launcher's variables from an outer job must not leak in
    out = subprocess.run(
        [MPIEXEC, "-n", str(nprocs), sys.executable, "-m", "mpi4py", str(SCRIPT), *args],
        capture_output=True, text=True, timeout=300, env=env,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    return out.stdout


@pytest.mark.mpi
@pytest.mark.parametrize("nprocs", [1, 2])
def test_mpiexec_ranks_read_disjoint_equal_parts(nprocs):
    out = run_mpi(nprocs, "101", "7")
    per_rank = 101 // nprocs
    assert f"OK size={nprocs} per_rank={per_rank} mine={per_rank}" in out
    assert f"CACHE OK size={nprocs} parts={nprocs}" in out
