#!/usr/bin/env bash
# End-to-end prefill and decode speed, kvcomp vs llama.cpp (llama-cpp-python),
# same model, threads and context, interleaved per context length so both see
# the same machine load. Prints a markdown table (best of REPS runs each) for
# docs/benchmarks.md, "End-to-end: prefill and decode". Wall-clock rates, and
# tokens per CPU-second of the whole process (all threads), which a shared,
# loaded machine distorts less (time given to other processes is left out;
# memory contention and spinning threads are not).
#
#   bench/e2e_speed.sh [KVCOMP_BIN] [MODEL]
#   env: CTXS="512 2048 8192" THREADS=2 DECODE=128 REPS=3 KVS="full:f16 full:f32"
#        PY=/opt/ref/venv/bin/python
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
KVCOMP=${1:-$ROOT/build/kvcomp}
MODEL=${2:-$ROOT/models/SmolLM2-135M-Instruct.Q4_1.gguf}
CTXS=${CTXS:-512 2048 8192}
THREADS=${THREADS:-2}
DECODE=${DECODE:-128}
REPS=${REPS:-3}
KVS=${KVS:-full:f16 full:f32}
PY=${PY:-/opt/ref/venv/bin/python}
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT

best() { sort -g | tail -1; }
json_field() { "$PY" -c "import json,sys; print(json.load(sys.stdin)['$1'])"; }

echo "| context | engine | KV cache | prefill tok/s | decode tok/s | prefill tok/CPU-s | decode tok/CPU-s |"
echo "|---:|---|---|---:|---:|---:|---:|"
for L in $CTXS; do
    "$PY" "$ROOT/bench/llama_cpp_ref.py" --model "$MODEL" --ctx "$L" --decode "$DECODE" \
        --threads "$THREADS" --reps "$REPS" --write-prompts "$OUT" --json >"$OUT/ref_$L.json"
    "$PY" -c "import json; r=json.load(open('$OUT/ref_$L.json'))['rows'][0]; print('| $L | llama.cpp | f16 (default) | %.1f | %.1f | %.1f | %.1f |' % (r['prefill_tok_s'], r['decode_tok_s'], r['prefill_tok_per_cpu_s'], r['decode_tok_per_cpu_s']))"
    for kv in $KVS; do
        : >"$OUT/pf" && : >"$OUT/dec" && : >"$OUT/pfc" && : >"$OUT/decc"
        for _ in $(seq "$REPS"); do
            "$KVCOMP" run -m "$MODEL" -f "$OUT/prompt_$L.txt" --raw -c $((L + DECODE + 64)) \
                -n "$DECODE" -t "$THREADS" --temp 0 --kv "$kv" --json >"$OUT/k.json"
            json_field prompt_tok_s <"$OUT/k.json" >>"$OUT/pf"
            json_field decode_tok_s <"$OUT/k.json" >>"$OUT/dec"
            json_field prompt_tok_per_cpu_s <"$OUT/k.json" >>"$OUT/pfc"
            json_field decode_tok_per_cpu_s <"$OUT/k.json" >>"$OUT/decc"
        done
        printf "| %s | kvcomp | %s | %.1f | %.1f | %.1f | %.1f |\n" "$L" "$kv" "$(best <"$OUT/pf")" \
            "$(best <"$OUT/dec")" "$(best <"$OUT/pfc")" "$(best <"$OUT/decc")"
    done
done
