#!/usr/bin/env bash
# libkvcomp as another program sees it: installs the build into a temporary
# PREFIX (cmake --install, what `make install PREFIX=...` runs), builds
# examples/generate.c against it with pkg-config alone, and runs it, linked to
# the shared and then to the static library, on the default model with a
# compressed cache. It must print text and the cache line.
# Usage: test_example.sh BUILD_DIR SOURCE_DIR MODEL_PATH [EXTRA_CFLAGS]
set -euo pipefail
BUILD=$1 SRC=$2 MODEL=$3 EXTRA=${4:-}
if [[ ! -r "$MODEL" ]]; then
    echo "SKIP: default model not found at $MODEL (run scripts/fetch-model)"
    exit 0
fi
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
cmake --install "$BUILD" --prefix "$TMP/prefix" >/dev/null
export PKG_CONFIG_PATH="$TMP/prefix/lib/pkgconfig"
CC=${CC:-cc}
# shellcheck disable=SC2086 # EXTRA and pkg-config's output are lists of flags
$CC -std=c11 -Wall -Wextra -Werror $EXTRA "$SRC/examples/generate.c" \
    $(pkg-config --cflags --libs kvcomp) -o "$TMP/generate_shared"
# shellcheck disable=SC2086
$CC -std=c11 -Wall -Wextra -Werror $EXTRA "$SRC/examples/generate.c" \
    $(pkg-config --cflags kvcomp) "$TMP/prefix/lib/libkvcomp.a" \
    $(pkg-config --static --libs kvcomp | sed 's/-lkvcomp//') -o "$TMP/generate_static"
for exe in generate_shared generate_static; do
    out=$(LD_LIBRARY_PATH="$TMP/prefix/lib" "$TMP/$exe" "$MODEL" "kivi:bits=4" "Say hello." 2>&1)
    echo "$exe: $out"
    grep -q '\[kivi:bits=4: [0-9]* tokens, [0-9.]* bits per element' <<<"$out"
    # text before the cache line: the model said something
    [[ $(head -c 1 <<<"$out") != "[" ]]
done
echo "the installed library builds and runs examples/generate.c"
