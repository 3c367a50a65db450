#!/usr/bin/env bash
# Corrupt-model corpus (tests/gguf/make_corrupt_models.py, from the tiny
# fixture model): `kvcomp inspect` and `kvcomp run` must refuse every file with
# exit 1 and a message matching the case's pattern (naming the field), never
# crash, and never allocate more than the file justifies: the largest single
# allocation (counted by the allocation-injection build's report) stays below
# 4x the file size + 1 MiB. Runs kvcomp_alloctest, built next to kvcomp.
# Usage: test_corrupt_models.sh KVCOMP_BINARY MODEL_PATH (the model is unused)
set -u
KVCOMP=$(dirname "$1")/kvcomp_alloctest
SRC=$(cd "$(dirname "$0")/../.." && pwd)
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
python3 "$SRC/tests/gguf/make_corrupt_models.py" "$SRC/tests/fixtures/models/tiny_llama.gguf" "$TMP" || exit 1
fails=0 n=0
check() { # check FILE PATTERN CMD...
    local file=$1 pattern=$2
    shift 2
    local out rc size largest
    out=$(KVC_ALLOC_REPORT=1 "$@" 2>&1 </dev/null)
    rc=$?
    size=$(stat -c %s "$file")
    largest=$(sed -n 's/^kvc-alloc: .* largest \([0-9]*\) bytes$/\1/p' <<<"$out" | tail -1)
    largest=${largest:-0} # no report: nothing was allocated
    msg=$(grep -v '^kvc-alloc:' <<<"$out")
    n=$((n + 1))
    if [[ $rc -ne 1 ]] || ! grep -qE -- "$pattern" <<<"$msg" || ((largest > 4 * size + 1048576)); then
        echo "FAIL: $* -> exit $rc (want 1), largest allocation $largest for $size bytes"
        sed 's/^/    /' <<<"$msg" | head -5
        echo "    (wanted /$pattern/)"
        fails=$((fails + 1))
    fi
}
while IFS=$'\t' read -r name pattern; do
    f=$TMP/$name
    check "$f" "$pattern" "$KVCOMP" inspect "$f"
    check "$f" "$pattern" "$KVCOMP" run -m "$f" -p hi -n 2
done <"$TMP/MANIFEST"
echo "$n runs on $(wc -l <"$TMP/MANIFEST") corrupt files, $fails failed"
[[ $fails -eq 0 ]]
