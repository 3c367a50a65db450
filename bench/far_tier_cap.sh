#!/usr/bin/env bash
# A context that does not fit the RAM the operating system allows: runs the
# same greedy generation with sentkv's far tier with and without a cgroup
# memory cap, checks that the two texts are identical, then tries the dense
# cache under the same cap (it should be killed by the cgroup's OOM killer).
# docs/benchmarks.md, "A context that does not fit the RAM the OS allows".
# Needs root and a cgroup-v1 memory controller (/sys/fs/cgroup/memory).
#
#   bench/far_tier_cap.sh [KVCOMP_BIN] [MODEL]
#   env: CAP_MIB=320 CTX=16384 PROMPT_BYTES=60000 MEM=32M N=48 THREADS=2
#        TIMEOUT=600 (seconds allowed to the capped dense run)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
KVCOMP=${1:-$ROOT/build/kvcomp}
MODEL=${2:-$ROOT/models/SmolLM2-135M-Instruct.Q4_1.gguf}
CAP_MIB=${CAP_MIB:-320}
CTX=${CTX:-16384}
PROMPT_BYTES=${PROMPT_BYTES:-60000}
MEM=${MEM:-32M}
N=${N:-48}
THREADS=${THREADS:-2}
TIMEOUT=${TIMEOUT:-600}
CG=/sys/fs/cgroup/memory/kvcomp-cap-$$
OUT=$(mktemp -d)

[ "$(id -u)" = 0 ] || { echo "far_tier_cap.sh: needs root (cgroup and drop_caches)" >&2; exit 2; }
[ -d /sys/fs/cgroup/memory ] || { echo "far_tier_cap.sh: no cgroup-v1 memory controller" >&2; exit 2; }
mkdir "$CG"
cleanup() { rmdir "$CG" 2>/dev/null || true; rm -rf "$OUT"; }
trap cleanup EXIT
echo $((CAP_MIB * 1024 * 1024)) >"$CG/memory.limit_in_bytes"

head -c "$PROMPT_BYTES" "$ROOT/data/alice.txt" >"$OUT/prompt.txt"
printf '\n\nSummarize the story so far in three sentences.\n' >>"$OUT/prompt.txt"

# generate NAME SPEC CAPPED: one greedy run, its JSON in $OUT/NAME.json, rc on stdout
generate() {
    local name=$1 spec=$2 capped=$3
    sync && echo 3 >/proc/sys/vm/drop_caches
    local wrap=()
    [ "$capped" = 1 ] && wrap=(bash -c 'echo $$ >"$0/tasks"; exec "$@"' "$CG")
    set +e
    timeout "$TIMEOUT" "${wrap[@]}" /usr/bin/time -v "$KVCOMP" run -m "$MODEL" -f "$OUT/prompt.txt" --raw \
        -c "$CTX" -n "$N" --temp 0 -t "$THREADS" --kv "$spec" --json >"$OUT/$name.json" 2>"$OUT/$name.err"
    echo $?
    set -e
}
peak_mib() { awk '/Maximum resident/ { printf "%.0f", $NF / 1024 }' "$OUT/$1.err"; }
text_of() { python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['text'])" "$OUT/$1.json"; }

echo "cap ${CAP_MIB} MiB, context up to $CTX tokens, sentkv:0.1,mem=$MEM"
rc=$(generate free "sentkv:0.1,mem=$MEM" 0)
echo "uncapped sentkv: rc $rc, peak RSS $(peak_mib free) MiB"
rc=$(generate capped "sentkv:0.1,mem=$MEM" 1)
echo "capped sentkv:   rc $rc, peak RSS $(peak_mib capped) MiB, cgroup failcnt $(cat "$CG/memory.failcnt")"
if [ "$rc" = 0 ] && [ "$(text_of free)" = "$(text_of capped)" ]; then
    echo "capped text equals the uncapped text"
else
    echo "capped run differs or failed" >&2
    exit 1
fi
rc=$(generate dense full:f16 1)
case $rc in
0) echo "capped full:f16: completed (the cap leaves room for the dense cache at this context)" ;;
137) echo "capped full:f16: killed ($(grep oom_kill "$CG/memory.oom_control" | tr '\n' ' '))" ;;
124) echo "capped full:f16: did not finish in ${TIMEOUT} s" ;;
*) echo "capped full:f16: exit status $rc" ;;
esac
