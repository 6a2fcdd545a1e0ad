"""One command line survives every state a batch job can leave: a fresh start, a time
limit (SIGTERM at a round boundary), a kill -9, and a requeue of a finished job.

Real signals are sent to real processes, one process and every rank of ``mpiexec -n 2``
(Slurm signals every task of a step, as these tests do).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
from convert_helpers import BOOT, MPIEXEC, env, write_sources
from test_convert_mpi import _rank_pids

from hpcio.convert.jobstate import INTERRUPTED_EXIT_CODE
from hpcio.convert.resume import staging_path

OPTIONS = ["--to", "mds", "--num-shards", "24", "--round-size", "2k", "--map", "slowmap:slow", "--resume",
           "--no-progress"]


def command(src, dst, ranks):
    cmd = [sys.executable, "-c", BOOT, "convert", *src, str(dst), *OPTIONS]
    if ranks > 1:
        cmd = [MPIEXEC, "-n", str(ranks), sys.executable, "-m", "mpi4py", "-c", BOOT, "convert", *src, str(dst),
               *OPTIONS]
    return cmd


def run(src, dst, ranks=1):
    return subprocess.run(command(src, dst, ranks), capture_output=True, text=True, env=env(), timeout=300)


def ranks_of(proc, ranks):
    """The converter processes a launcher started (itself when there is no launcher)."""
    if ranks == 1:
        return [proc.pid]
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        found = _rank_pids(proc.pid)
        if len(found) == ranks:
            return found
        time.sleep(0.05)
    raise AssertionError(f"{ranks} ranks did not start")


def interrupt(src, dst, sig, ranks):
    """Start the conversion, wait until some shards are published, send ``sig`` to every
    rank, and return the finished process's output."""
    proc = subprocess.Popen(command(src, dst, ranks), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env())
    parts = os.path.join(staging_path(dst), ".hpcio", "parts")
    deadline = time.monotonic() + 120
    while not (os.path.isdir(parts) and len(os.listdir(parts)) >= 2 * ranks):
        assert proc.poll() is None and time.monotonic() < deadline, "no shard was written"
        time.sleep(0.02)
    for pid in ranks_of(proc, ranks):
        os.kill(pid, sig)
    out, err = proc.communicate(timeout=120)
    return proc.returncode, out, err


def tree(root):
    """{relative path: (bytes, mtime_ns)} of every file and directory under ``root``."""
    out = {".": (None, os.stat(root).st_mtime_ns)}
    for base, dirs, files in os.walk(root):
        for name in dirs + files:
            path = os.path.join(base, name)
            data = open(path, "rb").read() if name in files else None
            out[os.path.relpath(path, root)] = (data, os.stat(path).st_mtime_ns)
    return out


def contents(root):
    return {rel: data for rel, (data, _) in tree(root).items()}


@pytest.fixture
def src(tmp_path):
    return write_sources(tmp_path, nfiles=2, per_file=120)


@pytest.fixture
def reference(src, tmp_path):
    out = run(src, tmp_path / "reference")  # --resume on a fresh start simply starts
    assert out.returncode == 0, out.stderr
    return contents(tmp_path / "reference")


@pytest.mark.parametrize("ranks", [1, pytest.param(2, marks=pytest.mark.mpi)])
def test_sigterm_stops_at_a_round_boundary_and_resubmission_finishes(src, reference, tmp_path, ranks):
    dst = tmp_path / "out"
    code, _, err = interrupt(src, dst, signal.SIGTERM, ranks)
    assert code == INTERRUPTED_EXIT_CODE, err
    assert "stopped by SIGTERM at a round boundary with " in err
    assert "the partial output is kept and resumable: resubmit the same command with --resume" in err
    assert not dst.exists() and os.path.isdir(staging_path(dst))
    again = run(src, dst, ranks)
    assert again.returncode == 0, again.stderr
    assert "resumed: kept " in again.stdout
    assert contents(dst) == reference


@pytest.mark.parametrize("ranks", [1, pytest.param(2, marks=pytest.mark.mpi)])
def test_kill_9_leaves_a_resumable_state(src, reference, tmp_path, ranks):
    dst = tmp_path / "out"
    code, _, _ = interrupt(src, dst, signal.SIGKILL, ranks)
    assert code != 0 and not dst.exists()
    again = run(src, dst, ranks)
    assert again.returncode == 0, again.stderr
    assert contents(dst) == reference


@pytest.mark.parametrize("ranks", [1, pytest.param(2, marks=pytest.mark.mpi)])
def test_requeue_of_a_finished_job_writes_nothing(src, reference, tmp_path, ranks):
    dst = tmp_path / "reference"
    before = tree(dst)
    again = run(src, dst, ranks)
    assert again.returncode == 0, again.stderr
    assert again.stdout.strip() == f"{dst} is already complete (24 shards, verified): nothing to do"
    assert tree(dst) == before  # same bytes, same mtimes
    assert not os.path.exists(staging_path(dst))


def test_a_damaged_finished_output_is_not_complete(src, reference, tmp_path):
    dst = tmp_path / "reference"
    shard = next(p for p in sorted(dst.iterdir()) if p.name.startswith("shard."))
    shard.write_bytes(shard.read_bytes()[:-10])  # cut short: the index says otherwise
    again = run(src, dst)
    assert again.returncode == 1
    assert "the destination already exists" in again.stderr
