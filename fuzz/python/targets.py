"""The Python byte parsers' fuzz targets: each takes bytes and feeds them through the
public reader path of one format (hpcio.open, then every sample, a batch, the columns,
inspect and verify) or calls the parsing function that takes bytes directly.

The contract: only an :class:`hpcio.errors.HpcioError` may escape, and never an
:class:`~hpcio.errors.OutOfMemoryError` (a few kilobytes of input that make the reader
allocate until memory runs out declared a size nobody checked).  Hangs and memory growth
are the fuzzer's limits (``-timeout``, ``-rss_limit_mb``).

A target that reads a directory or a file with its sidecar takes several files in one
input: their contents in the order of the target's ``files``, separated by
:data:`SEPARATOR` (missing trailing parts leave the file out).  File names are fixed by
the target, never taken from the input, so nothing is written outside the scratch
directory.  ``fuzz/python/run.py`` runs these under atheris; the regression tests replay
the committed inputs through :func:`check`.
"""

import atexit
import os
import shutil
import struct
import tempfile
from pathlib import Path

import numpy as np

import hpcio
from hpcio.errors import HpcioError, OutOfMemoryError

SEPARATOR = b"\n--hpcio-fuzz-next-file--\n"
#: samples read one by one and as a batch: enough to reach every record of a seed
MAX_SAMPLES = 32

ZARR_FILES = (
    "zarr.json",
    "part-00000/zarr.json",
    "part-00000/id/zarr.json",
    "part-00000/id/c/0",
    "part-00000/vec/zarr.json",
    "part-00000/vec/c/0/0",
    "part-00000/text/zarr.json",
    "part-00000/text/offsets/zarr.json",
    "part-00000/text/offsets/c/0",
    "part-00000/text/data/zarr.json",
    "part-00000/text/data/c/0",
)


def split_files(data: bytes, names) -> dict:
    """The contents of ``names`` packed in ``data`` (see the module docstring)."""
    return dict(zip(names, data.split(SEPARATOR, len(names) - 1)))


def join_files(contents) -> bytes:
    """The input of a multi-file target: ``contents`` (bytes, in its files' order)."""
    return SEPARATOR.join(contents)


class Scratch:
    """A fresh directory per input (under ``$HPCIO_FUZZ_SCRATCH``, else in /dev/shm when
    there is one), the previous one removed: readers that remember a file by path, size
    and time see a new path."""

    def __init__(self):
        base = os.environ.get("HPCIO_FUZZ_SCRATCH") or ("/dev/shm" if os.access("/dev/shm", os.W_OK) else None)
        self.root = tempfile.mkdtemp(prefix="hpcio-fuzz-", dir=base)
        self.count = 0

    def write(self, files: dict) -> Path:
        self.count += 1
        shutil.rmtree(os.path.join(self.root, str(self.count - 1)), ignore_errors=True)
        top = Path(self.root, str(self.count))
        for name, content in files.items():
            path = top / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(content)
        top.mkdir(exist_ok=True)
        return top

    def cleanup(self):
        shutil.rmtree(self.root, ignore_errors=True)


_scratch = None


def scratch() -> Scratch:
    """The process's scratch directory, removed when Python exits (the replay and the
    regression tests end that way; a libFuzzer run does not, and tools/fuzz.sh removes
    the ``$HPCIO_FUZZ_SCRATCH`` it gave it)."""
    global _scratch
    if _scratch is None:
        _scratch = Scratch()
        atexit.register(_scratch.cleanup)
    return _scratch


def touch(sample):
    """Decode every value of ``sample`` (lazy samples decode on access)."""
    for key in list(sample):
        value = sample[key]
        if isinstance(value, np.ndarray):
            value.tobytes()


def allowing_errors(fn, *args):
    """``fn(*args)``, an allowed error swallowed: one broken step must not hide the next."""
    try:
        fn(*args)
    except OutOfMemoryError:
        raise
    except HpcioError:
        pass


def read_samples(ds):
    n = min(len(ds), MAX_SAMPLES)
    for i in range(n):
        allowing_errors(lambda i: touch(ds[i]), i)
    if n:
        allowing_errors(lambda: [touch(sample) for sample in ds.get_batch(np.arange(n))])
        allowing_errors(lambda: ds.get_columns(np.arange(n)))


def read_everything(path, fmt: str):
    """Everything a user can ask of the dataset at ``path``, each step tried even when
    an earlier one failed with an allowed error."""
    def read():
        with hpcio.open(path, format=fmt) as ds:
            read_samples(ds)

    module = hpcio.get_format(fmt)
    allowing_errors(read)
    allowing_errors(module.inspect, path)
    allowing_errors(lambda: module.verify(path, max_errors=8))


def read_files(fmt: str, names, opened: str = ""):
    """A target writing ``names`` from the input and reading ``opened`` (a file among
    them, or the directory) as format ``fmt``."""

    def target(data: bytes):
        top = scratch().write(split_files(data, names))
        read_everything(top / opened, fmt)

    target.files = tuple(names)
    return target


def fuzz_npy(data: bytes):
    """.npy values as WebDataset, MDS (``ndarray``) and JINX store them."""
    from hpcio.formats import _values

    _values.decode_value("ndarray", data, field="arr", sample=0, path="fuzz.npy")


def fuzz_manifest(data: bytes):
    """A staged directory's manifest and the journals of an interrupted run."""
    from hpcio.staging import manifest

    top = scratch().write(split_files(data, fuzz_manifest.files))
    manifest.read_manifest(top)
    manifest.read_journals(top)


fuzz_manifest.files = (".hpcio-manifest.json", ".hpcio-journal.0.jsonl")


def fuzz_mds_compact(data: bytes):
    """An MDS dataset's compact index (``index.hpcio``) beside its ``index.json`` and
    shards.  The header's record of index.json (size, digest, mtime) and the file's own
    digest are made to match before it is read, so the input reaches the parser instead
    of being ignored as stale or refused as damaged; the index is then read, inspected,
    verified and restamped (``write_compact_index``)."""
    import xxhash

    from hpcio.formats import mds

    files = split_files(data, fuzz_mds_compact.files)
    top = scratch().write(files)
    compact, index = files.get("index.hpcio", b""), top / "index.json"
    if len(compact) >= 64 and compact[:8] == b"HPCIOMDS" and index.is_file():
        head = bytearray(compact)
        content = index.read_bytes()
        struct.pack_into("<QQ", head, 24, len(content), xxhash.xxh3_64_intdigest(content))
        if len(head) >= 72 and struct.unpack_from("<I", head, 8)[0] == 2:
            struct.pack_into("<q", head, 64, index.stat().st_mtime_ns)
        digest = xxhash.xxh3_64(bytes(head[:56]))
        digest.update(bytes(head[64:]))
        struct.pack_into("<Q", head, 56, digest.intdigest())
        (top / "index.hpcio").write_bytes(bytes(head))
    read_everything(top, "mds")
    allowing_errors(lambda: mds.write_compact_index(top, check_files=True))


fuzz_mds_compact.files = ("index.hpcio", "index.json", "shard.00000.mds", "shard.00001.mds")

TARGETS = {
    "jinx": read_files("jinx", ("data.jinx", "data.binx"), "data.jinx"),
    "mds": read_files("mds", ("index.json", "shard.00000.mds", "shard.00000.mds.zstd")),
    "webdataset": read_files("webdataset", ("shard-000000.tar",)),
    "msgpack": read_files("msgpack", ("shard-000000.msgpack",)),
    "jsonl": read_files("jsonl", ("data.jsonl",), "data.jsonl"),
    "zarr": read_files("zarr", ZARR_FILES),
    "npy": fuzz_npy,
    "manifest": fuzz_manifest,
    "mds-compact": fuzz_mds_compact,
}


def load():
    """Import every module the targets reach (so a fuzzer instruments them up front)."""
    from hpcio.formats import _values  # noqa: F401
    from hpcio.staging import manifest  # noqa: F401

    for fmt in ("jinx", "mds", "webdataset", "msgpack", "jsonl", "zarr"):
        module = hpcio.get_format(fmt)
        getattr(module, "load_libraries", lambda: None)()


def check(name: str, data: bytes):
    """Run target ``name`` on ``data``: returns quietly or with an allowed error, raises
    anything else."""
    allowing_errors(TARGETS[name], data)
