"""Building blocks shared by canonlab's Hugging Face model code (LlamaCanon, GLACanon, GatedDeltaNetCanon, Mamba2Canon).

canonlab writes these files next to the weights of an export (`canonlab export --to hf`), so that
`AutoModelForCausalLM.from_pretrained(folder, trust_remote_code=True)` loads the folder with nothing but torch and
transformers. The formats (config keys, tensor names and shapes) are PhysicsLM4's, as docs/huggingface.md lays them
out; this code is written from that definition. It favours clarity over speed: plain torch, the linear-time mixers as
their step-by-step recurrences, and no KV cache (generation recomputes the whole sequence for every new token).

The modeling and configuration files import this module relatively (`from .canonlab_hf_layers import ...`):
transformers copies relative imports into its dynamic-module cache, absolute imports between the files would not be
found.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn
from transformers.modeling_outputs import CausalLMOutputWithPast


def require(ok: bool, config, key: str, allowed: str) -> None:
    """Refuses a config value this code does not implement, naming the key, its value and what is allowed."""
    if not ok:
        raise ValueError(f"{type(config).__name__}: {key} = {getattr(config, key, None)!r} is not supported by "
                         f"canonlab's model code; allowed: {allowed}")


def check_canon_set(config, letters: str) -> None:
    """canon_set: distinct letters, each one this family places somewhere (docs/huggingface.md)."""
    s = config.canon_set or ""
    require(len(set(s)) == len(s) and all(c in letters for c in s), config, "canon_set",
            f"distinct letters from {letters}")


# The keyword arguments of a configuration's __init__ that go to PretrainedConfig.__init__ instead of being set here.
_PRETRAINED_CONFIG_KEYS = ("pad_token_id", "bos_token_id", "eos_token_id", "tie_word_embeddings")


def config_keys(config, arguments: dict) -> dict:
    """The body of a configuration's __init__, whose signature lists every key with its default: `arguments` is that
    __init__'s locals(). Sets each key as an attribute of config (transformers serialises them from there), except
    the token ids and tie_word_embeddings, and returns those with **kwargs, for PretrainedConfig.__init__:
        super().__init__(**config_keys(self, locals()))"""
    arguments = dict(arguments)
    kwargs = arguments.pop("kwargs", {})
    passed = {key: arguments.pop(key) for key in _PRETRAINED_CONFIG_KEYS}
    for key, value in arguments.items():
        if key not in ("self", "__class__"):  # __class__: the cell of super() in the caller
            setattr(config, key, value)
    return {**passed, **kwargs}


# ---- initialisation ---------------------------------------------------------------------------------------------
# Only for parameters a checkpoint does not provide (a model built from a config, or a missing key). transformers 5
# marks loaded tensors with `_is_hf_initialized` and may call _init_weights after loading, so these never touch a
# marked tensor (transformers 4 initialises before loading, where the mark is simply absent).

def _untouched(t) -> bool:
    return t is not None and not getattr(t, "_is_hf_initialized", False)


@torch.no_grad()
def init_normal(t, std: float) -> None:
    if _untouched(t):
        t.normal_(0.0, std)


@torch.no_grad()
def init_constant(t, value: float) -> None:
    if _untouched(t):
        t.fill_(value)


@torch.no_grad()
def init_copy(t, values: torch.Tensor) -> None:
    if _untouched(t):
        t.copy_(values.to(t.dtype))


def init_common(module: nn.Module, std: float) -> None:
    """Linear, Embedding, RMSNorm and the causal convolutions: what every family has."""
    if isinstance(module, nn.Linear):
        init_normal(module.weight, std)
        if module.bias is not None:
            init_constant(module.bias, 0.0)
    elif isinstance(module, nn.Embedding):
        init_normal(module.weight, std)
    elif isinstance(module, RMSNorm):
        init_constant(module.weight, 1.0)
    elif isinstance(module, CausalConv):
        init_normal(module.weight, std)
        if module.bias is not None:
            init_constant(module.bias, 0.0)


# ---- layers -----------------------------------------------------------------------------------------------------

class RMSNorm(nn.Module):
    """weight * x / sqrt(mean(x^2) + eps) over the last dim, computed in float32 (as Llama's RMSNorm)."""

    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        x = x.float()
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x.to(dtype)


class CausalConv(nn.Module):
    """Depthwise causal convolution over time: y[t, c] = sum_j weight[c, 0, j] * x[t - (K-1) + j, c] (+ bias[c]),
    zeros before the first position. weight (C, 1, K) as nn.Conv1d stores a depthwise kernel; the last tap is the
    current position. Used for the short convs of GLA / Gated DeltaNet / Mamba2 and, through Canon, for Canon layers."""

    def __init__(self, channels: int, kernel: int, bias: bool = False):
        super().__init__()
        self.kernel = kernel
        self.weight = nn.Parameter(torch.empty(channels, 1, kernel))
        self.bias = nn.Parameter(torch.zeros(channels)) if bias else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x (B, T, C) -> (B, T, C)
        T = x.shape[1]
        y = F.conv1d(x.transpose(1, 2), self.weight, self.bias, padding=self.kernel - 1, groups=self.weight.shape[0])
        return y[..., :T].transpose(1, 2)  # the right padding's outputs would see the future


class Canon(CausalConv):
    """A Canon layer (Physics of Language Models, Part 4.1): the causal depthwise conv, then SiLU when
    canon_activation, then + input when canon_residual."""

    def __init__(self, channels: int, config):
        super().__init__(channels, config.canon_kernel, bias=bool(getattr(config, "canon_bias", False)))
        self.activation = bool(config.canon_activation)
        self.residual = bool(config.canon_residual)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = super().forward(x)
        if self.activation:
            y = F.silu(y)
        return x + y if self.residual else y


def maybe_canon(letter: str, channels: int, config):
    """The Canon layer of `letter` when canon_set holds it, else None."""
    return Canon(channels, config) if letter in (config.canon_set or "") else None


def add_canons(module: nn.Module, letters: str, channels: int, config) -> None:
    """Registers module.canon<letter> (`channels` wide) for each of letters that canon_set holds; the others stay
    absent, so that the parameter names are the format's."""
    for letter in letters:
        canon = maybe_canon(letter, channels, config)
        if canon is not None:
            setattr(module, "canon" + letter, canon)


def prenorm_residual(x: torch.Tensor, norm: nn.Module, canon, sublayer: nn.Module) -> torch.Tensor:
    """x + sublayer(canon(norm(x))), without canon when it is None: a block's half, Canon-A or -C at the front."""
    h = norm(x)
    if canon is not None:
        h = canon(h)
    return x + sublayer(h)


class GatedMLP(nn.Module):
    """down(silu(gate) * up), with Canon-D (when given) over concat[gate, up] before the SiLU.

    layout says how the format stores gate and up:
      "separate"  gate_proj (I, d) and up_proj (I, d)          (LlamaCanon; GatedDeltaNetCanon without Canon-D)
      "gate_proj" one gate_proj (2I, d), first half the gate     (GLACanon)
      "both_proj" one both_proj (2I, d), first half the gate     (Mamba2Canon; GatedDeltaNetCanon with Canon-D)
    """

    def __init__(self, hidden: int, inter: int, layout: str, canon_d, bias: bool = False):
        super().__init__()
        self.layout = layout
        if layout == "separate":
            self.gate_proj = nn.Linear(hidden, inter, bias=bias)
            self.up_proj = nn.Linear(hidden, inter, bias=bias)
        elif layout == "gate_proj":
            self.gate_proj = nn.Linear(hidden, 2 * inter, bias=bias)
        elif layout == "both_proj":
            self.both_proj = nn.Linear(hidden, 2 * inter, bias=bias)
        else:
            raise ValueError(f"GatedMLP: unknown layout {layout!r}")
        self.down_proj = nn.Linear(inter, hidden, bias=bias)
        if canon_d is not None:
            self.canonD = canon_d  # registered only when present: its name is the tensor's

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        canon_d = getattr(self, "canonD", None)
        if self.layout == "separate":
            gate, up = self.gate_proj(x), self.up_proj(x)
            if canon_d is not None:
                gate, up = canon_d(torch.cat([gate, up], -1)).chunk(2, -1)
        else:
            both = (self.gate_proj if self.layout == "gate_proj" else self.both_proj)(x)  # (B, T, 2I)
            if canon_d is not None:
                both = canon_d(both)
            gate, up = both.chunk(2, -1)
        return self.down_proj(F.silu(gate) * up)


def fla_intermediate_size(config) -> int:
    """fla's MLP width when intermediate_size is null: 2/3 * hidden_ratio * hidden, rounded up to a multiple of 256."""
    if config.intermediate_size is not None:
        return int(config.intermediate_size)
    ratio = config.hidden_ratio if config.hidden_ratio is not None else 4
    inter = int(config.hidden_size * ratio * 2 / 3)
    return 256 * ((inter + 256 - 1) // 256)


# ---- the causal-LM head, shared by the four families ------------------------------------------------------------

# Keyword arguments generate() or users may pass that are accepted and ignored: there is no cache to read or fill, and
# the logits of every position are returned (logits_to_keep only trims them elsewhere).
_CACHE_KWARGS = ("use_cache", "past_key_values", "cache", "cache_position", "logits_to_keep", "num_logits_to_keep")


class CausalLMMixin:
    """forward / generate support for a *ForCausalLM whose backbone is self.<base_model_prefix> and whose head is
    self.lm_head (None when tie_word_embeddings: the logits then use the embedding matrix, so no tying is needed).

    It comes first among the class's bases so that its forward and prepare_inputs_for_generation take precedence
    over nn.Module's and GenerationMixin's."""

    def init_causal_lm(self, config, backbone: nn.Module) -> None:
        """The end of a *ForCausalLM's __init__: backbone as self.<base_model_prefix>, lm_head (None when tied: the
        logits then use the backbone's embedding matrix, and the file holds no lm_head.weight), then post_init."""
        setattr(self, self.base_model_prefix, backbone)
        self.lm_head = None if config.tie_word_embeddings else nn.Linear(config.hidden_size, config.vocab_size,
                                                                         bias=False)
        self.post_init()

    @classmethod
    def _supports_default_dynamic_cache(cls) -> bool:
        # The model keeps no cache: generate() must not build a DynamicCache and hand it to forward.
        return False

    def prepare_inputs_for_generation(self, input_ids, attention_mask=None, **kwargs):
        # No cache: every step recomputes the whole sequence, so the whole input_ids goes in.
        return {"input_ids": input_ids, "attention_mask": attention_mask}

    def get_input_embeddings(self):
        return self.base_model.get_input_embeddings()

    def set_input_embeddings(self, value):
        self.base_model.set_input_embeddings(value)

    def get_output_embeddings(self):
        return self.lm_head

    def forward(self, input_ids=None, attention_mask=None, labels=None, inputs_embeds=None,
                output_hidden_states=None, output_attentions=None, return_dict=None, num_items_in_batch=None,
                **kwargs):
        """logits (B, T, V) in float32; with labels (B, T) the next-token cross-entropy (labels[:, t+1] against
        logits[:, t], -100 ignored)."""
        unknown = sorted(k for k, v in kwargs.items() if k not in _CACHE_KWARGS and v is not None)
        if unknown:
            raise TypeError(f"{type(self).__name__}.forward: unsupported argument(s) {unknown}")
        if output_attentions:
            raise ValueError(f"{type(self).__name__}: output_attentions is not supported by canonlab's model code")
        if attention_mask is not None and not bool(attention_mask.bool().all()):
            # Positions are 0..T-1 for every row and the recurrences run over every token: padding would change
            # the result silently, so it is refused.
            raise ValueError(f"{type(self).__name__}: attention_mask with padding (zeros) is not supported; "
                             "pass unpadded sequences of equal length")
        hidden, all_hidden = self.base_model(input_ids=input_ids, inputs_embeds=inputs_embeds,
                                             output_hidden_states=bool(output_hidden_states))
        head = self.lm_head.weight if self.lm_head is not None else self.base_model.get_input_embeddings().weight
        logits = F.linear(hidden, head).float()  # (B, T, V)
        loss = None
        if labels is not None:
            V = logits.shape[-1]
            pred, target = logits[:, :-1].reshape(-1, V), labels[:, 1:].reshape(-1).to(logits.device)
            if num_items_in_batch is None:
                loss = F.cross_entropy(pred, target, ignore_index=-100)
            else:  # the Trainer's gradient accumulation: a sum over the batch, divided by its token count
                loss = F.cross_entropy(pred, target, ignore_index=-100, reduction="sum") / num_items_in_batch
        out = CausalLMOutputWithPast(loss=loss, logits=logits, hidden_states=all_hidden)
        return out if return_dict is None or return_dict else out.to_tuple()


def run_layers(embeddings: torch.Tensor, layers: nn.ModuleList, final_norm: nn.Module, output_hidden_states: bool):
    """The residual stream through the blocks and the final norm; with output_hidden_states the stream before each
    block and the normed output (Hugging Face's convention: num_hidden_layers + 1 entries)."""
    x = embeddings
    states = [] if output_hidden_states else None
    for layer in layers:
        if states is not None:
            states.append(x)
        x = layer(x)
    x = final_norm(x)
    if states is not None:
        states.append(x)
    return x, (tuple(states) if states is not None else None)


def embed(embedding: nn.Embedding, input_ids, inputs_embeds) -> torch.Tensor:
    """(B, T, C) from token ids (B, T) or given embeddings, exactly one of the two."""
    if (input_ids is None) == (inputs_embeds is None):
        raise ValueError("pass exactly one of input_ids and inputs_embeds")
    return inputs_embeds if inputs_embeds is not None else embedding(input_ids)


class CanonBackboneMixin:
    """get_input_embeddings / set_input_embeddings / forward of a *Model (the backbone): the token embedding
    self.<_embedding_attr>, the blocks self.layers, the final norm self.<_final_norm_attr>; the names are the
    format's. forward returns (hidden (B, T, C), the hidden states or None) for CausalLMMixin.

    It comes first among the class's bases so that its methods take precedence over PreTrainedModel's."""

    _embedding_attr = "embeddings"
    _final_norm_attr = "norm"

    def init_backbone(self, config, block, norm_eps: float) -> None:
        """The end of a *Model's __init__: the embedding, config.num_hidden_layers blocks from block(), the final
        RMSNorm, then post_init."""
        setattr(self, self._embedding_attr, nn.Embedding(config.vocab_size, config.hidden_size))
        self.layers = nn.ModuleList(block() for _ in range(config.num_hidden_layers))
        setattr(self, self._final_norm_attr, RMSNorm(config.hidden_size, norm_eps))
        self.post_init()

    def get_input_embeddings(self):
        return getattr(self, self._embedding_attr)

    def set_input_embeddings(self, value):
        setattr(self, self._embedding_attr, value)

    def forward(self, input_ids=None, inputs_embeds=None, output_hidden_states=False):
        return run_layers(embed(self.get_input_embeddings(), input_ids, inputs_embeds), self.layers,
                          getattr(self, self._final_norm_attr), output_hidden_states)


def softplus_inverse(x: torch.Tensor) -> torch.Tensor:
    """The dt_bias whose softplus is x (for initialising dt)."""
    return x + torch.log(-torch.expm1(-x))


def log_uniform(n: int, low: float, high: float, floor: float) -> torch.Tensor:
    """n values log-uniform in [low, high], at least floor (Mamba2's dt initialisation)."""
    dt = torch.exp(torch.rand(n) * (math.log(high) - math.log(low)) + math.log(low))
    return dt.clamp(min=floor)


class FlaCanonBlock(nn.Module):
    """The block of GLACanon and GatedDeltaNetCanon (fla's layout, names as in their files):
        x = x + attn(canonA(attn_norm(x)))      canonA only if "A" in canon_set
        x = x + mlp(canonC(mlp_norm(x)))        canonC only if "C" in canon_set; the MLP's Canon-D if "D"
    """

    def __init__(self, config, attn: nn.Module, mlp_layout: str):
        super().__init__()
        C = config.hidden_size
        inter = fla_intermediate_size(config)
        self.attn_norm = RMSNorm(C, config.norm_eps)
        self.attn = attn
        self.mlp_norm = RMSNorm(C, config.norm_eps)
        self.mlp = GatedMLP(C, inter, mlp_layout, maybe_canon("D", 2 * inter, config))
        add_canons(self, "AC", C, config)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = prenorm_residual(x, self.attn_norm, getattr(self, "canonA", None), self.attn)
        return prenorm_residual(x, self.mlp_norm, getattr(self, "canonC", None), self.mlp)


def short_convs(module: nn.Module, config, widths) -> None:
    """q_conv1d, k_conv1d, v_conv1d (no bias) when use_short_conv: fla's ShortConvolution, i.e. Canon-b."""
    if config.use_short_conv:
        for name, width in zip("qkv", widths):
            setattr(module, f"{name}_conv1d", CausalConv(width, config.conv_size))


def qkv_projections(module: nn.Module, config) -> None:
    """q_proj, k_proj (module.key_dim wide), v_proj (module.value_dim wide), no bias, and their short convs."""
    C = config.hidden_size
    widths = (module.key_dim, module.key_dim, module.value_dim)
    for name, width in zip("qkv", widths):
        setattr(module, f"{name}_proj", nn.Linear(C, width, bias=False))
    short_convs(module, config, widths)


def project_qkv(module: nn.Module, h: torch.Tensor):
    """q, k, v = SiLU(short conv(projection)) with the short convs, SiLU(projection) without (both formats)."""
    out = []
    for name in "qkv":
        t = getattr(module, f"{name}_proj")(h)
        conv = getattr(module, f"{name}_conv1d", None)
        out.append(F.silu(conv(t) if conv is not None else t))
    return out


def check_fla_config(config, letters: str) -> None:
    """The keys GLACanon and GatedDeltaNetCanon share."""
    check_canon_set(config, letters)
    require(config.hidden_act in ("swish", "silu"), config, "hidden_act", "swish (the SwiGLU MLP)")
    require(config.attn is None, config, "attn", "null (no hybrid attention layers)")
    require(getattr(config, "output_gate_rank", None) is None, config, "output_gate_rank", "null (a full-rank gate)")
    require(not getattr(config, "zeyuan_layernorm", False), config, "zeyuan_layernorm", "false")
