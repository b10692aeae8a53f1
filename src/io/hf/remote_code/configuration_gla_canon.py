"""GLACanon's configuration (model_type "GLACanon"): gated linear attention blocks with Canon layers.

The keys are those of PhysicsLM4's GLACanon format (docs/huggingface.md); absent keys take fla's GLAConfig defaults.
Keys that only choose kernels (attn_mode, fuse_norm, fuse_swiglu, fuse_cross_entropy, use_l2warp) are kept as given and
change nothing here.
"""
from transformers import PretrainedConfig

from .canonlab_hf_layers import config_keys


class GLACanonConfig(PretrainedConfig):
    model_type = "GLACanon"
    keys_to_ignore_at_inference = ["past_key_values"]

    def __init__(
        self,
        vocab_size=32000,
        hidden_size=2048,
        num_hidden_layers=24,
        expand_k=0.5,  # key width = int(hidden_size * expand_k)
        expand_v=1.0,  # value width = int(hidden_size * expand_v)
        num_heads=4,
        num_kv_heads=None,  # null: num_heads
        feature_map=None,  # null, "relu" or "swish", on q and k
        use_short_conv=False,  # q/k/v short convs (Canon-b); without them q, k, v go through SiLU
        conv_size=4,
        use_output_gate=True,
        output_gate_rank=None,
        clamp_min=None,  # lower bound of the log forget gate
        elementwise_affine=True,
        norm_eps=1e-6,
        use_gk=True,
        use_gv=False,
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
        canon_set="",  # letters of A, b, C, D (b: the q/k/v short convs, with use_short_conv)
        canon_residual=True,
        canon_activation=False,
        canon_kernel=4,
        canon_bias=False,
        **kwargs,
    ):
        super().__init__(**config_keys(self, locals()))  # the keys above become attributes
