"""Pipeline stages, and the stable identities that name them in cache keys."""

from __future__ import annotations

import abc
import functools
import hashlib
import types
from collections.abc import Callable, Iterator, Mapping

import numpy as np

from ..distributed.context import RuntimeContext
from ..errors import InvalidArgumentError, UnstableIdentityError, UsageError
from ..mixture import PROVENANCE_FIELDS

__all__ = ["Stage", "MapStage", "DecodeStage", "SelectStage", "BatchStage", "UnbatchStage", "ShuffleStage", "AssembleStage",
           "PackStage", "SequencePacker", "fingerprint_callable", "sample_nbytes"]


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


class MapStage(Stage):
    kind = "map"

    def __init__(self, fn: Callable):
        self.fn = fn

    def apply(self, samples, context):
        fn = self.fn
        return (fn(s) for s in samples)

    def fingerprint(self):
        return f"map({fingerprint_callable(self.fn)})"


class DecodeStage(MapStage):
    """Decodes binary values with a :class:`hpcio.decoding.SampleDecoder`; a list of
    samples (after ``batch``) is decoded sample by sample."""

    kind = "decode"

    def fingerprint(self):
        return f"decode({self.fn.fingerprint()})"


class SelectStage(Stage):
    kind = "select"

    def __init__(self, predicate: Callable, lengths: str | None = None):
        self.predicate, self.lengths = predicate, lengths

    def apply(self, samples, context):
        if self.lengths is None:
            return filter(self.predicate, samples)
        field, keep = self.lengths, self.predicate
        return (s for s in samples if keep(len(s[field])))

    def fingerprint(self):
        if self.lengths is None:
            return f"select({fingerprint_callable(self.predicate)})"
        return f"select({fingerprint_callable(self.predicate)}, lengths={self.lengths!r})"


class BatchStage(Stage):
    kind = "batch"

    def __init__(self, size, max_bytes, max_tokens, token_field, drop_last, lengths=None, buckets=None):
        if size is None and max_bytes is None and max_tokens is None:
            raise InvalidArgumentError("batch() needs size=, max_bytes= or max_tokens=")
        for name, value in (("size", size), ("max_bytes", max_bytes), ("max_tokens", max_tokens)):
            if value is not None and value < 1:
                raise InvalidArgumentError(f"{name} must be >= 1, got {value}")
        if max_tokens is not None and token_field is None:
            if lengths is None or callable(lengths):
                raise InvalidArgumentError("max_tokens= needs token_field= (the field holding the tokens)")
            token_field = lengths
        if buckets is not None and lengths is None:
            raise InvalidArgumentError("buckets= needs lengths= (the source field whose lengths "
                                       "sort samples into buckets)")
        self.size, self.max_bytes, self.max_tokens = size, max_bytes, max_tokens
        self.token_field, self.drop_last = token_field, drop_last
        self.lengths, self.buckets = lengths, buckets

    @property
    def counted(self) -> bool:
        """True when batches are closed by count only (no budget)."""
        return self.max_bytes is None and self.max_tokens is None

    def planner(self):
        """The :class:`~hpcio.pipeline.plan.BatchPlanner` of a planned batch, or None."""
        if self.lengths is None or (self.counted and self.buckets is None):
            return None
        from .plan import BatchPlanner

        field, fn = (self.lengths, None) if isinstance(self.lengths, str) else self.lengths
        return BatchPlanner(field, self.size, self.max_tokens, self.max_bytes, self.buckets, fn)

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
        planned = "" if self.lengths is None else f", lengths={_lengths_name(self.lengths)}, buckets={self.buckets!r}"
        return (
            f"batch(size={self.size}, max_bytes={self.max_bytes}, max_tokens={self.max_tokens}, "
            f"token_field={self.token_field!r}, drop_last={self.drop_last}{planned})"
        )


def _lengths_name(lengths) -> str:
    if isinstance(lengths, str):
        return repr(lengths)
    field, fn = lengths
    return f"({field!r}, {fingerprint_callable(fn)})"


class PackStage(Stage):
    """Documents packed into rows of ``max_len`` tokens, planned from lengths
    (:class:`~hpcio.pipeline.plan.PackPlanner`); :meth:`Pipeline.iterate` reads the rows
    the plan deals to this consumer, so it is never applied to a stream."""

    kind = "pack"

    def __init__(self, max_len, field, eos, pad, split_documents, lengths):
        if max_len < 1:
            raise InvalidArgumentError(f"max_len must be >= 1, got {max_len}")
        self.max_len, self.field, self.eos, self.pad = int(max_len), field, eos, pad
        self.split_documents = bool(split_documents)
        self.lengths = field if lengths is None else lengths

    def planner(self, rows=None, drop_last=False):
        from .plan import PackPlanner

        field, fn = (self.lengths, None) if isinstance(self.lengths, str) else self.lengths
        return PackPlanner(field, self.max_len, self.eos, self.split_documents, fn, rows, drop_last)

    def apply(self, samples, context):
        raise UsageError("pack() is planned from the source's lengths: it cannot come before cache()")

    def fingerprint(self):
        return (f"pack(max_len={self.max_len}, field={self.field!r}, eos={self.eos}, pad={self.pad}, "
                f"split_documents={self.split_documents}, lengths={_lengths_name(self.lengths)})")


class UnbatchStage(Stage):
    kind = "unbatch"

    def apply(self, samples, context):
        for batch in samples:
            yield from batch

    def fingerprint(self):
        return "unbatch()"


class ShuffleStage(Stage):
    kind = "shuffle"

    def __init__(self, buffer_size: int, seed: int | None):
        if buffer_size < 1:
            raise InvalidArgumentError(f"buffer_size must be >= 1, got {buffer_size}")
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


class AssembleStage(Stage):
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
    where ``doc_ids`` numbers the source sequences within the row, for attention masks,
    and ``cu_seqlens`` / ``position_ids`` give their starts as varlen attention takes them
    (a document cut across rows starts again at position 0 in the next).  It packs
    greedily and cuts documents, per consumer: :meth:`Pipeline.pack` plans whole
    documents by best fit with equal steps on every consumer.
    The last partial row is dropped unless ``keep_remainder``.  Samples that carry
    provenance (``Pipeline(provenance=True)``) give each row the lists ``__source__``,
    ``__index__`` and ``__position__`` of the documents it holds, in ``doc_ids`` order.

    >>> p = SequencePacker(RuntimeContext(), length=4, eos=0)
    >>> rows = [r for s in ({"tokens": [5, 6]}, {"tokens": [7, 8, 9]}) for r in p.push(s)]
    >>> [r["tokens"].tolist() for r in rows], rows[0]["doc_ids"].tolist()
    ([[5, 6, 0, 7]], [0, 0, 0, 1])
    """

    def __init__(self, context: RuntimeContext, length: int, field: str = "tokens",
                 eos: int | None = None, keep_remainder: bool = False):
        if length < 1:
            raise InvalidArgumentError(f"length must be >= 1, got {length}")
        self.context, self.length, self.field = context, length, field
        self.eos, self.keep_remainder = eos, keep_remainder
        self._tokens: list[np.ndarray] = []
        self._docs: list[np.ndarray] = []
        self._pending = 0
        self._doc = 0
        self._origins: list[tuple] = []  # provenance of documents _first, _first + 1, ...
        self._first = 0

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
        if PROVENANCE_FIELDS[1] in sample:
            self._origins.append(tuple(sample[k] for k in PROVENANCE_FIELDS))
        self._doc += 1
        self._pending += len(tokens)
        return self._emit(final=False)

    def flush(self) -> list[dict]:
        return self._emit(final=True)

    def _emit(self, final: bool) -> list[dict]:
        if self._pending < self.length and not (final and self.keep_remainder and self._pending):
            if final:
                self._tokens, self._docs, self._pending = [], [], 0
                self._origins, self._first = [], self._doc
            return []
        tokens, docs = np.concatenate(self._tokens), np.concatenate(self._docs)
        whole = len(tokens) // self.length * self.length
        cut = len(tokens) if final and self.keep_remainder else whole
        rows = []
        for lo in range(0, cut, self.length):
            d = docs[lo : lo + self.length]
            local = d - d[0]
            starts = np.concatenate(([0], np.flatnonzero(np.diff(local)) + 1))
            row = {"tokens": tokens[lo : lo + self.length], "doc_ids": local,
                   "cu_seqlens": np.append(starts, len(d)).astype(np.int32),
                   "position_ids": np.arange(len(d)) - starts[local]}
            if self._origins:
                held = self._origins[int(d[0]) - self._first : int(d[-1]) - self._first + 1]
                for k, name in enumerate(PROVENANCE_FIELDS):
                    row[name] = [origin[k] for origin in held]
            rows.append(row)
        rest = slice(cut, None)
        self._tokens, self._docs = [tokens[rest]], [docs[rest]]
        self._pending = len(tokens) - cut
        if self._origins:  # keep the documents the next row starts with
            first = int(docs[cut]) if cut < len(docs) else self._doc
            del self._origins[: first - self._first]
            self._first = first
        return rows
