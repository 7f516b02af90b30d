#pragma once
// The fused expert tensors of Hugging Face checkpoints: gpt-oss's, Llama 4's and Gemma 4's.
//
// gpt-oss's mixture of experts as its Hugging Face checkpoints hold it (transformers' GptOssExperts): the router
// (mlp.router.weight / .bias); every expert's gate and up fused in mlp.experts.gate_up_proj, their output columns
// interleaved (gate 2i, up 2i + 1), and down_proj, with biases. The published checkpoints keep the two
// projections as MXFP4 (gate_up_proj_blocks / _scales [experts][rows][blocks][16 bytes | 1 byte]: a block's byte
// j holds elements 2j (low nibble) and 2j + 1); a folder saved dequantized keeps them as [experts][in][out]
// matrices. Both become one weight per expert in llama.cpp's layout (MXFP4 blocks as GGUF holds them).
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "model/model.h"
#include "model/safetensors.h"

namespace kvserve {

// The buffer for an expert's MXFP4 blocks repacked from the checkpoint (`bytes` bytes of `rows` rows). Where the
// AVX2 kernels will read the weight from its interleaved copy (repack_weights_for_cpu), this row-major copy is
// read again only for its last rows (fewer than 8) and by scalar paths: a big one goes to a temporary file's
// pages, which the kernel may drop, rather than memory of its own (gpt-oss-20b's experts: 12 GB).
std::shared_ptr<uint8_t[]> mxfp4_weight_buffer(size_t bytes, int64_t rows);

// Fills L's router, experts and expert biases from the tensors under `mlp` ("model.layers.N.mlp."); their
// buffers go to m.storage. Throws Error naming a tensor that is missing or misshapen.
void load_gpt_oss_experts(const SafetensorsModel& weights, const std::string& mlp, const ModelConfig& c,
                          LayerWeights& L, Model& m);

// Llama 4's (transformers' Llama4TextExperts), under `ff` ("model.layers.N.feed_forward."): router.weight, and
// experts.gate_up_proj [experts][hidden][2 * width] (gate's columns, then up's) and experts.down_proj
// [experts][width][hidden], both as x @ W: each expert's three become weights in llama.cpp's layout, in the
// checkpoint's own float type (BF16 for Meta's).
void load_llama4_experts(const SafetensorsModel& weights, const std::string& ff, const ModelConfig& c, LayerWeights& L,
                         Model& m);

// Gemma 4's (transformers' Gemma4TextRouter and Gemma4TextExperts), under `layer` ("model.layers.N."): router.proj
// (the router's weight), router.scale (its input's scale per dimension), router.per_expert_scale (each expert's
// output scale), experts.gate_up_proj [experts][2 * width][hidden] (gate's rows, then up's) and experts.down_proj
// [experts][hidden][width]: llama.cpp's layout already, so each expert's weights are views of the checkpoint's rows.
void load_gemma4_experts(const SafetensorsModel& weights, const std::string& layer, const ModelConfig& c,
                         LayerWeights& L, Model& m);

}  // namespace kvserve
