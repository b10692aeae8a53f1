#!/usr/bin/env python3
"""Self-checks of the PyTorch reference (canon_model.py) against first principles, without canonlab:
explicit-loop Canon conv, RoPE as a rotation, ALiBi slopes, the sign STE's forward and both backward
rules, causality with every feature on, norms against torch's own, double-precision gradcheck, parameter
groups, the LR schedule and AdamW against a hand-written update; for the linear-time families
(linear_mixers.py): the naive Mamba2 and GLA recurrences against their quadratic closed forms, the delta rule
against its matrix form, causality of every family, the sliding-window mask, double-precision gradcheck of
a tiny model of each family, names, parameter groups and config validation.

    python tests/torch_ref/selfcheck_reference.py        # last line: `N passed, M failed`
"""
import math
import os
import sys
import traceback

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import canon_model as cm  # noqa: E402
import linear_mixers as lm  # noqa: E402

SMALL = {"model": {"d_model": 16, "n_heads": 2, "n_layers": 2, "canon": {"set": "ABCD"}},
         "task": {"vocab": 8, "n_symbols": 4}, "train": {"batch_size": 2, "seed": 3}}


def small(**over):
    cfg = cm.deep_merge(SMALL, {"model": over})
    return cm.CanonModel(cfg)


def check_canon_conv_loop():
    torch.manual_seed(0)
    for C, K, G in [(6, 4, 6), (6, 3, 2), (8, 2, 1), (4, 1, 4)]:
        canon = cm.Canon(C, {"kernel_size": K, "groups": G, "activation": "none", "norm": "none",
                             "residual": False}, 1e-5)
        canon.weight.data.normal_()
        x = torch.randn(2, 5, C, dtype=torch.float64)
        w = canon.weight.double()
        want = torch.zeros_like(x)
        cpg = C // G
        for b in range(2):
            for t in range(5):
                for c in range(C):
                    g = c // cpg
                    for j in range(cpg):
                        for i in range(K):
                            tt = t - (K - 1) + i
                            if tt >= 0:
                                want[b, t, c] += w[c, j, i] * x[b, tt, g * cpg + j]
        canon.weight.data = w
        assert torch.allclose(canon(x), want, atol=1e-12), (C, K, G)


def check_rope_rotation():
    torch.manual_seed(0)
    x = torch.randn(1, 7, 2, 8, dtype=torch.float64)
    for r in (8, 4, 2):
        y = cm.rope(x, r, 10000.0)
        for t in range(7):
            for i in range(r // 2):
                th = t * 10000.0 ** (-2 * i / r)
                a, b = x[0, t, :, i], x[0, t, :, i + r // 2]
                assert torch.allclose(y[0, t, :, i], a * math.cos(th) - b * math.sin(th), atol=1e-12)
                assert torch.allclose(y[0, t, :, i + r // 2], b * math.cos(th) + a * math.sin(th), atol=1e-12)
        assert torch.equal(y[..., r:], x[..., r:])
    # full rope: scores depend only on t - s
    q, k = torch.randn(8, dtype=torch.float64), torch.randn(8, dtype=torch.float64)
    rq = cm.rope(q.expand(1, 7, 1, 8).clone(), 8, 10000.0)[0, :, 0]
    rk = cm.rope(k.expand(1, 7, 1, 8).clone(), 8, 10000.0)[0, :, 0]
    assert math.isclose(rq[5] @ rk[3], rq[4] @ rk[2], abs_tol=1e-12)


def check_alibi():
    assert torch.allclose(cm.alibi_slopes(8), torch.tensor([2.0 ** -(i + 1) for i in range(8)], dtype=torch.float64))
    assert torch.allclose(cm.alibi_slopes(4), torch.tensor([2.0 ** -2, 2.0 ** -4, 2.0 ** -6, 2.0 ** -8],
                                                           dtype=torch.float64))
    # press (the reference code's get_slopes) is the paper's rule for a power of two; for 6 and 12 heads it is the
    # 4- or 8-head set followed by every other slope of the 8- or 16-head set (values worked out by hand)
    for n in (1, 2, 4, 8, 16):
        assert torch.allclose(cm.alibi_slopes(n, "press"), cm.alibi_slopes(n), rtol=1e-12, atol=0)
    assert torch.allclose(cm.alibi_slopes(6, "press"), torch.tensor(
        [2.0 ** -2, 2.0 ** -4, 2.0 ** -6, 2.0 ** -8, 2.0 ** -1, 2.0 ** -3], dtype=torch.float64))
    assert torch.allclose(cm.alibi_slopes(12, "press"), torch.tensor(
        [2.0 ** -(i + 1) for i in range(8)] + [2.0 ** -0.5, 2.0 ** -1.5, 2.0 ** -2.5, 2.0 ** -3.5], dtype=torch.float64))
    assert not torch.allclose(cm.alibi_slopes(6, "press"), cm.alibi_slopes(6))
    # with zero q/k the attention is softmax(-slope_h * (t - s)) over s <= t
    m = small(attention={"position": "alibi"}, canon={"set": ""}).double()
    attn = m.layers[0].attn
    for lin in (attn.q_proj, attn.k_proj):
        lin.weight.data.zero_()
    attn.v_proj.weight.data = torch.eye(16, dtype=torch.float64)
    attn.o_proj.weight.data = torch.eye(16, dtype=torch.float64)
    h = torch.randn(1, 5, 16, dtype=torch.float64)
    out = attn(h)
    for head, slope in enumerate(cm.alibi_slopes(2).tolist()):
        t = 4
        p = torch.softmax(torch.tensor([-slope * (t - s) for s in range(t + 1)], dtype=torch.float64), 0)
        want = p @ h[0, : t + 1, head * 8:(head + 1) * 8]
        assert torch.allclose(out[0, t, head * 8:(head + 1) * 8], want, atol=1e-12)


def check_sign_ste():
    x = torch.tensor([-2.0, -1.0, -0.5, 0.0, 0.5, 1.0, 1.5], requires_grad=True)
    for clipped, keep in [(False, [1, 1, 1, 1, 1, 1, 1]), (True, [0, 1, 1, 1, 1, 1, 0])]:
        x.grad = None
        y = cm.SignSTE.apply(x, clipped)
        assert y.tolist() == [-1, -1, -1, 1, 1, 1, 1]
        g = torch.arange(1.0, 8.0)
        y.backward(g)
        assert torch.equal(x.grad, g * torch.tensor(keep, dtype=torch.float32)), (clipped, x.grad)
    # inside the model: q and k grads flow (identity STE), and differ for clipped
    grads = {}
    for rule in ("identity", "clipped"):
        m = small(attention={"scoring": "sign_ste", "ste_grad": rule, "key_shift": {"layers": [0], "offset": 1}})
        m.layers[0].attn.q_proj.weight.data.mul_(100)  # push |q| past 1 so clipping matters
        tok, tgt, mask = cm.copy_batch(m.cfg["task"], 2, 0)
        cm.masked_cross_entropy(m(tok), tgt, mask).backward()
        grads[rule] = m.layers[0].attn.q_proj.weight.grad.clone()
        assert grads[rule].abs().max() > 0
    assert not torch.allclose(grads["identity"], grads["clipped"])


def check_causality():
    for over in [{}, {"attention": {"position": "alibi", "key_shift": {"layers": [0, 1], "offset": 2}}},
                 {"attention": {"position": "learned", "scoring": "sign_ste"}, "mlp": {"kind": "swiglu"},
                  "canon": {"set": "ABCD", "residual": False, "norm": "layernorm", "activation": "elu"}}]:
        m = small(**over)
        tok, _, _ = cm.copy_batch(m.cfg["task"], 2, 0)
        base = m(tok)
        for t in range(tok.shape[1]):
            tok2 = tok.clone()
            tok2[:, t] = (tok2[:, t] + 1) % 8
            out = m(tok2)
            assert torch.equal(out[:, :t], base[:, :t]), (over, t)
            assert not torch.equal(out[:, t:], base[:, t:])


def check_norms():
    x = torch.randn(3, 5, 16, dtype=torch.float64)
    n = cm.Norm(16, "rmsnorm", 1e-5).double()
    n.weight.data.normal_()
    assert torch.allclose(n(x), F.rms_norm(x, (16,), n.weight, 1e-5), atol=1e-12)
    n = cm.Norm(16, "layernorm", 1e-5).double()
    n.weight.data.normal_(), n.bias.data.normal_()
    assert torch.allclose(n(x), F.layer_norm(x, (16,), n.weight, n.bias, 1e-5), atol=1e-12)


def check_gradcheck():
    """Double-precision finite differences of the full loss w.r.t. a few parameters (softmax scoring)."""
    for over in [{"norm": "layernorm", "attention": {"position": "rope", "rope_dim": 4, "qkv_bias": True,
                                                      "key_shift": {"layers": [1], "offset": 1}},
                  "canon": {"set": "ABCD", "activation": "silu", "norm": "rmsnorm", "groups": 2}},
                 {"tie_embeddings": True, "attention": {"position": "alibi"}, "mlp": {"kind": "swiglu"}},
                 {"attention": {"position": "learned"}, "mlp": {"kind": "relu2", "bias": True},
                  "canon": {"set": "ABCD", "norm": "layernorm", "residual": False, "activation": "elu"}}]:
        m = small(**over).double()
        tok, tgt, mask = cm.copy_batch(m.cfg["task"], 2, 1)
        mask = mask.double()
        params = dict(m.named_parameters())
        names = [n for n in params if any(s in n for s in ("canon_b.weight", "canon_d.weight", "q_proj.weight",
                                                             "norm.bias", "tok_emb", "pos_emb", "up_proj.bias"))]
        names = names[:6]

        def loss_of(*ps):  # functional_call keeps autograd through the substituted tensors
            return cm.masked_cross_entropy(
                torch.func.functional_call(m, dict(zip(names, ps)), (tok,)), tgt, mask)

        inputs = tuple(params[n].detach().clone().requires_grad_(True) for n in names)
        assert torch.autograd.gradcheck(loss_of, inputs, eps=1e-6, atol=1e-6, rtol=1e-4, fast_mode=True), over


def check_param_groups():
    m = small(norm="layernorm", attention={"position": "learned", "qkv_bias": True}, mlp={"bias": True},
              canon={"set": "ABCD", "norm": "layernorm"})
    groups = {n: cm.param_group(n) for n, _ in m.named_parameters()}
    want = {"tok_emb.weight": "embedding", "pos_emb.weight": "embedding", "lm_head.weight": "linear",
            "final_norm.weight": "norm", "final_norm.bias": "norm", "layers.0.attn_norm.bias": "norm",
            "layers.0.canon_a.weight": "canon", "layers.0.canon_a.norm.weight": "norm",
            "layers.0.canon_a.norm.bias": "norm", "layers.0.attn.canon_b.weight": "canon",
            "layers.1.attn.canon_b.norm.bias": "norm", "layers.1.mlp.canon_d.weight": "canon",
            "layers.1.attn.q_proj.weight": "linear", "layers.1.attn.q_proj.bias": "bias",
            "layers.1.attn.o_proj.bias": "bias", "layers.0.mlp.down_proj.weight": "linear",
            "layers.0.mlp.up_proj.bias": "bias", "layers.0.canon_c.weight": "canon"}
    for n, g in want.items():
        assert groups[n] == g, (n, groups[n], g)


def check_schedule_and_adamw():
    tr = {"lr": 1.0, "warmup_steps": 2, "steps": 10, "schedule": "cosine", "min_lr_frac": 0.1}
    assert [round(cm.lr_at(s, tr), 12) for s in (0, 1, 2)] == [0.5, 1.0, 1.0]
    assert math.isclose(cm.lr_at(6, tr), 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * 0.5)))
    assert math.isclose(cm.lr_at(6, {**tr, "schedule": "linear"}), 0.5)
    assert cm.lr_at(9, {**tr, "schedule": "constant"}) == 1.0
    assert math.isclose(cm.lr_at(3, {**tr, "warmup_steps": 0}), 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * 0.3)))
    # AdamW step vs the textbook formula with decoupled decay, on decay and no-decay groups
    torch.manual_seed(0)
    m = small()
    train = cm.resolve_config({"train": {"lr": 0.01, "weight_decay": 0.1, "decay_on": ["linear", "canon"],
                                         "beta1": 0.8, "beta2": 0.9, "eps": 1e-6}})["train"]
    opt = cm.make_optimizer(m, train, foreach=False)
    before = {n: p.detach().clone() for n, p in m.named_parameters()}
    grads = {n: torch.randn_like(p) for n, p in m.named_parameters()}
    for n, p in m.named_parameters():
        p.grad = grads[n].clone()
    opt.step()
    for n, p in m.named_parameters():
        wd = 0.1 if cm.param_group(n) in ("linear", "canon") else 0.0
        mhat = (1 - 0.8) * grads[n] / (1 - 0.8)
        vhat = (1 - 0.9) * grads[n] ** 2 / (1 - 0.9)
        want = before[n] * (1 - 0.01 * wd) - 0.01 * mhat / (vhat.sqrt() + 1e-6)
        assert torch.allclose(p.detach(), want, atol=1e-6), n


# ---------------------------------------------------------------------------------------------------------
# Linear-time families (linear_mixers.py): naive recurrences against closed forms, causality, sliding window,
# gradcheck, names and groups.
# ---------------------------------------------------------------------------------------------------------
def linear_model(family, n_layers=2, d_model=16, n_heads=2, canon="AbCD", pattern="", task=None, **over):
    model = {"family": family, "d_model": d_model, "n_heads": n_heads, "n_layers": n_layers,
             "layer_pattern": pattern, "mlp": {"kind": "swiglu"}, "canon": {"set": canon},
             "mamba2": {"d_state": 4}}
    cfg = cm.deep_merge({"model": model, "task": task or {"vocab": 8, "n_symbols": 4}, "train": {"seed": 5}},
                       {"model": over})
    return cm.CanonModel(cfg)


def _conv_loop(x, w, b):
    """Causal depthwise conv by explicit sums: x (T, C), w (C, 1, K), b (C) or None."""
    T, C = x.shape
    K = w.shape[-1]
    y = torch.zeros_like(x) if b is None else b.expand(T, C).clone()
    for t in range(T):
        for i in range(K):
            tt = t - (K - 1) + i
            if tt >= 0:
                y[t] = y[t] + w[:, 0, i] * x[tt]
    return y


def check_mamba2_quadratic():
    """The naive Mamba2 mixer equals a direct attention-like computation written with explicit loops:
    y_t = sum_{s<=t} (C_t . B_s) exp(A sum_{s<r<=t} dt_r) dt_s x_s + D x_t per head (head h uses group
    h // (Hm/G)), then rmsnorm over groups of d_inner/G channels of y * silu(z), then out_proj."""
    torch.manual_seed(1)
    for canon, G, headdim in [("b", 2, 0), ("", 1, 2), ("b", 1, 8)]:
        m = linear_model("mamba2", n_layers=1, d_model=8, n_heads=4, canon=canon,
                         mamba2={"d_state": 3, "ngroups": G, "headdim": headdim}).double()
        mix = m.layers[0].mixer
        with torch.no_grad():
            mix.dt_bias.normal_()  # dt ~ 0.3 .. 1.5: decays far from 1
            mix.D.normal_()
            mix.norm.weight.normal_()
            mix.in_proj.weight.normal_(0, 0.5)
        u = torch.randn(2, 6, 8, dtype=torch.float64)
        got = mix(u)
        di, N, P = 16, 3, headdim or 4
        Hm = di // P
        K = mix.conv1d.weight.shape[-1] if mix.conv1d is not None else 0
        want = torch.zeros_like(got)
        for b in range(2):
            zxbcdt = u[b] @ mix.in_proj.weight.t()
            z, xbc, dtr = zxbcdt[:, :di], zxbcdt[:, di:di + di + 2 * G * N], zxbcdt[:, di + di + 2 * G * N:]
            assert dtr.shape[1] == Hm
            if K:
                xbc = F.silu(_conv_loop(xbc, mix.conv1d.weight, mix.conv1d.bias))
            x, Bm, Cm = xbc[:, :di], xbc[:, di:di + G * N], xbc[:, di + G * N:]
            y = torch.zeros(6, di, dtype=torch.float64)
            for h in range(Hm):
                grp = h // (Hm // G)
                A = -math.exp(mix.A_log[h].item())
                dt = F.softplus(dtr[:, h] + mix.dt_bias[h])
                for t in range(6):
                    acc = mix.D[h] * x[t, h * P:(h + 1) * P]
                    for s_ in range(t + 1):
                        decay = math.exp(A * dt[s_ + 1:t + 1].sum().item())
                        cb = Cm[t, grp * N:(grp + 1) * N] @ Bm[s_, grp * N:(grp + 1) * N]
                        acc = acc + cb * decay * dt[s_] * x[s_, h * P:(h + 1) * P]
                    y[t, h * P:(h + 1) * P] = acc
            yg = y * F.silu(z)
            gs = di // G
            for gi in range(G):
                blk = yg[:, gi * gs:(gi + 1) * gs]
                yg[:, gi * gs:(gi + 1) * gs] = blk / torch.sqrt(blk.pow(2).mean(-1, keepdim=True) + 1e-5)
            want[b] = (yg * mix.norm.weight) @ mix.out_proj.weight.t()
        assert torch.allclose(got, want, atol=1e-10, rtol=1e-9), (canon, G, (got - want).abs().max())
        assert (mix.conv1d is None) == ("b" not in canon)


def check_gla_quadratic():
    """The GLA recurrence equals o_t = scale sum_{s<=t} sum_k q_t[k] k_s[k] exp(sum_{s<r<=t} gk_r[k]) v_s."""
    torch.manual_seed(2)
    B, T, H, K, V = 2, 7, 2, 3, 4
    q, k = torch.randn(B, T, H, K, dtype=torch.float64), torch.randn(B, T, H, K, dtype=torch.float64)
    v = torch.randn(B, T, H, V, dtype=torch.float64)
    gk = F.logsigmoid(torch.randn(B, T, H, K, dtype=torch.float64) * 2)
    got = lm.gla_naive(q, k, v, gk, 0.7)
    want = torch.zeros_like(got)
    for b in range(B):
        for h in range(H):
            for t in range(T):
                for s_ in range(t + 1):
                    w = (q[b, t, h] * k[b, s_, h] * torch.exp(gk[b, s_ + 1:t + 1, h].sum(0))).sum()
                    want[b, t, h] += 0.7 * w * v[b, s_, h]
    assert torch.allclose(got, want, atol=1e-12), (got - want).abs().max()
    # in the mixer: clamp_min bounds the gate from below, output_gate false drops g_proj
    m = linear_model("gla", canon="", gla={"clamp_min": -0.5, "gate_logit_normalizer": 1.0, "output_gate": False})
    assert m.layers[0].mixer.g_proj is None and not any("g_proj" in n for n, _ in m.named_parameters())


def check_delta_rule():
    """Delta rule: beta = 0 gives zero output; the per-step update equals the matrix form
    S_t = a_t (I - beta_t k_t k_t^T) S_{t-1} + beta_t k_t v_t^T, o_t = scale S_t^T q_t; with beta = 1, g = 0 and
    one repeated unit key, reading that key returns the latest value (the delta rule overwrites)."""
    torch.manual_seed(3)
    B, T, H, K, V = 2, 6, 2, 3, 4
    q = lm.l2norm(torch.randn(B, T, H, K, dtype=torch.float64))
    k = lm.l2norm(torch.randn(B, T, H, K, dtype=torch.float64))
    v = torch.randn(B, T, H, V, dtype=torch.float64)
    beta = torch.sigmoid(torch.randn(B, T, H, dtype=torch.float64)) * 2  # (0, 2): allow_neg_eigval range
    g = -F.softplus(torch.randn(B, T, H, dtype=torch.float64))
    assert torch.equal(lm.delta_naive(q, k, v, torch.zeros_like(beta), g, 0.5), torch.zeros(B, T, H, V, dtype=torch.float64))
    got = lm.delta_naive(q, k, v, beta, g, 0.5)
    I = torch.eye(K, dtype=torch.float64)
    for b in range(B):
        for h in range(H):
            S = torch.zeros(K, V, dtype=torch.float64)
            for t in range(T):
                kt = k[b, t, h][:, None]
                S = math.exp(g[b, t, h]) * (I - beta[b, t, h] * kt @ kt.t()) @ S + beta[b, t, h] * kt @ v[b, t, h][None]
                assert torch.allclose(got[b, t, h], 0.5 * S.t() @ q[b, t, h], atol=1e-12)
    kk = k[:, :1].expand(B, T, H, K)
    kk = kk / kk.norm(dim=-1, keepdim=True)  # exact unit keys (l2norm's eps would leave 1 - 1e-6)
    o = lm.delta_naive(kk, kk, v, torch.ones_like(beta), torch.zeros_like(g), 1.0)
    assert torch.allclose(o, v, atol=1e-12)
    # the mixer's q and k are unit vectors per head (eps 1e-6): one large input keeps norm ~1
    assert torch.allclose(lm.l2norm(torch.full((3, 5), 10.0, dtype=torch.float64)).norm(dim=-1),
                          torch.ones(3, dtype=torch.float64), atol=1e-8)


LINEAR_VARIANTS = [
    ("mamba2", dict(canon="")), ("mamba2", dict(canon="AbB", mamba2={"ngroups": 2, "d_state": 4})),
    ("mamba2", dict(canon="AbBCD", mamba2={"mlp": True, "d_state": 4})),
    ("gla", dict(canon="AbBCD", gla={"feature_map": "elu_plus_one"})),
    ("gla", dict(canon="", gla={"clamp_min": -0.7, "gate_logit_normalizer": 1.0, "output_gate": False})),
    ("gdn", dict(canon="AbBCD", delta={"allow_neg_eigval": True})), ("gdn", dict(canon="")),
    ("deltanet", dict(canon="b", delta={"output_gate": False})),
    ("hybrid", dict(n_layers=6, pattern="MGDNSA", canon="AbbBCD", attention={"window": 2})),
]


def check_linear_causality():
    """Changing token t leaves the logits before t unchanged and changes the logits from t on (every family,
    every Canon letter, hybrids with a sliding-window layer)."""
    for family, over in LINEAR_VARIANTS:
        m = linear_model(family, **over)
        with torch.no_grad():
            for n, p in m.named_parameters():  # sizeable weights, so that every path matters
                if n.endswith(("proj.weight", "conv.weight", "conv1d.weight", "canon_b.weight")):
                    p.mul_(10)
        tok, _, _ = cm.copy_batch(m.cfg["task"], 2, 0)
        base = m(tok)
        for t in range(tok.shape[1]):
            tok2 = tok.clone()
            tok2[:, t] = (tok2[:, t] + 1) % 8
            out = m(tok2)
            assert torch.equal(out[:, :t], base[:, :t]), (family, over, t)
            assert not torch.equal(out[:, t], base[:, t]), (family, over, t)


def check_sliding_window():
    """A window-w layer: a query at t sees exactly the keys t-w+1..t; window >= T is full causal attention;
    window 1 returns o_proj(v_proj(h)) (each query attends only to itself)."""
    torch.manual_seed(4)
    m = linear_model("hybrid", n_layers=2, pattern="SA", canon="", attention={"window": 3, "position": "rope"}).double()
    attn = m.layers[0].attn
    assert attn.window == 3 and m.layers[1].attn.window == 0
    h = torch.randn(1, 9, 16, dtype=torch.float64)
    base = attn(h)
    for s_ in range(9):
        h2 = h.clone()
        h2[0, s_] += torch.randn(16, dtype=torch.float64)
        out = attn(h2)
        for t in range(9):
            same = torch.allclose(out[0, t], base[0, t], atol=1e-14, rtol=0)
            assert same == (t < s_ or t - s_ >= 3), (s_, t)
    for w in (9, 20):
        attn.window = w
        full = cm.Attention(m.cfg, 0, 0).double()
        full.load_state_dict(attn.state_dict())
        assert torch.allclose(attn(h), full(h), atol=1e-14)
    attn.window = 1
    assert torch.allclose(attn(h), attn.o_proj(attn.v_proj(h)), atol=1e-13)


def check_linear_gradcheck():
    """Double-precision finite differences of the full loss w.r.t. every parameter of the first layer (and a
    few elsewhere), for a tiny model of each family."""
    task = {"vocab": 5, "n_symbols": 3}
    for family, over in [("mamba2", dict(canon="AbB", mamba2={"ngroups": 2, "d_state": 2})),
                         ("mamba2", dict(canon="ACD", mamba2={"mlp": True, "d_state": 2})),
                         ("gla", dict(canon="AbBCD", gla={"feature_map": "silu", "gate_low_rank_dim": 4})),
                         ("gla", dict(canon="b", gla={"feature_map": "relu", "clamp_min": -0.7,
                                                     "gate_logit_normalizer": 1.0, "output_gate": False})),
                         ("gdn", dict(canon="AbBCD", delta={"allow_neg_eigval": True})),
                         ("deltanet", dict(canon="", delta={"output_gate": False})),
                         ("hybrid", dict(n_layers=2, pattern="NS", canon="bB", attention={"window": 2}))]:
        m = linear_model(family, n_layers=over.pop("n_layers", 1), d_model=8, n_heads=2, task=task, **over).double()
        with torch.no_grad():
            for n, p in m.named_parameters():
                if n.endswith(("proj.weight", "conv.weight")):
                    p.mul_(10)  # gates, decays and deltas far from their trivial regime
        tok, tgt, mask = cm.copy_batch(m.cfg["task"], 2, 1)
        mask = mask.double()
        params = dict(m.named_parameters())
        names = [n for n in params if n.startswith("layers.0.")] + ["tok_emb.weight"]

        def loss_of(*ps):
            return cm.masked_cross_entropy(torch.func.functional_call(m, dict(zip(names, ps)), (tok,)), tgt, mask)

        inputs = tuple(params[n].detach().clone().requires_grad_(True) for n in names)
        assert torch.autograd.gradcheck(loss_of, inputs, eps=1e-6, atol=1e-6, rtol=1e-4, fast_mode=True), family


def check_linear_structure():
    """Layer letters, parameter names, parameter groups and config validation of the linear families."""
    m = linear_model("hybrid", n_layers=5, pattern="AMGDS", canon="AbbBCD")
    assert m.letters == "AMGDS"
    names = {n for n, _ in m.named_parameters()}
    for n in ["layers.0.attn.q_proj.weight", "layers.0.attn.canon_b.weight", "layers.1.mixer.in_proj.weight",
              "layers.1.mixer.conv1d.weight", "layers.1.mixer.conv1d.bias", "layers.1.mixer.canon_b.weight",
              "layers.1.mixer.dt_bias", "layers.1.mixer.A_log", "layers.1.mixer.D", "layers.1.mixer.norm.weight",
              "layers.1.mixer.out_proj.weight", "layers.2.mixer.gk_down.weight", "layers.2.mixer.gk_up.bias",
              "layers.2.mixer.q_conv.weight", "layers.2.mixer.o_norm.weight", "layers.3.mixer.a_proj.weight",
              "layers.3.mixer.A_log", "layers.3.mixer.b_proj.weight", "layers.3.mlp.canon_d.weight",
              "layers.4.attn.k_proj.weight", "layers.4.canon_c.weight"]:
        assert n in names, n
    assert not any(n.startswith(("layers.1.mlp", "layers.1.canon_c", "layers.1.mlp_norm")) for n in names)
    groups = {n: cm.param_group(n) for n in names}
    want = {"layers.1.mixer.conv1d.weight": "canon", "layers.1.mixer.conv1d.bias": "bias",
            "layers.1.mixer.dt_bias": "ssm", "layers.1.mixer.A_log": "ssm", "layers.1.mixer.D": "ssm",
            "layers.1.mixer.norm.weight": "norm", "layers.1.mixer.in_proj.weight": "linear",
            "layers.1.mixer.canon_b.weight": "canon", "layers.2.mixer.q_conv.weight": "canon",
            "layers.2.mixer.gk_up.bias": "bias", "layers.2.mixer.gk_up.weight": "linear",
            "layers.2.mixer.o_norm.weight": "norm", "layers.3.mixer.A_log": "ssm", "layers.3.mixer.dt_bias": "ssm"}
    for n, g in want.items():
        assert groups[n] == g, (n, groups[n], g)
    assert linear_model("deltanet", canon="b").letters == "NN"
    n_names = {n for n, _ in linear_model("deltanet", canon="b").named_parameters()}
    assert not any(s in n for n in n_names for s in ("a_proj", "A_log", "dt_bias"))
    # Mamba2 shapes (d 16, H 2: d_inner 32, P 16, N 4): d_in_proj = 2*32 + 2*4 + 2 = 74, conv_dim = 40
    mm = linear_model("mamba2", canon="bB")
    shapes = {n: tuple(p.shape) for n, p in mm.named_parameters()}
    assert shapes["layers.0.mixer.in_proj.weight"] == (74, 16) and shapes["layers.0.mixer.canon_b.weight"] == (74, 1, 4)
    assert shapes["layers.0.mixer.conv1d.weight"] == (40, 1, 4) and shapes["layers.0.mixer.norm.weight"] == (32,)
    # init: D ones, A_log in log[a_min, a_max], dt in [dt_min, dt_max]
    mx = mm.layers[0].mixer
    assert torch.equal(mx.D.data, torch.ones(2))
    assert ((-mx.A_log.exp() <= -1) & (-mx.A_log.exp() >= -16)).all()
    dt = F.softplus(mx.dt_bias.double())
    assert ((dt >= 1e-3 - 1e-9) & (dt <= 0.1 + 1e-9)).all(), dt
    for bad in [dict(family="mamba2", canon="ACD"), dict(family="hybrid", pattern="MG", n_layers=3),
                dict(family="hybrid", pattern="MX", n_layers=2), dict(family="transformer", canon="Ab")]:
        fam = bad.pop("family")
        try:
            linear_model(fam, **bad)
        except ValueError:
            continue
        raise AssertionError(f"accepted invalid config {fam} {bad}")


def check_cross_layer():
    """Cross-layer Canon from its definition (docs/canon-variants.md): with the connection's weights 0 the model is
    the plain one; with K = 1, weight 1 and residual false, X(h) = h puts back exactly the identity skip it replaced;
    a hand-written h'_1 = h_1 + norm(silu(conv(h_0))) with an explicit causal loop; causality; parameter groups."""
    torch.manual_seed(0)
    tokens = torch.randint(0, 8, (2, 7))
    plain = small().double()
    for over, fill in [({"layers": [0]}, 0.0), ({"layers": [0], "residual": False, "kernel_size": 1}, 1.0)]:
        m = small(canon={"set": "ABCD", "cross_layer": over}).double()
        m.load_state_dict(plain.state_dict(), strict=False)
        m.cross_layer["0"].weight.data.fill_(fill)
        assert torch.allclose(m(tokens), plain(tokens), atol=1e-12), over
    m = small(canon={"set": "", "cross_layer": {"layers": [0], "activation": "silu", "norm": "rmsnorm"}}).double()
    with torch.no_grad():
        m.cross_layer["0"].norm.weight.normal_()
    x0 = m.tok_emb(tokens.long())
    w = m.cross_layer["0"].weight.detach()  # (C, 1, K)
    K = w.shape[2]
    X = torch.zeros_like(x0)
    for t in range(x0.shape[1]):  # X[t] = sum_i w[:, i] x[t - (K - 1) + i]
        for i in range(K):
            if t - (K - 1) + i >= 0:
                X[:, t] += w[:, 0, i] * x0[:, t - (K - 1) + i]
    X = m.cross_layer["0"].norm(F.silu(X))
    x2 = m.layers[1](m.layers[0](x0) + X)
    want = m.final_norm(x2) @ m.tok_emb.weight.t() if m.lm_head is None else m.lm_head(m.final_norm(x2))
    assert torch.allclose(m(tokens), want, atol=1e-12)
    m = small(n_layers=3, canon={"set": "BD", "cross_layer": {"layers": [0, 1], "residual": False,
                                                              "activation": "elu", "norm": "layernorm"}}).double()
    t2 = tokens.clone()
    t2[:, 4:] = (t2[:, 4:] + 1) % 8
    assert torch.allclose(m(tokens)[:, :4], m(t2)[:, :4], atol=1e-12)  # causal
    groups = {n: cm.param_group(n) for n, _ in m.named_parameters() if n.startswith("cross_layer.")}
    assert groups == {"cross_layer.0.weight": "canon", "cross_layer.0.norm.weight": "norm",
                      "cross_layer.0.norm.bias": "norm", "cross_layer.1.weight": "canon",
                      "cross_layer.1.norm.weight": "norm", "cross_layer.1.norm.bias": "norm"}, groups


CHECKS = [check_canon_conv_loop, check_rope_rotation, check_alibi, check_sign_ste, check_causality,
          check_norms, check_gradcheck, check_param_groups, check_schedule_and_adamw,
          check_mamba2_quadratic, check_gla_quadratic, check_delta_rule, check_linear_causality,
          check_sliding_window, check_linear_gradcheck, check_linear_structure, check_cross_layer]


def main():
    torch.manual_seed(0)
    passed = failed = 0
    for check in CHECKS:
        try:
            check()
            passed += 1
            print(f"ok    {check.__name__}")
        except Exception:  # noqa: BLE001
            failed += 1
            print(f"FAIL  {check.__name__}\n{traceback.format_exc()}")
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
