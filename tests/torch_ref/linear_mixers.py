"""Independent PyTorch reference of canonlab's linear-time mixers (docs/linear-families.md): Mamba2 (SSD),
Gated Linear Attention, Gated DeltaNet and DeltaNet.

Written plainly from the docs with torch ops. Every recurrence is the NAIVE per-time-step loop (a Python loop
over t, autograd through it): no chunked algorithm, so the reference is independent of the chunking canonlab
uses. Short convolutions are F.conv1d with groups = channels, left padding K-1, first T outputs kept.

The mixers do not import canon_model (no circular import): the caller passes `make_canon(channels)`, which
builds the Canon-B layer with the model.canon options, or None when `B` is not in model.canon.set.
Used by canon_model.Block; parameter names are the ones in the docs (prefix `layers.l.mixer.`).
"""
from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F


# ---------------------------------------------------------------------------------------------------------
# Small pieces
# ---------------------------------------------------------------------------------------------------------
def canon_letters(canon_set: str) -> set:
    """The letters of model.canon.set as a set ('bb' is read as 'b'); letters are case-sensitive."""
    return set(canon_set)


def causal_depthwise_conv(x, weight, bias=None):
    """x: (B, T, C), weight: (C, 1, K), bias: (C) or None -> (B, T, C), y[t] = sum_i w[:, i] x[t-K+1+i] (+ b)."""
    T, C, K = x.shape[1], x.shape[2], weight.shape[-1]
    y = F.conv1d(x.transpose(1, 2), weight, bias, padding=K - 1, groups=C)
    return y[:, :, :T].transpose(1, 2)


class ShortConv(nn.Module):
    """The family's own depthwise causal conv (Canon-b): weight (C, 1, K), optional bias (C). No activation
    here (the mixers apply SiLU themselves)."""

    def __init__(self, channels: int, kernel: int, bias: bool):
        super().__init__()
        if kernel < 1:
            raise ValueError(f"model.recurrent.conv_kernel must be >= 1, got {kernel}")
        self.weight = nn.Parameter(torch.empty(channels, 1, kernel))
        self.bias = nn.Parameter(torch.empty(channels)) if bias else None

    def forward(self, x):
        return causal_depthwise_conv(x, self.weight, self.bias)


class GroupRMSNorm(nn.Module):
    """RMSNorm over groups of `group_size` consecutive channels of the last dim, times `weight`: one weight
    per channel (weight_dim = full width: Mamba2's grouped norm) or one weight shared by every group
    (weight_dim = group_size: the per-head o_norm of GLA and (G)DN)."""

    def __init__(self, weight_dim: int, group_size: int, eps: float):
        super().__init__()
        self.group_size, self.eps = group_size, eps
        self.weight = nn.Parameter(torch.ones(weight_dim))

    def forward(self, x):  # x: (..., W) with W % group_size == 0
        shape = x.shape
        g = x.reshape(*shape[:-1], shape[-1] // self.group_size, self.group_size)
        g = g * torch.rsqrt(g.pow(2).mean(-1, keepdim=True) + self.eps)
        if self.weight.shape[0] == self.group_size:  # one weight shared by every group (per-head o_norm)
            g = g * self.weight
            return g.reshape(shape)
        return g.reshape(shape) * self.weight  # one weight per channel (Mamba2's grouped norm)


def inv_softplus(y):
    """softplus^-1(y) = y + log(1 - exp(-y)) for y > 0."""
    return y + torch.log(-torch.expm1(-y))


# ---------------------------------------------------------------------------------------------------------
# Naive per-step recurrences (all heads and the batch at once, a Python loop over t)
# ---------------------------------------------------------------------------------------------------------
def ssd_naive(x, dt, A, Bm, Cm, D):
    """Mamba2 scan. x: (B, T, H, P), dt: (B, T, H) (after softplus), A: (H) (negative), Bm, Cm: (B, T, H, N)
    (already expanded from groups to heads), D: (H). Per head, state h: (P, N):
        h_t = exp(dt_t A) h_{t-1} + dt_t x_t B_t^T;   y_t = h_t C_t + D x_t.       Returns y: (B, T, H, P)."""
    Bsz, T, H, P = x.shape
    N = Bm.shape[-1]
    h = x.new_zeros(Bsz, H, P, N)
    ys = []
    for t in range(T):
        dA = torch.exp(dt[:, t] * A)  # (B, H)
        h = dA[:, :, None, None] * h + (dt[:, t, :, None, None] * x[:, t, :, :, None]) * Bm[:, t, :, None, :]
        ys.append((h * Cm[:, t, :, None, :]).sum(-1) + D[None, :, None] * x[:, t])
    return torch.stack(ys, dim=1)


def gla_naive(q, k, v, gk, scale):
    """GLA recurrence. q, k, gk: (B, T, H, K), v: (B, T, H, V). Per head, S: (K, V):
        S_t = diag(exp(gk_t)) S_{t-1} + k_t v_t^T;   o_t = scale * S_t^T q_t.          Returns o: (B, T, H, V)."""
    Bsz, T, H, K = q.shape
    V = v.shape[-1]
    S = q.new_zeros(Bsz, H, K, V)
    os_ = []
    for t in range(T):
        S = torch.exp(gk[:, t])[..., None] * S + k[:, t, :, :, None] * v[:, t, :, None, :]
        os_.append(scale * (S * q[:, t, :, :, None]).sum(-2))
    return torch.stack(os_, dim=1)


def delta_naive(q, k, v, beta, g, scale):
    """(Gated) delta rule. q, k: (B, T, H, K) (already L2-normalised), v: (B, T, H, V), beta, g: (B, T, H)
    (g = log decay, 0 for DeltaNet). Per head, S: (K, V):
        S <- exp(g_t) S;  u = beta_t (v_t - S^T k_t);  S <- S + k_t u^T;  o_t = scale * S^T q_t.
    Returns o: (B, T, H, V)."""
    Bsz, T, H, K = q.shape
    V = v.shape[-1]
    S = q.new_zeros(Bsz, H, K, V)
    os_ = []
    for t in range(T):
        S = torch.exp(g[:, t])[:, :, None, None] * S
        kt = k[:, t]  # (B, H, K)
        pred = (S * kt[..., None]).sum(-2)  # S^T k: (B, H, V)
        u = beta[:, t, :, None] * (v[:, t] - pred)
        S = S + kt[..., None] * u[:, :, None, :]
        os_.append(scale * (S * q[:, t, :, :, None]).sum(-2))
    return torch.stack(os_, dim=1)


# ---------------------------------------------------------------------------------------------------------
# Mixers
# ---------------------------------------------------------------------------------------------------------
class Mamba2Mixer(nn.Module):
    """Mamba2 (SSD) mixer, model.mamba2 options. Parameters: in_proj, canon_b (if B), conv1d (if b), dt_bias,
    A_log, D, norm.weight, out_proj."""

    def __init__(self, cfg: dict, make_canon):
        super().__init__()
        m = cfg["model"]
        mc = m["mamba2"]
        d, H = int(m["d_model"]), int(m["n_heads"])
        letters = canon_letters(m["canon"]["set"])
        self.d_inner = int(mc["expand"]) * d
        self.P = int(mc["headdim"]) or self.d_inner // H
        if self.P <= 0 or self.d_inner % self.P:
            raise ValueError(f"mamba2.headdim {self.P} must divide d_inner {self.d_inner}")
        self.Hm = self.d_inner // self.P
        self.N, self.G = int(mc["d_state"]), int(mc["ngroups"])
        if self.G <= 0 or self.Hm % self.G:
            raise ValueError(f"mamba2.ngroups {self.G} must divide the {self.Hm} Mamba2 heads")
        if self.d_inner % self.G:
            raise ValueError(f"mamba2.ngroups {self.G} must divide d_inner {self.d_inner}")
        self.conv_dim = self.d_inner + 2 * self.G * self.N
        self.d_in_proj = 2 * self.d_inner + 2 * self.G * self.N + self.Hm
        self.in_proj = nn.Linear(d, self.d_in_proj, bias=False)
        self.canon_b = make_canon(self.d_in_proj) if "B" in letters else None
        self.conv1d = ShortConv(self.conv_dim, int(m["recurrent"]["conv_kernel"]), bias=True) if "b" in letters else None
        self.dt_bias = nn.Parameter(torch.zeros(self.Hm))
        self.A_log = nn.Parameter(torch.zeros(self.Hm))
        self.D = nn.Parameter(torch.ones(self.Hm))
        self.norm = GroupRMSNorm(self.d_inner, self.d_inner // self.G, float(m["norm_eps"]))
        self.out_proj = nn.Linear(self.d_inner, d, bias=False)

    def forward(self, u):  # u: (B, T, d)
        Bsz, T, _ = u.shape
        zxbcdt = self.in_proj(u)
        if self.canon_b is not None:
            zxbcdt = self.canon_b(zxbcdt)
        z, xBC, dt_raw = zxbcdt.split([self.d_inner, self.conv_dim, self.Hm], dim=-1)
        if self.conv1d is not None:
            xBC = F.silu(self.conv1d(xBC))  # conv + bias, then SiLU
        x, Bm, Cm = xBC.split([self.d_inner, self.G * self.N, self.G * self.N], dim=-1)
        x = x.reshape(Bsz, T, self.Hm, self.P)
        rep = self.Hm // self.G  # head h uses group h // rep
        Bm = Bm.reshape(Bsz, T, self.G, self.N).repeat_interleave(rep, dim=2)  # (B, T, Hm, N)
        Cm = Cm.reshape(Bsz, T, self.G, self.N).repeat_interleave(rep, dim=2)
        dt = F.softplus(dt_raw + self.dt_bias)  # (B, T, Hm)
        A = -torch.exp(self.A_log)
        y = ssd_naive(x, dt, A, Bm, Cm, self.D).reshape(Bsz, T, self.d_inner)
        y = self.norm(y * F.silu(z))  # gated RMSNorm, groups of d_inner / G channels, norm after the gate
        return self.out_proj(y)


def feature_map(x, kind: str):
    if kind == "none":
        return x
    if kind == "elu_plus_one":
        return F.elu(x) + 1.0
    if kind == "relu":
        return F.relu(x)
    if kind == "silu":
        return F.silu(x)
    raise ValueError(f"unknown gla.feature_map '{kind}'")


class _QKVMixer(nn.Module):
    """Shared by GLA and (Gated) DeltaNet: q/k/v projections, their short convs (b) and Canon-B."""

    def _init_qkv(self, cfg: dict, opts: dict, make_canon, family: str):
        m = cfg["model"]
        d, H = int(m["d_model"]), int(m["n_heads"])
        self.H = H
        self.Kd, self.Vd = int(d * float(opts["expand_k"])), int(d * float(opts["expand_v"]))
        if self.Kd % H or self.Vd % H or self.Kd == 0 or self.Vd == 0:
            raise ValueError(f"{family}: key dim {self.Kd} and value dim {self.Vd} must be multiples of n_heads {H}")
        self.K, self.V = self.Kd // H, self.Vd // H
        letters = canon_letters(m["canon"]["set"])
        self.use_conv = "b" in letters
        self.q_proj = nn.Linear(d, self.Kd, bias=False)
        self.k_proj = nn.Linear(d, self.Kd, bias=False)
        self.v_proj = nn.Linear(d, self.Vd, bias=False)
        if self.use_conv:
            kc = int(m["recurrent"]["conv_kernel"])
            self.q_conv = ShortConv(self.Kd, kc, bias=False)
            self.k_conv = ShortConv(self.Kd, kc, bias=False)
            self.v_conv = ShortConv(self.Vd, kc, bias=False)
        self.canon_b = make_canon(2 * self.Kd + self.Vd) if "B" in letters else None
        self.eps = float(m["norm_eps"])

    def _canon_b(self, q, k, v):
        if self.canon_b is None:
            return q, k, v
        return self.canon_b(torch.cat([q, k, v], dim=-1)).split([self.Kd, self.Kd, self.Vd], dim=-1)

    def _output(self, o, x):  # o: (B, T, H, V) -> (B, T, d)
        Bsz, T = o.shape[:2]
        o = self.o_norm(o)  # RMSNorm over V per head, weight (V) shared by the heads
        o = o.reshape(Bsz, T, self.Vd)
        if self.g_proj is not None:
            o = o * F.silu(self.g_proj(x))
        return self.o_proj(o)


class GLAMixer(_QKVMixer):
    """Gated Linear Attention, model.gla options. Parameters: q_proj, k_proj, v_proj, q_conv/k_conv/v_conv
    (if b), canon_b (if B), gk_down, gk_up (weight, bias), g_proj (if output_gate), o_norm.weight, o_proj."""

    def __init__(self, cfg: dict, make_canon):
        super().__init__()
        m = cfg["model"]
        g = m["gla"]
        d = int(m["d_model"])
        self._init_qkv(cfg, g, make_canon, "gla")
        self.feature_map = g["feature_map"]
        feature_map(torch.zeros(1), self.feature_map)  # validates the name
        self.normalizer = float(g["gate_logit_normalizer"])
        self.clamp_min = float(g["clamp_min"])
        r = int(g["gate_low_rank_dim"])
        self.gk_down = nn.Linear(d, r, bias=False)
        self.gk_up = nn.Linear(r, self.Kd, bias=True)
        self.g_proj = nn.Linear(d, self.Vd, bias=False) if bool(g["output_gate"]) else None
        self.o_norm = GroupRMSNorm(self.V, self.V, self.eps)
        self.o_proj = nn.Linear(self.Vd, d, bias=False)

    def forward(self, x):  # x: (B, T, d)
        Bsz, T, _ = x.shape
        q, k, v = self.q_proj(x), self.k_proj(x), self.v_proj(x)
        if self.use_conv:
            q, k, v = F.silu(self.q_conv(q)), F.silu(self.k_conv(k)), F.silu(self.v_conv(v))
        q, k, v = self._canon_b(q, k, v)
        q, k = feature_map(q, self.feature_map), feature_map(k, self.feature_map)
        gk = F.logsigmoid(self.gk_up(self.gk_down(x))) / self.normalizer
        if self.clamp_min < 0:
            gk = torch.clamp(gk, min=self.clamp_min)
        q, k, gk = (t.reshape(Bsz, T, self.H, self.K) for t in (q, k, gk))
        v = v.reshape(Bsz, T, self.H, self.V)
        o = gla_naive(q, k, v, gk, self.K ** -0.5)
        return self._output(o, x)


def l2norm(x):
    """x / sqrt(sum x^2 + 1e-6) over the last dim (the fla kernel's eps, fixed)."""
    return x * torch.rsqrt(x.pow(2).sum(-1, keepdim=True) + 1e-6)


class DeltaNetMixer(_QKVMixer):
    """Gated DeltaNet (gated=True, letter D) or DeltaNet (gated=False, letter N), model.delta options.
    Parameters: q_proj, k_proj, v_proj, q_conv/k_conv/v_conv (if b), canon_b (if B), b_proj, a_proj, A_log,
    dt_bias (GDN only), g_proj (if output_gate), o_norm.weight, o_proj."""

    def __init__(self, cfg: dict, make_canon, gated: bool):
        super().__init__()
        m = cfg["model"]
        o = m["delta"]
        d = int(m["d_model"])
        self.gated = gated
        self._init_qkv(cfg, o, make_canon, "gdn" if gated else "deltanet")
        self.b_proj = nn.Linear(d, self.H, bias=False)
        if gated:
            self.a_proj = nn.Linear(d, self.H, bias=False)
            self.A_log = nn.Parameter(torch.zeros(self.H))
            self.dt_bias = nn.Parameter(torch.zeros(self.H))
        self.allow_neg_eigval = bool(o["allow_neg_eigval"])
        self.g_proj = nn.Linear(d, self.Vd, bias=False) if bool(o["output_gate"]) else None
        self.o_norm = GroupRMSNorm(self.V, self.V, self.eps)
        self.o_proj = nn.Linear(self.Vd, d, bias=False)

    def forward(self, x):  # x: (B, T, d)
        Bsz, T, _ = x.shape
        q, k, v = self.q_proj(x), self.k_proj(x), self.v_proj(x)
        if self.use_conv:
            q, k, v = F.silu(self.q_conv(q)), F.silu(self.k_conv(k)), F.silu(self.v_conv(v))
        else:
            q, k, v = F.silu(q), F.silu(k), F.silu(v)
        q, k, v = self._canon_b(q, k, v)
        q = l2norm(q.reshape(Bsz, T, self.H, self.K))
        k = l2norm(k.reshape(Bsz, T, self.H, self.K))
        v = v.reshape(Bsz, T, self.H, self.V)
        beta = torch.sigmoid(self.b_proj(x))  # (B, T, H)
        if self.allow_neg_eigval:
            beta = beta * 2.0
        if self.gated:
            g = -torch.exp(self.A_log) * F.softplus(self.a_proj(x) + self.dt_bias)
        else:
            g = torch.zeros_like(beta)
        o = delta_naive(q, k, v, beta, g, self.K ** -0.5)
        return self._output(o, x)


MIXER_LETTERS = "MGDN"


def make_mixer(letter: str, cfg: dict, make_canon) -> nn.Module:
    if letter == "M":
        return Mamba2Mixer(cfg, make_canon)
    if letter == "G":
        return GLAMixer(cfg, make_canon)
    if letter == "D":
        return DeltaNetMixer(cfg, make_canon, gated=True)
    if letter == "N":
        return DeltaNetMixer(cfg, make_canon, gated=False)
    raise ValueError(f"unknown mixer letter '{letter}'")


@torch.no_grad()
def init_mixer_param(name: str, p: torch.Tensor, cfg: dict, g: torch.Generator) -> bool:
    """Docs init of the linear-family parameters that are not plain linear weights (name is the full
    parameter name). Returns False when the name is not one of them (the caller then applies its default).
    model.mamba2.init 'mimetic' is not defined in the docs and is not reproduced: only the default init is
    (parity loads canonlab's weights; this init is for self-checks and fakes)."""
    m = cfg["model"]
    std = float(m["init_std"])
    leaf = name.rsplit(".", 1)[-1]
    parent = name.split(".")[-2] if "." in name else ""
    if ".mixer." not in name:
        return False
    mc = m["mamba2"]
    if parent == "conv1d":  # Mamba2 conv: PyTorch Conv1d default U(+-1/sqrt(fan_in)), fan_in = K, weight and bias
        bound = 1.0 / math.sqrt(int(m["recurrent"]["conv_kernel"]))
        p.copy_((torch.rand(p.shape, generator=g, dtype=torch.float64) * 2 - 1).to(p.dtype) * bound)
        return True
    if parent in ("q_conv", "k_conv", "v_conv"):
        p.copy_(torch.randn(p.shape, generator=g) * std)
        return True
    if leaf == "dt_bias":
        lo, hi = math.log(float(mc["dt_min"])), math.log(float(mc["dt_max"]))
        dt = torch.exp(torch.rand(p.shape, generator=g, dtype=torch.float64) * (hi - lo) + lo)
        dt = dt.clamp(min=float(mc["dt_init_floor"]))
        p.copy_(inv_softplus(dt).to(p.dtype))
        return True
    if leaf == "A_log":
        # Mamba2: log U[a_min, a_max]; GDN: log U[0, 16]
        lo, hi = (float(mc["a_min"]), float(mc["a_max"])) if _is_mamba_param(name, cfg) else (0.0, 16.0)
        a = torch.rand(p.shape, generator=g, dtype=torch.float64) * (hi - lo) + lo
        p.copy_(torch.log(a.clamp(min=1e-12)).to(p.dtype))
        return True
    if leaf == "D":
        p.fill_(1.0)
        return True
    if leaf == "bias" and parent == "gk_up":
        p.zero_()
        return True
    return False


def _is_mamba_param(name: str, cfg: dict) -> bool:
    layer = int(name.split(".")[1])
    return layer_letters(cfg)[layer] == "M"


FAMILY_LETTER = {"transformer": "A", "mamba2": "M", "gla": "G", "gdn": "D", "deltanet": "N"}


def layer_letters(cfg: dict) -> str:
    """One letter per layer: the family's letter, or model.layer_pattern for family hybrid."""
    m = cfg["model"]
    fam, L = m["family"], int(m["n_layers"])
    if fam == "hybrid":
        pat = m["layer_pattern"]
        if len(pat) != L:
            raise ValueError(f"model.layer_pattern '{pat}' must have exactly n_layers = {L} letters")
        bad = set(pat) - set("AMGDNS")
        if bad:
            raise ValueError(f"model.layer_pattern letters {sorted(bad)} are not in A M G D N S")
        return pat
    if fam not in FAMILY_LETTER:
        raise ValueError(f"unknown model.family '{fam}'")
    return FAMILY_LETTER[fam] * L
