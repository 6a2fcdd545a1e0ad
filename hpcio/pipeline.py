"""Pipelines: stages over one consumer's part of a dataset, with a cache boundary.

A :class:`Pipeline` starts from an :class:`hpcio.Dataset`, reads this (rank, worker)'s
part of the epoch order (:func:`hpcio.distributed.split_indices`) in batches, and runs
its stages in order.  Stages are ``map``, ``select``, ``batch`` (by count, byte budget
or padded-token budget), ``unbatch``, buffer ``shuffle`` and ``assemble`` (a stateful
many-to-many step such as sequence packing).  Stateful stages receive the
:class:`~hpcio.distributed.RuntimeContext`, so their randomness depends on seed,
epoch, rank and worker.

``cache(directory)`` is a boundary: everything before it runs once and is written as
hpcio shards under a fingerprint of the source and of every stage before it; later
runs with the same fingerprint read the shards instead.  Stages after it run every
epoch, over a fresh split of the cached samples.

>>> import hpcio.pipeline as hp  # doctest: +SKIP
>>> pipe = (hp.Pipeline(ds, seed=1).map(tokenize).cache("/scratch/cache")
...         .shuffle(1024).assemble(hp.SequencePacker.factory(2048)).batch(8))  # doctest: +SKIP
"""

from __future__ import annotations

import abc
import bisect
import functools
import hashlib
import json
import os
import shutil
import time
import types
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence

import numpy as np

from .dataset import Dataset, open as open_dataset, open_writer
from .distributed.context import RuntimeContext, infer_context
from .distributed.split import (
    circular_shift as rotate,
    dataset_shard_sizes,
    shuffle_mode,
    split_indices,
)
from .errors import CacheTimeoutError, UnstableIdentityError
from .formats.base import Reader, handed_out

__all__ = [
    "Pipeline",
    "Stage",
    "SequencePacker",
    "fingerprint_callable",
    "sample_nbytes",
    "UnstableIdentityError",
    "CacheTimeoutError",
]


# --- identities --------------------------------------------------------------------
def _code_digest(code: types.CodeType) -> str:
    h = hashlib.sha256(code.co_code)
    h.update(repr(code.co_names).encode())
    for const in code.co_consts:
        # Nested code objects repr with their address; hash their bytes instead.
        h.update(_code_digest(const).encode() if isinstance(const, types.CodeType) else repr(const).encode())
    return h.hexdigest()[:16]


def fingerprint_callable(fn) -> str:
    """A string naming ``fn`` the same way in every run, or UnstableIdentityError.

    Module-level functions and classes are named by module, qualified name and (for
    Python functions) a digest of their code, so editing a stage invalidates caches.
    ``functools.partial`` adds its arguments' reprs; an object may define
    ``fingerprint()`` to name itself.  Lambdas and functions defined inside another
    function are rejected: their name does not say what they compute.

    >>> fingerprint_callable(len)
    'builtins:len'
    >>> fingerprint_callable(lambda s: s)
    Traceback (most recent call last):
    ...
    hpcio.errors.UnstableIdentityError: a lambda has no stable identity across runs; define the stage function with def at module level
    """
    if isinstance(fn, functools.partial):
        kwargs = sorted(fn.keywords.items())
        return f"partial({fingerprint_callable(fn.func)}, {fn.args!r}, {kwargs!r})"
    custom = getattr(fn, "fingerprint", None)
    if callable(custom) and not isinstance(fn, type):
        return f"{fingerprint_callable(type(fn))}:{custom()}"
    name = getattr(fn, "__qualname__", None)
    module = getattr(fn, "__module__", None)
    if name is None or module is None:
        raise UnstableIdentityError(
            f"cannot fingerprint {type(fn).__name__} object {fn!r}; use a module-level "
            "function or class, or give the object a fingerprint() method"
        )
    if getattr(fn, "__name__", None) == "<lambda>":
        raise UnstableIdentityError(
            "a lambda has no stable identity across runs; define the stage function "
            "with def at module level"
        )
    if "<locals>" in name:
        raise UnstableIdentityError(
            f"{module}.{name} is defined inside a function, so its identity is not "
            "stable across runs; define it at module level"
        )
    code = getattr(fn, "__code__", None)
    digest = f"#{_code_digest(code)}" if isinstance(code, types.CodeType) else ""
    return f"{module}:{name}{digest}"


def sample_nbytes(value) -> int:
    """Approximate payload bytes of a sample: buffers, strings and arrays summed.

    >>> sample_nbytes({"a": b"xyz", "b": np.zeros(4, np.int32), "c": [1, "ab"]})
    29
    """
    if isinstance(value, (bytes, bytearray, memoryview)):
        return len(value)
    if isinstance(value, str):
        return len(value.encode())
    if isinstance(value, np.ndarray):
        return value.nbytes
    if isinstance(value, Mapping):
        return sum(sample_nbytes(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return sum(sample_nbytes(v) for v in value)
    return 8  # numbers, booleans, None


# --- stages ------------------------------------------------------------------------
class Stage(abc.ABC):
    """One step of a pipeline: ``apply(samples, context)`` returns the new stream."""

    kind = "stage"

    @abc.abstractmethod
    def apply(self, samples: Iterator, context: RuntimeContext) -> Iterator: ...

    @abc.abstractmethod
    def fingerprint(self) -> str: ...


class _Map(Stage):
    kind = "map"

    def __init__(self, fn: Callable):
        self.fn = fn

    def apply(self, samples, context):
        fn = self.fn
        return (fn(s) for s in samples)

    def fingerprint(self):
        return f"map({fingerprint_callable(self.fn)})"


class _Select(Stage):
    kind = "select"

    def __init__(self, predicate: Callable):
        self.predicate = predicate

    def apply(self, samples, context):
        return filter(self.predicate, samples)

    def fingerprint(self):
        return f"select({fingerprint_callable(self.predicate)})"


class _Batch(Stage):
    kind = "batch"

    def __init__(self, size, max_bytes, max_tokens, token_field, drop_last):
        if size is None and max_bytes is None and max_tokens is None:
            raise ValueError("batch() needs size=, max_bytes= or max_tokens=")
        for name, value in (("size", size), ("max_bytes", max_bytes), ("max_tokens", max_tokens)):
            if value is not None and value < 1:
                raise ValueError(f"{name} must be >= 1, got {value}")
        if max_tokens is not None and token_field is None:
            raise ValueError("max_tokens= needs token_field= (the field holding the tokens)")
        self.size, self.max_bytes, self.max_tokens = size, max_bytes, max_tokens
        self.token_field, self.drop_last = token_field, drop_last

    def apply(self, samples, context):
        batch: list = []
        nbytes = longest = 0
        for s in samples:
            b = sample_nbytes(s) if self.max_bytes is not None else 0
            t = len(s[self.token_field]) if self.max_tokens is not None else 0
            # Padded token cost: every sample of a batch is padded to the longest.
            over = batch and (
                (self.max_bytes is not None and nbytes + b > self.max_bytes)
                or (self.max_tokens is not None and max(longest, t) * (len(batch) + 1) > self.max_tokens)
            )
            if over:
                yield batch
                batch, nbytes, longest = [], 0, 0
            batch.append(s)
            nbytes += b
            longest = max(longest, t)
            if self.size is not None and len(batch) == self.size:
                yield batch
                batch, nbytes, longest = [], 0, 0
        if batch and not (self.drop_last and self.size is not None and len(batch) < self.size):
            yield batch

    def fingerprint(self):
        return (
            f"batch(size={self.size}, max_bytes={self.max_bytes}, max_tokens={self.max_tokens}, "
            f"token_field={self.token_field!r}, drop_last={self.drop_last})"
        )


class _Unbatch(Stage):
    kind = "unbatch"

    def apply(self, samples, context):
        for batch in samples:
            yield from batch

    def fingerprint(self):
        return "unbatch()"


class _Shuffle(Stage):
    kind = "shuffle"

    def __init__(self, buffer_size: int, seed: int | None):
        if buffer_size < 1:
            raise ValueError(f"buffer_size must be >= 1, got {buffer_size}")
        self.buffer_size, self.seed = buffer_size, seed

    def apply(self, samples, context):
        seed = context.seed if self.seed is None else self.seed
        # Each consumer and epoch draws its own stream, identical on rerun.
        rng = np.random.default_rng([seed, context.epoch, context.dp_rank, context.worker_id])
        buffer: list = []
        for s in samples:
            if len(buffer) < self.buffer_size:
                buffer.append(s)
                continue
            j = int(rng.integers(self.buffer_size))
            yield buffer[j]
            buffer[j] = s
        for j in rng.permutation(len(buffer)):
            yield buffer[j]

    def fingerprint(self):
        return f"shuffle(buffer_size={self.buffer_size}, seed={self.seed})"


class _Assemble(Stage):
    kind = "assemble"

    def __init__(self, factory: Callable[[RuntimeContext], object]):
        self.factory = factory

    def apply(self, samples, context):
        assembler = self.factory(context)
        for s in samples:
            yield from assembler.push(s)
        yield from assembler.flush()

    def fingerprint(self):
        return f"assemble({fingerprint_callable(self.factory)})"


class SequencePacker:
    """Pack token sequences into fixed-length rows (an ``assemble`` stage).

    Sequences from ``field`` are concatenated, each followed by ``eos`` when given, and
    cut into rows of ``length`` tokens: ``{"tokens": int array, "doc_ids": int array}``
    where ``doc_ids`` numbers the source sequences within the row, for attention masks.
    The last partial row is dropped unless ``keep_remainder``.

    >>> p = SequencePacker(RuntimeContext(), length=4, eos=0)
    >>> rows = [r for s in ({"tokens": [5, 6]}, {"tokens": [7, 8, 9]}) for r in p.push(s)]
    >>> [r["tokens"].tolist() for r in rows], rows[0]["doc_ids"].tolist()
    ([[5, 6, 0, 7]], [0, 0, 0, 1])
    """

    def __init__(self, context: RuntimeContext, length: int, field: str = "tokens",
                 eos: int | None = None, keep_remainder: bool = False):
        if length < 1:
            raise ValueError(f"length must be >= 1, got {length}")
        self.context, self.length, self.field = context, length, field
        self.eos, self.keep_remainder = eos, keep_remainder
        self._tokens: list[np.ndarray] = []
        self._docs: list[np.ndarray] = []
        self._pending = 0
        self._doc = 0

    @classmethod
    def factory(cls, length: int, field: str = "tokens", eos: int | None = None,
                keep_remainder: bool = False):
        """A picklable, fingerprintable factory for :meth:`Pipeline.assemble`."""
        return functools.partial(cls, length=length, field=field, eos=eos,
                                 keep_remainder=keep_remainder)

    def push(self, sample: Mapping) -> list[dict]:
        tokens = np.asarray(sample[self.field], dtype=np.int64)
        if self.eos is not None:
            tokens = np.append(tokens, self.eos)
        self._tokens.append(tokens)
        self._docs.append(np.full(len(tokens), self._doc, dtype=np.int64))
        self._doc += 1
        self._pending += len(tokens)
        return self._emit(final=False)

    def flush(self) -> list[dict]:
        return self._emit(final=True)

    def _emit(self, final: bool) -> list[dict]:
        if self._pending < self.length and not (final and self.keep_remainder and self._pending):
            if final:
                self._tokens, self._docs, self._pending = [], [], 0
            return []
        tokens, docs = np.concatenate(self._tokens), np.concatenate(self._docs)
        whole = len(tokens) // self.length * self.length
        cut = len(tokens) if final and self.keep_remainder else whole
        rows = []
        for lo in range(0, cut, self.length):
            d = docs[lo : lo + self.length]
            rows.append({"tokens": tokens[lo : lo + self.length], "doc_ids": d - d[0]})
        rest = slice(cut, None)
        self._tokens, self._docs = [tokens[rest]], [docs[rest]]
        self._pending = len(tokens) - cut
        return rows


class _Cache(Stage):
    """The cache boundary; :meth:`Pipeline.iterate` materialises it, never applies it."""

    kind = "cache"

    def __init__(self, directory, format: str, timeout: float, writer_options: dict):
        self.directory = os.fspath(directory)
        self.format, self.timeout, self.writer_options = format, timeout, writer_options

    def fingerprint(self):
        return f"cache(format={self.format!r}, options={sorted(self.writer_options.items())!r})"

    def apply(self, samples, context):
        raise RuntimeError("the cache boundary is materialised by Pipeline.iterate, not applied as a stage")


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


# --- the pipeline --------------------------------------------------------------------
def _source_fingerprint(ds: Dataset) -> str:
    """Names the source's files (name, size, mtime), its view and projection."""
    h = hashlib.sha256()
    path = ds.reader.path
    h.update(f"{type(ds.reader).__module__}.{type(ds.reader).__qualname__}|{path}|{len(ds)}".encode())
    if os.path.isdir(path):
        for root, dirs, files in os.walk(path):
            dirs.sort()
            for name in sorted(files):
                st = os.stat(os.path.join(root, name))
                rel = os.path.relpath(os.path.join(root, name), path)
                h.update(f"|{rel}:{st.st_size}:{st.st_mtime_ns}".encode())
    elif os.path.exists(path):
        st = os.stat(path)
        h.update(f"|{st.st_size}:{st.st_mtime_ns}".encode())
    if ds.indices is not None:
        h.update(ds.indices.tobytes())
    h.update(repr(ds.fields).encode())
    return h.hexdigest()


class Pipeline:
    """Stages over this consumer's part of ``source``; every method returns a new one.

    Parameters
    ----------
    source : hpcio.Dataset
        The samples.
    shuffle : bool or {"global", "block", "none"}
        Epoch order, as in :func:`hpcio.distributed.split_indices` (``True`` is global).
    seed, epoch, remainder, shard_sizes, window
        As in :func:`~hpcio.distributed.split_indices`.
    circular_shift : bool
        Rotate each consumer's part so consumers start at different places (different
        shards) of the dataset, as fairseq2's ``files_circular_shift``.
    context : RuntimeContext or mapping, optional
        Explicit context fields; the rest is inferred when iterating.
    """

    def __init__(self, source: Dataset, *, shuffle=True, seed: int = 0, epoch: int = 0,
                 remainder: str = "drop", shard_sizes=None, window: int = 1,
                 circular_shift: bool = False, context=None):
        if not isinstance(source, Dataset):
            raise TypeError(f"expected an hpcio.Dataset, got {type(source).__name__}")
        self.source = source
        self.options = {
            "mode": shuffle_mode(shuffle), "seed": int(seed), "remainder": remainder,
            "shard_sizes": shard_sizes, "window": int(window),
        }
        self.circular_shift = circular_shift
        self.epoch = int(epoch)
        if isinstance(context, RuntimeContext):
            context = {"rank": context.rank, "world_size": context.world_size,
                       "tp_size": context.tp_size}
        self.explicit = dict(context or {})
        self.stages: tuple[Stage, ...] = ()

    def _then(self, stage: Stage) -> "Pipeline":
        new = object.__new__(Pipeline)
        new.__dict__.update(self.__dict__)
        new.stages = self.stages + (stage,)
        return new

    # --- stages ----------------------------------------------------------------------
    def map(self, fn: Callable) -> "Pipeline":
        """Apply ``fn`` to every sample."""
        return self._then(_Map(fn))

    def select(self, predicate: Callable) -> "Pipeline":
        """Keep the samples for which ``predicate`` is true."""
        return self._then(_Select(predicate))

    def batch(self, size: int | None = None, *, max_bytes: int | None = None,
              max_tokens: int | None = None, token_field: str | None = None,
              drop_last: bool = False) -> "Pipeline":
        """Lists of samples, closed at ``size`` samples and/or before a budget is exceeded.

        ``max_bytes`` bounds the summed :func:`sample_nbytes`; ``max_tokens`` bounds the
        padded token count ``len(batch) * longest`` of ``token_field``.  A sample alone
        over budget forms its own batch.  ``drop_last`` drops a final batch shorter than
        ``size``.
        """
        return self._then(_Batch(size, max_bytes, max_tokens, token_field, drop_last))

    def unbatch(self) -> "Pipeline":
        """The samples of each list, one by one."""
        return self._then(_Unbatch())

    def shuffle(self, buffer_size: int, seed: int | None = None) -> "Pipeline":
        """Buffer shuffle, seeded by (seed or the context's seed, epoch, rank, worker)."""
        return self._then(_Shuffle(buffer_size, seed))

    def assemble(self, factory: Callable[[RuntimeContext], object]) -> "Pipeline":
        """A stateful many-to-many step: ``factory(context)`` makes an object with
        ``push(sample) -> iterable`` and ``flush() -> iterable`` (at the end of the part)."""
        return self._then(_Assemble(factory))

    def cache(self, directory, *, format: str = "mds", timeout: float = 3600.0,
              **writer_options) -> "Pipeline":
        """Materialise everything upstream once, as ``format`` shards under ``directory``.

        The key is a fingerprint of the source listing and every stage before; each
        consumer's data-parallel leader writes one part, the others wait for all parts
        (up to ``timeout`` seconds) and then read them.
        """
        for stage in self.stages:
            stage.fingerprint()  # reject unstable stages now, not after hours of work
        return self._then(_Cache(directory, format, timeout, dict(writer_options)))

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)

    # --- running ---------------------------------------------------------------------
    def context(self) -> RuntimeContext:
        return infer_context(**{"seed": self.options["seed"], "epoch": self.epoch, **self.explicit})

    def fingerprint(self, upto: int | None = None) -> str:
        """Fingerprint of the source and of the stages before index ``upto``."""
        h = hashlib.sha256(_source_fingerprint(self.source).encode())
        for stage in self.stages[:upto]:
            h.update(b"\0" + stage.fingerprint().encode())
        return h.hexdigest()[:24]

    def __iter__(self) -> Iterator:
        return self.iterate()

    def iterate(self, context: RuntimeContext | None = None) -> Iterator:
        """Run the pipeline for this consumer (context inferred unless given)."""
        ctx = self.context() if context is None else context
        source, shard_sizes = self.source, self.options["shard_sizes"]
        if shard_sizes is None and self.options["mode"] == "block":
            shard_sizes = dataset_shard_sizes(source)
        stages = list(self.stages)
        done = 0
        for k, stage in enumerate(self.stages):
            if isinstance(stage, _Cache):
                upstream = stages[done:k]
                source = _materialise(stage, self.fingerprint(k + 1), source, upstream, ctx)
                shard_sizes = source.reader.shard_sizes()
                done = k + 1
        stream = self._read(source, shard_sizes, ctx)
        for stage in stages[done:]:
            stream = stage.apply(stream, ctx)
        return iter(stream)

    def _read(self, source: Dataset, shard_sizes, ctx: RuntimeContext) -> Iterator:
        o = self.options
        indices = split_indices(
            len(source), ctx.dp_rank, ctx.dp_size, ctx.worker_id, ctx.num_workers,
            seed=o["seed"], epoch=ctx.epoch, mode=o["mode"], remainder=o["remainder"],
            shard_sizes=shard_sizes, window=o["window"],
        )
        if self.circular_shift:
            indices = rotate(indices, ctx.consumer, ctx.consumers)
        step = source.reader.batch_size
        for lo in range(0, len(indices), step):
            yield from source.get_batch(indices[lo : lo + step])


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


def _materialise(cache: _Cache, key: str, source: Dataset, upstream: list[Stage],
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
