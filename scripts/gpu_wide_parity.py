#!/usr/bin/env python3
"""Parity of `flashroll --device cuda` with transformers at real width, on the GPU machine.

Builds a random-weight Qwen3 model in bf16 at Qwen3-8B width (hidden 4096, 32/8 heads of 128,
FFN 12288, vocab 151936) with LAYERS layers, saves it (config.json + one model.safetensors, no
tokenizer), and compares flashroll's CUDA backend with transformers run in float32 on the same
bf16 weights (eager attention, TF32 off), on the GPU:

  logits   max |flashroll - transformers| over every position of PROMPTS prompts, and top-1
           agreement: raw, and over the positions whose reference top-1/top-2 gap exceeds twice
           that position's max |delta| (where rounding cannot decide the order: the near-ties);
  greedy   how many of GREEDY tokens flashroll's greedy continuation shares with transformers'
           before the first difference, per prompt.

Prints one JSON object. With --make-only it only writes the model (for `bench decode`) and prints
the device's copy bandwidth, measured with PyTorch. --shape=0.6b takes Qwen3-0.6B's shape instead
(hidden 1024, 16/8 heads of 128, FFN 3072, tied embeddings); --shape=30b-a3b Qwen3-30B-A3B's expert
layout (qwen3_moe: hidden 2048, 32/4 heads of 128, 128 experts of width 768, top-8 renormalised),
where the JSON also reports how many (position, layer) expert sets flashroll's router chose as
transformers' did. Usage (flashroll on PATH):
    gpu_wide_parity.py MODEL_DIR [LAYERS] [--make-only] [--shape=0.6b|30b-a3b]
"""

import json
import subprocess
import sys
import time

import torch
from transformers import AutoModelForCausalLM, Qwen3Config, Qwen3MoeConfig

PROMPT_LENGTHS = [7, 33, 64]
GREEDY = 32
SEED = 1234


def flashroll(*args):
    out = subprocess.run(["flashroll", *args], check=True, capture_output=True, text=True)
    return json.loads(out.stdout)


def copy_bandwidth():
    """Bytes read + written per second by a 4 GiB device-to-device copy (median of 10)."""
    a = torch.empty(1 << 31, dtype=torch.bfloat16, device="cuda")
    b = torch.empty_like(a)
    times = []
    for _ in range(13):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        b.copy_(a)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    return 2 * a.numel() * 2 / sorted(times[3:])[5]


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    model_dir = args[0]
    layers = int(args[1]) if len(args) > 1 else 2
    make_only = "--make-only" in sys.argv
    torch.manual_seed(SEED)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    small = "--shape=0.6b" in sys.argv
    moe = "--shape=30b-a3b" in sys.argv
    if moe:
        config = Qwen3MoeConfig(vocab_size=151936, hidden_size=2048, intermediate_size=6144,
                                moe_intermediate_size=768, num_experts=128, num_experts_per_tok=8,
                                norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[],
                                num_hidden_layers=layers, num_attention_heads=32, num_key_value_heads=4,
                                head_dim=128, max_position_embeddings=4096, rope_theta=1000000.0,
                                rms_norm_eps=1e-6, tie_word_embeddings=False, bos_token_id=None,
                                eos_token_id=None)
    else:
        config = Qwen3Config(vocab_size=151936, hidden_size=1024 if small else 4096,
                             intermediate_size=3072 if small else 12288,
                             num_hidden_layers=layers, num_attention_heads=16 if small else 32,
                             num_key_value_heads=8, head_dim=128, max_position_embeddings=4096,
                             rope_theta=1000000.0, rms_norm_eps=1e-6, tie_word_embeddings=small,
                             bos_token_id=None, eos_token_id=None)
    config._attn_implementation = "eager"
    start = time.time()
    with torch.device("cuda"):
        model = AutoModelForCausalLM.from_config(config).to(torch.bfloat16)
    model.save_pretrained(model_dir, max_shard_size="100GB")
    made_s = time.time() - start
    if make_only:
        print(json.dumps({"model_made_s": round(made_s, 1), "layers": layers,
                          "copy_bandwidth_GBps": round(copy_bandwidth() / 1e9, 1)}))
        return
    # Loaded back from the saved files, as a user would: the rotary inverse frequencies are then
    # computed in float32 (in the bf16 model they were rounded to bf16 by .to()).
    del model
    reference = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32,
                                                     attn_implementation="eager").cuda().eval()

    gen = torch.Generator().manual_seed(SEED)
    prompts = [torch.randint(0, config.vocab_size, (n,), generator=gen).tolist() for n in PROMPT_LENGTHS]
    worst, agree, decided, decided_agree, positions = 0.0, 0, 0, 0, 0
    routed_same, routed_sets = 0, 0
    greedy = []
    for tokens in prompts:
        with torch.no_grad():
            run = reference(torch.tensor([tokens], device="cuda"), output_router_logits=moe)
        ref = run.logits[0].float().cpu()
        answer = flashroll("logits", "--model", model_dir, "--device", "cuda", *(["--routing"] if moe else []),
                           "--tokens", " ".join(map(str, tokens)))
        ours = torch.tensor(answer["logits"])
        if moe and getattr(run, "router_logits", None):
            # transformers' router logits per layer [positions][experts]; its top-k as the engine
            # orders them (descending probability).
            for layer, logits in enumerate(run.router_logits):
                want = logits.float().softmax(dim=-1).topk(config.num_experts_per_tok, dim=-1).indices.tolist()
                for pos, ids in enumerate(answer["routing"][layer]):
                    routed_sets += 1
                    routed_same += int(sorted(ids) == sorted(want[pos]))
        delta = (ours - ref).abs().amax(dim=1)
        worst = max(worst, float(delta.max()))
        top2 = ref.topk(2, dim=1)
        same = ours.argmax(dim=1) == top2.indices[:, 0]
        clear = (top2.values[:, 0] - top2.values[:, 1]) > 2 * delta
        positions += len(tokens)
        agree += int(same.sum())
        decided += int(clear.sum())
        decided_agree += int((same & clear).sum())

        with torch.no_grad():
            out = reference.generate(torch.tensor([tokens], device="cuda"), max_new_tokens=GREEDY,
                                     do_sample=False, pad_token_id=0)
        expected = out[0, len(tokens):].tolist()
        got = flashroll("generate", "--model", model_dir, "--device", "cuda", "--json", "--max-tokens",
                        str(GREEDY), "--tokens", " ".join(map(str, tokens)))["tokens"]
        same_prefix = 0
        while same_prefix < min(len(got), len(expected)) and got[same_prefix] == expected[same_prefix]:
            same_prefix += 1
        greedy.append(same_prefix)
    shape = (f"qwen3_moe hidden 2048, {layers} layers, 32/4 heads x 128, 128 experts x 768, top-8, vocab 151936, bf16"
             if moe else f"qwen3 hidden {config.hidden_size}, {layers} layers, {config.num_attention_heads}/8 heads "
             f"x 128, ffn {config.intermediate_size}, vocab 151936, bf16")
    print(json.dumps({
        "shape": shape,
        **({"same_expert_sets": routed_same, "expert_sets": routed_sets} if moe else {}),
        "model_made_s": round(made_s, 1),
        "positions": positions,
        "max_abs_delta_logit": worst,
        "top1_agreement": agree / positions,
        "top1_agreement_decided": decided_agree / max(decided, 1),
        "decided_positions": decided,
        "greedy_agreement_tokens": greedy,
        "greedy_tokens": GREEDY,
    }))


if __name__ == "__main__":
    main()
