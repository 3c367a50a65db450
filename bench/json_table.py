#!/usr/bin/env python3
"""Markdown tables for docs/benchmarks.md from `kvcomp eval kl --json`,
`kvcomp eval ruler --json` and `kvcomp bench attn --json` output.

    bench/json_table.py FILE.json [--only "SPEC;SPEC;..."]

Cache columns: bytes per token of the whole cache (all layers, K and V:
payload + metadata + selection index + dense window + buffers) and the payload
plus metadata alone (what the compressed format itself costs), both from the
cache stats in the JSON. The reference row of eval kl is full:f32."""
import json
import sys


def cache_cols(c):
    tok = max(c.get("context_tokens", c["tokens"]), 1)  # per token of context, as bytes_per_token
    fmt = (c["payload_bytes"] + c["meta_bytes"] + c["index_bytes"]) / tok
    return "%.0f | %.0f | %.2f" % (c["bytes_per_token"], fmt, c["bits_per_element"])


def methods(d, only):
    """The methods of a run that pass --only and ran; a failed one becomes a row saying so."""
    for m in d["methods"]:
        if only and m["spec"] not in only:
            continue
        if not m["ok"]:
            print("| %s | failed: %s |" % (m["spec"], m.get("error", "")))
            continue
        yield m


def kl_table(d, only):
    print("| method | bytes/tok | format B/tok | bits/el | KL mean | KL median | KL p99 | KL max | same top % | Δp mean | PPL ratio |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    r = d["reference"]
    print("| %s (reference, PPL %.3f) | %s | 0 | 0 | 0 | 0 | 100 | 0 | 1 |" % (r["spec"], r["ppl"], cache_cols(r["cache"])))
    for m in methods(d, only):
        k = m["kl"]
        print("| %s | %s | %.4g | %.4g | %.4g | %.4g | %.2f | %+.2e | %.4f |" % (
            m["spec"], cache_cols(m["cache"]), k["mean"], k["median"], k["p99"], k["max"],
            100 * m["same_top"], m["dp_mean"], m["ppl_ratio"]))
    if d.get("dense_check"):  # null without --dense-check
        dc = d["dense_check"]
        print("\ndense check (full:f32): chunked prefill through the cache vs one dense chunk: "
              "max |Δlogit| %.3g, KL mean %.3g; decode through the cache vs the same tokens as "
              "one prompt chunk: max |Δlogit| %.3g, KL mean %.3g (max |logit| %.3g)" % (
                  dc["chunked_max_abs_dlogit"], dc["chunked_kl_mean"], dc["decode_max_abs_dlogit"],
                  dc["decode_kl_mean"], dc["max_abs_logit"]))


def ruler_table(d, only):
    tasks = [t["task"] for t in d["tasks"]]
    print("| method | bytes/tok | format B/tok | bits/el | " + " | ".join(tasks) + " | mean |")
    print("|---|---:|---:|---:|" + "---:|" * (len(tasks) + 1))
    for m in methods(d, only):
        acc = " | ".join("%.1f" % (100 * m["accuracy"][t]["score"]) for t in tasks)
        print("| %s | %s | %s | %.1f |" % (m["spec"], cache_cols(m["cache"]), acc, 100 * m["mean_accuracy"]))


def attn_table(d, only):
    """With --no-bw there is no bandwidth: the %bw column shows "-"."""
    bw = d.get("bw_gbps")
    head = "%%bw (of %.1f GB/s)" % bw if bw else "%bw"
    print("| ctx | method | MiB/layer | median µs | best µs | GB/s | %s | × first | paired (p25-p75) |" % head)
    print("|---:|---|---:|---:|---:|---:|---:|---:|---:|")
    for r in d["rows"]:
        if only and r["spec"] not in only:
            continue
        frac = "%.1f" % (100 * r["frac_bw"]) if r.get("frac_bw") is not None else "-"
        paired = ("%.3f (%.2f-%.2f)" % (r["paired_ratio"], r["paired_ratio_p25"], r["paired_ratio_p75"])
                  if r.get("paired_ratio") is not None else "-")
        print("| %d | %s | %.1f | %.0f | %.0f | %.1f | %s | %.3f | %s |" % (
            r["ctx"], r["spec"], r["bytes_per_layer"] / 2**20, r["median_us"], r["best_us"],
            r["gbps"], frac, r["ratio_vs_first"], paired))


def main():
    d = json.load(open(sys.argv[1]))
    only = set(sys.argv[3].split(";")) if len(sys.argv) > 3 and sys.argv[2] == "--only" else None
    {"eval kl": kl_table, "eval ruler": ruler_table, "bench attn": attn_table}[d["command"]](d, only)


if __name__ == "__main__":
    main()
