"""hpcio stage and symbolic links: links in SRC are copied as links or refused (followed
only when asked, inside SRC unless asked too), links in DST are never written through."""

from __future__ import annotations

import argparse
import os
import re

import pytest

from hpcio.cli import stage as stage_cli
from hpcio.errors import SymlinkError
from hpcio.staging import MANIFEST_NAME, read_manifest, stage, unstage

from .conftest import tree_bytes, write_tree


@pytest.fixture
def trees(tmp_path):
    src, dst, outside = tmp_path / "src", tmp_path / "dst", tmp_path / "outside"
    write_tree(src, {"a.bin": b"a" * 10, "sub/b.bin": b"b" * 20})
    write_tree(outside, {"secret.txt": b"secret", "dir/s.txt": b"s"})
    return src, dst, outside


def run(src, dst, **kw):
    return stage(src, dst, tiers={}, progress=False, threads=1, **kw)


@pytest.mark.parametrize("symlinks", ["copy", "follow"])
@pytest.mark.parametrize("target", ["secret.txt", "dir"])
def test_links_leaving_the_source_are_refused(trees, symlinks, target):
    src, dst, outside = trees
    os.symlink(outside / target, src / "leak")
    with pytest.raises(SymlinkError, match=re.escape(f"symbolic link leak -> {outside / target} leads outside the source")):
        run(src, dst, symlinks=symlinks)
    assert not dst.exists()


def test_follow_outside_copies_the_targets_when_asked(trees):
    src, dst, outside = trees
    os.symlink(outside / "secret.txt", src / "leak")
    os.symlink(outside / "dir", src / "leakdir")
    run(src, dst, symlinks="follow-outside")
    assert tree_bytes(dst) == {"a.bin": b"a" * 10, "sub/b.bin": b"b" * 20, "leak": b"secret",
                               "leakdir/s.txt": b"s", MANIFEST_NAME: (dst / MANIFEST_NAME).read_bytes()}
    assert not os.path.islink(dst / "leak") and not os.path.islink(dst / "leakdir")


def test_links_inside_the_source_are_copied_as_links(trees):
    src, dst, _outside = trees
    os.symlink("sub/b.bin", src / "rel")
    os.symlink(src / "a.bin", src / "sub" / "abs")  # absolute, but inside SRC: made relative
    os.symlink("sub", src / "subdir")
    run(src, dst)
    assert {p: os.readlink(dst / p) for p in ("rel", "sub/abs", "subdir")} == {
        "rel": "sub/b.bin", "sub/abs": "../a.bin", "subdir": "sub"}
    assert (dst / "sub" / "abs").read_bytes() == b"a" * 10 and (dst / "subdir" / "b.bin").exists()
    assert [(link.path, link.target) for link in read_manifest(dst).links] == [
        ("rel", "sub/b.bin"), ("sub/abs", "../a.bin"), ("subdir", "sub")]
    run(src, dst)  # a second run keeps them
    assert os.readlink(dst / "rel") == "sub/b.bin"
    unstage(dst)
    assert not dst.exists()


def test_follow_copies_targets_inside_the_source(trees):
    src, dst, _outside = trees
    os.symlink("sub/b.bin", src / "rel")
    os.symlink("sub", src / "subdir")
    run(src, dst, symlinks="follow")
    assert not os.path.islink(dst / "rel") and (dst / "rel").read_bytes() == b"b" * 20
    assert (dst / "subdir" / "b.bin").read_bytes() == b"b" * 20 and not os.path.islink(dst / "subdir")


def test_refuse_and_loops(trees):
    src, dst, _outside = trees
    os.symlink("a.bin", src / "rel")
    with pytest.raises(SymlinkError, match=r"source holds the symbolic link rel -> a.bin; staging was asked to refuse links"):
        run(src, dst, symlinks="refuse")
    os.remove(src / "rel")
    os.symlink("..", src / "sub" / "up")
    with pytest.raises(SymlinkError, match=r"link sub/up leads back to a directory holding it \(a loop\)"):
        run(src, dst, symlinks="follow")
    assert not dst.exists()


def test_a_link_in_the_destination_is_not_written_through(trees):
    src, dst, outside = trees
    dst.mkdir()
    os.symlink(outside / "dir", dst / "sub")
    with pytest.raises(SymlinkError, match=re.escape(f"destination entry sub is a symbolic link to {outside / 'dir'}")):
        run(src, dst)
    assert tree_bytes(outside) == {"secret.txt": b"secret", "dir/s.txt": b"s"}


def test_a_link_where_a_file_is_planned_is_replaced_not_followed(trees):
    src, dst, outside = trees
    dst.mkdir()
    os.symlink(outside / "secret.txt", dst / "a.bin")
    run(src, dst)
    assert not os.path.islink(dst / "a.bin") and (dst / "a.bin").read_bytes() == b"a" * 10
    assert (outside / "secret.txt").read_bytes() == b"secret"


def cli_args(src, dst, **flags):
    base = dict(src=str(src), dst=str(dst), threads=1, dry_run=False, chunk_size="256Mi", node_local=None,
                no_mpi=True, method="auto", fsync=None, quiet=True, follow_symlinks=False,
                refuse_symlinks=False, allow_outside_links=False)
    return argparse.Namespace(**{**base, **flags})


def test_stage_cli_link_options(trees, capsys):
    src, dst, outside = trees
    os.symlink(outside / "secret.txt", src / "leak")
    assert stage_cli.run(cli_args(src, dst)) == 1
    assert "leads outside the source" in capsys.readouterr().err
    assert stage_cli.run(cli_args(src, dst, allow_outside_links=True)) == 1
    assert "--allow-outside-links needs --follow-symlinks" in capsys.readouterr().err
    assert stage_cli.run(cli_args(src, dst, follow_symlinks=True, allow_outside_links=True)) == 0
    assert (dst / "leak").read_bytes() == b"secret"
