"""hpcio: training-data shards for HPC clusters.

Convert raw datasets into shards (MDS, JINX, WebDataset, Zarr, HDF5), stage them onto
the fastest storage tier, and read them back fast: iterate, global shuffle, sort and
split across ranks and dataloader workers.

>>> import hpcio
>>> sorted(hpcio.available_formats())[:3]
['hdf5', 'imagefolder', 'jinx']
"""

from ._version import __version__
from .columns import ListColumn, VarColumn, ViewColumn
from .dataset import Dataset, open, open_writer
from .errors import (
    CapabilityError,
    ChecksumMismatchError,
    ClosedError,
    CorruptShardError,
    DecodeError,
    DecompressionLimitError,
    FormatSniffError,
    HpcioError,
    IndexOutOfRangeError,
    InsufficientSpaceError,
    InvalidArgumentError,
    KeyNotFoundError,
    LineageNotFoundError,
    MissingDependencyError,
    OptionError,
    OutOfMemoryError,
    SchemaError,
    ShardChangedError,
    ShardNotFoundError,
    StagingError,
    TruncatedShardError,
    UnknownFormatError,
    UnsupportedValueError,
    WrongTypeError,
)
from .lineage import Location, locate
from .mixture import Mixture, mix
from .nodecache import NodeCache
from .registry import Capabilities, available_formats, get_format, register_format, sniff_format
from .tuning import tune

# isort: split
# Bound after the package ``hpcio.convert`` is imported, so ``hpcio.convert`` is this
# function (see :mod:`hpcio.convert.api`) and ``from hpcio.convert import ...`` the package.
from .convert.api import convert

__all__ = [
    "__version__",
    "Dataset",
    "Mixture",
    "mix",
    "NodeCache",
    "ListColumn",
    "VarColumn",
    "ViewColumn",
    "open",
    "open_writer",
    "convert",
    "stage",
    "locate",
    "Location",
    "tune",
    "available_formats",
    "get_format",
    "register_format",
    "sniff_format",
    "Capabilities",
    "HpcioError",
    "CapabilityError",
    "ChecksumMismatchError",
    "ClosedError",
    "CorruptShardError",
    "DecodeError",
    "OutOfMemoryError",
    "DecompressionLimitError",
    "FormatSniffError",
    "IndexOutOfRangeError",
    "InsufficientSpaceError",
    "InvalidArgumentError",
    "KeyNotFoundError",
    "LineageNotFoundError",
    "MissingDependencyError",
    "OptionError",
    "SchemaError",
    "ShardChangedError",
    "ShardNotFoundError",
    "StagingError",
    "TruncatedShardError",
    "UnknownFormatError",
    "UnsupportedValueError",
    "WrongTypeError",
]


def stage(src, dst, **options):
    """Copy the dataset at ``src`` to ``dst`` (usually a faster tier), verified and resumable.

    See :func:`hpcio.staging.stage` for the options (threads, dry run, node-local
    targets); under MPI every rank calls it with the same arguments.
    """
    from .options import check_options, option_names
    from .staging import stage as _stage

    check_options(options, option_names(_stage, skip=("src", "dst")), "stage")
    return _stage(src, dst, **options)
