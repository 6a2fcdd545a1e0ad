"""hpcio stage never publishes a torn copy: a source that changes while it is copied
is copied once more, or refused."""

from __future__ import annotations

import os

import pytest

from hpcio.errors import SourceChangedError
from hpcio.staging import MANIFEST_NAME, read_manifest, stage

from .conftest import tree_bytes, write_tree, xxh3

MiB = 2**20


@pytest.fixture
def big_source(tmp_path):
    src = tmp_path / "src"
    write_tree(src, {"big.bin": b"\x01" * (4 * MiB), "small.bin": b"s"})
    return src


def rewrite_during_reads(monkeypatch, path, times):
    """Overwrite ``path`` with new bytes of the same size after the first read of each of
    its first ``times`` copies: the old first MiB is already copied, the rest is new."""
    real_preadv = os.preadv
    state = {"reads": 0, "rewrites": 0}
    inode = os.stat(path).st_ino

    def preadv(fd, buffers, offset):
        n = real_preadv(fd, buffers, offset)
        if os.fstat(fd).st_ino == inode:
            state["reads"] += 1
            if offset == 0 and state["rewrites"] < times:
                state["rewrites"] += 1
                with open(path, "r+b") as f:
                    f.write(bytes([state["rewrites"] + 1]) * os.path.getsize(path))
        return n

    monkeypatch.setattr(os, "preadv", preadv)
    return state


def test_a_source_changed_once_during_its_copy_is_copied_again(big_source, tmp_path, monkeypatch):
    dst = tmp_path / "dst"
    state = rewrite_during_reads(monkeypatch, big_source / "big.bin", times=1)
    stage(big_source, dst, tiers={}, progress=False, threads=1, method="readwrite")
    assert state["rewrites"] == 1
    new = b"\x02" * (4 * MiB)
    assert (dst / "big.bin").read_bytes() == new
    record = {r.path: r for r in read_manifest(dst).files}["big.bin"]
    assert record.digest.digest == xxh3(new)
    assert record.source_mtime_ns == os.stat(big_source / "big.bin").st_mtime_ns


@pytest.mark.parametrize("chunk", [False, True])
def test_a_source_that_keeps_changing_is_refused(big_source, tmp_path, monkeypatch, chunk):
    dst = tmp_path / "dst"
    rewrite_during_reads(monkeypatch, big_source / "big.bin", times=10)
    with pytest.raises(SourceChangedError, match=r"source file changed while it was copied: 4194304 bytes, "
                       r"mtime \d+ ns planned, 4194304 bytes, mtime \d+ ns now; stage again once it is stable "
                       rf"\({big_source / 'big.bin'}\)"):
        stage(big_source, dst, tiers={}, progress=False, threads=1, method="readwrite",
              chunk_bytes=MiB if chunk else 256 * MiB)
    assert "big.bin" not in tree_bytes(dst) and MANIFEST_NAME not in tree_bytes(dst)


def test_a_source_resized_after_planning_is_refused(big_source, tmp_path, monkeypatch):
    dst = tmp_path / "dst"
    real_preadv = os.preadv

    def preadv(fd, buffers, offset):
        with open(big_source / "small.bin", "ab") as f:
            f.write(b"more")
        return real_preadv(fd, buffers, offset)

    monkeypatch.setattr(os, "preadv", preadv)
    with pytest.raises(SourceChangedError, match=r"source file changed since it was planned: 1 bytes"):
        stage(big_source, dst, tiers={}, progress=False, threads=1, method="readwrite")
    assert MANIFEST_NAME not in tree_bytes(dst)
