#!/usr/bin/env python3
"""Trains Flashroll's default agent models from demonstration trajectories.

Runs on the GPU machine (PyTorch, transformers 5, tokenizers). Three subcommands:

  tokenizer --data DEMOS.jsonl.gz --out DIR
      trains a byte-level BPE tokenizer (Qwen2-style pre-tokenizer, single digits)
      and writes tokenizer.json + tokenizer_config.json with a ChatML chat template.
  train --data DEMOS.jsonl.gz --tokenizer DIR --arch dense|moe --out DIR --minutes M --seed S
      trains a Qwen3 (dense) or Qwen3-MoE (8 experts, top-2) model on the
      trajectories, loss on assistant tokens only, each whole inside a 2,048-token window,
      for a fixed wall-clock budget; saves a Hugging Face directory in bf16 with
      the tokenizer, a training curve (curve.json) and reference logits for the
      engine's parity test (parity.json + parity_logits.bin).
  parity --model DIR --data DEMOS.jsonl.gz
      rewrites DIR's reference logits (three short prompts and one trajectory of
      at least 1,024 tokens).

The demonstrations come from `flashroll rollout demos` (tasks/ + rollout/), so the
tool outputs in them are real. Training is reproducible from --seed up to GPU
non-determinism in reductions.
"""

import argparse
import gzip
import json
import lzma
import math
import os
import random
import struct
import sys
import time

CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
# Qwen2's pre-tokenizer: letters, single digits, punctuation runs, newlines, spaces.
PRETOKENIZE_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
WINDOW = 2048


def read_demos(path):
    opener = {".gz": gzip.open, ".xz": lzma.open}.get(os.path.splitext(path)[1], open)
    with opener(path, "rt", encoding="utf-8") as f:
        for line in f:
            demo = json.loads(line)
            if demo.get("success", True):  # only verified trajectories teach the model
                yield demo


def render(messages):
    """ChatML text of a conversation and the character spans the model is trained on
    (assistant contents and the <|im_end|> that closes them)."""
    text, spans = "", []
    for m in messages:
        head = "<|im_start|>" + m["role"] + "\n"
        text += head
        start = len(text)
        text += m["content"] + "<|im_end|>"
        if m["role"] == "assistant":
            spans.append((start, len(text)))
        text += "\n"
    return text, spans


def cmd_tokenizer(args):
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(PRETOKENIZE_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=args.vocab, special_tokens=SPECIAL_TOKENS, show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    texts = (render(d["messages"])[0] for d in read_demos(args.data))
    tok.train_from_iterator(texts, trainer=trainer)
    os.makedirs(args.out, exist_ok=True)
    tok.save(os.path.join(args.out, "tokenizer.json"))
    added = {str(tok.token_to_id(t)): {"content": t, "special": True, "lstrip": False, "rstrip": False,
                                        "normalized": False, "single_word": False} for t in SPECIAL_TOKENS}
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": None,
        "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>",
        "unk_token": None,
        "model_max_length": 4096,
        "add_prefix_space": False,
        "added_tokens_decoder": added,
        "chat_template": CHAT_TEMPLATE,
    }
    with open(os.path.join(args.out, "tokenizer_config.json"), "w") as f:
        json.dump(config, f, indent=2)
    print(f"tokenizer: {tok.get_vocab_size()} tokens -> {args.out}", flush=True)


def make_config(arch, vocab, im_end, pad):
    import transformers
    common = dict(
        vocab_size=vocab, hidden_size=256, num_attention_heads=4, num_key_value_heads=2, head_dim=64,
        max_position_embeddings=4096, rms_norm_eps=1e-6, tie_word_embeddings=True,
        bos_token_id=None, eos_token_id=im_end, pad_token_id=pad, attention_dropout=0.0,
    )
    rope = {"rope_type": "default", "rope_theta": 10000.0}
    if arch == "dense":
        cls = transformers.Qwen3Config
        extra = dict(num_hidden_layers=8, intermediate_size=704)
    else:
        cls = transformers.Qwen3MoeConfig
        extra = dict(num_hidden_layers=6, intermediate_size=704, moe_intermediate_size=128, num_experts=8,
                     num_experts_per_tok=2, norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[],
                     output_router_logits=True, router_aux_loss_coef=0.01)
    defaults = cls().to_dict()
    if "num_experts" in extra and "num_experts" not in defaults and "num_local_experts" in defaults:
        extra["num_local_experts"] = extra.pop("num_experts")
    if "rope_parameters" in defaults:
        common["rope_parameters"] = rope
    else:
        common["rope_theta"] = rope["rope_theta"]
    return cls(**common, **extra)


def pack(tok, demos, seed):
    """Token ids and labels (-100 where not trained) in WINDOW-long rows. Each
    trajectory lies whole inside one row (rows are filled greedily and padded),
    so the long ones are trained on as one context, never cut at a row edge."""
    import torch
    rng = random.Random(seed)
    rng.shuffle(demos)
    eot = tok.token_to_id("<|endoftext|>")
    texts = [render(d["messages"]) for d in demos]
    encodings = tok.encode_batch([t for t, _ in texts])
    rows_ids, rows_labels, ids, labels, lengths = [], [], [], [], []
    for (text, spans), enc in zip(texts, encodings):
        lengths.append(len(enc.ids))
        doc_ids = list(enc.ids[: WINDOW - 1]) + [eot]
        doc_labels = [tid if any(a <= start < b for a, b in spans) else -100
                      for tid, (start, _) in zip(enc.ids[: WINDOW - 1], enc.offsets)] + [-100]
        if len(ids) + len(doc_ids) > WINDOW:
            rows_ids.append(ids + [eot] * (WINDOW - len(ids)))
            rows_labels.append(labels + [-100] * (WINDOW - len(labels)))
            ids, labels = [], []
        ids += doc_ids
        labels += doc_labels
    if ids:
        rows_ids.append(ids + [eot] * (WINDOW - len(ids)))
        rows_labels.append(labels + [-100] * (WINDOW - len(labels)))
    x = torch.tensor(rows_ids, dtype=torch.long).view(-1, WINDOW)
    y = torch.tensor(rows_labels, dtype=torch.long).view(-1, WINDOW)
    return x, y, lengths


def cmd_train(args):
    import torch
    import transformers
    from tokenizers import Tokenizer

    torch.manual_seed(args.seed)
    random.seed(args.seed)
    torch.backends.cuda.matmul.allow_tf32 = True
    device = "cuda"
    tok = Tokenizer.from_file(os.path.join(args.tokenizer, "tokenizer.json"))
    vocab = tok.get_vocab_size()
    im_end, pad = tok.token_to_id("<|im_end|>"), tok.token_to_id("<|endoftext|>")
    demos = list(read_demos(args.data))
    held_out = demos[-64:]
    x, y, lengths = pack(tok, demos[:-64], args.seed)
    long_ones = sum(n >= 1024 for n in lengths)
    print(f"{args.arch}: {len(demos)} demos, {sum(lengths)} tokens in {x.shape[0]} windows, "
          f"longest trajectory {max(lengths)} tokens, {long_ones} of at least 1,024", flush=True)

    config = make_config(args.arch, vocab, im_end, pad)
    model = transformers.AutoModelForCausalLM.from_config(config, attn_implementation="sdpa").to(device)
    params = sum(p.numel() for p in model.parameters())
    print(f"{args.arch}: {params/1e6:.2f}M parameters ({params*2/2**20:.1f} MiB in bf16)", flush=True)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.95), weight_decay=0.1, fused=True)

    budget = args.minutes * 60.0
    start = time.time()
    curve, step, batch = [], 0, args.batch
    est_steps = None
    order = torch.randperm(x.shape[0], generator=torch.Generator().manual_seed(args.seed))
    cursor = 0
    model.train()
    while True:
        elapsed = time.time() - start
        if elapsed > budget:
            break
        if cursor + batch > len(order):
            order = torch.randperm(x.shape[0], generator=torch.Generator().manual_seed(args.seed + step))
            cursor = 0
        idx = order[cursor: cursor + batch]
        cursor += batch
        xb, yb = x[idx].to(device, non_blocking=True), y[idx].to(device, non_blocking=True)
        # Linear warmup, then cosine decay over the time budget.
        frac = min(1.0, elapsed / budget)
        lr = args.lr * min(1.0, (step + 1) / 200) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * frac)))
        for g in opt.param_groups:
            g["lr"] = lr
        with torch.autocast("cuda", dtype=torch.bfloat16):
            out = model(input_ids=xb, labels=yb)
        loss = out.loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if step % 50 == 0:
            curve.append({"step": step, "seconds": round(elapsed, 1), "loss": round(loss.item(), 4), "lr": lr})
            print(f"{args.arch} step {step} t={elapsed:.0f}s loss={loss.item():.4f}", flush=True)
        step += 1

    model.eval()
    held_x, held_y, _ = pack(tok, held_out, 0)
    with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
        held_loss = model(input_ids=held_x.to(device), labels=held_y.to(device)).loss.item() if held_x.numel() else float("nan")
    print(f"{args.arch}: {step} steps, held-out loss {held_loss:.4f}", flush=True)

    model = model.to(torch.bfloat16)
    model.config.output_router_logits = False
    model.generation_config = transformers.GenerationConfig(eos_token_id=im_end, pad_token_id=pad, bos_token_id=None)
    os.makedirs(args.out, exist_ok=True)
    model.save_pretrained(args.out, safe_serialization=True)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        with open(os.path.join(args.tokenizer, name)) as src, open(os.path.join(args.out, name), "w") as dst:
            dst.write(src.read())
    with open(os.path.join(args.out, "curve.json"), "w") as f:
        json.dump({"arch": args.arch, "parameters": params, "steps": step, "batch": batch, "window": WINDOW,
                   "tokens_seen": step * batch * WINDOW, "trajectory_tokens_max": max(lengths),
                   "trajectories_1024_or_longer": long_ones, "minutes": args.minutes, "seed": args.seed,
                   "held_out_loss": held_loss, "curve": curve}, f)
    try:
        write_parity(args.out, held_out, long_demo(demos, tok), tok)
    except Exception as e:  # the weights are saved; a parity failure must not lose them
        print(f"{args.arch}: parity references failed: {e!r}", flush=True)


def long_demo(demos, tok):
    """The first trajectory of at least 1,024 tokens: parity must hold past the
    short prompts too, where attention spans a long tool output."""
    for d in demos:
        if len(tok.encode(render(d["messages"])[0]).ids) >= 1024:
            return d
    raise ValueError("no trajectory of 1,024 tokens or more in the data")


def write_parity(out_dir, demos, long_one, tok):
    """Reference logits of the saved bf16 weights computed in float32 on the CPU:
    three short prompts from `demos` and the whole of `long_one` but its last turn."""
    import torch
    import transformers
    model = transformers.AutoModelForCausalLM.from_pretrained(out_dir, dtype=torch.float32)
    model.eval()
    prompts = []
    for d in demos[:2]:
        text, _ = render(d["messages"][:3])
        prompts.append(tok.encode(text).ids)
    prompts.append(tok.encode(render(demos[2]["messages"][:2])[0] + "<|im_start|>assistant\n").ids)
    prompts.append(tok.encode(render(long_one["messages"][:-1])[0] + "<|im_start|>assistant\n").ids)
    last = 16
    blobs, meta = [], []
    with torch.no_grad():
        for ids in prompts:
            out = model(input_ids=torch.tensor([ids]), output_router_logits=False)
            logits = out.logits[0, -last:].float()
            blobs.append(logits.numpy().astype("<f4").tobytes())
            greedy = model.generate(torch.tensor([ids]), max_new_tokens=16, do_sample=False)[0, len(ids):].tolist()
            meta.append({"tokens": ids, "logit_positions": list(range(len(ids) - min(last, len(ids)), len(ids))),
                         "greedy": greedy})
    with open(os.path.join(out_dir, "parity_logits.bin"), "wb") as f:
        f.write(b"".join(blobs))
    with open(os.path.join(out_dir, "parity.json"), "w") as f:
        json.dump({"vocab": model.config.vocab_size, "prompts": meta}, f)


def cmd_parity(args):
    """Rewrites the parity references of a saved model directory in place."""
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(os.path.join(args.model, "tokenizer.json"))
    demos = list(read_demos(args.data))
    write_parity(args.model, demos[-64:], long_demo(demos, tok), tok)
    print(f"parity references -> {args.model}", flush=True)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("tokenizer")
    t.add_argument("--data", required=True)
    t.add_argument("--out", required=True)
    t.add_argument("--vocab", type=int, default=4096)
    r = sub.add_parser("train")
    r.add_argument("--data", required=True)
    r.add_argument("--tokenizer", required=True)
    r.add_argument("--arch", choices=["dense", "moe"], required=True)
    r.add_argument("--out", required=True)
    r.add_argument("--minutes", type=float, default=7.0)
    r.add_argument("--seed", type=int, default=1)
    r.add_argument("--lr", type=float, default=2e-3)
    r.add_argument("--batch", type=int, default=32)
    q = sub.add_parser("parity")
    q.add_argument("--model", required=True)
    q.add_argument("--data", required=True)
    args = p.parse_args()
    {"tokenizer": cmd_tokenizer, "train": cmd_train, "parity": cmd_parity}[args.cmd](args)


if __name__ == "__main__":
    main()
