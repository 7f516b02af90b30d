#pragma once
// The K and V numbers of every layer and block. Per layer, K and V are each one array laid out
// [block][kv_head][slot][head_dim], exactly what paged_attention reads (k_layer(l) is its k_cache and
// block_stride() its block_stride), so one query group reads its KV head's slots contiguously.
//
// MLA layouts store the per-token latent (kv_lora_rank + rope_dim values) as a single "head" in the K
// array and have no V array. Values are kept in f32 whatever the layout's dtype: f16/bf16/quantized
// storage will come with kernels that read it; the layout already sizes the budget for it.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "kv/kv_layout.h"

namespace kvserve {

class KVStorage {
 public:
  KVStorage(const KVLayout& layout, int32_t num_blocks);

  const KVLayout& layout() const { return layout_; }
  int32_t num_blocks() const { return num_blocks_; }
  int n_layers() const { return layout_.n_layers; }
  int n_kv_heads() const { return n_heads_; }  // 1 for MLA
  int head_dim() const { return head_dim_; }   // kv_lora_rank + rope_dim for MLA
  int block_size() const { return layout_.block_size; }
  bool has_v() const { return layout_.kind == AttentionKind::MHA; }
  // Floats per block of one layer (n_kv_heads * block_size * head_dim).
  int64_t block_stride() const { return block_stride_; }
  size_t bytes() const;  // memory actually held

  float* k_layer(int layer);
  const float* k_layer(int layer) const;
  float* v_layer(int layer);  // nullptr for MLA
  const float* v_layer(int layer) const;
  float* k_block(int layer, int32_t block);
  const float* k_block(int layer, int32_t block) const;
  float* v_block(int layer, int32_t block);
  const float* v_block(int layer, int32_t block) const;

  // Stores one token's K and V ([n_kv_heads][head_dim] each, as the projections produce them) into
  // `slot` of `block` for every KV head. For MLA, k is the latent and v must be nullptr.
  void write(int layer, int32_t block, int slot, const float* k, const float* v);
  // Copy-on-write after a fork: every layer's K and V of src into dst.
  void copy_block(int32_t src, int32_t dst);

 private:
  void check(int layer, int32_t block) const;

  KVLayout layout_;
  int32_t num_blocks_;
  int n_heads_;
  int head_dim_;
  int64_t block_stride_;
  std::vector<std::vector<float>> k_;  // per layer
  std::vector<std::vector<float>> v_;  // per layer (empty for MLA)
};

}  // namespace kvserve
