"""Staging under real MPI (mpich's ``mpiexec``): ranks share the work or elect node leaders."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap

import pytest
import xxhash

from hpcio.staging import MANIFEST_NAME

from .conftest import tree_bytes, write_tree

pytestmark = pytest.mark.mpi

MPIEXEC = os.environ.get("MPIEXEC") or shutil.which("mpiexec", path=os.path.dirname(sys.executable)) \
    or shutil.which("mpiexec")

RANK_SCRIPT = textwrap.dedent("""
    import json, sys
    from mpi4py import MPI
    import hpcio
    from hpcio.staging.engine import CopyEngine as _Engine

    src, dst, mode, out = sys.argv[1:5]
    comm = MPI.COMM_WORLD
    copied_by_me = []
    copy_whole, copy_chunk = _Engine.copy_whole, _Engine.copy_chunk
    def whole(self, item):  # record which rank copied what, then copy for real
        copied_by_me.append([item.rel, item.chunk])
        return copy_whole(self, item)
    def chunk(self, item):
        copied_by_me.append([item.rel, item.chunk])
        return copy_chunk(self, item)
    _Engine.copy_whole, _Engine.copy_chunk = whole, chunk
    result = hpcio.stage(src, dst, threads=2, chunk_bytes=1 << 20, node_local=(mode == "node"),
                         tiers={}, progress=False)
    report = {"rank": comm.Get_rank(), "size": comm.Get_size(), "copier": result.copier,
              "copied": result.copied, "manifest": result.manifest, "items": copied_by_me}
    with open(f"{out}.{comm.Get_rank()}.json", "w") as f:
        json.dump(report, f)
""")


def run_mpi(tmp_path, nprocs: int, src, dst, mode: str) -> list[dict]:
    if MPIEXEC is None:
        pytest.skip("mpiexec not found (install the mpich wheel: pip install mpich)")
    script = tmp_path / "rank.py"
    script.write_text(RANK_SCRIPT)
    out = tmp_path / f"report-{mode}"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.run([MPIEXEC, "-n", str(nprocs), sys.executable, "-m", "mpi4py", str(script),
                           str(src), str(dst), mode, str(out)],
                          capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return [json.loads((tmp_path / f"report-{mode}.{r}.json").read_text()) for r in range(nprocs)]


@pytest.fixture
def mpi_dataset(tmp_path):
    rng = __import__("numpy").random.default_rng(11)
    files = {f"shards/shard.{i:05d}.bin": rng.bytes(200_000 + 7 * i) for i in range(6)}
    files["big.bin"] = rng.bytes(4 * 2**20 + 3)  # 5 chunks of 1 MiB
    files["index.json"] = b"{}"
    write_tree(tmp_path / "src", files)
    return tmp_path / "src", files


@pytest.mark.parametrize("nprocs", [1, 2])
def test_shared_destination_splits_files_and_chunks(tmp_path, mpi_dataset, nprocs):
    src, files = mpi_dataset
    reports = run_mpi(tmp_path, nprocs, src, tmp_path / "dst", "shared")
    staged = tree_bytes(tmp_path / "dst")
    manifest = json.loads(staged.pop(MANIFEST_NAME))
    assert staged == files
    assert {r["size"] for r in reports} == {nprocs}
    # Every file (and every chunk of big.bin) was copied exactly once, by some rank.
    items = sorted(tuple(i) for r in reports for i in r["items"])
    expected = sorted([(rel, None) for rel in files if rel != "big.bin"] + [("big.bin", k) for k in range(5)])
    assert items == expected
    if nprocs > 1:
        assert all(r["items"] for r in reports), "a rank was left without work"
    big = files["big.bin"]
    tree = xxhash.xxh3_64(b"".join(xxhash.xxh3_64(big[i:i + 2**20]).digest() for i in range(0, len(big), 2**20)))
    assert {r["path"]: r["digest"] for r in manifest["files"]}["big.bin"] == tree.hexdigest()
    assert all(r["manifest"] == str(tmp_path / "dst" / MANIFEST_NAME) for r in reports)


@pytest.mark.parametrize("nprocs", [1, 2])
def test_node_local_destination_has_one_leader_per_node(tmp_path, mpi_dataset, nprocs):
    src, files = mpi_dataset
    reports = run_mpi(tmp_path, nprocs, src, tmp_path / "nvme", "node")
    staged = tree_bytes(tmp_path / "nvme")
    staged.pop(MANIFEST_NAME)
    assert staged == files
    # mpiexec on one machine is one node: rank 0 copies everything, the others wait.
    assert [r["copier"] for r in reports] == [True] + [False] * (nprocs - 1)
    assert [bool(r["items"]) for r in reports] == [True] + [False] * (nprocs - 1)
    assert all(r["copied"] == sorted(files) for r in reports)
