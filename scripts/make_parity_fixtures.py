#!/usr/bin/env python3
"""Builds the parity fixtures under tests/data/parity/ with Hugging Face transformers.

Runs where PyTorch and transformers are installed (the GPU machine reached through the
`device` tool; the computation itself runs on the CPU in float32, so no TF32 or
reduced-precision kernel can blur the reference). For every model family the engine
supports it builds a tiny random-weight model, saves it with save_pretrained and records:

  reference.json  prompts, greedy continuations, MoE routing and the margins that show
                  the references are not near a tie (see "Ties" below);
  logits.bin      little-endian float32 logits, prompt after prompt, [positions][vocab].

Ties: greedy decoding and top-k routing are only well defined when the scores being
ranked are apart. The script records, for each greedy step, the gap between the best
and second-best logit, and for each routing decision the gap between the k-th and the
(k+1)-th router probability; the C++ tests compare ids exactly and the recorded gaps
(all far above float32 noise) show that no comparison depends on tie breaking.

Usage: make_parity_fixtures.py OUT_DIR   (writes OUT_DIR/<fixture>/... and OUT_DIR/parity.tar.gz)
"""

import json
import os
import struct
import sys
import tarfile

import torch
import transformers
from transformers import AutoModelForCausalLM, GenerationConfig
from transformers.models.auto.configuration_auto import CONFIG_MAPPING

VOCAB = 300
SEED = 1234
PROMPT_LENGTHS = [1, 5, 33, 130, 300]
GREEDY_PROMPT_LENGTHS = [4, 40]
GREEDY_NEW_TOKENS = 24
MAJOR = int(transformers.__version__.split(".")[0])


def make_config(model_type, rope, **kwargs):
    """Builds a config, spelling rope and expert settings the way this transformers does."""
    cls = CONFIG_MAPPING[model_type]
    defaults = cls().to_dict()
    if "num_experts" in kwargs and "num_experts" not in defaults and "num_local_experts" in defaults:
        kwargs["num_local_experts"] = kwargs.pop("num_experts")
    theta = rope.pop("rope_theta")
    if "rope_parameters" in defaults:
        params = {"rope_type": rope.pop("rope_type", "default"), "rope_theta": theta}
        params.update(rope)
        kwargs["rope_parameters"] = params
    else:
        kwargs["rope_theta"] = theta
        if rope:
            kwargs["rope_scaling"] = rope
    kwargs.setdefault("vocab_size", VOCAB)
    kwargs.setdefault("max_position_embeddings", 512)
    kwargs.setdefault("rms_norm_eps", 1e-6)
    kwargs.setdefault("bos_token_id", 1)
    kwargs.setdefault("eos_token_id", None)
    kwargs.setdefault("pad_token_id", None)
    return cls(**kwargs)


FIXTURES = [
    # name, model_type, rope, kwargs, save options
    ("llama", "llama", {"rope_theta": 10000.0},
     dict(hidden_size=64, intermediate_size=160, num_hidden_layers=2, num_attention_heads=4,
          num_key_value_heads=2, head_dim=16, tie_word_embeddings=False, rms_norm_eps=1e-5),
     {"max_shard_size": "150KB"}),
    ("llama3_tied", "llama",
     {"rope_theta": 500000.0, "rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
      "high_freq_factor": 4.0, "original_max_position_embeddings": 64},
     dict(hidden_size=64, intermediate_size=128, num_hidden_layers=3, num_attention_heads=8,
          num_key_value_heads=2, head_dim=16, tie_word_embeddings=True, eos_token_id=7),
     {}),
    ("qwen2", "qwen2", {"rope_theta": 1000000.0},
     dict(hidden_size=96, intermediate_size=192, num_hidden_layers=2, num_attention_heads=6,
          num_key_value_heads=2, tie_word_embeddings=True, use_sliding_window=False),
     {}),
    ("qwen3", "qwen3", {"rope_theta": 1000000.0},
     dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
          num_key_value_heads=1, head_dim=32, tie_word_embeddings=False, use_sliding_window=False),
     {}),
    ("qwen3_moe", "qwen3_moe", {"rope_theta": 1000000.0},
     dict(hidden_size=64, intermediate_size=128, moe_intermediate_size=32, num_hidden_layers=2,
          num_attention_heads=4, num_key_value_heads=2, head_dim=16, num_experts=8,
          num_experts_per_tok=2, norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[],
          tie_word_embeddings=False, use_sliding_window=False),
     {}),
    ("qwen3_moe_mixed", "qwen3_moe", {"rope_theta": 10000.0},
     dict(hidden_size=64, intermediate_size=96, moe_intermediate_size=32, num_hidden_layers=3,
          num_attention_heads=4, num_key_value_heads=4, head_dim=32, num_experts=6,
          num_experts_per_tok=3, norm_topk_prob=False, decoder_sparse_step=1, mlp_only_layers=[1],
          tie_word_embeddings=True, use_sliding_window=False),
     {"fused": True}),
    ("qwen2_moe", "qwen2_moe", {"rope_theta": 1000000.0},
     dict(hidden_size=64, intermediate_size=128, moe_intermediate_size=32,
          shared_expert_intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
          num_key_value_heads=4, num_experts=8, num_experts_per_tok=2, norm_topk_prob=False,
          decoder_sparse_step=1, mlp_only_layers=[], tie_word_embeddings=False,
          use_sliding_window=False),
     {}),
]


def randomize(model, gen):
    """Gives every parameter a value: norms near 1, everything else N(0, 0.08)."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=gen, dtype=torch.float32)
            if "norm" in name:
                p.copy_(1.0 + 0.1 * noise)
            elif name.endswith("bias"):
                p.copy_(0.1 * noise)
            elif "embed_tokens" in name or "lm_head" in name:
                p.copy_(0.1 * noise)
            else:
                p.copy_(0.08 * noise)


def moe_blocks(model):
    blocks = []
    for layer in model.model.layers:
        mlp = layer.mlp
        blocks.append(mlp if hasattr(mlp, "gate") and hasattr(mlp, "experts") else None)
    return blocks


def run_prompt(model, tokens, top_k):
    """Returns logits [n][vocab], routing [layer][pos][k] and the smallest routing gap."""
    captured = {}
    handles = []
    for i, block in enumerate(moe_blocks(model)):
        if block is None:
            continue

        def hook(module, args, kwargs, i=i):
            x = args[0] if args else kwargs["hidden_states"]
            x = x.reshape(-1, x.shape[-1]).float()
            logits = torch.nn.functional.linear(x, module.gate.weight.float())
            captured[i] = torch.softmax(logits, dim=-1)
        handles.append(block.register_forward_pre_hook(hook, with_kwargs=True))
    with torch.no_grad():
        out = model(torch.tensor([tokens]), use_cache=False)
    for h in handles:
        h.remove()
    logits = out.logits[0].float()
    routing = None
    gap = None
    if captured:
        routing = []
        gap = float("inf")
        for i in range(len(model.model.layers)):
            if i not in captured:
                routing.append([])
                continue
            probs = captured[i]
            vals, ids = torch.topk(probs, min(top_k + 1, probs.shape[-1]), dim=-1, sorted=True)
            routing.append(ids[:, :top_k].tolist())
            sel = vals[:, :top_k]
            if top_k > 1:
                gap = min(gap, float((sel[:, :-1] - sel[:, 1:]).min()))
            if vals.shape[-1] > top_k:
                gap = min(gap, float((vals[:, top_k - 1] - vals[:, top_k]).min()))
    return logits, routing, gap


def top2_margin(logits):
    v = torch.topk(logits, 2, dim=-1).values
    return float((v[..., 0] - v[..., 1]).min())


def build(name, model_type, rope, kwargs, save, out_dir):
    gen = torch.Generator().manual_seed(SEED + sum(map(ord, name)))
    config = make_config(model_type, dict(rope), **dict(kwargs))
    model = AutoModelForCausalLM.from_config(config, attn_implementation="eager",
                                             dtype=torch.float32)
    model.eval()
    randomize(model, gen)
    model.generation_config = GenerationConfig(
        bos_token_id=config.bos_token_id, eos_token_id=config.eos_token_id,
        pad_token_id=config.pad_token_id, do_sample=False)
    d = os.path.join(out_dir, name)
    save_kwargs = {}
    if "max_shard_size" in save:
        save_kwargs["max_shard_size"] = save["max_shard_size"]
    if save.get("fused"):
        save_kwargs["save_original_format"] = False
    try:
        model.save_pretrained(d, **save_kwargs)
    except TypeError:
        save_kwargs.pop("save_original_format", None)
        model.save_pretrained(d, **save_kwargs)

    top_k = kwargs.get("num_experts_per_tok", 0)
    ref = {"name": name, "model_type": model_type,
           "transformers": transformers.__version__, "torch": torch.__version__,
           "vocab_size": VOCAB, "prompts": [], "greedy": []}
    blob = bytearray()
    min_margin = float("inf")
    min_gap = float("inf")
    for n in PROMPT_LENGTHS:
        tokens = torch.randint(0, VOCAB, (n,), generator=gen).tolist()
        logits, routing, gap = run_prompt(model, tokens, top_k)
        entry = {"tokens": tokens, "offset": len(blob) // 4, "rows": n, "cols": VOCAB}
        if routing is not None:
            entry["routing"] = routing
            min_gap = min(min_gap, gap)
        min_margin = min(min_margin, top2_margin(logits))
        blob += struct.pack("<%df" % logits.numel(), *logits.flatten().tolist())
        ref["prompts"].append(entry)
    for n in GREEDY_PROMPT_LENGTHS:
        tokens = torch.randint(0, VOCAB, (n,), generator=gen).tolist()
        with torch.no_grad():
            seq = model.generate(torch.tensor([tokens]), max_new_tokens=GREEDY_NEW_TOKENS,
                                 do_sample=False, generation_config=model.generation_config)
        cont = seq[0, n:].tolist()
        # Margins of the steps that produced each token, from one full forward pass.
        full, _, _ = run_prompt(model, seq[0].tolist(), top_k)
        steps = full[n - 1:n - 1 + len(cont)]
        assert steps.argmax(-1).tolist() == cont, (name, "generate disagrees with forward")
        ref["greedy"].append({"tokens": tokens, "max_new_tokens": GREEDY_NEW_TOKENS,
                              "output": cont, "min_top2_margin": top2_margin(steps)})
    ref["min_top2_margin_prompts"] = min_margin
    if min_gap != float("inf"):
        ref["min_routing_gap"] = min_gap
    with open(os.path.join(d, "logits.bin"), "wb") as f:
        f.write(blob)
    with open(os.path.join(d, "reference.json"), "w") as f:
        json.dump(ref, f, separators=(",", ":"))
    files = sorted(os.listdir(d))
    from safetensors import safe_open
    for f in files:
        if f.endswith(".safetensors"):
            with safe_open(os.path.join(d, f), "pt") as st:
                print(" ", f, [(k, tuple(st.get_slice(k).get_shape())) for k in st.keys()
                              if ".0." in k or "layers" not in k])
    print(name, "files", files, "margin", min_margin, "routing gap", ref.get("min_routing_gap"),
          "greedy margins", [g["min_top2_margin"] for g in ref["greedy"]],
          "eos", config.eos_token_id, flush=True)


def build_tokenizer(out_dir):
    """A byte-level BPE tokenizer with VOCAB ids for the llama fixture (for --prompt)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    text = ["the quick brown fox jumps over the lazy dog. " * 4,
            "hello world, hello flashroll; rollouts and rewards and sandboxes. " * 4]
    trainer = trainers.BpeTrainer(vocab_size=VOCAB, special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(text, trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>")
    fast.save_pretrained(os.path.join(out_dir, "llama"))
    sample = "hello world"
    print("tokenizer vocab", tok.get_vocab_size(), "encode", sample, tok.encode(sample).ids)


def main():
    out_dir = sys.argv[1]
    os.makedirs(out_dir, exist_ok=True)
    torch.manual_seed(SEED)
    print("transformers", transformers.__version__, "torch", torch.__version__, flush=True)
    for name, model_type, rope, kwargs, save in FIXTURES:
        build(name, model_type, rope, kwargs, save, out_dir)
    build_tokenizer(out_dir)
    with tarfile.open(os.path.join(out_dir, "parity.tar.gz"), "w:gz") as tar:
        for name, *_ in FIXTURES:
            tar.add(os.path.join(out_dir, name), arcname=name)


if __name__ == "__main__":
    main()
