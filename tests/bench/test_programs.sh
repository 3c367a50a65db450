#!/usr/bin/env bash
# The stand-alone measurement programs of bench/ are not part of the CMake
# build; they are built by hand against the library (the command at the top of
# each file, or in docs/benchmarks.md). This test builds those that use only the portable library, so
# that a change of an internal API cannot leave them broken until someone
# needs a measurement. (bitmap_layout.c and isa_throughput.c need AVX-512
# flags and are left out.)
# Usage: test_programs.sh BUILD_DIR SOURCE_DIR [EXTRA_CFLAGS]
set -u
BUILD=$1 SRC=$2 EXTRA=${3:-}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
fails=0
CC=${CC:-cc}
LIBS="$(pkg-config --libs openblas 2>/dev/null || echo -lopenblas) -llapack -lm -lpthread"

for prog in fit_levels packkv_parts iquant_hot bench_matvec; do
    # shellcheck disable=SC2086 # EXTRA and LIBS are lists of flags
    if $CC -O1 -std=gnu11 -Wall -Wextra -Werror $EXTRA -I"$SRC/include" -I"$SRC/src" "$SRC/bench/$prog.c" \
        "$BUILD/libkvcomp.a" $LIBS -o "$TMP/$prog" 2>"$TMP/$prog.err"; then
        echo "ok: bench/$prog.c builds"
    else
        echo "FAIL: bench/$prog.c does not build:"
        sed 's/^/    /' "$TMP/$prog.err" | head -20
        fails=$((fails + 1))
    fi
done

# iquant_hot runs (a tiny in-cache case) and refuses bad arguments
if out=$("$TMP/iquant_hot" 2 3 64 64 2 2>&1) && grep -q "q.k .* ns/token" <<<"$out"; then
    echo "ok: iquant_hot runs"
else
    echo "FAIL: iquant_hot 2 3 64 64 2 -> $out"
    fails=$((fails + 1))
fi
if out=$("$TMP/iquant_hot" 3 6 128 64 2 2>&1) && grep -q "q.k .* ns/token" <<<"$out"; then
    echo "ok: iquant_hot runs 3-bit codes"
else
    echo "FAIL: iquant_hot 3 6 128 64 2 -> $out"
    fails=$((fails + 1))
fi
if ! "$TMP/iquant_hot" 5 >/dev/null 2>&1; then echo "ok: iquant_hot refuses BITS 5"
else echo "FAIL: iquant_hot accepted BITS 5"; fails=$((fails + 1)); fi

[[ $fails -eq 0 ]] || { echo "$fails failure(s)"; exit 1; }
