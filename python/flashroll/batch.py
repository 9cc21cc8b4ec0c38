"""A leased batch's samples as padded tensors for the trainer.

Every per-token tensor is aligned with `tokens`: entry t belongs to token t.
The model's logits at position t-1 score token t, so a token's logprob
under the trainer is log_softmax(logits[:, t-1] / T)[tokens[t]] (see
token_logprobs). Sequences are right-padded with token 0 and mask 0.
"""
from dataclasses import dataclass

import numpy as np
import torch


@dataclass
class TensorBatch:
    tokens: torch.Tensor          # [B, T] int64, right-padded with 0
    attention_mask: torch.Tensor  # [B, T] float, 1 for real tokens, 0 for padding
    loss_mask: torch.Tensor       # [B, T] float, the server's loss_mask (staleness already applied)
    advantages: torch.Tensor      # [B, T] float, the sample's advantage on its loss-masked tokens, 0 elsewhere
    behaviour_logprobs: torch.Tensor  # [B, T] float, the engine's logprob of each token (0 where not sampled)
    versions: torch.Tensor        # [B, T] int64, the weight version that sampled each token (-1 elsewhere)
    effort: torch.Tensor          # [B] int64
    reward: torch.Tensor          # [B] float
    success: torch.Tensor         # [B] bool
    reasoning_tokens: torch.Tensor  # [B] int64
    prompt_tokens: torch.Tensor   # [B] int64
    reward_parts: list            # [B] dicts {name: value}
    sample_ids: list              # [B] ints

    def __len__(self):
        return self.tokens.shape[0]


def collate(pairs):
    """(group, sample) pairs (Batch.samples(), or a slice of it) -> TensorBatch."""
    if not pairs:
        raise ValueError("collate: no samples")
    b, t = len(pairs), max(len(s.tokens) for _, s in pairs)
    tokens = np.zeros((b, t), np.int64)
    attention = np.zeros((b, t), np.float32)
    loss_mask = np.zeros((b, t), np.float32)
    behaviour = np.zeros((b, t), np.float32)
    versions = np.full((b, t), -1, np.int64)
    for i, (_, s) in enumerate(pairs):
        n = len(s.tokens)
        tokens[i, :n] = s.tokens
        attention[i, :n] = 1
        loss_mask[i, :n] = s.loss_mask
        behaviour[i, :n] = s.logprobs
        versions[i, :n] = s.versions
    if loss_mask[:, 0].any():
        raise ValueError(f"collate: sample {pairs[int(np.argmax(loss_mask[:, 0]))][1].sample_id}: "
                         "loss_mask[0] is 1, but the first token has no context to score it")
    advantage = np.array([s.advantage for _, s in pairs], np.float32)
    return TensorBatch(
        tokens=torch.from_numpy(tokens), attention_mask=torch.from_numpy(attention),
        loss_mask=torch.from_numpy(loss_mask), advantages=torch.from_numpy(advantage[:, None] * loss_mask),
        behaviour_logprobs=torch.from_numpy(behaviour), versions=torch.from_numpy(versions),
        effort=torch.tensor([g.effort for g, _ in pairs], dtype=torch.int64),
        reward=torch.tensor([s.reward for _, s in pairs], dtype=torch.float32),
        success=torch.tensor([s.success for _, s in pairs], dtype=torch.bool),
        reasoning_tokens=torch.tensor([s.reasoning_tokens for _, s in pairs], dtype=torch.int64),
        prompt_tokens=torch.tensor([s.prompt_tokens for _, s in pairs], dtype=torch.int64),
        reward_parts=[dict(s.reward_parts) for _, s in pairs], sample_ids=[s.sample_id for _, s in pairs])


def token_logprobs(logits, tokens, temperature):
    """logits [B, T, V], tokens [B, T] -> (logp [B, T], log_probs [B, T, V]):
    log_probs[:, t] = log_softmax(logits[:, t-1] / T) is the distribution token t
    was drawn from, logp[:, t] its value at tokens[:, t]; position 0, which no
    logits score, is 0. T <= 0 scores as T = 1, as the engine records greedy
    tokens."""
    scale = temperature if temperature > 0 else 1.0
    log_probs = torch.log_softmax(logits[:, :-1].float() / scale, dim=-1)  # [B, T-1, V]
    log_probs = torch.cat([torch.zeros_like(log_probs[:, :1]), log_probs], dim=1)  # [B, T, V]
    logp = log_probs.gather(-1, tokens[:, :, None]).squeeze(-1)  # [B, T]
    logp = torch.cat([torch.zeros_like(logp[:, :1]), logp[:, 1:]], dim=1)
    return logp, log_probs
