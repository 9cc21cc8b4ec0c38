"""The trainers' losses and per-token metrics, on tensors aligned with tokens
(see batch.py): every [B, T] argument has entry t for token t.

Losses are sums over loss-masked tokens divided by a `denominator` computed
once for the whole step (loss_denominator), so micro-batches' losses add up
to the step's loss.
"""
import torch


def loss_denominator(masked_per_sample, loss_agg, max_tokens):
    """masked_per_sample [B]: each sample's loss-masked token count, over the
    whole step -> the divisor of the step's masked token sum.
    token_mean: the number of loss-masked tokens (each token weighs the same).
    dr_grpo: B * max_tokens, a constant per sample with no length normalisation
    (Dr. GRPO, Liu et al. 2025)."""
    if loss_agg == "token_mean":
        return max(float(masked_per_sample.sum()), 1.0)
    if loss_agg == "dr_grpo":
        return float(len(masked_per_sample) * max_tokens)
    raise ValueError(f"loss_agg {loss_agg!r}: expected token_mean or dr_grpo")


def kl_k3(logp, ref_logp):
    """[B, T] -> [B, T]: the k3 estimator of KL(policy || reference) per token,
    exp(ref - logp) - (ref - logp) - 1 (Schulman 2020), >= 0."""
    d = ref_logp - logp
    return torch.exp(d) - d - 1


def weigh_negatives(advantages, weight):
    """advantages [B, T] with the negative ones scaled by `weight` (1: as they
    are). A small policy pushed down on every token of its failed samples
    spreads that probability over other tokens, its entropy rises and at a
    high sampling temperature it fails more; weighing the negative side less
    (W-REINFORCE, Zhu et al. 2025) keeps the push towards what succeeded."""
    return torch.where(advantages < 0, advantages * weight, advantages)


RATIO_BOUNDS = ("dual_clip", "truncated_is", "none")


def grpo_loss(logp, behaviour_logp, advantages, loss_mask, clip, denominator, ref_logp=None, kl_coef=0.0,
              ratio_bound="dual_clip", ratio_cap=3.0):
    """Token-level PPO-clip on r = exp(logp - behaviour_logp), plus kl_coef * k3
    to the reference when ref_logp is given. All [B, T].

    A token sampled up to max_staleness versions ago can have a large r; with
    a negative advantage PPO-clip's -min(r A, clip(r, 1-clip, 1+clip) A) is
    then -r A, unbounded in loss and gradient. ratio_bound (c = ratio_cap):
      dual_clip     PPO-clip, and for A < 0 at most -c A (Ye et al. 2020,
                    dual-clip PPO): no gradient once r > c.
      truncated_is  -min(r, c) A in value, with gradient -min(r, c) A dlogp:
                    the importance weight truncated at c and held fixed
                    (IMPALA's truncation), no PPO clip.
      none          PPO-clip alone.
    Either bound keeps |loss| <= c |A| per token.

    Returns (loss, clipped tokens, kl sum): loss the masked sum / denominator;
    clipped the masked tokens whose gradient the clip or the cap cut (dual_clip,
    none: r outside [1-clip, 1+clip]; truncated_is: r > c); kl sum the masked
    k3 sum (0 without ref_logp)."""
    if ratio_bound not in RATIO_BOUNDS:
        raise ValueError(f"ratio_bound {ratio_bound!r}: expected one of {', '.join(RATIO_BOUNDS)}")
    ratio = torch.exp(logp - behaviour_logp)
    if ratio_bound == "truncated_is":
        weight = (ratio.clamp(max=ratio_cap) / ratio).detach()
        per_token = -weight * ratio * advantages
        cut = ratio > ratio_cap
    else:
        per_token = -torch.min(ratio * advantages, ratio.clamp(1 - clip, 1 + clip) * advantages)
        if ratio_bound == "dual_clip":
            per_token = torch.where(advantages < 0, torch.min(per_token, -ratio_cap * advantages), per_token)
        cut = (ratio - 1).abs() > clip
    kl_sum = torch.zeros(())
    if ref_logp is not None:
        kl = kl_k3(logp, ref_logp)
        per_token = per_token + kl_coef * kl
        kl_sum = (kl * loss_mask).sum().detach()
    loss = (per_token * loss_mask).sum() / denominator
    clipped = (cut.float() * loss_mask).sum().detach()
    return loss, clipped, kl_sum


def reverse_kl_loss(student_log_probs, teacher_log_probs, loss_mask, denominator):
    """KL(student || teacher) = sum_v p_s(v) (log p_s(v) - log p_t(v)) per token
    over the full vocabulary; log-probs [B, T, V], loss_mask [B, T]. Returns the
    masked sum / denominator."""
    kl = (student_log_probs.exp() * (student_log_probs - teacher_log_probs)).sum(-1)  # [B, T]
    return (kl * loss_mask).sum() / denominator


def entropy_loss(log_probs, loss_mask, denominator):
    """The masked sum of per-token entropies / denominator, with its gradient:
    log_probs [B, T, V] (at the sampling temperature), loss_mask [B, T].
    Added with a positive weight it sharpens the policy towards its own
    modes; unlike a sampled policy gradient its gradient is exact over the
    vocabulary, so it is not noise on the tokens no reward depended on."""
    return (-(log_probs.exp() * log_probs).sum(-1) * loss_mask).sum() / denominator


def entropy_sum(log_probs, loss_mask):
    """log_probs [B, T, V], loss_mask [B, T] -> the masked sum of per-token entropies."""
    with torch.no_grad():
        return float((-(log_probs.exp() * log_probs).sum(-1) * loss_mask).sum())


def mismatch_sums(logp_trainer, logp_engine, loss_mask, versions, version):
    """Train-inference mismatch on the masked tokens the engine sampled with the
    weights the trainer holds (versions == version), all [B, T]. Returns
    (sum |logp_trainer - logp_engine|, sum (logp_engine - logp_trainer), count):
    divided by count, the mean absolute gap and the KL(engine || trainer)
    estimate on tokens drawn from the engine."""
    with torch.no_grad():
        on = loss_mask * (versions == version).float()
        gap = logp_engine - logp_trainer
        return float((gap.abs() * on).sum()), float((gap * on).sum()), int(on.sum())
