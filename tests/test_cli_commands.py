"""Every ``hpcio`` subcommand once succeeding and once failing: exit codes (2 for usage
errors), exact one-line messages, no traceback, and no output left by a refused run."""

from __future__ import annotations

import argparse
import os

import pytest

import hpcio
from hpcio.cli import main as cli_main
from hpcio.options import option_names, reader_option_names

USAGE_ERROR = 2


@pytest.fixture
def jsonl(tmp_path):
    path = tmp_path / "in.jsonl"
    path.write_text("".join(f'{{"id": {i}, "text": "t{i}"}}\n' for i in range(4)))
    return str(path)


def one_line_error(proc, code: int) -> str:
    """The error line of a failed command, checked to be its whole stderr."""
    assert proc.returncode == code, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    return lines[0]


def usage_error(proc) -> str:
    """argparse's own usage errors: the usage (maybe wrapped), then one error line."""
    assert proc.returncode == USAGE_ERROR, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.splitlines()
    assert lines[0].startswith("usage: hpcio") and not any("error" in line for line in lines[:-1])
    return lines[-1]


def valid(names) -> str:
    return ", ".join(sorted(names))


def test_every_parser_refuses_abbreviations():
    parser = cli_main.build_parser()
    seen = [parser]
    while seen:
        p = seen.pop()
        assert p.allow_abbrev is False, p.prog
        for action in p._actions:
            if isinstance(action, argparse._SubParsersAction):
                seen.extend(action.choices.values())


# --- convert ------------------------------------------------------------------------------
def test_convert(run_hpcio, jsonl, tmp_path):
    dst = str(tmp_path / "out")
    proc = run_hpcio("convert", jsonl, dst, "--to", "mds", "--no-progress")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(f"wrote {dst} (mds): 1 shards, 4 samples, ")
    assert [s["id"] for s in hpcio.open(dst)] == [0, 1, 2, 3]


def test_convert_unknown_writer_option(run_hpcio, jsonl, tmp_path):
    proc = run_hpcio("convert", jsonl, str(tmp_path / "out"), "--to", "mds", "-O", "bogus=1")
    names = option_names(hpcio.get_format("mds").Writer, skip=("path", "shard_id", "num_shards"))
    assert one_line_error(proc, USAGE_ERROR) == (
        f"hpcio: error: unknown mds writer option 'bogus'; valid options: {valid(names)}"
    )
    assert sorted(os.listdir(tmp_path)) == ["in.jsonl"]  # no out, no .out.hpcio-partial


def test_convert_unknown_reader_option(run_hpcio, jsonl, tmp_path):
    proc = run_hpcio("convert", jsonl, str(tmp_path / "out"), "--to", "mds", "--from", "jsonl",
                     "-I", "bogus=1")
    from hpcio.sources.fields import FIELD_OPTIONS

    names = [*reader_option_names(hpcio.get_format("jsonl").Reader), *FIELD_OPTIONS]
    assert one_line_error(proc, USAGE_ERROR) == (
        f"hpcio: error: unknown jsonl reader option 'bogus'; valid options: {valid(names)}"
    )
    assert sorted(os.listdir(tmp_path)) == ["in.jsonl"]


def test_convert_refuses_an_abbreviated_option(run_hpcio, jsonl, tmp_path):
    proc = run_hpcio("convert", jsonl, str(tmp_path / "out"), "--to", "mds", "--shards", "4")
    assert usage_error(proc) == "hpcio: error: unrecognized arguments: --shards 4"


def test_convert_unknown_format(run_hpcio, jsonl, tmp_path):
    from hpcio.convert.driver import conversion_targets

    proc = run_hpcio("convert", jsonl, str(tmp_path / "out"), "--to", "nope")
    # only the formats the converter writes are offered (the child has the built-in ones only)
    targets = [name for name in conversion_targets() if name in hpcio.registry._BUILTIN]
    assert one_line_error(proc, 2) == ("hpcio: error: output format 'nope' (--to, or to= in Python) is not a known "
                                       f"format; choose one of {', '.join(targets)}")
    assert "imagefolder" not in conversion_targets() and "mds" in conversion_targets()
    proc = run_hpcio("convert", jsonl, str(tmp_path / "out"), "--to", "imagefolder")
    assert one_line_error(proc, 2).startswith("hpcio: error: output format 'imagefolder' (--to, or to= in Python) "
                                              "is a format hpcio convert reads but cannot write; choose one of mds")


# --- join and split -----------------------------------------------------------------------
def test_join(run_hpcio, jsonl, tmp_path):
    dst = str(tmp_path / "joined")
    proc = run_hpcio("join", jsonl, jsonl, dst, "--to", "mds", "--no-progress")
    assert proc.returncode == 0, proc.stderr
    assert [s["id"] for s in hpcio.open(dst)] == [0, 1, 2, 3] * 2


def test_join_needs_an_output(run_hpcio, jsonl):
    proc = run_hpcio("join", jsonl, "--to", "mds")
    assert one_line_error(proc, USAGE_ERROR) == "hpcio: error: give at least one source and the output directory"


def test_split(run_hpcio, jsonl, tmp_path):
    out = tmp_path / "parts"
    proc = run_hpcio("split", jsonl, str(out), "--to", "mds", "--parts", "2", "--no-progress")
    assert proc.returncode == 0, proc.stderr
    assert sorted(os.listdir(out)) == ["part-0000", "part-0001"]
    ids = sorted(s["id"] for part in ("part-0000", "part-0001") for s in hpcio.open(out / part))
    assert ids == [0, 1, 2, 3]


@pytest.mark.parametrize("args, message", [
    (["--parts", "0"], "--parts must be at least 1, got 0"),
    (["--parts", "2", "--names", "a"], "--names gives 1 names for 2 parts"),
    (["--parts", "2", "-I", "bogus=1", "--from", "jsonl"], None),
])
def test_split_usage_errors(run_hpcio, jsonl, tmp_path, args, message):
    proc = run_hpcio("split", jsonl, str(tmp_path / "parts"), "--to", "mds", *args)
    line = one_line_error(proc, USAGE_ERROR)
    if message is None:
        assert line.startswith("hpcio: error: unknown jsonl reader option 'bogus'; valid options: ")
    else:
        assert line == f"hpcio: error: {message}"
    assert not (tmp_path / "parts").exists()


# --- plan ---------------------------------------------------------------------------------
def test_plan(run_hpcio):
    proc = run_hpcio("plan", "--samples", "10", "--bytes", "1GB")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[0] == "4 shards of about 250.0 MB (--num-shards 4, a multiple of 1; 5 files)"


def test_plan_missing_dataset(run_hpcio, tmp_path):
    proc = run_hpcio("plan", str(tmp_path / "missing"))
    assert one_line_error(proc, 1) == f"hpcio: error: no such source file or directory ({tmp_path / 'missing'})"


# --- stage, unstage, tiers ----------------------------------------------------------------
def test_stage_and_unstage(run_hpcio, jsonl, tmp_path):
    src, dst = tmp_path / "src", tmp_path / "dst"
    src.mkdir()
    (src / "data.jsonl").write_bytes(open(jsonl, "rb").read())
    proc = run_hpcio("stage", str(src), str(dst), "--no-mpi", "--quiet")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(f"staged {src} -> {dst}: copied 1 files ")
    assert (dst / "data.jsonl").read_bytes() == (src / "data.jsonl").read_bytes()
    proc = run_hpcio("unstage", str(dst))
    assert proc.returncode == 0, proc.stderr
    assert not (dst / "data.jsonl").exists() and (src / "data.jsonl").exists()


def test_stage_missing_source(run_hpcio, tmp_path):
    proc = run_hpcio("stage", str(tmp_path / "missing"), str(tmp_path / "dst"), "--no-mpi", "--quiet")
    assert one_line_error(proc, 1) == f"hpcio: error: staging source does not exist ({tmp_path / 'missing'})"
    assert not (tmp_path / "dst").exists()


def test_unstage_refuses_a_directory_it_did_not_stage(run_hpcio, tmp_path):
    (tmp_path / "keep").write_text("x")
    proc = run_hpcio("unstage", str(tmp_path))
    assert one_line_error(proc, 1) == (
        "hpcio: error: refusing to remove a directory without a staging manifest "
        f"(.hpcio-manifest.json) ({tmp_path})"
    )
    assert (tmp_path / "keep").exists()


def test_tiers(run_hpcio, tmp_path):
    config = tmp_path / "tiers.toml"
    config.write_text(f'[tiers.fast]\npath = "{tmp_path}"\n')
    proc = run_hpcio("tiers", "--config", str(config), "--json")
    assert proc.returncode == 0, proc.stderr
    assert "fast" in proc.stdout and str(tmp_path) in proc.stdout


def test_tiers_missing_config(run_hpcio, tmp_path):
    proc = run_hpcio("tiers", "--config", str(tmp_path / "none.toml"))
    assert one_line_error(proc, 1) == f"hpcio: error: tier config file does not exist ({tmp_path / 'none.toml'})"


# --- bench, info, inspect, verify (their successes are in test_cli.py / test_bench.py) ---
def test_bench_bad_operation(run_hpcio):
    proc = run_hpcio("bench", "--op", "bogus")
    assert usage_error(proc).startswith("hpcio bench: error: argument --op: invalid choice: 'bogus'")


def test_info_unknown_argument(run_hpcio):
    proc = run_hpcio("info", "--bogus")
    assert usage_error(proc) == "hpcio: error: unrecognized arguments: --bogus"


@pytest.mark.parametrize("command", ["inspect", "verify"])
def test_inspect_and_verify_missing_dataset(run_hpcio, tmp_path, command):
    proc = run_hpcio(command, str(tmp_path / "missing"))
    assert one_line_error(proc, 1) == f"hpcio: error: no such file or directory ({tmp_path / 'missing'})"


# --- locate ---------------------------------------------------------------------------------
def test_locate(run_hpcio, jsonl, tmp_path):
    import json

    dst = str(tmp_path / "out")
    assert run_hpcio("convert", jsonl, dst, "--to", "mds", "--num-shards", "2", "--no-progress").returncode == 0
    proc = run_hpcio("locate", dst, "1", "--json")
    assert proc.returncode == 0, proc.stderr
    where = json.loads(proc.stdout)
    line = open(jsonl).read().splitlines()[where["source_place"]["line"] - 1]
    assert json.loads(line) == dict(hpcio.open(dst)[1])


def test_locate_index_out_of_range(run_hpcio, jsonl, tmp_path):
    dst = str(tmp_path / "out")
    assert run_hpcio("convert", jsonl, dst, "--to", "mds", "--num-shards", "2", "--no-progress").returncode == 0
    proc = run_hpcio("locate", dst, "4")
    assert one_line_error(proc, USAGE_ERROR) == (
        f"hpcio: error: sample 4 is out of range: the dataset holds 4 samples (indexes -4 to 3) ({dst})")


def test_locate_needs_an_integer_index(run_hpcio, jsonl):
    proc = run_hpcio("locate", jsonl, "first")
    assert usage_error(proc) == "hpcio locate: error: argument index: invalid int value: 'first'"


def test_locate_missing_dataset(run_hpcio, tmp_path):
    proc = run_hpcio("locate", str(tmp_path / "missing"), "0")
    assert one_line_error(proc, 1) == f"hpcio: error: no such file or directory ({tmp_path / 'missing'})"


# --- the library's own surfaces -------------------------------------------------------------
def test_unknown_keyword_options_are_typed(jsonl, tmp_path):
    with pytest.raises(hpcio.OptionError, match=r"^unknown jsonl reader option 'cache_dirr'; valid options: cache_dir, validate_hashes$"):
        hpcio.open(jsonl, cache_dirr=str(tmp_path))
    with pytest.raises(hpcio.OptionError, match=r"^unknown mds writer option 'colums'; valid options: .*columns"):
        hpcio.open_writer(tmp_path / "w", format="mds", colums={"id": "int"})
    assert not (tmp_path / "w").exists()
    with pytest.raises(hpcio.OptionError, match=r"^unknown convert option 'bogus'; valid options: .*writer_options"):
        hpcio.convert(jsonl, tmp_path / "c", to="mds", bogus=1)
    with pytest.raises(TypeError):  # still what Python raises for an unknown keyword
        hpcio.open(jsonl, cache_dirr=str(tmp_path))


def test_a_field_name_is_not_a_sample_index(jsonl):
    ds = hpcio.open(jsonl)
    with pytest.raises(hpcio.errors.WrongTypeError, match=r"^samples are selected by an int, .* not 'id'; "):
        ds["id"]
