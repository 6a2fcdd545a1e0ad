"""hpcio: training-data shards for HPC clusters.

Convert raw datasets into shards (MDS, JINX, WebDataset, Zarr, HDF5), stage them onto
the fastest storage tier, and read them back fast: iterate, global shuffle, sort and
split across ranks and dataloader workers.

>>> import hpcio
>>> sorted(hpcio.available_formats())[:3]
['hdf5', 'imagefolder', 'jinx']
"""

import importlib as _importlib
import importlib.util as _importlib_util
import sys as _sys
import types as _types
from typing import TYPE_CHECKING

from ._version import __version__

if TYPE_CHECKING:  # what the names below are, for type checkers; bound on first use
    from .columns import ListColumn, VarColumn, ViewColumn
    from .convert.api import convert
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

# The public names and the modules that define them.  ``import hpcio`` imports none of
# them: a fresh process pays for a module when it first uses one of its names, so a
# reader's import and open cost what reading needs (see docs/performance.md).
_HOMES = {
    **dict.fromkeys(("ListColumn", "VarColumn", "ViewColumn"), "columns"),
    "convert": "convert.api",
    **dict.fromkeys(("Dataset", "open", "open_writer"), "dataset"),
    **dict.fromkeys(("Location", "locate"), "lineage"),
    **dict.fromkeys(("Mixture", "mix"), "mixture"),
    "NodeCache": "nodecache",
    **dict.fromkeys(("Capabilities", "available_formats", "get_format", "register_format", "sniff_format"),
                    "registry"),
    "tune": "tuning",
    **dict.fromkeys(("CapabilityError", "ChecksumMismatchError", "ClosedError", "CorruptShardError", "DecodeError", "DecompressionLimitError", "FormatSniffError", "HpcioError", "IndexOutOfRangeError", "InsufficientSpaceError", "InvalidArgumentError", "KeyNotFoundError", "LineageNotFoundError", "MissingDependencyError", "OptionError", "OutOfMemoryError", "SchemaError", "ShardChangedError", "ShardNotFoundError", "StagingError", "TruncatedShardError", "UnknownFormatError", "UnsupportedValueError", "WrongTypeError"), "errors"),
}


def __getattr__(name: str):
    home = _HOMES.get(name)
    if home is not None:
        value = getattr(_importlib.import_module(f".{home}", __name__), name)
    elif not name.startswith("__") and _importlib_util.find_spec(f"{__name__}.{name}") is not None:
        value = _importlib.import_module(f".{name}", __name__)  # ``hpcio.tuning`` and the like
    else:
        raise AttributeError(f"module 'hpcio' has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_HOMES))


class _Package(_types.ModuleType):
    """``hpcio`` itself.  ``hpcio.convert`` is the function, though a package of that
    name exists: importing ``hpcio.convert.<module>`` binds the function, not the package
    the import system would bind (``from hpcio.convert import ...`` still reaches it)."""

    def __setattr__(self, name, value):
        if name == "convert" and isinstance(value, _types.ModuleType):
            value = _importlib.import_module(".convert.api", __name__).convert
        super().__setattr__(name, value)


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


_sys.modules[__name__].__class__ = _Package
