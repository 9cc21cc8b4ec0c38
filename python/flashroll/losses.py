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


def grpo_loss(logp, behaviour_logp, advantages, loss_mask, clip, denominator, ref_logp=None, kl_coef=0.0):
    """Token-level PPO-clip: -min(r A, clip(r, 1-clip, 1+clip) A) per token with
    r = exp(logp - behaviour_logp), plus kl_coef * k3 to the reference when
    ref_logp is given. All [B, T]. Returns (loss, clipped tokens, kl sum): loss
    the masked sum / denominator; clipped the masked tokens whose ratio lies
    outside [1-clip, 1+clip]; kl sum the masked k3 sum (0 without ref_logp)."""
    ratio = torch.exp(logp - behaviour_logp)
    per_token = -torch.min(ratio * advantages, ratio.clamp(1 - clip, 1 + clip) * advantages)
    kl_sum = torch.zeros(())
    if ref_logp is not None:
        kl = kl_k3(logp, ref_logp)
        per_token = per_token + kl_coef * kl
        kl_sum = (kl * loss_mask).sum().detach()
    loss = (per_token * loss_mask).sum() / denominator
    clipped = (((ratio - 1).abs() > clip).float() * loss_mask).sum().detach()
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
