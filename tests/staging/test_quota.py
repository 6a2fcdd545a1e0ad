"""Quotas are read from the filesystem's tools, never assumed, and always name their source.

``lfs``, ``mmlsquota`` and ``idr_quota_user`` do not exist on the test machines: the
parsers are tested on text fixtures in each tool's documented layout
(``tests/fixtures/quota/README.md``), and the dispatch with a fake executable on PATH that
prints such a fixture -- a stand-in for a program that cannot run here.  A Lustre or GPFS
mount cannot exist here either, so those dispatch tests also stand in for
:func:`hpcio.staging.quota.mount_of`.
"""

from __future__ import annotations

import os
import re
import stat

import pytest

from hpcio.errors import InsufficientSpaceError
from hpcio.staging import quota, stage
from hpcio.staging.quota import Quota, parse_idr_quota_user, parse_lfs_quota, parse_mmlsquota, read_quota
from hpcio.staging.sites import available_sites, detect_site, load_site
from hpcio.staging.tiers import resolve_tiers

FIXTURES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fixtures", "quota")
GiB, TiB = 2**30, 2**40


def fixture(name: str) -> str:
    with open(os.path.join(FIXTURES, name), encoding="utf-8") as f:
        return f.read()


def test_parse_lfs_quota():
    assert parse_lfs_quota(fixture("lfs-quota-q.txt")) == Quota(
        "lfs quota", used_bytes=1234567 * 1024, limit_bytes=5000000000 * 1024, used_inodes=12345,
        limit_inodes=500_000)
    # a long filesystem name wraps; the soft limit binds when there is no hard one; 0 is no limit
    assert parse_lfs_quota(fixture("lfs-quota-q-wrapped.txt")) == Quota(
        "lfs quota", used_bytes=2048 * 1024, limit_bytes=2097152 * 1024, used_inodes=10, limit_inodes=None)
    assert parse_lfs_quota("lfs: error: quota not enabled") is None


def test_parse_mmlsquota():
    text = fixture("mmlsquota-Y.txt")
    assert parse_mmlsquota(text, "/dev/gpfswork") == Quota(
        "mmlsquota", used_bytes=100 * GiB, limit_bytes=None, used_inodes=291_616, limit_inodes=500_000)
    assert parse_mmlsquota(text).limit_bytes == 3 * GiB  # the first filesystem
    assert parse_mmlsquota(text, "gpfsscratch") is None
    assert parse_mmlsquota("mmlsquota: command failed") is None


def test_parse_idr_quota_user():
    text = fixture("idr_quota_user.txt")
    source = "idr_quota_user, refreshed daily"
    assert parse_idr_quota_user(text, "HOME") == Quota(
        source, used_bytes=round(2.98 * GiB), limit_bytes=3 * GiB, used_inodes=9419, limit_inodes=150_000)
    assert parse_idr_quota_user(text, "WORK") == Quota(
        source, used_bytes=round(84.94 * GiB), limit_bytes=5 * TiB, used_inodes=499_995, limit_inodes=500_000)
    assert parse_idr_quota_user(text, "SCRATCH") is None


@pytest.fixture
def fake_tool(tmp_path, monkeypatch):
    """Put an executable called ``name`` on PATH that prints the fixture ``output``."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    quota._output.cache_clear()

    def make(name: str, output: str) -> None:
        tool = bindir / name
        tool.write_text(f"#!/bin/sh\ncat '{os.path.join(FIXTURES, output)}'\n")
        tool.chmod(tool.stat().st_mode | stat.S_IXUSR)

    yield make
    quota._output.cache_clear()


@pytest.mark.parametrize("fstype, tool, output, device, expected_inodes", [
    ("lustre", "lfs", "lfs-quota-q.txt", "fs", 500_000),
    ("gpfs", "mmlsquota", "mmlsquota-Y.txt", "gpfswork", 500_000),
])
def test_read_quota_dispatches_on_the_filesystem_type(tmp_path, fake_tool, monkeypatch, fstype, tool, output,
                                                      device, expected_inodes):
    assert read_quota(tmp_path) is None  # neither tool applies to this machine's filesystem
    fake_tool(tool, output)
    monkeypatch.setattr(quota, "mount_of", lambda path: (str(tmp_path), fstype, device))
    got = read_quota(tmp_path)
    assert got.source == {"lfs": "lfs quota", "mmlsquota": "mmlsquota"}[tool]
    assert got.limit_inodes == expected_inodes


def test_site_wrapper_quota_binds_stage_and_is_named(tmp_path, fake_tool, monkeypatch):
    fake_tool("idr_quota_user", "idr_quota_user.txt")
    work = tmp_path / "work"
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "a.bin").write_bytes(b"x" * 10)
    for n in range(6):
        (tmp_path / "src" / f"f{n}").write_bytes(b"y")
    env = {"WORK": str(work), "HPCIO_SITE": "jean-zay", "XDG_CONFIG_HOME": str(tmp_path / "cfg")}
    tiers = resolve_tiers(env=env)
    assert (tiers["work"].quota_inodes, tiers["work"].used_inodes) == (500_000, 499_995)
    with pytest.raises(InsufficientSpaceError, match=re.escape(
            "(short of inodes; limit from quota of tier 'work' (idr_quota_user, refreshed daily))")):
        stage(tmp_path / "src", work / "ds", tiers=tiers, progress=False)
    assert not work.exists()


def test_no_quota_is_invented_without_a_tool(tmp_path, fake_tool):
    """On Jean Zay without its wrapper, and on any other machine, a tier has no quota and
    staging is limited by statvfs alone (the documented 3 GB HOME is not a reading)."""
    home = tmp_path / "home"
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "a.bin").write_bytes(b"x" * 4096)
    for site in ("jean-zay", "none"):
        tiers = resolve_tiers(env={"HOME": str(home), "HPCIO_SITE": site, "XDG_CONFIG_HOME": str(tmp_path)})
        assert (tiers["home"].quota_bytes, tiers["home"].quota_inodes, tiers["home"].quota_source) == (None,) * 3
        result = stage(tmp_path / "src", home / site, tiers=tiers, dry_run=True, progress=False)
        assert result.plan.limited_by == "statvfs"


def test_site_profiles_apply_only_where_they_belong():
    assert available_sites() == ["jean-zay"]
    jz = load_site("jean-zay")
    assert jz.quota_command == "idr_quota_user" and "qos_gpu_a100-t3" in jz.qos["a100"]
    assert detect_site({}, hostname="laptop", exists=lambda p: False) is None
    assert detect_site({}, hostname="jean-zay3", exists=lambda p: False) == jz
    assert detect_site({}, hostname="r6i4n1", exists=lambda p: p == "/gpfsdswork") == jz
    assert detect_site({"HPCIO_SITE": "none"}, hostname="jean-zay3") is None
    assert detect_site({"HPCIO_SITE": "jean-zay"}, hostname="laptop", exists=lambda p: False) == jz
    with pytest.raises(Exception, match=re.escape("HPCIO_SITE='x' names no site profile; known: ['jean-zay']")):
        detect_site({"HPCIO_SITE": "x"})


def test_tiers_off_site_have_no_site_policy(tmp_path):
    tiers = resolve_tiers(env={"SCRATCH": "/s", "DSDIR": "/d", "STORE": "/st", "HPCIO_SITE": "none",
                               "XDG_CONFIG_HOME": str(tmp_path)})
    assert tiers["scratch"].purge is None and not tiers["dsdir"].read_only and tiers["store"].compute_reachable
