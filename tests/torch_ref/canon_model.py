"""Independent PyTorch reference of canonlab's models with Canon layers: the Transformer and the linear-time
families of docs/linear-families.md (Mamba2, GLA, Gated DeltaNet, DeltaNet, sliding-window attention and
hybrids; the mixers are in linear_mixers.py, as naive per-step recurrences).

Used only by tests (test_parity.py) and benchmarks (bench/bench_train_step.py). It is written from the
model description alone, plainly, with torch ops in float32 (float64 works too) and shares no code with
the C++ engine. Parameter names and shapes are the ones canonlab writes to model.safetensors.

    cfg = resolve_config(yaml_or_json_dict)          # fills the defaults and the "auto" (0) values
    model = CanonModel(cfg)                          # random init (see init_weights)
    model.load_state("dump/model.safetensors")      # or canonlab's weights
    logits = model(tokens)                           # tokens: (B, T) int64
    loss = masked_cross_entropy(logits, targets, mask)
"""
from __future__ import annotations

import copy
import json
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

import linear_mixers as lm

# ---------------------------------------------------------------------------------------------------------
# Configuration: the defaults of src/config/run_config.h, same nesting and key names.
# ---------------------------------------------------------------------------------------------------------
DEFAULTS = {
    "model": {
        "family": "transformer", "layer_pattern": "", "d_model": 128, "n_layers": 4, "n_heads": 4, "vocab_size": 0,
        "max_seq_len": 0, "norm": "rmsnorm", "norm_eps": 1e-5, "tie_embeddings": False, "init_std": 0.02,
        "attention": {
            "position": "rope", "alibi_slopes": "geometric", "rope_base": 10000.0, "rope_dim": 0, "scoring": "softmax",
            "ste_grad": "identity", "qkv_bias": False, "window": 64, "key_shift": {"layers": [], "offset": 1},
        },
        "mlp": {"kind": "gelu", "hidden_dim": 0, "bias": False},
        "canon": {"set": "", "kernel_size": 4, "residual": True, "activation": "none", "groups": 0,
                  "norm": "none", "dynamic": 0, "cross_layer": {"layers": [], "kernel_size": 4, "residual": True,
                                                  "activation": "none", "norm": "none"}},
        "recurrent": {"chunk_size": 64, "conv_kernel": 4, "kernel": "chunked"},
        "mamba2": {"d_state": 64, "expand": 2, "headdim": 0, "ngroups": 1, "mlp": False, "dt_min": 1e-3,
                   "dt_max": 0.1, "dt_init_floor": 1e-4, "a_min": 1.0, "a_max": 16.0, "init": "default"},
        "gla": {"expand_k": 0.5, "expand_v": 1.0, "feature_map": "none", "gate_low_rank_dim": 16,
                "gate_logit_normalizer": 16.0, "clamp_min": 0.0, "output_gate": True},
        "delta": {"expand_k": 0.75, "expand_v": 1.5, "output_gate": True, "allow_neg_eigval": False},
    },
    "task": {"name": "copy", "vocab": 64, "n_symbols": 24, "loss_on": "all"},
    "train": {
        "steps": 3000, "batch_size": 64, "lr": 1e-3, "schedule": "cosine", "warmup_steps": 100,
        "min_lr_frac": 0.1, "weight_decay": 0.1, "decay_on": ["linear"], "beta1": 0.9, "beta2": 0.95,
        "eps": 1e-8, "grad_clip": 1.0, "seed": 42, "data_seed": 0, "threads": 0, "log_every": 10,
        "eval_every": 500, "eval_batches": 4, "checkpoint_every": 1000, "keep_checkpoints": 2,
    },
    "probe": {"n_sequences": 256, "seed": 12345, "top_heads": 5},
}


def deep_merge(base: dict, over: dict) -> dict:
    """Returns base updated by over, recursively for nested dicts (lists and scalars are replaced)."""
    out = copy.deepcopy(base)
    for k, v in (over or {}).items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = deep_merge(out[k], v)
        else:
            out[k] = copy.deepcopy(v)
    return out


def apply_set(cfg: dict, assignment: str) -> dict:
    """Applies one `--set a.b.c=value` (value parsed as YAML, like the CLI) and returns the new dict."""
    import yaml

    key, _, text = assignment.partition("=")
    parts = key.strip().split(".")
    over: dict = {}
    node = over
    for p in parts[:-1]:
        node = node.setdefault(p, {})
    node[parts[-1]] = yaml.safe_load(text)
    return deep_merge(cfg, over)


def _canon_alias(doc: dict) -> dict:
    """`canon_config:` (top level or under model) is an alias of model.canon."""
    doc = copy.deepcopy(doc)
    for holder in (doc, doc.get("model") if isinstance(doc.get("model"), dict) else None):
        if holder is not None and "canon_config" in holder:
            doc = deep_merge(doc, {"model": {"canon": holder.pop("canon_config")}})
    return doc


def load_yaml_config(path: str, sets=()) -> dict:
    """A config file as canonlab reads it: its `base:` chain (paths relative to the file) applied first,
    then the file's own keys, then the `--set key=value` overrides. Not resolved (see resolve_config)."""
    import os

    import yaml

    def load(p, chain):
        p = os.path.realpath(p)
        if p in chain:
            raise ValueError(f"config base cycle: {' -> '.join(chain + [p])}")
        with open(p) as fh:
            doc = yaml.safe_load(fh) or {}
        base = doc.pop("base", None)
        cfg = load(os.path.join(os.path.dirname(p), base), chain + [p]) if base else {}
        return deep_merge(cfg, _canon_alias(doc))

    cfg = load(path, [])
    for s in sets:
        cfg = apply_set(cfg, s)
    return cfg


def seq_len(task: dict) -> int:
    """Copy task: [BOS] r1..rn r1..rn, T = 2n + 1 tokens."""
    return 2 * int(task["n_symbols"]) + 1


def resolve_config(cfg: dict) -> dict:
    """Defaults filled in and the 0 = "auto" values resolved (except canon.groups, where 0 = depthwise)."""
    cfg = deep_merge(DEFAULTS, cfg)
    m = cfg["model"]
    if m["vocab_size"] == 0:
        m["vocab_size"] = int(cfg["task"]["vocab"]) + 1  # the BOS token is id `vocab`
    if m["max_seq_len"] == 0:
        m["max_seq_len"] = seq_len(cfg["task"])
    head_dim = m["d_model"] // m["n_heads"]
    if m["attention"]["rope_dim"] == 0:
        m["attention"]["rope_dim"] = head_dim
    if m["mlp"]["hidden_dim"] == 0:
        d = m["d_model"]
        m["mlp"]["hidden_dim"] = round(8 * d / 3) if m["mlp"]["kind"] == "swiglu" else 4 * d
    if cfg["train"]["data_seed"] == 0:
        cfg["train"]["data_seed"] = cfg["train"]["seed"] + 1
    return cfg


# ---------------------------------------------------------------------------------------------------------
# Building blocks
# ---------------------------------------------------------------------------------------------------------
class Norm(nn.Module):
    """RMSNorm (x * rsqrt(mean(x^2) + eps) * w) or LayerNorm (with weight and bias) over the last dim."""

    def __init__(self, dim: int, kind: str, eps: float):
        super().__init__()
        if kind not in ("rmsnorm", "layernorm"):
            raise ValueError(f"unknown norm '{kind}'")
        self.kind, self.eps = kind, eps
        self.weight = nn.Parameter(torch.ones(dim))
        self.bias = nn.Parameter(torch.zeros(dim)) if kind == "layernorm" else None

    def forward(self, x):
        if self.kind == "rmsnorm":
            return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight
        mean = x.mean(-1, keepdim=True)
        var = (x - mean).pow(2).mean(-1, keepdim=True)  # biased variance, as nn.LayerNorm
        return (x - mean) * torch.rsqrt(var + self.eps) * self.weight + self.bias


class Canon(nn.Module):
    """Canon layer over m channels: causal grouped conv1d (weight (m, m/G, K), no bias, left zero padding
    K-1), then activation, then optional norm, then the residual add h + y (or just y).

    Dynamic Canon (canon.dynamic = R > 0, docs/canon-variants.md; depthwise only): the kernel at position t is
    w_t = W + reshape(U V h_t, (m, K)) with dyn_down V: (R, m) and dyn_up U: (m*K, R), and
    y_t[c] = sum_i w_t[c, i] h_{t-K+1+i}[c] (zero before the start). Computed here as written, from the
    per-position kernel and the K-token windows, not as static conv plus a correction as the engine does."""

    def __init__(self, channels: int, ccfg: dict, norm_eps: float):
        super().__init__()
        self.k = int(ccfg["kernel_size"])
        self.groups = int(ccfg["groups"]) or channels  # 0 = depthwise
        if channels % self.groups:
            raise ValueError(f"canon.groups {self.groups} does not divide {channels} channels")
        self.activation, self.residual = ccfg["activation"], bool(ccfg["residual"])
        self.weight = nn.Parameter(torch.empty(channels, channels // self.groups, self.k))
        self.norm = None if ccfg["norm"] == "none" else Norm(channels, ccfg["norm"], norm_eps)
        self.rank = int(ccfg.get("dynamic", 0))
        if self.rank > 0:
            if self.groups != channels:
                raise ValueError(f"canon.dynamic {self.rank} needs a depthwise conv, not {self.groups} groups")
            self.dyn_down = nn.Linear(channels, self.rank, bias=False)
            self.dyn_up = nn.Linear(self.rank, channels * self.k, bias=False)

    def forward(self, h):  # h: (B, T, m)
        T = h.shape[1]
        if self.rank > 0:
            Bn, _, m = h.shape
            w = self.weight[:, 0, :] + self.dyn_up(self.dyn_down(h)).reshape(Bn, T, m, self.k)  # (B, T, m, K)
            windows = F.pad(h, (0, 0, self.k - 1, 0)).unfold(1, self.k, 1)  # (B, T, m, K): h[t-K+1+i]
            y = (w * windows).sum(-1)
        else:
            y = F.conv1d(h.transpose(1, 2), self.weight, padding=self.k - 1, groups=self.groups)
            y = y[:, :, :T].transpose(1, 2)  # keep the first T outputs: y[t] sees h[t-K+1 .. t]
        if self.activation == "silu":
            y = F.silu(y)
        elif self.activation == "elu":
            y = F.elu(y)
        elif self.activation != "none":
            raise ValueError(f"unknown canon.activation '{self.activation}'")
        if self.norm is not None:
            y = self.norm(y)
        return h + y if self.residual else y


class SignSTE(torch.autograd.Function):
    """Forward: where(x >= 0, 1, -1) (sign(0) = +1). Backward: identity, or grad * (|x| <= 1) if clipped."""

    @staticmethod
    def forward(ctx, x, clipped: bool):
        ctx.clipped = clipped
        if clipped:
            ctx.save_for_backward(x)
        return torch.where(x >= 0, torch.ones_like(x), -torch.ones_like(x))

    @staticmethod
    def backward(ctx, g):
        if ctx.clipped:
            (x,) = ctx.saved_tensors
            g = g * (x.abs() <= 1).to(g.dtype)
        return g, None


class ShiftCoefficients(nn.Module):
    """The learned coefficients of the smeared (alpha: (H)) and kv (k_mix, v_mix: (2, H), rows now and prev) shifts,
    under canonlab's names (layers.N.attn.key_shift.*)."""

    def __init__(self, mode: str, H: int):
        super().__init__()
        if mode == "smeared":
            self.alpha = nn.Parameter(torch.zeros(H))
        else:
            self.k_mix = nn.Parameter(torch.zeros(2, H))
            self.v_mix = nn.Parameter(torch.zeros(2, H))


def shift(h, o: int):
    """shift(h, o)[:, t] = h[:, t - o], zero for t < o (along dim 1)."""
    out = torch.zeros_like(h)
    if o < h.shape[1]:
        out[:, o:] = h[:, :-o]
    return out


def rope(x, rope_dim: int, base: float):
    """Rotate-half RoPE on the first rope_dim dims of each head; x: (B, T, H, D); dims >= rope_dim untouched."""
    T, r = x.shape[1], rope_dim
    half = r // 2
    i = torch.arange(half, dtype=torch.float64)
    inv_freq = base ** (-2.0 * i / r)
    theta = torch.arange(T, dtype=torch.float64)[:, None] * inv_freq[None, :]  # (T, r/2), angles in double
    cos = torch.cos(theta).to(x.dtype)[None, :, None, :]
    sin = torch.sin(theta).to(x.dtype)[None, :, None, :]
    a, b, rest = x[..., :half], x[..., half:r], x[..., r:]
    return torch.cat([a * cos - b * sin, b * cos + a * sin, rest], dim=-1)


def press_get_slopes(n: int) -> list:
    """Press et al.'s reference get_slopes (ofirpress/attention_with_linear_biases, as copied by BLOOM and MPT),
    in its own recursive form: for n a power of two the geometric sequence from 2^(-8/n) with that ratio;
    otherwise the slopes of the closest power of two below n, then every other slope of twice that many heads."""
    def get_slopes_power_of_2(n):
        start = 2 ** (-2 ** -(math.log2(n) - 3))
        ratio = start
        return [start * ratio ** i for i in range(n)]

    if math.log2(n).is_integer():
        return get_slopes_power_of_2(n)
    closest_power_of_2 = 2 ** math.floor(math.log2(n))
    return get_slopes_power_of_2(closest_power_of_2) + press_get_slopes(2 * closest_power_of_2)[0::2][:n - closest_power_of_2]


def alibi_slopes(n_heads: int, rule: str = "geometric"):
    """model.attention.alibi_slopes: geometric: slope_h = 2^(-8 h / H) for h = 1..H (the paper's rule);
    press: press_get_slopes(H)."""
    if rule == "press":
        return torch.tensor(press_get_slopes(n_heads), dtype=torch.float64)
    if rule != "geometric":
        raise ValueError(f"unknown attention.alibi_slopes '{rule}'")
    return torch.tensor([2.0 ** (-8.0 * h / n_heads) for h in range(1, n_heads + 1)], dtype=torch.float64)


class Attention(nn.Module):
    def __init__(self, cfg: dict, layer: int, window: int = 0):
        """window > 0: sliding-window attention (letter S), a query at t sees keys t - window + 1 .. t;
        0: full causal attention (letter A)."""
        super().__init__()
        m = cfg["model"]
        a = m["attention"]
        if window < 0:
            raise ValueError(f"attention.window must be >= 0, got {window}")
        self.window = int(window)
        C, H = m["d_model"], m["n_heads"]
        if C % H:
            raise ValueError("d_model must be divisible by n_heads")
        self.H, self.D = H, C // H
        # Grouped-query attention (Ainslie et al. 2023): Hkv key/value heads, query head j reads head j // (H // Hkv)
        self.Hkv = int(m.get("n_kv_heads", 0)) or H
        if H % self.Hkv:
            raise ValueError("n_kv_heads must divide n_heads")
        Ckv = self.Hkv * self.D
        self.position, self.scoring = a["position"], a["scoring"]
        self.alibi_rule = a["alibi_slopes"]
        self.rope_dim, self.rope_base = int(a["rope_dim"]) or self.D, float(a["rope_base"])
        self.ste_clipped = a["ste_grad"] == "clipped"
        ks = a["key_shift"]
        self.shift_offset = int(ks["offset"]) if layer in ks["layers"] else 0
        # The token-shift family, written from the formulas (docs/token-shift.md), not from canonlab's kernels.
        self.shift_mode = ks.get("mode", "add") if self.shift_offset else None
        dims = ks.get("dims") or []
        self.shift_dims = (int(dims[0]), int(dims[1])) if len(dims) == 2 else (0, C // H)
        if self.shift_mode not in (None, "add", "replace", "smeared", "kv", "partial"):
            raise ValueError(f"unknown key_shift.mode '{self.shift_mode}'")
        if self.shift_mode in ("smeared", "kv"):
            self.key_shift = ShiftCoefficients(self.shift_mode, self.Hkv)
        bias = bool(a["qkv_bias"])
        self.q_proj = nn.Linear(C, C, bias=bias)
        self.k_proj = nn.Linear(C, Ckv, bias=bias)
        self.v_proj = nn.Linear(C, Ckv, bias=bias)
        self.canon_b = Canon(C + 2 * Ckv, m["canon"], m["norm_eps"]) if "B" in m["canon"]["set"] else None
        self.o_proj = nn.Linear(C, C, bias=bias)

    def forward(self, h):  # h: (B, T, C)
        B, T, C = h.shape
        o = self.shift_offset
        hk = h + shift(h, o) if self.shift_mode == "add" else shift(h, o) if self.shift_mode == "replace" else h
        q, k, v = self.q_proj(h), self.k_proj(hk), self.v_proj(h)
        if self.shift_mode in ("smeared", "kv", "partial"):
            kh, vh = k.view(B, T, self.Hkv, self.D), v.view(B, T, self.Hkv, self.D)
            early = (torch.arange(T) < o)[None, :, None, None]  # nothing to shift in
            if self.shift_mode == "smeared":  # Olsson et al.: sigma k_t + (1 - sigma) k_{t-o}, the first keys kept
                s = torch.sigmoid(self.key_shift.alpha)[None, None, :, None]
                kh = torch.where(early, kh, s * kh + (1 - s) * shift(kh, o))
            elif self.shift_mode == "kv":  # Xu et al.: a1 K + a2 Shift(K), Shift zero-padded; V likewise
                km, vm = self.key_shift.k_mix, self.key_shift.v_mix
                kh = km[0][None, None, :, None] * kh + km[1][None, None, :, None] * shift(kh, o)
                vh = vm[0][None, None, :, None] * vh + vm[1][None, None, :, None] * shift(vh, o)
            else:  # modded-nanogpt: in dims [d0, d1) the key at t is the key at t - o
                d0, d1 = self.shift_dims
                moved = kh.clone()
                moved[:, :, :, d0:d1] = torch.where(early, kh[:, :, :, d0:d1], shift(kh[:, :, :, d0:d1], o))
                kh = moved
            k, v = kh.reshape(B, T, -1), vh.reshape(B, T, -1)
        if self.canon_b is not None:
            q, k, v = self.canon_b(torch.cat([q, k, v], dim=-1)).split([C, k.shape[-1], v.shape[-1]], dim=-1)
        q = q.view(B, T, self.H, self.D)
        k, v = (t.view(B, T, self.Hkv, self.D) for t in (k, v))
        if self.position == "rope":
            q, k = rope(q, self.rope_dim, self.rope_base), rope(k, self.rope_dim, self.rope_base)
        if self.scoring == "sign_ste":
            q, k = SignSTE.apply(q, self.ste_clipped), SignSTE.apply(k, self.ste_clipped)
        elif self.scoring != "softmax":
            raise ValueError(f"unknown attention.scoring '{self.scoring}'")
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))  # (B, H, T, D); k, v: (B, Hkv, T, D)
        k, v = (t.repeat_interleave(self.H // self.Hkv, dim=1) for t in (k, v))  # each kv head to its query heads
        s = q @ k.transpose(-1, -2) / math.sqrt(self.D)  # (B, H, T, T)
        pos = torch.arange(T)
        if self.position == "alibi":
            dist = (pos[:, None] - pos[None, :]).to(torch.float64)  # t - s
            bias = alibi_slopes(self.H, self.alibi_rule)[:, None, None] * dist  # (H, T, T)
            s = s - bias.to(s.dtype)
        s = s.masked_fill(pos[None, :] > pos[:, None], float("-inf"))  # causal: key s <= query t
        if self.window:
            s = s.masked_fill(pos[:, None] - pos[None, :] >= self.window, float("-inf"))  # s > t - window
        o = torch.softmax(s, dim=-1) @ v
        return self.o_proj(o.transpose(1, 2).reshape(B, T, C))


class MLP(nn.Module):
    def __init__(self, cfg: dict):
        super().__init__()
        m = cfg["model"]
        C, Hd, bias = m["d_model"], m["mlp"]["hidden_dim"], bool(m["mlp"]["bias"])
        self.kind, self.Hd = m["mlp"]["kind"], Hd
        if self.kind not in ("gelu", "relu2", "swiglu"):
            raise ValueError(f"unknown mlp.kind '{self.kind}'")
        if self.kind == "swiglu":
            self.gate_proj = nn.Linear(C, Hd, bias=bias)
        self.up_proj = nn.Linear(C, Hd, bias=bias)
        self.down_proj = nn.Linear(Hd, C, bias=bias)
        W = 2 * Hd if self.kind == "swiglu" else Hd
        self.canon_d = Canon(W, m["canon"], m["norm_eps"]) if "D" in m["canon"]["set"] else None

    def forward(self, h):
        if self.kind == "swiglu":
            gu = torch.cat([self.gate_proj(h), self.up_proj(h)], dim=-1)
            if self.canon_d is not None:
                gu = self.canon_d(gu)
            a = F.silu(gu[..., : self.Hd]) * gu[..., self.Hd:]
        else:
            u = self.up_proj(h)
            if self.canon_d is not None:
                u = self.canon_d(u)
            a = F.gelu(u) if self.kind == "gelu" else torch.relu(u).pow(2)  # F.gelu default = exact erf
        return self.down_proj(a)


class Block(nn.Module):
    """Pre-norm residual block; letter A/S: attention (`attn`), M/G/D/N: a linear mixer (`mixer`). Mamba2
    layers have no MLP unless model.mamba2.mlp."""

    def __init__(self, cfg: dict, layer: int, letter: str = "A"):
        super().__init__()
        m = cfg["model"]
        C, cs, eps = m["d_model"], m["canon"]["set"], m["norm_eps"]
        self.letter = letter
        self.attn_norm = Norm(C, m["norm"], eps)
        self.canon_a = Canon(C, m["canon"], eps) if "A" in cs else None
        if letter in ("A", "S"):
            window = int(m["attention"]["window"]) if letter == "S" else 0
            if letter == "S" and window < 1:
                raise ValueError(f"model.attention.window must be >= 1 for S layers, got {window}")
            self.attn = Attention(cfg, layer, window)
            self.mixer = None
        else:
            self.attn = None
            self.mixer = lm.make_mixer(letter, cfg, lambda ch: Canon(ch, m["canon"], eps))
        self.has_mlp = letter != "M" or bool(m["mamba2"]["mlp"])
        if self.has_mlp:
            self.mlp_norm = Norm(C, m["norm"], eps)
            self.canon_c = Canon(C, m["canon"], eps) if "C" in cs else None
            self.mlp = MLP(cfg)

    def forward(self, x):
        h = self.attn_norm(x)
        if self.canon_a is not None:
            h = self.canon_a(h)
        x = x + (self.attn(h) if self.attn is not None else self.mixer(h))
        if not self.has_mlp:
            return x
        h = self.mlp_norm(x)
        if self.canon_c is not None:
            h = self.canon_c(h)
        return x + self.mlp(h)


class CanonModel(nn.Module):
    def __init__(self, cfg: dict):
        super().__init__()
        cfg = resolve_config(cfg)
        self.cfg = cfg
        m = cfg["model"]
        letters = lm.layer_letters(cfg)  # validates family and layer_pattern
        allowed = "ABCD" if m["family"] == "transformer" else "AbBCD"
        bad = set(m["canon"]["set"]) - set(allowed)
        if bad:
            raise ValueError(f"canon.set letters {sorted(bad)} are not valid for family '{m['family']}'")
        if m["family"] == "mamba2" and not m["mamba2"]["mlp"] and set("CD") & set(m["canon"]["set"]):
            raise ValueError("canon.set letters C and D need an MLP: set model.mamba2.mlp for a Mamba2 model")
        if m["recurrent"]["kernel"] not in ("chunked", "naive"):
            raise ValueError(f"unknown recurrent.kernel '{m['recurrent']['kernel']}'")
        if m["attention"]["position"] not in ("rope", "nope", "alibi", "learned"):
            raise ValueError(f"unknown attention.position '{m['attention']['position']}'")
        if m["attention"]["alibi_slopes"] not in ("geometric", "press"):
            raise ValueError(f"unknown attention.alibi_slopes '{m['attention']['alibi_slopes']}'")
        C, V = m["d_model"], m["vocab_size"]
        self.tok_emb = nn.Embedding(V, C)
        self.pos_emb = nn.Embedding(m["max_seq_len"], C) if m["attention"]["position"] == "learned" else None
        self.letters = letters
        self.layers = nn.ModuleList(Block(cfg, i, letters[i]) for i in range(m["n_layers"]))
        self.final_norm = Norm(C, m["norm"], m["norm_eps"])
        self.lm_head = None if m["tie_embeddings"] else nn.Linear(C, V, bias=False)
        # Cross-layer Canon (docs/canon-variants.md): block l+1 reads h_{l+1} + X_l(h_l), or, without residual,
        # h_{l+1} - h_l + X_l(h_l); X = norm(act(depthwise causal conv(h))), the Canon layer without its own residual.
        xl = m["canon"]["cross_layer"]
        for l in xl["layers"]:
            if not 0 <= l < m["n_layers"] - 1 or xl["layers"].count(l) > 1:
                raise ValueError(f"canon.cross_layer.layers: bad layer {l}")
        xconv = {"kernel_size": xl["kernel_size"], "groups": 0, "activation": xl["activation"], "residual": False,
                 "norm": xl["norm"]}
        self.cross_residual = bool(xl["residual"])
        self.cross_layer = nn.ModuleDict({str(l): Canon(C, xconv, m["norm_eps"]) for l in xl["layers"]})
        self.init_weights(cfg["train"]["seed"])

    @torch.no_grad()
    def init_weights(self, seed: int):
        """Random init (only for benchmarks and fakes; parity runs load canonlab's weights): normal(0,
        init_std) for linear and embedding weights, zeros for biases, ones for norm weights, and the
        nn.Conv1d default U(-1/sqrt(fan_in), 1/sqrt(fan_in)) for canon weights; the linear-family parameters
        as in docs/linear-families.md (linear_mixers.init_mixer_param)."""
        g = torch.Generator().manual_seed(int(seed))
        std = self.cfg["model"]["init_std"]
        for name, p in self.named_parameters():
            if lm.init_mixer_param(name, p, self.cfg, g):
                continue
            group = param_group(name)
            if group in ("linear", "embedding"):
                p.copy_(torch.randn(p.shape, generator=g) * std)
            elif ".key_shift." in name:  # smeared: alpha 0; kv: row 0 ~ U(0, 1), row 1 = 1 - row 0
                if name.endswith("alpha"):
                    p.zero_()
                else:
                    u = torch.rand(p.shape[1], generator=g)
                    p.copy_(torch.stack([u, 1 - u]))
            elif name.endswith("dyn_up.weight"):  # dynamic Canon: the zero map
                p.zero_()
            elif name.endswith("dyn_down.weight"):  # nn.Linear's default bound 1/sqrt(in)
                p.copy_((torch.rand(p.shape, generator=g) * 2 - 1) / math.sqrt(p.shape[1]))
            elif group == "canon":
                bound = 1.0 / math.sqrt(p.shape[1] * p.shape[2])
                p.copy_((torch.rand(p.shape, generator=g) * 2 - 1) * bound)
            elif name.endswith("norm.weight"):
                p.fill_(1.0)
            else:
                p.zero_()

    def forward(self, tokens):  # tokens: (B, T) integer -> logits (B, T, V)
        x = self.tok_emb(tokens.long())
        if self.pos_emb is not None:
            x = x + self.pos_emb.weight[: tokens.shape[1]]
        for l, layer in enumerate(self.layers):
            h = x
            x = layer(h)
            if str(l) in self.cross_layer:
                x = x + self.cross_layer[str(l)](h) if self.cross_residual else (x - h) + self.cross_layer[str(l)](h)
        x = self.final_norm(x)
        return x @ self.tok_emb.weight.t() if self.lm_head is None else self.lm_head(x)

    def load_state(self, path: str):
        """Loads a safetensors checkpoint; names and shapes must match exactly (no missing, no extra)."""
        from safetensors.torch import load_file

        tensors = load_file(path)
        own = dict(self.named_parameters())
        missing = sorted(set(own) - set(tensors))
        extra = sorted(set(tensors) - set(own))
        shapes = [f"{n}: file {tuple(tensors[n].shape)} vs reference {tuple(own[n].shape)}"
                  for n in sorted(set(own) & set(tensors)) if tensors[n].shape != own[n].shape]
        if missing or extra or shapes:
            raise ValueError(f"checkpoint {path} does not match the reference model: missing {missing}, "
                             f"unexpected {extra}, shape mismatches {shapes}")
        with torch.no_grad():
            for n, p in own.items():
                p.copy_(tensors[n].to(p.dtype))
        return self


def config_from_checkpoint(path: str) -> dict:
    """The resolved config canonlab stores as JSON in the safetensors metadata key "canonlab.config"."""
    from safetensors import safe_open

    with safe_open(path, framework="pt") as f:
        meta = f.metadata() or {}
    if "canonlab.config" not in meta:
        raise ValueError(f"{path}: no 'canonlab.config' metadata")
    return json.loads(meta["canonlab.config"])


# ---------------------------------------------------------------------------------------------------------
# Loss, parameter groups, optimizer, LR schedule
# ---------------------------------------------------------------------------------------------------------
def masked_cross_entropy(logits, targets, mask):
    """sum(mask * CE) / sum(mask)."""
    ce = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1).long(), reduction="none")
    mask = mask.reshape(-1).to(ce.dtype)
    return (ce * mask).sum() / mask.sum()


def param_group(name: str) -> str:
    """Weight-decay group: linear | embedding | canon | norm | bias | ssm."""
    leaf = name.rsplit(".", 1)[-1]
    if name.startswith(("tok_emb.", "pos_emb.")):
        return "embedding"
    if "norm." in name:  # attn_norm, mlp_norm, final_norm, canon_*.norm, mixer.norm, mixer.o_norm
        return "norm"
    if ".mixer." in name and leaf in ("A_log", "D", "dt_bias"):
        return "ssm"
    if leaf == "bias":  # includes the Mamba2 conv1d bias and GLA's gk_up bias
        return "bias"
    parent = name.split(".")[-2]
    if parent == "key_shift":
        return "canon"  # the smeared and kv shifts' coefficients, short causal filters on keys and values
    if parent in ("dyn_down", "dyn_up"):
        return "canon"  # dynamic Canon's kernel maps
    if parent.startswith("canon_") or parent in ("conv1d", "q_conv", "k_conv", "v_conv") or name.startswith("cross_layer."):
        return "canon"  # Canon layers and the families' own short convs (Canon-b)
    return "linear"


def make_optimizer(model: nn.Module, train: dict, **kwargs) -> torch.optim.AdamW:
    """torch.optim.AdamW with weight decay only on the groups listed in train.decay_on."""
    decay, no_decay = [], []
    for n, p in model.named_parameters():
        (decay if param_group(n) in train["decay_on"] else no_decay).append(p)
    groups = [{"params": decay, "weight_decay": float(train["weight_decay"])},
              {"params": no_decay, "weight_decay": 0.0}]
    groups = [g for g in groups if g["params"]]
    return torch.optim.AdamW(groups, lr=float(train["lr"]), betas=(float(train["beta1"]), float(train["beta2"])),
                             eps=float(train["eps"]), **kwargs)


def lr_at(step: int, train: dict) -> float:
    """LR used by update `step` (0-based)."""
    lr, warm, steps = float(train["lr"]), int(train["warmup_steps"]), int(train["steps"])
    if step < warm:
        return lr * (step + 1) / warm
    p = (step - warm) / max(1, steps - warm)
    kind = train["schedule"]
    if kind == "cosine":
        f = float(train["min_lr_frac"])
        return lr * (f + (1 - f) * 0.5 * (1 + math.cos(math.pi * p)))
    if kind == "linear":
        return lr * (1 - p)
    if kind == "constant":
        return lr
    raise ValueError(f"unknown train.schedule '{kind}'")


def train_step(model, opt, step: int, tokens, targets, mask, train: dict, loss_fn=None) -> float:
    """One update on a batch: loss, backward, global-norm clip, AdamW at lr_at(step). Returns the loss
    before the update. loss_fn(tokens, targets, mask) replaces the model's masked cross-entropy (a compiled one)."""
    loss = loss_fn(tokens, targets, mask) if loss_fn else masked_cross_entropy(model(tokens), targets, mask)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    if float(train["grad_clip"]) > 0:
        torch.nn.utils.clip_grad_norm_(model.parameters(), float(train["grad_clip"]))
    for g in opt.param_groups:
        g["lr"] = lr_at(step, train)
    opt.step()
    return loss.item()


# ---------------------------------------------------------------------------------------------------------
# Synthetic copy-task batches (for benchmarks and fakes only; parity runs use canonlab's batch)
# ---------------------------------------------------------------------------------------------------------
def copy_batch(task: dict, batch: int, seed: int):
    """[BOS] r1..rn r1..rn with n distinct symbols (uniform with repetition when n > vocab); the model reads
    all T = 2n+1 tokens and predicts the next one (the last target is masked). loss_on "copy" keeps only
    the predictions of the second half."""
    g = torch.Generator().manual_seed(int(seed))
    n, vocab = int(task["n_symbols"]), int(task["vocab"])
    T = 2 * n + 1
    if n <= vocab:
        r = torch.stack([torch.randperm(vocab, generator=g)[:n] for _ in range(batch)])
    else:
        r = torch.randint(0, vocab, (batch, n), generator=g)
    seq = torch.cat([torch.full((batch, 1), vocab), r, r], dim=1)  # (B, T)
    targets = torch.cat([seq[:, 1:], torch.zeros(batch, 1, dtype=seq.dtype)], dim=1)
    mask = torch.ones(batch, T)
    mask[:, -1] = 0
    if task.get("loss_on", "all") == "copy":
        mask[:, :n] = 0  # positions n..2n-1 predict the copied half
    return seq.to(torch.int32), targets.to(torch.int32), mask
