#!/usr/bin/env python3
"""Reference side of the end-to-end speed comparison in docs/benchmarks.md:
prefill and decode tokens/s of llama.cpp (through llama-cpp-python) for a
model at given context lengths, with the same threads as kvcomp.

For each context length L it takes the first L tokens of a text (tokenised by
the reference; default data/alice.txt, repeated if shorter), prefills them
(n_ctx = L + decode tokens, n_batch 512) and times that, then decodes
--decode tokens greedily one at a time, timing only the model evaluation.
--type-k / --type-v set the KV cache types (f16, the default, q8_0, q4_0;
llama.cpp quantizes V only with flash attention, --flash-attn). With
--write-prompts DIR it also writes DIR/prompt_L.txt (the detokenised L
tokens) so kvcomp can be run on the same text:

  kvcomp run -m MODEL -f DIR/prompt_L.txt --raw -c L+N -n N -t 2 --temp 0

Usage: /opt/ref/venv/bin/python bench/llama_cpp_ref.py [--model M] [--text F]
       [--ctx 512,2048,8192] [--decode 128] [--threads 2] [--reps 3] [--json]
       [--type-k f16|q8_0|q4_0] [--type-v f16|q8_0|q4_0] [--flash-attn]
"""
import argparse
import json
import os
import sys
import time

import numpy as np
import llama_cpp

# ggml type ids of the KV cache types llama.cpp takes (ggml.h enum ggml_type)
GGML_TYPES = {"f32": 0, "f16": 1, "q4_0": 2, "q4_1": 3, "q5_0": 6, "q5_1": 7, "q8_0": 8}

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def last_argmax(llm):
    # logits_all=False: only the last position's logits exist, in the context
    logits = np.ctypeslib.as_array(llm._ctx.get_logits(), shape=(llm.n_vocab(),))
    return int(np.argmax(logits))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--text", default=os.path.join(ROOT, "data", "alice.txt"))
    ap.add_argument("--ctx", default="512,2048,8192")
    ap.add_argument("--decode", type=int, default=128)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=3, help="repetitions; the best is reported")
    ap.add_argument("--write-prompts", metavar="DIR")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--type-k", default="f16", choices=sorted(GGML_TYPES))
    ap.add_argument("--type-v", default="f16", choices=sorted(GGML_TYPES))
    ap.add_argument("--flash-attn", action="store_true")
    a = ap.parse_args()

    text = open(a.text, encoding="utf-8").read()
    rows = []
    for L in [int(x) for x in a.ctx.split(",")]:
        n_ctx = L + a.decode
        llm = llama_cpp.Llama(model_path=a.model, n_ctx=n_ctx, n_batch=512, n_threads=a.threads,
                              n_threads_batch=a.threads, logits_all=False, verbose=False,
                              type_k=GGML_TYPES[a.type_k], type_v=GGML_TYPES[a.type_v],
                              flash_attn=a.flash_attn)
        toks = llm.tokenize(text.encode("utf-8"), add_bos=True, special=False)
        while len(toks) < L:
            toks = toks + toks
        toks = toks[:L]
        if a.write_prompts:
            os.makedirs(a.write_prompts, exist_ok=True)
            with open(os.path.join(a.write_prompts, f"prompt_{L}.txt"), "wb") as f:
                f.write(llm.detokenize(toks))
        best = {"prefill_tok_s": 0.0, "decode_tok_s": 0.0, "prefill_tok_per_cpu_s": 0.0,
                "decode_tok_per_cpu_s": 0.0}
        for _ in range(a.reps):
            llm.reset()
            t0, c0 = time.perf_counter(), time.process_time()
            llm.eval(toks)
            pf, pf_cpu = L / (time.perf_counter() - t0), L / (time.process_time() - c0)
            tok = last_argmax(llm)
            dt = dc = 0.0
            for _ in range(a.decode - 1):
                t0, c0 = time.perf_counter(), time.process_time()
                llm.eval([tok])
                dt += time.perf_counter() - t0
                dc += time.process_time() - c0
                tok = last_argmax(llm)
            got = {"prefill_tok_s": pf, "decode_tok_s": (a.decode - 1) / dt,
                   "prefill_tok_per_cpu_s": pf_cpu, "decode_tok_per_cpu_s": (a.decode - 1) / dc}
            best = {k: max(best[k], got[k]) for k in best}
        best_pf, best_dec = best["prefill_tok_s"], best["decode_tok_s"]
        rows.append(dict(ctx=L, **best))
        del llm
        if not a.json:
            print(f"llama.cpp ctx {L:6d}: prefill {best_pf:9.1f} tok/s  decode {best_dec:8.1f} tok/s",
                  flush=True)
    if a.json:
        json.dump({"engine": "llama.cpp (llama-cpp-python %s)" % llama_cpp.__version__,
                   "threads": a.threads, "decode_tokens": a.decode, "type_k": a.type_k,
                   "type_v": a.type_v, "flash_attn": a.flash_attn, "rows": rows}, sys.stdout, indent=1)
        print()


if __name__ == "__main__":
    main()
