#!/usr/bin/env python3
"""Produces Hugging Face reference data for the engine's tokenizer tests.

Needs the Python packages `tokenizers` and `transformers` (for the chat
templates), so it runs on the GPU machine, not in the build.

For each vocabulary in tests/data/tokenizer-vectors/*.gguf it builds the
equivalent Hugging Face `tokenizers` pipeline (byte-level BPE with the
family's Split patterns, or SentencePiece-style BPE with byte fallback and
merges derived from the scores the way transformers' converter does),
checks that pipeline against the 46 upstream cases, and then writes:

  OUT/extra/<vocab>.jsonl        {"text", "ids", "decoded"} for a fixed set of
                                 hand-picked and seeded random strings
  OUT/json/<vocab>/tokenizer.json (+ tokenizer_config.json) for --save vocabs
  OUT/chat/<name>.json           chat renders (text and ids) when templates
                                 are given with --chatml/--llama3/--llama31

Usage:
  scripts/gen_tokenizer_references.py OUT [--save gpt-2,llama-spm]
      [--chatml qwen2.5.jinja] [--llama31 llama3.1.jinja] [--llama3 llama3.jinja]
The templates are the chat_template strings of the model families
(tokenizer_config.json of Qwen2.5-Instruct and Llama-3/3.1-Instruct).
"""
import argparse
import json
import os
import random
import struct
import sys
import unicodedata

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gen_unicode_tables import DEEPSEEK_LLM_LETTERS  # noqa: E402

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers  # noqa: E402

VEC = "tests/data/tokenizer-vectors"

GPT2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
          r"|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
         r"|\s*[\r\n]+|\s+(?!\S)|\s+")
DS_LLM = ["[\r\n]", "\\s?[" + DEEPSEEK_LLM_LETTERS + "]+", "\\s?[!-/:-~！-／：-～‘-‟　-。]+", "\\s+$",
          "[一-龥ࠀ-一가-퟿]+", "\\p{N}+"]
DS_CODER = ["[\r\n]", "\\s?\\p{L}+", "\\s?\\p{P}+", "[一-龥ࠀ-一가-퟿]+", "\\p{N}"]


def read_gguf(path):
    b = open(path, "rb").read()
    o = [4]

    def u(fmt):
        v = struct.unpack_from("<" + fmt, b, o[0])
        o[0] += struct.calcsize("<" + fmt)
        return v[0]

    def s():
        n = u("Q")
        v = b[o[0]:o[0] + n]
        o[0] += n
        return v.decode("utf-8")

    types = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}

    def val(t):
        if t == 8:
            return s()
        if t == 9:
            et = u("I")
            n = u("Q")
            return [val(et) for _ in range(n)]
        return u(types[t])

    assert b[:4] == b"GGUF"
    u("I")
    u("Q")
    nkv = u("Q")
    kv = {}
    for _ in range(nkv):
        k = s()
        kv[k] = val(u("I"))
    return kv


def add_specials(tk, kv):
    toks = kv["tokenizer.ggml.tokens"]
    types = kv["tokenizer.ggml.token_type"]
    control = [AddedToken(toks[i], special=True, normalized=False) for i, t in enumerate(types) if t == 3]
    user = [AddedToken(toks[i], special=False, normalized=False) for i, t in enumerate(types) if t == 4]
    tk.add_special_tokens(control)
    tk.add_tokens(user)


def build_bpe(kv, pre):
    toks = kv["tokenizer.ggml.tokens"]
    vocab = {t: i for i, t in enumerate(toks)}
    merges = []
    for m in kv["tokenizer.ggml.merges"]:
        k = m.index(" ", 1)
        merges.append((m[:k], m[k + 1:]))
    ignore = pre == "llama-bpe"
    tk = Tokenizer(models.BPE(vocab=vocab, merges=merges, ignore_merges=ignore))
    if pre == "gpt-2":
        tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    else:
        pats = {"llama-bpe": [LLAMA3], "qwen2": [QWEN2], "deepseek-llm": DS_LLM,
                "deepseek-coder": DS_CODER}[pre]
        tk.pre_tokenizer = pre_tokenizers.Sequence(
            [pre_tokenizers.Split(Regex(p), behavior="isolated", invert=False) for p in pats]
            + [pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    if pre == "qwen2":
        tk.normalizer = normalizers.NFC()
    tk.decoder = decoders.ByteLevel()
    add_specials(tk, kv)
    return tk


def build_spm(kv):
    toks = kv["tokenizer.ggml.tokens"]
    scores = kv["tokenizer.ggml.scores"]
    vocab = {t: i for i, t in enumerate(toks)}
    # Merges from scores, as transformers' SentencePieceExtractor derives them.
    merges = []
    for i, piece in enumerate(toks):
        local = []
        for k in range(1, len(piece)):
            l, r = piece[:k], piece[k:]
            if l in vocab and r in vocab:
                local.append((l, r, scores[i]))
        local.sort(key=lambda x: (vocab[x[0]], vocab[x[1]]))
        merges.extend(local)
    merges.sort(key=lambda x: x[2], reverse=True)
    merges = [(l, r) for l, r, _ in merges]
    tk = Tokenizer(models.BPE(vocab=vocab, merges=merges, byte_fallback=True, fuse_unk=True, unk_token="<unk>"))
    tk.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    tk.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(),
                                    decoders.Strip(" ", 1, 0)])
    add_specials(tk, kv)
    return tk


def load_cases(name):
    inp = open(f"{VEC}/ggml-vocab-{name}.gguf.inp", "rb").read().decode("utf-8")
    out = open(f"{VEC}/ggml-vocab-{name}.gguf.out").read().split("\n")
    texts = inp.split("\n__ggml_vocab_test__\n")[:-1]
    return [(t, [int(x) for x in out[i].split()]) for i, t in enumerate(texts)]


HAND = [
    "Hello World", " \t\n  x", "a  b   c\n\n\nd", "don't I'LL 'S 'Re we've", "ǅungla ǈ", "x\r\n\r\ny",
    "    indent\n\tTab", "1234567 12 1 0.5 -3 1,000,000", "٣٤٥ Ⅷ ½ ²", "nai\u0308ve cafe\u0301 café",
    "🤗🦙 👩‍👩‍👧 🇫🇷", "日本語のテキスト 中文 한국어", "Привет, мир!", "Ελληνικά ΑΒΓ", "\u00a0nbsp\u3000ideo\u2003em",
    "trailing   ", "   ", "\n", "\r", "def f(x):\n    return x**2  # comment\n",
    '{"a": [1, 2, {"b": null}], "c": "d\\n"}', "C:\\path\\to\\file.txt", "https://example.com/a?b=c&d=e#f",
    "\u2126mega \u212Aelvin", "$ ls -la /tmp\ntotal 8\ndrwxr-xr-x 2 root root 4096 Nov 29 23:09 .\n",
    "Traceback (most recent call last):\n  File \"x.py\", line 3, in <module>\nZeroDivisionError: division by zero",
    "ÀÁÂÃÄÅÆÇÈ õ÷Á ýÀÿ", "zero\u200bwidth", "line\u2028sep", "\ufeffbom", "ʼapostrophe ˆ",
    "！＂＃ＡＢＣ　，。", "‘quoted’ “double” — dash … ellipsis", "x'sy 's 'S'T", "\t\t\n\n  \n", " \n \n",
    "a\n\n\n\n\nb", "1 22 333 4444 55555", "k8s v1.2.3-rc.4+build.5", "émoji🙂text🙃", "ᄀᄁ 가각 ힰ",
]

POOL = (list("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789")
        + [" ", " ", " ", "  ", "\n", "\n\n", "\t", "\r\n", "'", "'s", "'LL", "'re", ".", ",", "!", "?", "-", "_",
           "(", ")", "{", "}", "[", "]", "\"", "#", "$", "%", "&", "*", "/", "\\", ":", ";", "<", ">", "=", "@",
           "^", "`", "|", "~", "+", "é", "ß", "ñ", "Ж", "ж", "ω", "Ω", "中", "文", "한", "글", "日", "😀",
           "\u0301", "\u00a0", "\u3000", "٣", "½", "Ⅷ", "¡", "€", "™", "—", "“", "”", "‘", "’", "！", "，",
           "Ａ", "ｚ", "ǅ", "ʼ", "ˆ", "\u200b", "\u2028", "ǂ", "ʔ", "ᾼ", "ΐ", "\u1FD3", "K", "\u212A", "ﬀ",
           "𐐀", "𝔸", "₂", "❤", "©", "°", "•", "→", "∑", "√", "ー", "ア", "の", "ก", "ा", "क", "ع", "ב"])


def random_cases(n, seed):
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        k = rng.randint(1, 30)
        out.append("".join(rng.choice(POOL) for _ in range(k)))
    return out


def chat_refs(args, out_dir):
    from transformers import PreTrainedTokenizerFast

    tools = [
        {"type": "function", "function": {
            "name": "get_weather", "description": "Get the weather for a city.",
            "parameters": {"type": "object", "properties": {
                "city": {"type": "string", "description": "City name, e.g. \"Paris\""}},
                "required": ["city"]}}},
        {"type": "function", "function": {
            "name": "run_shell", "description": "Run a shell command; returns stdout.",
            "parameters": {"type": "object", "properties": {"cmd": {"type": "string"},
                                                            "timeout_s": {"type": "integer"}},
                           "required": ["cmd"]}}},
    ]

    def call(name, args_):
        return {"type": "function", "function": {"name": name, "arguments": args_}}

    conversations = {
        "chatml_tools": ("chatml", tools, [
            {"role": "system", "content": "You are a careful agent."},
            {"role": "user", "content": "What's the weather in Paris and Zürich?"},
            {"role": "assistant", "content": "", "tool_calls": [call("get_weather", {"city": "Paris"}),
                                                                call("get_weather", {"city": "Zürich"})]},
            {"role": "tool", "content": "18°C, sunny"},
            {"role": "tool", "content": "{\"temp\": 12, \"sky\": \"cloudy\"}"},
            {"role": "assistant", "content": "Paris: 18°C and sunny. Zürich: 12°C, cloudy."},
            {"role": "user", "content": "Thanks! Now list the files.  "},
            {"role": "assistant", "content": "Listing.", "tool_calls": [
                call("run_shell", {"cmd": "ls -la /tmp\n", "timeout_s": 30})]},
            {"role": "tool", "content": "total 0\n  \n"},
        ]),
        "chatml_plain": ("chatml", None, [
            {"role": "user", "content": "Hi there"},
            {"role": "assistant", "content": "Hello! How can I help?"},
            {"role": "user", "content": "Say hello, then a tab\t."},
        ]),
        "llama31_tools": ("llama31", tools, [
            {"role": "system", "content": "  You are a careful agent.\n"},
            {"role": "user", "content": "What's the weather in Paris?"},
            {"role": "assistant", "tool_calls": [call("get_weather", {"city": "Paris"})]},
            {"role": "tool", "content": "18°C, sunny"},
            {"role": "assistant", "content": "It is 18°C and sunny in Paris."},
            {"role": "user", "content": "Thanks!\n"},
        ]),
        "llama31_plain": ("llama31", None, [
            {"role": "user", "content": "Hi there"},
            {"role": "assistant", "content": " Hello! "},
            {"role": "user", "content": "Count: 1 22 333 4444"},
        ]),
        "llama3_plain": ("llama3", None, [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Hi there"},
            {"role": "assistant", "content": "Hello!"},
            {"role": "user", "content": "Bye"},
        ]),
    }
    vocabs = {"chatml": "qwen2", "llama31": "llama-bpe", "llama3": "llama-bpe"}
    templates = {"chatml": args.chatml, "llama31": args.llama31, "llama3": args.llama3}
    os.makedirs(out_dir, exist_ok=True)
    for name, (fmt, tl, msgs) in conversations.items():
        if not templates[fmt]:
            continue
        kv = read_gguf(f"{VEC}/ggml-vocab-{vocabs[fmt]}.gguf")
        tk = build_bpe(kv, kv["tokenizer.ggml.pre"])
        toks = kv["tokenizer.ggml.tokens"]
        fast = PreTrainedTokenizerFast(tokenizer_object=tk, bos_token=toks[kv["tokenizer.ggml.bos_token_id"]],
                                       eos_token=toks[kv["tokenizer.ggml.eos_token_id"]])
        fast.chat_template = open(templates[fmt]).read()
        extra = {"date_string": "26 Jul 2024"} if fmt == "llama31" else {}
        text = fast.apply_chat_template(msgs, tools=tl, add_generation_prompt=True, tokenize=False, **extra)
        ids = tk.encode(text, add_special_tokens=False).ids
        json.dump({"format": fmt, "vocab": vocabs[fmt], "tools": tl, "messages": msgs, "text": text, "ids": ids},
                  open(f"{out_dir}/{name}.json", "w"), ensure_ascii=False, indent=1)
        print("chat", name, len(ids), "tokens")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--save", default="")
    ap.add_argument("--chatml")
    ap.add_argument("--llama31")
    ap.add_argument("--llama3")
    args = ap.parse_args()
    names = ["gpt-2", "llama-bpe", "qwen2", "deepseek-llm", "deepseek-coder", "llama-spm", "phi-3"]
    strings = HAND + random_cases(400, 1234)
    for name in names:
        kv = read_gguf(f"{VEC}/ggml-vocab-{name}.gguf")
        if kv["tokenizer.ggml.model"] == "gpt2":
            tk = build_bpe(kv, kv["tokenizer.ggml.pre"])
        else:
            tk = build_spm(kv)
        bad = 0
        for i, (text, ids) in enumerate(load_cases(name)):
            got = tk.encode(text, add_special_tokens=False).ids
            if got != ids:
                bad += 1
                print(f"{name}: upstream case {i} differs: {text!r} {got} != {ids}")
        os.makedirs(f"{args.out}/extra", exist_ok=True)
        written = 0
        with open(f"{args.out}/extra/{name}.jsonl", "w") as f:
            for s in strings:
                if name == "qwen2" and not unicodedata.is_normalized("NFC", s):
                    continue  # the engine does not apply Qwen2's NFC normalizer
                ids = tk.encode(s, add_special_tokens=False).ids
                dec = tk.decode(ids, skip_special_tokens=False)
                f.write(json.dumps({"text": s, "ids": ids, "decoded": dec}, ensure_ascii=False) + "\n")
                written += 1
        print(f"{name}: {bad} upstream mismatches, {written} extra cases")
        if name in args.save.split(","):
            d = f"{args.out}/json/{name}"
            os.makedirs(d, exist_ok=True)
            tk.save(f"{d}/tokenizer.json")
            toks = kv["tokenizer.ggml.tokens"]
            cfg = {"bos_token": toks[kv["tokenizer.ggml.bos_token_id"]],
                   "eos_token": toks[kv["tokenizer.ggml.eos_token_id"]],
                   "add_bos_token": bool(kv.get("tokenizer.ggml.add_bos_token", False))}
            json.dump(cfg, open(f"{d}/tokenizer_config.json", "w"), indent=1)
    chat_refs(args, f"{args.out}/chat")


if __name__ == "__main__":
    main()
