#!/usr/bin/env python3
"""Writes small valid GGUF files (ggml docs/gguf.md layout) as libFuzzer seeds for
tests/fuzz/fuzz_gguf.c: every metadata value type, nested arrays, v2 and v3,
custom alignment, tensors of a few ggml types. Usage: make_gguf_seeds.py DIR"""
import os
import struct
import sys

U8, I8, U16, I16, U32, I32, F32, BOOL, STR, ARR, U64, I64, F64 = range(13)
FMT = {U8: "<B", I8: "<b", U16: "<H", I16: "<h", U32: "<I", I32: "<i", F32: "<f",
       BOOL: "<B", U64: "<Q", I64: "<q", F64: "<d"}


def s(x):
    b = x.encode()
    return struct.pack("<Q", len(b)) + b


def val(t, v):
    if t == STR:
        return s(v)
    if t == ARR:
        et, items = v
        return struct.pack("<IQ", et, len(items)) + b"".join(val(et, i) for i in items)
    return struct.pack(FMT[t], v)


# (name, dims, ggml type, bytes per block, elements per block)
TENSORS = {"f32": (0, 4, 1), "f16": (1, 2, 1), "q4_1": (3, 20, 32), "q8_0": (8, 34, 32),
           "q4_k": (12, 144, 256), "q6_k": (14, 210, 256)}


def gguf(version, kvs, tensors, align=32):
    out = b"GGUF" + struct.pack("<IQQ", version, len(tensors), len(kvs))
    for k, t, v in kvs:
        out += s(k) + struct.pack("<I", t) + val(t, v)
    off, sizes = 0, []
    for name, dims, ty in tensors:
        tid, bb, blk = TENSORS[ty]
        n = 1
        for d in dims:
            n *= d
        size = n // blk * bb
        out += s(name) + struct.pack("<I", len(dims)) + b"".join(struct.pack("<Q", d) for d in dims)
        out += struct.pack("<IQ", tid, off)
        sizes.append((off, size))
        off = (off + size + align - 1) // align * align
    out += b"\0" * (-len(out) % align)
    data = bytearray()
    for o, size in sizes:
        data += b"\0" * (o - len(data))
        data += bytes((o + i) & 0xff for i in range(size))
    return out + bytes(data)


ALL = [("general.architecture", STR, "llama"), ("t.u8", U8, 200), ("t.i8", I8, -100),
       ("t.u16", U16, 60000), ("t.i16", I16, -30000), ("t.u32", U32, 4000000000),
       ("t.i32", I32, -2000000000), ("t.f32", F32, 1.5), ("t.bool", BOOL, 1),
       ("t.str", STR, "h\u00e9llo"), ("t.u64", U64, 1 << 40), ("t.i64", I64, -(1 << 40)),
       ("t.f64", F64, -2.25), ("t.arr.i32", ARR, (I32, [1, -2, 3])),
       ("t.arr.str", ARR, (STR, ["a", "bc", ""])),
       ("t.arr.nested", ARR, (ARR, [(U8, [1, 2]), (STR, ["x"]), (F64, [])]))]
LLAMA = [("general.architecture", STR, "llama"), ("llama.block_count", U32, 1),
         ("llama.embedding_length", U32, 32), ("tokenizer.ggml.tokens", ARR, (STR, ["<s>", "a", "b"])),
         ("tokenizer.ggml.scores", ARR, (F32, [0.0, -1.0, -2.0]))]
T3 = [("tok.weight", (32, 3), "f32"), ("blk.0.q", (64, 2), "q8_0"), ("norm", (8,), "f16")]
TK = [("blk.0.ffn", (256, 2), "q4_k"), ("blk.0.out", (256,), "q6_k"), ("x", (32, 1, 1, 2), "q4_1")]

SEEDS = {
    "all_types_v3.gguf": gguf(3, ALL, T3),
    "all_types_v2.gguf": gguf(2, ALL, T3),
    "align64.gguf": gguf(3, ALL[:3] + [("general.alignment", U32, 64)], T3, 64),
    "llama_like.gguf": gguf(3, LLAMA, TK),
    "no_tensors.gguf": gguf(3, ALL[:5], []),
    "header_only.gguf": gguf(3, [], []),
}

if __name__ == "__main__":
    d = sys.argv[1] if len(sys.argv) > 1 else "."
    os.makedirs(d, exist_ok=True)
    for name, b in SEEDS.items():
        with open(os.path.join(d, name), "wb") as f:
            f.write(b)
