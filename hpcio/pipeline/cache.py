"""The cache boundary: upstream stages written once as shards, one part per consumer,
read back as one dataset."""

from __future__ import annotations

import bisect
import json
import os
import shutil
import time
from collections.abc import Iterable, Sequence

import numpy as np

from ..dataset import Dataset, open as open_dataset, open_writer
from ..distributed.context import RuntimeContext
from ..errors import CacheTimeoutError, UsageError
from ..formats.base import Reader, handed_out
from .stages import Stage

__all__ = ["CacheBoundary", "materialise"]


class CacheBoundary(Stage):
    """The cache boundary; :meth:`Pipeline.iterate` materialises it, never applies it."""

    kind = "cache"

    def __init__(self, directory, format: str, timeout: float, writer_options: dict):
        self.directory = os.fspath(directory)
        self.format, self.timeout, self.writer_options = format, timeout, writer_options

    def fingerprint(self):
        return f"cache(format={self.format!r}, options={sorted(self.writer_options.items())!r})"

    def apply(self, samples, context):
        raise UsageError("the cache boundary is materialised by Pipeline.iterate, not applied as a stage")


# --- concatenated cache parts --------------------------------------------------------
class _ConcatReader(Reader):
    """The samples of several readers, one after the other."""

    def __init__(self, path: str, readers: Sequence[Reader]):
        super().__init__(path)
        self.readers = list(readers)
        self.bounds = np.concatenate(([0], np.cumsum([len(r) for r in self.readers]))).astype(np.int64)

    def __len__(self) -> int:
        return int(self.bounds[-1])

    def read(self, i, fields=None):
        j = self.check_index(i)
        part = bisect.bisect_right(self.bounds, j) - 1
        return self.readers[part].read(j - int(self.bounds[part]), fields)

    def read_many(self, indices, fields=None):
        indices = np.asarray(indices, dtype=np.int64)
        parts = np.searchsorted(self.bounds, indices, side="right") - 1
        out: list = [None] * len(indices)
        # One batched read per part, scattered back to the requested order.
        for part in np.unique(parts).tolist():
            where = np.flatnonzero(parts == part)
            got = self.readers[part].read_many(indices[where] - self.bounds[part], fields)
            for k, sample in zip(where.tolist(), got):
                out[k] = sample
        return out

    def iter_many(self, indices, fields=None):
        # The parts may be lazy readers: hand the samples out as they do.
        return handed_out(self.read_many(indices, fields))

    def mean_sample_bytes(self):
        hints = [r.mean_sample_bytes() for r in self.readers]
        if not len(self) or any(h is None for h in hints):
            return None
        return sum(len(r) * h for r, h in zip(self.readers, hints)) / len(self)

    def shard_sizes(self):
        sizes = [r.shard_sizes() for r in self.readers]
        if any(s is None for s in sizes):
            return [len(r) for r in self.readers]  # each part counts as one shard
        return [int(k) for s in sizes for k in s]

    def close(self):
        for r in self.readers:
            r.close()


def _part_name(part: int, parts: int) -> str:
    return f"part-{part:05d}-of-{parts:05d}"


def _complete_parts(root: str) -> list[str] | None:
    """Part paths of a complete cache under ``root``, or None."""
    if not os.path.isdir(root):
        return None
    done = [f[: -len(".done")] for f in os.listdir(root) if f.endswith(".done")]
    by_count: dict[int, set[str]] = {}
    for name in done:
        by_count.setdefault(int(name.rsplit("-", 1)[1]), set()).add(name)
    for parts, names in sorted(by_count.items()):
        if len(names) == parts:
            return [os.path.join(root, _part_name(p, parts)) for p in range(parts)]
    return None


def materialise(cache: CacheBoundary, key: str, source: Dataset, upstream: list[Stage],
                 ctx: RuntimeContext) -> Dataset:
    """The cached samples of ``upstream`` over ``source``, writing this part if needed."""
    root = os.path.join(cache.directory, key)
    paths = _complete_parts(root)
    if paths is None:
        parts, part = ctx.consumers, ctx.consumer
        path = os.path.join(root, _part_name(part, parts))
        if ctx.is_dp_leader and not os.path.exists(path + ".done"):
            _write_part(cache, root, path, source, upstream, ctx, part, parts)
        paths = _wait_for_parts(root, parts, cache.timeout)
    readers = [open_dataset(p, format=cache.format).reader for p in paths]
    return Dataset(_ConcatReader(root, readers))


def _write_part(cache, root, path, source, upstream, ctx, part, parts) -> None:
    os.makedirs(root, exist_ok=True)
    if os.path.exists(path):  # left by a run that died before finishing this part
        shutil.rmtree(path) if os.path.isdir(path) else os.remove(path)
    n = len(source)
    # Contiguous, unshuffled parts: every source sample exactly once, none dropped.
    lo, hi = part * n // parts, (part + 1) * n // parts

    def read():
        step = source.reader.batch_size
        for a in range(lo, hi, step):
            yield from source.get_batch(np.arange(a, min(a + step, hi)))

    stream: Iterable = read()
    upstream_ctx = ctx.replace(epoch=0)  # the cache is computed once for all epochs
    for stage in upstream:
        stream = stage.apply(stream, upstream_ctx)
    written = 0
    with open_writer(path, format=cache.format, **cache.writer_options) as writer:
        for sample in stream:
            writer.write(sample)
            written += 1
    manifest = os.path.join(root, "manifest.json")
    if part == 0:
        tmp = f"{manifest}.tmp.{os.getpid()}"
        with open(tmp, "w") as f:
            json.dump({"format": cache.format, "parts": parts,
                       "stages": [s.fingerprint() for s in upstream]}, f, indent=1)
        os.replace(tmp, manifest)
    tmp = f"{path}.done.tmp.{os.getpid()}"
    with open(tmp, "w") as f:
        f.write(str(written))
    os.replace(tmp, path + ".done")  # published last: the part is complete


def _wait_for_parts(root: str, parts: int, timeout: float) -> list[str]:
    paths = [os.path.join(root, _part_name(p, parts)) for p in range(parts)]
    deadline = time.monotonic() + timeout
    delay = 0.01
    while True:
        missing = [p for p in paths if not os.path.exists(p + ".done")]
        if not missing:
            return paths
        if time.monotonic() > deadline:
            names = ", ".join(os.path.basename(p) for p in missing[:5])
            raise CacheTimeoutError(
                f"{len(missing)} of {parts} cache parts still missing after {timeout:g} s "
                f"({names}); did every data-parallel rank run the pipeline?",
                path=root,
            )
        time.sleep(delay)
        delay = min(delay * 2, 1.0)
