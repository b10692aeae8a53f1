"""GatedDeltaNetCanon's configuration (model_type "GatedDeltaNetCanon"): gated delta-rule blocks with Canon layers.

The keys are those of PhysicsLM4's GatedDeltaNetCanon format (docs/huggingface.md); absent keys take its defaults.
Keys that only choose kernels (attn_mode, fuse_norm, fuse_swiglu, fuse_cross_entropy) are kept as given and change
nothing here.
"""
from transformers import PretrainedConfig

from .canonlab_hf_layers import config_keys


class GatedDeltaNetCanonConfig(PretrainedConfig):
    model_type = "GatedDeltaNetCanon"
    keys_to_ignore_at_inference = ["past_key_values"]

    def __init__(
        self,
        vocab_size=32000,
        hidden_size=2048,
        num_hidden_layers=21,
        num_heads=6,
        head_dim=256,  # key width = num_heads * head_dim
        expand_v=2,  # value width = key width * expand_v (a whole number)
        use_gate=True,  # output gate silu(g_proj(x))
        output_gate_rank=None,
        use_short_conv=True,  # q/k/v short convs (Canon-b); without them q, k, v go through SiLU
        conv_size=4,
        norm_eps=1e-6,
        attn=None,  # hybrid attention layers: not part of this code
        intermediate_size=None,  # null: fla's 256-rounded 2/3 * hidden_ratio * hidden_size
        hidden_ratio=4,
        hidden_act="swish",
        max_position_embeddings=2048,
        initializer_range=0.02,
        use_cache=True,
        pad_token_id=None,
        bos_token_id=None,
        eos_token_id=None,
        tie_word_embeddings=False,
        zeyuan_split_init=False,
        zeyuan_layernorm=False,
        canon_set="",  # letters of A, b, B, C, D
        canon_residual=True,
        canon_activation=False,
        canon_kernel=4,
        canon_bias=False,
        **kwargs,
    ):
        super().__init__(**config_keys(self, locals()))  # the keys above become attributes
