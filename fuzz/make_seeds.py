"""Write the seed corpora of the fuzz targets from real shards: the libFuzzer targets'
(fuzz/corpus/TARGET/) and the Python parsers' atheris targets (fuzz/python/corpus/TARGET/).

Small MDS (plain, ``sample::zstd``, ``sample::blosc2``), JINX (with a zstd index and a
BINX sidecar), WebDataset and JSON-lines datasets are written with hpcio's writers, then
cut into the inputs each target reads: its parameter bytes (see fuzz/targets/*.c)
followed by the shard bytes it parses; a Python target gets the files it reads, packed
as fuzz/python/targets.py says.  Run from the repository root:
``python fuzz/make_seeds.py [c] [python]`` (replaces the corpora named, default both).
"""

import decimal
import hashlib
import io
import json
import shutil
import struct
import sys
import tarfile
import tempfile
import warnings
from pathlib import Path

import numpy as np

import hpcio
from hpcio._core import _jinx
from hpcio.staging import manifest

FUZZ = Path(__file__).resolve().parent
CORPUS = FUZZ / "corpus"
sys.path.insert(0, str(FUZZ / "python"))
import targets  # noqa: E402  (fuzz/python/targets.py: how a Python target packs its files)

COLUMNS = {"id": "int", "text": "str", "meta": "json", "blob": "bytes", "score": "float32"}


def sample(i):
    return {"id": i, "text": "é€" * (i % 4) + "txt", "meta": {"tags": ["t"] * (i % 3), "n": i / 2},
            "blob": bytes(range(i % 7)) * 3, "score": i / 4}


def write_mds(root, compression):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with hpcio.open_writer(root, format="mds", columns=COLUMNS, compression=compression) as w:
            for i in range(6):
                w.write(sample(i))
    index = json.loads((root / "index.json").read_text())["shards"][0]
    return (root / index["raw_data"]["basename"]).read_bytes(), index


def mds_records(shard):
    n = struct.unpack_from("<I", shard)[0]
    offsets = struct.unpack_from(f"<{n + 1}I", shard, 4)
    return [shard[offsets[j]:offsets[j + 1]] for j in range(n)]


def mds_value(record, sizes, column):
    """Column ``column`` of an MDS record (u32 sizes of the variable columns first)."""
    nvar = sum(s is None for s in sizes)
    var = struct.unpack_from(f"<{nvar}I", record)
    pos, k = 4 * nvar, 0
    for c, size in enumerate(sizes):
        if size is None:
            size, k = var[k], k + 1
        if c == column:
            return record[pos:pos + size]
        pos += size
    raise IndexError(column)


def frames_seed(frames):
    """Frames back to back, cut where they meet (the 0x80 mode of fuzz/targets/frames.h)."""
    frames = frames[:4]
    head = 0x80 | (len(frames) - 1)
    cuts = b"".join(struct.pack("<H", len(f)) for f in frames) + b"\0\0" * len(frames)
    return bytes([head]) + cuts + b"".join(frames)


def jinx_files(root):
    root.mkdir()
    with hpcio.open_writer(root / "plain.jinx", format="jinx") as w:
        for i in range(4):
            w.write({**sample(i), "blob": bytes(range(0, 250, 7)) * i + bytes(4 * i)})
    with hpcio.open_writer(root / "packed.jinx", format="jinx", compression="zstd",
                           index_compression="zstd", compress_threshold=8,
                           binary_threshold=16) as w:
        for i in range(4):
            w.write({**sample(i), "blob": bytes(range(40)) * i})
    return sorted(root.glob("*.jinx")), sorted(root.glob("*.binx"))


def a85_values(path):
    """The Ascii85 texts of a JINX file (encoding a85): string values under a suffixed key."""
    found = []

    def walk(obj):
        if isinstance(obj, dict):
            for key, value in obj.items():
                if isinstance(value, str) and "." in key:
                    found.append(value.encode())
                walk(value)
        elif isinstance(obj, list):
            for value in obj:
                walk(value)

    for line in path.read_bytes().splitlines()[:-1]:
        walk(json.loads(line))
    return found


def tar_files(root):
    with hpcio.open_writer(root / "wds", format="webdataset", max_count=3) as w:
        for i in range(3):
            w.write({"__key__": f"sample{i:03d}", "txt": f"text {i}", "json": {"i": i}})
    shards = sorted((root / "wds").glob("*.tar"))
    long = "d/" * 60 + "member.txt"
    for name, fmt in (("gnu", tarfile.GNU_FORMAT), ("pax", tarfile.PAX_FORMAT)):
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w", format=fmt) as tar:
            for member, data in ((long, b"long name"), ("s/a.cls", b"7")):
                info = tarfile.TarInfo(member)
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
        (root / f"{name}.tar").write_bytes(buf.getvalue())
        shards.append(root / f"{name}.tar")
    return [p.read_bytes() for p in shards]


def seeds(tmp):
    out = {name: [] for name in ("a85", "blosc2", "columns", "jinx_footer", "json", "offsets",
                                 "readplan", "tar", "zstd")}
    plain, index = write_mds(tmp / "plain", None)
    sizes = index["column_sizes"]
    names = index["column_names"]
    records = mds_records(plain)
    meta = names.index("meta")
    out["json"].append(b"\n".join(mds_value(r, sizes, meta) for r in records))
    with hpcio.open_writer(tmp / "data.jsonl", format="jsonl") as w:
        for i in range(4):
            w.write({k: v for k, v in sample(i).items() if k != "blob"})
    out["json"] += [p.read_bytes() for p in sorted(tmp.glob("*.jsonl"))]

    fixed = bytes(0x80 if s is None else s for s in sizes)
    sel = bytes([len(sizes)] + list(range(len(sizes))))
    lens = bytes([len(records[:6])] + [len(r) for r in records[:6]])
    out["columns"].append(bytes([len(sizes)]) + fixed + sel + lens + b"".join(records[:6]))

    out["offsets"].append(bytes([0, 3]) + struct.pack("<3H", 0, 2, 5) + bytes([2, 3, 3, 2, 1, 4]) + plain)
    n = struct.unpack_from("<I", plain)[0]
    offsets = struct.unpack_from(f"<{n + 1}I", plain, 4)
    extents = b"".join(bytes([0]) + struct.pack("<H", offsets[j]) + bytes([(offsets[j + 1] - offsets[j]) // 4])
                       + struct.pack("<H", 64 * j) for j in range(n))
    out["readplan"].append(bytes([n]) + struct.pack("<H", 2048) + bytes([4]) + struct.pack("<H", 0)
                           + bytes([2]) + extents + plain)

    for compression, target in (("sample::zstd", "zstd"), ("sample::blosc2", "blosc2")):
        shard, _ = write_mds(tmp / target, compression)
        frames = mds_records(shard)
        out[target] += [frames_seed(frames[:1]), frames_seed(frames[1:4])]

    jinx, binx = jinx_files(tmp / "jinx")
    for path in jinx:
        data = path.read_bytes()
        out["jinx_footer"].append(data)
        out["a85"] += a85_values(path)[:3]
        fo, _ = _jinx.locate_footer(data)
        table = struct.pack("<Q", data.count(b"\n") - 1) + data[:fo]
        out["offsets"].append(bytes([1, 1]) + struct.pack("<H", 1) + bytes([1, 0]) + table)
    for path in binx:
        frames, data = [], path.read_bytes()
        out["zstd"].append(frames_seed([data]))
    out["tar"] += [bytes([0, 1]) + struct.pack("<H", 64) + t for t in tar_files(tmp)]
    return out


def packed(top, names):
    """The input of a Python target reading ``names`` under ``top`` (absent files left
    empty, trailing ones dropped)."""
    contents = [(top / name).read_bytes() if (top / name).exists() else b"" for name in names]
    while contents and not contents[-1]:
        contents.pop()
    return targets.join_files(contents)


def rich_sample(i):
    return {**sample(i), "arr": np.arange(i + 1, dtype=np.int16).reshape(1, -1), "label": i % 3}


def mds_encodings_seed(top):
    """An MDS shard with the encodings the plain seeds lack: numbers as text, images,
    typed arrays, lists of bytes."""
    from PIL import Image

    columns = {"si": "str_int", "sf": "str_float", "sd": "str_decimal", "jpg": "jpeg", "png": "png",
               "half": "float16", "big": "uint64", "arr": "ndarray:int16:2", "parts": "list[bytes]"}
    with hpcio.open_writer(top, format="mds", columns=columns) as w:
        for i in range(2):
            img = Image.new("RGB", (4, 4), (40 * i, 80, 120))
            w.write({"si": i, "sf": i / 4, "sd": decimal.Decimal(i) / 8, "jpg": img, "png": img, "half": i / 2,
                     "big": 2**63 + i, "arr": np.array([i, -i], np.int16), "parts": [b"a" * i, b"b"]})
    return packed(top, targets.TARGETS["mds"].files)


def python_seeds(tmp):
    """The inputs of the atheris targets (fuzz/python/targets.py), one per real dataset."""
    out = {name: [] for name in targets.TARGETS}
    files = targets.TARGETS

    for n, opts in enumerate(({}, {"encoding": "b64"}, {"encoding": "hex"},
                              {"compression": "zstd", "index_compression": "zstd", "compress_threshold": 8,
                               "binary_threshold": 16})):
        top = tmp / f"jinx{n}"
        top.mkdir()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # hex: mldataforge could not read the index
            with hpcio.open_writer(top / "data.jinx", format="jinx", **opts) as w:
                for i in range(3):
                    w.write(rich_sample(i))
        out["jinx"].append(packed(top, files["jinx"].files))

    mds_columns = {**COLUMNS, "arr": "ndarray", "label": "int8"}
    for n, opts in enumerate(({}, {"compression": "sample::zstd"}, {"compression": "zstd"})):
        top = tmp / f"mds{n}"
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with hpcio.open_writer(top, format="mds", columns=mds_columns, **opts) as w:
                for i in range(3):
                    w.write(rich_sample(i))
        out["mds"].append(packed(top, files["mds"].files))
    out["mds"].append(mds_encodings_seed(tmp / "mds-encodings"))

    tar_fields = ("id", "text", "meta", "arr", "label")  # a tar member costs 1 KiB at least
    for fmt, count in (("webdataset", 2), ("msgpack", 3), ("zarr", 3)):
        top = tmp / fmt
        with hpcio.open_writer(top, format=fmt) as w:
            for i in range(count):
                if fmt == "zarr":
                    w.write({"id": i, "text": "t" * i, "vec": np.full(3, i / 2, np.float32)})
                else:
                    w.write({k: v for k, v in rich_sample(i).items() if fmt != "webdataset" or k in tar_fields})
        out[fmt].append(packed(top, files[fmt].files))
    # the tar without its padding to 10 KiB: the members, then the two zero blocks
    tar = out["webdataset"][0].rstrip(b"\0")
    out["webdataset"][0] = tar + bytes(-len(tar) % 512 + 1024)

    (tmp / "jsonl").mkdir()
    with hpcio.open_writer(tmp / "jsonl" / "data.jsonl", format="jsonl") as w:
        for i in range(3):
            w.write({k: v for k, v in sample(i).items() if k != "blob"})
    out["jsonl"].append(packed(tmp / "jsonl", files["jsonl"].files))

    for arr in (np.arange(5, dtype="<i2"), np.ones((2, 3), dtype=">f4", order="F"), np.array(["ab", "c"])):
        buf = io.BytesIO()
        np.save(buf, arr, allow_pickle=False)
        out["npy"].append(buf.getvalue())

    staged = tmp / "staged"
    staged.mkdir()
    record = manifest.FileRecord("a/shard.00000.mds", 301, manifest.Digest("xxh3_64", "c91ac5dbf83c05be"), 17)
    manifest.write_manifest(staged, manifest.Manifest(
        "/src/data", [record], created="2026-01-01T00:00:00Z", host="node1", job_id="42",
        links=[manifest.LinkRecord("a/latest", "shard.00000.mds")]), ".tmp", durable=False)
    journal = manifest.Journal(staged, 0, durable=False)
    journal.append(record)
    journal.close()
    out["manifest"].append(packed(staged, files["manifest"].files))
    return out


def write_corpus(root, found):
    for target, inputs in found.items():
        directory = root / target
        shutil.rmtree(directory, ignore_errors=True)
        directory.mkdir(parents=True)
        for data in inputs:
            (directory / hashlib.sha1(data).hexdigest()).write_bytes(data)
        print(f"{target}: {len(inputs)} seeds, {sum(map(len, inputs))} bytes")


def main(argv):
    which = set(argv[1:]) or {"c", "python"}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        if "c" in which:
            (tmp / "c").mkdir()
            write_corpus(CORPUS, seeds(tmp / "c"))
        if "python" in which:
            (tmp / "py").mkdir()
            write_corpus(FUZZ / "python" / "corpus", python_seeds(tmp / "py"))


if __name__ == "__main__":
    sys.exit(main(sys.argv))
