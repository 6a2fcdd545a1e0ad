#!/usr/bin/env bash
# Create (once) an environment whose mpi4py is built against Debian's Open MPI, standing
# in for a cluster's own MPI library: the `openmpi` tests run conversion and staging under
# its `mpirun` and compare the output with the mpich wheel's.  Idempotent: an environment
# whose mpi4py already reports Open MPI is accepted as it is.
#
# hpcio itself is not installed there: the tests put the checkout on PYTHONPATH, so the
# environment serves any checkout (its compiled kernels match the same Python).
#
# Environment: HPCIO_OPENMPI_ENV (default ~/.cache/hpcio/openmpi-py311),
# PYTHON (interpreter to create it with; default python3).
set -euo pipefail
cd "$(dirname "$0")/.."

ENV_DIR=${HPCIO_OPENMPI_ENV:-$HOME/.cache/hpcio/openmpi-py311}
PY=${PYTHON:-python3}
PROBE='from mpi4py import MPI; import numpy, blosc2, xxhash, orjson, tqdm; v = MPI.Get_library_version().replace(chr(0), ""); assert "Open MPI" in v, v; print(v.splitlines()[0])'

say() { printf 'openmpi-env: %s\n' "$*"; }

# The MPI probe must not join an enclosing launcher's job.
ready() {
    [ -x "$ENV_DIR/bin/python" ] &&
        env -u PMI_SIZE -u PMI_RANK -u OMPI_COMM_WORLD_SIZE -u PMIX_RANK \
            OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
            "$ENV_DIR/bin/python" -c "$PROBE" 2>/dev/null
}

mkdir -p "$(dirname "$ENV_DIR")"
exec 9>"$ENV_DIR.lock"
flock 9 2>/dev/null || true

if version=$(ready); then
    say "ready: $ENV_DIR ($version)"
    exit 0
fi

# Debian's compiler wrapper by its full path: an mpich wheel's `mpicc` may come first on PATH.
MPICC=${MPICC:-/usr/bin/mpicc}
if ! "$MPICC" --showme:version 2>/dev/null | grep -q "Open MPI"; then
    say "installing Debian's Open MPI (openmpi-bin libopenmpi-dev)"
    SUDO=""
    [ "$(id -u)" -eq 0 ] || SUDO=sudo
    # Wait for another apt run (parallel CI jobs) rather than fail on its lock.
    APT=(apt-get -o DPkg::Lock::Timeout=900 -qq)
    $SUDO "${APT[@]}" update
    DEBIAN_FRONTEND=noninteractive $SUDO "${APT[@]}" install -y openmpi-bin libopenmpi-dev >/dev/null
fi

if [ ! -x "$ENV_DIR/bin/python" ]; then
    say "creating $ENV_DIR with $("$PY" --version 2>&1)"
    "$PY" -m venv "$ENV_DIR"
fi
# hpcio's required dependencies, read from pyproject.toml so the list stays in one place.
mapfile -t DEPS < <("$ENV_DIR/bin/python" -c \
    'import tomllib; print("\n".join(tomllib.load(open("pyproject.toml", "rb"))["project"]["dependencies"]))')
say "building mpi4py against $("$MPICC" --showme:version 2>&1 | head -n1)"
"$ENV_DIR/bin/python" -m pip install -q --upgrade pip setuptools wheel cython >/dev/null
MPICC="$MPICC" "$ENV_DIR/bin/python" -m pip install -q --no-cache-dir --no-binary mpi4py "mpi4py>=4.0"
"$ENV_DIR/bin/python" -m pip install -q "${DEPS[@]}"
if ! version=$(ready); then
    echo "openmpi-env: $ENV_DIR was created but its mpi4py does not load Open MPI:" >&2
    OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 "$ENV_DIR/bin/python" -c "$PROBE" >&2 || true
    exit 1
fi
say "ready: $ENV_DIR ($version)"
