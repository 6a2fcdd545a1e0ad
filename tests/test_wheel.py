"""The manylinux wheel of ``make wheel`` installed where nothing can compile.

The machine state is made, not assumed: a fresh ``python -m venv`` (no system
site-packages), ``PATH`` reduced to a directory holding only a link to that venv's
python, ``CC``/``CXX``/``CFLAGS``/``LDFLAGS``/``PKG_CONFIG_PATH`` and the like removed, and
every install ``--only-binary=:all:`` (hpcio itself ``--no-index`` from ``dist/``), so a
step that wanted to build anything would fail instead of quietly compiling.  The -dev
packages cannot be removed here (the dev venv builds against them), so every step runs in
a mount namespace (``unshare --mount``, as root) in which what they install is gone:
empty directories are mounted over the header and build-metadata directories
(:data:`DEV_DIRS`: ``zstd.h``, ``libzstd.pc``, zstd's CMake files...), and the test checks
they are gone there.  It shows that nothing of them is needed: pip built no wheel, and
the kernels resolve C-Blosc2 (with the zstd it bundles) from ``hpcio.libs/``, in
``ldd``'s view and in the running process's memory map.

Marker ``wheel``, outside the default suite: ``make test-wheel`` builds the wheel first and
sets ``HPCIO_REQUIRE_WHEEL=1``, so a missing wheel fails there instead of skipping.
"""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys
import time
import zipfile

import pytest

from hpcio.testing.environment import missing

pytestmark = pytest.mark.wheel

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DIST = os.environ.get("HPCIO_WHEEL_DIR", os.path.join(REPO, "dist"))
# Nothing that compiles or locates libraries for a compile may be on the install's PATH.
BUILD_TOOLS = ("cc", "c++", "gcc", "g++", "clang", "clang++", "ld", "ld.gold", "ld.bfd", "pkg-config",
               "pkgconf", "make", "cmake", "ninja", "cython")
# Variables that would point a build at a compiler, flags or libraries.
BUILD_VARIABLES = ("CC", "CXX", "CPP", "LDSHARED", "CFLAGS", "CXXFLAGS", "CPPFLAGS", "LDFLAGS", "CPATH",
                   "C_INCLUDE_PATH", "LIBRARY_PATH", "LD_LIBRARY_PATH", "PKG_CONFIG_PATH", "HPCIO_ZSTD_PREFIX",
                   "PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "HPCIO_DEBUG", "HPCIO_SANITIZE")
# What -dev packages install for a build: headers, pkg-config and CMake files.
DEV_DIRS = ("/usr/include", "/usr/local/include", "/usr/lib/x86_64-linux-gnu/pkgconfig", "/usr/share/pkgconfig",
            "/usr/lib/x86_64-linux-gnu/cmake", "/usr/lib/pkgconfig")
DEV_FILES = ("/usr/include/zstd.h", "/usr/lib/x86_64-linux-gnu/pkgconfig/libzstd.pc")
# Libraries a manylinux wheel may take from the system (glibc's own).
SYSTEM_LIBS = ("linux-vdso.so", "libc.so", "libm.so", "libdl.so", "librt.so", "libpthread.so", "ld-linux")
# Each step, on a loaded 2-core node, stays far below these (a hang guard, not a budget).
INSTALL_TIMEOUT_S = 1800
RUN_TIMEOUT_S = 900


def _wheel() -> str:
    wheels = sorted(glob.glob(os.path.join(DIST, "hpcio-*-manylinux*.whl")))
    if not wheels:
        missing("WHEEL", f"no manylinux wheel in {DIST}: build one with `make wheel` (make test-wheel does)")
    if len(wheels) > 1:
        pytest.fail(f"more than one hpcio wheel in {DIST}: {wheels}", pytrace=False)
    return wheels[0]


def _requirements(wheel: str, extras: set[str]) -> list[str]:
    """The wheel's Requires-Dist for the base install plus ``extras``."""
    with zipfile.ZipFile(wheel) as z:
        name = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        metadata = z.read(name).decode()
    out = []
    for line in metadata.splitlines():
        if not line.startswith("Requires-Dist:"):
            continue
        requirement, _, marker = line.split(":", 1)[1].strip().partition(";")
        extra = marker.split("extra ==")[-1].strip().strip("'\"") if "extra ==" in marker else None
        if extra is None or extra in extras:
            out.append(requirement.strip())
    return out


def _without_dev_files(cmd) -> list[str]:
    """``cmd`` run in a private mount namespace in which :data:`DEV_DIRS` are empty."""
    if os.geteuid() != 0 or not os.path.exists("/usr/bin/unshare"):
        missing("WHEEL", "the install test hides the -dev files in a mount namespace: it needs root and unshare")
    hide = " && ".join(f"/usr/bin/mount -t tmpfs -o size=1m,mode=0755 none {d}" for d in DEV_DIRS
                       if os.path.isdir(d))
    return ["/usr/bin/unshare", "--mount", "--propagation", "private", "/bin/sh", "-c",
            f'{hide} && exec "$@"', "sh", *map(str, cmd)]


def _run(cmd, env, cwd, timeout):
    proc = subprocess.run(_without_dev_files(cmd), env=env, cwd=cwd, capture_output=True, text=True,
                          timeout=timeout)
    assert proc.returncode == 0, f"{cmd} exited {proc.returncode}:\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
    return proc


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """(venv, env, cwd, pip output) of a fresh venv with the wheel installed, no compiler."""
    wheel = _wheel()
    root = tmp_path_factory.mktemp("wheel")
    venv = root / "venv"
    # The base interpreter, not the dev venv's, and none of its site-packages.
    base = getattr(sys, "_base_executable", sys.executable)
    subprocess.run([base, "-m", "venv", str(venv)], check=True, timeout=600)
    python = venv / "bin" / "python"

    bin_dir = root / "bin"  # the whole PATH: the venv's python and nothing else
    bin_dir.mkdir()
    (bin_dir / "python").symlink_to(python)
    env = {k: v for k, v in os.environ.items() if k not in BUILD_VARIABLES}
    env["PATH"] = str(bin_dir)
    cwd = root / "work"  # not the source tree, whose hpcio/ would shadow the installed one
    cwd.mkdir()

    probe = _run([str(python), "-c", "import json, os, shutil; print(json.dumps([[shutil.which(t) for t in "
                  f"{BUILD_TOOLS!r}], [f for f in {DEV_FILES!r} if os.path.exists(f)]]))"], env, cwd, 120)
    tools, dev_files = json.loads(probe.stdout)
    found = {tool: where for tool, where in zip(BUILD_TOOLS, tools) if where}
    assert not found, f"build tools reachable in the install's environment: {found}"
    assert not dev_files, f"-dev files not hidden in the install's namespace: {dev_files}"

    started = time.monotonic()
    pip = [str(python), "-m", "pip", "install", "--only-binary=:all:", "--no-cache-dir"]
    # hpcio's runtime dependencies (and Pillow, the demo extra) from the index, as wheels...
    deps = _run(pip + _requirements(wheel, {"demo"}), env, cwd, INSTALL_TIMEOUT_S)
    # ...then hpcio from dist/ alone: it must need nothing more.
    own = _run(pip + ["--no-index", "--find-links", DIST, "hpcio[demo]"], env, cwd, INSTALL_TIMEOUT_S)
    log = deps.stdout + deps.stderr + own.stdout + own.stderr
    print(f"wheel install: {time.monotonic() - started:.1f} s for {os.path.basename(wheel)}")
    return venv, env, cwd, log


def test_install_compiled_nothing(installed):
    _venv, _env, _cwd, log = installed
    assert "Successfully installed" in log and "hpcio-0.1.0" in log
    # pip says "Building wheel for X" before running any build backend
    assert "Building wheel" not in log and "setup.py" not in log, log[-4000:]


def test_kernels_link_the_bundled_blosc2_and_only_glibc_from_the_system(installed):
    venv, env, cwd, _log = installed
    site = glob.glob(str(venv / "lib" / "python*" / "site-packages"))[0]
    libs = os.path.join(site, "hpcio.libs")
    bundled = glob.glob(os.path.join(libs, "libblosc2-*.so*"))
    assert len(bundled) == 1, os.listdir(libs) if os.path.isdir(libs) else f"no {libs}"
    # the zstd the kernels call is the one libblosc2 bundles and exports
    symbols = subprocess.run(["readelf", "--dyn-syms", "--wide", bundled[0]], capture_output=True, text=True,
                             check=True).stdout
    assert any(line.split()[-1:] == ["ZSTD_versionNumber"] and " UND " not in line for line in symbols.splitlines())

    extensions = sorted(glob.glob(os.path.join(site, "hpcio", "_core", "*.so")))
    assert len(extensions) == 6, extensions
    for ext in extensions:
        ldd = subprocess.run(["ldd", ext], capture_output=True, text=True, check=True).stdout
        resolved = {}  # soname -> the file ldd found for it
        for line in ldd.splitlines():
            name, _, where = line.strip().partition(" => ")
            name = name.split(" (")[0]
            resolved[os.path.basename(name)] = (where or name).split(" (")[0]
        assert "not found" not in ldd, f"{ext}:\n{ldd}"
        foreign = {n: w for n, w in resolved.items() if not n.startswith(SYSTEM_LIBS)
                   and not os.path.realpath(w).startswith(os.path.realpath(libs) + os.sep)}
        assert not foreign, f"{os.path.basename(ext)} resolves libraries outside hpcio.libs:\n{ldd}"
        assert not [n for n in resolved if "zstd" in n], f"{ext} links a libzstd of its own:\n{ldd}"
        if "_codecs" in ext:
            blosc = [w for n, w in resolved.items() if "blosc2" in n]
            assert blosc and os.path.realpath(blosc[0]) == os.path.realpath(bundled[0]), ldd

    # In the running process too: the codecs' libblosc2 is the bundled copy, and no
    # libzstd from the system is mapped.
    code = ("import hpcio, hpcio._core as c; c.load_all(); "
            "print(hpcio.__file__); print(open('/proc/self/maps').read())")
    out = _run([str(venv / "bin" / "python"), "-c", code], env, cwd, RUN_TIMEOUT_S).stdout
    where, maps = out.split("\n", 1)
    assert where.startswith(site), where
    mapped = {fields[5] for fields in map(str.split, maps.splitlines()) if len(fields) >= 6}
    assert os.path.realpath(bundled[0]) in {os.path.realpath(p) for p in mapped}, sorted(mapped)
    assert not [p for p in mapped if "libzstd" in p], sorted(p for p in mapped if "zstd" in p)


def test_hpcio_info_and_the_demo_run_from_the_wheel(installed):
    venv, env, cwd, _log = installed
    hpcio = str(venv / "bin" / "hpcio")
    info = _run([hpcio, "info"], env, cwd, RUN_TIMEOUT_S).stdout
    print(info)
    assert str(venv) in info.splitlines()[0], info  # this venv's hpcio, not the source tree's
    assert "compiled core:" in info and "libzstd" in info and "C-Blosc2" in info, info
    assert "debug     False" in info and "sanitize  False" in info, info
    demo = _run([hpcio, "demo", "run", "-n", "20", "--out", str(cwd / "demo")], env, cwd, RUN_TIMEOUT_S)
    print(demo.stdout[-3000:])
    # the formats whose libraries the base install lacks (zarr, h5py) are left out
    rows = [line.split() for line in demo.stdout.splitlines()]
    checked = {row[0]: row for row in rows if "byte-exact" in row}
    assert {"mds", "jinx", "webdataset"} <= set(checked), demo.stdout[-3000:]
