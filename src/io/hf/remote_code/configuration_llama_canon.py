"""LlamaCanon's configuration (model_type "LlamaCanon"): a Llama decoder with Canon layers A/B/C/D and partial RoPE.

The keys are those of PhysicsLM4's LlamaCanon format (docs/huggingface.md), so a config.json written for either code
reads the same; absent keys take the defaults below.
"""
from transformers import PretrainedConfig

from .canonlab_hf_layers import config_keys


class LlamaCanonConfig(PretrainedConfig):
    model_type = "LlamaCanon"
    keys_to_ignore_at_inference = ["past_key_values"]

    def __init__(
        self,
        vocab_size=32000,
        hidden_size=4096,
        intermediate_size=None,  # null: hidden_size * 8 // 3
        num_hidden_layers=32,
        num_attention_heads=32,
        num_key_value_heads=None,  # null: num_attention_heads; fewer: grouped-query attention
        head_dim=None,  # null: hidden_size // num_attention_heads
        hidden_act="silu",
        max_position_embeddings=2048,
        initializer_range=0.02,
        rms_norm_eps=1e-6,
        use_cache=True,
        pad_token_id=None,
        bos_token_id=None,
        eos_token_id=None,
        pretraining_tp=1,
        tie_word_embeddings=False,
        # transformers 5 reads rope_parameters = {rope_type, rope_theta}, 4 rope_theta (and rope_scaling, which is left
        # to PretrainedConfig: transformers 5 folds it into rope_parameters); where both are given they must agree.
        rope_theta=10000.0,
        attention_bias=False,  # q, k, v and o projections
        attention_dropout=0.0,
        mlp_bias=False,
        rope_dim=None,  # null or 0: full RoPE; else rotate the first rope_dim dims of each head
        rope_version="huggingface",  # rotate-half pairs (i, i + rope_dim/2)
        qk_norm=False,
        canon_set="",  # letters of ABCD
        canon_residual=True,
        canon_activation=False,  # SiLU after the conv
        canon_kernel=4,
        canon_bias=False,
        **kwargs,
    ):
        super().__init__(**config_keys(self, locals()))  # the keys above become attributes
