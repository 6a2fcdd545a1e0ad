"""One benchmark measurement in a fresh process.

Run as ``python worker.py '<json spec>'`` by :mod:`hpcio.bench.runner`, with whichever
interpreter has the system under test installed (peers such as mldataforge need
Python >= 3.12 and live in their own environment).  This file therefore imports only
the standard library and numpy at module level, and the system under test inside its
opener.  It prints one JSON line with the timings; the parent measures CPU time and peak
RSS of the whole process with ``wait4``.

Operations (the same for every system, so the numbers compare):

iterate       one pass in storage order, touching every field of every sample
iterate-meta  one pass touching only the metadata fields (lazy readers skip the rest)
shuffle       ``ds[i]`` in ``numpy.random.default_rng(42).permutation(n)`` order, every field
sort          stable sort by a key (text: ``len(text)``; vlm: number of messages), then
              read in that order touching every field
shuffle-block hpcio's block shuffle (``ds.shuffle(42, mode="block", window=16)``): shards in
              a random order, samples shuffled within 16 shards at a time
shuffle-buffer  storage order through a buffer of ``SHUFFLE_BUFFER`` samples (hpcio's
              ``Pipeline.shuffle``, webdataset's ``.shuffle``), every field
batch         ``shuffle`` through the system's batch API (1024 samples per call)
columns       ``shuffle`` through hpcio's columnar batch API (``get_columns``, 1024 samples
              per call), every column touched to the same total as ``touch``
dataloader    an epoch of ``hpcio.torch.DataLoader`` over a shuffled
              ``hpcio.torch.IterableDataset`` (``LOADER_BATCH`` samples per batch, no
              workers, samples handed over as lists), every field touched
"""

from __future__ import annotations

import json
import os
import sys
import time

T_START = time.perf_counter()

# Run by path, this file's folder would lead sys.path and shadow libraries by name.
if sys.path and os.path.abspath(sys.path[0]) == os.path.dirname(os.path.abspath(__file__)):
    del sys.path[0]

import numpy as np  # noqa: E402

# Every system's shuffle order comes from numpy.random (the harness's for the peers,
# ``Dataset.shuffle`` for hpcio).  numpy 2 imports it on first use: imported here it
# counts with the harness, once for every system, as it already does for peers whose own
# import loads it (streaming, mldataforge), instead of inside some operations.
import numpy.random  # noqa: E402, F401

BATCH = 1024
# The block shuffle's window in shards and the buffer shuffle's size in samples: the
# settings docs/performance.md recommends for a parallel filesystem, a buffer that fits
# a vlm reader's memory (1,000 samples of about 225 KB).
SHUFFLE_WINDOW = 16
SHUFFLE_BUFFER = 1000
# The DataLoader epoch's batch size: the DataLoader sweep's (hpcio.bench.loader).
LOADER_BATCH = 64


def touch(sample, fields):
    """Access every field in ``fields`` (all when None) the way a training loop would.

    Nested mappings are touched through their values too: lazy readers hand them back
    as mapping proxies (not ``dict``), and reading only their length would skip the
    decoding that eager readers pay for.
    """
    total = 0
    for k in (sample.keys() if fields is None else fields):
        total += _touch_value(sample[k])
    return total


def touch_values(values):
    """touch()'s count for a sequence of values."""
    total = 0
    for v in values:
        total += _touch_value(v)
    return total


def _touch_value(v):
    """A length for sized values, nested mappings through their values (plus one), one
    for anything else.  The exact types readers return are dispatched on first, so the
    harness's own cost, the same for every system, stays a small part of a sample's."""
    t = type(v)
    if t is list and v and type(v[0]) is bytes:  # a list of images: their bytes
        return sum(map(len, v))
    if t is str or t is bytes or t is list or t is memoryview:
        return len(v)
    if t is int or t is float or t is bool or v is None:
        return 1
    if t is dict:
        return touch(v, None) + 1
    if isinstance(v, (bytes, bytearray, memoryview, str, list, tuple)):
        return len(v)
    if hasattr(v, "keys"):
        return touch(v, None) + 1
    return 1


def touch_columns(columns):
    """touch() for a column batch (``{field: column}``): the same total, counted a column
    at a time.  Text counts characters as ``len(str)`` does, lists their elements, numbers
    one each.  JSON objects are split into a column per key (``json_columns``, which parses
    every value) and counted as touch() counts a mapping: its values plus one; other JSON
    is decoded and its values touched."""
    total = 0
    for col in columns.values():
        kind = getattr(col, "kind", None)
        if kind == "str":
            total += int(col.str_lengths().sum())
        elif kind == "bytes":
            total += int(col.byte_lengths().sum())
        elif kind == "list":
            total += int(col.list_lengths().sum())
        elif kind == "json":
            try:
                parts = col.json_columns()
            except ValueError:  # not objects with the same keys
                total += touch_values(col.to_pylist())
            else:
                total += len(col) + touch_columns(parts)
        elif isinstance(col, np.ndarray) and col.ndim == 1:
            total += len(col)
        else:
            total += touch_values(col)
    return total


def sort_key(profile):
    if profile == "vlm":
        return lambda s: len(s["messages"])
    return lambda s: len(s["text"])


# --- loaders: import the system under test (timed as import_s), return its opener ------
def load_hpcio():
    import hpcio

    # Nothing more: as in a user's program, the format modules and compiled kernels are
    # imported by the first open, whose time they count in, and the process is tuned only
    # as its environment says (HPCIO_TUNE, which ``hpcio bench --tuned`` sets to all).
    return lambda path, options: hpcio.open(path, **options)


def _register_hpcio_encodings():
    """Let streaming, and mldataforge (which decodes through streaming's table), read the
    MDS encodings hpcio adds (``list[bytes]``: the vlm images), as a user does with
    ``register_streaming_reader()``.  The module is loaded from its file: a peer's
    interpreter may lack hpcio's compiled core, and the module needs none of it."""
    import importlib.util

    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    spec = importlib.util.spec_from_file_location(
        "hpcio_streaming_encodings", os.path.join(here, "formats", "mds", "streaming_encodings.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.register()


class OneRequestMDS:
    """The one-request-at-a-time baseline: each sample of a plain MDS dataset is one
    ``pread`` of exactly its record, issued when the sample is asked for, undecoded (a
    ``{"record": bytes}``).  What a reader with no read planning pays per sample behind a
    tier's latency; decoding is left out so that only the waiting is measured."""

    def __init__(self, path):
        with open(os.path.join(path, "index.json")) as f:
            shards = json.load(f)["shards"]
        self.fds, self.starts, self.ends, self.file_of = [], [], [], []
        for k, shard in enumerate(shards):
            fd = os.open(os.path.join(path, shard["raw_data"]["basename"]), os.O_RDONLY)
            n = shard["samples"]
            offsets = np.frombuffer(os.pread(fd, 4 * (n + 2), 0), dtype="<u4")[1 : n + 2].astype(np.int64)
            self.fds.append(fd)
            self.starts.append(offsets[:-1])
            self.ends.append(offsets[1:])
            self.file_of.append(np.full(n, k))
        self.starts, self.ends, self.file_of = (np.concatenate(a) for a in (self.starts, self.ends, self.file_of))

    def __len__(self):
        return len(self.starts)

    def __getitem__(self, i):
        start = int(self.starts[i])
        return {"record": os.pread(self.fds[self.file_of[i]], int(self.ends[i]) - start, start)}

    def __iter__(self):
        return (self[i] for i in range(len(self)))


def load_one_request():
    return lambda path, options: OneRequestMDS(path)


def load_streaming():
    from streaming import StreamingDataset

    _register_hpcio_encodings()

    # local-only use; the runner gives every run its own TMPDIR for streaming's locks
    return lambda path, options: StreamingDataset(local=path, remote=None, shuffle=False, batch_size=1, **options)


def load_mdf_mds():
    from mldataforge.utils import load_mds_directories

    _register_hpcio_encodings()

    return lambda path, options: load_mds_directories([path], **options)


def load_mdf_jinx():
    from mldataforge.utils import load_jinx_paths

    return lambda path, options: load_jinx_paths(path, **options)


def _files(path, suffix=""):
    if not os.path.isdir(path):
        return [path]
    return sorted(os.path.join(path, f) for f in os.listdir(path) if f.endswith(suffix))


def load_hf():
    import datasets

    return lambda path, options: datasets.load_dataset(options["builder"], data_files=_files(path), split="train")


def load_webdataset():
    import webdataset as wds

    # decode() turns the .json/.txt/.cls members into the Python values the other readers
    # return (images stay bytes, as everywhere in the bench)
    return lambda path, options: wds.WebDataset(_files(path, ".tar"), shardshuffle=False,
                                                empty_check=False).decode()


class ArrowTable:
    """pyarrow on Parquet the fast way: columnar batches converted with to_pylist."""

    def __init__(self, path):
        import pyarrow as pa
        import pyarrow.parquet as pq

        self.table = pa.concat_tables([pq.read_table(f) for f in _files(path)])

    def __len__(self):
        return self.table.num_rows

    def iter_batches(self, columns=None):
        t = self.table if columns is None else self.table.select(columns)
        for b in t.to_batches(max_chunksize=BATCH):
            yield from b.to_pylist()

    def take(self, idx, columns=None):
        t = self.table if columns is None else self.table.select(columns)
        return t.take(idx).to_pylist()


def load_arrow():
    import pyarrow.parquet  # noqa: F401

    return lambda path, options: ArrowTable(path)


LOADERS = {
    "hpcio": load_hpcio,
    "one-request": load_one_request,
    "streaming": load_streaming,
    "mdf-mds": load_mdf_mds,
    "mdf-jinx": load_mdf_jinx,
    "hf": load_hf,
    "webdataset": load_webdataset,
    "arrow": load_arrow,
}


def _status_mb(key: str) -> float:
    """The ``key:`` line of ``/proc/self/status`` (kB) in MB."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) / 1024
    return float("nan")


def peak_rss_mb():
    """This process's peak resident set (VmHWM), which exec resets, unlike ru_maxrss."""
    return _status_mb("VmHWM")


def anon_rss_mb():
    """This process's anonymous resident memory now (``RssAnon``), in MB."""
    return _status_mb("RssAnon")


class AnonymousPeak:
    """The peak of this process's anonymous resident memory (``RssAnon``), sampled every
    ``interval`` seconds by a thread: the memory a reader itself holds, without the file
    pages it maps, which VmHWM counts and the kernel may drop at will."""

    def __init__(self, interval=0.02):
        import threading

        self.peak_mb = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, args=(interval,), daemon=True)
        self._thread.start()

    def _sample(self, interval):
        while True:
            self.peak_mb = max(self.peak_mb, anon_rss_mb())
            if self._stop.wait(interval):
                return

    def stop(self):
        """The peak in MB."""
        self._stop.set()
        self._thread.join()
        return self.peak_mb


def runqueue_wait_s():
    """Seconds this thread has waited, runnable, for a CPU (``/proc/thread-self/schedstat``):
    on a busy machine, the part of a run's time the reader did not spend reading."""
    try:
        with open("/proc/thread-self/schedstat") as f:
            return int(f.read().split()[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return None


def io_read_bytes():
    """Bytes this process made the block layer read (``read_bytes`` of /proc/self/io)."""
    try:
        with open("/proc/self/io") as f:
            for line in f:
                if line.startswith("read_bytes:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def run(spec):
    system, op, profile = spec["system"], spec["op"], spec["profile"]
    opener = LOADERS[system]()
    anon = AnonymousPeak() if spec.get("anon_peak") else None
    if op == "dataloader":
        import hpcio.torch  # noqa: F401  (torch's import counts with the harness, not the epoch)
    t0 = time.perf_counter()
    t_import = t0 - T_START
    # what the imports hold before the reader opens: PyTorch's alone is hundreds of MB
    anon_at_open = anon_rss_mb()
    ds = opener(spec["path"], spec.get("options", {}))
    t_open = time.perf_counter()
    waited = runqueue_wait_s()
    n = spec.get("n") or len(ds)
    checksum = _run_op(ds, system, op, profile, n, spec.get("meta_fields"))
    t_end = time.perf_counter()
    waited = None if waited is None else runqueue_wait_s() - waited
    return {
        **({"anon_peak_mb": anon.stop()} if anon is not None else {}),
        "anon_at_open_mb": anon_at_open,
        "runqueue_wait_s": waited,
        "import_s": t_import,
        "open_s": t_open - t0,
        "op_s": t_end - t_open,
        "total_s": t_end - t0,
        "samples": int(n),
        "checksum": int(checksum),
        "maxrss_mb": peak_rss_mb(),
        "io_read_bytes": io_read_bytes(),
    }


def _run_op(ds, system, op, profile, n, meta):
    """Run operation ``op`` of ``system`` over ``n`` samples of ``ds``; the checksum of
    what was touched."""
    if op in ("iterate", "iterate-meta") or (op == "shuffle-buffer" and system == "webdataset"):
        return _iterate(ds, system, op, meta if op == "iterate-meta" else None)
    if system == "hpcio" and op == "dataloader":
        return _dataloader(ds)
    if system == "hpcio":
        return _hpcio_view(ds, op, profile, n)
    if op in ("shuffle", "sort"):
        return _peer_order(ds, system, op, profile, n)
    raise SystemExit(f"unknown operation {op!r}")


def _iterate(ds, system, op, fields):
    checksum = 0
    if system == "arrow":
        for s in ds.iter_batches(fields):
            checksum += touch(s, None)
    elif system == "hpcio" and fields is not None:
        for s in ds.select(fields):
            checksum += touch(s, None)
    elif system == "webdataset":
        if op == "shuffle-buffer":
            ds = ds.shuffle(SHUFFLE_BUFFER)
        # A webdataset sample names its entries by member suffix ("meta.json") and adds
        # its own "__key__", "__url__"...; touch the dataset's fields only.
        wanted = None if fields is None else set(fields)
        for s in ds:
            checksum += touch(s, [k for k in s if not k.startswith("__")
                                  and (wanted is None or k.split(".", 1)[0] in wanted)])
    else:
        for s in ds:
            checksum += touch(s, fields)
    return checksum


def _dataloader(ds):
    import hpcio.torch

    checksum = 0
    source = hpcio.torch.IterableDataset(ds, batch_size=LOADER_BATCH, shuffle=True, seed=42, collate_fn=list,
                                         context={"rank": 0, "world_size": 1})
    for batch in hpcio.torch.DataLoader(source, num_workers=0):
        for s in batch:
            checksum += touch(s, None)
    return checksum


def _hpcio_view(ds, op, profile, n):
    """hpcio's own API: views are index arrays read back in vectorised batches."""
    if op == "sort":
        view = ds.sort(len, field="messages" if profile == "vlm" else "text")
    elif op == "shuffle-block":
        view = ds.shuffle(seed=42, mode="block", window=SHUFFLE_WINDOW)
    elif op == "shuffle-buffer":
        from hpcio.pipeline import Pipeline

        view = Pipeline(ds, shuffle="none", context={"rank": 0, "world_size": 1}).shuffle(SHUFFLE_BUFFER, seed=42)
    else:
        view = ds.shuffle(seed=42)
    checksum = 0
    if op == "batch":
        order = view.indices
        for lo in range(0, n, BATCH):
            for s in ds.get_batch(order[lo : lo + BATCH]):
                checksum += touch(s, None)
    elif op == "columns":
        order = view.indices
        for lo in range(0, n, BATCH):
            checksum += touch_columns(ds.get_columns(order[lo : lo + BATCH]))
    else:
        for s in view:
            checksum += touch(s, None)
    return checksum


def _peer_order(ds, system, op, profile, n):
    """A peer's random or sorted pass, one sample (arrow: one batch) at a time."""
    if op == "sort":
        if system == "arrow":
            import pyarrow.compute as pc

            col = ds.table["messages" if profile == "vlm" else "text"]
            lens = pc.list_value_length(col) if profile == "vlm" else pc.utf8_length(col)
            order = np.argsort(lens.to_numpy(zero_copy_only=False), kind="stable")
        else:
            key = sort_key(profile)
            order = np.argsort([key(ds[i]) for i in range(n)], kind="stable")
    else:
        order = np.random.default_rng(42).permutation(n)
    checksum = 0
    if system == "arrow":
        for lo in range(0, n, BATCH):
            for s in ds.take(order[lo : lo + BATCH]):
                checksum += touch(s, None)
    else:
        for i in order:
            checksum += touch(ds[int(i)], None)
    return checksum

if __name__ == "__main__":
    result = run(json.loads(sys.argv[1]))
    sys.stdout.write(json.dumps(result) + "\n")
