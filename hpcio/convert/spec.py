"""What a conversion is asked to do: one frozen object, built once and passed down.

The command line (:func:`hpcio.cli.convert.output_options`) and the API
(:func:`hpcio.convert`) each build a :class:`ConvertOptions`; the driver
(:mod:`.driver`) checks it against the output format before any source is read, looks up
what it names (the map and filter functions, sizes from the environment) once, and hands
it to the shard writer (:class:`.writer.ShardWriter`).
"""

from __future__ import annotations

import dataclasses
import importlib
import os
from collections.abc import Callable, Mapping

import numpy as np

from ..errors import InvalidArgumentError, PlanError, WrongTypeError
from ..options import check_options, check_writer_options
from ..units import ByteSizeError, parse_bytes
from . import plan as planning

__all__ = ["ConvertOptions", "resolve_callable", "ROUND_BYTES_ENV", "PLACED_RUN_BYTES_ENV"]

# Bytes of samples a rank holds in one round when ``round_bytes`` is not given.
ROUND_BYTES_ENV = "HPCIO_CONVERT_ROUND_BYTES"
# The smallest mean run of records a rank writes into a shard's file for the ranks to
# place their records (:class:`.writer.WriteRoute`) rather than send them to its owner.
PLACED_RUN_BYTES_ENV = "HPCIO_CONVERT_PLACED_RUN_BYTES"

# Writer parameters the converter sets for every shard, which an option may not set.
_SET_BY_CONVERT = ("path", "shard_id", "num_shards")


@dataclasses.dataclass(frozen=True)
class ConvertOptions:
    """How to convert: every option of :func:`hpcio.convert` but the sources, the
    destination, the output format and the communicator.

    Parameters
    ----------
    from_format
        Read every source as this format instead of sniffing.
    compression
        Passed to the output writer (e.g. ``sample::zstd`` for MDS).
    shard_size, num_shards
        Target bytes per shard, or an exact shard count.
    ngpus, nworkers, shards_multiple_of
        The shard count is a multiple of ``shards_multiple_of`` if given, else of
        ``ngpus * nworkers``.
    fields
        Keep only these fields.
    map, filter
        ``module:function`` (or callables): ``map(sample)`` returns the sample to write
        (or None to drop it); ``filter(sample)`` keeps the sample when true.
    skip, take, selection
        Convert samples ``skip .. skip+take`` of the sources in order, or exactly the
        global sample ids ``selection``.
    order
        ``"seeded"`` (samples spread over shards by ``seed``) or ``"source"``.
    skip_bad
        Leave out samples that fail, listing them in ``<dst>.bad-samples.jsonl``.
    resume
        Continue an interrupted run: only missing or damaged shards are written.
    seed
        Seed of the sample-to-shard assignment.
    round_bytes
        Bytes of samples each rank reads, exchanges and holds in one round (default
        ``$HPCIO_CONVERT_ROUND_BYTES``, else 512 MiB): smaller rounds use less memory.
        A seeded conversion of several rounds reads the sources once, ahead of the
        rounds, into a file per round in the staging directory (:mod:`.spill`).
    writer_options
        Further keyword arguments for the output format's writer.
    reader_options
        Keyword arguments for the sources' readers (e.g. which JSONL fields hold base64).
    progress
        Show progress on rank 0 (a bar on a terminal, plain lines otherwise).
    """

    from_format: str | None = None
    compression: str | None = None
    shard_size: int | None = None
    num_shards: int | None = None
    ngpus: int = 1
    nworkers: int = 1
    shards_multiple_of: int | None = None
    fields: list[str] | None = None
    map: str | Callable | None = None
    filter: str | Callable | None = None
    skip: int = 0
    take: int | None = None
    selection: np.ndarray | None = None
    order: str = "seeded"
    skip_bad: bool = False
    resume: bool = False
    seed: int = 0
    round_bytes: int | None = None
    writer_options: Mapping | None = None
    reader_options: Mapping | None = None
    progress: bool = True

    @classmethod
    def names(cls) -> list[str]:
        """The options, in order."""
        return [f.name for f in dataclasses.fields(cls)]

    @classmethod
    def from_keywords(cls, options: Mapping, also_valid: tuple[str, ...] = ()) -> ConvertOptions:
        """The options given as keyword arguments; an unknown one is an OptionError
        listing the valid ones (and ``also_valid``, names the caller takes itself)."""
        check_options(options, [*cls.names(), *also_valid], "convert")
        return cls(**options)

    @property
    def shards_multiple(self) -> int:
        """What the shard count is a multiple of."""
        return self.shards_multiple_of if self.shards_multiple_of is not None else self.ngpus * self.nworkers

    @property
    def output_writer_options(self) -> dict:
        """The keyword arguments of every shard's writer: ``writer_options`` and
        ``compression``."""
        opts = dict(self.writer_options or {})
        if self.compression is not None:
            opts["compression"] = self.compression
        return opts

    def check_against(self, fmt) -> None:
        """OptionError for a writer option the format module ``fmt`` does not take, or a
        reader option no source format (or ``from_format``) takes: what a conversion
        checks before it reads any input."""
        from ..sources.inputs import check_source_options

        check_writer_options(fmt, self.output_writer_options, skip=_SET_BY_CONVERT)
        check_source_options(self.reader_options, self.from_format)

    def resolved_round_bytes(self) -> int:
        """``round_bytes``, else ``$HPCIO_CONVERT_ROUND_BYTES``, else the default; positive."""
        if self.round_bytes is None:
            return env_bytes(ROUND_BYTES_ENV, planning.DEFAULT_ROUND_BYTES, minimum=1)
        if self.round_bytes < 1:
            raise PlanError(f"round_bytes (--round-size) must be positive, got {self.round_bytes}")
        return self.round_bytes


def placed_run_bytes() -> int:
    """``$HPCIO_CONVERT_PLACED_RUN_BYTES``, else the default; at least 0."""
    return env_bytes(PLACED_RUN_BYTES_ENV, planning.DEFAULT_PLACED_RUN_BYTES, minimum=0)


def env_bytes(name: str, default: int, minimum: int) -> int:
    """The byte size in ``$name`` (``4096``, ``256MB``, ``1GiB``), else ``default``; at
    least ``minimum``."""
    text = os.environ.get(name)
    if not text:
        return default
    try:
        # A plain integer first, so a negative count is refused as too small, not as
        # unreadable.
        value = int(text)
    except ValueError:
        try:
            value = parse_bytes(text, what=f"${name}")
        except ByteSizeError:
            raise PlanError(f"${name} must be a number of bytes, got {text!r}") from None
    if value < minimum:
        raise PlanError(f"${name} must be {'positive' if minimum == 1 else f'at least {minimum}'}, "
                        f"got {value}")
    return value


def resolve_callable(spec: str | Callable | None) -> Callable | None:
    """``"package.module:function"`` (or a callable) as a callable."""
    if spec is None or callable(spec):
        return spec
    module, sep, name = str(spec).partition(":")
    if not sep or not module or not name:
        raise InvalidArgumentError(f"expected module:function, got {spec!r}")
    obj = importlib.import_module(module)
    for attr in name.split("."):
        obj = getattr(obj, attr)
    if not callable(obj):
        raise WrongTypeError(f"{spec} is not callable")
    return obj


def spec_name(spec) -> str | None:
    """How the fingerprint and the lineage record name a map or filter."""
    if spec is None:
        return None
    if callable(spec):
        return f"{getattr(spec, '__module__', '?')}:{getattr(spec, '__qualname__', repr(spec))}"
    return str(spec)
