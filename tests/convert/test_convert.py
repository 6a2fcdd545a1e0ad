"""Conversion in one process: content, subsets, bad samples, resume state, commands."""

from __future__ import annotations

import base64
import json
import os

import numpy as np
import pytest
from convert_helpers import run_command, sample, tree_bytes

import hpcio
from hpcio.convert import BadSampleError, PlanError, ResumeError
from hpcio.convert.resume import staging_path


def _expected(i):
    s = sample(i)
    return {"id": s["id"], "text": s["text"], "blob": base64.b64decode(s["blob.b64"])}


def _ids(path):
    return sorted(s["id"] for s in hpcio.open(path))


def test_round_trip_every_sample_once(sources, tmp_path):
    out = tmp_path / "out"
    summary = hpcio.convert(sources, out, to="lines", ngpus=2, nworkers=2, shard_size=8000, progress=False)
    assert summary["num_shards"] % 4 == 0 and summary["num_shards"] >= 4
    assert summary["samples_written"] == 360 and summary["bad_samples"] == 0
    ds = hpcio.open(out)
    got = {s["id"]: s for s in ds}
    assert sorted(got) == list(range(360))
    for i in (0, 77, 359):
        assert got[i] == _expected(i)
    assert not os.path.exists(staging_path(out))
    assert sorted(os.listdir(out)) == [".hpcio", "index.json"] + [f"part-{k:05d}.lines" for k in range(summary["num_shards"])]


def test_same_seed_same_bytes_other_seed_other_layout(sources, tmp_path):
    a = hpcio.convert(sources, tmp_path / "a", to="lines", num_shards=6, seed=1, progress=False)
    hpcio.convert(sources, tmp_path / "b", to="lines", num_shards=6, seed=1, progress=False)
    hpcio.convert(sources, tmp_path / "c", to="lines", num_shards=6, seed=2, progress=False)
    assert a["num_shards"] == 6
    assert tree_bytes(tmp_path / "a") == tree_bytes(tmp_path / "b")
    assert tree_bytes(tmp_path / "a") != tree_bytes(tmp_path / "c")


def test_fields_map_filter_take_skip(sources, tmp_path):
    out = tmp_path / "sub"
    summary = hpcio.convert(
        sources, out, to="lines", num_shards=2, skip=10, take=100, fields=["id", "text"],
        map=lambda s: {**s, "n": len(s["text"])}, filter=lambda s: s["id"] % 2 == 0, progress=False,
    )
    assert summary["samples_written"] == 50 and summary["filtered"] == 50
    ds = hpcio.open(out)
    assert sorted(s["id"] for s in ds) == list(range(10, 110, 2))
    s = next(iter(ds))
    assert set(s) == {"id", "text", "n"} and s["n"] == len(s["text"])


def test_map_by_module_function_name(sources, tmp_path):
    summary = hpcio.convert(sources, tmp_path / "m", to="lines", num_shards=1,
                            map="linesfmt_helpers:drop_odd", progress=False)
    assert summary["samples_written"] == 180 and summary["filtered"] == 180


def _corrupt(path):
    """Line 5 becomes bad JSON, line 9 gets bad base64; returns their byte offsets."""
    with open(path, "rb") as f:
        lines = f.read().splitlines(keepends=True)
    lines[5] = b'{"id": 5, "text": }\n'
    obj = json.loads(lines[9])
    obj["blob.b64"] = "not*base64!"
    lines[9] = (json.dumps(obj) + "\n").encode()
    with open(path, "wb") as f:
        f.write(b"".join(lines))
    return sum(len(x) for x in lines[:5]), sum(len(x) for x in lines[:9])


def test_skip_bad_records_a_report_beside_the_output(sources, tmp_path):
    off5, off9 = _corrupt(sources[1])
    out = tmp_path / "out"
    summary = hpcio.convert(sources, out, to="lines", num_shards=3, skip_bad=True, progress=False)
    assert summary["bad_samples"] == 2 and summary["samples_written"] == 358
    report = str(out) + ".bad-samples.jsonl"
    assert summary["report"] == report
    with open(report) as f:
        records = sorted((json.loads(line) for line in f), key=lambda r: r["sample"])
    for rec in records:
        assert 0 <= rec.pop("shard") < 3
    assert records == [
        {"source": sources[1], "file": sources[1], "sample": 5, "offset": off5, "stage": "read",
         "error_type": "DecodeError", "error": "bad JSON: Expecting value: line 1 column 19 (char 18)"},
        {"source": sources[1], "file": sources[1], "sample": 9, "offset": off9, "stage": "read",
         "error_type": "DecodeError",
         "error": "bad base64 in field 'blob.b64': Only base64 data is allowed"},
    ]
    assert 120 + 5 not in _ids(out) and 120 + 9 not in _ids(out) and len(_ids(out)) == 358


def test_without_skip_bad_the_first_bad_sample_stops_and_nothing_is_visible(sources, tmp_path):
    off5, _ = _corrupt(sources[1])
    out = tmp_path / "out"
    with pytest.raises(BadSampleError) as info:
        hpcio.convert(sources, out, to="lines", num_shards=1, progress=False)
    assert str(info.value).startswith(
        f"bad sample, conversion stopped (read failed at {sources[1]}, byte offset {off5}, sample 5: "
        "DecodeError: bad JSON: Expecting value: line 1 column 19 (char 18))"
    )
    assert "pass --skip-bad" in str(info.value)
    assert not os.path.exists(out)
    assert not os.path.exists(str(out) + ".bad-samples.jsonl")


def test_the_same_command_starts_over_once_the_bad_sample_is_fixed(sources, tmp_path):
    """A conversion that failed on a bad sample leaves a partial output the same command
    replaces once the input is fixed; --resume says to run it without --resume."""
    import warnings

    with open(sources[1], "rb") as f:
        good = f.read()
    _corrupt(sources[1])
    out = tmp_path / "out"
    with pytest.raises(BadSampleError, match="or fix the sample and run the same command again$"):
        hpcio.convert(sources, out, to="lines", num_shards=2, progress=False)
    staging = staging_path(out)
    assert os.path.isdir(staging) and not os.path.exists(out)
    with open(sources[1], "wb") as f:
        f.write(good)
    with pytest.raises(ResumeError) as info:
        hpcio.convert(sources, out, to="lines", num_shards=2, progress=False, resume=True)
    assert str(info.value) == ("the partial output was made from other inputs or options by a conversion that "
                               f"failed; run the same command without --resume to start over ({staging})")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        summary = hpcio.convert(sources, out, to="lines", num_shards=2, progress=False)
    assert [str(w.message) for w in caught] == [
        f"starting over: removed the partial output that a failed conversion left ({staging})"]
    assert summary["samples_written"] == 360 and _ids(out) == list(range(360)) and not os.path.exists(staging)


def test_map_errors_are_bad_samples_too(sources, tmp_path):
    def explode(s):
        if s["id"] == 3:
            raise ValueError("no three")
        return s

    summary = hpcio.convert(sources, tmp_path / "o", to="lines", num_shards=1, map=explode,
                            skip_bad=True, progress=False)
    assert summary["bad_samples"] == 1
    with open(summary["report"]) as f:
        rec = json.loads(f.read())
    assert (rec["stage"], rec["sample"], rec["error_type"], rec["error"]) == ("map", 3, "ValueError", "no three")


def test_existing_destination_and_leftover_partial_output_are_refused(sources, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep").write_text("x")
    with pytest.raises(ResumeError, match="the destination already exists"):
        hpcio.convert(sources, out, to="lines", num_shards=1, progress=False)
    os.makedirs(staging_path(tmp_path / "new"))
    with pytest.raises(ResumeError, match="an interrupted conversion left this partial output; run the same "
                                          "command with --resume to finish it"):
        hpcio.convert(sources, tmp_path / "new", to="lines", num_shards=1, progress=False)


def test_resume_redoes_only_missing_or_damaged_shards(sources, tmp_path):
    ref = tmp_path / "ref"
    hpcio.convert(sources, ref, to="lines", num_shards=6, progress=False)
    out = tmp_path / "out"
    staging = staging_path(out)
    # a run interrupted after writing every shard, before publishing the dataset
    with pytest.MonkeyPatch.context() as mp:
        from hpcio.convert import driver

        real = driver.publish_dataset
        mp.setattr(driver, "publish_dataset", lambda *a, **k: (_ for _ in ()).throw(KeyboardInterrupt()))
        with pytest.raises(KeyboardInterrupt):
            hpcio.convert(sources, out, to="lines", num_shards=6, progress=False)
        mp.setattr(driver, "publish_dataset", real)
    assert not os.path.exists(out) and os.path.isdir(staging)
    os.remove(os.path.join(staging, ".hpcio", "parts", "shard-000002.json"))  # never recorded
    with open(os.path.join(staging, "part-00004.lines"), "r+b") as f:  # damaged on disk
        f.truncate(10)
    with open(os.path.join(staging, "part-00005.lines"), "r+b") as f:  # same size, one byte
        first = f.read(1)
        f.seek(0)
        f.write(bytes([first[0] ^ 1]))
    summary = hpcio.convert(sources, out, to="lines", num_shards=6, resume=True, progress=False)
    assert (summary["shards_kept"], summary["shards_written"]) == (3, 3)
    assert tree_bytes(out) == tree_bytes(ref)


@pytest.mark.parametrize("size", [0, 1, 3 << 20])
def test_file_digest_is_the_xxh3_of_the_bytes(tmp_path, size):
    import xxhash

    from hpcio.convert.resume import file_digest

    data = np.random.default_rng(size).integers(0, 256, size, dtype=np.uint8).tobytes()
    path = tmp_path / "f"
    path.write_bytes(data)
    assert file_digest(str(path)) == xxhash.xxh3_64_hexdigest(data)


def test_format_libraries_load_once_before_any_reader_opens(sources, tmp_path, monkeypatch):
    # They are imported before the job's clock starts (the summary's seconds).
    import linesfmt

    events = []
    monkeypatch.setattr(linesfmt, "load_libraries", lambda: events.append("load"), raising=False)
    opened = linesfmt.Reader.__init__

    def reader_init(self, *args, **kwargs):
        events.append("open")
        opened(self, *args, **kwargs)

    monkeypatch.setattr(linesfmt.Reader, "__init__", reader_init)
    hpcio.convert(sources, tmp_path / "out", to="lines", num_shards=2, progress=False)
    assert events[0] == "load" and events.count("load") == 1 and "open" in events


def test_summary_times_every_phase_of_the_job(sources, tmp_path):
    from hpcio.convert.driver import PhaseClock

    summary = hpcio.convert(sources, tmp_path / "out", to="lines", num_shards=3, progress=False)
    phases = summary["phases"]
    assert list(phases) == list(PhaseClock.PHASES)
    assert all(len(seconds) == 1 and seconds[0] >= 0 for seconds in phases.values())
    assert phases["read"][0] > 0 and phases["write"][0] > 0 and phases["merge"][0] > 0
    assert phases["encode"] == [0.0] and phases["exchange"][0] < 0.005  # one rank exchanges nothing
    # The phases follow each other from the job's start: together they are its seconds
    # (rounded to the ms, the phases to 0.1 ms).
    assert sum(s[0] for s in phases.values()) == pytest.approx(summary["seconds"], abs=0.005)


@pytest.mark.parametrize("changed", [{"seed": 9}, {"selection": np.arange(19)}, {"selection": np.arange(19, -1, -1)}])
def test_resume_with_other_options_is_refused(sources, tmp_path, changed):
    out = tmp_path / "out"
    with pytest.MonkeyPatch.context() as mp:
        from hpcio.convert import driver

        mp.setattr(driver, "publish_dataset", lambda *a, **k: (_ for _ in ()).throw(KeyboardInterrupt()))
        with pytest.raises(KeyboardInterrupt):
            hpcio.convert(sources, out, to="lines", num_shards=6, selection=np.arange(20), progress=False)
    with pytest.raises(ResumeError, match="made from other inputs or options"):
        hpcio.convert(sources, out, to="lines", **{"num_shards": 6, "selection": np.arange(20), **changed},
                      resume=True, progress=False)
    # The same selection, given as a list of Python ints, is the same input.
    summary = hpcio.convert(sources, out, to="lines", num_shards=6, selection=list(range(20)), resume=True,
                            progress=False)
    assert summary["samples_written"] == 20


def test_array_fingerprint_depends_on_the_ids_not_their_container():
    from hpcio.convert.resume import array_fingerprint

    ids = np.array([5, 3, 1 << 40], dtype=np.int64)
    assert array_fingerprint(ids) == array_fingerprint([5, 3, 1 << 40]) == array_fingerprint(ids.astype(">i8"))
    assert array_fingerprint(ids) != array_fingerprint(ids[::-1])
    assert array_fingerprint(np.arange(3)) != array_fingerprint(np.arange(4))


def test_convert_help_explains(tmp_path):
    from hpcio.convert.plan import DEFAULT_PLACED_RUN_BYTES

    proc = run_command("convert", ["--help"])
    assert proc.returncode == 0
    for text in ("byte-identical at any rank count", "--skip-bad", "--resume", "--shards-multiple-of",
                 "mpiexec -n 8", "bad-samples.jsonl",
                 f"$HPCIO_CONVERT_PLACED_RUN_BYTES (default {DEFAULT_PLACED_RUN_BYTES}; 0: always)"):
        assert text in proc.stdout


def test_convert_command_prints_a_summary(sources, tmp_path):
    proc = run_command("convert", [*sources, tmp_path / "o", "--to", "lines", "--num-shards", "3", "--json"])
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    assert summary["num_shards"] == 3 and summary["samples_written"] == 360
    assert "[hpcio convert] 360/360 samples (100.0%)" in proc.stderr


def test_human_summary_names_the_time_of_each_phase():
    import io

    from hpcio.cli.convert import print_summary

    summary = {"output": "/o", "format": "mds", "num_shards": 4, "samples_written": 2000,
               "bytes_written": 117_000_000, "seconds": 0.2, "ranks": 2, "imbalance": 0.001,
               "phases": {"measure": [0.002, 0.002], "plan": [0.0031, 0.0001], "read": [0.05, 0.07],
                          "encode": [0.0002, 0.0001], "merge": [0.004, 0.0]}}
    out = io.StringIO()
    print_summary(summary, as_json=False, stream=out)
    assert out.getvalue().splitlines() == [
        "wrote /o (mds): 4 shards, 2000 samples, 117.0 MB in 0.2s on 2 rank(s) (10000 samples/s); "
        "shard bytes within 0.1% of the mean",
        "seconds per phase (fastest-slowest rank): measure 0.002, plan 0.000-0.003, read 0.050-0.070, "
        "merge 0.000-0.004",
    ]


def test_convert_command_error_exit(sources, tmp_path):
    proc = run_command("convert", [*sources, tmp_path / "o", "--to", "lines", "--num-shards", "3",
                                   "--ngpus", "2"])
    assert proc.returncode == 1
    assert proc.stderr.strip().endswith("hpcio: error: --num-shards 3 is not a multiple of 2 "
                                        "(ngpus x nworkers or --shards-multiple-of)")


def test_plan_command(sources, tmp_path):
    proc = run_command("plan", ["--bytes", "2TB", "--samples", "10000000", "--ngpus", "32", "--nworkers", "8",
                                "--inode-quota", "1000"])
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("768 shards of about 2604.2 MB (--num-shards 768, a multiple of 256; 769 files)")
    assert "inode quota (1000) allows at most 768 shards" in proc.stdout
    assert "  - 32 GPU(s) x 8 worker(s) = 256 data loader workers" in proc.stdout
    proc = run_command("plan", [*sources, "--json"])
    rec = json.loads(proc.stdout)
    assert rec["num_shards"] == 1


def test_split_and_join_commands(sources, tmp_path):
    proc = run_command("split", [*sources, tmp_path / "parts", "--fractions", "0.5,0.25", "--names",
                                 "train,val", "--num-shards", "2", "--no-progress"])
    assert proc.returncode == 0, proc.stderr
    train, val = _ids(tmp_path / "parts" / "train"), _ids(tmp_path / "parts" / "val")
    assert len(train) == 180 and len(val) == 90 and not set(train) & set(val)
    proc = run_command("join", [tmp_path / "parts" / "train", tmp_path / "parts" / "val", tmp_path / "joined",
                                "--num-shards", "1", "--no-progress"])
    assert proc.returncode == 0, proc.stderr
    joined = [s["id"] for s in hpcio.open(tmp_path / "joined")]
    train_order = [s["id"] for s in hpcio.open(tmp_path / "parts" / "train")]
    val_order = [s["id"] for s in hpcio.open(tmp_path / "parts" / "val")]
    assert joined == train_order + val_order


def test_a_format_without_the_sharded_writing_hook_is_refused_at_once(sources, tmp_path):
    with pytest.raises(hpcio.CapabilityError, match=r"^output format 'msgpack' \(--to, or to= in Python\) is a "
                                                  r"format hpcio convert reads but cannot write; choose one of mds, "):
        hpcio.convert(sources, tmp_path / "w", to="msgpack", progress=False)
    assert not os.path.exists(tmp_path / "w") and not os.path.exists(staging_path(tmp_path / "w"))


def _parquet_source(path, n=600, rows_per_group=50):
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(3)
    table = pa.table({"id": list(range(n)), "text": ["p" * int(k) for k in rng.integers(1, 300, n)],
                      "blob": [rng.bytes(int(k)) for k in rng.integers(0, 100, n)]})
    pq.write_table(table, path, row_group_size=rows_per_group)
    return str(path)


def test_a_job_reading_parquet_allocates_arrow_memory_from_jemalloc_and_gives_the_pool_back(tmp_path, monkeypatch,
                                                                                             tuned):
    import pyarrow as pa

    src = _parquet_source(tmp_path / "src.parquet", n=60)
    before = pa.default_memory_pool().backend_name
    try:
        expected = pa.jemalloc_memory_pool().backend_name
    except NotImplementedError:  # a pyarrow built without jemalloc keeps its default
        expected = before

    def record_pool(sample):
        return {**sample, "pool": pa.default_memory_pool().backend_name}

    hpcio.convert(src, tmp_path / "chosen", to="mds", num_shards=2, map=record_pool, progress=False)
    assert {s["pool"] for s in hpcio.open(tmp_path / "chosen")} == {expected}
    assert pa.default_memory_pool().backend_name == before
    # a pool the user chose is left alone
    monkeypatch.setenv("ARROW_DEFAULT_MEMORY_POOL", before)
    hpcio.convert(src, tmp_path / "kept", to="mds", num_shards=2, map=record_pool, progress=False)
    assert {s["pool"] for s in hpcio.open(tmp_path / "kept")} == {before}


def test_each_parquet_row_group_is_read_once_whatever_the_rounds(tmp_path, monkeypatch, row_group_reads):
    src = _parquet_source(tmp_path / "src.parquet")  # 12 row groups
    reads = row_group_reads
    # the reader keeps only its last row group, so every re-read shows
    monkeypatch.setattr("hpcio.formats.parquet.CACHE_BYTES", 0)
    one = hpcio.convert(src, tmp_path / "one", to="mds", num_shards=6, progress=False)
    assert one["num_shards"] == 6 and sorted(reads) == list(range(12))
    reads.clear()
    # one shard per round, each drawing on every row group: still each read once, ahead
    # of the rounds
    with pytest.warns(UserWarning, match=r"^a shard holds about \d+\.\d\d kB in memory while it is written, "
                      r"more than --round-size \(1 B\): a round holds at least one shard per rank; "
                      r"a smaller --shard-size holds less$"):
        rounds = hpcio.convert(src, tmp_path / "rounds", to="mds", num_shards=6, round_bytes=1, progress=False)
    assert sorted(reads) == list(range(12))
    assert tree_bytes(tmp_path / "rounds") == tree_bytes(tmp_path / "one")
    assert rounds["samples_written"] == 600
    got = {s["id"]: s for s in hpcio.open(tmp_path / "one")}
    source = hpcio.open(src)
    assert sorted(got) == list(range(600))
    for i in (0, 49, 50, 599):
        assert got[i] == source[i]


def test_a_plan_that_fails_after_measuring_leaves_no_partial_output(sources, tmp_path):
    # Measuring writes the sizes into the staging directory: a run that stops before its
    # plan is recorded has nothing to resume, and a new run must not be told to resume.
    for _ in range(2):
        with pytest.raises(PlanError, match=r"^no samples selected to convert$"):
            hpcio.convert(sources, tmp_path / "out", to="lines", skip=10**6, progress=False)
        assert not os.path.exists(staging_path(tmp_path / "out"))


def test_round_size_must_be_positive(sources, tmp_path, monkeypatch):
    with pytest.raises(PlanError, match=r"^round_bytes \(--round-size\) must be positive, got 0$"):
        hpcio.convert(sources, tmp_path / "out", to="lines", round_bytes=0, progress=False)
    monkeypatch.setenv("HPCIO_CONVERT_ROUND_BYTES", "lots")
    with pytest.raises(PlanError, match=r"^\$HPCIO_CONVERT_ROUND_BYTES must be a number of bytes, got 'lots'$"):
        hpcio.convert(sources, tmp_path / "out", to="lines", progress=False)
    assert not os.path.exists(tmp_path / "out") and not os.path.exists(staging_path(tmp_path / "out"))
    proc = run_command("convert", [*sources, tmp_path / "out", "--to", "lines", "--round-size", "0"])
    assert proc.returncode != 0
    assert "round_bytes (--round-size) must be positive, got 0" in proc.stderr


def test_byte_sizes_from_the_environment_take_units(sources, tmp_path, monkeypatch):
    from hpcio.convert.spec import PLACED_RUN_BYTES_ENV, ROUND_BYTES_ENV, env_bytes

    monkeypatch.setenv(ROUND_BYTES_ENV, "256MiB")
    monkeypatch.setenv(PLACED_RUN_BYTES_ENV, "1.5k")
    assert env_bytes(ROUND_BYTES_ENV, 1, minimum=1) == 256 * 2**20
    assert env_bytes(PLACED_RUN_BYTES_ENV, 1, minimum=0) == 1500
    summary = hpcio.convert(sources, tmp_path / "out", to="lines", num_shards=2, progress=False)
    assert summary["samples_written"] == 360


@pytest.mark.parametrize(("value", "message"), [
    ("-1", "must be at least 0, got -1"),
    ("1MiBs", "must be a number of bytes, got '1MiBs'"),
    ("0.5", "must be a number of bytes, got '0.5'"),
])
def test_placed_run_bytes_from_the_environment_must_be_a_whole_number_of_bytes(sources, tmp_path, monkeypatch,
                                                                                 value, message):
    monkeypatch.setenv("HPCIO_CONVERT_PLACED_RUN_BYTES", value)
    with pytest.raises(PlanError) as info:
        hpcio.convert(sources, tmp_path / "out", to="mds", progress=False)
    assert str(info.value) == f"$HPCIO_CONVERT_PLACED_RUN_BYTES {message}"
    assert not os.path.exists(tmp_path / "out") and not os.path.exists(staging_path(tmp_path / "out"))


@pytest.mark.parametrize("enabled", [True, False])
def test_the_collector_is_paused_while_a_round_is_built_and_left_as_it_was(sources, tmp_path, enabled, tuned):
    import gc

    seen = []

    def record_collector(s):
        seen.append(gc.isenabled())
        if s["id"] == 7 and len(seen) > 300:
            raise ValueError("seven")
        return s

    was = gc.isenabled()
    (gc.enable if enabled else gc.disable)()
    try:
        hpcio.convert(sources, tmp_path / "a", to="lines", num_shards=1, map=record_collector, progress=False)
        assert gc.isenabled() is enabled
        with pytest.raises(BadSampleError, match="map failed at .*, sample 7: ValueError: seven"):
            hpcio.convert(sources, tmp_path / "b", to="lines", num_shards=1, map=record_collector, progress=False)
        assert gc.isenabled() is enabled
    finally:
        (gc.enable if was else gc.disable)()
    assert len(seen) > 360 and not any(seen)
