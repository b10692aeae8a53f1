"""PhysicsLM4's linear-family Hugging Face formats (GLACanon, GatedDeltaNetCanon, Mamba2Canon), written here from
their definitions (lingua_modified/huggingface/modeling_*_canon.py; fla and mamba_ssm are not installed, so their
kernels are replaced by the naive per-step recurrences they compute), for test_hf.py:

  - hf_linear_names(model_type, canonlab_names, canon_set, ...) -> {their name: [our names]}: docs/huggingface.md's
    tables, fused MLP matrices included; an empty list is Mamba2Canon's noconv1d placeholder (zeros);
  - linear_forward(folder, tokens) -> logits of the exported folder, float64.
"""
from __future__ import annotations

import json
import os

import torch
import torch.nn.functional as F
from safetensors.torch import load_file

COMMON = {"attn_norm.weight": "attn_norm.weight", "canon_a.weight": "canonA.weight",
          "mlp_norm.weight": "mlp_norm.weight", "canon_c.weight": "canonC.weight",
          "mlp.canon_d.weight": "mlp.canonD.weight", "mlp.down_proj.weight": "mlp.down_proj.weight"}
QKV = {f"mixer.{a}_{b}.weight": f"attn.{a}_{c}.weight" for a in "qkv" for b, c in (("proj", "proj"), ("conv", "conv1d"))}
GLA = {**COMMON, **QKV, "mixer.gk_down.weight": "attn.gk_proj.0.weight", "mixer.gk_up.weight": "attn.gk_proj.1.weight",
       "mixer.gk_up.bias": "attn.gk_proj.1.bias", "mixer.g_proj.weight": "attn.g_proj.weight",
       "mixer.o_proj.weight": "attn.o_proj.weight"}
GDN = {**COMMON, **QKV, **{f"mixer.{n}": f"attn.{n}" for n in ("canon_b.weight", "b_proj.weight", "a_proj.weight", "A_log",
                                                                 "dt_bias", "g_proj.weight", "o_norm.weight", "o_proj.weight")}}
GDN["mixer.canon_b.weight"] = "attn.canonB.weight"
MAMBA2 = {"attn_norm.weight": "norm.weight", "canon_a.weight": "canonA.weight", "mixer.canon_b.weight": "mixer.canonB.weight",
          "mlp_norm.weight": "pre_mlp_layernorm.weight", "canon_c.weight": "canonC.weight",
          "mlp.canon_d.weight": "mlp.canonD.weight", "mlp.down_proj.weight": "mlp.down_proj.weight",
          **{f"mixer.{n}": f"mixer.{n}" for n in ("in_proj.weight", "conv1d.weight", "conv1d.bias", "dt_bias", "A_log", "D",
                                                   "norm.weight", "out_proj.weight")}}


def hf_linear_names(model_type: str, ours: list, canon_set: str, output_gate: bool = True) -> dict:
    """Their tensor name -> the canonlab parameters it holds (concatenated along dim 0; [] = zeros)."""
    mamba = model_type == "Mamba2Canon"
    root = "backbone" if mamba else "model"
    table = {"GLACanon": GLA, "GatedDeltaNetCanon": GDN, "Mamba2Canon": MAMBA2}[model_type]
    fused = {"GLACanon": "mlp.gate_proj.weight", "Mamba2Canon": "mlp.both_proj.weight"}.get(model_type)
    if model_type == "GatedDeltaNetCanon" and "D" in canon_set:
        fused = "mlp.both_proj.weight"
    out = {}
    for n in ours:
        if n == "tok_emb.weight":
            out[f"{root}.embeddings.weight"] = [n]
            continue
        if n == "final_norm.weight":
            out[f"{root}.norm_f.weight" if mamba else f"{root}.norm.weight"] = [n]
            continue
        if n == "lm_head.weight":
            out[n] = [n]
            continue
        _, i, rest = n.split(".", 2)
        p = f"{root}.layers.{i}."
        if fused and rest == "mlp.gate_proj.weight":
            out[p + fused] = [n, f"layers.{i}.mlp.up_proj.weight"]
        elif fused and rest == "mlp.up_proj.weight":
            continue
        elif model_type == "GatedDeltaNetCanon" and rest in ("mlp.gate_proj.weight", "mlp.up_proj.weight"):
            out[p + rest] = [n]
        elif model_type == "GLACanon" and rest == "mixer.o_norm.weight":
            out[p + ("attn.g_norm_swish_gate.weight" if output_gate else "attn.g_norm.weight")] = [n]
        else:
            out[p + table[rest]] = [n]
        if mamba and rest == "mixer.in_proj.weight" and "b" not in canon_set:
            out[p + "mixer.conv1d.weight"] = []
    return out


def _conv(x, w, bias=None):  # causal depthwise: x (B, T, C), w (C, 1, K)
    K = w.shape[-1]
    return F.conv1d(x.transpose(1, 2), w, bias, padding=K - 1, groups=w.shape[0])[..., : x.shape[1]].transpose(1, 2)


def _rms(x, w, eps):  # over the last dim
    return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))


def linear_forward(folder: str, tokens: torch.Tensor) -> torch.Tensor:
    """Logits of an exported GLACanon / GatedDeltaNetCanon / Mamba2Canon folder, in float64, following the format's
    modules: pre-norm blocks; create_canon = depthwise causal conv (SiLU if canon_activation) + input if
    canon_residual; Canon-b = q/k/v_conv1d + SiLU (GLA, GDN) or conv1d + bias + SiLU over xBC (Mamba2; identity
    kernel [0..0, 1] without bias or SiLU when noconv1d); MLP down(silu(gate) * up) with the fused matrix's first
    half as gate."""
    with open(os.path.join(folder, "config.json")) as f:
        c = json.load(f)
    w = {k: v.double() for k, v in load_file(os.path.join(folder, "model.safetensors")).items()}
    mt, cs = c["model_type"], c["canon_set"]
    mamba = mt == "Mamba2Canon"
    eps = c["layer_norm_epsilon"] if mamba else c["norm_eps"]
    root = "backbone" if mamba else "model"

    def canon(x, name):
        y = _conv(x, w[name])
        if c["canon_activation"]:
            y = F.silu(y)
        return x + y if c["canon_residual"] else y

    def lin(x, name):
        return F.linear(x, w[name + ".weight"], w.get(name + ".bias"))

    Bn, T = tokens.shape
    x = w[f"{root}.embeddings.weight"][tokens]
    for i in range(c["num_hidden_layers"]):
        p = f"{root}.layers.{i}."
        h = _rms(x, w[p + ("norm.weight" if mamba else "attn_norm.weight")], eps)
        if "A" in cs:
            h = canon(h, p + "canonA.weight")
        x = x + (_mamba2_mixer(c, w, p + "mixer.", h, canon) if mamba else _qkv_mixer(c, w, p + "attn.", h, canon, lin))
        if mamba and c.get("mlp_type") is None:
            continue
        h = _rms(x, w[p + ("pre_mlp_layernorm.weight" if mamba else "mlp_norm.weight")], eps)
        if "C" in cs:
            h = canon(h, p + "canonC.weight")
        if p + "mlp.up_proj.weight" in w:
            g, u = lin(h, p + "mlp.gate_proj"), lin(h, p + "mlp.up_proj")
        else:
            y = lin(h, p + ("mlp.gate_proj" if mt == "GLACanon" else "mlp.both_proj"))
            if "D" in cs:
                y = canon(y, p + "mlp.canonD.weight")
            g, u = y.chunk(2, -1)
        x = x + lin(F.silu(g) * u, p + "mlp.down_proj")
    x = _rms(x, w[f"{root}.norm_f.weight" if mamba else f"{root}.norm.weight"], eps)
    head = w[f"{root}.embeddings.weight"] if c["tie_word_embeddings"] else w["lm_head.weight"]
    return x @ head.t()


def _qkv_mixer(c, w, a, x, canon, lin):
    """GatedCanonLinearAttention (GLACanon) or GatedDeltaNetCanon on x (B, T, d)."""
    gla = c["model_type"] == "GLACanon"
    Bn, T, d = x.shape
    H = c["num_heads"]
    q, k, v = lin(x, a + "q_proj"), lin(x, a + "k_proj"), lin(x, a + "v_proj")
    if c["use_short_conv"]:
        q, k, v = (F.silu(_conv(t, w[a + n + "_conv1d.weight"])) for t, n in ((q, "q"), (k, "k"), (v, "v")))
    else:
        q, k, v = F.silu(q), F.silu(k), F.silu(v)
    Kd, Vd = q.shape[-1], v.shape[-1]
    if "B" in c["canon_set"]:
        q, k, v = canon(torch.cat([q, k, v], -1), a + "canonB.weight").split([Kd, Kd, Vd], -1)
    K, V = Kd // H, Vd // H
    S = x.new_zeros(Bn, H, K, V)
    outs = []
    if gla:
        fm = {None: lambda t: t, "relu": F.relu, "swish": F.silu}[c["feature_map"]]
        q, k = fm(q), fm(k)
        gk = F.logsigmoid(lin(lin(x, a + "gk_proj.0"), a + "gk_proj.1")) / 16  # layer defaults: rank 16, normalizer 16
        if c["clamp_min"] is not None:
            gk = gk.clamp_min(c["clamp_min"])
        q, k, gk = (t.view(Bn, T, H, K) for t in (q, k, gk))
        v = v.view(Bn, T, H, V)
        for t in range(T):
            S = torch.exp(gk[:, t])[..., None] * S + k[:, t, :, :, None] * v[:, t, :, None, :]
            outs.append(K ** -0.5 * (S * q[:, t, :, :, None]).sum(-2))
    else:
        def l2(t):  # fla's use_qk_l2norm_in_kernel, eps 1e-6
            return t * torch.rsqrt(t.pow(2).sum(-1, keepdim=True) + 1e-6)
        q, k = l2(q.view(Bn, T, H, K)), l2(k.view(Bn, T, H, K))
        v = v.view(Bn, T, H, V)
        beta = torch.sigmoid(lin(x, a + "b_proj"))
        g = -torch.exp(w[a + "A_log"]) * F.softplus(lin(x, a + "a_proj") + w[a + "dt_bias"])
        for t in range(T):
            S = torch.exp(g[:, t])[:, :, None, None] * S
            u = beta[:, t, :, None] * (v[:, t] - (S * k[:, t, :, :, None]).sum(-2))
            S = S + k[:, t, :, :, None] * u[:, :, None, :]
            outs.append(K ** -0.5 * (S * q[:, t, :, :, None]).sum(-2))
    o = torch.stack(outs, 1)  # (B, T, H, V)
    gate = c["use_output_gate"] if gla else c["use_gate"]
    norm = a + ("g_norm_swish_gate.weight" if gla and gate else "g_norm.weight" if gla else "o_norm.weight")
    o = _rms(o, w[norm], c["norm_eps"]).reshape(Bn, T, Vd)
    if gate:
        o = o * F.silu(lin(x, a + "g_proj"))
    return lin(o, a + "o_proj")


def _mamba2_mixer(c, w, a, x, canon):
    """Mamba2CanonMixer on x (B, T, d): in_proj -> [z | xBC | dt], conv1d over xBC, SSD scan, gated RMSNorm over all of
    d_inner (MambaRMSNormGated, norm after the gate), out_proj."""
    Bn, T, d = x.shape
    H, P, N, G = c["num_heads"], c["head_dim"], c["state_size"], c["n_groups"]
    Di = c["expand"] * d
    zxbcdt = F.linear(x, w[a + "in_proj.weight"])
    if "B" in c["canon_set"]:
        zxbcdt = canon(zxbcdt, a + "canonB.weight")
    z, xbc, dt = zxbcdt.split([Di, Di + 2 * G * N, H], -1)
    if c["noconv1d"]:
        ident = torch.zeros_like(w[a + "conv1d.weight"])
        ident[..., -1] = 1.0
        xbc = _conv(xbc, ident)
    else:
        xbc = F.silu(_conv(xbc, w[a + "conv1d.weight"], w.get(a + "conv1d.bias")))
    xs, Bm, Cm = xbc.split([Di, G * N, G * N], -1)
    xs = xs.view(Bn, T, H, P)
    Bm = Bm.view(Bn, T, G, N).repeat_interleave(H // G, 2)
    Cm = Cm.view(Bn, T, G, N).repeat_interleave(H // G, 2)
    dt = F.softplus(dt + w[a + "dt_bias"])
    A = -torch.exp(w[a + "A_log"])
    h = x.new_zeros(Bn, H, P, N)
    ys = []
    for t in range(T):
        h = torch.exp(dt[:, t] * A)[:, :, None, None] * h + (dt[:, t, :, None, None] * xs[:, t, :, :, None]) * Bm[:, t, :, None, :]
        ys.append((h * Cm[:, t, :, None, :]).sum(-1) + w[a + "D"][None, :, None] * xs[:, t])
    y = torch.stack(ys, 1).reshape(Bn, T, Di)
    y = _rms(y * F.silu(z), w[a + "norm.weight"], c["layer_norm_epsilon"])
    return F.linear(y, w[a + "out_proj.weight"])
