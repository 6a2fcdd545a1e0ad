"""Compiled kernels (private).  A failed import here is a broken install, not a fallback."""

import ctypes
import glob
import os


def _preload_blosc2():
    """Load the C-Blosc2 shipped in the installed blosc2 wheel, if the rpath did not.

    The extensions find libblosc2 through their rpath in wheels and in-place builds;
    editable installs built in a temporary environment have no valid rpath.  A library
    already loaded under the same soname satisfies the extension's dependency.
    """
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


try:
    from . import _codecs, _index, _io, _jinx, _records, _tar  # noqa: F401
except ImportError:
    _preload_blosc2()
    try:
        from . import _codecs, _index, _io, _jinx, _records, _tar  # noqa: F401
    except ImportError as exc:  # pragma: no cover - exercised only by broken installs
        raise ImportError(
            "hpcio's compiled kernels (hpcio._core) failed to import: the installation is "
            "broken or was not built. Reinstall with `pip install .` (or `pip install -e .`) "
            "from the source tree and read the compiler output; docs/install.md lists the "
            f"build requirements. Original error: {exc}"
        ) from exc
