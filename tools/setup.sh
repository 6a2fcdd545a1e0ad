#!/usr/bin/env bash
# Set up a development environment in .venv: system build dependencies, torch from the
# pinned wheels, then hpcio itself (editable, compiling the C/Cython kernels) with the
# test extra.  Idempotent: a second run only checks, unless the build inputs changed.
#
# Environment: PYTHON (interpreter for a new venv, default python3), VENV (default
# .venv), HPCIO_DEBUG / HPCIO_SANITIZE (build switches; part of the rebuild key),
# HPCIO_EXTRAS (further extras whose requirements to install, e.g. bench),
# HPCIO_TORCH_INDEX (the index of torch's CPU builds, tried first; empty: PyPI's build),
# HPCIO_SETUP (test, the default: torch and the test extra; demo: what `hpcio demo run`
# needs, the formats and demo extras, no torch).
set -euo pipefail

cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
PYTHON=${PYTHON:-python3}
TORCH_PINS=(torch==2.14.1 torchvision==0.29.1)
TORCH_INDEX=${HPCIO_TORCH_INDEX-https://download.pytorch.org/whl/cpu}
STAMP="$VENV/.hpcio-build-stamp"
PROFILE=${HPCIO_SETUP:-test}
case "$PROFILE" in
    test) EXTRAS=test ;;
    demo) EXTRAS=formats,demo ;;
    *) echo "setup: HPCIO_SETUP is test or demo, not '$PROFILE'" >&2; exit 2 ;;
esac

say() { printf 'setup: %s\n' "$*"; }

# --- 1. system packages: libzstd headers and pkg-config ---------------------------------
# HPCIO_ZSTD_PREFIX names a libzstd install that setup.py uses without pkg-config.
if [ -z "${HPCIO_ZSTD_PREFIX:-}" ] \
   && ! { command -v pkg-config >/dev/null 2>&1 && pkg-config --exists libzstd; }; then
    if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
        say "installing libzstd-dev and pkg-config with apt-get"
        export DEBIAN_FRONTEND=noninteractive
        # Update the package lists only when the install cannot find the packages.
        if ! apt-get install -y -q --no-install-recommends libzstd-dev pkg-config; then
            apt-get update -q
            apt-get install -y -q --no-install-recommends libzstd-dev pkg-config
        fi
    else
        echo "setup: libzstd development files are missing and cannot be installed here." >&2
        echo "setup: Debian/Ubuntu: apt-get install libzstd-dev pkg-config;" \
             "RHEL/Fedora: dnf install libzstd-devel pkgconf-pkg-config;" \
             "conda: conda install zstd pkg-config (see docs/install.md)" >&2
        exit 1
    fi
fi

# --- 1b. the storage tools the benchmarks and their tests use -------------------------
# libfuse3 builds the emulated remote tier (hpcio.bench.tier), fio measures the device's
# limits.  Optional: without them those tests and figures say what is missing.
if ! { pkg-config --exists fuse3 2>/dev/null && command -v fusermount3 >/dev/null && command -v fio >/dev/null; }; then
    if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
        say "installing libfuse3-dev, fuse3 and fio with apt-get"
        export DEBIAN_FRONTEND=noninteractive
        apt-get install -y -q --no-install-recommends libfuse3-dev fuse3 fio \
            || { apt-get update -q && apt-get install -y -q --no-install-recommends libfuse3-dev fuse3 fio; }
    else
        say "libfuse3-dev, fuse3 or fio missing: the emulated tier and device limits are unavailable"
    fi
fi

# --- 2. the virtual environment --------------------------------------------------------
if ! "$VENV/bin/python" -c 'import sys' >/dev/null 2>&1; then
    say "creating $VENV with $("$PYTHON" --version 2>&1)"
    "$PYTHON" -m venv "$VENV"
fi
PY="$VENV/bin/python"
"$PY" -c 'import sys; assert sys.version_info >= (3, 11), sys.version' || {
    echo "setup: $VENV uses $("$PY" --version 2>&1); hpcio needs Python >= 3.11 (set PYTHON=...)" >&2
    exit 1
}

# --- 3. torch first: streaming imports torchvision, and the pins must win ----------------
# (the test environment's only: the demo needs no torch)
if [ "$PROFILE" = test ] && ! "$PY" - "${TORCH_PINS[@]}" <<'PYEOF' >/dev/null 2>&1
import sys
from importlib.metadata import version
for pin in sys.argv[1:]:
    name, want = pin.split("==")
    assert version(name).split("+")[0] == want
PYEOF
then
    # The CPU builds where their index has the pins: on x86_64, PyPI's torch is the CUDA
    # build, whose nvidia-* and triton packages add about 4 GB to the venv for nothing
    # that the demo or the tests run.  Elsewhere (no such index reached) PyPI's build.
    cpu_pins=()
    if [ -n "$TORCH_INDEX" ] && [ "$(uname -m)" = x86_64 ] \
       && "$PY" - "$TORCH_INDEX" "${TORCH_PINS[@]}" <<'PYEOF' >/dev/null 2>&1
import sys, urllib.request
index = sys.argv[1].rstrip("/")
for pin in sys.argv[2:]:
    name, want = pin.split("==")
    page = urllib.request.urlopen(f"{index}/{name}/", timeout=20).read().decode()
    assert f"{name}-{want}%2Bcpu-" in page or f"{name}-{want}+cpu-" in page
PYEOF
    then
        for pin in "${TORCH_PINS[@]}"; do cpu_pins+=("$pin+cpu"); done
        say "installing ${cpu_pins[*]} (CPU builds, from $TORCH_INDEX)"
        "$PY" -m pip install -q --extra-index-url "$TORCH_INDEX" "${cpu_pins[@]}"
    else
        say "installing ${TORCH_PINS[*]} from the default index (${TORCH_INDEX:-HPCIO_TORCH_INDEX} has" \
            "no CPU build of them or cannot be reached; on x86_64 this is the CUDA build)"
        "$PY" -m pip install -q "${TORCH_PINS[@]}"
    fi
fi

# --- 4. the profile's requirements (quiet), when they changed or were never installed ----
REQUIRES="$VENV/.hpcio-$PROFILE-requires"
"$PY" - "$EXTRAS" <<'PYEOF' > "$REQUIRES.new"
import re, sys, tomllib
with open("pyproject.toml", "rb") as f:
    project = tomllib.load(f)["project"]
extras = project["optional-dependencies"]
def expand(reqs):  # "hpcio[codecs,formats]" stands for those extras' requirements
    for req in reqs:
        own = re.fullmatch(r"hpcio\[(.*)\]", req)
        if own is None:
            yield req
        else:
            for name in own.group(1).split(","):
                yield from expand(extras[name.strip()])
wanted = [req for name in sys.argv[1].split(",") for req in expand(extras[name])]
print("\n".join(dict.fromkeys([*expand(project["dependencies"]), *wanted])))
PYEOF
if cmp -s "$REQUIRES.new" "$REQUIRES"; then
    rm -f "$REQUIRES.new"
else
    say "installing the $PROFILE environment's requirements (extras: $EXTRAS)"
    "$PY" -m pip install -q -r "$REQUIRES.new"
    mv "$REQUIRES.new" "$REQUIRES"
fi

# --- 5. hpcio, editable (compiles the kernels) -------------------------------------------
# The rebuild key: everything the build reads (not the C files Cython generates).
build_key() {
    {
        echo "python=$("$PY" -c 'import sys; print(sys.version)')"
        echo "HPCIO_DEBUG=${HPCIO_DEBUG:-} HPCIO_SANITIZE=${HPCIO_SANITIZE:-}"
        echo "HPCIO_ZSTD_PREFIX=${HPCIO_ZSTD_PREFIX:-} CFLAGS=${CFLAGS:-}"
        find pyproject.toml setup.py csrc hpcio/_core -type f \
            \( -name pyproject.toml -o -name setup.py -o -path 'csrc/*' \
               -o -name '*.pyx' -o -name '*.pxd' -o -name '*.pxi' -o -name '*.h' \) \
            2>/dev/null | LC_ALL=C sort | xargs sha256sum
    } | sha256sum | cut -d' ' -f1
}
KEY=$(build_key)
installed_here() {
    # The venv's hpcio is this tree's, and its compiled core imports.  Asked from outside
    # the tree: from its root, `import hpcio` finds the sources whether installed or not.
    local py here
    py=$(cd "$(dirname "$PY")" && pwd)/$(basename "$PY")
    here=$(pwd)
    (cd / && HPCIO_TREE="$here" "$py" -c 'import os, sys, hpcio, hpcio._core
hpcio._core.load_all()
sys.exit(os.path.dirname(os.path.dirname(os.path.abspath(hpcio.__file__))) != os.environ["HPCIO_TREE"])') \
        >/dev/null 2>&1
}
if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$KEY" ] && installed_here; then
    say "hpcio is installed and up to date in $VENV"
else
    say "installing hpcio (editable, compiling the kernels)"
    rm -f "$STAMP"
    # Build in the venv itself, not in pip's throw-away isolated environment: the
    # kernels link the libblosc2 of the blosc2 package found at build time, and an
    # editable install must find that library again at run time.
    "$PY" - <<'PYEOF' > "$VENV/.hpcio-build-requires"
import tomllib
with open("pyproject.toml", "rb") as f:
    print("\n".join(tomllib.load(f)["build-system"]["requires"]))
PYEOF
    "$PY" -m pip install -q -r "$VENV/.hpcio-build-requires"
    # The compile with a line per extension and per C file: it takes minutes, and
    # `pip -q` would show nothing until the end.
    say "compiling the kernels (full log: $VENV/.hpcio-build.log)"
    if ! PYTHONUNBUFFERED=1 "$PY" -m pip install -v --no-build-isolation --no-deps -e . 2>&1 \
        | tee "$VENV/.hpcio-build.log" \
        | sed -nu -e "s/^ *building '\([^']*\)' extension.*/setup:   \1/p" \
                  -e 's/^ *[^ ]*\(gcc\|cc\|clang\)[^ ]* .* -c \([^ ]*\) .*/setup:     \2/p'; then
        echo "setup: compiling hpcio failed; the end of $VENV/.hpcio-build.log:" >&2
        tail -n 40 "$VENV/.hpcio-build.log" >&2
        exit 1
    fi
    installed_here || {
        echo "setup: hpcio installed, but its compiled core does not import:" >&2
        "$PY" -c 'import hpcio._core; hpcio._core.load_all()' >&2 || true
        exit 1
    }
    echo "$KEY" > "$STAMP"
    say "done"
fi

# Byte-compile hpcio's modules, as pip does when it installs a wheel: an editable install
# leaves that to the first import, which writes nothing where PYTHONDONTWRITEBYTECODE is
# set, and every fresh process then compiles each module it imports again (tens of ms).
"$PY" -m compileall -q -j 0 hpcio >/dev/null

# --- 6. requirements of further extras on request (HPCIO_EXTRAS=bench), no rebuild -------
if [ -n "${HPCIO_EXTRAS:-}" ]; then
    "$PY" - "$HPCIO_EXTRAS" <<'PYEOF' > "$VENV/.hpcio-extra-requires"
import sys, tomllib
with open("pyproject.toml", "rb") as f:
    extras = tomllib.load(f)["project"]["optional-dependencies"]
for name in sys.argv[1].split(","):
    print("\n".join(extras[name.strip()]))
PYEOF
    say "installing the requirements of the extras: $HPCIO_EXTRAS"
    "$PY" -m pip install -q -r "$VENV/.hpcio-extra-requires"
fi
