"""Benchmark datasets: the demo profiles written once in every format compared.

Every format holds the demo samples as generated: a ``vlm`` sample's ``images`` is a
list of 1-4 JPEGs, an MDS ``list[bytes]`` column (streaming's ``list[jpeg]`` would make
it decode the images and hand back PIL objects, which no other reader does; the peers
read ``list[bytes]`` once hpcio's encodings are registered with streaming).
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass, field

from .. import demo
from .limits import dataset_files

__all__ = ["BenchDataset", "prepare", "META_FIELDS", "STREAMING_COLUMNS", "VLM_COLUMNS"]

# The fields "iterate-meta" touches: everything but the bulky payload.
META_FIELDS = {"text": ["id", "meta"], "vlm": ["id", "messages"]}
# The MDS columns of vlm samples (the demo's and the cold bench's synthetic ones).
VLM_COLUMNS = {"id": "str", "messages": "json", "images": "list[bytes]"}


@dataclass
class BenchDataset:
    """One dataset on disk in one format/configuration."""

    name: str  # e.g. "mds", "jinx-zst-bin"
    format: str  # the file format, for peers: mds, jinx, parquet, jsonl, webdataset
    path: str
    samples: int
    options: dict = field(default_factory=dict)  # writer options used
    profile: str = ""  # the demo profile of the samples

    @property
    def bytes(self) -> int:
        return sum(os.path.getsize(f) for f in dataset_files(self.path))


# name -> (hpcio format, writer options).  MDS columns are given so every reader sees the
# same encodings; JINX options follow mldataforge's names.
def _configs(profile: str) -> dict:
    if profile == "vlm":
        columns = VLM_COLUMNS
    else:
        columns = {"id": "int", "text": "str", "meta": "json"}
    configs = {
        "mds": ("mds", {"columns": columns}),
        "mds-sample-zstd": ("mds", {"columns": columns, "compression": "sample::zstd"}),
        "jinx": ("jinx", {}),
        "jinx-zst-bin": (
            "jinx",
            {"compression": "zst", "binary_threshold": 256, "index_compression": None},
        ),
        "webdataset": ("webdataset", {}),
    }
    if profile == "vlm":
        # images in the sidecar, text uncompressed: the metadata lines hold plain JSON
        # (text samples have no binary values, so there it would repeat "jinx")
        configs["jinx-bin"] = ("jinx", {"binary_threshold": 256, "index_compression": None})
    return configs


def prepare(profile: str, n: int, root: str, seed: int = 0, formats=None, log=print) -> list[BenchDataset]:
    """Write ``n`` demo samples of ``profile`` under ``root`` in every configuration.

    Existing datasets with a matching ``bench.json`` stamp are reused, so repeated runs
    measure reading only.
    """
    import hpcio

    os.makedirs(root, exist_ok=True)
    stamp_path = os.path.join(root, "bench.json")
    stamp = {"profile": profile, "n": n, "seed": seed, "hpcio": hpcio.__version__,
             "parquet_row_group_rows": parquet_row_group_rows(profile)}
    reuse = False
    if os.path.exists(stamp_path):
        with open(stamp_path) as f:
            reuse = json.load(f) == stamp
    if not reuse:
        for entry in os.listdir(root):
            target = os.path.join(root, entry)
            shutil.rmtree(target) if os.path.isdir(target) else os.remove(target)
    samples = None
    out = []
    for name, (fmt, options) in _configs(profile).items():
        if formats is not None and name not in formats:
            continue
        path = os.path.join(root, name)
        try:
            hpcio.get_format(fmt)
        except (hpcio.UnknownFormatError, ImportError) as exc:
            log(f"skipping {name}: format {fmt!r} unavailable ({exc})")
            continue
        if not os.path.exists(path):
            if samples is None:
                samples = list(demo.generate(profile, n, seed=seed))
            log(f"writing {name} ({n} {profile} samples)")
            with hpcio.open_writer(path, format=fmt, **options) as w:
                for s in samples:
                    w.write(s)
        out.append(BenchDataset(name, fmt, path, n, options, profile))
    out.extend(_peer_formats(profile, n, root, seed, samples, formats, log))
    with open(stamp_path, "w") as f:
        json.dump(stamp, f)
    return out


# The columns streaming's MDSWriter writes the profiles with: a list of images can only
# be pickled there (``pkl``), which is how its users store multi-image samples.
STREAMING_COLUMNS = {"text": {"id": "int", "text": "str", "meta": "json"},
                     "vlm": {"id": "str", "messages": "json", "images": "pkl"}}


def _streaming_missing(log) -> bool:
    import importlib.util

    if importlib.util.find_spec("streaming") is None:
        log("skipping mds-streaming: mosaicml-streaming is not installed (the bench extra)")
        return True
    return False


def _write_with_streaming(path: str, profile: str, samples) -> None:
    import shutil

    from streaming import MDSWriter

    shutil.rmtree(path, ignore_errors=True)
    with MDSWriter(out=path, columns=STREAMING_COLUMNS[profile]) as w:
        for s in samples:
            w.write(s)


def parquet_row_group_rows(profile: str) -> int:
    """Rows per row group of the bench's Parquet file, as Hugging Face ``datasets`` writes
    them: 100 for data with binary (image) columns, 1,000 otherwise."""
    return 100 if profile == "vlm" else 1000


def _peer_formats(profile, n, root, seed, samples, formats, log) -> list[BenchDataset]:
    """The layouts the peers' own writers leave: MDS by streaming's ``MDSWriter``, and
    Parquet (one file written by pyarrow, row groups as Hugging Face writes them), the
    input of the Arrow/HF peers and of the conversion figures."""
    out = []
    def want(name):
        return formats is None or name in formats

    if want("mds-streaming") and not _streaming_missing(log):
        path = os.path.join(root, "mds-streaming")
        if not os.path.exists(path):
            if samples is None:
                samples = list(demo.generate(profile, n, seed=seed))
            log("writing mds-streaming (streaming's MDSWriter)")
            _write_with_streaming(path + ".tmp", profile, samples)
            os.replace(path + ".tmp", path)
        out.append(BenchDataset("mds-streaming", "mds", path, n, {"columns": STREAMING_COLUMNS[profile]}, profile))
    if want("parquet"):
        path = os.path.join(root, "parquet")
        if not os.path.exists(path):
            import pyarrow as pa
            import pyarrow.parquet as pq

            if samples is None:
                samples = list(demo.generate(profile, n, seed=seed))
            os.makedirs(path + ".tmp", exist_ok=True)
            pq.write_table(pa.Table.from_pylist(samples), os.path.join(path + ".tmp", "data.parquet"),
                           row_group_size=parquet_row_group_rows(profile))
            os.replace(path + ".tmp", path)
            log("writing parquet")
        out.append(BenchDataset("parquet", "parquet", path, n, profile=profile))
    return out
