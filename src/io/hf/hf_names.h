#pragma once
// Parameter names of canonlab's Transformer against those of Hugging Face's LlamaForCausalLM and PhysicsLM4's
// LlamaCanonForCausalLM (the same names plus canonA/canonB/canonC/canonD). Shapes are the same on both sides (both
// store PyTorch layouts: nn.Linear (out, in), the depthwise Canon conv (channels, 1, kernel)), so a tensor moves
// between the formats under its other name, bytes unchanged. The table is in docs/huggingface.md.
#include <string>

namespace canonlab {

// "layers.3.attn.q_proj.weight" -> "model.layers.3.self_attn.q_proj.weight". Throws canonlab::Error naming the
// tensor when it has no counterpart in those formats (pos_emb, a Canon norm, a dynamic Canon map, a linear mixer...).
std::string hf_tensor_name(const std::string& canonlab_name);

}  // namespace canonlab
