#!/usr/bin/env python3
"""Self-checks of the PyTorch reference (canon_model.py) against first principles, without canonlab:
explicit-loop Canon conv, RoPE as a rotation, ALiBi slopes, the sign STE's forward and both backward
rules, causality with every feature on, norms against torch's own, double-precision gradcheck, parameter
groups, the LR schedule and AdamW against a hand-written update.

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


CHECKS = [check_canon_conv_loop, check_rope_rotation, check_alibi, check_sign_ste, check_causality,
          check_norms, check_gradcheck, check_param_groups, check_schedule_and_adamw]


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
