"""A compact PyTorch Qwen3 / Qwen3-MoE with Hugging Face tensor names.

Parameters are named exactly as in the Hugging Face checkpoint
(model.embed_tokens.weight, model.layers.N.self_attn.q_proj.weight, ...,
model.norm.weight, lm_head.weight when untied), so state_dict() maps
one to one onto model.safetensors. Each architecture is one entry in
ARCHITECTURES, keyed by config.json's model_type.

Sequences are right-padded and attention is causal, so padding after a
sequence never affects its positions: no attention mask is needed.
"""
import functools
import json
import os
import shutil
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from flashroll import safetensors_io

# Each tensor's dtype, shape, bytes and sha256, beside model.safetensors; the
# engine checks a checkpoint against it (engine/models/checkpoint.h).
MANIFEST = "manifest.json"

try:
    from torch.func import functional_call
except ImportError:  # PyTorch < 2.0 (Debian 12's 1.13)
    from torch.nn.utils.stateless import functional_call


@dataclass
class Config:
    model_type: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    rms_norm_eps: float
    rope_theta: float
    tie_word_embeddings: bool
    max_position_embeddings: int
    num_experts: int = 0
    num_experts_per_tok: int = 0
    moe_intermediate_size: int = 0
    norm_topk_prob: bool = False
    decoder_sparse_step: int = 1
    mlp_only_layers: list = field(default_factory=list)

    def is_moe_layer(self, index):
        return (self.num_experts > 0 and index not in self.mlp_only_layers
                and (index + 1) % self.decoder_sparse_step == 0)


def read_config(model_dir):
    """Parses model_dir/config.json; a missing or unusable key is a ValueError naming it."""
    path = os.path.join(model_dir, "config.json")
    with open(path) as f:
        raw = json.load(f)

    def get(key, default=None):
        if key in raw and raw[key] is not None:
            return raw[key]
        if default is None:
            raise ValueError(f"{path}: {key}: missing")
        return default

    model_type = get("model_type")
    if model_type not in ARCHITECTURES:
        raise ValueError(f"{path}: model_type: {model_type!r} is not supported (supported: {', '.join(ARCHITECTURES)})")
    rope = raw.get("rope_parameters") or {}
    heads = get("num_attention_heads")
    c = Config(
        model_type=model_type,
        vocab_size=get("vocab_size"),
        hidden_size=get("hidden_size"),
        intermediate_size=get("intermediate_size"),
        num_hidden_layers=get("num_hidden_layers"),
        num_attention_heads=heads,
        num_key_value_heads=get("num_key_value_heads", heads),
        head_dim=get("head_dim", get("hidden_size") // heads),
        rms_norm_eps=get("rms_norm_eps", 1e-6),
        rope_theta=float(rope.get("rope_theta", get("rope_theta", 10000.0))),
        tie_word_embeddings=bool(raw.get("tie_word_embeddings", False)),
        max_position_embeddings=get("max_position_embeddings"),
    )
    if rope.get("rope_type", "default") != "default" or raw.get("rope_scaling"):
        raise ValueError(f"{path}: rope scaling is not supported (rope_type {rope.get('rope_type')!r})")
    if model_type == "qwen3_moe":
        c.num_experts = raw.get("num_experts", raw.get("num_local_experts"))
        if not c.num_experts:
            raise ValueError(f"{path}: num_experts: missing (nor num_local_experts)")
        c.num_experts_per_tok = get("num_experts_per_tok")
        c.moe_intermediate_size = get("moe_intermediate_size")
        c.norm_topk_prob = bool(raw.get("norm_topk_prob", False))
        c.decoder_sparse_step = raw.get("decoder_sparse_step") or 1
        c.mlp_only_layers = list(raw.get("mlp_only_layers") or [])
    return c


class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):  # [..., dim]
        x32 = x.float()
        x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return (x32 * self.weight.float()).to(x.dtype)


def rope_cos_sin(config, positions, dtype):
    """cos, sin: [T, head_dim] for the neox (rotate-half) layout."""
    d = config.head_dim
    inv = 1.0 / (config.rope_theta ** (torch.arange(0, d, 2, dtype=torch.float64, device=positions.device) / d))
    angles = positions.to(torch.float64)[:, None] * inv[None, :]  # [T, d/2]
    angles = torch.cat([angles, angles], dim=-1)
    return angles.cos().to(dtype), angles.sin().to(dtype)


def apply_rope(x, cos, sin):  # x [B, H, T, d]; cos, sin [T, d]
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos + rotated * sin


class Attention(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = c.num_attention_heads, c.num_key_value_heads, c.head_dim
        self.q_proj = nn.Linear(c.hidden_size, self.heads * c.head_dim, bias=False)
        self.k_proj = nn.Linear(c.hidden_size, self.kv_heads * c.head_dim, bias=False)
        self.v_proj = nn.Linear(c.hidden_size, self.kv_heads * c.head_dim, bias=False)
        self.o_proj = nn.Linear(self.heads * c.head_dim, c.hidden_size, bias=False)
        self.q_norm = RMSNorm(c.head_dim, c.rms_norm_eps)
        self.k_norm = RMSNorm(c.head_dim, c.rms_norm_eps)

    def forward(self, x, cos, sin):  # x [B, T, hidden]
        b, t, _ = x.shape
        q = self.q_norm(self.q_proj(x).view(b, t, self.heads, self.head_dim)).transpose(1, 2)
        k = self.k_norm(self.k_proj(x).view(b, t, self.kv_heads, self.head_dim)).transpose(1, 2)
        v = self.v_proj(x).view(b, t, self.kv_heads, self.head_dim).transpose(1, 2)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)  # [B, H, T, d]
        group = self.heads // self.kv_heads
        n = b * self.heads
        k = k.repeat_interleave(group, dim=1).reshape(n, t, self.head_dim)
        v = v.repeat_interleave(group, dim=1).reshape(n, t, self.head_dim)
        out = causal_attention(q.reshape(n, t, self.head_dim), k, v, self.head_dim ** -0.5)  # [B*H, T, d]
        return self.o_proj(out.view(b, self.heads, t, self.head_dim).transpose(1, 2).reshape(b, t, -1))


# Queries per block in causal_attention: small enough that the skipped
# upper triangle is most of what lies above the diagonal, large enough that
# each block's matmuls stay efficient.
ATTENTION_BLOCK = 256


@functools.lru_cache(maxsize=8)
def _causal_mask(t, dtype, device):
    """The additive causal mask [T, T] (-inf above the diagonal), made once per
    length, not once per layer and step; read only."""
    return torch.full((t, t), float("-inf"), dtype=dtype, device=device).triu(1)


def causal_attention(q, k, v, scale):
    """q, k, v [N, T, d] -> softmax(scale * q k^T, causal) v, [N, T, d].
    Each block of ATTENTION_BLOCK queries is scored only against the keys up
    to its last query, so the scores above the diagonal blocks are never
    computed: on the CPU trainer the attention matmuls are the largest cost,
    and at 1,024 tokens this skips 3/8 of them. 3-D bmm with the scale and
    the mask folded into one baddbmm avoids separate passes over the scores."""
    t = q.shape[1]
    mask = _causal_mask(t, q.dtype, q.device)
    blocks = []
    for start in range(0, t, ATTENTION_BLOCK):
        end = min(start + ATTENTION_BLOCK, t)
        scores = torch.baddbmm(mask[start:end, :end], q[:, start:end], k[:, :end].transpose(1, 2), alpha=scale)
        blocks.append(torch.bmm(scores.softmax(-1), v[:, :end]))
    return torch.cat(blocks, dim=1)


class Mlp(nn.Module):
    """SwiGLU: down(silu(gate(x)) * up(x))."""

    def __init__(self, hidden, inner):
        super().__init__()
        self.gate_proj = nn.Linear(hidden, inner, bias=False)
        self.up_proj = nn.Linear(hidden, inner, bias=False)
        self.down_proj = nn.Linear(inner, hidden, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class MoeMlp(nn.Module):
    """Softmax over the router's logits, the top-k experts per token (weights
    renormalised to sum 1 when norm_topk_prob), their outputs summed."""

    def __init__(self, c):
        super().__init__()
        self.top_k, self.norm_topk_prob = c.num_experts_per_tok, c.norm_topk_prob
        self.gate = nn.Linear(c.hidden_size, c.num_experts, bias=False)
        self.experts = nn.ModuleList(Mlp(c.hidden_size, c.moe_intermediate_size) for _ in range(c.num_experts))

    def forward(self, x):  # [B, T, hidden]
        flat = x.reshape(-1, x.shape[-1])  # [N, hidden]
        probs = self.gate(flat).float().softmax(-1)  # [N, E]
        weights, chosen = probs.topk(self.top_k, dim=-1)  # [N, k]
        if self.norm_topk_prob:
            weights = weights / weights.sum(-1, keepdim=True)
        out = torch.zeros_like(flat)
        for e, expert in enumerate(self.experts):
            rows, slot = (chosen == e).nonzero(as_tuple=True)
            if rows.numel():
                out.index_add_(0, rows, expert(flat[rows]) * weights[rows, slot, None].to(flat.dtype))
        return out.view_as(x)


class DecoderLayer(nn.Module):
    def __init__(self, c, index):
        super().__init__()
        self.input_layernorm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.self_attn = Attention(c)
        self.post_attention_layernorm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.mlp = MoeMlp(c) if c.is_moe_layer(index) else Mlp(c.hidden_size, c.intermediate_size)

    def forward(self, x, cos, sin):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin)
        return x + self.mlp(self.post_attention_layernorm(x))


class Decoder(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.embed_tokens = nn.Embedding(c.vocab_size, c.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(c, i) for i in range(c.num_hidden_layers))
        self.norm = RMSNorm(c.hidden_size, c.rms_norm_eps)


class CausalLM(nn.Module):
    """model(tokens [B, T] int64) -> logits [B, T, vocab]; row t scores token t+1."""

    def __init__(self, config):
        super().__init__()
        self.config = config
        self.model = Decoder(config)
        if not config.tie_word_embeddings:
            self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)

    def forward(self, tokens):
        x = self.model.embed_tokens(tokens)
        cos, sin = rope_cos_sin(self.config, torch.arange(tokens.shape[1], device=tokens.device), x.dtype)
        for layer in self.model.layers:
            x = layer(x, cos, sin)
        x = self.model.norm(x)
        head = self.model.embed_tokens.weight if self.config.tie_word_embeddings else self.lm_head.weight
        return F.linear(x, head)


# model_type -> the module class; both Qwen3 variants share one definition,
# the MoE layers chosen by Config.is_moe_layer.
ARCHITECTURES = {"qwen3": CausalLM, "qwen3_moe": CausalLM}


def weight_files(model_dir):
    """The checkpoint's .safetensors files: model.safetensors or the sharded index's."""
    single = os.path.join(model_dir, "model.safetensors")
    if os.path.exists(single):
        return [single]
    index = os.path.join(model_dir, "model.safetensors.index.json")
    if not os.path.exists(index):
        raise FileNotFoundError(f"{model_dir}: neither model.safetensors nor model.safetensors.index.json")
    with open(index) as f:
        shards = sorted(set(json.load(f)["weight_map"].values()))
    return [os.path.join(model_dir, s) for s in shards]


def read_tensors(model_dir):
    tensors = {}
    for path in weight_files(model_dir):
        tensors.update(safetensors_io.load(path))
    return tensors


def load_model(model_dir, dtype=torch.float32):
    """The model in model_dir (config.json + safetensors) with parameters in `dtype`.
    A tensor missing, extra or of another shape than the config implies is a
    ValueError naming it."""
    config = read_config(model_dir)
    model = ARCHITECTURES[config.model_type](config)
    tensors = read_tensors(model_dir)
    expected = model.state_dict()
    missing = sorted(set(expected) - set(tensors))
    extra = sorted(set(tensors) - set(expected))
    if missing or extra:
        raise ValueError(f"{model_dir}: tensors missing {missing[:5]}{'...' if len(missing) > 5 else ''}, "
                         f"unexpected {extra[:5]}{'...' if len(extra) > 5 else ''}")
    for name, t in tensors.items():
        if tuple(t.shape) != tuple(expected[name].shape):
            raise ValueError(f"{model_dir}: tensor {name}: shape {list(t.shape)}, "
                             f"the config implies {list(expected[name].shape)}")
    model.load_state_dict({k: v.to(dtype) for k, v in tensors.items()})
    return model.to(dtype)


def stored_dtypes(model_dir):
    """{tensor name: the torch dtype model_dir's safetensors store it in}."""
    dtypes = {}
    for path in weight_files(model_dir):
        header, _, _ = safetensors_io.read_header(path)
        dtypes.update({name: safetensors_io.DTYPES[info["dtype"]] for name, info in header.items()})
    return dtypes


def forward_as_stored(model, tokens, dtypes):
    """model(tokens) with every parameter rounded to its dtype in `dtypes` (what
    save_checkpoint writes, so what the engine serves), the gradient passed
    straight through to the unrounded master weights. Trained on its master
    weights alone, an fp32 model scores the engine's bf16 samples with other
    weights than sampled them: the mismatch then grows with every step."""
    rounded = {}
    for name, p in model.named_parameters():
        dtype = dtypes.get(name, p.dtype)
        rounded[name] = p if dtype == p.dtype else p + (p.detach().to(dtype).to(p.dtype) - p.detach())
    return functional_call(model, rounded, (tokens,))


def save_checkpoint(model, src_dir, out_dir, dtype=None):
    """Writes out_dir/config.json and generation_config.json (copied from src_dir),
    out_dir/model.safetensors holding the model's weights under exactly
    src_dir's tensor names, shapes and dtypes (each tensor cast to the dtype
    src_dir stores it in; `dtype`, if given, must be that dtype for all), and
    out_dir/manifest.json: each tensor's dtype, shape, bytes and sha256. The
    engine refuses a checkpoint whose layout differs from the one it serves,
    or whose bytes differ from its manifest."""
    src_header, metadata = {}, {"format": "pt"}
    for path in weight_files(src_dir):
        header, file_metadata, _ = safetensors_io.read_header(path)
        metadata = file_metadata or metadata
        src_header.update(header)
    state = model.state_dict()
    out = {}
    for name, info in src_header.items():
        if name not in state:
            raise ValueError(f"save_checkpoint: tensor {name} of {src_dir} is not in the model")
        if list(state[name].shape) != info["shape"]:
            raise ValueError(f"save_checkpoint: tensor {name}: model shape {list(state[name].shape)}, "
                             f"{src_dir} has {info['shape']}")
        stored = safetensors_io.DTYPES[info["dtype"]]
        if dtype is not None and dtype != stored:
            raise ValueError(f"save_checkpoint: tensor {name}: {src_dir} stores {info['dtype']}, asked for {dtype}")
        out[name] = state[name].to(stored)
    if set(state) - set(src_header):
        raise ValueError(f"save_checkpoint: model tensors not in {src_dir}: {sorted(set(state) - set(src_header))[:5]}")
    os.makedirs(out_dir, exist_ok=True)
    for name in ("config.json", "generation_config.json"):
        if os.path.exists(os.path.join(src_dir, name)):
            shutil.copyfile(os.path.join(src_dir, name), os.path.join(out_dir, name))
    manifest = safetensors_io.save(os.path.join(out_dir, "model.safetensors"), out, metadata)
    with open(os.path.join(out_dir, MANIFEST), "w") as f:
        json.dump({"tensors": manifest}, f)
