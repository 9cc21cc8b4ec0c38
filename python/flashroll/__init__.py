"""Flashroll's trainer side: a client for the RL job's trainer API, batch
tensors, a PyTorch Qwen3 / Qwen3-MoE that reads and writes the engine's
checkpoints, and the GRPO and on-policy distillation trainers."""
