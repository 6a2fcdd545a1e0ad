"""Named tiers from the environment and the config file, statvfs figures, the tier CLI."""

from __future__ import annotations

import argparse
import json
import os
import re

import pytest

from hpcio.cli import stage as stage_cli, tiers as tiers_cli, unstage as unstage_cli
from hpcio.errors import HpcioError
from hpcio.staging import MANIFEST_NAME, Tier, bench_tier, fs_usage, is_node_local, resolve_tiers, tier_for_path
from hpcio.staging.tiers import config_path
from hpcio.units import format_bytes, parse_bytes

from .conftest import fake_statvfs, tree_bytes

JZ_ENV = {"HOME": "/home/u", "WORK": "/gpfswork/p", "SCRATCH": "/gpfsscratch/p", "JOBSCRATCH": "/js/123",
          "DSDIR": "/gpfsdswork/dataset", "STORE": "/gpfsstore/p", "TMPDIR": "/tmp/job", "HPCIO_SITE": "jean-zay"}


def test_tiers_from_environment_and_the_site_profile(tmp_path):
    tiers = resolve_tiers(env={**JZ_ENV, "XDG_CONFIG_HOME": str(tmp_path)})
    assert {n: t.path for n, t in tiers.items() if n != "shm"} == {
        "home": "/home/u", "work": "/gpfswork/p", "scratch": "/gpfsscratch/p", "jobscratch": "/js/123",
        "dsdir": "/gpfsdswork/dataset", "store": "/gpfsstore/p", "tmp": "/tmp/job"}
    # The profile documents quotas but states none: no quota tool runs here.
    assert all(t.quota_bytes is None and t.quota_inodes is None for t in tiers.values())
    assert tiers["store"].compute_reachable is False
    assert (tiers["scratch"].purge, tiers["scratch"].purge_days, tiers["scratch"].purge_managed) == ("unused", 30, True)
    assert tiers["dsdir"].read_only and not tiers["work"].purge_managed
    assert tiers["jobscratch"].purge == "job" and tiers["tmp"].node_local
    if os.path.isdir("/dev/shm"):
        assert tiers["shm"].path == "/dev/shm" and tiers["shm"].node_local


def test_config_file_and_hpcio_tiers_override(tmp_path):
    cfg = tmp_path / "tiers.toml"
    cfg.write_text(
        '[tiers.nvme]\npath = "/lscratch/$SLURM_JOB_ID"\nnode_local = true\npurge = "job"\nquota_bytes = "3.2T"\n'
        '[tiers.work]\nquota_inodes = 500000\nused_inodes = 499000\n'
    )
    env = {**JZ_ENV, "SLURM_JOB_ID": "77", "HPCIO_TIERS_CONFIG": str(cfg), "HPCIO_TIERS": "scratch=/fast/b, x=/y"}
    tiers = resolve_tiers(env=env)
    assert tiers["nvme"] == Tier("nvme", "/lscratch/77", node_local=True, purge="job", quota_bytes=3_200_000_000_000,
                                 quota_source=f"tier config {cfg}")
    assert tiers["work"].quota_free() == (None, 1000)
    assert tiers["work"].quota_label() == f"quota of tier 'work' (tier config {cfg})"
    assert tiers["scratch"].path == "/fast/b" and tiers["scratch"].purge == "unused"
    assert tiers["x"].path == "/y"
    assert config_path(env) == cfg
    assert config_path({"HOME": "/h"}) == config_path({"HOME": "/h", "XDG_CONFIG_HOME": "/h/.config"})


def test_config_errors_are_clear(tmp_path):
    cfg = tmp_path / "tiers.toml"
    cfg.write_text('[tiers.nvme]\npath = "/x"\nquota = 3\n')
    with pytest.raises(HpcioError, match=re.escape(f"{cfg}: tier 'nvme' has unknown keys ['quota']")):
        resolve_tiers(env={"HPCIO_TIERS_CONFIG": str(cfg)})
    with pytest.raises(HpcioError, match=re.escape(f"tier config file does not exist ({tmp_path / 'no.toml'})")):
        resolve_tiers(env={}, config=tmp_path / "no.toml")
    with pytest.raises(HpcioError, match=re.escape("HPCIO_TIERS entry 'scratch' is not name=path")):
        resolve_tiers(env={"HPCIO_TIERS": "scratch", "XDG_CONFIG_HOME": str(tmp_path)})
    cfg.write_text('[tiers.nvme]\npath = "/x"\nquota_bytes = "12 parsecs"\n')
    with pytest.raises(HpcioError, match=re.escape(f"{cfg}: tier 'nvme': quota_bytes: not a byte size: '12 parsecs'")):
        resolve_tiers(env={"HPCIO_TIERS_CONFIG": str(cfg)})
    assert parse_bytes("5T") == 5 * 10**12


def test_tier_for_path_takes_the_longest_root(tmp_path):
    (tmp_path / "work" / "job").mkdir(parents=True)
    tiers = {"work": Tier("work", str(tmp_path / "work")), "js": Tier("js", str(tmp_path / "work" / "job"))}
    assert tier_for_path(tmp_path / "work" / "job" / "new" / "x", tiers).name == "js"
    assert tier_for_path(tmp_path / "work" / "jobless", tiers).name == "work"
    assert tier_for_path(tmp_path / "else", tiers) is None


def test_fs_usage_matches_statvfs_and_the_stand_in(tmp_path):
    st = os.statvfs(tmp_path)
    usage = fs_usage(tmp_path / "not" / "yet")
    assert usage.block_size == st.f_frsize and usage.total_inodes == st.f_files
    assert fs_usage(tmp_path, fs_stat=fake_statvfs(8192, 5)).free_bytes == 8192
    assert fs_usage(tmp_path, fs_stat=fake_statvfs(8192, 5)).free_inodes == 5


def test_node_local_detection(tmp_path):
    assert is_node_local(tmp_path, {"nvme": Tier("nvme", str(tmp_path), node_local=True)})
    assert not is_node_local(tmp_path, {"work": Tier("work", str(tmp_path))})
    if os.path.isdir("/dev/shm"):
        assert is_node_local("/dev/shm/x", {})  # tmpfs


def test_bench_tier_leaves_nothing(tmp_path):
    result = bench_tier(tmp_path, size=4 * 2**20, block=2**20)
    assert result["bytes"] == 4 * 2**20 and result["write_bytes_per_s"] > 0 and result["read_bytes_per_s"] > 0
    assert os.listdir(tmp_path) == []


def cli(module, argv):
    parser = argparse.ArgumentParser()
    module.add_arguments(parser)
    return module.run(parser.parse_args(argv))


def test_tiers_cli_lists_free_space_and_bench(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("HPCIO_TIERS", f"scratch={tmp_path}")
    monkeypatch.setenv("HPCIO_SITE", "jean-zay")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "cfg"))
    monkeypatch.delenv("HPCIO_TIERS_CONFIG", raising=False)
    assert cli(tiers_cli, ["scratch", "--json", "--bench", "--bench-size", "2M"]) == 0
    (row,) = json.loads(capsys.readouterr().out)
    assert row["name"] == "scratch" and row["path"] == str(tmp_path)
    assert 0 < row["free_inodes"] <= os.statvfs(tmp_path).f_files and row["write_bytes_per_s"] > 0
    assert cli(tiers_cli, ["scratch"]) == 0
    header, line, cache_line = capsys.readouterr().out.splitlines()
    assert header.split()[:4] == ["tier", "path", "free", "free"]
    assert line.startswith(f"scratch  {tmp_path}") and line.endswith("purged after 30 d unused")
    assert cache_line == "node cache default: /dev/shm/hpcio-cache (tier shm)"
    assert cli(tiers_cli, ["nope"]) == 2  # a bad argument
    assert capsys.readouterr().err.startswith("hpcio: error: unknown or unset tiers ['nope']; known here: ")


def test_stage_and_unstage_cli(dataset, fast_tier, monkeypatch, capsys):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(fast_tier / "cfg"))
    monkeypatch.delenv("HPCIO_TIERS_CONFIG", raising=False)
    monkeypatch.delenv("HPCIO_TIERS", raising=False)
    src, files = dataset
    dst = fast_tier / "ds"
    assert cli(stage_cli, [str(src), str(dst), "--dry-run"]) == 0
    assert capsys.readouterr().out.startswith(f"dry run: {src} -> {dst}") and not dst.exists()
    assert cli(stage_cli, [str(src), str(dst), "--threads", "2", "--chunk-size", "1Mi", "--quiet"]) == 0
    assert capsys.readouterr().out.startswith(f"staged {src} -> {dst}: copied 6 files")
    assert set(tree_bytes(dst)) == set(files) | {MANIFEST_NAME}
    assert cli(stage_cli, [str(src), str(dst), "--chunk-size", "1000"]) == 1
    assert "chunk_bytes must be a positive multiple of 1048576, got 1000" in capsys.readouterr().err
    assert cli(unstage_cli, [str(dst)]) == 0
    assert capsys.readouterr().out == f"removed {len(files) + 1} files from {dst}\n"
    assert not dst.exists()
    assert cli(unstage_cli, [str(src)]) == 1
    assert "refusing to remove a directory without a staging manifest" in capsys.readouterr().err


def test_stage_cli_progress_lines_when_not_a_terminal(dataset, fast_tier, capsys):
    src, files = dataset
    assert cli(stage_cli, [str(src), str(fast_tier / "ds"), "--threads", "1"]) == 0
    err = capsys.readouterr().err
    total = format_bytes(sum(map(len, files.values())))
    assert re.fullmatch(rf"stage: {total} / {total} \(100%\), [0-9.]+ [kMG]?B/s\n", err), err


def test_node_cache_default_passes_over_shared_filesystems(tmp_path, monkeypatch):
    """A node-local tier on a parallel filesystem ($TMPDIR on GPFS, as JOBSCRATCH at
    IDRIS) is not where a node cache goes; shm comes last."""
    from hpcio.staging import tiers as tiers_module

    nvme, tmp = tmp_path / "nvme", tmp_path / "tmp"
    nvme.mkdir(), tmp.mkdir()
    found = {"shm": Tier("shm", "/dev/shm", node_local=True, purge="node"),
             "tmp": Tier("tmp", str(tmp), node_local=True, purge="job"),
             "nvme": Tier("nvme", str(nvme), node_local=True, purge="node"),
             "scratch": Tier("scratch", str(tmp_path))}
    assert tiers_module.node_local_tier(found).name == "nvme"
    del found["nvme"]
    assert tiers_module.node_local_tier(found).name == "tmp"
    shared = {str(tmp): "gpfs"}
    monkeypatch.setattr(tiers_module, "filesystem_type", lambda path: shared.get(str(path), "tmpfs"))
    assert tiers_module.node_local_tier(found).name == "shm"
