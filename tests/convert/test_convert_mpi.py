"""The converter under real MPI (the mpich wheel's mpiexec): identical bytes at any rank
count, a failing rank ends the run, kill -9 and --resume."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from convert_helpers import BOOT, MPIEXEC, env, run_command, tree_bytes

import hpcio
from hpcio.convert.resume import staging_path

pytestmark = pytest.mark.mpi

SHARDS = ["--ngpus", "2", "--nworkers", "2", "--shard-size", "15000"]
# Every run a rank writes into a shard is large enough to place it: the test sources are
# small, and at the default (1 MiB) their records would be sent to the shards' owners.
PLACING = {"HPCIO_CONVERT_PLACED_RUN_BYTES": "0"}


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """Sources and their conversion by one process."""
    from convert_helpers import write_sources

    d = tmp_path_factory.mktemp("mpi")
    srcs = write_sources(d, nfiles=3, per_file=120)
    proc = run_command("convert", [*srcs, d / "ref", "--to", "lines", *SHARDS, "--json"])
    assert proc.returncode == 0, proc.stderr
    return srcs, d / "ref", json.loads(proc.stdout)


@pytest.mark.parametrize("ranks", [2, 4])
def test_output_is_byte_identical_to_one_rank(reference, tmp_path, ranks):
    srcs, ref, ref_summary = reference
    proc = run_command("convert", [*srcs, tmp_path / "out", "--to", "lines", *SHARDS, "--json"], ranks=ranks)
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)  # printed once, by rank 0
    assert summary["ranks"] == ranks and summary["num_shards"] == ref_summary["num_shards"] == 8
    assert all(len(seconds) == ranks for seconds in summary["phases"].values())
    assert min(summary["phases"]["read"]) > 0 and min(summary["phases"]["exchange"]) > 0
    assert summary["phases"]["merge"][1:] == [0.0] * (ranks - 1)  # rank 0 merges the index
    assert tree_bytes(tmp_path / "out") == tree_bytes(ref)
    sizes = [len(b) for name, b in tree_bytes(ref).items() if name.endswith(".lines")]
    assert len(sizes) == 8 and max(abs(s - sum(sizes) / 8) for s in sizes) <= 0.05 * sum(sizes) / 8
    # one aggregated progress report, on rank 0, counting every rank's samples
    finals = [line for line in proc.stderr.splitlines() if line.endswith(", done")]
    assert len(finals) == 1 and finals[0].startswith("[hpcio convert] 360/360 samples (100.0%)")


def test_ranks_on_one_node_share_its_cpus_for_parquet_decoding(tmp_path):
    """Two ranks on one node decode Parquet with half the CPUs each, not all of them."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    src = tmp_path / "src.parquet"
    pq.write_table(pa.table({"id": list(range(64)), "text": [f"t{i}" for i in range(64)]}), src)
    cpus = len(os.sched_getaffinity(0))
    seen = {}
    for ranks in (1, 2):
        out = tmp_path / f"out{ranks}"
        proc = run_command("convert", [src, out, "--to", "mds", "--num-shards", "2",
                                       "--map", "convert_helpers:record_arrow_threads"], ranks=ranks)
        assert proc.returncode == 0, proc.stderr
        seen[ranks] = {s["arrow_threads"] for s in hpcio.open(out)}
    (alone,) = seen[1]  # pyarrow's own default: the CPUs, or OMP_NUM_THREADS when set
    assert seen[2] == {min(alone, max(1, cpus // 2))}


def test_ranks_left_on_the_same_cpus_run_on_a_share_each_for_the_job(tmp_path):
    """mpiexec without -bind-to leaves both ranks on every CPU: during the job each runs
    on its own slice of them, as with -bind-to core, and every thread of the process gets
    back the CPUs it had afterwards, a thread pinned to one CPU before the job included."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    src = tmp_path / "src.parquet"
    pq.write_table(pa.table({"id": list(range(64)), "text": [f"t{i}" for i in range(64)]}), src)
    cpus = sorted(os.sched_getaffinity(0))
    # each rank pins a waiting thread to its last CPU, converts, then writes the CPUs of
    # that thread and of the others to after<rank>.json
    script = """
import json, os, sys, threading, hpcio
from convert_helpers import record_cpus
done = threading.Event()
pinned = threading.Thread(target=done.wait, daemon=True)
pinned.start()
os.sched_setaffinity(pinned.native_id, {max(os.sched_getaffinity(0))})
hpcio.convert(sys.argv[1], sys.argv[2], to="mds", num_shards=2, map=record_cpus, progress=False)
others = {tuple(sorted(os.sched_getaffinity(int(t)))) for t in os.listdir("/proc/self/task")
          if int(t) != pinned.native_id}
after = {"pinned": sorted(os.sched_getaffinity(pinned.native_id)), "others": sorted(others)}
done.set()
with open(os.path.join(sys.argv[3], "after%s.json" % os.environ["PMI_RANK"]), "w") as f:
    json.dump(after, f)
"""
    environ = env()
    environ.pop("SLURM_CPUS_PER_TASK", None)
    proc = subprocess.run([MPIEXEC, "-n", "2", sys.executable, "-m", "mpi4py", "-c", script, src, tmp_path / "out",
                           tmp_path], capture_output=True, text=True, env=environ, timeout=120)
    assert proc.returncode == 0, proc.stderr
    share = len(cpus) // 2
    if share:
        expected = {",".join(map(str, cpus[k * share : (k + 1) * share])) for k in (0, 1)}
    else:  # one CPU: no slice for each, both ranks keep it
        expected = {",".join(map(str, cpus))}
    assert {s["cpus"] for s in hpcio.open(tmp_path / "out")} == expected
    for rank in (0, 1):
        after = json.loads((tmp_path / f"after{rank}.json").read_text())
        assert after == {"pinned": [cpus[-1]], "others": [cpus]}


def _corrupt_line(path, line):
    with open(path, "rb") as f:
        lines = f.read().splitlines(keepends=True)
    lines[line] = b'{"id": 1, "text": }\n'
    with open(path, "wb") as f:
        f.write(b"".join(lines))


def test_bad_sample_on_one_rank_aborts_every_rank(tmp_path):
    from convert_helpers import write_sources

    srcs = write_sources(tmp_path, nfiles=2, per_file=40)
    _corrupt_line(srcs[1], 7)
    start = time.monotonic()
    proc = run_command("convert", [*srcs, tmp_path / "out", "--to", "lines", "--num-shards", "4"],
                       ranks=2, timeout=90)
    assert proc.returncode != 0
    assert time.monotonic() - start < 60
    assert f"failed: bad sample, conversion stopped (read failed at {srcs[1]}, byte offset" in proc.stderr
    assert "sample 7: DecodeError: bad JSON: Expecting value" in proc.stderr
    assert not os.path.exists(tmp_path / "out")


def test_skip_bad_report_is_the_same_at_any_rank_count(tmp_path):
    from convert_helpers import write_sources

    srcs = write_sources(tmp_path, nfiles=2, per_file=40)
    _corrupt_line(srcs[0], 3)
    _corrupt_line(srcs[1], 30)
    args = ["--to", "lines", "--num-shards", "4", "--skip-bad", "--json"]
    one = run_command("convert", [*srcs, tmp_path / "one", *args])
    two = run_command("convert", [*srcs, tmp_path / "two", *args], ranks=2)
    assert one.returncode == 0 and two.returncode == 0, two.stderr
    assert json.loads(two.stdout)["bad_samples"] == 2
    with open(str(tmp_path / "one") + ".bad-samples.jsonl") as f:
        a = [json.loads(x) for x in f]
    with open(str(tmp_path / "two") + ".bad-samples.jsonl") as f:
        b = [json.loads(x) for x in f]
    assert [(r["source"], r["sample"]) for r in a] == [(srcs[0], 3), (srcs[1], 30)]
    assert a == b
    assert tree_bytes(tmp_path / "one") == tree_bytes(tmp_path / "two")


def _descendants(pid: int) -> list[int]:
    """Process ids below ``pid`` (from /proc)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def _rank_pids(pid: int) -> list[int]:
    pids = []
    for p in _descendants(pid):
        try:
            with open(f"/proc/{p}/cmdline", "rb") as f:
                if b"mpi4py" in f.read():
                    pids.append(p)
        except OSError:
            pass
    return pids


@pytest.mark.parametrize("victims", ["one rank", "all ranks"])
def test_kill_9_then_resume_completes_without_loss_or_duplicates(reference, tmp_path, victims):
    srcs, ref, _ = reference
    out = tmp_path / "out"
    args = [*srcs, out, "--to", "lines", *SHARDS]
    e = env()
    e["HPCIO_CONVERT_SLOW_SHARD_SECONDS"] = "0.7"
    cmd = [MPIEXEC, "-n", "2", sys.executable, "-m", "mpi4py", "-c", BOOT, "convert", *map(str, args)]
    proc = subprocess.Popen(cmd, env=e, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    parts = os.path.join(staging_path(out), ".hpcio", "parts")

    def published():
        return [n for n in os.listdir(parts) if n.endswith(".json")] if os.path.isdir(parts) else []

    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if len(published()) >= 2:
            break
        time.sleep(0.05)
    else:
        proc.kill()
        pytest.fail("the conversion never published two shards")
    ranks = _rank_pids(proc.pid)
    assert len(ranks) == 2
    if victims == "one rank":
        os.kill(ranks[-1], signal.SIGKILL)
    else:
        os.killpg(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=60)
    assert proc.returncode != 0
    assert not os.path.exists(out)
    done_before = len(published())
    assert 2 <= done_before < 8

    resumed = run_command("convert", [*args, "--resume", "--json"], ranks=2)
    assert resumed.returncode == 0, resumed.stderr
    summary = json.loads(resumed.stdout)
    assert summary["shards_kept"] >= 2 and summary["shards_kept"] + summary["shards_written"] == 8
    assert tree_bytes(out) == tree_bytes(ref)
    ids = [s["id"] for s in hpcio.open(out)]
    assert sorted(ids) == list(range(360))


@pytest.mark.parametrize("ranks", [1, 2])
def test_ctrl_c_says_how_to_resume_and_the_resume_completes(reference, tmp_path, ranks):
    """Ctrl-C reaches every process of the job (the terminal's process group): each rank
    says it was interrupted and how to resume, and the same command with --resume
    finishes the conversion byte for byte."""
    srcs, ref, _ = reference
    out = tmp_path / "out"
    args = [*srcs, out, "--to", "lines", *SHARDS]
    e = env()
    e["HPCIO_CONVERT_SLOW_SHARD_SECONDS"] = "0.7"
    cmd = [MPIEXEC, "-n", str(ranks), sys.executable, "-m", "mpi4py", "-c", BOOT, "convert", *map(str, args)]
    proc = subprocess.Popen(cmd, env=e, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
                            text=True)
    parts = os.path.join(staging_path(out), ".hpcio", "parts")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not (os.path.isdir(parts) and os.listdir(parts)):
        time.sleep(0.05)
    for pid in _rank_pids(proc.pid):
        os.kill(pid, signal.SIGINT)
    _out, err = proc.communicate(timeout=120)
    assert proc.returncode != 0
    hint = "interrupted (Ctrl-C); the partial output is kept: run the same command with --resume to finish it"
    if ranks == 1:
        assert f"hpcio: {hint}" in err.splitlines(), err
    else:
        said = [line for line in err.splitlines() if line.startswith("hpcio convert: rank ")]
        assert said and all(line.endswith(hint) for line in said), err
        assert not [line for line in err.splitlines() if line.endswith("failed: ")], err
    resumed = run_command("convert", [*args, "--resume"], ranks=ranks)
    assert resumed.returncode == 0, resumed.stderr
    assert tree_bytes(out) == tree_bytes(ref)


def _parquet_and_jinx_sources(directory):
    """A Parquet file of 12 row groups and a JINX dataset (read lazily)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(11)
    rows = [{"id": i, "text": "q" * int(rng.integers(1, 300)), "blob": rng.bytes(int(rng.integers(0, 80)))}
            for i in range(480)]
    pq.write_table(pa.Table.from_pylist(rows[:240]), directory / "a.parquet", row_group_size=20)
    with hpcio.open_writer(directory / "b.jinx", format="jinx", compression="zst") as w:
        for r in rows[240:]:
            w.write(r)
    return [directory / "a.parquet", directory / "b.jinx"], rows


@pytest.mark.parametrize("extra_env", [None, PLACING])
@pytest.mark.parametrize("round_size", ["512MiB", "1"])
def test_parquet_and_lazy_jinx_sources_exchanged_between_ranks(tmp_path, round_size, extra_env):
    """Ranks read their own row groups and JINX samples and exchange them (or place
    their records): the output is the one-rank output, in one round or in one round per
    shard pair."""
    srcs, rows = _parquet_and_jinx_sources(tmp_path)
    args = ["--to", "mds", "--num-shards", "4", "--round-size", round_size, "--json"]
    one = run_command("convert", [*srcs, tmp_path / "one", *args])
    two = run_command("convert", [*srcs, tmp_path / "two", *args], ranks=2, extra_env=extra_env)
    assert one.returncode == 0, one.stderr
    assert two.returncode == 0, two.stderr
    assert json.loads(two.stdout)["samples_written"] == 480
    assert tree_bytes(tmp_path / "one") == tree_bytes(tmp_path / "two")
    got = sorted((s for s in hpcio.open(tmp_path / "two")), key=lambda s: s["id"])
    assert got == rows


def test_zero_copy_mds_source_is_exchanged_between_ranks(tmp_path):
    """Samples read as memory views of a source's map travel as records made of them."""
    with hpcio.open_writer(tmp_path / "src", format="mds", columns={"id": "int", "blob": "bytes"}) as w:
        for i in range(200):
            w.write({"id": i, "blob": bytes([i % 256]) * (i + 1)})
    args = ["--to", "mds", "--num-shards", "4", "-I", "zero_copy=true", "--json"]
    one = run_command("convert", [tmp_path / "src", tmp_path / "one", *args])
    two = run_command("convert", [tmp_path / "src", tmp_path / "two", *args], ranks=2)
    assert one.returncode == 0, one.stderr
    assert two.returncode == 0, two.stderr
    assert tree_bytes(tmp_path / "one") == tree_bytes(tmp_path / "two")
    assert sorted((s["id"], s["blob"]) for s in hpcio.open(tmp_path / "two")) == [
        (i, bytes([i % 256]) * (i + 1)) for i in range(200)]


@pytest.mark.parametrize(("options", "extra_env"), [
    ([], PLACING),  # each rank writes its records into every shard's file
    ([], None),  # runs of a few kB: the records are sent to the shards' owners
    (["--filter", "convert_helpers:first_three"], PLACING),  # a shard left without records has no file
    (["--compression", "zstd"], PLACING),  # the owner compresses a shard whole: records are sent to it
    (["-O", 'hashes=["sha1", "xxh64"]'], PLACING),  # the owner hashes the whole file: records are sent to it
])
def test_mds_records_placed_or_sent_give_the_one_rank_shards(tmp_path, options, extra_env):
    from convert_helpers import write_sources

    srcs = write_sources(tmp_path, nfiles=2, per_file=120)
    args = ["--to", "mds", "--num-shards", "4", *options, "--json"]
    one = run_command("convert", [*srcs, tmp_path / "one", *args])
    two = run_command("convert", [*srcs, tmp_path / "two", *args], ranks=2, extra_env=extra_env)
    assert one.returncode == 0, one.stderr
    assert two.returncode == 0, two.stderr
    expected = [0, 1, 2] if options[:1] == ["--filter"] else list(range(240))
    assert json.loads(two.stdout)["samples_written"] == len(expected)
    assert tree_bytes(tmp_path / "one") == tree_bytes(tmp_path / "two")
    index = json.loads((tmp_path / "two" / "index.json").read_text())
    files = {(s["zip_data"] or s["raw_data"])["basename"] for s in index["shards"]}
    assert files | {".hpcio", "index.json", "index.hpcio"} == set(os.listdir(tmp_path / "two"))
    assert len(files) == 4 if len(expected) == 240 else len(files) <= 3  # 3 samples leave a shard empty
    assert sorted(s["id"] for s in hpcio.open(tmp_path / "two")) == expected


@pytest.mark.parametrize("extra_env", [None, PLACING])
@pytest.mark.parametrize("ranks", [2, 3])
def test_mds_records_made_on_every_rank_give_the_one_rank_shards_and_report(tmp_path, ranks, extra_env):
    """MDS samples are encoded on the rank that read them, with the columns of their
    shard's first sample that has columns, even when that sample was read by another
    rank: the shards and the bad-sample report are those of one rank."""
    from convert_helpers import write_sources

    srcs = write_sources(tmp_path, nfiles=2, per_file=120)
    args = ["--to", "mds", "--num-shards", "4", "--compression", "sample::zstd", "--skip-bad",
            "--map", "convert_helpers:mds_trouble", "--json"]
    one = run_command("convert", [*srcs, tmp_path / "one", *args])
    many = run_command("convert", [*srcs, tmp_path / "many", *args], ranks=ranks, extra_env=extra_env)
    assert one.returncode == 0, one.stderr
    assert many.returncode == 0, many.stderr
    extra = [i for i in range(180, 240) if i % 11 == 3]
    summary = json.loads(many.stdout)
    assert (summary["samples_written"], summary["bad_samples"]) == (240 - 130 - len(extra), 130 + len(extra))
    assert tree_bytes(tmp_path / "one") == tree_bytes(tmp_path / "many")
    reports = []
    for out in ("one", "many"):
        with open(str(tmp_path / out) + ".bad-samples.jsonl") as f:
            reports.append([json.loads(line) for line in f])
    assert reports[0] == reports[1]
    # The writers' temporary shards are gone: the report points at the source samples.
    assert {(r["file"], r["offset"]) for r in reports[0]} == {(None, None)}
    kinds = {(r["stage"], r["error_type"]) for r in reports[0]}
    assert kinds == {("write", "UnsupportedValueError"), ("write", "SchemaError")}
    assert sorted(r["sample"] + 120 * (r["source"] == srcs[1]) for r in reports[0]
                  if r["error_type"] == "SchemaError") == extra
    assert sorted(s["id"] for s in hpcio.open(tmp_path / "many")) == [
        i for i in range(130, 240) if i not in extra]


# Converts argv[1:-1] into argv[-1] as MDS on every rank, noting the write route each
# rank's ShardWriter took in each round.
ROUTES = """
import sys
import linesfmt  # registers the sources' format
import hpcio
from hpcio.convert.writer import ShardWriter
from hpcio.distributed.comm import get_comm

chosen = ShardWriter.route
taken = set()

def route(self, *args):
    got = chosen(self, *args)
    taken.add(got.name)
    return got

ShardWriter.route = route
hpcio.convert(sys.argv[1:-1], sys.argv[-1], to="mds", num_shards=4, round_bytes=8000, progress=False)
rank = get_comm().rank
with open(f"{sys.argv[-1]}.route-{rank}", "w") as f:  # one file a rank: prints of two ranks interleave
    f.write(" ".join([str(rank), *sorted(taken)]))
"""


def test_every_write_route_writes_the_same_shards(tmp_path):
    """The three routes of a round (:class:`hpcio.convert.writer.WriteRoute`): samples
    sent to the shard's owner (one rank), records sent to it (two ranks, runs below
    $HPCIO_CONVERT_PLACED_RUN_BYTES), records placed by the rank that made them (two
    ranks, any run): the same bytes, in several rounds."""
    from convert_helpers import write_sources

    srcs = write_sources(tmp_path, nfiles=2, per_file=120)
    runs = {"SAMPLES": (1, {}), "RECORDS": (2, {"HPCIO_CONVERT_PLACED_RUN_BYTES": "1GiB"}),
            "PLACED": (2, PLACING)}
    trees = {}
    for name, (ranks, extra_env) in runs.items():
        cmd = [sys.executable, "-c", ROUTES, *srcs, str(tmp_path / name)]
        if ranks > 1:
            cmd = [MPIEXEC, "-n", str(ranks), sys.executable, "-m", "mpi4py", *cmd[1:]]
        proc = subprocess.run(cmd, capture_output=True, text=True, env={**env(), **extra_env}, timeout=120)
        assert proc.returncode == 0, proc.stderr
        assert [(tmp_path / f"{name}.route-{rank}").read_text() for rank in range(ranks)] == \
            [f"{rank} {name}" for rank in range(ranks)]
        trees[name] = tree_bytes(tmp_path / name)
    assert sum(name.endswith(".mds") for name in trees["SAMPLES"]) == 4
    assert trees["RECORDS"] == trees["SAMPLES"]
    assert trees["PLACED"] == trees["SAMPLES"]
