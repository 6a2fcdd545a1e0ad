"""Fixtures shared by the whole test suite.

``interop_python``
    The Python 3.12 interpreter of the reference libraries' environment (mldataforge,
    mosaicml-streaming), from ``$HPCIO_INTEROP_PYTHON``; tests that use it skip with the
    reason when it is missing (``make test-interop`` creates it), or fail with that
    reason when ``HPCIO_REQUIRE_INTEROP=1`` (set by ``make test-interop``, so CI cannot
    pass an interop run that compared nothing).
``demo_samples``
    ``demo_samples(profile, n, seed=0)``: deterministic demo samples, cached per session.
``run_hpcio``
    ``run_hpcio(*args)``: the ``hpcio`` command in a child process, on this source tree.
``mpiexec``
    The ``mpiexec`` of the ``mpich`` wheel installed beside this Python.
``tuned``
    The garbage-collector and Arrow-pool switches of :func:`hpcio.tune` on for the test
    (as ``hpcio convert``, ``hpcio bench`` and the demo run), put back after.
``row_group_reads``
    The list of row-group numbers pyarrow's ``ParquetFile.read_row_group`` is called
    with during the test, in call order.
``mount_tmpfs``
    ``mount_tmpfs(name, options)``: a real tmpfs (``mount -o options``) at
    ``tmp_path/name``; the test skips where mounting is not allowed (it needs root), and
    fails if a file is still open there at its end.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys

import pytest

from hpcio.testing.environment import missing

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
INTEROP_ENV = os.environ.get(
    "HPCIO_INTEROP_ENV", os.path.expanduser("~/.cache/hpcio/interop-py312")
)
INTEROP_PYTHON = os.environ.get(
    "HPCIO_INTEROP_PYTHON", os.path.join(INTEROP_ENV, "bin", "python")
)
# Written by tools/interop-env.sh when it cannot build the environment; holds the reason.
INTEROP_UNAVAILABLE = os.path.join(INTEROP_ENV, "UNAVAILABLE")


def child_env(**extra: str) -> dict:
    """The environment for a child Python that must import this source tree."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [REPO, env.get("PYTHONPATH")]))
    env.update(extra)
    return env


def _interop_missing(reason: str):
    missing("INTEROP", reason)


@pytest.fixture(scope="session")
def interop_python() -> str:
    if os.path.exists(INTEROP_UNAVAILABLE):
        with open(INTEROP_UNAVAILABLE) as f:
            _interop_missing(f"interop environment unavailable: {f.read().strip()}")
    if not os.access(INTEROP_PYTHON, os.X_OK):
        _interop_missing(
            f"interop interpreter {INTEROP_PYTHON} is missing; create it with "
            "tools/interop-env.sh (make test-interop) or set HPCIO_INTEROP_PYTHON"
        )
    probe = subprocess.run(
        [INTEROP_PYTHON, "-c", "import mldataforge.jinx, mldataforge.mds, streaming"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    if probe.returncode != 0:
        last = (probe.stderr.strip().splitlines() or ["no output"])[-1]
        _interop_missing(f"interop interpreter {INTEROP_PYTHON} cannot import mldataforge: {last}")
    return INTEROP_PYTHON


@functools.cache
def _demo(profile: str, n: int, seed: int) -> tuple:
    from hpcio.demo import generate

    return tuple(generate(profile, n, seed))


@pytest.fixture(scope="session")
def demo_samples():
    """``demo_samples(profile, n, seed=0)`` -> list of samples (fresh list, shared dicts:
    do not mutate them)."""

    def make(profile: str, n: int, seed: int = 0) -> list:
        return list(_demo(profile, n, seed))

    return make


@pytest.fixture
def mount_tmpfs(tmp_path):
    mounted = []

    def mount(name: str, options: str):
        path = tmp_path / name
        path.mkdir()
        proc = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(path)],
                              capture_output=True, text=True)
        if proc.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here: {proc.stderr.strip() or proc.returncode}")
        mounted.append(path)
        return path

    yield mount
    busy = []
    for path in mounted:
        if subprocess.run(["umount", str(path)], capture_output=True).returncode:
            subprocess.run(["umount", "-l", str(path)], check=True)
            busy.append(str(path))
    if busy:
        pytest.fail(f"a file was still open on {', '.join(busy)} at the end of the test")


@pytest.fixture
def run_hpcio():
    """``run_hpcio(*args, check=False, env=None)`` -> CompletedProcess of ``hpcio ARGS``
    (``env``: variables added to the child's environment)."""

    def run(*args: str, timeout: float = 300, env: dict | None = None, **kwargs) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "hpcio.cli", *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=child_env(**(env or {})),
            **kwargs,
        )

    return run


@pytest.fixture(scope="session")
def mpiexec() -> str:
    path = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    if not os.access(path, os.X_OK):
        path = shutil.which("mpiexec") or ""
    if not path:
        pytest.fail("mpiexec not found: install the test extra (pip install -e '.[test]')")
    return path


@pytest.fixture
def tuned():
    from hpcio import tuning

    before = tuning.tune()
    yield tuning.tune(pause_gc=True, arrow_jemalloc=True)
    tuning.tune(pause_gc=before["pause_gc"], arrow_jemalloc=before["arrow_jemalloc"])


@pytest.fixture
def row_group_reads(monkeypatch) -> list:
    import pyarrow.parquet as pq

    reads: list = []
    read_row_group = pq.ParquetFile.read_row_group

    def counting(self, i, *args, **kwargs):
        reads.append(i)
        return read_row_group(self, i, *args, **kwargs)

    monkeypatch.setattr(pq.ParquetFile, "read_row_group", counting)
    return reads


@pytest.fixture
def fetched(monkeypatch):
    """The shard (cache unit) of every copy a node cache's Store makes, in order (fetches
    ahead included)."""
    from hpcio.nodecache.store import Store

    shards = []
    copy_in = Store.copy_in

    def counted(self, k):
        got = copy_in(self, k)
        shards.append(k)
        return got

    monkeypatch.setattr(Store, "copy_in", counted)
    return shards
