"""GLACanon: gated linear attention (Yang et al., 2024) with Canon layers, written by canonlab from the format's
definition (docs/huggingface.md). Tensor names follow PhysicsLM4's GLACanon (fla's GLA layer inside fla's block).

The mixer `attn`, on h (B, T, C), with H heads of key width K = int(C * expand_k) / H and value width
V = int(C * expand_v) / H:
    q, k, v = silu(short_conv(proj(h)))   (silu(proj(h)) without use_short_conv)
    q, k    = feature_map(q), feature_map(k)
    g       = logsigmoid(gk_proj(h)) / 16, at least clamp_min           per key channel, in (-inf, 0)
    S_t     = diag(exp(g_t)) S_{t-1} + k_t v_t^T                         S (K, V) per head
    o_t     = K^-1/2 q_t^T S_t
    out     = o_proj(rmsnorm_per_head(o) * silu(g_proj(h)))              (no gate without use_output_gate)
The recurrence runs step by step: exact and simple, linear in T, not fast.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from transformers import GenerationMixin, PreTrainedModel

from .canonlab_hf_layers import (CanonBackboneMixin, CausalLMMixin, FlaCanonBlock, RMSNorm, check_fla_config,
                                 init_common, project_qkv, qkv_projections, require)
from .configuration_gla_canon import GLACanonConfig

# fla's GatedLinearAttention defaults, which GLACanon's block does not override.
GATE_LOW_RANK_DIM = 16
GATE_LOGIT_NORMALIZER = 16

FEATURE_MAPS = {None: lambda t: t, "relu": F.relu, "swish": F.silu, "silu": F.silu}


def check_config(config) -> None:
    # GLACanon's Canon-B stops at `assert False`: the format has none.
    check_fla_config(config, "AbCD")
    require(config.num_kv_heads in (None, config.num_heads), config, "num_kv_heads", "null or num_heads")
    require(config.use_gk, config, "use_gk", "true")
    require(not config.use_gv, config, "use_gv", "false")
    require(config.elementwise_affine, config, "elementwise_affine", "true")
    require(config.feature_map in FEATURE_MAPS, config, "feature_map", "null, relu, swish (or silu)")
    heads = config.num_heads
    for key in ("expand_k", "expand_v"):
        width = int(config.hidden_size * getattr(config, key))
        require(width > 0 and width % heads == 0, config, key, f"a width int(hidden_size * {key}) divisible by num_heads")


class GLACanonAttention(nn.Module):
    def __init__(self, config: GLACanonConfig):
        super().__init__()
        C, H = config.hidden_size, config.num_heads
        self.heads = H
        self.key_dim, self.value_dim = int(C * config.expand_k), int(C * config.expand_v)
        self.feature_map = FEATURE_MAPS[config.feature_map]
        self.clamp_min = config.clamp_min
        qkv_projections(self, config)
        self.gk_proj = nn.Sequential(nn.Linear(C, GATE_LOW_RANK_DIM, bias=False),
                                     nn.Linear(GATE_LOW_RANK_DIM, self.key_dim, bias=True))
        V = self.value_dim // H
        if config.use_output_gate:
            self.g_proj = nn.Linear(C, self.value_dim, bias=False)
            self.g_norm_swish_gate = RMSNorm(V, config.norm_eps)  # fla fuses the norm with the gate: hence the name
        else:
            self.g_norm = RMSNorm(V, config.norm_eps)
        self.o_proj = nn.Linear(self.value_dim, C, bias=False)

    def forward(self, h: torch.Tensor) -> torch.Tensor:  # h (B, T, C) -> (B, T, C)
        B, T, _ = h.shape
        H = self.heads
        K, V = self.key_dim // H, self.value_dim // H
        q, k, v = project_qkv(self, h)
        q, k = self.feature_map(q), self.feature_map(k)
        g = F.logsigmoid(self.gk_proj(h)) / GATE_LOGIT_NORMALIZER  # (B, T, Kd): the log forget gate
        if self.clamp_min is not None:
            g = g.clamp_min(self.clamp_min)
        dtype = h.dtype
        q, k, g = (t.float().view(B, T, H, K) for t in (q, k, g))
        v = v.float().view(B, T, H, V)
        S = h.new_zeros(B, H, K, V, dtype=torch.float32)
        outs = []
        for t in range(T):
            S = g[:, t].exp()[..., None] * S + k[:, t, :, :, None] * v[:, t, :, None, :]  # (B, H, K, V)
            outs.append(K ** -0.5 * (q[:, t, :, :, None] * S).sum(-2))  # (B, H, V)
        o = torch.stack(outs, 1).to(dtype)  # (B, T, H, V)
        if hasattr(self, "g_proj"):
            o = self.g_norm_swish_gate(o).reshape(B, T, -1) * F.silu(self.g_proj(h))
        else:
            o = self.g_norm(o).reshape(B, T, -1)
        return self.o_proj(o)


class GLACanonPreTrainedModel(PreTrainedModel):
    config_class = GLACanonConfig
    base_model_prefix = "model"
    _no_split_modules = ["FlaCanonBlock"]

    def _init_weights(self, module):
        init_common(module, self.config.initializer_range)


class GLACanonModel(CanonBackboneMixin, GLACanonPreTrainedModel):
    _embedding_attr, _final_norm_attr = "embeddings", "norm"

    def __init__(self, config: GLACanonConfig):
        super().__init__(config)
        check_config(config)
        # GLACanon's MLP stores gate and up as one gate_proj (2I, d), the gate first.
        self.init_backbone(config, lambda: FlaCanonBlock(config, GLACanonAttention(config), "gate_proj"),
                           config.norm_eps)


class GLACanonForCausalLM(CausalLMMixin, GLACanonPreTrainedModel, GenerationMixin):
    def __init__(self, config: GLACanonConfig):
        super().__init__(config)
        self.init_causal_lm(config, GLACanonModel(config))  # tied: the logits use model.embeddings.weight
