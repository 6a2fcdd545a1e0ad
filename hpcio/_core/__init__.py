"""Compiled kernels (private).  A failed import here is a broken install, not a fallback."""

try:
    from . import _codecs, _index, _io, _jinx  # noqa: F401
except ImportError as exc:  # pragma: no cover - exercised only by broken installs
    raise ImportError(
        "hpcio's compiled kernels (hpcio._core) failed to import: the installation is "
        "broken or was not built. Reinstall with `pip install .` (or `pip install -e .`) "
        "from the source tree and read the compiler output; docs/install.md lists the "
        f"build requirements. Original error: {exc}"
    ) from exc
