"""End to end with the shipped formats: JSONL sources into MDS, JINX, WebDataset, Zarr,
HDF5 and Parquet, at 1, 2 and 4 MPI ranks; the outputs are read back by hpcio and by the
reference libraries."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
from convert_helpers import run_command, tree_bytes

import hpcio
from hpcio.errors import SchemaError

INTEROP = os.environ.get("HPCIO_INTEROP_PYTHON", "/root/.cache/hpcio/interop-py312/bin/python")
N = 400


def _doc(i: int) -> dict:
    rng = np.random.default_rng(i)
    words = " ".join(rng.choice(["data", "shard", "rank", "été", "✓", "token"], int(rng.integers(20, 200))))
    return {"id": i, "text": words, "meta": {"lang": "en", "score": round(float(rng.random()), 3)}}


@pytest.fixture(scope="module")
def jsonl_sources(tmp_path_factory):
    d = tmp_path_factory.mktemp("jsonl")
    paths = []
    for f in range(2):
        path = d / f"part{f}.jsonl"
        with open(path, "w") as fh:
            for i in range(f * N // 2, (f + 1) * N // 2):
                fh.write(json.dumps(_doc(i), ensure_ascii=False) + "\n")
        paths.append(str(path))
    return paths


FORMATS = {
    "mds": ["--compression", "sample::zstd"],
    "jinx": ["--compression", "zst"],
    "webdataset": [],
    "zarr": ["--compression", "lz4"],
    "hdf5": ["--compression", "blosc"],
    "parquet": [],
}
# 4 ranks only where the format's writer has more than one kind of shard file to get right
RANK_CASES = [(to, ranks) for to in sorted(FORMATS) for ranks in ((2, 4) if to in ("mds", "jinx") else (2,))]
LAYOUT = ["--ngpus", "2", "--nworkers", "2", "--shard-size", "20000"]


@pytest.fixture(scope="module")
def converted(jsonl_sources, tmp_path_factory):
    """``converted(to)``: the sources converted into format ``to`` by one process."""
    done = {}

    def get(to):
        if to not in done:
            out = tmp_path_factory.mktemp(to) / "one"
            proc = run_command("convert", [*jsonl_sources, out, "--to", to, *FORMATS[to], *LAYOUT, "--json"])
            assert proc.returncode == 0, proc.stderr
            done[to] = (out, json.loads(proc.stdout))
        return done[to]

    return get


@pytest.mark.parametrize("to", sorted(FORMATS))
def test_every_document_arrives_once_with_its_content(converted, to):
    out, summary = converted(to)
    assert summary["num_shards"] % 4 == 0 and summary["num_shards"] >= 8
    assert summary["imbalance"] <= 0.05
    ds = hpcio.open(out)
    assert len(ds) == N
    got = {s["id"]: s for s in ds}
    assert sorted(got) == list(range(N))
    for i in (0, 123, N - 1):
        assert got[i]["text"] == _doc(i)["text"] and dict(got[i]["meta"]) == _doc(i)["meta"]


@pytest.mark.mpi
@pytest.mark.parametrize(("to", "ranks"), RANK_CASES)
def test_ranks_write_the_same_bytes(converted, jsonl_sources, tmp_path, to, ranks):
    out, _ = converted(to)
    proc = run_command("convert", [*jsonl_sources, tmp_path / "many", "--to", to, *FORMATS[to], *LAYOUT,
                                   "--no-progress"], ranks=ranks)
    assert proc.returncode == 0, proc.stderr
    assert tree_bytes(tmp_path / "many") == tree_bytes(out)


@pytest.mark.parametrize("to", sorted(FORMATS))
@pytest.mark.filterwarnings("ignore:compression=.sample..zstd. compresses each sample:UserWarning")
def test_resume_completes_an_interrupted_conversion_byte_for_byte(converted, jsonl_sources, tmp_path, to,
                                                                  monkeypatch):
    from hpcio.convert import driver
    from hpcio.convert.resume import staging_path

    ref, _ = converted(to)
    out = tmp_path / "out"
    options = dict(to=to, compression=FORMATS[to][1] if FORMATS[to] else None, ngpus=2, nworkers=2,
                   shard_size=20000, progress=False)
    # a run killed after writing every shard, before publishing the dataset
    real = driver.publish_dataset
    monkeypatch.setattr(driver, "publish_dataset", lambda *a, **k: (_ for _ in ()).throw(KeyboardInterrupt()))
    with pytest.raises(KeyboardInterrupt):
        hpcio.convert(jsonl_sources, out, **options)
    monkeypatch.setattr(driver, "publish_dataset", real)
    staging = staging_path(out)
    parts_dir = os.path.join(staging, ".hpcio", "parts")
    parts = sorted(os.listdir(parts_dir))
    assert not os.path.exists(out) and len(parts) >= 4
    os.remove(os.path.join(parts_dir, parts[0]))  # a shard whose record never landed
    with open(os.path.join(parts_dir, parts[1])) as f:
        damaged = sorted(json.load(f)["files"])[0]
    with open(os.path.join(staging, damaged), "r+b") as f:  # a shard damaged on disk
        f.truncate(max(0, os.path.getsize(os.path.join(staging, damaged)) // 2))
    summary = hpcio.convert(jsonl_sources, out, resume=True, **options)
    assert summary["shards_written"] == 2 and summary["shards_kept"] == len(parts) - 2
    assert tree_bytes(out) == tree_bytes(ref)


def test_mds_output_reads_in_streaming(converted, tmp_path):
    out, _ = converted("mds")
    code = (
        "import sys, json, hpcio.formats.mds as m; m.register_streaming_reader()\n"
        "from streaming import StreamingDataset\n"
        "ds = StreamingDataset(local=sys.argv[1], shuffle=False, batch_size=1)\n"
        "print(json.dumps(sorted(ds[i]['id'] for i in range(len(ds)))))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code, str(out)], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == list(range(N))


@pytest.mark.interop
def test_jinx_output_reads_in_mldataforge(converted, tmp_path):
    out, _ = converted("jinx")
    if not os.path.exists(INTEROP):
        pytest.skip(f"mldataforge's interpreter {INTEROP} is missing (tools/interop-env.sh)")
    code = (
        "import sys, json\nfrom mldataforge.jinx import JinxDatasetReader\n"
        "ds = JinxDatasetReader(sys.argv[1])\n"
        "print(json.dumps(sorted([ds[i]['id'], ds[i]['text']] for i in range(len(ds)))))\n"
    )
    proc = subprocess.run([INTEROP, "-c", code, str(out)], capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == [[i, _doc(i)["text"]] for i in range(N)]


def test_bad_base64_in_a_jinx_source_is_skipped_and_reported(tmp_path):
    src = tmp_path / "src"
    with hpcio.open_writer(src, format="jinx", shard_size=1 << 30) as w:
        for i in range(20):
            w.write({"id": i, "blob": bytes([i]) * 9})
    shard = src / "shard-00000.jinx"
    raw = shard.read_bytes()
    lines = raw.split(b"\n")
    good = json.dumps(json.loads(lines[4])["blob.raw"]).encode()
    # same length, so the footer's offsets still hold; "v" is not an Ascii85 digit
    lines[4] = lines[4].replace(good, b'"' + b"v" * (len(good) - 2) + b'"')
    shard.write_bytes(b"\n".join(lines))
    summary = hpcio.convert([src], tmp_path / "out", to="mds", num_shards=2, skip_bad=True, progress=False)
    assert summary["bad_samples"] == 1 and summary["samples_written"] == 19
    with open(summary["report"]) as f:
        rec = json.loads(f.read())
    line4 = sum(len(line) + 1 for line in lines[:4])
    assert rec == {"source": str(src), "file": str(shard), "sample": 4, "offset": line4, "stage": "read",
                   "shard": rec["shard"], "error_type": "DecodeError",
                   "error": "value 'blob.raw': invalid base85 character 'v' (at character 0 of 17)"}


def _expected_rows():
    return [[i, _doc(i)["text"], _doc(i)["meta"]] for i in range(N)]


def _run_reader(code: str, out, tmp_path) -> list:
    """Run ``code`` (printing JSON rows on its last line) on ``out`` in a fresh interpreter,
    so only the reference library reads the files."""
    proc = subprocess.run([sys.executable, "-c", code, str(out)], capture_output=True, text=True,
                          cwd=tmp_path, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_webdataset_output_reads_in_webdataset(converted, tmp_path):
    out, summary = converted("webdataset")
    code = (
        "import sys, json, glob, webdataset as wds\n"
        "urls = sorted(glob.glob(sys.argv[1] + '/shard-*.tar'))\n"
        # "id" and "text" are extensions webdataset decodes (int, str), so they are the suffixes
        "ds = wds.WebDataset(urls, shardshuffle=False, empty_check=False).decode()\n"
        "rows = [[s['id'], s['text'], s['meta.json'], s['__key__']] for s in ds]\n"
        "print(json.dumps(rows))\n"
    )
    rows = _run_reader(code, out, tmp_path)
    assert sorted(r[:3] for r in rows) == _expected_rows()
    keys = [r[3] for r in rows]
    assert len(set(keys)) == N and keys[0] == "000000-000000000"
    assert sorted(os.listdir(out)) == [".hpcio", "hashes.json"] + [f"shard-{k:06d}.tar" for k in range(summary["num_shards"])]


def test_zarr_output_reads_in_zarr(converted, tmp_path):
    out, summary = converted("zarr")
    code = (
        "import sys, json, zarr\n"
        "root = zarr.open_group(sys.argv[1], mode='r')\n"
        "rows = []\n"
        "for part in root.attrs['hpcio']['parts']:\n"
        "    g = root[part['name']]\n"
        "    ids = g['id'][:]\n"
        "    cols = {f: (g[f]['offsets'][:], g[f]['data'][:].tobytes()) for f in ('text', 'meta')}\n"
        "    for j in range(len(ids)):\n"
        "        val = {f: o_d[1][int(o_d[0][j]):int(o_d[0][j + 1])].decode() for f, o_d in cols.items()}\n"
        "        rows.append([int(ids[j]), val['text'], json.loads(val['meta'])])\n"
        "print(json.dumps(rows))\n"
    )
    assert sorted(_run_reader(code, out, tmp_path)) == _expected_rows()
    layout = json.loads((out / "zarr.json").read_text())["attributes"]["hpcio"]
    assert [p["name"] for p in layout["parts"]] == [f"part-{k:05d}" for k in range(summary["num_shards"])]
    assert layout["num_samples"] == N


def test_parquet_output_reads_in_pyarrow_and_hashes_json_records_every_file(converted, tmp_path):
    out, summary = converted("parquet")
    names = [f"part-{k:06d}.parquet" for k in range(summary["num_shards"])]
    code = (
        "import sys, json, pyarrow.parquet as pq\n"
        "rows, files = [], {}\n"
        f"for name in {names!r}:\n"
        "    path = sys.argv[1] + '/' + name\n"
        "    rows += [[r['id'], r['text'], json.loads(r['meta'])] for r in pq.read_table(path).to_pylist()]\n"
        "    meta = pq.read_metadata(path)\n"
        "    files[name] = [meta.row_group(g).num_rows for g in range(meta.num_row_groups)]\n"
        "print(json.dumps([rows, files]))\n"
    )
    rows, row_groups = _run_reader(code, out, tmp_path)
    assert sorted(rows) == _expected_rows()
    assert sorted(os.listdir(out)) == [".hpcio", "hashes.json", *names]
    recorded = json.loads((out / "hashes.json").read_text())["files"]
    assert sorted(recorded) == names
    for name in names:
        assert recorded[name]["bytes"] == os.path.getsize(out / name)
        assert recorded[name]["row_groups"] == row_groups[name]
        assert recorded[name]["samples"] == sum(row_groups[name])
    assert hpcio.open(out).reader.layouts is not None  # opened from hashes.json, no footer read


def test_hdf5_output_reads_in_h5py(converted, tmp_path):
    out, summary = converted("hdf5")
    code = (
        "import sys, json, glob, h5py, hdf5plugin\n"
        "rows = []\n"
        "for path in sorted(glob.glob(sys.argv[1] + '/shard-*.h5')):\n"
        "    with h5py.File(path, 'r') as f:\n"
        "        ids = f['id'][:]\n"
        "        cols = {k: (f[k]['offsets'][:], f[k]['data'][:].tobytes()) for k in ('text', 'meta')}\n"
        "        for j in range(len(ids)):\n"
        "            val = {k: o_d[1][int(o_d[0][j]):int(o_d[0][j + 1])].decode() for k, o_d in cols.items()}\n"
        "            rows.append([int(ids[j]), val['text'], json.loads(val['meta'])])\n"
        "print(json.dumps(rows))\n"
    )
    assert sorted(_run_reader(code, out, tmp_path)) == _expected_rows()
    assert sorted(os.listdir(out)) == [".hpcio", "hashes.json"] + [f"shard-{k:06d}.h5" for k in range(summary["num_shards"])]


@pytest.mark.parametrize(("to", "where"), [("zarr", "part-00001"), ("hdf5", "shard-000001.h5"),
                                           ("parquet", "part-000001.parquet")])
def test_shards_whose_fields_disagree_publish_nothing(tmp_path, to, where):
    src = tmp_path / "src"
    src.mkdir()
    # shard 0 gets the first file (int ids), shard 1 the second (str ids)
    for f, make_id in enumerate((int, str)):
        with open(src / f"part{f}.jsonl", "w") as fh:
            for i in range(10):
                fh.write(json.dumps({"id": make_id(i), "text": "x" * i}) + "\n")
    dst = tmp_path / "out"
    with pytest.raises(SchemaError, match=r"field 'id' is str here but int in the shards before; "
                                          r"name its kind with the writer option schema="):
        hpcio.convert(sorted(map(str, src.iterdir())), dst, to=to, num_shards=2, order="source",
                      progress=False)
    assert not dst.exists()
    staged = tmp_path / ".out.hpcio-partial"
    assert (staged / where).exists() and not (staged / "zarr.json").exists()
