"""LlamaCanon: a Llama decoder with Canon layers (Physics of Language Models, Part 4.1) and partial RoPE, written by
canonlab from the format's definition (docs/huggingface.md). Tensor names follow PhysicsLM4's LlamaCanon.

Block i, on the residual stream x (B, T, C):
    h = input_layernorm(x);           h = canonA(h)            if "A" in canon_set
    q, k, v = q_proj(h), k_proj(h), v_proj(h)                   (H*D, Hkv*D, Hkv*D wide)
    q, k, v = split(canonB(concat[q, k, v]))                    if "B" in canon_set
    rotate the first rope_dim dims of every q and k head (rotate-half pairs i, i + rope_dim/2)
    x = x + o_proj(causal softmax attention, k/v heads shared by H/Hkv query heads each)
    h = post_attention_layernorm(x);  h = canonC(h)            if "C" in canon_set
    gate, up = gate_proj(h), up_proj(h); gate, up = split(canonD(concat[gate, up]))  if "D" in canon_set
    x = x + down_proj(silu(gate) * up)
Each Canon: depthwise causal conv, SiLU if canon_activation, + its input if canon_residual.
"""
from __future__ import annotations

import math

import torch
from torch import nn
from transformers import GenerationMixin, PreTrainedModel

from .canonlab_hf_layers import (CanonBackboneMixin, CausalLMMixin, GatedMLP, RMSNorm, add_canons, check_canon_set,
                                 init_common, maybe_canon, prenorm_residual, require)
from .configuration_llama_canon import LlamaCanonConfig


def rope_theta(config) -> float:
    """The RoPE base: transformers 4 reads rope_theta, 5 reads rope_parameters["rope_theta"]; a folder may carry both,
    and then they must agree."""
    top = getattr(config, "rope_theta", None)
    params = getattr(config, "rope_parameters", None) or {}
    nested = params.get("rope_theta") if isinstance(params, dict) else None
    if top is not None and nested is not None and float(top) != float(nested):
        raise ValueError(f"{type(config).__name__}: rope_theta = {top} and rope_parameters.rope_theta = {nested} "
                         "disagree")
    theta = nested if nested is not None else top
    return 10000.0 if theta is None else float(theta)


def rope_dims(config, head_dim: int) -> int:
    """How many leading dims of a head rotate: rope_dim (null or 0 = all), else int(head_dim * partial_rotary_factor)."""
    if config.rope_dim:
        r = int(config.rope_dim)
    else:
        params = getattr(config, "rope_parameters", None) or {}
        factor = getattr(config, "partial_rotary_factor", None) or params.get("partial_rotary_factor") or 1.0
        r = int(head_dim * float(factor))
    require(r % 2 == 0 and 0 < r <= head_dim, config, "rope_dim", f"an even number of dims up to head_dim {head_dim}")
    return r


_PLAIN_ROPE_KEYS = {"rope_type", "type", "rope_theta", "partial_rotary_factor"}


def check_config(config) -> None:
    """Everything this code cannot compute as the format defines is refused here, at construction."""
    require(config.hidden_act in ("silu", "swish"), config, "hidden_act", "silu (the SwiGLU MLP)")
    # transformers 4 keeps rope_scaling as given; 5 folds it into rope_parameters (and warns when the old name is read,
    # hence vars()). Either may hold the plain-RoPE entries only.
    for key in ("rope_scaling", "rope_parameters"):
        params = vars(config).get(key) or {}
        plain = isinstance(params, dict) and params.get("rope_type", params.get("type", "default")) == "default"
        require(plain and set(params) <= _PLAIN_ROPE_KEYS, config, key,
                "null or plain RoPE ({rope_type: default, rope_theta, partial_rotary_factor})")
    require(config.rope_version in (None, "huggingface"), config, "rope_version",
            "huggingface (rotate-half pairs; the interleaved lingua layout is not implemented)")
    require(not config.qk_norm, config, "qk_norm", "false")
    check_canon_set(config, "ABCD")
    heads = config.num_attention_heads
    kv_heads = config.num_key_value_heads or heads
    require(heads % kv_heads == 0, config, "num_key_value_heads", f"a divisor of num_attention_heads ({heads})")


class LlamaCanonAttention(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.heads = config.num_attention_heads
        self.kv_heads = config.num_key_value_heads or self.heads
        self.head_dim = config.head_dim or config.hidden_size // self.heads
        self.rope_dim = rope_dims(config, self.head_dim)
        self.theta = rope_theta(config)
        C, D, bias = config.hidden_size, self.head_dim, config.attention_bias
        self.q_proj = nn.Linear(C, self.heads * D, bias=bias)
        self.k_proj = nn.Linear(C, self.kv_heads * D, bias=bias)
        self.v_proj = nn.Linear(C, self.kv_heads * D, bias=bias)
        self.o_proj = nn.Linear(self.heads * D, C, bias=bias)
        add_canons(self, "B", (self.heads + 2 * self.kv_heads) * D, config)  # over concat[q, k, v]

    def rotate(self, x: torch.Tensor) -> torch.Tensor:
        """RoPE on the first rope_dim dims of every head of x (B, heads, T, D): pairs (i, i + r/2) turn by
        position * theta^(-2i/r). The angles are computed in float64, then rounded once."""
        T, r = x.shape[2], self.rope_dim
        inv_freq = self.theta ** (-torch.arange(0, r, 2, dtype=torch.float64, device=x.device) / r)  # (r/2)
        angles = torch.arange(T, dtype=torch.float64, device=x.device)[:, None] * inv_freq[None, :]  # (T, r/2)
        angles = torch.cat([angles, angles], -1)  # (T, r): dim i and i + r/2 share an angle
        cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
        turned, kept = x[..., :r], x[..., r:]
        half = torch.cat([-turned[..., r // 2:], turned[..., : r // 2]], -1)  # rotate_half
        return torch.cat([turned * cos + half * sin, kept], -1)

    def forward(self, h: torch.Tensor) -> torch.Tensor:  # h (B, T, C) -> (B, T, C)
        B, T, _ = h.shape
        D = self.head_dim
        q, k, v = self.q_proj(h), self.k_proj(h), self.v_proj(h)
        canon_b = getattr(self, "canonB", None)
        if canon_b is not None:
            q, k, v = canon_b(torch.cat([q, k, v], -1)).split([self.heads * D, self.kv_heads * D, self.kv_heads * D], -1)
        q = self.rotate(q.view(B, T, self.heads, D).transpose(1, 2))  # (B, H, T, D)
        k = self.rotate(k.view(B, T, self.kv_heads, D).transpose(1, 2))  # (B, Hkv, T, D)
        v = v.view(B, T, self.kv_heads, D).transpose(1, 2)  # (B, Hkv, T, D)
        # Query head j reads key/value head j // (H / Hkv), as Hugging Face's repeat_kv.
        k = k.repeat_interleave(self.heads // self.kv_heads, dim=1)
        v = v.repeat_interleave(self.heads // self.kv_heads, dim=1)
        scores = (q @ k.transpose(-1, -2)).float() / math.sqrt(D)  # (B, H, T, T)
        future = torch.ones(T, T, dtype=torch.bool, device=h.device).triu(1)
        weights = torch.softmax(scores.masked_fill(future, float("-inf")), -1).to(v.dtype)
        out = (weights @ v).transpose(1, 2).reshape(B, T, self.heads * D)
        return self.o_proj(out)


class LlamaCanonDecoderLayer(nn.Module):
    def __init__(self, config):
        super().__init__()
        C = config.hidden_size
        inter = config.intermediate_size or C * 8 // 3
        self.input_layernorm = RMSNorm(C, config.rms_norm_eps)
        self.self_attn = LlamaCanonAttention(config)
        self.post_attention_layernorm = RMSNorm(C, config.rms_norm_eps)
        self.mlp = GatedMLP(C, inter, "separate", maybe_canon("D", 2 * inter, config), bias=config.mlp_bias)
        add_canons(self, "AC", C, config)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = prenorm_residual(x, self.input_layernorm, getattr(self, "canonA", None), self.self_attn)
        return prenorm_residual(x, self.post_attention_layernorm, getattr(self, "canonC", None), self.mlp)


class LlamaCanonPreTrainedModel(PreTrainedModel):
    config_class = LlamaCanonConfig
    base_model_prefix = "model"
    _no_split_modules = ["LlamaCanonDecoderLayer"]

    def _init_weights(self, module):
        init_common(module, self.config.initializer_range)


class LlamaCanonModel(CanonBackboneMixin, LlamaCanonPreTrainedModel):
    _embedding_attr, _final_norm_attr = "embed_tokens", "norm"

    def __init__(self, config: LlamaCanonConfig):
        super().__init__(config)
        check_config(config)
        self.init_backbone(config, lambda: LlamaCanonDecoderLayer(config), config.rms_norm_eps)


class LlamaCanonForCausalLM(CausalLMMixin, LlamaCanonPreTrainedModel, GenerationMixin):
    def __init__(self, config: LlamaCanonConfig):
        super().__init__(config)
        self.init_causal_lm(config, LlamaCanonModel(config))  # tied: the logits use model.embed_tokens.weight
