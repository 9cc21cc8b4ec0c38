#!/usr/bin/python3
"""Writes the benchmark models: deterministic random weights in real shapes, as GGUF.

    /usr/bin/python3 scripts/make_bench_models.py [OUT_DIR] [--models 15m,110m,135m]
                                                  [--types q8_0,q4_0,bf16] [--force]

OUT_DIR defaults to build/bench-models (ignored by git). Files are named
MODEL-TYPE.gguf (stories15m-q8_0.gguf, smollm135m-bf16.gguf, ...); an existing
file is kept unless --force is given. Standard library + numpy (Debian's
python3-numpy) only.

The shapes (issue 10, "Speed"):
  stories15m   llama2.c stories15M: dim 288, 6 layers, 6 heads (6 KV), FFN 768, vocab 32000
  stories110m  llama2.c stories110M: dim 768, 12 layers, 12 heads (12 KV), FFN 2048, vocab 32000
  smollm135m   SmolLM-135M: dim 576, 30 layers, 9 heads / 3 KV heads, FFN 1536, vocab 49152
All three tie the output matrix to the token embedding (llama2.c shares the
classifier with the embedding; SmolLM sets tie_word_embeddings), RMSNorm eps
1e-5, rope theta 10000. llama.context_length is 8192 in every file (llama2.c's
models were trained at 256 and 1024, SmolLM at 2048): the weights do not depend on
it, and it lets the 512-token prefill and the 4096-token-context decode run on
every file in both engines.

Weights: N(0, 0.02) float32 from numpy's PCG64 seeded by (model, tensor name),
so every run writes the same bytes; norm weights are 1. Each file is "pure":
every matrix (token embedding included) in the file's type, the norms in F32 —
the types both llama.cpp and our loader read. Quantisation follows ggml's
reference code (quantize_row_q8_0_ref, quantize_row_q4_0_ref,
ggml_compute_fp32_to_bf16):
  Q8_0: per 32 values, d = max|x| / 127 (as f16), q = round(x / d): 2 + 32 bytes.
  Q4_0: per 32 values, m = the value of largest magnitude, d = m / -8 (as f16),
        q = min(15, trunc(x / d + 8.5)); byte j holds q[j] | q[j + 16] << 4: 2 + 16 bytes.
  BF16: float32 rounded to nearest even on the upper 16 bits.
Q and K rows are not permuted the way llama.cpp's converter permutes real
checkpoints: for random weights the order of rows is immaterial.

Tokenizer metadata: a SentencePiece ("llama") vocabulary, which both llama.cpp and
Flashroll's GGUF loader read: <unk> <s> </s> (ids 0-2), the 256 byte tokens
<0x00>..<0xFF> (type BYTE), then "▁" + letters and filler pieces up to the vocab
size, with scores. BOS 1, EOS 2, add_bos true.
"""

import argparse
import os
import struct
import sys
import zlib

import numpy as np

MODELS = {
    "stories15m": dict(dim=288, layers=6, heads=6, kv_heads=6, ffn=768, vocab=32000,
                       name="llama2.c stories15M shape (random weights)"),
    "stories110m": dict(dim=768, layers=12, heads=12, kv_heads=12, ffn=2048, vocab=32000,
                        name="llama2.c stories110M shape (random weights)"),
    "smollm135m": dict(dim=576, layers=30, heads=9, kv_heads=3, ffn=1536, vocab=49152,
                       name="SmolLM-135M shape (random weights)"),
}
ALIASES = {"15m": "stories15m", "110m": "stories110m", "135m": "smollm135m"}
CONTEXT_LENGTH = 8192
ROPE_THETA = 10000.0
RMS_EPS = 1e-5
WEIGHT_STD = 0.02

# ggml type ids and llama_ftype values (general.file_type).
GGML_F32, GGML_Q4_0, GGML_Q8_0, GGML_BF16 = 0, 2, 8, 30
TYPES = {  # name: (ggml type, llama ftype)
    "q8_0": (GGML_Q8_0, 7),
    "q4_0": (GGML_Q4_0, 2),
    "bf16": (GGML_BF16, 32),
}

# GGUF metadata value types.
T_UINT32, T_INT32, T_FLOAT32, T_BOOL, T_STRING, T_ARRAY = 4, 5, 6, 7, 8, 9
ALIGNMENT = 32


# ---- quantisation (ggml reference formats)

def quantize_q8_0(x):
    """x: float32 [rows, cols], cols % 32 == 0 -> bytes, row-major blocks."""
    blocks = x.reshape(-1, 32).astype(np.float32)
    amax = np.abs(blocks).max(axis=1)
    d = amax / np.float32(127.0)
    inv = np.where(d != 0, np.float32(1.0) / np.where(d != 0, d, np.float32(1.0)), np.float32(0.0))
    v = blocks * inv[:, None]
    t = np.trunc(v)  # roundf: halves away from zero
    q = (t + np.where(np.abs(v - t) >= np.float32(0.5), np.sign(v), np.float32(0.0))).astype(np.int8)
    out = np.empty((blocks.shape[0], 34), dtype=np.uint8)
    out[:, 0:2] = d.astype(np.float16).view(np.uint8).reshape(-1, 2)
    out[:, 2:] = q.view(np.uint8)
    return out.tobytes()


def quantize_q4_0(x):
    blocks = x.reshape(-1, 32).astype(np.float32)
    idx = np.abs(blocks).argmax(axis=1)
    maxv = blocks[np.arange(blocks.shape[0]), idx]
    d = maxv / np.float32(-8.0)
    inv = np.where(d != 0, np.float32(1.0) / np.where(d != 0, d, np.float32(1.0)), np.float32(0.0))
    v = blocks * inv[:, None] + np.float32(8.5)
    q = np.minimum(np.float32(15.0), np.trunc(v)).astype(np.uint8)
    out = np.empty((blocks.shape[0], 18), dtype=np.uint8)
    out[:, 0:2] = d.astype(np.float16).view(np.uint8).reshape(-1, 2)
    out[:, 2:] = q[:, :16] | (q[:, 16:] << 4)
    return out.tobytes()


def to_bf16(x):
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    return r.tobytes()


def encode(x, ggml_type):
    if ggml_type == GGML_F32:
        return np.ascontiguousarray(x, dtype=np.float32).tobytes()
    if ggml_type == GGML_Q8_0:
        return quantize_q8_0(x)
    if ggml_type == GGML_Q4_0:
        return quantize_q4_0(x)
    if ggml_type == GGML_BF16:
        return to_bf16(x)
    raise ValueError(ggml_type)


# ---- GGUF v3 writer

def _str(s):
    b = s.encode("utf-8")
    return struct.pack("<Q", len(b)) + b


class GgufWriter:
    def __init__(self):
        self.kv = []
        self.tensors = []  # (name, dims (ggml order), ggml type, bytes)

    def u32(self, key, v):
        self.kv.append(_str(key) + struct.pack("<II", T_UINT32, v))

    def f32(self, key, v):
        self.kv.append(_str(key) + struct.pack("<If", T_FLOAT32, v))

    def boolean(self, key, v):
        self.kv.append(_str(key) + struct.pack("<IB", T_BOOL, 1 if v else 0))

    def string(self, key, v):
        self.kv.append(_str(key) + struct.pack("<I", T_STRING) + _str(v))

    def strings(self, key, values):
        parts = [_str(key), struct.pack("<IIQ", T_ARRAY, T_STRING, len(values))]
        parts += [_str(v) for v in values]
        self.kv.append(b"".join(parts))

    def floats(self, key, values):
        a = np.asarray(values, dtype="<f4")
        self.kv.append(_str(key) + struct.pack("<IIQ", T_ARRAY, T_FLOAT32, len(a)) + a.tobytes())

    def ints(self, key, values):
        a = np.asarray(values, dtype="<i4")
        self.kv.append(_str(key) + struct.pack("<IIQ", T_ARRAY, T_INT32, len(a)) + a.tobytes())

    def tensor(self, name, dims, ggml_type, data):
        self.tensors.append((name, dims, ggml_type, data))

    def write(self, path):
        infos = []
        offset = 0
        for name, dims, ggml_type, data in self.tensors:
            infos.append(_str(name) + struct.pack("<I", len(dims)) +
                         b"".join(struct.pack("<Q", d) for d in dims) +
                         struct.pack("<IQ", ggml_type, offset))
            offset += len(data)
            offset += (-offset) % ALIGNMENT
        tmp = path + ".tmp"
        with open(tmp, "wb") as f:
            f.write(b"GGUF" + struct.pack("<IQQ", 3, len(self.tensors), len(self.kv)))
            for kv in self.kv:
                f.write(kv)
            for info in infos:
                f.write(info)
            f.write(b"\0" * ((-f.tell()) % ALIGNMENT))
            for _, _, _, data in self.tensors:
                f.write(data)
                f.write(b"\0" * ((-len(data)) % ALIGNMENT))
        os.replace(tmp, path)


# ---- the model

def vocabulary(n):
    tokens = ["<unk>", "<s>", "</s>"] + ["<0x%02X>" % b for b in range(256)]
    types = [2, 3, 3] + [6] * 256  # UNKNOWN, CONTROL, CONTROL, BYTE
    scores = [0.0] * len(tokens)
    pieces = ["\u2581"] + [chr(c) for c in range(ord("a"), ord("z") + 1)]
    pieces += ["\u2581" + chr(c) for c in range(ord("a"), ord("z") + 1)]
    i = 0
    while len(tokens) + len(pieces) < n:
        pieces.append("\u2581w%d" % i)
        i += 1
    pieces = pieces[: n - len(tokens)]
    for k, p in enumerate(pieces):
        tokens.append(p)
        types.append(1)  # NORMAL
        scores.append(-float(k))
    assert len(tokens) == n and len(set(tokens)) == n
    return tokens, scores, types


def random_matrix(model, name, rows, cols):
    seed = [zlib.crc32(model.encode()), zlib.crc32(name.encode())]
    rng = np.random.Generator(np.random.PCG64(seed))
    return (rng.standard_normal((rows, cols), dtype=np.float32) * np.float32(WEIGHT_STD))


def build(model, type_name, path):
    c = MODELS[model]
    ggml_type, ftype = TYPES[type_name]
    dim, heads, kv_heads, ffn, vocab = c["dim"], c["heads"], c["kv_heads"], c["ffn"], c["vocab"]
    head_dim = dim // heads
    w = GgufWriter()
    w.string("general.architecture", "llama")
    w.string("general.name", c["name"] + " " + type_name.upper())
    w.u32("general.file_type", ftype)
    w.u32("general.alignment", ALIGNMENT)
    w.u32("llama.context_length", CONTEXT_LENGTH)
    w.u32("llama.embedding_length", dim)
    w.u32("llama.block_count", c["layers"])
    w.u32("llama.feed_forward_length", ffn)
    w.u32("llama.attention.head_count", heads)
    w.u32("llama.attention.head_count_kv", kv_heads)
    w.u32("llama.rope.dimension_count", head_dim)
    w.f32("llama.rope.freq_base", ROPE_THETA)
    w.f32("llama.attention.layer_norm_rms_epsilon", RMS_EPS)
    w.u32("llama.vocab_size", vocab)
    tokens, scores, types = vocabulary(vocab)
    w.string("tokenizer.ggml.model", "llama")
    w.strings("tokenizer.ggml.tokens", tokens)
    w.floats("tokenizer.ggml.scores", scores)
    w.ints("tokenizer.ggml.token_type", types)
    w.u32("tokenizer.ggml.unknown_token_id", 0)
    w.u32("tokenizer.ggml.bos_token_id", 1)
    w.u32("tokenizer.ggml.eos_token_id", 2)
    w.boolean("tokenizer.ggml.add_bos_token", True)
    w.boolean("tokenizer.ggml.add_eos_token", False)

    ones = np.ones((1, dim), dtype=np.float32)

    def matrix(name, rows, cols):  # HF [rows=out, cols=in] -> GGUF dims [cols, rows]
        x = random_matrix(model, name, rows, cols)
        w.tensor(name, [cols, rows], ggml_type, encode(x, ggml_type))

    matrix("token_embd.weight", vocab, dim)  # tied: also the output matrix
    w.tensor("output_norm.weight", [dim], GGML_F32, encode(ones, GGML_F32))
    for i in range(c["layers"]):
        p = "blk.%d." % i
        w.tensor(p + "attn_norm.weight", [dim], GGML_F32, encode(ones, GGML_F32))
        matrix(p + "attn_q.weight", heads * head_dim, dim)
        matrix(p + "attn_k.weight", kv_heads * head_dim, dim)
        matrix(p + "attn_v.weight", kv_heads * head_dim, dim)
        matrix(p + "attn_output.weight", dim, heads * head_dim)
        w.tensor(p + "ffn_norm.weight", [dim], GGML_F32, encode(ones, GGML_F32))
        matrix(p + "ffn_gate.weight", ffn, dim)
        matrix(p + "ffn_up.weight", ffn, dim)
        matrix(p + "ffn_down.weight", dim, ffn)
    w.write(path)


def self_test():
    """Round trips of the block formats against a plain decoder."""
    rng = np.random.Generator(np.random.PCG64(1))
    x = rng.standard_normal((4, 64), dtype=np.float32) * np.float32(0.02)
    x[0, :32] = 0.0  # an all-zero block
    b = np.frombuffer(quantize_q8_0(x), dtype=np.uint8).reshape(-1, 34)
    d = b[:, :2].copy().view(np.float16).astype(np.float32)
    y = (b[:, 2:].view(np.int8).astype(np.float32) * d).reshape(x.shape)
    assert np.abs(y - x).max() <= np.abs(x).max() / 127 * 0.51 + 1e-6, "q8_0"
    b = np.frombuffer(quantize_q4_0(x), dtype=np.uint8).reshape(-1, 18)
    d = b[:, :2].copy().view(np.float16).astype(np.float32)
    q = np.concatenate([b[:, 2:] & 15, b[:, 2:] >> 4], axis=1).astype(np.float32) - 8
    y = (q * d).reshape(x.shape)
    assert np.abs(y - x).max() <= np.abs(x).max() / 8 * 0.51 + 1e-6, "q4_0"
    h = np.frombuffer(to_bf16(x), dtype=np.uint16).astype(np.uint32) << 16
    assert np.abs(h.view(np.float32).reshape(x.shape) - x).max() <= np.abs(x).max() / 128, "bf16"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out_dir", nargs="?", default="build/bench-models")
    ap.add_argument("--models", default="15m,110m,135m")
    ap.add_argument("--types", default="q8_0,q4_0,bf16")
    ap.add_argument("--force", action="store_true", help="rewrite files that exist")
    args = ap.parse_args()
    self_test()
    os.makedirs(args.out_dir, exist_ok=True)
    for m in args.models.split(","):
        model = ALIASES.get(m.strip().lower(), m.strip().lower())
        if model not in MODELS:
            sys.exit("make_bench_models: unknown model '%s' (15m, 110m, 135m)" % m)
        for t in args.types.split(","):
            t = t.strip().lower()
            if t not in TYPES:
                sys.exit("make_bench_models: unknown type '%s' (q8_0, q4_0, bf16)" % t)
            path = os.path.join(args.out_dir, "%s-%s.gguf" % (model, t))
            if os.path.exists(path) and not args.force:
                print("kept   %s" % path)
                continue
            build(model, t, path)
            print("wrote  %s (%.1f MB)" % (path, os.path.getsize(path) / 1e6))


if __name__ == "__main__":
    main()
