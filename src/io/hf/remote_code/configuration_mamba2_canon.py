"""Mamba2Canon's configuration (model_type "Mamba2Canon"): Mamba2 (SSD) blocks with Canon layers and an optional MLP.

The keys are those of PhysicsLM4's Mamba2Canon format (docs/huggingface.md), Hugging Face's Mamba2Config plus the
Canon keys, noconv1d and mlp_type; absent keys take the defaults below. chunk_size only chooses a kernel's chunking.
"""
from transformers import PretrainedConfig

from .canonlab_hf_layers import config_keys


class Mamba2CanonConfig(PretrainedConfig):
    model_type = "Mamba2Canon"

    def __init__(
        self,
        vocab_size=32768,
        hidden_size=4096,
        num_hidden_layers=64,
        num_heads=128,  # SSM heads: num_heads * head_dim = expand * hidden_size
        head_dim=64,
        state_size=128,
        expand=2,
        n_groups=8,  # B and C are shared by num_heads / n_groups heads each
        conv_kernel=4,
        use_conv_bias=True,
        noconv1d=False,  # true: the conv over x, B, C is the identity (no kernel, no bias, no SiLU)
        use_bias=False,  # in_proj and out_proj biases
        hidden_act="silu",
        layer_norm_epsilon=1e-5,
        rms_norm=True,
        residual_in_fp32=True,
        rescale_prenorm_residual=False,
        time_step_min=0.001,  # dt initialisation only
        time_step_max=0.1,
        time_step_floor=1e-4,
        time_step_limit=(0.0, float("inf")),  # dt is clamped to it
        chunk_size=256,
        mlp_type=None,  # null: no MLP; "mlp10": pre_mlp_layernorm + gated MLP (both_proj) after every mixer
        intermediate_size=None,  # null: 2 * hidden_size
        max_position_embeddings=2048,
        initializer_range=0.02,
        use_cache=True,
        pad_token_id=None,
        bos_token_id=None,
        eos_token_id=None,
        tie_word_embeddings=False,
        canon_set="",  # letters of A, b, B, C, D (b: the conv1d over x, B, C)
        canon_residual=True,
        canon_activation=False,
        canon_kernel=4,
        canon_bias=False,
        **kwargs,
    ):
        super().__init__(**config_keys(self, locals()))  # the keys above become attributes
