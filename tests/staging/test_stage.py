"""hpcio.stage between two directories standing in for storage tiers."""

from __future__ import annotations

import errno
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import textwrap
import threading
import time

import pytest
import xxhash

import hpcio
from hpcio.errors import ChecksumMismatchError, InsufficientSpaceError, ShardNotFoundError, StagingError
from hpcio.staging import MANIFEST_NAME, Tier, plan_stage, read_manifest, stage, unstage
from hpcio.staging.stage import default_threads

from .conftest import OLD_MTIME, fake_statvfs, tree_bytes, write_tree, xxh3

NO_TIERS: dict = {}
engine_module = sys.modules["hpcio.staging.engine"]
MiB = 2**20


def leftovers(root) -> list[str]:
    """Temporary files and journals a finished run must not leave behind."""
    return sorted(rel for rel in tree_bytes(root) if ".tmp." in rel or ".hpcio-journal." in rel)


@pytest.mark.parametrize("method", ["auto", "copy_file_range", "readwrite"])
@pytest.mark.parametrize("threads", [1, 3])
def test_stage_copies_tree_byte_exact(dataset, fast_tier, method, threads, monkeypatch):
    # this small tree is copied on a thread pool only when any second file makes it worth it
    monkeypatch.setattr(engine_module, "PARALLEL_MIN_BYTES", 0)
    src, files = dataset
    dst = fast_tier / "ds"
    result = stage(src, dst, threads=threads, method=method, chunk_bytes=MiB, tiers=NO_TIERS, progress=False)
    staged = tree_bytes(dst)
    manifest_bytes = staged.pop(MANIFEST_NAME)
    assert staged == files
    assert result.copied == sorted(files) and result.kept == [] and result.recopied == []
    assert result.bytes_copied == sum(map(len, files.values()))
    manifest = json.loads(manifest_bytes)
    assert manifest["source"] == str(src) and manifest["total_files"] == len(files)
    records = {r["path"]: r for r in manifest["files"]}
    assert set(records) == set(files)
    for rel, data in files.items():
        assert records[rel]["size"] == len(data)
        if len(data) > MiB:  # copied in 1 MiB chunks by several workers: tree digest
            chunks = [xxhash.xxh3_64(data[i:i + MiB]).digest() for i in range(0, len(data), MiB)]
            assert records[rel]["algo"] == "xxh3_64-tree" and records[rel]["chunk_bytes"] == MiB
            assert records[rel]["digest"] == xxhash.xxh3_64(b"".join(chunks)).hexdigest()
        else:
            assert records[rel] | {"source_mtime_ns": 0} == {
                "path": rel, "size": len(data), "algo": "xxh3_64", "digest": xxh3(data), "source_mtime_ns": 0}
    assert leftovers(dst) == []


def test_fresh_mtimes_and_source_mtime_in_manifest(dataset, fast_tier):
    src, files = dataset
    before = time.time() - 2
    stage(src, fast_tier / "ds", threads=2, tiers=NO_TIERS, progress=False)
    for rel in files:
        assert os.stat(fast_tier / "ds" / rel).st_mtime >= before, rel
    records = read_manifest(fast_tier / "ds").files
    assert {r.source_mtime_ns for r in records} == {OLD_MTIME * 10**9}


def test_restage_keeps_verified_files_and_refreshes_their_mtime(dataset, fast_tier):
    src, files = dataset
    dst = fast_tier / "ds"
    stage(src, dst, threads=2, chunk_bytes=MiB, tiers=NO_TIERS, progress=False)
    for rel in files:
        os.utime(dst / rel, (OLD_MTIME, OLD_MTIME))
    before = time.time() - 2
    again = stage(src, dst, threads=2, chunk_bytes=MiB, tiers=NO_TIERS, progress=False)
    assert again.copied == [] and again.kept == sorted(files) and again.bytes_copied == 0
    assert all(os.stat(dst / rel).st_mtime >= before for rel in files)
    assert leftovers(dst) == []


def test_corrupted_destination_is_detected_and_recopied(dataset, fast_tier):
    src, files = dataset
    dst = fast_tier / "ds"
    stage(src, dst, threads=2, chunk_bytes=MiB, tiers=NO_TIERS, progress=False)
    for rel in ("shard.00001.bin", "big.bin"):  # a whole-file digest and a tree digest
        with open(dst / rel, "r+b") as f:
            f.seek(len(files[rel]) // 2)
            byte = f.read(1)
            f.seek(-1, 1)
            f.write(bytes([byte[0] ^ 0xFF]))
    result = stage(src, dst, threads=2, chunk_bytes=MiB, tiers=NO_TIERS, progress=False)
    assert result.recopied == ["big.bin", "shard.00001.bin"]
    assert result.kept == sorted(set(files) - {"big.bin", "shard.00001.bin"})
    staged = tree_bytes(dst)
    staged.pop(MANIFEST_NAME)
    assert staged == files


def test_truncated_destination_is_recopied(dataset, fast_tier):
    src, files = dataset
    dst = fast_tier / "ds"
    stage(src, dst, threads=1, tiers=NO_TIERS, progress=False)
    os.truncate(dst / "shard.00000.bin", 1000)
    result = stage(src, dst, threads=1, tiers=NO_TIERS, progress=False)
    assert result.copied == ["shard.00000.bin"]
    assert (dst / "shard.00000.bin").read_bytes() == files["shard.00000.bin"]


def test_changed_source_is_recopied(dataset, fast_tier):
    src, files = dataset
    dst = fast_tier / "ds"
    stage(src, dst, threads=1, tiers=NO_TIERS, progress=False)
    new = bytes(reversed(files["shard.00001.bin"]))  # same size, new content and mtime
    (src / "shard.00001.bin").write_bytes(new)
    result = stage(src, dst, threads=1, tiers=NO_TIERS, progress=False)
    assert result.copied == ["shard.00001.bin"]
    assert (dst / "shard.00001.bin").read_bytes() == new


def test_dry_run_writes_nothing(dataset, fast_tier):
    src, files = dataset
    dst = fast_tier / "ds"
    result = stage(src, dst, dry_run=True, tiers=NO_TIERS, progress=False)
    assert not dst.exists()
    assert result.dry_run and result.plan.to_copy == sorted(files) and result.copied == []
    # With stale temporaries present, a dry run lists them but leaves them alone.
    dst.mkdir()
    (dst / "big.bin.tmp.4242").write_bytes(b"partial")
    plan = stage(src, dst, dry_run=True, tiers=NO_TIERS, progress=False).plan
    assert plan.stale == ["big.bin.tmp.4242"]
    assert tree_bytes(dst) == {"big.bin.tmp.4242": b"partial"}


def test_stale_temporaries_removed_and_foreign_files_kept(dataset, fast_tier):
    src, files = dataset
    dst = fast_tier / "ds"
    write_tree(dst, {"big.bin.tmp.99": b"x", "sub/dir/deep.bin.tmp.host-1": b"y", "notes.txt.tmp.3": b"mine",
                     "notes.txt": b"user file", MANIFEST_NAME + ".tmp.7": b"{"})
    stage(src, dst, threads=2, tiers=NO_TIERS, progress=False)
    staged = tree_bytes(dst)
    staged.pop(MANIFEST_NAME)
    assert staged == files | {"notes.txt": b"user file", "notes.txt.tmp.3": b"mine"}


def test_refuses_when_bytes_short(dataset, fast_tier):
    src, files = dataset
    need = sum(-(-len(d) // 4096) * 4096 for d in files.values())
    inodes = len(files) + 2 + 1 + 2  # files, sub and sub/dir, ds itself, manifest and journal
    with pytest.raises(InsufficientSpaceError, match=re.escape(
        f"not enough room to stage 6 files: need 3.60 MB ({need} bytes) and {inodes} inodes, "
        f"free 999.42 kB (999424 bytes) and 1000 inodes (short of bytes; limit from statvfs) "
        f"({fast_tier / 'ds'})"
    )):
        stage(src, fast_tier / "ds", fs_stat=fake_statvfs(1_000_000, 1000), tiers=NO_TIERS, progress=False)
    assert not (fast_tier / "ds").exists()


def test_refuses_when_inodes_short(dataset, fast_tier):
    src, _ = dataset
    with pytest.raises(InsufficientSpaceError, match=r"and 11 inodes, free 9.00 GB \(9000001536 bytes\) "
                                                     r"and 10 inodes \(short of inodes; limit from statvfs\)"):
        stage(src, fast_tier / "ds", fs_stat=fake_statvfs(9 * 10**9 + 4096, 10), tiers=NO_TIERS, progress=False)
    assert not (fast_tier / "ds").exists()


def test_refuses_against_tier_quota(dataset, fast_tier):
    src, _ = dataset
    tiers = {"work": Tier("work", str(fast_tier), quota_inodes=500_000, used_inodes=499_995)}
    with pytest.raises(InsufficientSpaceError, match=r"free .* and 5 inodes \(short of inodes; "
                                                     r"limit from quota of tier 'work'\)"):
        stage(src, fast_tier / "ds", tiers=tiers, progress=False)


def test_refusal_on_a_real_small_tmpfs(dataset, small_tmpfs):
    src, _ = dataset  # 3.6 MB do not fit in 1 MiB
    with pytest.raises(InsufficientSpaceError, match=r"\(short of bytes; limit from statvfs\)"):
        stage(src, small_tmpfs / "ds", tiers=NO_TIERS, progress=False)
    assert os.listdir(small_tmpfs) == []


def test_enospc_during_copy_is_reported_and_cleaned(tmp_path, small_tmpfs):
    # The plan is fooled into believing there is room; the real tmpfs then fills up.
    src = tmp_path / "src"
    write_tree(src, {"a.bin": os.urandom(700_000), "b.bin": os.urandom(700_000)})
    with pytest.raises(StagingError, match=r"no space left \(ENOSPC\) while copying .*/src/[ab]\.bin"):
        stage(src, small_tmpfs / "ds", threads=1, fs_stat=fake_statvfs(10**9, 10**6), tiers=NO_TIERS,
              progress=False)
    # No temporary file is left; the file that landed is journaled so a rerun keeps it.
    staged = tree_bytes(small_tmpfs / "ds")
    assert [rel for rel in staged if ".tmp." in rel] == []
    landed = [json.loads(line)["path"] for line in staged.pop(".hpcio-journal.0.jsonl").splitlines()]
    assert landed == sorted(staged) and len(landed) == 1


def test_index_hashes_verify_the_copy(tmp_path, fast_tier):
    import streaming

    src = tmp_path / "mds"
    with streaming.MDSWriter(out=str(src), columns={"id": "int", "text": "str"}, hashes=["xxh64"],
                             size_limit=1 << 12) as writer:
        for i in range(200):
            writer.write({"id": i, "text": f"sample {i} " * 5})
    index = json.loads((src / "index.json").read_text())
    recorded = {s["raw_data"]["basename"]: s["raw_data"]["hashes"]["xxh64"] for s in index["shards"]}
    assert len(recorded) > 1
    stage(src, fast_tier / "mds", threads=2, tiers=NO_TIERS, progress=False)
    records = {r.path: r.digest for r in read_manifest(fast_tier / "mds").files}
    for name, digest in recorded.items():
        assert (records[name].algo, records[name].digest) == ("xxh64", digest)
    assert records["index.json"].algo == "xxh3_64"
    # The staged copy reads back with the reference reader.
    ds = streaming.StreamingDataset(local=str(fast_tier / "mds"), shuffle=False, batch_size=1)
    assert [ds[i]["id"] for i in (0, 199)] == [0, 199]


def test_source_that_contradicts_its_index_fails(tmp_path, fast_tier):
    src = tmp_path / "mds"
    shard = b"\x01" * 1000
    index = {"version": 2, "shards": [{"raw_data": {"basename": "shard.00000.mds", "bytes": 1000,
                                                   "hashes": {"xxh64": xxhash.xxh64(shard).hexdigest()}},
                                       "zip_data": None}]}
    write_tree(src, {"index.json": json.dumps(index).encode(), "shard.00000.mds": b"\x02" + shard[1:]})
    got = xxhash.xxh64(b"\x02" + shard[1:]).hexdigest()
    with pytest.raises(ChecksumMismatchError, match=re.escape(
        f"xxh64 of the copied bytes is {got}, but the source index records "
        f"{xxhash.xxh64(shard).hexdigest()} ({src / 'shard.00000.mds'})"
    )):
        stage(src, fast_tier / "mds", threads=1, tiers=NO_TIERS, progress=False)
    assert leftovers(fast_tier / "mds") == [] and not (fast_tier / "mds" / MANIFEST_NAME).exists()


def test_a_source_flipped_after_staging_is_refused_on_every_rerun(tmp_path, fast_tier):
    """One byte flipped in a staged source (its mtime moves): the next stagings re-read it,
    refuse it as no longer matching its own index, and keep the earlier copy in place."""
    src, dst = tmp_path / "mds", fast_tier / "mds"
    with hpcio.open_writer(src, format="mds", size_limit=1 << 14, hashes=["xxh64"]) as w:
        for i in range(500):
            w.write({"id": i, "blob": bytes([i % 256]) * 100})
    stage(src, dst, threads=1, tiers=NO_TIERS, progress=False)
    shard = src / "shard.00002.mds"
    good = shard.read_bytes()
    flipped = good[:500] + bytes([good[500] ^ 1]) + good[501:]
    shard.write_bytes(flipped)
    recorded = {s["raw_data"]["basename"]: s["raw_data"]["hashes"]["xxh64"]
                for s in json.loads((src / "index.json").read_text())["shards"]}
    message = re.escape(f"xxh64 of the copied bytes is {xxhash.xxh64(flipped).hexdigest()}, but the source "
                        f"index records {recorded['shard.00002.mds']} ({shard})")
    for _ in range(2):  # the failed run keeps the copy on record: the next one checks it again
        with pytest.raises(ChecksumMismatchError, match=message):
            stage(src, dst, threads=1, tiers=NO_TIERS, progress=False)
        assert (dst / "shard.00002.mds").read_bytes() == good
    shard.write_bytes(good)  # repaired (a new mtime again): copied, and the staging completes
    result = stage(src, dst, threads=1, tiers=NO_TIERS, progress=False)
    assert result.copied == ["shard.00002.mds"] and (dst / MANIFEST_NAME).exists()


def test_second_hop_verifies_against_the_first_manifest(dataset, tmp_path):
    src, files = dataset
    stage(src, tmp_path / "scratch", threads=2, chunk_bytes=MiB, tiers=NO_TIERS, progress=False)
    plan = plan_stage(tmp_path / "scratch", tmp_path / "nvme", chunk_bytes=2 * MiB, tiers=NO_TIERS)
    assert set(plan.reference_origin.values()) == {"source manifest"}
    stage(tmp_path / "scratch", tmp_path / "nvme", threads=2, chunk_bytes=2 * MiB, tiers=NO_TIERS, progress=False)
    first = {r.path: r.digest for r in read_manifest(tmp_path / "scratch").files}
    second = {r.path: r.digest for r in read_manifest(tmp_path / "nvme").files}
    assert second == first  # the 1 MiB tree digest is kept, not recomputed with 2 MiB
    # A flipped byte in the intermediate copy is caught on the next hop.
    with open(tmp_path / "scratch" / "shard.00000.bin", "r+b") as f:
        f.write(b"\x00" if files["shard.00000.bin"][:1] != b"\x00" else b"\x01")
    with pytest.raises(ChecksumMismatchError, match=r"but the source source manifest records"):
        stage(tmp_path / "scratch", tmp_path / "nvme2", threads=1, tiers=NO_TIERS, progress=False)


def test_single_file_dataset_travels_with_sidecar(tmp_path, fast_tier):
    write_tree(tmp_path / "w", {"data.jinx": b'{"a": 1}\n', "data.binx": b"\x00" * 100, "other.jinx": b"no"})
    stage(tmp_path / "w" / "data.jinx", fast_tier / "d", tiers=NO_TIERS, progress=False)
    assert sorted(tree_bytes(fast_tier / "d")) == [MANIFEST_NAME, "data.binx", "data.jinx"]


def test_errors_name_the_problem(dataset, tmp_path):
    src, _ = dataset
    with pytest.raises(ShardNotFoundError, match=re.escape(f"staging source does not exist ({tmp_path / 'nope'})")):
        stage(tmp_path / "nope", tmp_path / "x", tiers=NO_TIERS)
    with pytest.raises(StagingError, match=re.escape(f"destination {src / 'inner'} is inside the source dataset")):
        stage(src, src / "inner", tiers=NO_TIERS)
    with pytest.raises(StagingError, match=re.escape(f"tier 'dsdir' is read-only ({tmp_path / 'ro' / 'ds'})")):
        stage(src, tmp_path / "ro" / "ds", tiers={"dsdir": Tier("dsdir", str(tmp_path / "ro"), read_only=True)})


def test_unstage_removes_only_what_it_staged(dataset, fast_tier):
    src, files = dataset
    dst = fast_tier / "ds"
    stage(src, dst, tiers=NO_TIERS, progress=False)
    (dst / "sub" / "mine.txt").write_text("keep me")
    (dst / "big.bin.tmp.12").write_text("stale")
    removed = unstage(dst)
    assert len(removed) == len(files) + 2  # files, the stale temporary, the manifest
    assert tree_bytes(dst) == {"sub/mine.txt": b"keep me"}
    assert not (dst / "sub" / "dir").exists()


def test_unstage_refuses_without_manifest(tmp_path):
    (tmp_path / "precious").mkdir()
    (tmp_path / "precious" / "f").write_text("x")
    with pytest.raises(StagingError, match=re.escape(
        "refusing to remove a directory without a staging manifest (.hpcio-manifest.json) "
        f"({tmp_path / 'precious'})"
    )):
        unstage(tmp_path / "precious")
    assert (tmp_path / "precious" / "f").exists()


def test_default_threads_follow_slurm_not_cpu_count():
    assert default_threads({"SLURM_CPUS_PER_TASK": "3"}) == 3
    assert default_threads({}) == len(os.sched_getaffinity(0))
    assert default_threads({"SLURM_CPUS_PER_TASK": "0"}) == len(os.sched_getaffinity(0))
    with pytest.raises(ValueError, match=r"^environment variable SLURM_CPUS_PER_TASK='x' is not an integer$"):
        default_threads({"SLURM_CPUS_PER_TASK": "x"})


@pytest.mark.parametrize("node_local, fsync, durable", [
    (False, None, True), (True, None, False), (True, True, True), (False, False, False)])
def test_fsync_policy_follows_the_destination(dataset, fast_tier, monkeypatch, node_local, fsync, durable):
    """A shared destination is made durable before publishing; a node-local one, which
    does not outlive the job, is not unless asked.  Counted at the fsync system call."""
    synced = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(os.readlink(f"/proc/self/fd/{fd}")),
                                                 real_fsync(fd))[1])
    src, files = dataset
    dst = fast_tier / "ds"
    result = stage(src, dst, threads=1, node_local=node_local, fsync=fsync, tiers=NO_TIERS, progress=False)
    assert tree_bytes(dst).keys() - {MANIFEST_NAME} == files.keys()
    assert result.durable is durable
    assert ("not fsynced" in result.summary()) is not durable
    if durable:
        copies = {p.split(".tmp.")[0] for p in synced if ".tmp." in p}
        assert copies >= {str(dst / rel) for rel in files} | {str(dst / MANIFEST_NAME)}
        assert str(dst) in synced  # the directory, after the renames
    else:
        assert synced == []


def test_copy_file_range_falls_back_where_the_kernel_refuses_it(tmp_path):
    """tmpfs to another filesystem type: copy_file_range fails with EXDEV at the first
    call; the copy goes on with read/write and the digests are of the whole files (the
    hashing started alongside the refused copy is thrown away)."""
    if not os.path.isdir("/dev/shm"):
        pytest.skip("no /dev/shm tmpfs on this machine")
    import numpy as np

    rng = np.random.default_rng(3)
    files = {"a.bin": rng.bytes(5 * MiB + 17), "b.bin": rng.bytes(2 * MiB)}
    with tempfile.TemporaryDirectory(dir="/dev/shm") as shm:
        src = os.path.join(shm, "ds")
        write_tree(src, files)
        probe = tmp_path / "probe"
        with open(os.path.join(src, "a.bin"), "rb") as fin, open(probe, "wb") as fout:
            try:
                os.copy_file_range(fin.fileno(), fout.fileno(), 4096)
                pytest.skip("this kernel copies between tmpfs and the temporary directory's filesystem")
            except OSError as exc:
                assert exc.errno == errno.EXDEV
        dst = tmp_path / "dst"
        result = stage(src, dst, method="copy_file_range", threads=1, tiers=NO_TIERS, progress=False)
    staged = tree_bytes(dst)
    manifest = json.loads(staged.pop(MANIFEST_NAME))
    assert staged == files and result.copied == sorted(files)
    assert {r["path"]: (r["algo"], r["digest"]) for r in manifest["files"]} == {
        rel: ("xxh3_64", xxh3(data)) for rel, data in files.items()}


@pytest.mark.parametrize("method", ["auto", "copy_file_range"])
def test_which_copy_primitive_each_method_uses(dataset, fast_tier, method, monkeypatch):
    """auto reads, hashes and writes in one pass; copy_file_range is used only when asked."""
    calls = []
    real = os.copy_file_range

    def counting(*args, **kwargs):
        calls.append(args[2])
        return real(*args, **kwargs)

    monkeypatch.setattr(os, "copy_file_range", counting)
    src, _files = dataset
    result = stage(src, fast_tier / "out", method=method, threads=1, tiers=NO_TIERS, progress=False)
    assert result.copied and tree_bytes(fast_tier / "out").keys() >= set(result.copied)
    assert (len(calls) > 0) == (method == "copy_file_range"), calls


@pytest.mark.parametrize("parallel_min, pooled", [(0, True), (2**40, False)])
def test_copies_use_the_pool_only_when_more_than_one_file_is_large(dataset, fast_tier, monkeypatch,
                                                                   parallel_min, pooled):
    """A pool's start-up (milliseconds) is paid only when the bytes beyond the largest item
    reach PARALLEL_MIN_BYTES; either way the copy is the same."""
    monkeypatch.setattr(engine_module, "PARALLEL_MIN_BYTES", parallel_min)
    writers = set()
    real = os.pwrite

    def recording(*args):
        writers.add(threading.current_thread().name)
        return real(*args)

    monkeypatch.setattr(os, "pwrite", recording)
    src, files = dataset
    stage(src, fast_tier / "ds", threads=3, tiers=NO_TIERS, progress=False)
    staged = tree_bytes(fast_tier / "ds")
    staged.pop(MANIFEST_NAME)
    assert staged == files
    assert writers and all(name.startswith("hpcio-stage") == pooled for name in writers), writers


def test_hpcio_stage_is_lazy_and_public(dataset, fast_tier):
    code = "import sys, hpcio; print('hpcio.staging' in sys.modules, 'mpi4py' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}).stdout
    assert out.split() == ["False", "False"]
    src, files = dataset
    assert hpcio.stage(src, fast_tier / "x", tiers=NO_TIERS, progress=False).copied == sorted(files)


KILLED_CHILD = textwrap.dedent("""
    import importlib, sys, time
    st = importlib.import_module("hpcio.staging.engine")
    from hpcio.staging import stage
    st.BLOCK_BYTES = 1 << 20
    tick = st.CopyEngine._tick
    def slow_tick(self, n):  # throttle so the parent can kill mid-copy
        time.sleep(0.02)
        tick(self, n)
    st.CopyEngine._tick = slow_tick
    stage(sys.argv[1], sys.argv[2], threads=1, chunk_bytes=4 << 20, tiers={}, progress=False,
          tmp_suffix="killed")
""")


def test_kill_9_mid_copy_then_resume(tmp_path):
    rng = __import__("numpy").random.default_rng(3)
    files = {f"shard.{i}.bin": rng.bytes(3 * 2**20) for i in range(4)} | {"huge.bin": rng.bytes(10 * 2**20)}
    src, dst = tmp_path / "src", tmp_path / "dst"
    write_tree(src, files)
    script = tmp_path / "child.py"
    script.write_text(KILLED_CHILD)
    child = subprocess.Popen([sys.executable, str(script), str(src), str(dst)],
                             env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    journal = dst / ".hpcio-journal.0.jsonl"
    deadline = time.monotonic() + 60
    # Kill once one file is journaled and another is half-written.
    while time.monotonic() < deadline and child.poll() is None:
        if journal.exists() and journal.read_bytes().count(b"\n") >= 1 and any(
                ".tmp.killed" in n for n in os.listdir(dst)):
            break
        time.sleep(0.005)
    assert child.poll() is None, "the throttled copy ended before it could be killed"
    os.kill(child.pid, signal.SIGKILL)
    child.wait()
    assert not (dst / MANIFEST_NAME).exists()
    assert any(".tmp.killed" in n for n in os.listdir(dst))
    landed = [json.loads(line)["path"] for line in journal.read_text().splitlines()]

    result = stage(src, dst, threads=2, chunk_bytes=4 << 20, tiers=NO_TIERS, progress=False)
    assert set(landed) <= set(result.kept) and result.kept
    assert sorted(result.kept + result.copied) == sorted(files)
    staged = tree_bytes(dst)
    manifest = json.loads(staged.pop(MANIFEST_NAME))
    assert staged == files
    for rec in manifest["files"]:
        data = files[rec["path"]]
        if rec["algo"] == "xxh3_64":
            assert rec["digest"] == xxh3(data)
        else:
            chunks = [xxhash.xxh3_64(data[i:i + (4 << 20)]).digest() for i in range(0, len(data), 4 << 20)]
            assert rec["digest"] == xxhash.xxh3_64(b"".join(chunks)).hexdigest()
