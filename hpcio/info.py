"""What this hpcio installation is made of: ``hpcio info``.

:func:`collect` gathers the hpcio and Python versions, the platform, the compiled
kernels with their compiler/SIMD flags and codec library versions (from
``hpcio._core._codecs.build_info()``), the optional backends present, and the MPI
library when mpi4py is installed; :func:`format_text` renders it for a terminal.

Importing mpi4py.MPI initialises MPI, which must never happen as a side effect of
``import hpcio`` (it would hang or abort under some launchers), so the MPI library
version is asked of a child process.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import platform
import subprocess
import sys
import textwrap

from ._version import __version__

__all__ = ["collect", "format_text", "kernel_names", "BACKENDS"]

# (label, distribution name, import name) of the optional backends hpcio can use.
BACKENDS = (
    ("zarr", "zarr", "zarr"),
    ("h5py", "h5py", "h5py"),
    ("hdf5plugin", "hdf5plugin", "hdf5plugin"),
    ("mpi4py", "mpi4py", "mpi4py"),
    ("torch", "torch", "torch"),
    ("pyarrow", "pyarrow", "pyarrow"),
    ("msgpack", "msgpack", "msgpack"),
    ("webdataset", "webdataset", "webdataset"),
    ("streaming", "mosaicml-streaming", "streaming"),
    ("zstandard", "zstandard", "zstandard"),
    ("pillow", "pillow", "PIL"),
)
# Required dependencies, listed so a bug report shows the versions in use.
DEPENDENCIES = (
    ("numpy", "numpy"),
    ("blosc2", "blosc2"),
    ("xxhash", "xxhash"),
    ("orjson", "orjson"),
    ("tqdm", "tqdm"),
)

# Clearer names for build_info() keys in the text report (JSON keeps the keys).
_CORE_LABELS = {"zstd": "libzstd", "blosc2": "C-Blosc2", "simd": "SIMD", "cflags": "CFLAGS"}

_MPI_PROBE = "from mpi4py import MPI; print(MPI.Get_library_version().strip())"


def _dist_version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def _kernels() -> dict:
    """``build_info()`` of the compiled core, or ``{"error": ...}`` if it is broken."""
    try:
        from ._core import _codecs
    except ImportError as exc:
        return {"error": " ".join(str(exc).split())}
    return dict(_codecs.build_info())


def kernel_names(build: dict) -> list[str]:
    """The kernel names listed in a ``build_info()`` dict."""
    kernels = build.get("kernels", ())
    return list(kernels)


def _backends() -> dict:
    found = {}
    for label, dist, module in BACKENDS:
        version = _dist_version(dist) if importlib.util.find_spec(module) else None
        entry: dict = {"version": version}
        if label == "h5py" and version is not None:
            entry["mpi"] = _h5py_mpi()
        found[label] = entry
    return found


def _h5py_mpi() -> bool | str:
    try:
        import h5py
    except Exception as exc:  # a broken HDF5 install is worth reporting, not crashing on
        return f"import failed: {' '.join(str(exc).split())}"
    return bool(h5py.get_config().mpi)


def _mpi(timeout: float) -> dict | None:
    """The MPI library version string, from a child process; None without mpi4py."""
    if importlib.util.find_spec("mpi4py") is None:
        return None
    env = dict(os.environ)
    # A child of an `srun`/`mpiexec` rank would otherwise try to join that job; Open MPI
    # also aborts in MPI_Init when it sees a Slurm step without its PMI (SLURM_CONF kept).
    for key in [k for k in env if k.startswith(("PMI_", "PMIX_", "OMPI_", "HYDRA_", "SLURM_"))
                and k != "SLURM_CONF"]:
        del env[key]
    try:
        proc = subprocess.run(
            [sys.executable, "-c", _MPI_PROBE],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=env,
        )
    except subprocess.TimeoutExpired:
        return {"error": f"MPI initialisation took more than {timeout:g} s"}
    if proc.returncode != 0:
        detail = (proc.stderr.strip().splitlines() or [f"exit code {proc.returncode}"])[-1]
        return {"error": f"mpi4py failed to initialise MPI: {detail}"}
    return {"library": proc.stdout.replace("\0", "").strip()}  # Open MPI pads it with NULs


def collect(mpi: bool = True, mpi_timeout: float = 60.0) -> dict:
    """Everything ``hpcio info`` reports, as a JSON-able dict.

    Parameters
    ----------
    mpi : bool, default True
        Ask a child process for the MPI library version (initialises MPI there).
    mpi_timeout : float
        Seconds to wait for that child.
    """
    import hpcio

    return {
        "hpcio": {"version": __version__, "path": os.path.dirname(hpcio.__file__)},
        "python": {
            "version": platform.python_version(),
            "implementation": platform.python_implementation(),
            "executable": sys.executable,
        },
        "platform": {
            "system": platform.platform(),
            "machine": platform.machine(),
            "cpus": os.cpu_count(),
        },
        "core": _kernels(),
        "dependencies": {label: _dist_version(dist) for label, dist in DEPENDENCIES},
        "backends": _backends(),
        "mpi": _mpi(mpi_timeout) if mpi else {"error": "not queried (--no-mpi)"},
    }


def _scalar(value) -> str:
    if isinstance(value, (list, tuple)):
        return " ".join(str(v) for v in value) if value else "(none)"
    return str(value)


def _lines(mapping: dict, indent: int) -> list[str]:
    width = max((len(str(k)) for k in mapping), default=0)
    out = []
    for key, value in mapping.items():
        pad = " " * indent
        if isinstance(value, dict):
            out.append(f"{pad}{key}")
            out.extend(_lines(value, indent + 2))
        else:
            out.append(f"{pad}{str(key).ljust(width)}  {_scalar(value)}")
    return out


def format_text(info: dict) -> str:
    """``collect()``'s result as aligned text for a terminal."""
    py = info["python"]
    lines = [
        f"hpcio {info['hpcio']['version']}  ({info['hpcio']['path']})",
        f"python {py['version']} ({py['implementation']})  {py['executable']}",
        f"platform {info['platform']['system']}  {info['platform']['cpus']} CPUs",
    ]
    core = info["core"]
    if "error" in core:
        lines.append(f"compiled core: BROKEN: {core['error']}")
    else:
        kernels = kernel_names(core)
        lines.append(f"compiled core: {len(kernels)} kernels")
        lines.extend(textwrap.wrap(
            "  ".join(kernels), 88, initial_indent="  ", subsequent_indent="  ",
            break_long_words=False, break_on_hyphens=False,
        ))
        shown = {_CORE_LABELS.get(k, k): v for k, v in core.items() if k != "kernels"}
        lines.extend(_lines(shown, 2))
    lines.append("dependencies")
    lines.extend(_lines({k: v or "MISSING" for k, v in info["dependencies"].items()}, 2))
    lines.append("optional backends")
    shown = {}
    for label, entry in info["backends"].items():
        text = entry["version"] or "-"
        if "mpi" in entry:
            text += f" (MPI: {'yes' if entry['mpi'] is True else 'no' if entry['mpi'] is False else entry['mpi']})"
        shown[label] = text
    lines.extend(_lines(shown, 2))
    mpi = info["mpi"]
    if mpi is None:
        lines.append("MPI: mpi4py not installed")
    elif "error" in mpi:
        lines.append(f"MPI: {mpi['error']}")
    else:
        first, *more = mpi["library"].splitlines() or [""]
        lines.append(f"MPI: {first.strip()}")
        lines.extend(f"  {m.strip()}" for m in more if m.strip())
    return "\n".join(lines)
