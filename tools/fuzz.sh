#!/usr/bin/env bash
# libFuzzer targets for the C kernels' byte parsers (fuzz/targets/*.c), built with clang
# under AddressSanitizer and UndefinedBehaviorSanitizer against csrc/, libzstd and the
# C-Blosc2 that setup.py links; and atheris targets for the Python byte parsers
# (fuzz/python/targets.py, named py-NAME here: py-jinx, py-mds, ...), run with $PY.
#
#   tools/fuzz.sh build               build every C target into build/fuzz/
#   tools/fuzz.sh replay              run every target once over its seed corpus and its
#                                     regression inputs (fuzz/corpus/T, fuzz/regressions/T;
#                                     fuzz/python/corpus/NAME, fuzz/python/regressions/NAME)
#   tools/fuzz.sh run SECONDS [T...]  fuzz each target (default: all) for SECONDS, from its
#                                     seeds; the corpus grows in build/fuzz/corpus/T, and
#                                     a crash is left as build/fuzz/crashes/T/crash-*
#   tools/fuzz.sh ci                  build, replay, then every target for FUZZ_CI_SECONDS
#                                     (default 20) seconds, two at a time
#
# Environment: FUZZ_JOBS (targets fuzzed at once, default 1), CC (default clang), PY (the
# Python whose blosc2 wheel provides C-Blosc2 and that runs the atheris targets, default
# .venv/bin/python), FUZZ_NICE (niceness of the fuzzers, default 15).  Nothing is
# downloaded but clang itself, with apt-get when it is missing and this runs as root, and
# atheris (the `fuzz` extra of pyproject.toml), with pip into $PY when it is missing.
set -euo pipefail

cd "$(dirname "$(readlink -f "$0")")/.."
OUT=build/fuzz
CC=${CC:-clang}
PY=${PY:-.venv/bin/python}
FUZZ_JOBS=${FUZZ_JOBS:-1}
FUZZ_NICE=${FUZZ_NICE:-15}
C_TARGETS=$(cd fuzz/targets && ls *.c | sed 's/\.c$//')
PY_TARGETS=$(cd fuzz/python/corpus && ls | sed 's/^/py-/')
TARGETS="$C_TARGETS $PY_TARGETS"

say() { printf 'fuzz: %s\n' "$*"; }

ensure_clang() {
    if "$CC" -fsanitize=fuzzer -x c - -o /dev/null >/dev/null 2>&1 \
        <<<'int LLVMFuzzerTestOneInput(const char *d, unsigned long n) { return 0; }'; then
        return
    fi
    if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
        say "installing clang and its libFuzzer runtime with apt-get"
        export DEBIAN_FRONTEND=noninteractive
        apt-get install -y -q --no-install-recommends clang libclang-rt-dev \
            || { apt-get update -q && apt-get install -y -q --no-install-recommends clang libclang-rt-dev; }
    else
        echo "fuzz: $CC cannot build libFuzzer targets; install clang and libclang-rt-dev" >&2
        exit 1
    fi
}

ensure_atheris() {
    "$PY" -c 'import atheris' >/dev/null 2>&1 && return
    say "installing the fuzz extra (atheris) into $PY with pip"
    # shellcheck disable=SC2046
    "$PY" -m pip install -q $("$PY" -c 'import tomllib
print(*tomllib.load(open("pyproject.toml", "rb"))["project"]["optional-dependencies"]["fuzz"])')
}

# The command that runs target $1 with libFuzzer's flags, its seed and regression folders,
# its dictionary and the longest input it is given.
fuzzer() {
    case $1 in
        py-*) FUZZER=("$PY" fuzz/python/run.py "${1#py-}")
              SEEDS=fuzz/python/corpus/${1#py-} REGRESSIONS=fuzz/python/regressions/${1#py-}
              DICT=fuzz/python/dicts/hpcio.dict MAX_LEN=16384 ;;
        *) FUZZER=("$OUT/$1") SEEDS=fuzz/corpus/$1 REGRESSIONS=fuzz/regressions/$1
           DICT=fuzz/dicts/$1.dict MAX_LEN=8192 ;;
    esac
}

# C-Blosc2 as setup.py finds it, the blosc2 wheel's copy, else a system libblosc2 known to
# pkg-config: sets BLOSC_CFLAGS and BLOSC_LIBS.
find_blosc2() {
    local root
    if root=$("$PY" -c 'import blosc2, os; print(os.path.dirname(blosc2.__file__))' 2>/dev/null) \
        && [ -f "$root/include/blosc2.h" ]; then
        BLOSC_CFLAGS="-I$root/include"
        BLOSC_LIBS="-L$root/lib -Wl,-rpath,$root/lib -lblosc2"
    elif pkg-config --exists blosc2 2>/dev/null; then
        BLOSC_CFLAGS=$(pkg-config --cflags blosc2)
        BLOSC_LIBS=$(pkg-config --libs blosc2)
    else
        echo "fuzz: no C-Blosc2 found (the blosc2 wheel in $PY, or pkg-config blosc2)" >&2
        exit 1
    fi
}

build() {
    ensure_clang
    local zstd flags
    find_blosc2
    zstd=$(pkg-config --libs libzstd 2>/dev/null || echo -lzstd)
    flags=(-std=gnu11 -Wall -g -O1 -fno-omit-frame-pointer -pthread
           -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined
           -Icsrc -Ifuzz/targets)
    mkdir -p "$OUT/obj"
    # the kernels are compiled once, instrumented, and every target links all of them
    for c in csrc/*.c; do
        # shellcheck disable=SC2086
        "$CC" "${flags[@]/-fsanitize=fuzzer,/-fsanitize=fuzzer-no-link,}" $BLOSC_CFLAGS \
            $(pkg-config --cflags libzstd 2>/dev/null) -c "$c" \
            -o "$OUT/obj/$(basename "$c" .c).o"
    done
    for t in $C_TARGETS; do
        # libblosc2 first, so the kernels and C-Blosc2 share the zstd it exports (setup.py)
        # shellcheck disable=SC2086
        "$CC" "${flags[@]}" -o "$OUT/$t" "fuzz/targets/$t.c" "$OUT"/obj/*.o $BLOSC_LIBS $zstd
    done
    say "built $(echo $C_TARGETS | wc -w) targets in $OUT"
}

# Every seed and regression input of each target, run once: a crash fails.  The Python
# targets' inputs are all replayed by one process (fuzz/python/run.py replay).
replay() {
    local t inputs
    for t in $C_TARGETS; do
        fuzzer "$t"
        inputs=()
        for d in "$SEEDS" "$REGRESSIONS"; do
            [ -d "$d" ] && inputs+=("$d"/*)
        done
        [ ${#inputs[@]} -eq 0 ] && continue
        if ! "${FUZZER[@]}" -runs=0 "${inputs[@]}" >"$OUT/$t.replay.log" 2>&1; then
            { grep -E 'ERROR|SUMMARY|contract broken|Running|Error:' "$OUT/$t.replay.log" || true; } | tail -n 5 >&2
            echo "fuzz: $t crashed on a committed input (see $OUT/$t.replay.log)" >&2
            exit 1
        fi
        say "$t: ${#inputs[@]} inputs replayed"
    done
    "$PY" fuzz/python/run.py replay
}

run_one() {
    local t=$1 seconds=$2 dict=() scratch rc=0
    fuzzer "$t"
    mkdir -p "$OUT/corpus/$t" "$OUT/crashes/$t"
    [ -f "$DICT" ] && dict=(-dict="$DICT")
    # The Python targets write each input's files under HPCIO_FUZZ_SCRATCH: libFuzzer
    # ends the process without running Python's exit handlers, so it is removed here.
    scratch=$(mktemp -d /dev/shm/hpcio-fuzz-XXXXXX 2>/dev/null || mktemp -d)
    HPCIO_FUZZ_SCRATCH=$scratch nice -n "$FUZZ_NICE" "${FUZZER[@]}" -max_total_time="$seconds" -timeout=10 \
        -rss_limit_mb=2048 -max_len="$MAX_LEN" -print_final_stats=1 "${dict[@]}" \
        -artifact_prefix="$OUT/crashes/$t/" "$OUT/corpus/$t" "$SEEDS" >"$OUT/$t.log" 2>&1 || rc=$?
    rm -rf "$scratch"
    return $rc
}

run() {
    local seconds=$1 failed=0 t
    shift
    local todo=("$@")
    ensure_atheris
    [ ${#todo[@]} -eq 0 ] && read -r -a todo <<<"$(echo $TARGETS)"
    # Each job leaves its exit status in a file: bash forgets a finished job once
    # `jobs` has reported it, so `wait PID` after the throttling loop below can answer
    # 127 ("not a child of this shell") for a target that ran cleanly.
    for t in "${todo[@]}"; do
        rm -f "$OUT/$t.rc"
        while [ "$(jobs -rp | wc -l)" -ge "$FUZZ_JOBS" ]; do sleep 1; done
        { rc=0; run_one "$t" "$seconds" || rc=$?; echo "$rc" >"$OUT/$t.rc"; } &
    done
    wait
    for t in "${todo[@]}"; do
        if [ "$(cat "$OUT/$t.rc" 2>/dev/null)" = 0 ]; then
            say "$t: $(grep -E '^#[0-9]+.*(DONE|pulse|NEW|REDUCE)' "$OUT/$t.log" | tail -n 1)"
        else
            failed=1
            echo "fuzz: $t found a crash (see $OUT/$t.log and $OUT/crashes/$t/):" >&2
            { grep -E 'ERROR|SUMMARY|contract broken|Uncaught|Error:' "$OUT/$t.log" || true; } | head -n 5 >&2
        fi
    done
    return $failed
}

case ${1:-} in
    build) build ;;
    replay) replay ;;
    run) shift; run "$@" ;;
    ci) build; replay; FUZZ_JOBS=${FUZZ_JOBS_CI:-2} run "${FUZZ_CI_SECONDS:-20}" ;;
    *) sed -n '2,23p' "$0" >&2; exit 2 ;;
esac
