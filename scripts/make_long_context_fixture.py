#!/usr/bin/env python3
"""Builds the long-context parity fixture under tests/data/parity-long/ with transformers.

A tiny random-weight llama (hidden 64, 2 layers, GQA 4:2, head_dim 16, vocab 300,
max_position_embeddings 8192, rope_theta 10000) is run by transformers in float32 on the
CPU over one 4,096-token prompt. Its q/k projections are drawn 2.5x wider than the other
weights, so attention scores have a spread of a few units and the rotary angles at
positions in the thousands (up to 4,095 rad) decide where attention goes: a RoPE table
built with too little precision, or a KV cache that loses a block, changes the logits.

Stored compactly (about 0.6 MB with the weights):

  reference.json  the prompt, `positions` (every 64th position, 0 .. 4032, then the last
                  8, 4088 .. 4095), the argmax at each of them, the smallest top-2 logit
                  margin among them, and `greedy`: 8 greedily generated tokens after the
                  prompt (model.generate) with their smallest top-2 margin;
  logits.bin      little-endian float32 logits [len(positions)][300], rows in the order
                  of `positions` (the same layout as tests/data/parity/*/logits.bin).

Usage: make_long_context_fixture.py OUT_DIR   (writes OUT_DIR/parity-long/...)
"""

import json
import os
import struct
import sys

import torch
import transformers
from transformers import AutoModelForCausalLM, GenerationConfig, LlamaConfig

VOCAB = 300
SEED = 4096
PROMPT = 4096
STRIDE = 64
TAIL = 8
NEW_TOKENS = 8


def main():
    out = os.path.join(sys.argv[1], "parity-long")
    os.makedirs(out, exist_ok=True)
    torch.manual_seed(SEED)
    gen = torch.Generator().manual_seed(SEED)
    kwargs = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                  max_position_embeddings=8192, rms_norm_eps=1e-5, tie_word_embeddings=False,
                  bos_token_id=1, eos_token_id=None, pad_token_id=None)
    defaults = LlamaConfig().to_dict()
    if "rope_parameters" in defaults:
        kwargs["rope_parameters"] = {"rope_type": "default", "rope_theta": 10000.0}
    else:
        kwargs["rope_theta"] = 10000.0
    config = LlamaConfig(**kwargs)
    model = AutoModelForCausalLM.from_config(config, attn_implementation="eager", dtype=torch.float32)
    model.eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=gen, dtype=torch.float32)
            if "norm" in name:
                p.copy_(1.0 + 0.1 * noise)
            elif "embed_tokens" in name or "lm_head" in name:
                p.copy_(0.1 * noise)
            elif "q_proj" in name or "k_proj" in name:
                p.copy_(0.2 * noise)
            else:
                p.copy_(0.08 * noise)
    model.generation_config = GenerationConfig(bos_token_id=1, eos_token_id=None, pad_token_id=None,
                                               do_sample=False)
    model.save_pretrained(out)

    tokens = torch.randint(0, VOCAB, (PROMPT,), generator=gen).tolist()
    with torch.no_grad():
        logits = model(torch.tensor([tokens]), use_cache=False).logits[0].float()
    positions = list(range(0, PROMPT - TAIL, STRIDE)) + list(range(PROMPT - TAIL, PROMPT))
    rows = logits[positions]
    top2 = torch.topk(rows, 2, dim=-1).values
    margins = (top2[:, 0] - top2[:, 1])

    with torch.no_grad():
        res = model.generate(torch.tensor([tokens]), max_new_tokens=NEW_TOKENS, do_sample=False,
                             generation_config=model.generation_config, output_logits=True,
                             return_dict_in_generate=True)
        seq = res.sequences
        cont = seq[0, PROMPT:].tolist()
        full = model(seq, use_cache=False).logits[0].float()
    steps = full[PROMPT - 1:PROMPT - 1 + NEW_TOKENS]
    assert steps.argmax(-1).tolist() == cont, "generate disagrees with the forward pass"
    # transformers' own noise floor at this length: its cached decode against one pass.
    cached = torch.cat([l.float() for l in res.logits], dim=0)
    one_pass_vs_cached = float((cached - steps).abs().max())
    s2 = torch.topk(steps, 2, dim=-1).values

    ref = {"name": "parity-long", "model_type": "llama", "transformers": transformers.__version__,
           "torch": torch.__version__, "vocab_size": VOCAB, "tokens": tokens,
           "positions": positions, "argmax": rows.argmax(-1).tolist(), "rows": len(positions),
           "cols": VOCAB, "min_top2_margin": float(margins.min()),
           "greedy": {"max_new_tokens": NEW_TOKENS, "output": cont,
                      "min_top2_margin": float((s2[:, 0] - s2[:, 1]).min())},
           "max_abs_logit": float(rows.abs().max()),
           "spread_between_positions": float((rows - rows.mean(0)).abs().max()),
           "transformers_cached_vs_one_pass": one_pass_vs_cached}
    with open(os.path.join(out, "logits.bin"), "wb") as f:
        f.write(struct.pack("<%df" % rows.numel(), *rows.flatten().tolist()))
    with open(os.path.join(out, "reference.json"), "w") as f:
        json.dump(ref, f, separators=(",", ":"))
    print("parity-long files", sorted(os.listdir(out)), "margin", ref["min_top2_margin"],
          "greedy", cont, "greedy margin", ref["greedy"]["min_top2_margin"],
          "max |logit|", ref["max_abs_logit"], "spread", ref["spread_between_positions"],
          "transformers cached vs one pass", one_pass_vs_cached, flush=True)


if __name__ == "__main__":
    main()
