"""Fixtures for the staging tests: two directories stand in for a slow and a fast tier."""

from __future__ import annotations

import os
import types

import pytest
import xxhash

OLD_MTIME = 978_307_200  # 2001-01-01: what a purge policy must never see on a fresh copy


def write_tree(root, files: dict[str, bytes]) -> None:
    for rel, data in files.items():
        path = os.path.join(root, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(data)
        os.utime(path, (OLD_MTIME, OLD_MTIME))


def tree_bytes(root) -> dict[str, bytes]:
    """Every file under ``root`` (relative path -> bytes)."""
    out = {}
    for dirpath, _dirs, names in os.walk(root):
        for name in names:
            path = os.path.join(dirpath, name)
            out[os.path.relpath(path, root).replace(os.sep, "/")] = open(path, "rb").read()
    return out


@pytest.fixture
def dataset(tmp_path):
    """A small dataset tree with nested dirs, an empty file and a multi-MiB file."""
    rng = __import__("numpy").random.default_rng(7)
    files = {
        "index.json": b'{"shards": [], "version": 2}',
        "shard.00000.bin": rng.bytes(300_000),
        "shard.00001.bin": rng.bytes(123_457),
        "empty.bin": b"",
        "sub/dir/deep.bin": rng.bytes(5_000),
        "big.bin": rng.bytes(3 * 2**20 + 12345),
    }
    src = tmp_path / "work" / "ds"
    write_tree(src, files)
    return src, files


@pytest.fixture
def fast_tier(tmp_path):
    root = tmp_path / "scratch"
    root.mkdir()
    return root


def fake_statvfs(free_bytes: int, free_inodes: int, block: int = 4096):
    """A statvfs stand-in reporting the given free space (test double for a full tier)."""

    def stat(_path):
        return types.SimpleNamespace(
            f_bsize=block, f_frsize=block, f_blocks=10**9, f_bfree=free_bytes // block,
            f_bavail=free_bytes // block, f_files=10**7, f_ffree=free_inodes, f_favail=free_inodes,
            f_flag=0, f_namemax=255,
        )

    return stat


def xxh3(data: bytes) -> str:
    return xxhash.xxh3_64(data).hexdigest()


@pytest.fixture
def small_tmpfs(mount_tmpfs):
    """A real 1 MiB tmpfs with 16 inodes (needs mount rights: root in a container)."""
    return mount_tmpfs("tmpfs", "size=1m,nr_inodes=16")
