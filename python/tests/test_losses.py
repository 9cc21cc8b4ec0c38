import math

import pytest
import torch

from flashroll import losses

# Two samples of three tokens; token 0 is prompt. Ratios r = exp(logp - behaviour):
#   sample 0 (A = +2): 1.5 (clipped above to 1.2), 0.5 (below the clip, kept: min picks 0.5 A)
#   sample 1 (A = -1): 0.5 (clipped below: min picks 0.8 A), 1.5 (masked out)
RATIOS = torch.tensor([[1.0, 1.5, 0.5], [1.0, 0.5, 1.5]])
MASK = torch.tensor([[0.0, 1, 1], [0, 1, 0]])
ADV = torch.tensor([[2.0], [-1.0]]) * MASK
LOGP = torch.zeros(2, 3)
BEHAVIOUR = -RATIOS.log()
TOKEN_SUM = -(1.2 * 2) - (0.5 * 2) - (0.8 * -1)  # -2.6


def test_token_mean_and_dr_grpo_denominators():
    per_sample = MASK.sum(1)
    assert losses.loss_denominator(per_sample, "token_mean", 4) == 3.0
    assert losses.loss_denominator(per_sample, "dr_grpo", 4) == 8.0  # 2 samples x 4 tokens, whatever their lengths
    with pytest.raises(ValueError, match="loss_agg 'seq_mean'"):
        losses.loss_denominator(per_sample, "seq_mean", 4)


@pytest.mark.parametrize("agg,expected", [("token_mean", TOKEN_SUM / 3), ("dr_grpo", TOKEN_SUM / 8)])
def test_grpo_loss_clips_both_sides_and_masks(agg, expected):
    denominator = losses.loss_denominator(MASK.sum(1), agg, 4)
    loss, clipped, kl = losses.grpo_loss(LOGP, BEHAVIOUR, ADV, MASK, 0.2, denominator)
    assert float(loss) == pytest.approx(expected, rel=1e-6)
    assert float(clipped) == 3  # all three masked ratios lie outside [0.8, 1.2]
    assert float(kl) == 0


def test_grpo_gradient_is_zero_where_clipped():
    logp = LOGP.clone().requires_grad_()
    loss, _, _ = losses.grpo_loss(logp, BEHAVIOUR, ADV, MASK, 0.2, 1.0)
    loss.backward()
    # Only sample 0's ratio 0.5 token is unclipped: d/dlogp of -r A = -r A = -1.0.
    assert torch.allclose(logp.grad, torch.tensor([[0, 0, -1.0], [0, 0, 0]]))


def test_kl_k3_and_its_weight_in_the_loss():
    ref = torch.tensor([[0.0, math.log(2), 0.0], [0.0, 0.0, 5.0]])
    k3 = 2 - math.log(2) - 1
    assert losses.kl_k3(LOGP, ref)[0, 1].item() == pytest.approx(k3)
    assert losses.kl_k3(LOGP, LOGP).abs().max().item() == 0
    loss, _, kl = losses.grpo_loss(LOGP, BEHAVIOUR, ADV, MASK, 0.2, 1.0, ref_logp=ref, kl_coef=0.1)
    assert float(kl) == pytest.approx(k3)  # sample 1's ref gap sits on a masked token
    assert float(loss) == pytest.approx(TOKEN_SUM + 0.1 * k3, rel=1e-6)


def test_reverse_kl_over_the_vocabulary():
    student = torch.tensor([[[0.9, 0.1], [0.5, 0.5]]]).log()
    teacher = torch.tensor([[[0.1, 0.9], [0.25, 0.75]]]).log()
    mask = torch.tensor([[0.0, 1.0]])
    expected = 0.5 * math.log(0.5 / 0.25) + 0.5 * math.log(0.5 / 0.75)
    assert float(losses.reverse_kl_loss(student, teacher, mask, 1.0)) == pytest.approx(expected, rel=1e-6)
    assert float(losses.reverse_kl_loss(student, student, mask, 1.0)) == pytest.approx(0, abs=1e-7)


def test_entropy_sum():
    log_probs = torch.tensor([[[0.5, 0.5], [1.0, 1e-30]]]).log()
    assert losses.entropy_sum(log_probs, torch.tensor([[1.0, 0.0]])) == pytest.approx(math.log(2))


def test_mismatch_counts_only_masked_tokens_of_the_held_version():
    trainer = torch.tensor([[0.0, -1.0, -2.0, -3.0, -4.0]])
    engine = torch.tensor([[0.0, -1.1, -1.8, -3.5, -9.0]])
    mask = torch.tensor([[0.0, 1, 1, 1, 0]])
    versions = torch.tensor([[-1, 0, 0, 1, 0]])
    gap_abs, gap, count = losses.mismatch_sums(trainer, engine, mask, versions, 0)
    assert count == 2
    assert gap_abs == pytest.approx(0.3, rel=1e-5)
    assert gap == pytest.approx(0.1, rel=1e-4)  # (-0.1) + 0.2
    assert losses.mismatch_sums(trainer, engine, mask, versions, 1)[2] == 1


def test_negative_advantages_are_scaled_and_positive_ones_kept():
    a = torch.tensor([[0.5, -1.0, 0.0], [-0.25, 2.0, -3.0]])
    assert torch.equal(losses.weigh_negatives(a, 0.1), torch.tensor([[0.5, -0.1, 0.0], [-0.025, 2.0, -0.3]]))
    assert torch.equal(losses.weigh_negatives(a, 1.0), a)
    assert torch.equal(losses.weigh_negatives(a, 0.0), torch.tensor([[0.5, 0.0, 0.0], [0.0, 2.0, 0.0]]))


def test_entropy_loss_is_the_masked_entropy_over_the_denominator_and_descends_towards_the_mode():
    logits = torch.tensor([[[0.0, 0.0], [2.0, 0.0]]], requires_grad=True)
    log_probs = torch.log_softmax(logits, -1)
    loss = losses.entropy_loss(log_probs, torch.tensor([[1.0, 0.0]]), 2.0)
    assert float(loss) == pytest.approx(math.log(2) / 2)
    loss.backward()
    assert torch.equal(logits.grad[0, 1], torch.zeros(2))  # masked position
    # At the uniform row the entropy is at its maximum: no gradient there.
    assert torch.allclose(logits.grad[0, 0], torch.zeros(2), atol=1e-7)
    peaked = torch.tensor([[[1.0, 0.0]]], requires_grad=True)
    losses.entropy_loss(torch.log_softmax(peaked, -1), torch.ones(1, 1), 1.0).backward()
    assert peaked.grad[0, 0, 0] < 0 < peaked.grad[0, 0, 1]  # descent raises the mode's logit


# A token sampled max_staleness versions ago that the trainer's weights now
# favour: its ratio r grows without limit, and with a negative advantage
# PPO-clip alone charges -r A.
STALE_RATIOS = [1.0, 2.9, 3.1, 10.0, 1e3, 1e6]


@pytest.mark.parametrize("ratio", STALE_RATIOS)
def test_a_stale_token_with_a_negative_advantage_has_a_bounded_loss_and_gradient_by_default(ratio):
    logp = torch.zeros(1, 1, requires_grad=True)
    behaviour = torch.full((1, 1), -math.log(ratio))
    advantage, mask = torch.full((1, 1), -1.5), torch.ones(1, 1)
    loss, _, _ = losses.grpo_loss(logp, behaviour, advantage, mask, 0.2, 1.0)  # the trainer's default bound
    loss.backward()
    assert float(loss) <= 3.0 * 1.5 + 1e-6
    assert float(logp.grad.abs().max()) <= 3.0 * 1.5 + 1e-6
    if ratio > 3:  # past the cap the dual clip holds the loss at c |A|, with no gradient
        assert float(loss) == pytest.approx(4.5)
        assert float(logp.grad.abs().max()) == 0


@pytest.mark.parametrize("bound", ["dual_clip", "truncated_is"])
def test_both_bounds_cap_a_stale_batch_at_c_times_the_advantage(bound):
    ratios = torch.tensor([STALE_RATIOS])
    logp = torch.zeros_like(ratios, requires_grad=True)
    advantages = torch.full_like(ratios, -2.0)
    mask = torch.ones_like(ratios)
    loss, clipped, _ = losses.grpo_loss(logp, -ratios.log(), advantages, mask, 0.2, float(mask.sum()),
                                        ratio_bound=bound, ratio_cap=3.0)
    loss.backward()
    assert float(loss) <= 3.0 * 2.0 + 1e-6  # a mean over tokens each at most c |A|
    assert float(logp.grad.abs().max()) <= 3.0 * 2.0 / float(mask.sum()) + 1e-6
    assert float(clipped) >= 4  # the four ratios above c at least


def test_truncated_is_weighs_the_policy_gradient_by_the_truncated_ratio():
    ratios = torch.tensor([[0.5, 2.0, 10.0]])
    logp = torch.zeros_like(ratios, requires_grad=True)
    advantages = torch.tensor([[1.0, 1.0, -1.0]])
    loss, clipped, _ = losses.grpo_loss(logp, -ratios.log(), advantages, torch.ones_like(ratios), 0.2, 1.0,
                                        ratio_bound="truncated_is", ratio_cap=3.0)
    loss.backward()
    # value -min(r, c) A, gradient -min(r, c) A per token: no PPO clip at 2.0
    assert float(loss) == pytest.approx(-0.5 - 2.0 + 3.0)
    assert torch.allclose(logp.grad, torch.tensor([[-0.5, -2.0, 3.0]]))
    assert float(clipped) == 1


def test_without_a_bound_the_stale_loss_grows_with_the_ratio():
    behaviour = torch.full((1, 1), -math.log(1e3))
    loss, _, _ = losses.grpo_loss(torch.zeros(1, 1), behaviour, torch.full((1, 1), -1.0), torch.ones(1, 1), 0.2,
                                  1.0, ratio_bound="none")
    assert float(loss) == pytest.approx(1e3, rel=1e-4)
    with pytest.raises(ValueError, match="ratio_bound 'tis'"):
        losses.grpo_loss(torch.zeros(1, 1), behaviour, torch.ones(1, 1), torch.ones(1, 1), 0.2, 1.0, ratio_bound="tis")
