"""Mamba2Canon: Mamba2's SSD layer (Dao & Gu, 2024) with Canon layers and an optional MLP, written by canonlab from the
format's definition (docs/huggingface.md). Tensor names follow PhysicsLM4's Mamba2Canon (Hugging Face's Mamba2 names).

Block i, on x (B, T, C):   x = x + mixer(canonA(norm(x)));   with mlp_type mlp10 also
                           x = x + mlp(canonC(pre_mlp_layernorm(x)))   (gated MLP on both_proj, Canon-D before SiLU)
The mixer, with Di = expand * C inner channels in H heads of P = head_dim, N = state_size, G = n_groups:
    z, xBC, dt = split(canonB(in_proj(h)))           widths Di, Di + 2GN, H  (canonB if "B" in canon_set)
    xBC        = silu(conv1d(xBC))                    the identity when noconv1d
    x, Bm, Cm  = split(xBC)                           head j reads group j // (H / G) of Bm and Cm
    dt         = clamp(softplus(dt + dt_bias), time_step_limit),  A = -exp(A_log)    per head
    s_t        = exp(dt_t A) s_{t-1} + dt_t x_t Bm_t^T              s (P, N) per head
    y_t        = s_t Cm_t + D x_t
    out        = out_proj(rmsnorm(y * silu(z)))      the gated norm spans all Di channels
The recurrence runs step by step: exact and simple, linear in T, not fast.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from transformers import GenerationMixin, PreTrainedModel

from .canonlab_hf_layers import (CanonBackboneMixin, CausalConv, CausalLMMixin, GatedMLP, RMSNorm, add_canons,
                                 check_canon_set, init_common, init_constant, init_copy, log_uniform, maybe_canon,
                                 prenorm_residual, require, softplus_inverse)
from .configuration_mamba2_canon import Mamba2CanonConfig


def check_config(config) -> None:
    check_canon_set(config, "AbBCD")
    inner = config.expand * config.hidden_size
    require(config.num_heads * config.head_dim == inner, config, "num_heads",
            f"num_heads * head_dim = expand * hidden_size ({inner})")
    require(config.n_groups > 0 and config.num_heads % config.n_groups == 0, config, "n_groups",
            "a divisor of num_heads")
    require(config.hidden_act in ("silu", "swish"), config, "hidden_act", "silu")
    require(config.rms_norm, config, "rms_norm", "true")
    require(config.mlp_type in (None, "mlp10"), config, "mlp_type", "null or mlp10")
    if config.mlp_type is None:
        require(not set(config.canon_set or "") & set("CD"), config, "canon_set",
                "letters of A, b, B without an MLP (Canon-C and -D sit in the MLP; mlp_type null)")


class Mamba2CanonMixer(nn.Module):
    def __init__(self, config: Mamba2CanonConfig):
        super().__init__()
        C = config.hidden_size
        self.inner = config.expand * C
        self.heads, self.head_dim = config.num_heads, config.head_dim
        self.state, self.groups = config.state_size, config.n_groups
        self.noconv1d = config.noconv1d
        self.dt_min, self.dt_max = (float(v) for v in config.time_step_limit)
        conv_dim = self.inner + 2 * self.groups * self.state  # x, B and C
        proj_dim = self.inner + conv_dim + self.heads  # z, x, B, C, dt
        self.in_proj = nn.Linear(C, proj_dim, bias=config.use_bias)
        add_canons(self, "B", proj_dim, config)  # over the whole in_proj output
        # Present under noconv1d too (the file holds its weight), where forward does not use it.
        self.conv1d = CausalConv(conv_dim, config.conv_kernel, bias=config.use_conv_bias)
        self.dt_bias = nn.Parameter(torch.zeros(self.heads))
        self.A_log = nn.Parameter(torch.zeros(self.heads))
        self.D = nn.Parameter(torch.ones(self.heads))
        self.norm = RMSNorm(self.inner, config.layer_norm_epsilon)
        self.out_proj = nn.Linear(self.inner, C, bias=config.use_bias)

    def forward(self, h: torch.Tensor) -> torch.Tensor:  # h (B, T, C) -> (B, T, C)
        B, T, _ = h.shape
        H, P, N, G = self.heads, self.head_dim, self.state, self.groups
        zxbcdt = self.in_proj(h)
        if hasattr(self, "canonB"):
            zxbcdt = self.canonB(zxbcdt)
        z, xbc, dt = zxbcdt.split([self.inner, self.inner + 2 * G * N, H], -1)
        if not self.noconv1d:
            xbc = F.silu(self.conv1d(xbc))
        x, Bm, Cm = xbc.split([self.inner, G * N, G * N], -1)
        dtype = h.dtype
        x = x.float().view(B, T, H, P)
        Bm = Bm.float().view(B, T, G, N).repeat_interleave(H // G, dim=2)  # (B, T, H, N)
        Cm = Cm.float().view(B, T, G, N).repeat_interleave(H // G, dim=2)
        dt = F.softplus(dt.float() + self.dt_bias.float()).clamp(self.dt_min, self.dt_max)  # (B, T, H)
        A = -self.A_log.float().exp()  # (H)
        s = h.new_zeros(B, H, P, N, dtype=torch.float32)
        ys = []
        for t in range(T):
            decay = (dt[:, t] * A).exp()[:, :, None, None]  # (B, H, 1, 1)
            s = decay * s + (dt[:, t, :, None] * x[:, t])[..., None] * Bm[:, t, :, None, :]  # (B, H, P, N)
            ys.append((s * Cm[:, t, :, None, :]).sum(-1) + self.D.float()[:, None] * x[:, t])  # (B, H, P)
        y = torch.stack(ys, 1).reshape(B, T, self.inner).to(dtype)
        return self.out_proj(self.norm(y * F.silu(z)))


class Mamba2CanonBlock(nn.Module):
    def __init__(self, config: Mamba2CanonConfig):
        super().__init__()
        C = config.hidden_size
        self.residual_in_fp32 = config.residual_in_fp32
        self.norm = RMSNorm(C, config.layer_norm_epsilon)
        self.mixer = Mamba2CanonMixer(config)
        if config.mlp_type == "mlp10":
            inter = config.intermediate_size or 2 * C
            self.pre_mlp_layernorm = RMSNorm(C, config.layer_norm_epsilon)
            self.mlp = GatedMLP(C, inter, "both_proj", maybe_canon("D", 2 * inter, config))
        add_canons(self, "AC", C, config)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.residual_in_fp32:  # Hugging Face's Mamba2: the residual stream in float32 (a no-op for fp32 models)
            x = x.float()
        x = prenorm_residual(x, self.norm, getattr(self, "canonA", None), self.mixer)
        if hasattr(self, "mlp"):
            x = prenorm_residual(x, self.pre_mlp_layernorm, getattr(self, "canonC", None), self.mlp)
        return x


class Mamba2CanonPreTrainedModel(PreTrainedModel):
    config_class = Mamba2CanonConfig
    base_model_prefix = "backbone"
    _no_split_modules = ["Mamba2CanonBlock"]

    def _init_weights(self, module):
        init_common(module, self.config.initializer_range)
        if isinstance(module, Mamba2CanonMixer):
            c = self.config
            H = module.heads
            init_copy(module.A_log, torch.arange(1, H + 1, dtype=torch.float32).log())  # A = -1 .. -H
            init_constant(module.D, 1.0)
            init_copy(module.dt_bias, softplus_inverse(log_uniform(H, c.time_step_min, c.time_step_max,
                                                                   c.time_step_floor)))
            if module.noconv1d:
                init_constant(module.conv1d.weight, 0.0)  # unused; the format stores zeros


class Mamba2CanonModel(CanonBackboneMixin, Mamba2CanonPreTrainedModel):
    _embedding_attr, _final_norm_attr = "embeddings", "norm_f"

    def __init__(self, config: Mamba2CanonConfig):
        super().__init__(config)
        check_config(config)
        self.init_backbone(config, lambda: Mamba2CanonBlock(config), config.layer_norm_epsilon)


class Mamba2CanonForCausalLM(CausalLMMixin, Mamba2CanonPreTrainedModel, GenerationMixin):
    def __init__(self, config: Mamba2CanonConfig):
        super().__init__(config)
        self.init_causal_lm(config, Mamba2CanonModel(config))  # tied: the logits use backbone.embeddings.weight
