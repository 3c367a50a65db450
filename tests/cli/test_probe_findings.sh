#!/usr/bin/env bash
# Regression tests for the probe findings of issue 14 (found by trying kvcomp
# as a new user and as an attacker would): each case failed before its fix.
# Every command runs under `timeout`, so a hang is a failure, not a stuck CI.
# Usage: test_probe_findings.sh KVCOMP_BINARY MODEL_PATH
set -u
KVCOMP=$1
SRC=$(cd "$(dirname "$0")/../.." && pwd)
TINY=$SRC/tests/fixtures/models/tiny_llama.gguf
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
fails=0

# expect CODE PATTERN CMD...: CMD (at most 60 s) exits CODE with output matching PATTERN.
expect() {
    local code=$1 pattern=$2
    shift 2
    local out rc
    out=$(timeout 60 "$@" 2>&1 </dev/null)
    rc=$?
    if [[ $rc -ne $code ]] || ! grep -qE -- "$pattern" <<<"$out"; then
        echo "FAIL: $* -> exit $rc (want $code), output:"
        sed 's/^/    /' <<<"$out" | tail -8
        echo "    (wanted /$pattern/)"
        fails=$((fails + 1))
    else
        echo "ok: exit $rc: $*"
    fi
}

# 5. Named pipes hang: open() of a FIFO without a writer blocks forever.
mkfifo "$TMP/f.gguf" "$TMP/p.kvmix" "$TMP/t.txt"
expect 1 "f.gguf: is a named pipe \(FIFO\); expected a regular file" "$KVCOMP" inspect "$TMP/f.gguf"
expect 1 "f.gguf: is a named pipe" "$KVCOMP" run -m "$TMP/f.gguf" -p hi -n 1
expect 1 "p.kvmix: is a named pipe" "$KVCOMP" run -m "$TINY" -p hi -n 1 --kv "kvmix:$TMP/p.kvmix"
expect 1 "t.txt: is a named pipe" "$KVCOMP" eval kl -m "$TINY" --text "$TMP/t.txt"
expect 1 "is a directory; expected a regular file" "$KVCOMP" inspect "$TMP"

# 10. Spec grammar leniency (the parser's unit test has the details).
expect 2 "empty parameter before the first comma" "$KVCOMP" run -m "$TINY" -p hi -n 1 --kv kivi:,bits=2
expect 2 "modifier kivi is stacked twice" "$KVCOMP" run -m "$TINY" -p hi -n 1 \
    --kv mustafar+kivi:bits=4+kivi:bits=1
expect 2 "k=1e-400 is a number that underflows" "$KVCOMP" run -m "$TINY" -p hi -n 1 \
    --kv mustafar:k=1e-400

echo "$fails failed"
[[ $fails -eq 0 ]]
