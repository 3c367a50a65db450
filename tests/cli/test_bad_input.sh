#!/usr/bin/env bash
# Bad input to the kvcomp command: each case must give a clear message (checked
# by a pattern) and the right exit code (1 runtime failure, 2 bad usage).
# Usage: test_bad_input.sh KVCOMP_BINARY MODEL_PATH
set -u
KVCOMP=$1
MODEL=$2
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
fails=0

# expect CODE PATTERN CMD...: run CMD, check its exit code and that stderr+stdout match PATTERN.
expect() {
    local code=$1 pattern=$2
    shift 2
    local out rc
    out=$("$@" 2>&1 </dev/null)
    rc=$?
    if [[ $rc -ne $code ]] || ! grep -qiE -- "$pattern" <<<"$out"; then
        echo "FAIL: $* -> exit $rc (want $code), output:"
        sed 's/^/    /' <<<"$out" | head -20
        echo "    (wanted /$pattern/)"
        fails=$((fails + 1))
    else
        echo "ok: exit $rc: $*"
        echo "    $(head -1 <<<"$out")"
    fi
}

# Handcrafted GGUF files (python3 writes them; the layout is the GGUF v3 spec).
python3 - "$TMP" <<'EOF'
import struct, sys
d = sys.argv[1]
def s(x): b = x.encode(); return struct.pack('<Q', len(b)) + b
def kv_str(k, v): return s(k) + struct.pack('<I', 8) + s(v)
def kv_u32(k, v): return s(k) + struct.pack('<I', 4) + struct.pack('<I', v)
def gguf(kvs, tensors=(), data=b''):
    out = b'GGUF' + struct.pack('<IQQ', 3, len(tensors), len(kvs)) + b''.join(kvs)
    for name, ne, typ, off in tensors:
        out += s(name) + struct.pack('<I', len(ne)) + b''.join(struct.pack('<Q', n) for n in ne)
        out += struct.pack('<IQ', typ, off)
    out += b'\0' * ((-len(out)) % 32)
    return out + data
open(f'{d}/mamba.gguf', 'wb').write(gguf([kv_str('general.architecture', 'mamba')]))
llama = [kv_str('general.architecture', 'llama'), kv_u32('llama.block_count', 1),
         kv_u32('llama.embedding_length', 32), kv_u32('llama.feed_forward_length', 64),
         kv_u32('llama.attention.head_count', 2), kv_u32('llama.context_length', 64)]
# token_embd in q5_1 (ggml type 7, no kernels in kvcomp): 4 rows of 32 -> 4 blocks of 24 bytes
open(f'{d}/q5_1.gguf', 'wb').write(gguf(llama, [('token_embd.weight', [32, 4], 7, 0)], b'\0' * 96))
# token_embd of the wrong width (16 instead of 32), f32
open(f'{d}/shape.gguf', 'wb').write(gguf(llama, [('token_embd.weight', [16, 4], 0, 0)], b'\0' * 256))
open(f'{d}/notgguf.gguf', 'wb').write(b'hello, this is not a model\n' * 10)
EOF

# usage
expect 2 "usage: kvcomp" "$KVCOMP"
expect 2 "unknown command 'frobnicate'" "$KVCOMP" frobnicate
expect 0 "usage: kvcomp" "$KVCOMP" --help
for cmd in run chat inspect; do
    expect 0 "usage: kvcomp $cmd" "$KVCOMP" "$cmd" --help
done

# models that are missing, unreadable, corrupt, truncated or unsupported
expect 1 "cannot load model $TMP/nope.gguf" "$KVCOMP" run -m "$TMP/nope.gguf" -p hi
expect 1 "cannot load model" "$KVCOMP" run -m "$TMP" -p hi
expect 1 "cannot load model.*(magic|GGUF)" "$KVCOMP" run -m "$TMP/notgguf.gguf" -p hi
expect 1 "nope.gguf" "$KVCOMP" inspect "$TMP/nope.gguf"
expect 1 "not supported.*mamba|mamba.*not supported" "$KVCOMP" run -m "$TMP/mamba.gguf" -p hi
expect 1 "token_embd.weight.*q5_1" "$KVCOMP" run -m "$TMP/q5_1.gguf" -p hi
expect 1 "token_embd.weight.*shape" "$KVCOMP" run -m "$TMP/shape.gguf" -p hi
if [[ -r "$MODEL" ]]; then
    head -c 100000 "$MODEL" >"$TMP/truncated.gguf"
    expect 1 "cannot load model" "$KVCOMP" run -m "$TMP/truncated.gguf" -p hi
    expect 1 "truncated.gguf" "$KVCOMP" inspect "$TMP/truncated.gguf"
    head -c 5000000 "$MODEL" >"$TMP/truncated2.gguf"
    expect 1 "cannot load model" "$KVCOMP" run -m "$TMP/truncated2.gguf" -p hi
fi

# bad flag values
expect 2 "-n: 'abc' is not an integer" "$KVCOMP" run -m "$MODEL" -p hi -n abc
expect 2 "-t: 0 is outside" "$KVCOMP" run -m "$MODEL" -p hi -t 0
expect 2 "-c: -5 is outside" "$KVCOMP" run -m "$MODEL" -p hi -c -5
expect 2 "--temp: -1 is outside" "$KVCOMP" run -m "$MODEL" -p hi --temp -1
expect 2 "--top-p: 2 is outside" "$KVCOMP" run -m "$MODEL" -p hi --top-p 2
expect 2 "--top-k: 'x' is not an integer" "$KVCOMP" run -m "$MODEL" -p hi --top-k x
expect 2 "--seed" "$KVCOMP" run -m "$MODEL" -p hi --seed -3
expect 2 "-m needs a value" "$KVCOMP" run -p hi -m
expect 2 "unknown option '--bogus'" "$KVCOMP" run -m "$MODEL" -p hi --bogus
expect 2 "give a prompt" "$KVCOMP" run -m "$MODEL"
expect 2 "--kv nosuchmethod" "$KVCOMP" run -m "$MODEL" -p hi --kv nosuchmethod
expect 2 "--kv-mem '12Q' is not a size" "$KVCOMP" bench decode -m "$MODEL" --kv sentkv --kv-mem 12Q
expect 2 "mem='-5' is not a size" "$KVCOMP" bench decode -m "$MODEL" --kv "sentkv:mem=-5"
expect 1 "$TMP/missing.txt: cannot open" "$KVCOMP" run -m "$MODEL" -f "$TMP/missing.txt"

# kvcomp tune and tuned profiles: usage errors, and bad profiles named by line and field
expect 2 "exactly one of --budget" "$KVCOMP" tune -m "$MODEL" -o "$TMP/t.tuned"
expect 2 "--budget 'x'" "$KVCOMP" tune -m "$MODEL" -o "$TMP/t.tuned" --budget x
if [[ -r "$MODEL" ]]; then
    printf 'The quick brown fox jumps over the lazy dog. %.0s' $(seq 1 20) >"$TMP/calib.txt"
    expect 1 "tune: candidate 'q9g32': bits '9' not in 1..4" "$KVCOMP" tune -m "$MODEL" \
        --text "$TMP/calib.txt" --ctx 16 --cont 4 -o "$TMP/t.tuned" --budget 2 --candidates q2g32,q9g32
    expect 1 "budget 1 bits per element is below the cheapest choice" "$KVCOMP" tune -m "$MODEL" \
        --text "$TMP/calib.txt" --ctx 16 --cont 4 -o "$TMP/t.tuned" --budget 1 --candidates q2g32
    expect 1 "the text has [0-9]+ tokens; --offset 0 \\+ --ctx 4096 \\+ --cont 64 needs 4160" \
        "$KVCOMP" tune -m "$MODEL" --text "$TMP/calib.txt" --ctx 4096 -o "$TMP/t.tuned" --budget 2
    printf 'kvcomp-tuned 1\nlayers 2\nlayer 0 q2g32 q2g32\nlayer 1 q2g32 q2g32\n' >"$TMP/two.tuned"
    expect 1 "profile .*two.tuned has 2 layers, the model has [0-9]+" \
        "$KVCOMP" run -m "$MODEL" -p hi -n 1 --kv "tuned:profile=$TMP/two.tuned"
    printf 'kvcomp-tuned 1\nlayers 2\nlayer 0 q2g32 nf4\n' >"$TMP/bad.tuned"
    expect 1 "line 3: layer 0 v_codec 'nf4' is not a codec" \
        "$KVCOMP" run -m "$MODEL" -p hi -n 1 --kv "tuned:profile=$TMP/bad.tuned"
fi

# prompt longer than the context: says how long it is and how to raise -c
if [[ -r "$MODEL" ]]; then
    long=$(printf 'the quick brown fox jumps over the lazy dog %.0s' $(seq 1 40))
    expect 1 "prompt is [0-9]+ tokens.*context holds 32.*-c [0-9]+" \
        "$KVCOMP" run -m "$MODEL" -p "$long" -c 32 -n 4 --raw
fi

if [[ $fails -ne 0 ]]; then
    echo "$fails case(s) failed"
    exit 1
fi
echo "all bad-input cases passed"
