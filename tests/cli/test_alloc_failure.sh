#!/usr/bin/env bash
# Allocation-failure injection (tests/alloc/alloc_fail.c, the kvcomp_alloctest
# build next to kvcomp): for a short `run`, `eval kl` and `bench attn` on the
# tiny fixture model, the Nth allocation fails, for every N up to the count of
# allocations a clean run makes (sampled evenly to at most MAX_N values when
# there are more, e.g. bench attn's per-step scratch). Each failure must end
# in exit 1 (2 when the failure hits the option checks) with a message - on
# stderr, or in eval kl's table for the one method that failed - not an empty
# one, no crash, no sanitizer report
# (the ASan build checks leaks), and no partial output file (--json to a
# file); an exit 0 is allowed only with the output a clean run gives (a
# failed allocation that has a fallback, e.g. a shrink).
# Usage: test_alloc_failure.sh KVCOMP_BINARY MODEL_PATH (the model is unused)
set -u
KVCOMP=$(dirname "$1")/kvcomp_alloctest
SRC=$(cd "$(dirname "$0")/../.." && pwd)
TINY=$SRC/tests/fixtures/models/tiny_llama.gguf
MAX_N=${KVC_ALLOC_MAX_N:-300}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
head -c 3000 "$SRC/data/alice.txt" >"$TMP/text.txt"
fails=0 runs=0

# sweep NAME OUTFILE CMD...: OUTFILE ("" if none) is written by CMD.
sweep() {
    local name=$1 outfile=$2
    shift 2
    [[ -n ${KVC_ALLOC_ONLY:-} && $name != "$KVC_ALLOC_ONLY" ]] && return
    local count clean
    count=$(KVC_ALLOC_REPORT=1 "$@" 2>&1 >"$TMP/clean.out" | sed -n 's/^kvc-alloc: \([0-9]*\) allocations.*/\1/p')
    if [[ -z $count || $count -eq 0 ]]; then
        echo "FAIL: $name: the clean run made no allocation report"
        fails=$((fails + 1))
        return
    fi
    local step=$(((count + MAX_N - 1) / MAX_N)) n
    echo "$name: $count allocations, failing every ${step}th"
    for ((n = 1; n <= count; n += step)); do
        rm -f "$outfile"
        local err rc
        err=$(KVC_ALLOC_FAIL=$n "$@" 2>&1 >"$TMP/fail.out")
        rc=$?
        runs=$((runs + 1))
        local why=""
        if grep -qE "AddressSanitizer|LeakSanitizer|runtime error|ThreadSanitizer" <<<"$err"; then
            why="sanitizer report"
        elif [[ $rc -eq 0 ]]; then
            [[ $name == run ]] && ! cmp -s "$TMP/clean.out" "$TMP/fail.out" && why="exit 0 with different output"
        elif [[ $rc -ne 1 && $rc -ne 2 ]]; then
            why="exit $rc"
        elif ! cat "$TMP/fail.out" - <<<"$err" | grep -qE '(^kvcomp[^:]*: |failed: ).*[^: ]$'; then
            why="no message"
        elif [[ -n $outfile && -e $outfile ]]; then
            why="partial output file left"
        fi
        if [[ -n $why ]]; then
            echo "FAIL: $name with allocation $n failing: $why"
            sed 's/^/    /' <<<"$err" | tail -4
            fails=$((fails + 1))
        fi
    done
}

sweep run "" "$KVCOMP" run -m "$TINY" -p "Tell me a story." -n 6 --temp 0 --kv kivi:bits=2,window=8 -t 2
sweep "eval kl" "" "$KVCOMP" eval kl -m "$TINY" --text "$TMP/text.txt" --ctx 64 --cont 16 \
    --kv kivi:bits=2,mustafar -t 2 -b 32
sweep "bench attn" "" "$KVCOMP" bench attn --ctx 256 --kv full:f16,kivi:bits=4 --heads 4 \
    --kv-heads 2 --head-dim 16 --layers 1 --reps 2 --min-time 0.0001 --no-bw -t 2
echo "$runs runs, $fails failed"
[[ $fails -eq 0 ]]
