"""One GRPO trainer step's forward and backward, timed: our model module
(python/flashroll/model.py) beside Hugging Face transformers' Qwen3 on the
same tokens, in the same process, with the same threads.

  PYTHONPATH=python /usr/bin/python3 bench/trainer_step.py --model models/default
      [--impl ours,hf-eager,hf-sdpa] [--device cpu|cuda] [--threads 2] [--blas-threads 1] [--repeat 5]

The batch is synthetic but shaped like a quickstart step: --samples samples
(default 32) of lengths drawn uniformly from [--min-len, --max-len] (fixed
seed), the second half of each sample loss-masked, cut into micro-batches of
--micro-batch-tokens padded tokens shortest first, as trainers/loop.py does.
Each micro-batch: logits, log_softmax at T 1.4, the token logprobs and the
masked entropy in the loss, backward. Prints one JSON line per implementation:
median seconds per step and tokens/s (real tokens, padding excluded), and the
largest |logit| gap from ours on the first micro-batch.
"""
import argparse
import json
import statistics
import sys
import time

import torch

from flashroll import batch as batch_lib
from flashroll import cpu_threads, losses
from flashroll.model import load_model


def synthetic_step(args, vocab):
    g = torch.Generator().manual_seed(args.seed)
    lengths = sorted(int(x) for x in torch.randint(args.min_len, args.max_len + 1, (args.samples,), generator=g))
    chunks, chunk = [], []
    for n in lengths:  # trainers/loop.py's micro_batches: count x longest <= budget
        if chunk and (len(chunk) + 1) * n > args.micro_batch_tokens:
            chunks.append(chunk)
            chunk = []
        chunk.append(n)
    chunks.append(chunk)
    batches = []
    for chunk in chunks:
        t = max(chunk)
        tokens = torch.zeros(len(chunk), t, dtype=torch.int64)
        mask = torch.zeros(len(chunk), t)
        for i, n in enumerate(chunk):
            tokens[i, :n] = torch.randint(3, vocab, (n,), generator=g)
            mask[i, n // 2:n] = 1
        batches.append((tokens, mask))
    return batches, sum(lengths)


def hf_model(path, attn, device):
    from transformers import AutoModelForCausalLM
    m = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32, attn_implementation=attn).to(device)
    return lambda tokens: m(input_ids=tokens, use_cache=False).logits, m


def our_model(path, device):
    m = load_model(path).to(device)
    return m, m


def step(forward, params, batches, denominator, device):
    for p in params:
        p.grad = None
    for tokens, mask in batches:
        tokens, mask = tokens.to(device), mask.to(device)
        logp, log_probs = batch_lib.token_logprobs(forward(tokens), tokens, 1.4)
        loss = -(logp * mask).sum() / denominator + 0.3 * losses.entropy_loss(log_probs, mask, denominator)
        loss.backward()
    if device == "cuda":
        torch.cuda.synchronize()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True)
    p.add_argument("--impl", default="ours", help="comma-separated: ours, hf-eager, hf-sdpa")
    p.add_argument("--device", default="cpu")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--blas-threads", type=int, default=1, help="OpenBLAS threads, as the trainer's --blas-threads")
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--samples", type=int, default=32)
    p.add_argument("--min-len", type=int, default=250)
    p.add_argument("--max-len", type=int, default=1000)
    p.add_argument("--micro-batch-tokens", type=int, default=8192)
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    cpu_threads.set_blas_threads(args.blas_threads)
    impls = args.impl.split(",")
    models = {}
    for impl in impls:
        if impl == "ours":
            models[impl] = our_model(args.model, args.device)
        elif impl.startswith("hf-"):
            models[impl] = hf_model(args.model, impl[3:], args.device)
        else:
            sys.exit(f"trainer_step: --impl {impl}: expected ours, hf-eager or hf-sdpa")
    vocab = models[impls[0]][1].config.vocab_size
    batches, real_tokens = synthetic_step(args, vocab)
    denominator = float(sum(m.sum() for _, m in batches))
    gaps, reference = {}, None
    for impl in impls:
        with torch.no_grad():
            logits = models[impl][0](batches[0][0].to(args.device)).float().cpu()
        reference = logits if reference is None else reference
        gaps[impl] = float((logits - reference).abs().max())
    times = {impl: [] for impl in impls}
    for _ in range(args.repeat):  # interleaved, so load changes hit every implementation alike
        for impl in impls:
            forward, module = models[impl]
            start = time.perf_counter()
            step(forward, list(module.parameters()), batches, denominator, args.device)
            times[impl].append(time.perf_counter() - start)
    for impl in impls:
        median = statistics.median(times[impl])
        print(json.dumps({"impl": impl, "device": args.device, "threads": args.threads,
                          "blas_threads": cpu_threads.blas_threads(), "tokens": real_tokens,
                          "micro_batches": len(batches), "median_s": round(median, 3),
                          "tokens_per_s": round(real_tokens / median, 1),
                          "runs_s": [round(t, 3) for t in times[impl]],
                          "max_logit_gap_vs_first": gaps[impl]}))


if __name__ == "__main__":
    main()
