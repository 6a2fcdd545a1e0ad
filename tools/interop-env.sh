#!/usr/bin/env bash
# Create (once) the cached Python 3.12 environment of the reference libraries the
# interop tests compare hpcio against: mldataforge 0.6.10 (needs Python 3.12) and
# mosaicml-streaming 0.13.0 with torch.  An existing environment that imports them is
# accepted as it is.  Without a Python 3.12 interpreter it writes the reason to
# $HPCIO_INTEROP_ENV/UNAVAILABLE and exits 0, so the interop tests skip saying why.
#
# Environment: HPCIO_INTEROP_ENV (default ~/.cache/hpcio/interop-py312),
# PYTHON312 (interpreter to create it with).
set -euo pipefail

ENV_DIR=${HPCIO_INTEROP_ENV:-$HOME/.cache/hpcio/interop-py312}
MARKER="$ENV_DIR/UNAVAILABLE"
PACKAGES=(torch==2.14.1 torchvision==0.29.1 mosaicml-streaming==0.13.0 click msgpack orjson
          zstandard numpy isal lz4 brotli python-snappy xxhash pyyaml
          # mldataforge.utils imports HF datasets; transformers (pulled by streaming) needs
          # huggingface-hub < 1.0, which datasets 5 no longer accepts
          "datasets<5" "huggingface-hub>=0.34.0,<1.0")
MLDATAFORGE=mldataforge==0.6.10
PROBE='import mldataforge, mldataforge.jinx, mldataforge.mds, mldataforge.utils, datasets, streaming, torch, zstandard'

say() { printf 'interop-env: %s\n' "$*"; }

ready() { [ -x "$ENV_DIR/bin/python" ] && "$ENV_DIR/bin/python" -c "$PROBE" >/dev/null 2>&1; }

mkdir -p "$(dirname "$ENV_DIR")"
# One creator at a time: concurrent runs (parallel CI jobs) wait for the first.
exec 9>"$ENV_DIR.lock"
flock 9 2>/dev/null || true

if ready; then
    rm -f "$MARKER"
    say "ready: $ENV_DIR ($("$ENV_DIR/bin/python" --version 2>&1))"
    exit 0
fi

find_python312() {
    local candidate
    for candidate in "${PYTHON312:-}" /root/.pyenv/versions/3.12.1/bin/python3.12 \
                     "$(command -v python3.12 2>/dev/null || true)"; do
        [ -n "$candidate" ] && [ -x "$candidate" ] || continue
        if "$candidate" -c 'import sys, venv; assert sys.version_info[:2] == (3, 12)' \
               >/dev/null 2>&1; then
            echo "$candidate"
            return 0
        fi
    done
    return 1
}

if ! PY312=$(find_python312); then
    mkdir -p "$ENV_DIR"
    echo "no Python 3.12 interpreter with venv found (tried \$PYTHON312," \
         "/root/.pyenv/versions/3.12.1/bin/python3.12 and python3.12 on PATH);" \
         "mldataforge 0.6.10 needs Python 3.12" > "$MARKER"
    say "$(cat "$MARKER")"
    say "interop tests will be skipped with this reason"
    exit 0
fi

if [ ! -x "$ENV_DIR/bin/python" ]; then
    say "creating $ENV_DIR with $("$PY312" --version 2>&1)"
    "$PY312" -m venv "$ENV_DIR"
fi
say "installing the reference libraries into $ENV_DIR"
"$ENV_DIR/bin/python" -m pip install -q "${PACKAGES[@]}"
# mldataforge pins dependencies the pins above replace, hence --no-deps.
"$ENV_DIR/bin/python" -m pip install -q --no-deps "$MLDATAFORGE"
if ! ready; then
    echo "interop-env: $ENV_DIR was created but does not import the reference libraries:" >&2
    "$ENV_DIR/bin/python" -c "$PROBE" >&2 || true
    exit 1
fi
rm -f "$MARKER"
say "ready: $ENV_DIR"
