import json

import pytest
import torch

from flashroll import batch as batch_lib
from flashroll import batch_format
from test_batch_format import BATCH


def test_collate_pads_and_broadcasts_advantages():
    mb = batch_lib.collate(batch_format.decode_json(json.dumps(BATCH)).samples())
    assert mb.tokens.dtype == torch.int64 and mb.tokens.tolist() == [[5, 6, 7], [5, 9, 0]]
    assert mb.attention_mask.tolist() == [[1, 1, 1], [1, 1, 0]]
    assert mb.loss_mask.tolist() == [[0, 1, 0], [0, 1, 0]]
    assert torch.allclose(mb.advantages, torch.tensor([[0, 0.35, 0], [0, -0.35, 0]]))
    assert mb.behaviour_logprobs.tolist() == [[0, -0.5, -1.25], [0, -2.0, 0]]
    assert mb.versions.tolist() == [[-1, 0, 1], [-1, 1, -1]]
    assert mb.effort.tolist() == [100, 100] and mb.success.tolist() == [True, False]
    assert mb.reward.tolist() == pytest.approx([0.8, 0]) and mb.reasoning_tokens.tolist() == [2, 1]
    assert mb.reward_parts[0] == {"verifier": 1.0, "length": -0.2} and mb.sample_ids == [1201, 1202]


def test_collate_refuses_a_scored_first_token():
    bad = json.loads(json.dumps(BATCH))
    bad["groups"][0]["samples"][1]["loss_mask"] = [1, 1]
    with pytest.raises(ValueError, match="sample 1202: loss_mask"):
        batch_lib.collate(batch_format.decode_json(json.dumps(bad)).samples())


def test_token_logprobs_score_token_t_with_logits_at_t_minus_1():
    logits = torch.tensor([[[0.0, 2.0, 0.0], [4.0, 0.0, 0.0], [9.0, 9.0, 9.0]]])  # [1, 3, 3]
    tokens = torch.tensor([[2, 1, 0]])
    logp, log_probs = batch_lib.token_logprobs(logits, tokens, 2.0)
    expected_1 = torch.log_softmax(torch.tensor([0.0, 1.0, 0.0]), -1)[1]  # logits[0] / 2 scores token 1
    expected_2 = torch.log_softmax(torch.tensor([2.0, 0.0, 0.0]), -1)[0]  # logits[1] / 2 scores token 2
    assert torch.allclose(logp, torch.tensor([[0.0, expected_1, expected_2]]))
    assert log_probs.shape == (1, 3, 3)
    greedy, _ = batch_lib.token_logprobs(logits, tokens, 0.0)  # T = 0 scores as T = 1
    assert greedy[0, 1].item() == pytest.approx(torch.log_softmax(logits[0, 0], -1)[1].item())
