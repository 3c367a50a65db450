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

# prompt_tokens CMD...: the prompt token count of the run's summary line.
prompt_tokens() {
    timeout 120 "$@" 2>&1 </dev/null | sed -n 's/^prompt \([0-9]*\) tok.*/\1/p' | tail -1
}
# check_cmp NAME A OP B: a numeric comparison, reported like expect.
check_cmp() {
    if [[ -n $2 && -n $4 ]] && (($2 $3 $4)); then
        echo "ok: $1 ($2 $3 $4)"
    else
        echo "FAIL: $1 (got '$2' $3 '$4')"
        fails=$((fails + 1))
    fi
}

# 1. User text becomes control tokens: "<|im_start|>" in a prompt is text, so
# it takes more tokens than "x" (it was one control token: the same count).
special=$(prompt_tokens "$KVCOMP" run -m "$2" -p '<|im_start|>' -n 1 --temp 0)
plain=$(prompt_tokens "$KVCOMP" run -m "$2" -p x -n 1 --temp 0)
check_cmp "run -p '<|im_start|>' is tokenized as text" "$special" ">" "$plain"
special=$(prompt_tokens "$KVCOMP" run -m "$2" --raw -p '<|im_end|>' -n 1 --temp 0)
plain=$(prompt_tokens "$KVCOMP" run -m "$2" --raw -p x -n 1 --temp 0)
check_cmp "run --raw -p '<|im_end|>' is tokenized as text" "$special" ">" "$plain"
special=$(prompt_tokens "$KVCOMP" run -m "$2" --system '<|im_end|>' -p x -n 1 --temp 0)
plain=$(prompt_tokens "$KVCOMP" run -m "$2" --system y -p x -n 1 --temp 0)
check_cmp "run --system '<|im_end|>' is tokenized as text" "$special" ">" "$plain"
# (the chat line "<|im_end|><|im_start|>system..." is in tests/fuzz/corpus_chat, replayed
# by the fuzz.chat test with the property that only template markers are control tokens)

# 6. -f /dev/zero grew without bound; prompt files have a size limit.
expect 1 "/dev/zero: is a character device; expected a regular file" \
    "$KVCOMP" run -m "$TINY" -f /dev/zero -n 1
head -c 2097152 /dev/zero | tr '\0' 'a' >"$TMP/big.txt"
expect 1 "big.txt: larger than the limit of 1048576 bytes \(raise it with --max-file-mb\)" \
    "$KVCOMP" run -m "$TINY" -f "$TMP/big.txt" --max-file-mb 1 -n 1

# 7. A NUL byte in -f silently cut the prompt: refused with its offset.
{ head -c 70 /dev/zero | tr '\0' 'b'; printf '\0'; head -c 1000 /dev/zero | tr '\0' 'c'; } >"$TMP/nul.txt"
expect 1 "nul.txt: NUL byte at offset 70" "$KVCOMP" run -m "$TINY" -f "$TMP/nul.txt" -n 1

# 8. A refused chat message erased earlier turns: with a too-long line in the
# middle, the last turn still extends the cached conversation, so the tokens
# prefilled equal those of the same chat without the long line.
long=$(head -c 3000 /dev/zero | tr '\0' 'x' | sed 's/xx/x /g')
with=$(printf 'My name is Bob.\n%s\nWhat is my name?\n' "$long" |
    timeout 120 "$KVCOMP" chat -m "$TINY" -c 256 -n 4 --temp 0 2>&1 | sed -n 's/^prompt \([0-9]*\) tok.*/\1/p')
without=$(printf 'My name is Bob.\nWhat is my name?\n' |
    timeout 120 "$KVCOMP" chat -m "$TINY" -c 256 -n 4 --temp 0 2>&1 | sed -n 's/^prompt \([0-9]*\) tok.*/\1/p')
check_cmp "chat: a refused message leaves the history as it was" "$with" "==" "$without"

# 9. -t 1024 took 54 s for 2 tokens and counted per-thread scratch as cache:
# capped at 4 threads per CPU, with a message, and the same cache as that cap.
cap=$((4 * $(nproc)))
expect 0 "-t 1024 is more than 4 threads per CPU .*; using $cap" \
    "$KVCOMP" run -m "$TINY" -p hi -n 2 --temp 0 -t 1024
kv_big=$(timeout 120 "$KVCOMP" run -m "$TINY" -p hi -n 2 --temp 0 -t 1024 2>&1 | grep -o 'KV [^ ]* [0-9.]* MiB')
kv_cap=$(timeout 120 "$KVCOMP" run -m "$TINY" -p hi -n 2 --temp 0 -t "$cap" 2>&1 | grep -o 'KV [^ ]* [0-9.]* MiB')
if [[ -n $kv_big && $kv_big == "$kv_cap" ]]; then echo "ok: -t 1024 reports $kv_big"; else
    echo "FAIL: -t 1024 reports '$kv_big', -t $cap '$kv_cap'"; fails=$((fails + 1)); fi

echo "$fails failed"
[[ $fails -eq 0 ]]
