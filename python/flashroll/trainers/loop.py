"""The loop every trainer shares: lease groups, compute the objective's loss
and gradients, ack, step, checkpoint, publish, log.

At start the trainer asks the job which version it last published (GET
/v1/weights) and resumes from that checkpoint: a checkpoint on disk beyond
it was never published, so the job serves again the groups its step
trained. Its next version is above every version the engine served and
every checkpoint on disk (the job's next_version, and the directories).

Per step:
  1. lease --groups-per-step groups (long poll; a timeout polls again, a
     closed queue ends the run with exit status 0), saying which version
     the trainer holds (trainer_version), against which the job masks
     tokens more than --max-staleness versions older; the trainer checks
     the mask again and drops (and counts, stale_tokens_dropped) any token
     that is still past the bound;
  2. forward and backward in micro-batches of at most --micro-batch-tokens
     padded tokens, gradients summed (each micro-batch's loss is divided by
     the whole step's denominator);
     while they run, the lease is renewed whenever half of it has passed,
     so a step longer than the job's lease_timeout keeps its groups;
  3. ack the lease, saying the version whose weights computed the loss
     (trained_at_version) and the version this step will publish
     (into_version): the job records it at once and holds the groups until
     that version is published; if the lease expired meanwhile its groups
     belong to another lease: the gradients are dropped and no step is
     taken. A step that ends before its ack (an error, SIGTERM) releases
     the lease;
  4. clip the gradient norm, AdamW step;
  5. write checkpoint version v (checkpoints.py; its step_groups.json names
     the groups this step trained, the version it trained at and how many
     groups the weights hold in all) and
     POST /v1/weights with its path relative to --checkpoint-root: this
     makes the step durable, and the job records its groups trained;
  6. one JSON line to --log, one short line to stderr.

Test hook: with FLASHROLL_TEST_HOLD_DIR=DIR set and a file DIR/hold present,
the trainer stops inside the window between ack and publish (after the ack
on even steps, after the checkpoint is written on odd ones), writes DIR/held
("PID STEP acked|written") and waits until DIR/held is removed: a crash test
kills the job or the trainer there (tests/scheduler/training_crash_test.cc).

An objective, built from the parsed flags (setting up e.g. a reference
model or a teacher), supplies what differs between trainers:
  objective.trains_on(sample)      -> False when the sample's loss and gradient are 0
                                      whatever the weights (its forward is skipped)
  objective.prepare(pairs)         -> one context per (group, sample), before the forward
  objective.loss(mb, logp, log_probs, contexts, denominator)
                                   -> (loss tensor, {metric: masked-token sum})
where mb is a batch.TensorBatch, logp [B, T] and log_probs [B, T, V] the
trainer's, as batch.token_logprobs gives them.
"""
import argparse
import copy
import json
import os
import random
import signal
import sys
import threading
import time
from collections import defaultdict

import numpy as np
import torch

from flashroll import batch as batch_lib
from flashroll import checkpoints, cpu_threads, losses
from flashroll.client import ApiError, LeaseExpired, QueueClosed, TrainerClient
from flashroll.model import forward_as_stored, load_model, stored_dtypes


def arg_parser(description):
    """The flags every trainer takes; a trainer adds its own."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--api", required=True, help="the job's trainer API, http://HOST:PORT")
    p.add_argument("--token-file", required=True, help="file holding the trainer API's bearer token")
    p.add_argument("--model", required=True, help="the initial model directory (Hugging Face layout)")
    p.add_argument("--checkpoint-root", required=True, help="where versions v000001, ... are written")
    p.add_argument("--steps", type=int, required=True, help="total optimizer steps, resumed ones included")
    p.add_argument("--lr", type=float, default=1e-5)
    p.add_argument("--weight-decay", type=float, default=0.0)
    p.add_argument("--grad-clip", type=float, default=1.0, help="max gradient norm (0: no clipping)")
    p.add_argument("--groups-per-step", type=int, default=1)
    p.add_argument("--max-staleness", type=int, default=None,
                   help="train no token sampled more than this many versions before the weights that compute "
                        "its loss (the job's scheduler.max_staleness; default: no bound)")
    p.add_argument("--temperature", type=float, default=1.0,
                   help="the job's sampling temperature: logprobs are log_softmax(logits / T)")
    p.add_argument("--loss-agg", choices=["token_mean", "dr_grpo"], default="token_mean")
    p.add_argument("--max-tokens", type=int, default=0,
                   help="dr_grpo's per-sample token constant (default: the model's max_position_embeddings)")
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1,
                   help="torch threads (default: every core; torch alone would take one per physical core)")
    p.add_argument("--blas-threads", type=int, default=1,
                   help="OpenBLAS threads (default 1: its spinning pool, beside the engine on the same cores, "
                        "halved the step rate; see flashroll/cpu_threads.py)")
    p.add_argument("--keep-checkpoints", type=int, default=3,
                   help="newest checkpoints kept, older ones removed after each publish (0: keep all; "
                        "each holds the weights, fp32 master weights and AdamW state)")
    p.add_argument("--micro-batch-tokens", type=int, default=8192,
                   help="padded tokens per forward pass (samples x longest)")
    p.add_argument("--mismatch-samples", type=int, default=2,
                   help="samples per step whose tokens of the previous version are scored again under a kept "
                        "copy of those weights, so the mismatch is measured when the batch lags one version "
                        "(0: only tokens of the held version count)")
    p.add_argument("--forward-weights", choices=["stored", "master"], default="stored",
                   help="stored: the forward rounds each weight to the dtype the checkpoint stores (the weights "
                        "the engine samples with; gradients reach the fp32 master weights straight through); "
                        "master: the fp32 master weights as they are")
    p.add_argument("--poll-timeout", type=float, default=30.0, help="seconds per lease long poll")
    p.add_argument("--log", required=True, help="JSON Lines file, one line per step (appended)")
    p.add_argument("--seed", type=int, default=0)
    return p


def read_token(path):
    with open(path) as f:
        token = f.read().strip()
    if not token:
        raise ValueError(f"--token-file {path}: empty")
    return token


def micro_batches(pairs, budget):
    """Consecutive slices of pairs whose count x longest stays within budget
    (a longer sample goes alone)."""
    chunk, longest = [], 0
    for pair in pairs:
        n = len(pair[1].tokens)
        if chunk and (len(chunk) + 1) * max(longest, n) > budget:
            yield chunk
            chunk, longest = [], 0
        chunk.append(pair)
        longest = max(longest, n)
    if chunk:
        yield chunk


def drop_stale_tokens(pairs, version, max_staleness):
    """Clears the loss mask of every token sampled more than max_staleness
    versions before `version` (or not sampled at all); returns how many
    masked-in tokens it cleared. The job already masked the batch against
    the version named at lease time: a nonzero count means it did not."""
    if max_staleness is None:
        return 0
    dropped = 0
    for _, s in pairs:
        versions = np.asarray(s.versions)
        fresh = (versions >= 0) & (version - versions <= max_staleness)
        stale = (np.asarray(s.loss_mask) != 0) & ~fresh
        if stale.any():
            dropped += int(stale.sum())
            s.loss_mask = np.where(stale, 0, s.loss_mask).astype(np.uint8)
    return dropped


def _per_effort(pairs, value):
    sums, counts = defaultdict(float), defaultdict(int)
    for g, s in pairs:
        sums[g.effort] += value(s)
        counts[g.effort] += 1
    return {str(e): sums[e] / counts[e] for e in sorted(sums)}


def batch_metrics(pairs):
    """What the job's samples say, whatever the trainer does with them."""
    return {
        "reward_by_effort": _per_effort(pairs, lambda s: s.reward),
        "success": sum(s.success for _, s in pairs) / len(pairs),
        "success_by_effort": _per_effort(pairs, lambda s: float(s.success)),
        "reasoning_tokens_by_effort": _per_effort(pairs, lambda s: s.reasoning_tokens),
        "samples": len(pairs),
        "tokens": sum(len(s.tokens) for _, s in pairs),
        "loss_tokens": int(sum(int(s.loss_mask.sum()) for _, s in pairs)),
    }


class Trainer:
    """The model, optimizer, counters and checkpoint root of one run."""

    def __init__(self, args, objective):
        self.args, self.objective = args, objective
        self.client = TrainerClient(args.api, read_token(args.token_file))
        self.model = load_model(args.model, torch.float32)
        self.dtypes = stored_dtypes(args.model) if args.forward_weights == "stored" else {}
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=args.lr, weight_decay=args.weight_decay)
        self.max_tokens = args.max_tokens or self.model.config.max_position_embeddings
        self.step, self.version = 0, 0
        self.groups_trained = 0  # how many groups the current weights hold
        # The weights of version - 1 (the last step's starting point), for
        # the mismatch of a batch sampled one version behind; None until a
        # step has been taken in this process.
        self.previous = None
        # The last published checkpoint is the durable one: resume there.
        published = self.client.weights()
        if published["path"] is not None:
            self._restore(published["version"], os.path.join(args.checkpoint_root, published["path"]))
        # Never publish a version at or below one already on disk or served.
        self.next_version = max(checkpoints.versions(args.checkpoint_root) + [self.version, published["next_version"] - 1]) + 1

    def _restore(self, version, path):
        if not checkpoints.is_complete(path):
            raise ValueError(f"the job's last published checkpoint {path} (version {version}) is missing or "
                             f"incomplete: want {', '.join(checkpoints.FILES)}")
        state = checkpoints.load_state(path)
        if state.get("version") != version:
            raise ValueError(f"{path}/trainer_state.pt: version {state.get('version')}, but the directory names {version}")
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.step, self.version = state["step"], state["version"]
        # A checkpoint written before the count listed every group instead.
        self.groups_trained = state.get("groups_trained", len(state.get("trained_groups", [])))
        torch.set_rng_state(state["rng"]["torch"])
        np.random.set_state(state["rng"]["numpy"])
        random.setstate(state["rng"]["python"])
        print(f"resumed from {path}: step {self.step}, version {self.version}", file=sys.stderr)

    def _state(self):
        return {"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(),
                "step": self.step, "version": self.version, "groups_trained": self.groups_trained,
                "rng": {"torch": torch.get_rng_state(), "numpy": np.random.get_state(), "python": random.getstate()},
                "args": vars(self.args)}

    def _forward_backward(self, pairs):
        """Accumulates the step's gradients; returns the model-side metrics."""
        args = self.args
        # Shortest first, so micro-batches hold samples of like lengths and
        # padding stays small; the loss is a sum, so order does not matter.
        pairs = sorted(pairs, key=lambda pair: len(pair[1].tokens))
        # The denominator counts every sample, so skipping those that add 0
        # to the loss leaves the loss and its gradient exactly as they were.
        masked_per_sample = torch.tensor([float(s.loss_mask.sum()) for _, s in pairs])  # [B]
        denominator = losses.loss_denominator(masked_per_sample, args.loss_agg, self.max_tokens)
        # Every objective's loss is a masked-token sum: a sample with no
        # token to train on adds nothing either.
        pairs = [pair for pair in pairs if pair[1].loss_mask.any() and self.objective.trains_on(pair[1])]
        contexts = self.objective.prepare(pairs)
        sums = defaultdict(float)
        at = 0
        for chunk in micro_batches(pairs, args.micro_batch_tokens):
            mb = batch_lib.collate(chunk)
            logp, log_probs = batch_lib.token_logprobs(self._forward(self.model, mb.tokens), mb.tokens,
                                                       args.temperature)
            loss, extra = self.objective.loss(mb, logp, log_probs, contexts[at:at + len(chunk)], denominator)
            loss.backward()
            at += len(chunk)
            sums["loss"] += float(loss)
            sums["entropy"] += losses.entropy_sum(log_probs, mb.loss_mask)
            gap_abs, gap, count = losses.mismatch_sums(logp, mb.behaviour_logprobs, mb.loss_mask, mb.versions,
                                                       self.version)
            sums["mismatch_abs"] += gap_abs
            sums["mismatch_kl"] += gap
            sums["mismatch_tokens"] += count
            for k, v in extra.items():
                sums[k] += float(v)
        self._previous_version_mismatch(pairs, sums)
        masked = max(sum(float(s.loss_mask.sum()) for _, s in pairs), 1.0)
        # A step may run no sample at all (every advantage 0): its sums are empty.
        count, gap_abs, gap = (sums.pop(k, 0.0) for k in ("mismatch_tokens", "mismatch_abs", "mismatch_kl"))
        out = {"loss": sums.pop("loss", 0.0), "entropy": sums.pop("entropy") / masked if pairs else None,
               "mismatch_abs": gap_abs / count if count else None,
               "mismatch_kl": gap / count if count else None,
               "mismatch_tokens": int(count), "trained_samples": len(pairs)}
        out.update({k: v / masked for k, v in sums.items()})  # the objective's per-token means
        return out

    def _forward(self, model, tokens):
        """Logits of `model` (the trained one or the kept previous weights) as
        --forward-weights says."""
        return forward_as_stored(model, tokens, self.dtypes) if self.dtypes else model(tokens)

    def _previous_version_mismatch(self, pairs, sums):
        """Adds to sums the mismatch of up to --mismatch-samples samples' tokens
        of version - 1, scored under the kept copy of those weights."""
        args = self.args
        if self.previous is None or args.mismatch_samples <= 0:
            return
        lagging = [pair for pair in pairs if (np.asarray(pair[1].versions) == self.version - 1).any()]
        with torch.no_grad():
            for chunk in micro_batches(lagging[:args.mismatch_samples], args.micro_batch_tokens):
                mb = batch_lib.collate(chunk)
                logp, _ = batch_lib.token_logprobs(self._forward(self.previous, mb.tokens), mb.tokens,
                                                   args.temperature)
                gap_abs, gap, count = losses.mismatch_sums(logp, mb.behaviour_logprobs, mb.loss_mask, mb.versions,
                                                           self.version - 1)
                sums["mismatch_abs"] += gap_abs
                sums["mismatch_kl"] += gap
                sums["mismatch_tokens"] += count

    def _keep_weights(self):
        """Copies the weights about to be stepped away from into self.previous."""
        if self.previous is None:
            self.previous = copy.deepcopy(self.model)
            self.previous.requires_grad_(False)
        else:
            self.previous.load_state_dict(self.model.state_dict())

    def run(self):
        args = self.args
        if self.step >= args.steps:
            print(f"already at step {self.step} of {args.steps}: nothing to do", file=sys.stderr)
            return 0
        with open(args.log, "a") as log:
            while self.step < args.steps:
                try:
                    batch = self.client.lease(args.groups_per_step, timeout=args.poll_timeout,
                                              trainer_version=self.version)
                except QueueClosed as e:
                    print(f"the job has finished ({e.message}); stopping at step {self.step}", file=sys.stderr)
                    return 0
                if batch is None:
                    continue
                record = self._step(batch)
                if record is None:
                    continue
                log.write(json.dumps(record) + "\n")
                log.flush()
                print(human_line(record), file=sys.stderr)
        return 0

    def _step(self, batch):
        """One step on a leased batch, in the order that keeps each group
        trained exactly once into the published weights: ack (the job
        records it, into the version about to be published), step, write
        the checkpoint, publish. Returns the log record, or None when the
        lease expired before the ack."""
        args = self.args
        start = time.monotonic()
        pairs = batch.samples()
        trained_at = self.version  # the weights that compute this step's loss
        into = self.next_version   # the version this step publishes
        acked = False
        try:
            with LeaseKeeper(self.client, batch):
                stale_dropped = drop_stale_tokens(pairs, trained_at, args.max_staleness)
                self.optimizer.zero_grad(set_to_none=True)
                metrics = self._forward_backward(pairs)
            try:
                self.client.ack(batch, trained_at_version=trained_at, into_version=into)
            except LeaseExpired as e:
                self.optimizer.zero_grad(set_to_none=True)
                print(f"dropped a batch of {len(pairs)} samples, its lease expired: {e.message}", file=sys.stderr)
                return None
            acked = True
        finally:
            if not acked:
                _release_quietly(self.client, batch)
        _test_hold("acked", self.step + 1, self.step % 2 == 1)
        grad_norm = torch.nn.utils.clip_grad_norm_(
            self.model.parameters(), args.grad_clip if args.grad_clip > 0 else float("inf"))
        if args.mismatch_samples > 0:
            self._keep_weights()
        self.optimizer.step()
        self.step += 1
        self.version, self.next_version = into, into + 1
        self.groups_trained += len(batch.groups)
        path = checkpoints.write(args.checkpoint_root, self.version, self.model, args.model, self._state(),
                                 {"trained_at_version": trained_at, "groups": [g.group_id for g in batch.groups],
                                  "groups_trained": self.groups_trained})
        _test_hold("written", self.step, self.step % 2 == 1)
        self.client.publish_weights(path, self.version)
        if args.keep_checkpoints > 0:
            checkpoints.prune(args.checkpoint_root, args.keep_checkpoints)
        seconds = time.monotonic() - start
        record = {"step": self.step, "version": self.version, **batch_metrics(pairs), **metrics,
                  "grad_norm": float(grad_norm), "stale_tokens_dropped": stale_dropped,
                  "trained_at_version": trained_at, "seconds": seconds}
        record["tokens_per_s"] = record["tokens"] / seconds
        return record


class LeaseKeeper:
    """While the block runs, renews `batch`'s lease each time half of it has
    passed (a step that outlasts the job's lease_timeout keeps its groups)."""

    def __init__(self, client, batch):
        self.client, self.lease = client, batch.lease
        self.expires_at_ms = batch.expires_at_ms
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.done.set()
        self.thread.join()

    def _run(self):
        while True:
            left = self.expires_at_ms / 1000 - time.time()
            if self.done.wait(max(left / 2, 0.05)):
                return
            try:
                self.expires_at_ms = self.client.renew(self.lease)
            except ApiError as e:  # expired or the job is gone: the ack will say so
                print(f"renewing lease {self.lease}: {e}", file=sys.stderr)
                return


def _release_quietly(client, batch):
    """Gives a batch the step will not ack back to the queue at once (else
    it waits out its lease); the job may be gone already."""
    try:
        client.release(batch)
    except ApiError as e:
        print(f"releasing lease {batch.lease}: {e}", file=sys.stderr)


def _test_hold(stage, step, on_this_step):
    """The test hook of the module docstring (FLASHROLL_TEST_HOLD_DIR)."""
    hold_dir = os.environ.get("FLASHROLL_TEST_HOLD_DIR")
    if not hold_dir or not on_this_step or not os.path.exists(os.path.join(hold_dir, "hold")):
        return
    held = os.path.join(hold_dir, "held")
    with open(held + ".tmp", "w") as f:
        f.write(f"{os.getpid()} {step} {stage}\n")
    os.rename(held + ".tmp", held)
    while os.path.exists(held):
        time.sleep(0.02)


def human_line(r):
    mismatch = "n/a" if r["mismatch_abs"] is None else f"{r['mismatch_abs']:.2e} over {r['mismatch_tokens']} tok"
    entropy = "n/a" if r["entropy"] is None else f"{r['entropy']:.3f}"
    rewards = " ".join(f"e{e}:{v:.3f}" for e, v in r["reward_by_effort"].items())
    return (f"step {r['step']} v{r['version']}: reward {rewards}, success {100 * r['success']:.0f}%, "
            f"loss {r['loss']:.4f}, grad {r['grad_norm']:.3f}, entropy {entropy}, "
            f"mismatch {mismatch}, {r['samples']} samples ({r['trained_samples']} trained on) "
            f"{r['tokens']} tokens in {r['seconds']:.1f} s")


def main(objective, description, add_flags=None, argv=None):
    parser = arg_parser(description)
    if add_flags:
        add_flags(parser)
    args = parser.parse_args(argv)
    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    torch.set_num_threads(max(1, args.threads))
    # The job stops its trainer with SIGTERM (also when the job dies): as an
    # exception, so a step in flight releases its lease on the way out.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    cpu_threads.set_blas_threads(max(1, args.blas_threads))
    try:
        return Trainer(args, objective(args)).run()
    except ApiError as e:
        print(f"trainer: {e}", file=sys.stderr)
        return 1
