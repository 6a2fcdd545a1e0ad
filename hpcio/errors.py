"""The hpcio error hierarchy.

Every error raised on purpose by hpcio is an :class:`HpcioError`; most also inherit the
built-in exception a Python user would expect, so ``except IndexError`` or
``except FileNotFoundError`` keep working.  Messages say what was expected, what was
found, and where: file, byte offset and sample index when they are known.
"""

from __future__ import annotations

import json
import os

__all__ = [
    "HpcioError",
    "CorruptShardError",
    "TruncatedShardError",
    "ShardNotFoundError",
    "ShardReadError",
    "IndexOutOfRangeError",
    "DecodeError",
    "InvalidJSONError",
    "DecompressionLimitError",
    "OutOfMemoryError",
    "ShardChangedError",
    "UnknownFormatError",
    "FormatSniffError",
    "SchemaError",
    "UnsupportedValueError",
    "MissingDependencyError",
    "CapabilityError",
    "StagingError",
    "NodeCacheError",
    "InsufficientSpaceError",
    "ChecksumMismatchError",
    "PathEscapeError",
    "ExternalStorageError",
    "SymlinkError",
    "SourceChangedError",
    "WriterSpaceError",
    "PathExistsError",
    "PlanError",
    "ResumeError",
    "BadSampleError",
    "MPIWorldMismatchError",
    "FormatContractError",
    "FormatPluginError",
    "TierEmulatorError",
    "UnstableIdentityError",
    "CacheTimeoutError",
    "StepPlanError",
    "UnequalStepsError",
    "TuningError",
    "OptionError",
    "DatasetChangedError",
    "ConversionLockedError",
    "TargetFormatError",
    "ByteSizeError",
    "ConversionInterrupted",
    "LineageNotFoundError",
    "InvalidArgumentError",
    "KeyNotFoundError",
    "WrongTypeError",
    "UsageError",
    "ClosedError",
    "BenchmarkError",
    "ToolNotFoundError",
    "SelfCheckError",
    "CollateError",
    "where",
]


def where(path=None, offset=None, sample=None) -> str:
    """Format the location suffix used by every hpcio error message.

    >>> where("a/shard.00000.mds", 1024, 7)
    'a/shard.00000.mds, byte offset 1024, sample 7'
    >>> where(sample=3)
    'sample 3'
    """
    parts = []
    if path is not None:
        parts.append(str(path))
    if offset is not None and offset >= 0:
        parts.append(f"byte offset {offset}")
    if sample is not None and sample >= 0:
        parts.append(f"sample {sample}")
    return ", ".join(parts)


class HpcioError(Exception):
    """Base class of every error hpcio raises on purpose.

    ``path``, ``offset`` and ``sample`` are kept as attributes (``None`` when unknown)
    so callers such as the converter's ``--skip-bad`` can record them.
    """

    def __init__(self, message: str, *, path=None, offset=None, sample=None):
        self.path = None if path is None else str(path)
        self.offset = offset if offset is None or offset >= 0 else None
        self.sample = sample if sample is None or sample >= 0 else None
        loc = where(path, offset, sample)
        super().__init__(f"{message} ({loc})" if loc else message)


class CorruptShardError(HpcioError, ValueError):
    """A shard's bytes contradict its own structure (offsets, header, checksum)."""


class TruncatedShardError(CorruptShardError):
    """A shard ends before the bytes its header or index promise."""


class ShardNotFoundError(HpcioError, FileNotFoundError):
    """A shard or index file named by a dataset is missing."""


class IndexOutOfRangeError(HpcioError, IndexError):
    """A sample index outside ``[-len(ds), len(ds))``."""


class DecodeError(HpcioError, ValueError):
    """A value could not be decoded (codec error, bad base85, bad JSON, ...)."""


class InvalidJSONError(json.JSONDecodeError, DecodeError):
    """A stored JSON value that does not parse; still a :class:`json.JSONDecodeError`
    (``msg``, ``doc``, ``pos``), so code written against the json module keeps working."""

    def __init__(self, message: str, doc: str = "", pos: int = 0, *, path=None, offset=None, sample=None):
        self.msg, self.doc, self.pos = message, doc, pos
        self.lineno = doc.count("\n", 0, pos) + 1
        self.colno = pos - doc.rfind("\n", 0, pos)
        HpcioError.__init__(self, message, path=path, offset=offset, sample=sample)

    def __reduce__(self):
        return type(self), (self.args[0], self.doc, self.pos)


class DecompressionLimitError(DecodeError):
    """A compressed value would decompress to more than the configured limit."""


class OutOfMemoryError(HpcioError, MemoryError):
    """Memory ran out while reading or decoding values: the process's memory, not the
    data, is at fault, so this is never a :class:`DecodeError` or a corrupt shard."""


class UnknownFormatError(HpcioError, KeyError):
    """A format name that is not registered."""

    def __str__(self):  # KeyError would repr() the message
        return self.args[0] if self.args else ""


class FormatSniffError(HpcioError, ValueError):
    """``hpcio.open`` could not tell which format a path holds."""


class SchemaError(HpcioError, ValueError):
    """A sample does not fit the columns/fields a writer was set up with."""


class UnsupportedValueError(HpcioError, TypeError):
    """A value a format cannot store faithfully."""


class MissingDependencyError(HpcioError, ImportError):
    """An optional backend (zarr, h5py, mpi4py, torch, ...) is not installed."""


class CapabilityError(HpcioError, NotImplementedError):
    """An operation the chosen format does not support (e.g. random access on a stream)."""


class ShardReadError(HpcioError, OSError):
    """A system call reading a shard failed; ``errno`` holds the operating system's code."""

    @classmethod
    def from_errno(cls, code: int, strerror: str, path=None):
        """The error ``OSError(code, strerror, path)`` would be: the same message,
        ``errno``, ``strerror`` and ``filename``."""
        exc = cls.__new__(cls)
        OSError.__init__(exc, code, strerror, path)
        exc.path = None if path is None else str(path)
        exc.offset = exc.sample = None
        return exc


class ShardChangedError(ShardReadError):
    """A shard file shrank while a reader had it mapped (replaced or truncated under a
    running job); reading the lost pages would kill the process with SIGBUS."""


class DatasetChangedError(ShardChangedError):
    """A staged dataset was staged again while a reader had it open: the shard it was
    about to open may be of the new version (:mod:`hpcio._published`)."""


class StagingError(HpcioError, OSError):
    """Copying a dataset between storage tiers failed (I/O error, quota, bad manifest)."""


class NodeCacheError(StagingError):
    """A node cache could not fetch a shard from the shared tier or keep it on the node
    (read error, full node disk, a cache directory that is not the dataset's)."""


class InsufficientSpaceError(StagingError):
    """The destination tier has fewer free bytes or inodes than a staging plan needs."""


class ChecksumMismatchError(CorruptShardError):
    """A file's checksum differs from the one recorded in its index or manifest."""


class SourceChangedError(StagingError):
    """A source file changed (size or modification time) while it was being copied;
    ``now`` holds its ``os.stat_result`` when known."""

    now: os.stat_result | None = None


class SymlinkError(StagingError):
    """A symbolic link staging will not copy as asked: one in the source leading outside
    it, or one in the destination that a copy would write through."""


# --- names read from files --------------------------------------------------------------


class PathEscapeError(HpcioError, ValueError):
    """A name read from a file (a manifest entry, a part or field name, an index entry)
    leads outside the directory it belongs to."""


class ExternalStorageError(PathEscapeError):
    """An HDF5 dataset keeps its values in another file (external storage, an external
    link or a virtual dataset), which a reader would open wherever it points."""


# --- writing ---------------------------------------------------------------------------


class PathExistsError(HpcioError, FileExistsError):
    """A file or directory a writer would create is already there."""


class WriterSpaceError(HpcioError, OSError):
    """A writer found too little free space to finish a file, and stopped before the
    library writing it would fail (HDF5 crashes on a full disk)."""


# --- conversion ------------------------------------------------------------------------


class PlanError(HpcioError, ValueError):
    """The requested shard layout cannot be made from these inputs."""


class ResumeError(HpcioError, RuntimeError):
    """A previous partial run is in the way, or cannot be resumed with these inputs."""


class ConversionLockedError(ResumeError):
    """Another conversion is writing the same output (the message names its host and
    pid)."""


class BadSampleError(HpcioError, ValueError):
    """A sample failed and ``skip_bad`` was not set; ``bad`` holds its
    :class:`hpcio.convert.faults.BadSample` record."""

    def __init__(self, bad):
        self.bad = bad
        super().__init__(
            f"bad sample, conversion stopped ({bad.describe()}); "
            "pass --skip-bad to leave such samples out and list them in a report, or fix the sample and "
            "run the same command again"
        )


class LineageNotFoundError(HpcioError, FileNotFoundError):
    """A dataset without a lineage record (not converted by hpcio, or before it kept
    one), or a record whose sidecar is missing."""


# --- MPI ------------------------------------------------------------------------------


class MPIWorldMismatchError(HpcioError, RuntimeError):
    """The launcher started more tasks than MPI sees: the launcher and the MPI library do
    not share a process-management interface (e.g. ``srun --mpi=none`` with MPICH)."""


# --- the format contract (hpcio.formats.contract) ------------------------------------------


class FormatContractError(HpcioError, TypeError):
    """A format module breaks the format contract: a required name is missing, or an
    optional hook has another signature than its protocol's."""


class FormatPluginError(HpcioError, ImportError):
    """A format registered through the ``hpcio.formats`` entry-point group cannot be
    loaded; the message names the distribution and the entry point."""


# --- benchmarks -------------------------------------------------------------------------


class TierEmulatorError(HpcioError, OSError):
    """The emulated storage tier (``hpcio.bench.tier``) could not be built, mounted or unmounted."""


class ToolNotFoundError(HpcioError, FileNotFoundError):
    """An external program hpcio runs (``mpiexec``, ...) is not on ``PATH``."""


class SelfCheckError(HpcioError, AssertionError, RuntimeError):
    """hpcio's own end-to-end checks (the demo tour, the mutation suite's pristine
    datasets) found a result other than the one they know to be right: a bug in hpcio
    or in the environment, not in the caller's data.  Both built-in bases: the checks
    raised AssertionError, their child-process failures RuntimeError."""


class BenchmarkError(HpcioError, RuntimeError):
    """A benchmarked system failed its run; the message holds the tail of its output."""


# --- pipelines and process tuning --------------------------------------------------------


class UnstableIdentityError(HpcioError, TypeError):
    """A stage function whose identity is not stable across runs (lambda, closure)."""


class CacheTimeoutError(HpcioError, TimeoutError):
    """Cache parts written by other consumers did not appear in time."""


class StepPlanError(HpcioError, ValueError):
    """A planned pipeline stage cannot plan or fill its groups: a document longer than a
    row, or a length read at run time that differs from the planned one."""


class UnequalStepsError(HpcioError, RuntimeError):
    """A pipeline whose consumers would yield different numbers of steps, run where
    every consumer must take the same number (DDP)."""


class TuningError(HpcioError, ValueError):
    """An unknown name in ``HPCIO_TUNE`` (see :func:`hpcio.tune`)."""


# --- arguments and options ------------------------------------------------------------


class OptionError(HpcioError, TypeError, ValueError):
    """An unknown option (the message lists the valid ones), or an option value a command
    cannot use: a usage error, which the command line reports with exit code 2.

    Both built-in bases: Python reports an unknown keyword as TypeError, a bad
    command-line value as ValueError, and callers may catch either."""


class TargetFormatError(OptionError, CapabilityError):
    """A conversion asked to write a format that hpcio convert cannot write (unknown, or
    without the sharded-writing hook): a usage error, exit code 2 on the command line."""


class InvalidArgumentError(HpcioError, ValueError):
    """An argument or option value outside what the function accepts."""


class WrongTypeError(HpcioError, TypeError):
    """An argument of a type the function does not take."""


class KeyNotFoundError(HpcioError, KeyError):
    """A name (field, column, stage, ...) that the object does not hold."""

    def __str__(self):  # KeyError would repr() the message
        return self.args[0] if self.args else ""


class UsageError(HpcioError, RuntimeError):
    """An operation that cannot run in the current state (a missing set-up step, a
    component used where it does not belong, an environment that gives another result
    than the one expected)."""


class ClosedError(HpcioError, ValueError):
    """Use of a reader, writer or shard file already closed (ValueError, as Python's
    closed files raise)."""


class ByteSizeError(HpcioError, ValueError):
    """A byte size that cannot be read (names the option or variable it came from)."""


class ConversionInterrupted(HpcioError, RuntimeError):
    """A conversion stopped on a signal at a round boundary; its partial output resumes."""

    #: ``EX_TEMPFAIL``: a temporary failure, the same command will succeed when run again.
    exit_code = 75


class CollateError(HpcioError, ValueError):
    """Samples that cannot be collated as asked (padding tensors of different ranks)."""
