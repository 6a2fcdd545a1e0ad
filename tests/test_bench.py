"""``hpcio bench`` and the asv suite, run for real on tiny data.

The smoke test (default suite) runs the hpcio readers only and cross-checks them: every
reader touches the same fields of the same samples, so the touch checksum of one
(profile, operation) must agree between formats.  The ``bench``-marked tests run the
asv suite and the DataLoader sweep; they take longer and need ``asv`` (the ``bench`` extra).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]


def _env(**extra):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    env.update(extra)
    return env


# A hang guard, not a budget: the default-suite smoke runs take about 30 s alone on 2
# cores and over 130 s beside four busy processes, so the limit is many times that.
BENCH_TIMEOUT_S = 1800


def _bench(tmp_path, *args, timeout=BENCH_TIMEOUT_S, interop_python=None):
    out = tmp_path / "report"
    cmd = [sys.executable, "-m", "hpcio.cli.main", "bench", "--out", str(out), "--data", str(tmp_path / "data"),
           "--text-samples", "300", "--vlm-samples", "30", "--repeats", "1", *args]
    if interop_python is None:
        cmd.append("--no-interop")
        env = _env()
    else:
        env = _env(HPCIO_INTEROP_PYTHON=interop_python)
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    return out, json.loads((out / "results.json").read_text())


def test_bench_smoke_hpcio_readers_agree(tmp_path):
    out, result = _bench(tmp_path, "--only", "hpcio", "--op", "iterate")
    for name in ("results.md", "results.csv", "results.json"):
        assert (out / name).stat().st_size > 0
    records = result["records"]
    # each figure was also appended to records.jsonl as it was taken (the report then
    # adds ratios to each)
    taken = [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]
    assert len(taken) == len(records)
    assert all({k: v for k, v in t.items() if k != "kind"}.items() <= r.items() for t, r in zip(taken, records))
    assert {r["kind"] for r in taken} == {"read"}
    assert {r["profile"] for r in records} == {"text", "vlm"}
    assert all(not r["peer"] for r in records)
    assert not [r for r in records if r.get("error")]
    # every hpcio configuration: mds and mds-sample-zstd (copies, zero-copy views), jinx
    # (lazy, eager), jinx-zst-bin (lazy, eager), webdataset, parquet, streaming's own MDS;
    # and for vlm jinx-bin (lazy, eager)
    counts = {p: sum(r["profile"] == p for r in records) for p in ("text", "vlm")}
    assert counts == {"text": 11, "vlm": 13}, sorted(r["system"] for r in records)
    expected = {"text": 300, "vlm": 30}
    for profile in ("text", "vlm"):
        rows = [r for r in records if r["profile"] == profile and r["op"] == "iterate"]
        for r in rows:
            assert r["samples"] == expected[profile], r
            assert r["checksum"] > 0, r
        checksums = {r["system"]: r["checksum"] for r in rows}
        assert len(set(checksums.values())) == 1, checksums
    md = (out / "results.md").read_text()
    assert "## Every measurement" in md and "hpcio jinx-zst-bin lazy" in md


@pytest.mark.parametrize("profile, n, rows", [("vlm", 250, [100, 100, 50]), ("text", 2100, [1000, 1000, 100])])
def test_bench_parquet_has_row_groups_as_hugging_face_writes_them(tmp_path, profile, n, rows):
    import pyarrow.parquet as pq

    from hpcio.bench.data import prepare

    (parquet,) = prepare(profile, n, str(tmp_path), formats=["parquet"], log=lambda *_: None)
    meta = pq.ParquetFile(os.path.join(parquet.path, "data.parquet")).metadata
    assert [meta.row_group(g).num_rows for g in range(meta.num_row_groups)] == rows


def test_bench_batch_apis_touch_what_shuffle_touches(tmp_path):
    """get_batch (dicts) and get_columns (arrays) read the shuffled samples: the touch of
    every column adds up to the per-sample touch of the same samples."""
    _out, result = _bench(tmp_path, "--only", "hpcio mds", "--op", "shuffle", "--op", "batch",
                          "--op", "columns")
    records = result["records"]
    assert not [r for r in records if r.get("error")]
    for profile in ("text", "vlm"):
        rows = [r for r in records if r["profile"] == profile]
        assert {r["op"] for r in rows} == {"shuffle", "batch", "columns"}
        checksums = {(r["system"], r["op"]): r["checksum"] for r in rows}
        assert len(set(checksums.values())) == 1, checksums


@pytest.mark.bench
def test_bench_peers_agree_with_hpcio(tmp_path):
    """The peers installed beside hpcio touch the same bytes as hpcio does."""
    _out, result = _bench(tmp_path, "--op", "iterate", "--op", "iterate-meta", "--op", "shuffle", "--op", "sort",
                          "--op", "columns")
    by_op = {}
    for r in result["records"]:
        assert not r.get("error"), r
        by_op.setdefault((r["profile"], r["op"]), {})[r["system"]] = r["checksum"]
    for profile in ("text", "vlm"):
        assert {"streaming mds", "webdataset", "pyarrow parquet"} <= set(by_op[profile, "iterate"])
    for key, sums in by_op.items():
        assert len(set(sums.values())) == 1, (key, sums)
    # no peer has a batch API: the columnar batch is compared with the best per-sample shuffle
    summary = {(s["profile"], s["op"]): s for s in result["summary"]}
    for profile in ("text", "vlm"):
        shuffle, columns = summary[profile, "shuffle"], summary[profile, "columns"]
        assert columns["best_peer"] == f"{shuffle['best_peer']} (per-sample shuffle)"
        assert columns["best_peer_samples_per_s"] == shuffle["best_peer_samples_per_s"]


@pytest.mark.bench
def test_bench_dataloader_sweep(tmp_path):
    out, result = _bench(tmp_path, "--only", "hpcio", "--op", "iterate", "--profile", "vlm", "--dataloader",
                         "--loader-workers", "0", "--loader-workers", "1", "--loader-batch", "8",
                         "--loader-compute", "0.001")
    rows = result["dataloader"]
    assert rows and not [r for r in rows if r.get("error")]
    for r in rows:
        assert r["samples"] == 30 and 0 < r["au"] <= 1.0, r
        # cold by default: the files were out of the page cache when each epoch began,
        # except on /dev/shm, whose pages are the files themselves
        assert r["cache"] == "cold", r
        assert (r["resident_before"] == 1.0) if r["tier"] == "shm" else (r["resident_before"] < 0.01), r
    assert {r["workers"] for r in rows} == {0, 1}
    assert "## DataLoader" in (out / "results.md").read_text()


def test_alternating_twice_splits_the_runs_by_what_ran_before(tmp_path):
    from hpcio.bench.pipeline import _alternating

    # every run appends its label to a log and reports its position in it as its seconds
    script = ("import sys; log = open(sys.argv[1], 'a+'); log.write(sys.argv[2] + '\\n'); log.seek(0); "
              "print(len(log.read().split()))")
    log = str(tmp_path / "runs.log")
    cmd = lambda label: (lambda dst: [sys.executable, "-c", script, log, label])  # noqa: E731
    position = lambda stdout: (float(stdout.split()[-1]), {"at": stdout.split()[-1]})  # noqa: E731
    out = _alternating([("a", cmd("a"), position), ("b", cmd("b"), position)], repeats=2, twice=True,
                       log=lambda *_: None)
    # b once untimed, so the first a follows a b; then each system twice a turn
    assert open(log).read().split() == ["b"] + ["a", "a", "b", "b"] * 2
    # a: positions 2, 3, 6, 7 (2 and 6 after a b); b: 4, 5, 8, 9 (4 and 8 after an a)
    a, b = out["a"], out["b"]
    assert (a["inner"], a["inner_best"], a["inner_after_previous"], a["inner_after_same"]) == (4.5, 2.0, 4.0, 5.0)
    assert (b["inner"], b["inner_best"], b["inner_after_previous"], b["inner_after_same"]) == (6.5, 4.0, 6.0, 7.0)
    assert [d["at"] for d in a["details"]] == ["2", "3", "6", "7"] and a["runs"] == b["runs"] == 4
    once = _alternating([("a", cmd("a"), position)], repeats=1, log=lambda *_: None)
    assert "inner_after_previous" not in once["a"] and once["a"]["inner"] == 10.0


@pytest.mark.parametrize("value", ["0", "-2", "two"])
def test_bench_conversion_scale_must_be_a_whole_number_of_at_least_one(value):
    proc = subprocess.run([sys.executable, "-m", "hpcio.cli.main", "bench", "--conversion-scale", value],
                          capture_output=True, text=True, env=_env(), timeout=60)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1] == (
        f"hpcio bench: error: argument --conversion-scale: expected a whole number of at least 1, got {value!r}")


def test_bench_help_gives_the_conversion_scale_it_uses():
    from hpcio.bench import CONVERSION_SCALE

    proc = subprocess.run([sys.executable, "-m", "hpcio.cli.main", "bench", "--help"],
                          capture_output=True, text=True, env=_env(COLUMNS="400"), timeout=60)
    assert proc.returncode == 0
    assert f"(1: not; default: {CONVERSION_SCALE})" in proc.stdout


@pytest.mark.bench
@pytest.mark.interop
def test_bench_staging_and_conversion_figures(tmp_path, interop_python):
    # --only filters the peers' writers as it filters the readers: name the three kept here
    out, result = _bench(tmp_path, "--only", "hpcio mds", "--only", "mdf convert", "--only", "MDSWriter",
                         "--only", "ShardWriter", "--op", "iterate", "--profile", "text",
                         "--staging", "--conversion", "--conversion-scale", "3", interop_python=interop_python,
                         timeout=900)
    rows = result["pipeline"]
    assert not [r for r in rows if r.get("error")], rows
    staging = [r for r in rows if r["section"] == "staging"]
    assert {r["dataset"] for r in staging} == {"mds"}  # the one dataset kept as a directory
    assert all(r["stage_bytes_per_s"] > 0 and r["cp_bytes_per_s"] > 0 and r["cp_sync_bytes_per_s"] > 0
               and r["stage_fsync_bytes_per_s"] > 0 and r["stage_process_s"] > r["stage_s"]
               and r["stage_fsync_process_s"] > r["stage_fsync_s"] and r["ratio_best"] > 0
               and r["ratio_sync_best"] > 0 and r["runs"] == 7 for r in staging)
    writers = {r["writer"]: r for r in rows if r["section"] == "conversion"}
    # hpcio's pair again on three times the samples (--conversion-scale 3)
    larger = ", 900 samples"
    assert set(writers) == {"hpcio convert (1 rank)", "hpcio convert (2 ranks)", "mdf convert",
                            "streaming MDSWriter", "webdataset ShardWriter",
                            "hpcio convert (1 rank)" + larger, "hpcio convert (2 ranks)" + larger}
    assert {label: r["samples"] for label, r in writers.items()} == {
        label: 900 if label.endswith(larger) else 300 for label in writers}
    for suffix in ("", larger):
        one, two = writers["hpcio convert (1 rank)" + suffix], writers["hpcio convert (2 ranks)" + suffix]
        assert two["scaling_1_to_2"] == one["wall_s"] / two["wall_s"]
        assert two["job_scaling_1_to_2"] == one["job_s"] / two["job_s"]
        assert two["wall_s"] > two["job_s"] > 0 and two["job_best_s"] <= two["job_s"]
        assert two["job_scaling_1_to_2_best"] == one["job_best_s"] / two["job_best_s"]
        # the scaling with both jobs after the same kind of job, beside the overall one
        for after in ("one_rank", "two_ranks"):
            assert one[f"job_after_{after}_s"] > 0 and two[f"job_after_{after}_s"] > 0
            assert two[f"job_scaling_1_to_2_after_{after}"] == one[f"job_after_{after}_s"] / two[f"job_after_{after}_s"]
        assert "scaling_1_to_2" not in one and one["runs"] == two["runs"] == 14  # twice a turn
        for ranks, rec in ((1, one), (2, two)):
            phases = rec["phases_s"]
            assert phases["read"] > 0 and phases["write"] > 0 and phases["publish"] > 0, phases
            assert phases["exchange"] > 0 if ranks == 2 else phases["exchange"] < 0.005, phases
    copy = writers["hpcio convert (2 ranks)"]["memory_copy"]  # measured once, before the conversions
    assert copy["scaling"] == sum(copy["two_bytes_per_s"]) / copy["one_bytes_per_s"] and copy["bytes"] == 64 << 20
    assert "memory_copy" not in writers["hpcio convert (2 ranks)" + larger]
    mdf = writers["mdf convert"]
    assert mdf["hpcio_ratio"] == mdf["wall_s"] / writers["hpcio convert (1 rank)"]["wall_s"]
    assert "hpcio_ratio" not in writers["hpcio convert (1 rank)" + larger]
    assert "job_after_one_rank_s" not in mdf and mdf["runs"] == 7
    md = (out / "results.md").read_text()
    assert "| text | mdf convert | 300 | 1 |" in md
    assert "| text | hpcio convert (2 ranks), 900 samples | 900 | 2 |" in md
    assert "\nMemory copy (text, measured before its conversions; 64 MiB buffers, warm, median copy over a second): " in md
    assert "Where hpcio's job spends its time" in md and "| text | 300 | 2 | " in md and "| text | 900 | 2 | " in md
    assert (tmp_path / "data" / "text-x3" / "parquet" / "data.parquet").is_file()


@pytest.mark.bench
def test_asv_quick_run_has_no_failures(tmp_path):
    asv = shutil.which("asv", path=os.path.dirname(sys.executable)) or shutil.which("asv")
    if asv is None:
        missing = "asv is not installed (pip install 'hpcio[bench]'; make test-bench installs it)"
        if os.environ.get("HPCIO_REQUIRE_BENCH"):
            pytest.fail(missing)
        pytest.skip(missing)
    # asv drops PYTHONPATH from the benchmark processes; ASV_PYTHONPATH is its replacement
    env = _env(HPCIO_ASV_SCALE="0.05", HPCIO_TIERS=f"disk={tmp_path / 'tier'}", HOME=str(tmp_path),
               ASV_PYTHONPATH=str(ROOT))
    conf = ROOT / "asv_bench" / "asv.conf.json"
    machine = subprocess.run([asv, "machine", "--yes", "--config", str(conf)], capture_output=True, text=True,
                             env=env, cwd=ROOT / "asv_bench", timeout=120)
    assert machine.returncode == 0, machine.stderr
    proc = subprocess.run(
        [asv, "run", "--python=same", "--quick", "--show-stderr", "--config", str(conf)],
        capture_output=True, text=True, env=env, cwd=ROOT / "asv_bench", timeout=1800,
    )
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log[-4000:]
    assert "failed" not in log.lower(), log[-4000:]
    assert "time_read" in log and "track_page_cache_read_MBps" in log


def test_touch_counts_every_kind_of_value_as_the_general_rule_does():
    """The exact-type fast paths of touch() count what the general rule counts: sized
    values by length, mappings (dicts or proxies) through their values plus one, anything
    else one."""
    import types
    from collections import OrderedDict

    from hpcio.bench.worker import touch, touch_values

    def rule(v):
        if isinstance(v, (bytes, bytearray, memoryview, str, list, tuple)):
            return len(v)
        if hasattr(v, "keys"):
            return sum(rule(v[k]) for k in v) + 1
        return 1

    class Text(str):
        pass

    nested = {"a": [1, 2], "b": {"c": "xyz", "d": None}}
    values = [
        "héllo", b"ab", bytearray(b"abc"), memoryview(b"abcd"), [1, [2]], (1, 2, 3), 7, 2.5,
        True, None, nested, types.MappingProxyType(nested), OrderedDict(x=b"12"), Text("ab"),
        {1, 2}, 10**30,
    ]
    sample = {f"f{i}": v for i, v in enumerate(values)}
    assert touch_values(values) == sum(rule(v) for v in values) == 46
    assert touch(sample, None) == rule(sample) - 1
    assert touch(sample, ["f0", "f10"]) == 5 + 8


def _resident_pages(path) -> tuple[int, int]:
    """(pages of ``path`` in the page cache, pages of the file), by mincore(2)."""
    import ctypes
    import mmap

    import numpy as np

    libc = ctypes.CDLL(None, use_errno=True)
    with open(path, "rb") as f:
        m = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    pages = -(-len(m) // mmap.PAGESIZE)
    vec = (ctypes.c_ubyte * pages)()
    view = np.frombuffer(m, np.uint8)
    assert libc.mincore(ctypes.c_void_p(view.ctypes.data), ctypes.c_size_t(len(m)), vec) == 0, ctypes.get_errno()
    del view
    m.close()
    return sum(v & 1 for v in vec), pages


def test_memory_copy_scaling_compares_two_processes_copying_at_once_with_one():
    from hpcio.bench.limits import memory_copy_scaling

    copy = memory_copy_scaling(nbytes=1 << 20, seconds=0.05)
    assert copy["bytes"] == 1 << 20 and copy["one_bytes_per_s"] > 0
    assert len(copy["two_bytes_per_s"]) == 2 and min(copy["two_bytes_per_s"]) > 0
    assert copy["scaling"] == sum(copy["two_bytes_per_s"]) / copy["one_bytes_per_s"]


def test_settle_page_cache_reads_every_file_back_unchanged(tmp_path):
    import numpy as np

    from hpcio.bench.limits import settle_page_cache

    rng = np.random.default_rng(5)
    files = {tmp_path / "shard.0.mds": rng.bytes(3 << 20), tmp_path / "sub" / "shard.1.mds": rng.bytes(5000),
             tmp_path / "empty": b""}
    for path, data in files.items():
        path.parent.mkdir(exist_ok=True)
        with open(path, "wb") as f:
            f.write(data)
            os.fsync(f.fileno())  # clean pages, which the kernel can drop
        with open(path, "rb") as f:
            os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
    big = tmp_path / "shard.0.mds"
    if _resident_pages(big)[0] == _resident_pages(big)[1]:
        pytest.skip("this filesystem keeps the file cached after POSIX_FADV_DONTNEED")
    settle_page_cache(str(tmp_path))
    for path, data in files.items():
        if data:  # before reading it here, which would bring it back too
            resident, pages = _resident_pages(path)
            assert resident == pages, path
        assert path.read_bytes() == data


@pytest.mark.bench
def test_peer_writers_store_a_list_of_images(tmp_path):
    # The vlm profile with several images per sample holds a list of binaries: the peers'
    # writers pickle it (MDS's pkl, a WebDataset .pickle member) rather than fail on JSON.
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
        import webdataset as wds
        from streaming import StreamingDataset
    except ImportError as exc:
        from hpcio.testing.environment import missing

        missing("BENCH", f"the peers' writers need streaming and webdataset: {exc}")
    import pickle

    from hpcio.bench.pipeline import _PEER_WRITERS

    images = [[b"\x00\x01", b"xy"], [b"z"], []]
    pq.write_table(pa.table({"id": [0, 1, 2], "caption": ["a", "b", "c"], "images": images}), tmp_path / "d.parquet")
    for name, code in _PEER_WRITERS.items():
        proc = subprocess.run([sys.executable, "-c", code, str(tmp_path / "d.parquet"), str(tmp_path / name)],
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
    ds = StreamingDataset(local=str(tmp_path / "streaming MDSWriter"), shuffle=False, batch_size=1,
                          allow_unsafe_types=True)
    assert [ds[i]["images"] for i in range(3)] == images and ds[1]["caption"] == "b"
    tars = sorted(str(p) for p in (tmp_path / "webdataset ShardWriter").iterdir())
    samples = list(wds.WebDataset(tars, shardshuffle=False))
    assert [pickle.loads(s["images.pickle"]) for s in samples] == images
    assert [s["caption.txt"] for s in samples] == [b"a", b"b", b"c"] and samples[2]["id.json"] == b"2"


def test_stack_rows_gives_the_varlen_bounds_of_the_flattened_step():
    from hpcio.bench.tokens import stack_rows

    rows = [{"tokens": np.array([5, 6, 0, 9, 0, 0]), "position_ids": np.array([0, 1, 2, 0, 1, 0]),
             "cu_seqlens": np.array([0, 3, 5], np.int32), "length": 5},
            {"tokens": np.array([7, 8, 9, 1, 2, 0]), "position_ids": np.arange(6),
             "cu_seqlens": np.array([0, 6], np.int32), "length": 6}]
    step = stack_rows(rows)
    assert step["tokens"].tolist() == [[5, 6, 0, 9, 0, 0], [7, 8, 9, 1, 2, 0]]
    # row 0: documents [0, 3) and [3, 5), its padding [5, 6); row 1: one document, no padding
    assert step["cu_seqlens"].tolist() == [0, 3, 5, 6, 12] and step["cu_seqlens"].dtype == np.int32
    assert step["lengths"].tolist() == [5, 6]
    assert step["position_ids"].shape == (2, 6)


@pytest.mark.bench
def test_bench_packed_llm_reads_the_same_tokens_as_litdata(tmp_path):
    """hpcio's packed pipeline delivers every token of the cache, litdata every token of
    its chunks but each chunk's last partial block; both were made from the same arrays."""
    pytest.importorskip("litdata", reason="litdata is not installed (the bench extra)")
    out, result = _bench(tmp_path, "--only", "hpcio mds", "--op", "iterate", "--profile", "text",
                         "--packed-llm", "--packed-len", "2048", "--packed-rows", "4")
    rows = [r for r in result["pipeline"] if r["section"] == "packed-llm"]
    assert not [r for r in rows if r.get("error")], rows
    by = {(r["system"], r["workers"]): r for r in rows}
    assert set(by) == {("hpcio", 0), ("hpcio", 1), ("hpcio", 2), ("litdata", 0), ("litdata", 1), ("litdata", 2),
                       ("numpy copy (limit)", None)}
    total = rows[0]["tokens_total"]
    assert rows[0]["documents"] == 300 and total > 300 * 100
    for w in (0, 1, 2):
        hp, lit = by["hpcio", w], by["litdata", w]
        assert hp["tokens_per_s"] > 0 and lit["tokens_per_s"] > 0
        assert hp["ratio_to_litdata"] == hp["tokens_per_s"] / lit["tokens_per_s"]
        # litdata's blocks never span its chunks (here one chunk): the last partial block is left
        assert lit["tokens_delivered"] == total // 2048 * 2048 and lit["fill"] == 1.0
    assert by["litdata", 0]["steps"] == -(-(total // 2048) // 4)
    # one consumer: every row of the plan; two: whole rounds, the same token sum when even
    assert by["hpcio", 0]["tokens_delivered"] == by["hpcio", 1]["tokens_delivered"] == total
    assert by["hpcio", 0]["checksum"] == by["hpcio", 1]["checksum"] == rows[0]["checksum_total"]
    assert by["hpcio", 2]["steps"] == by["hpcio", 0]["steps"] // 2 * 2
    assert 0.9 < by["hpcio", 0]["fill"] <= 1.0
    md = (out / "results.md").read_text()
    assert "## Packed LLM pretraining (tokens through a DataLoader)" in md and "| litdata | 2 |" in md
    # the tokens are made once: a second run reuses them, and the cache, without tokenising
    _out, again = _bench(tmp_path, "--only", "hpcio mds", "--op", "iterate", "--profile", "text",
                         "--packed-llm", "--packed-len", "2048", "--packed-rows", "4", "--packed-workers", "0")
    (hp,) = [r for r in again["pipeline"] if r["system"] == "hpcio"]
    assert hp["checksum"] == rows[0]["checksum_total"] and hp["prepare_s"] == by["hpcio", 0]["prepare_s"]
