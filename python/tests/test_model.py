import json
import subprocess

import numpy as np
import pytest
import torch

from conftest import DEFAULT_MODEL, MOE_MODEL
from flashroll import safetensors_io
from flashroll.model import forward_as_stored, load_model, read_config, save_checkpoint, stored_dtypes

# 300 tokens below both models' vocab_size (2487): more than one of
# causal_attention's query blocks.
TOKENS = np.random.RandomState(0).randint(0, 2487, size=300).tolist()


@pytest.mark.parametrize("model_dir", [DEFAULT_MODEL, MOE_MODEL])
def test_logits_match_the_engine(flashroll_bin, model_dir):
    out = subprocess.run([flashroll_bin, "logits", "--model", model_dir, "--tokens", " ".join(map(str, TOKENS))],
                         capture_output=True, text=True, check=True, timeout=60).stdout
    engine = torch.tensor(json.loads(out)["logits"])  # [T, V]
    with torch.no_grad():
        ours = load_model(model_dir)(torch.tensor([TOKENS]))[0]
    assert ours.shape == engine.shape == (len(TOKENS), 2487)
    diff = (ours - engine).abs().max().item()
    print(f"{model_dir}: max |logit diff| {diff:.3g} over {len(TOKENS)} positions")
    assert diff < 1e-3


def test_config_reads_moe_fields():
    c = read_config(MOE_MODEL)
    assert (c.model_type, c.num_experts, c.num_experts_per_tok, c.moe_intermediate_size) == ("qwen3_moe", 8, 2, 128)
    assert c.norm_topk_prob and c.rope_theta == 10000.0 and c.tie_word_embeddings
    assert all(c.is_moe_layer(i) for i in range(c.num_hidden_layers))


def test_right_padding_leaves_earlier_positions_alone():
    model = load_model(DEFAULT_MODEL)
    with torch.no_grad():
        short = model(torch.tensor([TOKENS[:20]]))
        padded = model(torch.tensor([TOKENS[:20] + [0] * 7]))
    # Equal up to BLAS blocking, which differs with the row count and the
    # OpenBLAS thread count: 1.1e-5 on logits up to 11.7 with two threads.
    # Attention that reached the padding would move them by far more.
    assert torch.allclose(short[0], padded[0, :20], atol=1e-4, rtol=0)


@pytest.mark.parametrize("model_dir", [DEFAULT_MODEL, MOE_MODEL])
def test_saved_checkpoint_has_the_source_layout_and_loads_back_bit_identically(tmp_path, model_dir):
    model = load_model(model_dir)
    with torch.no_grad():
        model.model.norm.weight.mul_(2)  # a change bf16 holds exactly
    save_checkpoint(model, model_dir, tmp_path)
    src_header, src_meta, _ = safetensors_io.read_header(f"{model_dir}/model.safetensors")
    out_header, out_meta, _ = safetensors_io.read_header(tmp_path / "model.safetensors")
    assert out_header == src_header and out_meta == src_meta  # names, dtypes, shapes, offsets
    for name in ("config.json", "generation_config.json"):
        assert (tmp_path / name).read_bytes() == open(f"{model_dir}/{name}", "rb").read()
    back = load_model(tmp_path)
    for (name, a), (_, b) in zip(model.state_dict().items(), back.state_dict().items()):
        assert torch.equal(a.to(torch.bfloat16), b.to(torch.bfloat16)), name
    assert torch.equal(back.model.norm.weight, model.model.norm.weight)


def test_save_refuses_a_layout_change(tmp_path):
    model = load_model(DEFAULT_MODEL)
    model.model.norm.weight = torch.nn.Parameter(torch.ones(3))
    with pytest.raises(ValueError, match=r"tensor model.norm.weight: model shape \[3\]"):
        save_checkpoint(model, DEFAULT_MODEL, tmp_path)
    with pytest.raises(ValueError, match="stores BF16, asked for torch.float32"):
        save_checkpoint(load_model(DEFAULT_MODEL), DEFAULT_MODEL, tmp_path, torch.float32)


def test_forward_as_stored_is_the_saved_checkpoints_forward_with_straight_through_gradients(tmp_path):
    model = load_model(DEFAULT_MODEL)
    with torch.no_grad():  # master weights off the bf16 grid, as training leaves them
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 1e-3)
    save_checkpoint(model, DEFAULT_MODEL, tmp_path)
    tokens = torch.tensor([TOKENS[:40]])
    dtypes = stored_dtypes(DEFAULT_MODEL)
    assert set(dtypes.values()) == {torch.bfloat16}
    stored = forward_as_stored(model, tokens, dtypes)
    with torch.no_grad():
        served = load_model(tmp_path)(tokens)
        master = model(tokens)
    # The same weights as the checkpoint the engine would load; the master
    # weights' forward is measurably elsewhere.
    assert torch.allclose(stored, served, atol=1e-5, rtol=0)
    assert (master - served).abs().max() > 1e-3
    # d(sum)/d(master weight) flows straight through the rounding.
    stored.sum().backward()
    grad = model.model.norm.weight.grad
    assert grad is not None and grad.abs().sum() > 0


@pytest.mark.parametrize("t", [1, 255, 256, 257, 600])
def test_blocked_causal_attention_matches_the_full_square(t):
    from flashroll.model import causal_attention
    q, k, v = (torch.randn(3, t, 16, dtype=torch.float64, requires_grad=True) for _ in range(3))
    full = (q @ k.transpose(1, 2) * 0.25).masked_fill(torch.ones(t, t, dtype=torch.bool).triu(1), float("-inf"))
    expected = full.softmax(-1) @ v
    got = causal_attention(q, k, v, 0.25)
    assert got.shape == expected.shape
    assert torch.allclose(got, expected, atol=1e-12)
    grads = torch.autograd.grad(got.square().sum(), (q, k, v))
    expected_grads = torch.autograd.grad(expected.square().sum(), (q, k, v))
    for g, e in zip(grads, expected_grads):
        assert torch.allclose(g, e, atol=1e-10)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device (the GPU machine runs it)")
def test_the_model_runs_on_cuda_with_the_cpu_logits():
    model = load_model(DEFAULT_MODEL)
    tokens = torch.tensor([TOKENS])
    with torch.no_grad():
        cpu = model(tokens)
        gpu = model.cuda()(tokens.cuda()).cpu()
    assert (gpu - cpu).abs().max().item() < 1e-3
