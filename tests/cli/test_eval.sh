#!/usr/bin/env bash
# The measuring commands end to end on the real model, small sizes: eval kl
# (JSON fields present; full:f32 against the full:f32 reference gives KL 0 and
# ppl ratio 1; full:f16 with small chunks gives a KL that is small but not
# zero; --windows: per-window results, pooled mean = mean of the windows', the
# interval around it; --ref-out then --ref gives the same results, and a
# reference file of another run, build or ISA, altered or truncated is
# refused), eval ruler (JSON, scores in [0, 1], both methods scored on every
# sample), the table and the PNG, methods --json, bench bw/attn/decode JSON,
# dump-kv -> bench attn --dump, and bad
# flags (exit 2 with a message naming the flag). Asserts behaviour, not speed.
# The heavier runs use -t 1: on a shared, loaded machine the pool's spinning
# join makes two-thread decode steps slow; one run keeps the default threads.
# Usage: test_eval.sh KVCOMP_BINARY MODEL_PATH
set -u
KVCOMP=$1
MODEL=$2
SRC=$(cd "$(dirname "$0")/../.." && pwd)
TEXT=$SRC/data/alice.txt
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
export KVC_PROGRESS=0
fails=0
passes=0

ok() { echo "ok: $*"; passes=$((passes + 1)); }
bad() { echo "FAIL: $*"; fails=$((fails + 1)); }

# check NAME FILE PYTHON: run a python check on the JSON in FILE (as `d`).
check() {
    local name=$1 file=$2 code=$3
    if python3 - "$file" <<EOF
import json, math, sys
d = json.load(open(sys.argv[1]))
$code
EOF
    then ok "$name"; else bad "$name"; sed 's/^/    /' "$file" | head -60; fi
}

# run NAME CMD...: run, keep stdout in $TMP/NAME.out, fail on a non-zero exit.
run() {
    local name=$1
    shift
    if "$@" >"$TMP/$name.out" 2>"$TMP/$name.err"; then
        ok "$name runs"
    else
        bad "$name: exit $? from $*"
        sed 's/^/    /' "$TMP/$name.err" | tail -20
    fi
}

# expect CODE PATTERN CMD...: exit code and a message matching PATTERN.
expect() {
    local code=$1 pattern=$2
    shift 2
    local out rc
    out=$("$@" 2>&1 </dev/null)
    rc=$?
    if [[ $rc -eq $code ]] && grep -qiE -- "$pattern" <<<"$out"; then
        ok "exit $rc /$pattern/: $*"
    else
        bad "$* -> exit $rc (want $code, /$pattern/)"
        sed 's/^/    /' <<<"$out" | head -10
    fi
}

# ---- eval kl ----
run kl "$KVCOMP" eval kl -m "$MODEL" --text "$TEXT" --ctx 256 --cont 16 -b 64 -t 1 \
    --kv "full:f32,full:f16,block=16" --json
check "eval kl JSON" "$TMP/kl.out" '
assert d["command"] == "eval kl" and d["ctx"] == 256 and d["cont"] == 16
ref = d["reference"]
assert ref["spec"] == "full:f32" and ref["ppl"] > 1 and ref["cache"]["tokens"] == 272
for k in ("cpu", "isa", "threads"): assert k in d["machine"]
m = {x["spec"]: x for x in d["methods"]}
assert set(m) == {"full:f32", "full:f16,block=16"}
for x in m.values():
    assert x["ok"] is True
    for k in ("mean", "median", "p99", "max"): assert k in x["kl"]
    for k in ("same_top", "dp_mean", "dp_rms", "ppl", "ppl_ratio", "max_abs_dlogit", "seconds"): assert k in x
    for k in ("bytes_per_token", "bits_per_element", "ratio_vs_f16", "payload_bytes"): assert k in x["cache"]
f32 = m["full:f32"]
assert abs(f32["kl"]["mean"]) < 1e-6 and abs(f32["kl"]["max"]) < 1e-6, f32["kl"]
assert f32["same_top"] == 1 and abs(f32["ppl_ratio"] - 1) < 1e-6
f16 = m["full:f16,block=16"]
assert 0 < f16["kl"]["mean"] < 0.05, f16["kl"]
assert f16["cache"]["payload_bytes"] < f32["cache"]["payload_bytes"]
assert f16["canonical"].startswith("full:")
'
run kl_table "$KVCOMP" eval kl -m "$MODEL" --text "$TEXT" --ctx 128 --cont 8 --kv full:bf16,block=16 \
    --plot "$TMP/kl.png"
if grep -q "KL mean" "$TMP/kl_table.out" && grep -q "full:bf16,block=16" "$TMP/kl_table.out"; then
    ok "eval kl table"
else
    bad "eval kl table"; cat "$TMP/kl_table.out"
fi
if command -v gnuplot >/dev/null; then
    if [[ -s "$TMP/kl.png" ]] && head -c 8 "$TMP/kl.png" | grep -q PNG; then ok "eval kl --plot PNG"
    else bad "eval kl --plot: no PNG"; cat "$TMP/kl_table.err"; fi
    # gnuplot's own messages (one point gives it an empty x range) go to stderr, never into
    # the table or the JSON on stdout
    if grep -qi "warning" "$TMP/kl_table.out"; then bad "eval kl --plot: gnuplot output on stdout"
    else ok "eval kl --plot: stdout is the table alone"; fi
fi

# --windows: three windows spread over the text, per window and pooled, the t-interval
run kl_win "$KVCOMP" eval kl -m "$MODEL" --text "$TEXT" --ctx 64 --cont 8 --windows 3 -t 1 \
    --kv "full:f32,full:f16,block=16" --json
check "eval kl --windows JSON" "$TMP/kl_win.out" '
w = d["windows"]
assert len(w) == 3 and w[0]["start"] == 0 and w[0]["start"] < w[1]["start"] < w[2]["start"], w
assert w[2]["start"] - w[1]["start"] >= 8 and all(x["ref_ppl"] > 1 for x in w)
assert d["reference"]["peak_rss_bytes"] > 0
m = {x["spec"]: x for x in d["methods"]}
for x in m.values():
    assert len(x["windows"]) == 3 and x["peak_rss_bytes"] > 0
    pooled, per = x["kl"]["mean"], [v["kl_mean"] for v in x["windows"]]
    assert abs(pooled - sum(per) / 3) <= 1e-9 + 1e-9 * abs(pooled), (pooled, per)
    lo, hi = x["kl"]["mean_ci95"]
    assert lo <= pooled <= hi, (lo, pooled, hi)
assert all(abs(v) < 1e-6 for v in m["full:f32"]["kl"]["mean_ci95"])
assert m["full:f16,block=16"]["kl"]["mean_ci95"][1] > 0
'
expect 1 "--windows 50 .*need [0-9]+" "$KVCOMP" eval kl -m "$MODEL" --text "$TEXT" --ctx 30000 \
    --cont 256 --windows 50
expect 2 "--windows" "$KVCOMP" eval kl --windows 0

# --ref-out keeps the reference, --ref reads it back: the same results without
# the full:f32 run; a file from another run or an altered one is refused
run kl_refout "$KVCOMP" eval kl -m "$MODEL" --text "$TEXT" --ctx 96 --cont 8 --windows 2 -b 32 -t 1 \
    --kv "full:f32,kivi:bits=2" --ref-out "$TMP/kl.ref" --json
run kl_refin "$KVCOMP" eval kl -m "$MODEL" --text "$TEXT" --ctx 96 --cont 8 --windows 2 -b 32 -t 1 \
    --kv "kivi:bits=2,full:f32" --ref "$TMP/kl.ref" --json
[[ ! -e "$TMP/kl.ref.tmp" ]] && ok "--ref-out leaves no .tmp" || bad "--ref-out left $TMP/kl.ref.tmp"
python3 - "$TMP/kl_refout.out" "$TMP/kl_refin.out" <<'EOF_PY' && ok "eval kl --ref gives --ref-out's results" || bad "eval kl --ref results differ"
import json, sys
a, b = (json.load(open(f)) for f in sys.argv[1:3])
assert a["reference"]["read_from_file"] is False and b["reference"]["read_from_file"] is True
assert a["reference"]["ppl"] == b["reference"]["ppl"]
assert [w["ref_ppl"] for w in a["windows"]] == [w["ref_ppl"] for w in b["windows"]]
ma = {m["spec"]: m for m in a["methods"]}
mb = {m["spec"]: m for m in b["methods"]}
for k in ma:
    assert ma[k]["kl"] == mb[k]["kl"] and ma[k]["max_abs_dlogit"] == mb[k]["max_abs_dlogit"], k
assert mb["full:f32"]["kl"]["max"] == 0 and mb["kivi:bits=2"]["kl"]["mean"] > 0
EOF_PY
expect 1 "--cont is 8 in the file, 9" "$KVCOMP" eval kl -m "$MODEL" --text "$TEXT" --ctx 96 --cont 9 \
    --windows 2 -b 32 -t 1 --kv full:f32 --ref "$TMP/kl.ref"
expect 1 "thread count \(-t\) is 1 in the file, 2" "$KVCOMP" eval kl -m "$MODEL" --text "$TEXT" --ctx 96 \
    --cont 8 --windows 2 -b 32 -t 2 --kv full:f32 --ref "$TMP/kl.ref"
cp "$TMP/kl.ref" "$TMP/flip.ref"
printf '\x55' | dd of="$TMP/flip.ref" bs=1 seek=$(( $(stat -c %s "$TMP/kl.ref") - 100 )) conv=notrunc 2>/dev/null
expect 1 "window 1 fails its checksum" "$KVCOMP" eval kl -m "$MODEL" --text "$TEXT" --ctx 96 --cont 8 \
    --windows 2 -b 32 -t 1 --kv full:f32 --ref "$TMP/flip.ref"
head -c 5000 "$TMP/kl.ref" >"$TMP/short.ref"
expect 1 "truncated" "$KVCOMP" eval kl -m "$MODEL" --text "$TEXT" --ctx 96 --cont 8 --windows 2 -b 32 \
    -t 1 --kv full:f32 --ref "$TMP/short.ref"
expect 1 "not a reference file" "$KVCOMP" eval kl -m "$MODEL" --text "$TEXT" --ctx 96 --cont 8 \
    --windows 2 -b 32 -t 1 --kv full:f32 --ref "$TEXT"
expect 2 "--ref and --ref-out together" "$KVCOMP" eval kl --ref a --ref-out b

# bench/kl_frontier.py merges runs that share a reference into one table and
# picture, and refuses a spec twice or a run against another reference
run kl_refin2 "$KVCOMP" eval kl -m "$MODEL" --text "$TEXT" --ctx 96 --cont 8 --windows 2 -b 32 -t 1 \
    --kv "full:f16" --ref "$TMP/kl.ref" --json
FRONTIER=$SRC/bench/kl_frontier.py
run frontier python3 "$FRONTIER" "$TMP/kl_refout.out" "$TMP/kl_refin2.out"
[[ $(grep -c '^| \(full:f32\|full:f16\|kivi:bits=2\) |' "$TMP/frontier.out") -eq 3 ]] &&
    ok "kl_frontier: one row per method" || bad "kl_frontier table: $(cat "$TMP/frontier.out")"
if command -v gnuplot >/dev/null; then
    python3 "$FRONTIER" "$TMP/kl_refout.out" "$TMP/kl_refin2.out" --plot "$TMP/front.png" >/dev/null
    head -c 8 "$TMP/front.png" 2>/dev/null | grep -q PNG && ok "kl_frontier --plot PNG" ||
        bad "kl_frontier --plot: no PNG"
fi
grep -q '^| full:f32 | .* yes |$' "$TMP/frontier.out" && ok "kl_frontier: full:f32 on the front" ||
    bad "kl_frontier: full:f32 (KL 0) not on the front"
expect 1 "kivi:bits=2 is also in" python3 "$FRONTIER" "$TMP/kl_refout.out" "$TMP/kl_refin.out"
expect 1 "ctx is 96, the first run's is 256" python3 "$FRONTIER" "$TMP/kl.out" "$TMP/kl_refin2.out"
# another build (the same executable with one byte appended: another checksum)
# and, where the machine has SIMD kernels, another ISA are refused unless
# --ref-any-build; two builds' rounding moves the logits as much as a method
cp "$KVCOMP" "$TMP/kvcomp-other" && printf '\n' >>"$TMP/kvcomp-other"
run kl_other "$TMP/kvcomp-other" eval kl -m "$MODEL" --text "$TEXT" --ctx 96 --cont 8 -b 32 -t 1 \
    --kv full:f32 --ref-out "$TMP/other.ref" --json
expect 1 "made by another kvcomp build" "$KVCOMP" eval kl -m "$MODEL" --text "$TEXT" --ctx 96 \
    --cont 8 -b 32 -t 1 --kv full:f32 --ref "$TMP/other.ref"
run kl_anybuild "$KVCOMP" eval kl -m "$MODEL" --text "$TEXT" --ctx 96 --cont 8 -b 32 -t 1 \
    --kv full:f32 --ref "$TMP/other.ref" --ref-any-build --json
if [[ $(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["machine"]["isa"])' \
    "$TMP/kl_refout.out") != scalar ]]; then
    KVC_ISA=scalar "$KVCOMP" eval kl -m "$MODEL" --text "$TEXT" --ctx 96 --cont 8 -b 32 -t 1 \
        --kv full:f32 --ref-out "$TMP/scalar.ref" >/dev/null 2>&1
    expect 1 "made with the scalar kernels, this run uses" "$KVCOMP" eval kl -m "$MODEL" \
        --text "$TEXT" --ctx 96 --cont 8 -b 32 -t 1 --kv full:f32 --ref "$TMP/scalar.ref"
fi

# ---- eval ruler ----
run ruler "$KVCOMP" eval ruler -m "$MODEL" --text "$TEXT" --task niah_single,vt --len 400 -t 1 \
    --samples 2 --seed 3 --kv "full:f32;full:f16,block=16" --json
check "eval ruler JSON" "$TMP/ruler.out" '
assert d["command"] == "eval ruler" and d["len"] == 400 and d["samples"] == 2 and d["seed"] == 3
assert [t["task"] for t in d["tasks"]] == ["niah_single", "vt"]
for t in d["tasks"]: assert 100 < t["mean_prompt_tokens"] <= 400 - 64
assert [m["spec"] for m in d["methods"]] == ["full:f32", "full:f16,block=16"]
for m in d["methods"]:
    assert m["ok"] is True and 0 <= m["mean_accuracy"] <= 1
    for task in ("niah_single", "vt"):
        c = m["accuracy"][task]
        assert c["n"] == 2 and 0 <= c["score"] <= 1 and 0 <= c["perfect"] <= 2
    assert m["cache"]["bytes_per_token"] > 0
assert d["depths"] == []
'
# chosen needle depths: sample i at the (i mod n)-th, printed with --verbose (the nearest
# sentence boundary of a 400-token haystack: within a few hundredths)
run ruler_depth "$KVCOMP" eval ruler -m "$MODEL" --text "$TEXT" --len 400 -t 1 --samples 2 \
    --depth 0.1,0.9 --kv full:f16 --json --verbose
check "eval ruler --depth JSON" "$TMP/ruler_depth.out" '
assert d["depths"] == [0.1, 0.9] and d["methods"][0]["accuracy"]["niah_single"]["n"] == 2
'
if grep -q "#0 full:f16.*depth 0\.[01]" "$TMP/ruler_depth.err" &&
    grep -q "#1 full:f16.*depth 0\.[89]" "$TMP/ruler_depth.err"
then ok "eval ruler --depth places the needles"; else bad "eval ruler --depth"; cat "$TMP/ruler_depth.err"; fi
# one line per sample even when the output has newlines (sample #1's does: ":\n\n1. ...")
if ! grep -qv '^\[niah_single #[01] full:f16\] score .* | output: ' "$TMP/ruler_depth.err"
then ok "eval ruler --verbose: one line per sample"; else bad "eval ruler --verbose lines"; cat "$TMP/ruler_depth.err"; fi

# ---- methods, bench ----
run methods "$KVCOMP" methods --json
check "methods JSON" "$TMP/methods.out" '
full = [m for m in d["methods"] if m["name"] == "full"][0]
assert any(p["key"] == "dtype" and "f16" in p["choices"] for p in full["params"])
'
run bw "$KVCOMP" bench bw --size 64 --runs 2 --json
check "bench bw JSON" "$TMP/bw.out" 'assert d["best_gbps"] > 0 and d["bytes"] == 64 << 20'
run attn "$KVCOMP" bench attn --ctx 1k,2k --kv full:f16,full:f32 --min-time 0.01 --reps 1 --no-bw --json
check "bench attn JSON" "$TMP/attn.out" '
rows = d["rows"]
assert [(r["ctx"], r["spec"]) for r in rows] == [(1024, "full:f16"), (1024, "full:f32"), (2048, "full:f16"), (2048, "full:f32")]
for r in rows:
    assert r["ok"] and r["median_us"] > 0 and r["gbps"] > 0 and r["steps"] >= r["layers"]
    assert r["cache"]["tokens"] == r["ctx"]
for i in (0, 2):
    assert rows[i]["ratio_vs_first"] == 1
    assert abs(rows[i + 1]["bytes_per_layer"] / rows[i]["bytes_per_layer"] - 2) < 0.01
    # the methods of a context take turns: the same rounds, one sweep over the layers each
    assert rows[i]["rounds"] == rows[i + 1]["rounds"] >= 1
    assert rows[i]["paired_ratio"] == rows[i]["paired_ratio_p25"] == rows[i]["paired_ratio_p75"] == 1
    r = rows[i + 1]
    assert r["steps"] == r["rounds"] * r["layers"] and 0 < r["paired_ratio_p25"] <= r["paired_ratio"] <= r["paired_ratio_p75"]
assert d["n_heads"] == 9 and d["n_kv_heads"] == 3 and d["head_dim"] == 64 and d["bw_gbps"] is None
'
run decode "$KVCOMP" bench decode -m "$MODEL" --text "$TEXT" --ctx 64 -n 4 --kv full:f16 --json
check "bench decode JSON" "$TMP/decode.out" '
r = d["rows"][0]
assert r["ok"] and r["decode_tok_s"] > 0 and r["weights_s"] > 0 and r["cache"]["tokens"] == 68
'
# --kv-mem far below the cache: sentkv's sealed sentences go to a temporary
# far file, full:f16 keeps its cache in RAM; both decode
run decodemem "$KVCOMP" bench decode -m "$MODEL" --text "$TEXT" --ctx 512 -n 8 --kv full:f16,sentkv:0.3 --kv-mem 16K --json
check "bench decode --kv-mem" "$TMP/decodemem.out" '
f, s = d["rows"]
assert f["ok"] and s["ok"] and f["spec"] == "full:f16" and s["spec"].endswith("mem=16384")
assert f["cache"]["far_bytes"] == 0 and s["cache"]["far_bytes"] > 100000
assert s["far_read_bytes"] > 0 and s["cache"]["far_near_bytes"] > 0
'

# ---- dump-kv -> bench attn --dump ----
"$KVCOMP" dump-kv -m "$MODEL" --text "$TEXT" --ctx 96 -b 32 -o "$TMP/kv.bin" >"$TMP/dump.out" 2>&1
rc=$?
if [[ $rc -ne 0 ]]; then
    bad "dump-kv: exit $rc"; cat "$TMP/dump.out"
else
    # 40-byte header + 30 layers x 2 x 96 tokens x 3 heads x 64 x 4 bytes
    size=$(stat -c %s "$TMP/kv.bin")
    if [[ $size -eq $((40 + 30 * 2 * 96 * 3 * 64 * 4)) ]]; then ok "dump-kv size"; else bad "dump-kv size $size"; fi
    # the values are the model's K/V: finite, not all zero, and layers differ
    if python3 - "$TMP/kv.bin" <<'PY'
import struct, sys, math
b = open(sys.argv[1], "rb").read()[40:]
n = 96 * 3 * 64
x = struct.unpack("<%df" % (len(b) // 4), b)
assert all(math.isfinite(v) for v in x)
layer = lambda l: x[l * 2 * n:(l + 1) * 2 * n]
assert any(v != 0 for v in layer(0)) and layer(0) != layer(29)
PY
    then ok "dump-kv values"; else bad "dump-kv values"; fi
    run attn_dump "$KVCOMP" bench attn --dump "$TMP/kv.bin" --ctx 200 --kv full:f16 --min-time 0.01 --no-bw --json
    check "bench attn --dump JSON" "$TMP/attn_dump.out" '
assert d["kv_source"].endswith("kv.bin") and d["dump_layer"] == 15 and d["rows"][0]["ok"]
'
    head -c 100 "$TMP/kv.bin" >"$TMP/short.bin"
    expect 1 "needs [0-9]+" "$KVCOMP" bench attn --dump "$TMP/short.bin" --ctx 64 --no-bw
fi

# ---- bad flags ----
expect 2 "unknown evaluation" "$KVCOMP" eval perplexity
expect 2 "unknown option '--bogus'" "$KVCOMP" eval kl --bogus
expect 2 "--ctx.*not an integer" "$KVCOMP" eval kl --ctx many
expect 2 "--kv 'nosuch'.*valid" "$KVCOMP" eval kl -m "$MODEL" --text "$TEXT" --kv nosuch
expect 2 "parameter with no method" "$KVCOMP" eval kl -m "$MODEL" --text "$TEXT" --kv bits=2,full:f16
expect 1 "--text.*cannot open" "$KVCOMP" eval kl -m "$MODEL" --text "$TMP/missing.txt"
expect 1 "text has [0-9]+ tokens" "$KVCOMP" eval kl -m "$MODEL" --text "$TEXT" --ctx 100000 --cont 8
expect 2 "--task 'needle'.*niah_single" "$KVCOMP" eval ruler --task needle
expect 2 "--samples.*outside" "$KVCOMP" eval ruler --samples 0
expect 2 "--depth 0.5,2: '2' is not a fraction" "$KVCOMP" eval ruler --depth 0.5,2
expect 2 "--depth places the one needle.*niah_multikey" "$KVCOMP" eval ruler --task niah_single,niah_multikey --depth 0.5
expect 2 "unknown benchmark" "$KVCOMP" bench fast
expect 2 "--ctx '4q'" "$KVCOMP" bench attn --ctx 4q
expect 2 "not a multiple" "$KVCOMP" bench attn --heads 9 --kv-heads 2
expect 2 "-o FILE" "$KVCOMP" dump-kv -m "$MODEL"
expect 0 "usage: kvcomp eval kl" "$KVCOMP" eval kl --help
expect 0 "usage: kvcomp bench attn" "$KVCOMP" bench attn --help

echo "$passes passed, $fails failed"
[[ $fails -eq 0 ]]
