#include "kv/kv_storage.h"

#include <algorithm>

#include "core/error.h"

namespace kvserve {

KVStorage::KVStorage(const KVLayout& layout, int32_t num_blocks) : layout_(layout), num_blocks_(num_blocks) {
  layout_.validate();
  if (num_blocks <= 0) fail("kv storage: need at least one block, got {}", num_blocks);
  if (layout_.kind == AttentionKind::MLA) {
    n_heads_ = 1;
    head_dim_ = layout_.kv_lora_rank + layout_.rope_dim;
  } else {
    n_heads_ = layout_.n_kv_heads;
    head_dim_ = layout_.head_dim;
  }
  block_stride_ = int64_t{n_heads_} * layout_.block_size * head_dim_;
  const size_t per_layer = static_cast<size_t>(block_stride_) * static_cast<size_t>(num_blocks);
  k_.assign(static_cast<size_t>(layout_.n_layers), std::vector<float>(per_layer, 0.0f));
  if (has_v()) v_.assign(static_cast<size_t>(layout_.n_layers), std::vector<float>(per_layer, 0.0f));
}

size_t KVStorage::bytes() const {
  size_t n = 0;
  for (const auto& l : k_) n += l.size() * sizeof(float);
  for (const auto& l : v_) n += l.size() * sizeof(float);
  return n;
}

void KVStorage::check(int layer, int32_t block) const {
  if (layer < 0 || layer >= layout_.n_layers) fail("kv storage: layer {} out of range [0, {})", layer, layout_.n_layers);
  if (block < 0 || block >= num_blocks_) fail("kv storage: block {} out of range [0, {})", block, num_blocks_);
}

float* KVStorage::k_layer(int layer) { return k_.at(static_cast<size_t>(layer)).data(); }
const float* KVStorage::k_layer(int layer) const { return k_.at(static_cast<size_t>(layer)).data(); }
float* KVStorage::v_layer(int layer) { return has_v() ? v_.at(static_cast<size_t>(layer)).data() : nullptr; }
const float* KVStorage::v_layer(int layer) const { return has_v() ? v_.at(static_cast<size_t>(layer)).data() : nullptr; }

float* KVStorage::k_block(int layer, int32_t block) {
  check(layer, block);
  return k_layer(layer) + block * block_stride_;
}
const float* KVStorage::k_block(int layer, int32_t block) const {
  check(layer, block);
  return k_layer(layer) + block * block_stride_;
}
float* KVStorage::v_block(int layer, int32_t block) {
  check(layer, block);
  return has_v() ? v_layer(layer) + block * block_stride_ : nullptr;
}
const float* KVStorage::v_block(int layer, int32_t block) const {
  check(layer, block);
  return has_v() ? v_layer(layer) + block * block_stride_ : nullptr;
}

void KVStorage::write(int layer, int32_t block, int slot, const float* k, const float* v) {
  check(layer, block);
  if (slot < 0 || slot >= layout_.block_size) fail("kv storage: slot {} out of range [0, {})", slot, layout_.block_size);
  if (!k) fail("kv storage: write needs K values");
  if (has_v() != (v != nullptr)) fail("kv storage: V values must be given exactly when the layout has V");
  const int bs = layout_.block_size;
  float* kb = k_block(layer, block);
  float* vb = has_v() ? v_block(layer, block) : nullptr;
  for (int h = 0; h < n_heads_; ++h) {
    const size_t dst = (static_cast<size_t>(h) * bs + slot) * head_dim_;
    std::copy_n(k + static_cast<size_t>(h) * head_dim_, head_dim_, kb + dst);
    if (vb) std::copy_n(v + static_cast<size_t>(h) * head_dim_, head_dim_, vb + dst);
  }
}

void KVStorage::copy_block(int32_t src, int32_t dst) {
  for (int l = 0; l < layout_.n_layers; ++l) {
    std::copy_n(k_block(l, src), block_stride_, k_block(l, dst));
    if (has_v()) std::copy_n(v_block(l, src), block_stride_, v_block(l, dst));
  }
}

}  // namespace kvserve
