"""The lineage record a conversion leaves in ``.hpcio/`` and ``hpcio locate``: every
converted sample names the source line, row or tar member it came from."""

from __future__ import annotations

import json
import os
import warnings

import numpy as np
import pytest
from convert_helpers import run_command, tree_bytes

import hpcio
from hpcio.convert.resume import staging_path
from hpcio.lineage import load_lineage

N = 90


def drop_sevens(sample: dict) -> bool:
    """A ``--filter``: leaves out the samples whose id ends in 7."""
    return sample["id"] % 10 != 7


@pytest.fixture
def jsonl(tmp_path) -> str:
    """A JSON Lines source with blank lines among its samples, which the reader skips
    and a text editor counts."""
    path = tmp_path / "raw.jsonl"
    with open(path, "w") as f:
        for i in range(N):
            f.write(json.dumps({"id": i, "text": "w" * (i % 13)}) + "\n")
            if i % 11 == 0:
                f.write("\n")
    return str(path)


def _lines(path) -> list[str]:
    with open(path, encoding="utf-8") as f:
        return f.read().split("\n")


def _check_jsonl_lines(dataset, source):
    lines = _lines(source)
    ds = hpcio.open(dataset)
    for i in range(len(ds)):
        where = hpcio.locate(dataset, i)
        assert where.source == source and where.source_format == "jsonl"
        assert json.loads(lines[where.source_place.line - 1]) == dict(ds[i])
        with open(source, "rb") as f:
            f.seek(where.source_place.start)
            assert json.loads(f.read(where.source_place.stop - where.source_place.start)) == dict(ds[i])
    return ds


@pytest.mark.parametrize("order", ["seeded", "source"])
def test_locate_names_the_jsonl_line_of_every_sample(jsonl, tmp_path, order):
    out = tmp_path / "out"
    summary = hpcio.convert(jsonl, out, to="mds", num_shards=4, order=order, filter=drop_sevens, skip=3,
                            take=80, progress=False)
    assert summary["samples_written"] == 72
    ds = _check_jsonl_lines(out, jsonl)
    assert sorted(s["id"] for s in ds) == [i for i in range(3, 83) if i % 10 != 7]
    record = load_lineage(out).record
    assert record["dropped"] == {"file": "lineage-dropped.i64", "runs": 8, "samples": 8,
                                 "xxh3_64": record["dropped"]["xxh3_64"]}
    assert record["plan"]["first"] == 3 and record["plan"]["num_samples"] == 80
    assert sum(record["shards"]["samples"]) == 72


def test_locate_on_the_command_line(jsonl, tmp_path):
    out = tmp_path / "out"
    assert run_command("convert", [jsonl, out, "--to", "mds", "--num-shards", "2"]).returncode == 0
    proc = run_command("locate", [out, "-1", "--json"])
    assert proc.returncode == 0, proc.stderr
    where = json.loads(proc.stdout)
    assert where["index"] == N - 1 and where["source"] == jsonl
    last = dict(hpcio.open(out)[N - 1])
    assert json.loads(_lines(jsonl)[where["source_place"]["line"] - 1]) == last
    shard = where["place"]["file"]
    assert os.path.dirname(shard) == str(out) and 0 < where["place"]["start"] < where["place"]["stop"]
    proc = run_command("locate", [out, "5"])
    assert proc.returncode == 0, proc.stderr
    table = dict(line.split(None, 1) for line in proc.stdout.splitlines() if not line.startswith(("plan", "source ")))
    assert table["dataset"] == f"{out} (mds)" and table["sample"] == "5"
    assert json.loads(_lines(jsonl)[int(table["line"]) - 1]) == dict(hpcio.open(out)[5])


def test_locate_names_the_parquet_row(tmp_path):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    src = tmp_path / "src"
    src.mkdir()
    for f in range(2):
        pq.write_table(pa.table({"id": list(range(f * 40, f * 40 + 40)), "text": [f"t{i}" for i in range(40)]}),
                       src / f"part-{f}.parquet", row_group_size=16)
    out = tmp_path / "out"
    hpcio.convert(str(src), out, to="jinx", num_shards=3, progress=False)
    ds = hpcio.open(out)
    for i in range(len(ds)):
        where = hpcio.locate(out, i)
        row = pq.read_table(where.source_place.file).slice(where.source_place.row, 1).to_pylist()[0]
        assert row == dict(ds[i])
        assert where.place.line is not None and where.place.start < where.place.stop


def test_locate_names_the_tar_members(tmp_path):
    wds = tmp_path / "wds"
    with hpcio.open_writer(wds, format="webdataset", max_count=7) as w:
        for i in range(30):
            w.write({"id": i, "text": f"caption {i}"})  # members <key>.id and <key>.text
    out = tmp_path / "out"
    hpcio.convert(str(wds), out, to="mds", num_shards=3, progress=False)
    ds = hpcio.open(out)
    import tarfile

    for i in range(len(ds)):
        where = hpcio.locate(out, i)
        there = where.source_place
        with tarfile.open(there.file) as tar:
            members = {m.name: m for m in tar.getmembers()}
            assert set(there.members) <= set(members)
            got = {name.split(".", 1)[1]: tar.extractfile(members[name]).read() for name in there.members}
        assert got["text"].decode() == ds[i]["text"] == f"caption {ds[i]['id']}"
        with open(there.file, "rb") as f:  # the range holds exactly those members
            f.seek(there.start)
            import io

            part = tarfile.open(fileobj=io.BytesIO(f.read(there.stop - there.start)))
            assert tuple(m.name for m in part.getmembers()) == there.members


def test_locate_names_the_messagepack_object(tmp_path):
    src = tmp_path / "mp"
    with hpcio.open_writer(src, format="msgpack", max_count=12) as w:
        for i in range(40):
            w.write({"id": i})
    out = tmp_path / "out"
    hpcio.convert(str(src), out, to="mds", num_shards=2, progress=False)
    ds = hpcio.open(out)
    for i in range(len(ds)):
        where = hpcio.locate(out, i)
        assert hpcio.open(where.source_place.file)[where.source_place.row] == dict(ds[i])


def test_shard_runs_name_every_sample_of_a_shard(tmp_path):
    paths = []
    for f in range(3):
        path = tmp_path / f"part-{f}.jsonl"
        path.write_text("".join(json.dumps({"id": f * 20 + i}) + "\n" for i in range(20)))
        paths.append(str(path))
    out = tmp_path / "out"
    hpcio.convert(paths, out, to="mds", num_shards=2, order="source", filter=drop_sevens, progress=False)
    lineage = load_lineage(out)
    ds = hpcio.open(out)
    ids = [f * 20 + s for k in range(2) for f, lo, hi in lineage.shard_runs(k) for s in range(lo, hi)]
    assert ids == [s["id"] for s in ds]
    assert lineage.shard_runs(0)[:2] == [(0, 0, 7), (0, 8, 17)]


def test_a_selection_is_kept_beside_the_record(jsonl, tmp_path):
    selection = np.array([80, 3, 4, 5, 41, 12, 60, 61], np.int64)
    out = tmp_path / "out"
    hpcio.convert(jsonl, out, to="mds", num_shards=2, selection=selection, progress=False)
    record = load_lineage(out).record
    assert record["plan"]["selection"]["count"] == 8
    assert np.fromfile(out / ".hpcio" / "lineage-selection.i64", "<i8").tolist() == selection.tolist()
    ds = _check_jsonl_lines(out, jsonl)
    assert sorted(s["id"] for s in ds) == sorted(selection.tolist())


def test_record_fields(jsonl, tmp_path):
    out = tmp_path / "out"
    hpcio.convert(jsonl, out, to="mds", num_shards=2, seed=5, compression="zstd", progress=False)
    record = load_lineage(out).record
    assert record["lineage_version"] == 1 and record["hpcio_version"] == hpcio.__version__
    assert record["format"] == "mds" and record["inputs"] == [jsonl]
    (source,) = record["sources"]
    st = os.stat(jsonl)
    from hpcio._hashing import file_digest

    assert source == {"path": jsonl, "resolved": os.path.realpath(jsonl), "format": "jsonl", "nbytes": st.st_size,
                      "mtime_ns": st.st_mtime_ns, "samples": N, "first_id": 0, "xxh3_64": file_digest(jsonl)}
    assert record["source_digests"] == "xxh3_64"
    assert record["options"]["writer_options"] == {"compression": "zstd"}
    assert record["options"]["seed"] == 5 and record["plan"]["seed"] == 5
    assert record["plan"]["bounds"][0] == 0 and record["plan"]["bounds"][-1] == N
    assert record["dropped"] == {"file": None, "runs": 0, "samples": 0, "xxh3_64": None}
    assert not os.path.exists(out / ".hpcio" / "lineage-dropped.i64")
    # a shard compressed whole: the range is in its decompressed bytes
    assert hpcio.locate(out, 0).place.note.endswith(", in the shard decompressed (the file is zstd-compressed whole)")


def test_sources_over_the_digest_limit_are_recorded_without_digests(jsonl, tmp_path, monkeypatch):
    monkeypatch.setenv("HPCIO_LINEAGE_DIGEST_BYTES", "100")
    hpcio.convert(jsonl, tmp_path / "out", to="mds", num_shards=2, progress=False)
    record = load_lineage(tmp_path / "out").record
    assert record["sources"][0]["xxh3_64"] is None
    assert record["source_digests"] == "none: the sources exceed $HPCIO_LINEAGE_DIGEST_BYTES (100 bytes)"


def test_reconversion_and_resume_keep_the_record(jsonl, tmp_path):
    options = dict(to="mds", num_shards=4, filter=drop_sevens, progress=False)
    ref, again, out = tmp_path / "ref", tmp_path / "again", tmp_path / "out"
    hpcio.convert(jsonl, ref, **options)
    hpcio.convert(jsonl, again, **options)
    assert tree_bytes(again / ".hpcio") == tree_bytes(ref / ".hpcio")
    staging = staging_path(out)
    with pytest.MonkeyPatch.context() as mp:
        from hpcio.convert import driver

        mp.setattr(driver, "publish_dataset", lambda *a, **k: (_ for _ in ()).throw(KeyboardInterrupt()))
        with pytest.raises(KeyboardInterrupt):
            hpcio.convert(jsonl, out, **options)
    os.remove(os.path.join(staging, ".hpcio", "parts", "shard-000001.json"))
    summary = hpcio.convert(jsonl, out, resume=True, **options)
    assert (summary["shards_kept"], summary["shards_written"]) == (3, 1)
    assert tree_bytes(out) == tree_bytes(ref)
    _check_jsonl_lines(out, jsonl)


@pytest.mark.mpi
def test_the_record_is_the_same_at_one_and_two_ranks(jsonl, tmp_path):
    args = ["--to", "mds", "--num-shards", "4", "--filter", "test_lineage:drop_sevens"]
    one = run_command("convert", [jsonl, tmp_path / "one", *args])
    two = run_command("convert", [jsonl, tmp_path / "two", *args], ranks=2)
    assert one.returncode == 0, one.stderr
    assert two.returncode == 0, two.stderr
    assert tree_bytes(tmp_path / "two" / ".hpcio") == tree_bytes(tmp_path / "one" / ".hpcio")
    assert set(tree_bytes(tmp_path / "one" / ".hpcio")) == {"lineage.json", "lineage-dropped.i64"}
    _check_jsonl_lines(tmp_path / "two", jsonl)


def test_staging_carries_the_record(jsonl, tmp_path):
    out = tmp_path / "out"
    hpcio.convert(jsonl, out, to="mds", num_shards=2, progress=False)
    hpcio.stage(str(out), str(tmp_path / "staged"))
    assert tree_bytes(tmp_path / "staged" / ".hpcio") == tree_bytes(out / ".hpcio")
    assert hpcio.locate(tmp_path / "staged", 3).source_place == hpcio.locate(out, 3).source_place


def test_a_zarr_store_lists_its_members_without_warnings(jsonl, tmp_path):
    """zarr-python warns about every entry of a group's directory that is not a Zarr node:
    in a Zarr store the record is the group ``.hpcio``, its sidecars arrays."""
    zarr = pytest.importorskip("zarr")
    out = tmp_path / "out"
    selection = np.array([80, 3, 4, 5, 41, 12, 60, 61, 17, 27], np.int64)
    hpcio.convert(jsonl, out, to="zarr", num_shards=3, filter=drop_sevens, selection=selection,
                  progress=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        root = zarr.open_group(out, mode="r")
        assert sorted(root.keys()) == [".hpcio", "part-00000", "part-00001", "part-00002"]
        assert sorted(name for name, _ in root.members(max_depth=None) if name.startswith(".hpcio")) == [
            ".hpcio", ".hpcio/lineage-dropped", ".hpcio/lineage-selection"]
        assert [name for name, _ in root.arrays()] == []
        lineage = root[".hpcio"]
        assert lineage.attrs["hpcio"]["lineage"]["format"] == "zarr"
        assert lineage["lineage-selection"][:].tolist() == selection.tolist()
        assert lineage["lineage-dropped"][:].tolist() == [[17, 18], [27, 28]]
    assert sorted(os.listdir(out / ".hpcio")) == ["lineage-dropped", "lineage-selection", "zarr.json"]
    ds = _check_jsonl_lines(out, jsonl)
    assert sorted(s["id"] for s in ds) == sorted(set(selection.tolist()) - {17, 27})
    proc = run_command("verify", [out])
    assert proc.returncode == 0, proc.stderr
    hpcio.stage(str(out), str(tmp_path / "staged"))
    assert tree_bytes(tmp_path / "staged" / ".hpcio") == tree_bytes(out / ".hpcio")
    assert hpcio.locate(tmp_path / "staged", 3).source_place == hpcio.locate(out, 3).source_place


def test_index_out_of_range(jsonl, tmp_path):
    out = tmp_path / "out"
    hpcio.convert(jsonl, out, to="mds", num_shards=2, progress=False)
    with pytest.raises(hpcio.IndexOutOfRangeError) as info:
        hpcio.locate(out, N)
    assert str(info.value) == f"sample {N} is out of range: the dataset holds {N} samples (indexes -{N} to {N - 1}) ({out})"
    proc = run_command("locate", [out, str(-N - 1)])
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr == (f"hpcio: error: sample {-N - 1} is out of range: the dataset holds {N} samples "
                           f"(indexes -{N} to {N - 1}) ({out})\n")


NO_LINEAGE = ("no lineage record (.hpcio/lineage.json): hpcio writes one when it converts a dataset, "
              "so this one was written otherwise or before hpcio kept lineage")


def test_a_dataset_without_lineage(tmp_path):
    out = tmp_path / "written"
    with hpcio.open_writer(out, format="mds") as w:
        for i in range(5):
            w.write({"id": i})
    with pytest.raises(hpcio.LineageNotFoundError) as info:
        load_lineage(out)
    assert str(info.value) == f"{NO_LINEAGE} ({out})"
    assert isinstance(info.value, FileNotFoundError) and isinstance(info.value, hpcio.HpcioError)
    assert hpcio.lineage.LineageNotFoundError is hpcio.LineageNotFoundError
    where = hpcio.locate(out, 2)
    assert where.source is None and where.note == f"{NO_LINEAGE} ({out})"
    assert where.place.file.endswith(".mds") and where.place.start < where.place.stop
    proc = run_command("locate", [out, "2"])
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[-1].split(None, 1) == ["source", f"unknown: {NO_LINEAGE} ({out})"]


def test_a_changed_source_is_not_read(jsonl, tmp_path):
    out = tmp_path / "out"
    hpcio.convert(jsonl, out, to="mds", num_shards=2, progress=False)
    with open(jsonl, "a") as f:
        f.write('{"id": 1000}\n')
    where = hpcio.locate(out, 0)
    assert where.source == jsonl and where.source_sample is not None and where.source_place is None
    assert where.note.startswith("the source changed since the conversion (")
