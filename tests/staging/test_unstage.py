"""hpcio unstage removes only the regular files it staged inside the staged directory."""

from __future__ import annotations

import json
import os
import re

import pytest

from hpcio.cli import unstage as unstage_cli
from hpcio.errors import PathEscapeError
from hpcio.staging import MANIFEST_NAME, stage, unstage

from .conftest import write_tree


def staged(tmp_path, files=None):
    src, dst = tmp_path / "src", tmp_path / "dst"
    write_tree(src, files or {"a.bin": b"a", "sub/b.bin": b"b"})
    stage(src, dst, tiers={}, progress=False)
    return dst


def rewrite_manifest(dst, paths):
    manifest = json.loads((dst / MANIFEST_NAME).read_text())
    template = manifest["files"][0]
    manifest["files"] = [{**template, "path": p} for p in paths]
    (dst / MANIFEST_NAME).write_text(json.dumps(manifest))


@pytest.mark.parametrize("entry", ["../victim/x", "ABSOLUTE", "sub/../../victim/x"])
def test_unstage_refuses_entries_leaving_the_directory(tmp_path, entry):
    dst = staged(tmp_path)
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "x").write_text("precious")
    entry = str(victim / "x") if entry == "ABSOLUTE" else entry
    rewrite_manifest(dst, ["a.bin", entry])
    for dry_run in (True, False):
        with pytest.raises(PathEscapeError, match=re.escape(f"manifest entry {entry!r}")
                           + ".*" + re.escape(str(dst / MANIFEST_NAME))):
            unstage(dst, dry_run=dry_run)
    assert (victim / "x").read_text() == "precious"
    assert (dst / "a.bin").exists()  # nothing removed once one entry is refused


def test_unstage_does_not_follow_a_directory_link(tmp_path):
    dst = staged(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "b.bin").write_text("not staged")
    os.remove(dst / "sub" / "b.bin")
    os.rmdir(dst / "sub")
    os.symlink(elsewhere, dst / "sub")
    with pytest.raises(PathEscapeError, match=r"manifest entry 'sub/b.bin' resolves to .*/elsewhere/b.bin, outside"):
        unstage(dst)
    assert (elsewhere / "b.bin").read_text() == "not staged"


def test_unstage_removes_only_regular_files_and_dry_run_tells_the_truth(tmp_path, capsys):
    dst = staged(tmp_path, {"a.bin": b"a", "b.bin": b"b", "c.bin": b"c"})
    outside = tmp_path / "outside.txt"
    outside.write_text("keep")
    os.remove(dst / "b.bin")
    os.symlink(outside, dst / "b.bin")  # a link where a file was staged: kept
    os.remove(dst / "c.bin")  # already gone: not reported
    expected = [str(dst / "a.bin"), str(dst / MANIFEST_NAME)]
    assert unstage(dst, dry_run=True) == expected
    assert unstage_cli.run(unstage_cli_args(dst, dry_run=True)) == 0
    assert capsys.readouterr().out == f"would remove 2 files from {dst}\n"
    assert unstage(dst) == expected
    assert os.path.islink(dst / "b.bin") and outside.read_text() == "keep"


def unstage_cli_args(dst, dry_run):
    import argparse

    return argparse.Namespace(path=str(dst), dry_run=dry_run)
