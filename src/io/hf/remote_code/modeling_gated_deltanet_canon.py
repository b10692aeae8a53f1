"""GatedDeltaNetCanon: the gated delta rule (Yang et al., 2025) with Canon layers, written by canonlab from the format's
definition (docs/huggingface.md). Tensor names follow PhysicsLM4's GatedDeltaNetCanon (fla's layer and block).

The mixer `attn`, on h (B, T, C), with H heads of key width K = head_dim and value width V = K * expand_v:
    q, k, v = silu(short_conv(proj(h)))     (silu(proj(h)) without use_short_conv)
    q, k, v = split(canonB(concat[q, k, v]))                  if "B" in canon_set
    q, k    = q / |q|, k / |k|              per head (fla's l2norm, eps 1e-6 under the root)
    beta    = sigmoid(b_proj(h)),  g = -exp(A_log) * softplus(a_proj(h) + dt_bias)     per head
    S      <- exp(g_t) S;  S <- S + k_t (beta_t (v_t - S^T k_t))^T                      S (K, V) per head
    o_t     = K^-1/2 S^T q_t
    out     = o_proj(rmsnorm_per_head(o) * silu(g_proj(h)))    (no gate without use_gate)
The recurrence runs step by step: exact and simple, linear in T, not fast.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from transformers import GenerationMixin, PreTrainedModel

from .canonlab_hf_layers import (CanonBackboneMixin, CausalLMMixin, FlaCanonBlock, RMSNorm, add_canons,
                                 check_fla_config, init_common, init_copy, log_uniform, project_qkv, qkv_projections,
                                 require, softplus_inverse)
from .configuration_gated_deltanet_canon import GatedDeltaNetCanonConfig


def check_config(config) -> None:
    check_fla_config(config, "AbBCD")
    require(float(config.expand_v) == int(config.expand_v) and config.expand_v > 0, config, "expand_v",
            "a whole number (value width = key width * expand_v)")


def l2_normalize(t: torch.Tensor) -> torch.Tensor:
    return t * torch.rsqrt(t.pow(2).sum(-1, keepdim=True) + 1e-6)


class GatedDeltaNetCanonAttention(nn.Module):
    def __init__(self, config: GatedDeltaNetCanonConfig):
        super().__init__()
        C, H = config.hidden_size, config.num_heads
        self.heads = H
        self.key_dim = H * config.head_dim
        self.value_dim = self.key_dim * int(config.expand_v)
        qkv_projections(self, config)
        add_canons(self, "B", 2 * self.key_dim + self.value_dim, config)  # over concat[q, k, v]
        self.b_proj = nn.Linear(C, H, bias=False)
        self.a_proj = nn.Linear(C, H, bias=False)
        self.A_log = nn.Parameter(torch.zeros(H))
        self.dt_bias = nn.Parameter(torch.zeros(H))
        if config.use_gate:
            self.g_proj = nn.Linear(C, self.value_dim, bias=False)
        self.o_norm = RMSNorm(self.value_dim // H, config.norm_eps)
        self.o_proj = nn.Linear(self.value_dim, C, bias=False)

    def forward(self, h: torch.Tensor) -> torch.Tensor:  # h (B, T, C) -> (B, T, C)
        B, T, _ = h.shape
        H = self.heads
        K, V = self.key_dim // H, self.value_dim // H
        q, k, v = project_qkv(self, h)
        if hasattr(self, "canonB"):
            q, k, v = self.canonB(torch.cat([q, k, v], -1)).split([self.key_dim, self.key_dim, self.value_dim], -1)
        dtype = h.dtype
        q = l2_normalize(q.float().view(B, T, H, K))
        k = l2_normalize(k.float().view(B, T, H, K))
        v = v.float().view(B, T, H, V)
        beta = torch.sigmoid(self.b_proj(h).float())  # (B, T, H)
        g = -self.A_log.float().exp() * F.softplus(self.a_proj(h).float() + self.dt_bias.float())  # (B, T, H), < 0
        S = h.new_zeros(B, H, K, V, dtype=torch.float32)
        outs = []
        for t in range(T):
            S = g[:, t].exp()[:, :, None, None] * S
            kt = k[:, t]  # (B, H, K)
            u = beta[:, t, :, None] * (v[:, t] - (kt[..., None] * S).sum(-2))  # (B, H, V): the corrected value
            S = S + kt[..., None] * u[:, :, None, :]
            outs.append(K ** -0.5 * (q[:, t, :, :, None] * S).sum(-2))  # (B, H, V)
        o = self.o_norm(torch.stack(outs, 1).to(dtype)).reshape(B, T, -1)  # norm per head, (B, T, Vd)
        if hasattr(self, "g_proj"):
            o = o * F.silu(self.g_proj(h))
        return self.o_proj(o)


class GatedDeltaNetCanonPreTrainedModel(PreTrainedModel):
    config_class = GatedDeltaNetCanonConfig
    base_model_prefix = "model"
    _no_split_modules = ["FlaCanonBlock"]

    def _init_weights(self, module):
        init_common(module, self.config.initializer_range)
        if isinstance(module, GatedDeltaNetCanonAttention):
            # fla's initialisation: A uniform in [1, 16], dt log-uniform in [0.001, 0.1]
            H = module.heads
            init_copy(module.A_log, torch.empty(H).uniform_(1, 16).log())
            init_copy(module.dt_bias, softplus_inverse(log_uniform(H, 0.001, 0.1, 1e-4)))


class GatedDeltaNetCanonModel(CanonBackboneMixin, GatedDeltaNetCanonPreTrainedModel):
    _embedding_attr, _final_norm_attr = "embeddings", "norm"

    def __init__(self, config: GatedDeltaNetCanonConfig):
        super().__init__(config)
        check_config(config)
        # The MLP keeps gate_proj and up_proj apart, except with Canon-D, where they are one both_proj.
        layout = "both_proj" if "D" in (config.canon_set or "") else "separate"
        self.init_backbone(config, lambda: FlaCanonBlock(config, GatedDeltaNetCanonAttention(config), layout),
                           config.norm_eps)


class GatedDeltaNetCanonForCausalLM(CausalLMMixin, GatedDeltaNetCanonPreTrainedModel, GenerationMixin):
    def __init__(self, config: GatedDeltaNetCanonConfig):
        super().__init__(config)
        self.init_causal_lm(config, GatedDeltaNetCanonModel(config))  # tied: the logits use model.embeddings.weight
