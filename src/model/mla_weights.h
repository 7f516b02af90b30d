#pragma once
// What the GGUF and Hugging Face loaders share for DeepSeek-V2's multi-head latent attention: the split of a
// kv_b projection into the absorbed form the forward pass runs, and the attention scale.
#include <memory>
#include <string>
#include <vector>

#include "model/model.h"

namespace kvserve {

// kv_b ([heads x (nope + head_dim_v)] rows of kv_lora_rank: per head, the key's nope rows then the value's
// rows; HF's kv_b_proj, older GGUF files' attn_kv_b) into L.wk_b and L.wv_b: each head's value rows as a
// view, its key rows transposed into an F32 copy ([kv_lora_rank rows x nope], which q's nope part
// multiplies), kept alive in `owned`. `name` (the tensor's) prefixes the views' names; a wrong shape throws
// Error naming `where` (the file) and it.
void split_kv_b(const Tensor& kv_b, const ModelConfig& c, const std::string& where, const std::string& name,
                LayerWeights& L, std::vector<std::shared_ptr<const void>>& owned);

// DeepSeek-V2's attention scale, as llama.cpp's deepseek2 graph and transformers' DeepSeek models:
// 1/sqrt(head_dim) times mscale^2, where with YaRN mscale = (attn_factor * (1 + 0.1 ln factor)) *
// (1 + 0.1 mscale_all_dim ln factor) (1 without).
float deepseek2_attn_scale(const ModelConfig& c);

}  // namespace kvserve
