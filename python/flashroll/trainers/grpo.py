"""GRPO: token-level PPO-clip on the job's group-relative advantages.

  python3 -m flashroll.trainers.grpo --api URL --token-file F --model DIR
      --checkpoint-root DIR --steps N --lr LR --clip EPS --kl BETA
      --groups-per-step G --temperature T --loss-agg token_mean|dr_grpo
      --log FILE --seed S

Per token: -min(r A, clip(r, 1-EPS, 1+EPS) A), r = exp(logp - logp_engine),
on the server's loss_mask; plus BETA * k3 KL to the initial model when BETA > 0.
--ratio-bound dual_clip (default) | truncated_is | none and --ratio-cap C
(default 3) bound a stale token's loss at C |A| (losses.grpo_loss says how).
--negative-weight W scales the negative advantages (losses.weigh_negatives);
--entropy-weight E adds E times the masked
tokens' entropy (losses.entropy_loss: E > 0 sharpens, E < 0 is a bonus).
The loop (lease, ack, step, checkpoint, publish) is loop.py's.
"""
import sys

import torch

from flashroll import batch as batch_lib
from flashroll import losses
from flashroll.model import load_model
from flashroll.trainers import loop


class Grpo:
    def __init__(self, args):
        self.clip, self.kl, self.temperature = args.clip, args.kl, args.temperature
        self.negative_weight = args.negative_weight
        self.entropy_weight = args.entropy_weight
        self.ratio_bound, self.ratio_cap = args.ratio_bound, args.ratio_cap
        # The reference is the initial model, also after a resume.
        self.reference = load_model(args.model).eval() if args.kl > 0 else None

    def trains_on(self, sample):
        """A sample with advantage 0 (or a negative one weighed 0) adds nothing
        to the PPO term; without KL its whole loss is 0."""
        return (self.kl > 0 or self.entropy_weight != 0 or sample.advantage > 0
                or (sample.advantage < 0 and self.negative_weight != 0))

    def prepare(self, pairs):
        return [None] * len(pairs)

    def loss(self, mb, logp, log_probs, contexts, denominator):
        ref_logp = None
        if self.reference is not None:
            with torch.no_grad():
                ref_logp, _ = batch_lib.token_logprobs(self.reference(mb.tokens), mb.tokens, self.temperature)
        advantages = losses.weigh_negatives(mb.advantages, self.negative_weight)
        loss, clipped, kl_sum = losses.grpo_loss(logp, mb.behaviour_logprobs, advantages, mb.loss_mask,
                                                 self.clip, denominator, ref_logp, self.kl,
                                                 self.ratio_bound, self.ratio_cap)
        if self.entropy_weight != 0:
            loss = loss + self.entropy_weight * losses.entropy_loss(log_probs, mb.loss_mask, denominator)
        return loss, {"clip_fraction": clipped, "kl": kl_sum}


def add_flags(parser):
    parser.add_argument("--clip", type=float, default=0.2, help="PPO clip epsilon")
    parser.add_argument("--kl", type=float, default=0.0, help="k3 KL coefficient to the initial model (0: none)")
    parser.add_argument("--negative-weight", type=float, default=1.0,
                        help="factor on negative advantages (1: as the job computed them; 0: positive ones only)")
    parser.add_argument("--entropy-weight", type=float, default=0.0,
                        help="weight of the masked tokens' entropy in the loss (> 0 sharpens the policy, "
                             "< 0 is an exploration bonus, 0: none)")
    parser.add_argument("--ratio-bound", choices=losses.RATIO_BOUNDS, default="dual_clip",
                        help="how a stale token's importance ratio r is bounded: dual_clip (PPO-clip, and at most "
                             "C |A| when A < 0), truncated_is (weight min(r, C), no clip) or none (PPO-clip alone)")
    parser.add_argument("--ratio-cap", type=float, default=3.0, help="C of --ratio-bound (default 3)")


if __name__ == "__main__":
    sys.exit(loop.main(Grpo, "GRPO trainer for a Flashroll RL job", add_flags))
