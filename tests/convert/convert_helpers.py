"""Helpers of the converter tests: small JSON-lines sources and command runners."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)

import linesfmt  # noqa: E402,F401  -- registers the "lines" test format

MPIEXEC = os.path.join(os.path.dirname(sys.executable), "mpiexec")
# ``hpcio <command> ...`` through the real entry point, with the test format registered
# first (the console scripts are not installed in a source checkout).
BOOT = "import sys, linesfmt; from hpcio.cli.main import main; sys.exit(main(sys.argv[1:]))"


def sample(i: int) -> dict:
    """Sample ``i`` of the test sources: sizes vary so byte balancing matters."""
    rng = np.random.default_rng(i)
    return {
        "id": i,
        "text": "w" * int(rng.integers(5, 400)),
        "blob.b64": base64.b64encode(rng.bytes(int(rng.integers(0, 64)))).decode(),
    }


def write_sources(directory, nfiles: int = 3, per_file: int = 120) -> list[str]:
    paths = []
    for f in range(nfiles):
        path = os.path.join(directory, f"src{f}.lines")
        with open(path, "w") as fh:
            for i in range(per_file):
                fh.write(json.dumps(sample(f * per_file + i)) + "\n")
        paths.append(path)
    return paths


def env() -> dict:
    e = dict(os.environ)
    e["PYTHONPATH"] = os.pathsep.join([ROOT, HERE, e.get("PYTHONPATH", "")])
    e["HPCIO_PROGRESS_INTERVAL"] = "0"
    return e


def run_command(command: str, args: list, ranks: int = 1, extra_env=None, timeout=120, **kw):
    """Run ``hpcio <command> args`` on ``ranks`` MPI ranks (1: a plain process)."""
    cmd = [sys.executable, "-c", BOOT, command, *map(str, args)]
    if ranks > 1:
        cmd = [MPIEXEC, "-n", str(ranks), sys.executable, "-m", "mpi4py", "-c", BOOT, command, *map(str, args)]
    e = env()
    e.update(extra_env or {})
    return subprocess.run(cmd, capture_output=True, text=True, env=e, timeout=timeout, **kw)


def tree_bytes(path) -> dict:
    """{relative path: bytes} of every file under ``path``."""
    out = {}
    for base, _, files in os.walk(path):
        for name in files:
            full = os.path.join(base, name)
            with open(full, "rb") as f:
                out[os.path.relpath(full, path)] = f.read()
    return out


def record_arrow_threads(sample: dict) -> dict:
    """A ``--map`` that stores the size of pyarrow's thread pool in the rank writing it."""
    import pyarrow

    return {**sample, "arrow_threads": pyarrow.cpu_count()}


def record_cpus(sample: dict) -> dict:
    """A ``--map`` that stores the CPUs any thread of the rank reading it (pyarrow's
    decoding threads among them) may run on, as ``"0,1"``."""
    cpus = set()
    for tid in os.listdir("/proc/self/task"):
        try:
            cpus.update(os.sched_getaffinity(int(tid)))
        except OSError:  # the thread ended meanwhile
            pass
    return {**sample, "cpus": ",".join(map(str, sorted(cpus)))}


def mds_trouble(sample: dict) -> dict:
    """A ``--map`` giving MDS writers trouble: samples 0..129 hold a set (inferring their
    columns needs ``pkl``, which is refused), and from 180 on every eleventh sample has a
    field its shard's columns lack."""
    i = sample["id"]
    if i < 130:
        return {**sample, "tags": {i}}
    if i >= 180 and i % 11 == 3:
        return {**sample, "note": "x"}
    return sample


def first_three(sample: dict) -> bool:
    """A ``--filter`` keeping samples 0, 1 and 2 only: most shards end up empty."""
    return sample["id"] < 3
