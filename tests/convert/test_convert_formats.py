"""End to end with the shipped formats: JSONL sources into MDS and JINX, at 1, 2 and 4
MPI ranks; the outputs are read back by hpcio and by the reference libraries."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys

import numpy as np
import pytest
from convert_helpers import run_command, tree_bytes

import hpcio

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
}
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
@pytest.mark.parametrize("ranks", [2, 4])
@pytest.mark.parametrize("to", sorted(FORMATS))
def test_ranks_write_the_same_bytes(converted, jsonl_sources, tmp_path, to, ranks):
    out, _ = converted(to)
    proc = run_command("convert", [*jsonl_sources, tmp_path / "many", "--to", to, *FORMATS[to], *LAYOUT,
                                   "--no-progress"], ranks=ranks)
    assert proc.returncode == 0, proc.stderr
    assert tree_bytes(tmp_path / "many") == tree_bytes(out)


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
