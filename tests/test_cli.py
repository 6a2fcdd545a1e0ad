"""The ``hpcio`` command line: discovery, info, demo, errors, hpcio-convert."""

from __future__ import annotations

import hashlib
import json
import os
import sys
import textwrap

import pytest

import hpcio
from hpcio.cli import main as cli_main
from hpcio.demo import JPEG_BYTES, TEXT_BYTES, TOUR_FORMATS, read_jsonl


def sha256_file(path) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def command_names() -> list[str]:
    return list(cli_main.command_modules())


def test_help_lists_every_command(run_hpcio):
    proc = run_hpcio("--help")
    assert proc.returncode == 0, proc.stderr
    names = command_names()
    assert {"info", "demo"} <= set(names)
    for name in names:
        assert f"\n    {name} " in proc.stdout, f"{name} missing from:\n{proc.stdout}"


def test_version(run_hpcio):
    proc = run_hpcio("--version")
    assert proc.returncode == 0
    assert proc.stdout.strip() == f"hpcio {hpcio.__version__}"


def test_discovery_skips_private_modules_and_survives_a_broken_one(tmp_path, monkeypatch):
    (tmp_path / "hello.py").write_text(textwrap.dedent('''
        HELP = "say hello"
        def add_arguments(parser):
            parser.add_argument("who")
        def run(args):
            print("hello", args.who)
            return 3
    '''))
    (tmp_path / "broken.py").write_text("import module_that_does_not_exist_anywhere\n")
    (tmp_path / "_private.py").write_text("HELP = 'x'\n")
    (tmp_path / "half_done.py").write_text("HELP = 'no run'\n")
    monkeypatch.setattr(hpcio.cli, "__path__", [*hpcio.cli.__path__, str(tmp_path)])
    for name in ("hello", "half_done"):  # imported by the discovery below; undone after
        monkeypatch.setitem(sys.modules, f"hpcio.cli.{name}", None)
        monkeypatch.delitem(sys.modules, f"hpcio.cli.{name}")

    commands = cli_main.command_modules()
    assert "_private" not in commands and "main" not in commands
    assert "half-done" in commands  # "_" in module names becomes "-"
    assert cli_main.main(["hello", "world"]) == 3
    assert commands["broken"].HELP == (
        "(unavailable: No module named 'module_that_does_not_exist_anywhere')"
    )
    assert cli_main.main(["broken"]) == 1
    assert cli_main.main(["half-done"]) == 1


def test_info_lists_every_kernel(run_hpcio):
    from hpcio._core import _codecs
    from hpcio.info import kernel_names

    build = _codecs.build_info()
    names = kernel_names(build)
    assert names, f"build_info() lists no kernels: {build}"
    proc = run_hpcio("info")
    assert proc.returncode == 0, proc.stderr
    for name in names:
        assert name in proc.stdout, f"kernel {name} missing from hpcio info"
    assert f"hpcio {hpcio.__version__}" in proc.stdout
    for backend in ("zarr", "h5py", "mpi4py", "torch"):
        assert f"\n  {backend} " in proc.stdout
    assert "\nMPI: MPICH" in proc.stdout  # the mpich wheel is part of the test extra


def test_info_kernel_list_names_every_kernel_of_the_header():
    """The kernels ``hpcio info`` lists are the functions ``csrc/hpcio.h`` declares,
    less the helpers that describe the build, size output buffers or manage errors and
    memory."""
    import pathlib
    import re

    from hpcio._core import _codecs
    from hpcio.info import kernel_names

    header = (pathlib.Path(__file__).parents[1] / "csrc" / "hpcio.h").read_text()
    declared = set(re.findall(r"\bhpcio_([a-z0-9_]+)\(", header))
    helpers = {"error_clear", "fail", "free", "build_flags", "compiler", "simd", "build_debug",
               "build_sanitize", "kernels", "zstd_version", "zstd_version_string", "blosc2_version",
               "a85_encoded_bound", "zstd_bound", "blosc2_bound"}
    assert sorted(kernel_names(_codecs.build_info())) == sorted(declared - helpers)


def test_info_json(run_hpcio):
    from hpcio._core import _codecs
    from hpcio.info import kernel_names

    proc = run_hpcio("info", "--json")
    assert proc.returncode == 0, proc.stderr
    info = json.loads(proc.stdout)
    assert info["hpcio"]["version"] == hpcio.__version__
    assert kernel_names(info["core"]) == kernel_names(_codecs.build_info())
    assert set(info["backends"]) >= {"zarr", "h5py", "mpi4py", "torch", "streaming"}
    assert isinstance(info["backends"]["h5py"]["mpi"], bool)
    assert info["mpi"]["library"].startswith("MPICH")


def test_info_without_mpi(run_hpcio):
    proc = run_hpcio("info", "--json", "--no-mpi")
    assert json.loads(proc.stdout)["mpi"] == {"error": "not queried (--no-mpi)"}


@pytest.mark.parametrize("profile", ["vlm", "text"])
def test_demo_generate_is_deterministic(run_hpcio, tmp_path, profile):
    a, b, c = (tmp_path / f"{x}.jsonl" for x in "abc")
    for out, seed in ((a, "0"), (b, "0"), (c, "1")):
        proc = run_hpcio("demo", "generate", "--profile", profile, "-n", "6", "--seed", seed, str(out))
        assert proc.returncode == 0, proc.stderr
        assert f"wrote 6 {profile} samples" in proc.stderr
    assert sha256_file(a) == sha256_file(b)
    assert sha256_file(a) != sha256_file(c)
    samples = list(read_jsonl(a, profile))
    assert len(samples) == 6
    if profile == "vlm":
        assert all(JPEG_BYTES[0] <= len(image) <= JPEG_BYTES[1] for s in samples for image in s["images"])
    else:
        assert all(TEXT_BYTES[0] <= len(s["text"].encode()) <= TEXT_BYTES[1] for s in samples)


def test_error_is_one_line_and_exit_1(run_hpcio, tmp_path):
    (tmp_path / "afile").write_text("")
    out = tmp_path / "afile" / "x.jsonl"
    proc = run_hpcio("demo", "generate", "-n", "1", str(out))
    assert proc.returncode == 1
    assert proc.stderr == (
        f"hpcio: error: the output directory is a file, or under one ({tmp_path / 'afile'})\n"
    )
    assert proc.stdout == ""


@pytest.mark.parametrize("where", ["before", "after"])
def test_traceback_flag(run_hpcio, tmp_path, where):
    (tmp_path / "afile").write_text("")
    out = str(tmp_path / "afile" / "x.jsonl")
    args = ["demo", "generate", "-n", "1", out]
    args = ["--traceback", *args] if where == "before" else ["demo", "--traceback", *args[1:]]
    proc = run_hpcio(*args)
    assert proc.returncode == 1
    assert proc.stderr.startswith("Traceback (most recent call last):")
    assert proc.stderr.rstrip().endswith(
        f"hpcio.errors.InvalidArgumentError: the output directory is a file, or under one "
        f"({tmp_path / 'afile'})"
    )


def test_bad_arguments_exit_2(run_hpcio):
    proc = run_hpcio("demo", "generate", "-n", "-3", "x.jsonl")
    assert proc.returncode == 2
    assert "argument -n: must be >= 0, got -3" in proc.stderr


def test_hpcio_convert_entry_point(capsys):
    has_convert = os.path.exists(os.path.join(os.path.dirname(cli_main.__file__), "convert.py"))
    if has_convert:
        with pytest.raises(SystemExit) as exc:
            cli_main.convert_main(["--help"])
        assert exc.value.code == 0
        assert capsys.readouterr().out.startswith("usage: hpcio-convert")
    else:
        assert cli_main.convert_main([]) == 2
        assert capsys.readouterr().err == (
            "hpcio-convert: error: conversion is not available in this build\n"
        )


def test_demo_run_reports_every_format(run_hpcio, tmp_path):
    out = tmp_path / "tour"
    proc = run_hpcio("demo", "run", "--profile", "text", "-n", "40", "--out", str(out))
    available = []
    for name in TOUR_FORMATS:
        try:
            hpcio.get_format(name)
            available.append(name)
        except ImportError:
            pass
    rows = {line.split()[0]: line.split() for line in proc.stdout.splitlines() if line.split()}
    assert "demo: 40 text samples, seed 0" in proc.stdout
    for name in TOUR_FORMATS:
        if name in available:
            assert rows[name][6:9] == ["4", "x", "10"], proc.stdout + proc.stderr
            assert rows[name][9] == "byte-exact", proc.stdout + proc.stderr
        else:
            assert rows[name][-1] == "UNAVAILABLE", proc.stdout
    assert (out / "text.jsonl").exists()
    if available:
        assert proc.returncode == 0, proc.stdout + proc.stderr
    else:
        assert proc.returncode == 1
        assert "hpcio demo run: no format completed the tour" in proc.stderr


# --- inspect and verify -----------------------------------------------------------------
@pytest.fixture
def small_msgpack(tmp_path):
    path = str(tmp_path / "ds")
    with hpcio.open_writer(path, format="msgpack", max_count=2) as w:
        for i in range(3):
            w.write({"id": i, "text": f"t{i}"})
    return path


def test_inspect_prints_the_report(run_hpcio, small_msgpack):
    proc = run_hpcio("inspect", small_msgpack)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [
        "format        msgpack",
        f"path          {small_msgpack}",
        "samples       3",
        "shards        2",
        f"stored bytes  {os.path.getsize(small_msgpack + '/shard-000000.msgpack') + os.path.getsize(small_msgpack + '/shard-000001.msgpack')} B",
        "fields        id: int, text: str",
    ]
    proc = run_hpcio("inspect", "--json", small_msgpack)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == hpcio.get_format("msgpack").inspect(small_msgpack)


def test_verify_exit_codes(run_hpcio, small_msgpack):
    proc = run_hpcio("verify", small_msgpack)
    assert (proc.returncode, proc.stderr) == (0, "")
    assert proc.stdout == "OK: 3 samples in 2 shards, 3 records decoded, 2 hashes checked\n"
    shard = os.path.join(small_msgpack, "shard-000001.msgpack")
    with open(shard, "r+b") as f:
        data = f.read().replace(b"t2", b"\xff2")
        f.seek(0)
        f.write(data)
    proc = run_hpcio("verify", small_msgpack)
    assert proc.returncode == 1
    assert proc.stdout == "FAILED (2 problems listed): 3 samples in 2 shards, 2 records decoded, 2 hashes checked\n"
    mismatch, bad = proc.stderr.splitlines()
    assert mismatch.startswith("BAD  xxh3_64 mismatch: hashes.json says ")
    assert bad.startswith("BAD  invalid MessagePack data: 'utf-8' codec can't decode byte 0xff")
    assert proc.stderr.endswith(f"({shard}, byte offset 0, sample 2)\n")
    proc = run_hpcio("verify", "--json", small_msgpack)
    report = json.loads(proc.stdout)
    assert (proc.returncode, report["ok"], report["checked"]) == (1, False, 2)
    assert [(e["path"], e["offset"], e["sample"]) for e in report["errors"]] == [(shard, 0, None), (shard, 0, 2)]


def test_a_damaged_dataset_is_a_report_not_a_traceback(run_hpcio, tmp_path):
    path = str(tmp_path / "t.jsonl.zst")
    (tmp_path / "t.jsonl.zst").write_bytes(b"\x28\xb5\x2f\xfd" + b"\0" * 20)
    proc = run_hpcio("verify", "--format", "jsonl", path)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert proc.stderr.startswith("BAD  ") and proc.stdout.startswith("FAILED (1 problems listed): 0 samples in 1 shards")


@pytest.mark.parametrize("command", ["inspect", "verify"])
def test_a_format_without_the_capability_exits_2(command, tmp_path, monkeypatch, capsys):
    import types

    from hpcio import registry
    from hpcio.formats import jsonl

    module = types.ModuleType("nohooks")
    module.NAME, module.CAPABILITIES, module.sniff = "nohooks", registry.Capabilities(), lambda p: False
    module.Reader, module.Writer = jsonl.Reader, jsonl.Writer
    monkeypatch.setitem(registry._registered, "nohooks", module)
    assert cli_main.main([command, "--format", "nohooks", str(tmp_path)]) == 2
    out = capsys.readouterr()
    assert (out.out, out.err) == ("", f"hpcio: format 'nohooks' has no {command}\n")
