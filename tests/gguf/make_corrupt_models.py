#!/usr/bin/env python3
"""Corrupt-model corpus for the test suite: from a valid GGUF model (the tiny
fixture tests/fixtures/models/tiny_llama.gguf) writes one malformed copy per
case into OUT_DIR, and OUT_DIR/MANIFEST with one line per file:
    <file>\t<regex the error message must match>
The classes (issue 14): truncation at every structural boundary (header
fields, each key/value part, array items, each tensor-info field, the data
section, each tensor's data), huge counts and lengths, overflowing dimensions
and offsets, misaligned data and alignments, tensors overlapping or past the
end, wrong value types for known keys, duplicate keys and tensor names, and
right-named tensors of the wrong shape for the architecture, NaN and Inf
weights. Each pattern
names the field. tests/cli/test_corrupt_models.sh runs `kvcomp inspect` and
`kvcomp run` on every file. Usage: make_corrupt_models.py MODEL OUT_DIR"""
import os
import struct
import sys

STR, ARR = 8, 9
SCALAR = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}


class Layout:
    """Byte positions of every field of a GGUF v2/v3 file."""

    def __init__(self, data):
        self.data = data
        self.pos = 0
        assert data[:4] == b"GGUF"
        self.n_tensors, self.n_kv = struct.unpack_from("<QQ", data, 8)
        self.pos = 24
        self.kvs = []  # dicts: key, start, type_pos, value_pos, end, items (array item starts)
        for _ in range(self.n_kv):
            kv = {"start": self.pos}
            kv["key"] = self.string()
            kv["type_pos"] = self.pos
            t = self.u32()
            kv["type"] = t
            kv["value_pos"] = self.pos
            kv["items"] = self.value(t)
            kv["end"] = self.pos
            self.kvs.append(kv)
        self.tensors = []
        for _ in range(self.n_tensors):
            t = {"start": self.pos}
            t["name"] = self.string()
            t["ndims_pos"] = self.pos
            nd = self.u32()
            t["ne_pos"] = [self.pos + 8 * d for d in range(nd)]
            t["ne"] = list(struct.unpack_from("<%dQ" % nd, data, self.pos))
            self.pos += 8 * nd
            t["type_pos"] = self.pos
            t["type"] = self.u32()
            t["offset_pos"] = self.pos
            t["offset"] = struct.unpack_from("<Q", data, self.pos)[0]
            self.pos += 8
            t["end"] = self.pos
            self.tensors.append(t)
        self.infos_end = self.pos
        self.align = 32
        self.data_start = (self.pos + self.align - 1) // self.align * self.align

    def u32(self):
        v = struct.unpack_from("<I", self.data, self.pos)[0]
        self.pos += 4
        return v

    def string(self):
        n = struct.unpack_from("<Q", self.data, self.pos)[0]
        s = self.data[self.pos + 8:self.pos + 8 + n].decode("utf-8", "replace")
        self.pos += 8 + n
        return s

    def value(self, t):
        if t == STR:
            self.string()
            return []
        if t == ARR:
            et = self.u32()
            n = struct.unpack_from("<Q", self.data, self.pos)[0]
            self.pos += 8
            items = []
            for _ in range(n):
                items.append(self.pos)
                self.value(et)
            return items
        self.pos += SCALAR[t]
        return []

    def kv(self, key):
        return next(k for k in self.kvs if k["key"] == key)

    def tensor(self, name):
        return next(t for t in self.tensors if t["name"] == name)


def patch(data, pos, fmt, *vals):
    b = bytearray(data)
    struct.pack_into(fmt, b, pos, *vals)
    return bytes(b)


def rebuild(model, L, replace=None, extra=b"", n_extra=0):
    """The file with key/values replaced ({key: packed type + value}) and
    `extra` key/values appended; tensor infos and data unchanged (offsets are
    relative to the data section, which moves to the next alignment)."""
    replace = replace or {}
    body = bytearray(model[:24])
    struct.pack_into("<Q", body, 16, L.n_kv + n_extra)
    for kv in L.kvs:
        if kv["key"] in replace:
            body += model[kv["start"]:kv["type_pos"]] + replace[kv["key"]]
        else:
            body += model[kv["start"]:kv["end"]]
    body += extra + model[L.kvs[-1]["end"]:L.infos_end]
    body += b"\0" * (-len(body) % L.align)
    return bytes(body) + model[L.data_start:]


def typed(t, fmt, *vals):
    return struct.pack("<I", t) + struct.pack(fmt, *vals)


def string(t_str):
    b = t_str.encode()
    return struct.pack("<IQ", STR, len(b)) + b


def cases(model):
    L = Layout(model)
    out = []

    def add(name, data, pattern):
        out.append((name, data, pattern))

    # --- truncation at every structural boundary
    # the parser names the field in every message ("header: kv count ...",
    # "kv[12] key ...[3]: string length ...", "tensor blk.0.attn_q.weight: ...")
    past = r"(header|kv\[[0-9]+\]|tensor).*(past end of file|too short)"
    for pos, what in [(0, "empty"), (3, "magic"), (4, "version"), (8, "tensor-count"),
                      (16, "kv-count")]:
        add("trunc-%s" % what, model[:pos], past if pos else "empty file")
    for i, kv in enumerate(L.kvs):
        add("trunc-kv%d-key" % i, model[:kv["start"] + 4], past)
        add("trunc-kv%d-type" % i, model[:kv["type_pos"]], past)
        add("trunc-kv%d-value" % i, model[:kv["value_pos"]], past)
        items = kv["items"]
        for j in sorted({0, 1, len(items) - 1} & set(range(len(items)))):
            add("trunc-kv%d-item%d" % (i, j), model[:items[j] + 1], past)
    for i, t in enumerate(L.tensors):
        add("trunc-tensor%d-name" % i, model[:t["start"] + 9], past)
        add("trunc-tensor%d-ndims" % i, model[:t["ndims_pos"]], past)
        add("trunc-tensor%d-ne" % i, model[:t["ne_pos"][-1]], past)
        add("trunc-tensor%d-type" % i, model[:t["type_pos"]], past)
        add("trunc-tensor%d-offset" % i, model[:t["offset_pos"] + 3], past)
    add("trunc-data-start", model[:L.data_start], r"tensor .*past end of file")
    for i, t in enumerate(L.tensors):
        end = L.data_start + t["offset"]
        add("trunc-data-tensor%d" % i, model[:end + 1],
            r"tensor %s.*past end of file" % t["name"].replace(".", r"\."))

    # --- huge counts and lengths
    add("huge-tensor-count", patch(model, 8, "<Q", 1 << 62), r"tensor count .*past end of file")
    add("huge-kv-count", patch(model, 16, "<Q", (1 << 63) - 1), r"kv count .*past end of file")
    add("negative-kv-count", patch(model, 16, "<Q", 1 << 63), r"kv count .* negative")
    k0 = L.kvs[0]
    add("huge-key-length", patch(model, k0["start"], "<Q", 1 << 60), r"kv\[0\].*length .*past end of file")
    tok = L.kv("tokenizer.ggml.tokens")
    add("huge-array-count", patch(model, tok["value_pos"] + 4, "<Q", 1 << 61),
        r"tokenizer\.ggml\.tokens.*count .*past end of file")
    add("huge-string-length", patch(model, tok["items"][3], "<Q", 1 << 40),
        r"tokenizer\.ggml\.tokens.*\[3\].*length .*past end of file")
    name = L.kv("general.name")
    add("string-length-past-end", patch(model, name["value_pos"] + 4, "<Q", len(model)),
        r"general\.name.*past end of file")
    add("unknown-value-type", patch(model, name["type_pos"], "<I", 99), r"general\.name.*value type 99 unknown")
    add("array-element-type", patch(model, tok["value_pos"], "<I", 77),
        r"tokenizer\.ggml\.tokens.*element type 77 unknown")

    # --- overflowing dims and offsets
    emb = L.tensor("token_embd.weight")
    add("dims-overflow", patch(patch(model, emb["ne_pos"][0], "<Q", 1 << 40), emb["ne_pos"][1], "<Q", 1 << 40),
        r"tensor token_embd\.weight.*(overflows|past end of file)")
    add("dim-negative", patch(model, emb["ne_pos"][0], "<Q", (1 << 64) - 64), r"tensor token_embd\.weight.*negative")
    add("dim-zero", patch(model, emb["ne_pos"][1], "<Q", 0), r"tensor token_embd\.weight.*ne\[1\] is 0")
    add("ndims-5", patch(model, emb["ndims_pos"], "<I", 5), r"tensor token_embd\.weight.*n_dims 5")
    add("offset-overflow", patch(model, emb["offset_pos"], "<Q", (1 << 64) - 32),
        r"tensor token_embd\.weight.*offset .*past end of file")
    add("unknown-ggml-type", patch(model, emb["type_pos"], "<I", 1000), r"tensor token_embd\.weight.*unknown ggml type 1000")

    # --- misaligned data, bad alignments, overlapping and past-the-end tensors
    onorm = L.tensor("output_norm.weight")
    add("offset-misaligned", patch(model, onorm["offset_pos"], "<Q", onorm["offset"] + 4),
        r"tensor output_norm\.weight.*not a multiple of the alignment")
    add("tensor-overlap", patch(model, onorm["offset_pos"], "<Q", 0),
        r"tensor output_norm\.weight.*overlaps tensor token_embd\.weight")
    last = L.tensors[-1]
    add("tensor-past-end", patch(model, last["offset_pos"], "<Q", len(model) - L.data_start),
        r"tensor %s.*past end of file" % last["name"].replace(".", r"\."))
    # general.alignment: a file with one more key/value at the end of the metadata
    def alignment(value):
        key = b"general.alignment"
        return rebuild(model, L, extra=struct.pack("<Q", len(key)) + key + typed(4, "<I", value), n_extra=1)
    add("alignment-3", alignment(3), r"general\.alignment.*alignment 3 \(must be a power of two")
    add("alignment-0", alignment(0), r"general\.alignment.*alignment 0")
    add("alignment-huge", alignment(1 << 30), r"general\.alignment.*alignment 1073741824")

    # --- wrong types for known keys
    U32, F32T = 4, 6
    add("arch-not-string", rebuild(model, L, {"general.architecture": typed(U32, "<I", 7)}),
        r"general\.architecture.*(type|string)")
    add("block-count-string", rebuild(model, L, {"llama.block_count": string("2")}), r"llama\.block_count")
    add("block-count-f32", rebuild(model, L, {"llama.block_count": typed(F32T, "<f", 2.0)}), r"llama\.block_count")
    bc = L.kv("llama.block_count")
    add("block-count-zero", patch(model, bc["value_pos"], "<I", 0), r"llama\.block_count.* 0 ")
    add("block-count-huge", patch(model, bc["value_pos"], "<I", 1 << 30), r"llama\.block_count.*1073741824")
    add("block-count-3", patch(model, bc["value_pos"], "<I", 3), r"missing tensor blk\.2\.")
    emb_len = L.kv("llama.embedding_length")
    add("embedding-length-65", patch(model, emb_len["value_pos"], "<I", 65), r"token_embd\.weight.*shape|65")
    hc = L.kv("llama.attention.head_count_kv")
    add("head-count-kv-3", patch(model, hc["value_pos"], "<I", 3), r"head_count.*3")
    add("tokens-not-array", rebuild(model, L, {"tokenizer.ggml.tokens": string("a")}), r"tokenizer\.ggml\.tokens")
    add("token-type-f32", rebuild(model, L, {"tokenizer.ggml.token_type":
                                             struct.pack("<IIQ", ARR, F32T, 258) + b"\0\0\0\0" * 258}),
        r"tokenizer\.ggml\.token_type")
    add("tokens-short", rebuild(model, L, {"tokenizer.ggml.token_type": struct.pack("<IIQ", ARR, 5, 3) + b"\1\0\0\0" * 3}),
        r"tokenizer\.ggml\.token_type")
    # (a special-token id past the vocabulary is not refused: as llama.cpp, the
    # tokenizer keeps its default for that id, so nothing reads out of range)
    eps = L.kv("llama.attention.layer_norm_rms_epsilon")
    add("epsilon-nan", patch(model, eps["value_pos"], "<f", float("nan")), r"layer_norm_rms_epsilon.*nan")

    # --- duplicate keys and tensor names (same-length renames in place)
    ctx = L.kv("llama.context_length")  # 20 characters, as general.architecture
    add("duplicate-key", patch(model, ctx["start"] + 8, "20s", b"general.architecture"),
        r'kv\[[0-9]+\] key "general\.architecture".*duplicate key \(also kv\[0\]\)')
    add("duplicate-tensor-name", patch(model, L.tensor("blk.1.ffn_up.weight")["start"] + 8, "19s",
                                       b"blk.0.ffn_up.weight"),
        r"tensor blk\.0\.ffn_up\.weight.*duplicate tensor name")

    # --- right name, wrong shape for the architecture
    q = L.tensor("blk.0.attn_q.weight")
    add("shape-attn-q", patch(model, q["ne_pos"][1], "<Q", 32), r"tensor blk\.0\.attn_q\.weight.*shape")
    add("shape-output-norm", patch(model, onorm["ne_pos"][0], "<Q", 32), r"tensor output_norm\.weight.*shape")
    add("shape-ffn-down-3d", patch(model, L.tensor("blk.1.ffn_down.weight")["ndims_pos"], "<I", 1),
        r"tensor blk\.1\.ffn_down\.weight")
    add("missing-tensor", patch(model, q["start"] + 8, "19s", b"blk.0.attn_Q.weight"),
        r"missing tensor blk\.0\.attn_q\.weight")
    # --- NaN / Inf weights (probe findings 2 and 3): refused at load, naming the tensor
    def poke(name, index, value):
        t = L.tensor(name)
        return patch(model, L.data_start + t["offset"] + 4 * index, "<f", value)  # f32 fixture
    add("nan-output-norm", poke("output_norm.weight", 5, float("nan")),
        r"tensor output_norm\.weight: NaN at row 0, column 5")
    add("inf-attn-q", poke("blk.1.attn_q.weight", 64 * 3 + 7, float("inf")),
        r"tensor blk\.1\.attn_q\.weight: Inf at row 3, column 7")
    add("nan-token-embd", poke("token_embd.weight", 64 * 257 + 63, float("nan")),
        r"tensor token_embd\.weight: NaN at row 257, column 63")
    return out


def main():
    model = open(sys.argv[1], "rb").read()
    out_dir = sys.argv[2]
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "MANIFEST"), "w") as m:
        for name, data, pattern in cases(model):
            with open(os.path.join(out_dir, name + ".gguf"), "wb") as f:
                f.write(data)
            m.write("%s.gguf\t%s\n" % (name, pattern))


if __name__ == "__main__":
    main()
