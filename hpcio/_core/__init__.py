"""Compiled kernels (private).  A failed import here is a broken install, not a fallback.

Each extension is loaded on first use (``from hpcio._core import _records`` asks this
package for the attribute first, see PEP 562), so opening an uncompressed MDS dataset does
not pay for loading the codecs and their libraries: in a fresh process that start-up is
part of the first ``hpcio.open``.
"""

import importlib

_EXTENSIONS = frozenset({"_codecs", "_index", "_io", "_jinx", "_records", "_tar"})


def _preload_blosc2() -> None:
    """Load the C-Blosc2 shipped in the installed blosc2 wheel, if the rpath did not.

    The extensions find libblosc2 through their rpath in wheels and in-place builds;
    editable installs built in a temporary environment have no valid rpath.  A library
    already loaded under the same soname satisfies the extension's dependency.
    """
    import ctypes
    import glob
    import os

    try:
        import blosc2
    except ImportError:
        return
    for lib in sorted(glob.glob(os.path.join(os.path.dirname(blosc2.__file__), "lib",
                                             "libblosc2.so.*"))):
        try:
            ctypes.CDLL(lib, mode=os.RTLD_LOCAL)
            return
        except OSError:
            continue


def __getattr__(name: str):
    if name not in _EXTENSIONS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    try:
        module = importlib.import_module(f"{__name__}.{name}")
    except ImportError:
        _preload_blosc2()
        try:
            module = importlib.import_module(f"{__name__}.{name}")
        except ImportError as exc:  # pragma: no cover - exercised only by broken installs
            raise ImportError(
                "hpcio's compiled kernels (hpcio._core) failed to import: the installation is "
                "broken or was not built. Reinstall with `pip install .` (or `pip install -e .`) "
                "from the source tree and read the compiler output; docs/install.md lists the "
                f"build requirements. Original error: {exc}"
            ) from exc
    globals()[name] = module
    return module


def load_all() -> None:
    """Import every extension now (install checks): raises ImportError if one fails."""
    for name in sorted(_EXTENSIONS):
        __getattr__(name)
