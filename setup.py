"""Build of hpcio's compiled kernels (project metadata lives in pyproject.toml).

Environment switches:
  CFLAGS            respected; -O3 is added only when it names no -O level
  HPCIO_DEBUG=1     -O0 -g with C asserts enabled
  HPCIO_SANITIZE=1  AddressSanitizer + UndefinedBehaviorSanitizer (compile and link)
  HPCIO_ZSTD_PREFIX libzstd installed under PREFIX/include and PREFIX/lib (no pkg-config)

Nothing is downloaded: zstd's headers come from the system (pkg-config), C-Blosc2 from
the installed ``blosc2`` wheel, which ships its headers and shared library. The kernels
link libblosc2 first, so at run time they call the zstd that libblosc2 bundles and
exports (``hpcio info`` prints its version); the system libzstd only satisfies the link.
"""

import glob
import os
import shlex
import shutil
import subprocess
import sys
import tempfile

from setuptools import Extension, setup

HERE = os.path.dirname(os.path.abspath(__file__))
CSRC = "csrc"
ZSTD_HELP = (
    "hpcio needs the libzstd development files to build its kernels. Install them with "
    "`apt-get install libzstd-dev` (Debian/Ubuntu), `dnf install libzstd-devel` "
    "(RHEL/Rocky/Fedora) or `conda install zstd` (conda, with pkg-config), or set "
    "HPCIO_ZSTD_PREFIX to a directory holding include/zstd.h and lib/libzstd.so."
)


def env_flag(name):
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")


def zstd_flags():
    """(include_dirs, library_dirs, libraries, rpaths) for libzstd."""
    prefix = os.environ.get("HPCIO_ZSTD_PREFIX")
    if prefix:
        header = os.path.join(prefix, "include", "zstd.h")
        if not os.path.exists(header):
            sys.exit(f"error: HPCIO_ZSTD_PREFIX={prefix} has no include/zstd.h. {ZSTD_HELP}")
        libdir = os.path.join(prefix, "lib")
        return [os.path.join(prefix, "include")], [libdir], ["zstd"], [libdir]
    if shutil.which("pkg-config") is None:
        sys.exit(f"error: pkg-config not found (needed to locate libzstd). {ZSTD_HELP}")
    try:
        out = subprocess.run(
            ["pkg-config", "--cflags", "--libs", "libzstd"],
            check=True, capture_output=True, text=True,
        ).stdout
    except subprocess.CalledProcessError as exc:
        sys.exit(f"error: pkg-config cannot find libzstd ({exc.stderr.strip()}). {ZSTD_HELP}")
    includes, libdirs, libs = [], [], []
    for token in shlex.split(out):
        if token.startswith("-I"):
            includes.append(token[2:])
        elif token.startswith("-L"):
            libdirs.append(token[2:])
        elif token.startswith("-l"):
            libs.append(token[2:])
    return includes, libdirs, libs or ["zstd"], libdirs


def blosc2_flags():
    """(include_dir, lib_dir) of the C-Blosc2 shipped inside the blosc2 wheel."""
    try:
        import blosc2
    except ImportError:
        sys.exit("error: the blosc2 package is needed at build time (`pip install blosc2`); "
                 "its wheel provides the C-Blosc2 headers and library hpcio links against.")
    root = os.path.dirname(blosc2.__file__)
    include, lib = os.path.join(root, "include"), os.path.join(root, "lib")
    if not (os.path.exists(os.path.join(include, "blosc2.h"))
            and glob.glob(os.path.join(lib, "libblosc2.so*"))):
        sys.exit(f"error: the blosc2 package at {root} lacks include/blosc2.h or "
                 "lib/libblosc2.so; install a blosc2 wheel from PyPI (>= 3.0).")
    return include, lib


def is_temporary(path):
    tmp = os.path.realpath(tempfile.gettempdir())
    return os.path.commonpath([os.path.realpath(path), tmp]) == tmp


def compile_flags(debug, sanitize):
    """Extra compile and link arguments for the chosen build switches."""
    user = shlex.split(os.environ.get("CFLAGS", ""))
    compile_args = ["-std=gnu11", "-Wall", "-Wextra", "-Wno-unused-parameter",
                    "-Wno-unused-function", "-pthread"]
    link_args = ["-pthread"]
    if debug:
        compile_args += ["-O0", "-g", "-UNDEBUG"]
    elif not any(flag.startswith("-O") for flag in user):
        compile_args.append("-O3")
    if sanitize:
        san = ["-fsanitize=address,undefined", "-fno-omit-frame-pointer"]
        compile_args += san + ["-g"]
        link_args += san
    return user, compile_args, link_args


def c_string(text):
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def make_extensions():
    debug, sanitize = env_flag("HPCIO_DEBUG"), env_flag("HPCIO_SANITIZE")
    zstd_inc, zstd_libdirs, zstd_libs, zstd_rpaths = zstd_flags()
    blosc_inc, blosc_lib = blosc2_flags()
    import numpy

    user, compile_args, link_args = compile_flags(debug, sanitize)
    macros = [
        ("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION"),
        ("HPCIO_CFLAGS", c_string(" ".join(user + compile_args))),
        ("HPCIO_DEBUG", "1" if debug else "0"),
        ("HPCIO_SANITIZE", "1" if sanitize else "0"),
    ]
    # The extensions live in site-packages/hpcio/_core/, the library in
    # site-packages/blosc2/lib/: the relative rpath serves installed wheels, the
    # absolute one in-place builds.  An isolated build environment lives in a temporary
    # directory that vanishes (and that another user could recreate), so it gets no
    # absolute entry; hpcio._core then loads libblosc2 from the installed blosc2.
    rpaths = ["$ORIGIN/../../blosc2/lib"] + zstd_rpaths
    if not is_temporary(blosc_lib):
        rpaths.insert(0, blosc_lib)
    headers = sorted(glob.glob(os.path.join(CSRC, "*.h")))
    common = [os.path.join(CSRC, name) for name in ("common.c", "threads.c")]

    def kernel_extension(name, csources, codecs=False):
        """hpcio._core.<name> from its .pyx and the C kernels it calls."""
        return Extension(
            f"hpcio._core.{name}",
            sources=[f"hpcio/_core/{name}.pyx"] + common
            + [os.path.join(CSRC, c) for c in csources],
            depends=headers + glob.glob("hpcio/_core/*.pxd") + glob.glob("hpcio/_core/*.pxi"),
            include_dirs=[CSRC, numpy.get_include()]
            + ([blosc_inc] + zstd_inc if codecs else []),
            library_dirs=[blosc_lib] + zstd_libdirs if codecs else [],
            # libblosc2 exports the zstd it bundles; listing it first makes the
            # kernels and C-Blosc2 share that one zstd instead of mixing two versions.
            libraries=["blosc2"] + zstd_libs if codecs else [],
            runtime_library_dirs=rpaths if codecs else [],
            define_macros=macros,
            extra_compile_args=compile_args,
            extra_link_args=link_args,
        )

    extensions = [
        kernel_extension("_index", ["bisect.c", "offsets.c", "order.c", "scan.c"]),
        kernel_extension("_io", ["offsets.c", "fileio.c", "mapping.c", "readplan.c", "readahead.c"]),
        kernel_extension("_codecs", ["zstd.c", "blosc.c"], codecs=True),
        kernel_extension("_jinx", ["encodings.c", "json_text.c"]),
        kernel_extension("_tar", ["tar.c"]),
        kernel_extension("_records", ["columns.c", "fileio.c", "json_text.c", "json_scan.c",
                                     "json_fill.c"]),
    ]
    pyx = {os.path.splitext(os.path.basename(p))[0]
           for p in glob.glob("hpcio/_core/_*.pyx")}
    missing = pyx - {ext.name.rsplit(".", 1)[1] for ext in extensions}
    if missing:
        sys.exit(f"error: no extension defined for hpcio/_core/{sorted(missing)}.pyx")

    from Cython.Build import cythonize

    return cythonize(
        extensions,
        compiler_directives={"language_level": 3},
        quiet=True,
    )


os.chdir(HERE)
setup(ext_modules=make_extensions())
