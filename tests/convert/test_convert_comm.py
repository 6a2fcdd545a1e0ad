"""Launcher detection: MPI only under a launcher with more than one task."""

from __future__ import annotations

import subprocess
import sys

import pytest
from convert_helpers import env

from hpcio.distributed.comm import SerialComm, get_comm
from hpcio.distributed.launcher import launcher_world_size


@pytest.mark.parametrize(
    "environ, size",
    [
        ({}, 1),
        ({"PMI_SIZE": "4", "PMI_RANK": "0"}, 4),
        ({"OMPI_COMM_WORLD_SIZE": "3", "OMPI_COMM_WORLD_RANK": "2"}, 3),
        ({"SLURM_NTASKS": "16", "SLURM_PROCID": "5"}, 16),
        ({"SLURM_NTASKS": "16"}, 1),  # the batch script itself, not an srun task
        ({"PMI_SIZE": "1", "PMI_RANK": "0"}, 1),
    ],
)
def test_launcher_world_size(environ, size):
    assert launcher_world_size(environ) == size


def test_no_launcher_means_no_mpi(sources, tmp_path):
    code = (
        "import sys, linesfmt, hpcio; "
        f"s = hpcio.convert({sources!r}, {str(tmp_path / 'o')!r}, to='lines', num_shards=2, progress=False); "
        "import hpcio.convert.plan; s2 = hpcio.convert; "
        "print(s['ranks'], 'mpi4py' in sys.modules, callable(s2))"
    )
    e = env()
    for var in ("PMI_SIZE", "PMI_RANK", "OMPI_COMM_WORLD_SIZE", "SLURM_PROCID"):
        e.pop(var, None)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=e, check=True)
    assert out.stdout.split() == ["1", "False", "True"]


def test_serial_comm_by_default():
    assert isinstance(get_comm(), SerialComm)


EXCHANGE = """
import sys
from hpcio.distributed import comm as comms
comms._CHUNK_BYTES = 5  # several chunks per destination, and the remainders
comm = comms.get_comm()
def payload(src, dst):
    return bytes((src * 31 + dst * 7 + k) % 256 for k in range(src * 6 + dst * 4))
def pieces(data):
    # pieces of 0 to 7 bytes, so some span a chunk boundary and some are longer than a chunk
    cuts = [0]
    while cuts[-1] < len(data):
        cuts.append(min(len(data), cuts[-1] + len(cuts) % 8))
    return [data[a:b] for a, b in zip(cuts, cuts[1:])] + [b""]
got = comm.exchange_bytes([pieces(payload(comm.rank, r)) for r in range(comm.size)])
assert [bytes(g) for g in got] == [payload(r, comm.rank) for r in range(comm.size)], got
assert all(g.format == "B" for g in got)
everyone = comm.gather([len(g) for g in got])
if comm.rank == 0:
    print("exchanged", everyone)
"""


@pytest.mark.mpi
@pytest.mark.parametrize("ranks", [2, 3])
def test_exchange_bytes_between_ranks(ranks):
    """Raw pieces of any length, empty ones included, arrive back to back and in order,
    also when they travel as several chunks and a piece is split between two."""
    from convert_helpers import MPIEXEC

    out = subprocess.run([MPIEXEC, "-n", str(ranks), sys.executable, "-m", "mpi4py", "-c", EXCHANGE],
                         capture_output=True, text=True, env=env(), timeout=120, check=False)
    assert out.returncode == 0, out.stderr
    lengths = [[s * 6 + r * 4 for s in range(ranks)] for r in range(ranks)]
    assert out.stdout.splitlines() == [f"exchanged {lengths}"]


def test_serial_exchange_bytes_returns_the_pieces_joined():
    assert [bytes(v) for v in SerialComm().exchange_bytes([[b"ab", b"", memoryview(b"c")]])] == [b"abc"]
