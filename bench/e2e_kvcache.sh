#!/usr/bin/env bash
# End-to-end decode with compressed KV caches at one context length: llama.cpp
# (llama-cpp-python) with its own cache types — f16, and q8_0 / q4_0 for K and
# V, which llama.cpp quantizes only with flash attention — against kvcomp's
# methods, same model, text, threads and context. Interleaved: each repetition
# runs every row once in turn, so all rows see the same machine state; the
# table shows the best of REPS and every run's rate. For docs/benchmarks.md,
# "End-to-end decode at 8K with compressed caches".
#
#   bench/e2e_kvcache.sh [KVCOMP_BIN] [MODEL]
#   env: CTX=8192 THREADS=2 DECODE=64 REPS=2
#        KVS="full:f16 kivi:bits=4 kivi:bits=2"
#        LLAMA_KVS="f16 f16+fa q8_0+fa q4_0+fa"   (type of K and V, +fa: flash attention)
#        PY=/opt/ref/venv/bin/python
#        LOCK=FILE  run each engine call under `flock FILE` (released between runs;
#                   on a shared machine the waits for the lock can far exceed the runs:
#                   llama.cpp's quantized caches with flash attention prefill 8K at
#                   15-25 tok/s here, several minutes a run)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
KVCOMP=${1:-$ROOT/build/kvcomp}
MODEL=${2:-$ROOT/models/SmolLM2-135M-Instruct.Q4_1.gguf}
CTX=${CTX:-8192}
THREADS=${THREADS:-2}
DECODE=${DECODE:-64}
REPS=${REPS:-2}
KVS=${KVS:-full:f16 kivi:bits=4 kivi:bits=2}
LLAMA_KVS=${LLAMA_KVS:-f16 f16+fa q8_0+fa q4_0+fa}
PY=${PY:-/opt/ref/venv/bin/python}
LOCK=${LOCK:-}
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT

locked() { if [ -n "$LOCK" ]; then flock "$LOCK" "$@"; else "$@"; fi; }
field() { "$PY" -c "import json,sys; d=json.load(open(sys.argv[1])); print(d$2)" "$1"; }

# The prompt: the first CTX tokens of the reference's tokenisation, detokenised.
"$PY" "$ROOT/bench/llama_cpp_ref.py" --model "$MODEL" --ctx "$CTX" --decode 1 --threads "$THREADS" \
    --reps 0 --write-prompts "$OUT" --json >/dev/null

rows=()
for t in $LLAMA_KVS; do rows+=("llama.cpp $t"); done
for kv in $KVS; do rows+=("kvcomp $kv"); done
for ((i = 0; i < ${#rows[@]}; i++)); do : >"$OUT/pf_$i" && : >"$OUT/dec_$i" && : >"$OUT/kvb_$i"; done

for rep in $(seq "$REPS"); do
    for ((i = 0; i < ${#rows[@]}; i++)); do
        set -- ${rows[$i]}
        if [ "$1" = llama.cpp ]; then
            typ=${2%+fa}
            fa=()
            [ "$typ" != "$2" ] && fa=(--flash-attn)
            locked "$PY" "$ROOT/bench/llama_cpp_ref.py" --model "$MODEL" --ctx "$CTX" --decode "$DECODE" \
                --threads "$THREADS" --reps 1 --type-k "$typ" --type-v "$typ" "${fa[@]}" --json >"$OUT/r.json"
            field "$OUT/r.json" "['rows'][0]['prefill_tok_s']" >>"$OUT/pf_$i"
            field "$OUT/r.json" "['rows'][0]['decode_tok_s']" >>"$OUT/dec_$i"
        else
            locked "$KVCOMP" run -m "$MODEL" -f "$OUT/prompt_$CTX.txt" --raw -c $((CTX + DECODE + 64)) \
                -n "$DECODE" -t "$THREADS" --temp 0 --kv "$2" --json >"$OUT/r.json"
            field "$OUT/r.json" "['prompt_tok_s']" >>"$OUT/pf_$i"
            field "$OUT/r.json" "['decode_tok_s']" >>"$OUT/dec_$i"
            field "$OUT/r.json" "['kv_bytes']" >>"$OUT/kvb_$i"
        fi
        echo "rep $rep: ${rows[$i]}: prefill $(tail -1 "$OUT/pf_$i") decode $(tail -1 "$OUT/dec_$i") tok/s ($(date -u +%H:%M:%S))" >&2
    done
done

best() { sort -g "$1" | tail -1; }
runs() { paste -sd/ "$1" | "$PY" -c "import sys; print(' / '.join('%.1f' % float(x) for x in sys.stdin.read().split('/')))"; }
ref=""
for ((i = 0; i < ${#rows[@]}; i++)); do [ "${rows[$i]}" = "kvcomp full:f16" ] && ref=$(best "$OUT/dec_$i"); done
echo "| engine | KV cache | prefill tok/s (best) | decode tok/s (best) | decode runs | decode vs kvcomp full:f16 | KV MiB (kvcomp) |"
echo "|---|---|---:|---:|---|---:|---:|"
for ((i = 0; i < ${#rows[@]}; i++)); do
    set -- ${rows[$i]}
    d=$(best "$OUT/dec_$i")
    ratio=$([ -n "$ref" ] && "$PY" -c "print('%.2fx' % ($d / $ref))" || echo -)
    kvb=$([ -s "$OUT/kvb_$i" ] && "$PY" -c "print('%.1f' % ($(tail -1 "$OUT/kvb_$i") / 1048576))" || echo -)
    printf "| %s | %s | %.1f | %.1f | %s | %s | %s |\n" "$1" "$2" "$(best "$OUT/pf_$i")" "$d" \
        "$(runs "$OUT/dec_$i")" "$ratio" "$kvb"
done
