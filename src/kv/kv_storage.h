#pragma once
// The K and V numbers of every layer and block. Per layer, K and V are each one array laid out
// [block][kv_head][slot][head_dim], exactly what paged_attention reads (k_layer(l) is its k_cache and
// block_stride() its block_stride), so one query group reads its KV head's slots contiguously.
//
// MLA layouts store the per-token latent (kv_lora_rank + rope_dim values) as a single "head" in the K
// array and have no V array. Each layer keeps its layout dtype, as the cache element types store them
// (kernels/cpu/kv_elem.h): f32, f16, bf16, fp8 (E4M3 or E5M2; rounded to nearest even on write, attention
// widens them back to f32 as it reads), int8 as ggml's q8_0 or int4 as ggml's q4_0 (a row in blocks of
// 32 values, each block an f16 scale and the 32 values; rows must be whole blocks).
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "kernels/cpu/h2o_attention.h"
#include "kernels/cpu/kv_elem.h"
#include "kv/kv_layout.h"

namespace kvserve {

// The element type a layer of `dtype` holds.
KVElemType kv_elem_type(KVCacheDType dtype);

class KVStorage {
 public:
  // prefault: make the whole pool resident now (prefault_pages) instead of page by page as blocks are
  // first written, inside decode steps.
  KVStorage(const KVLayout& layout, int32_t num_blocks, bool prefault = false);

  const KVLayout& layout() const { return layout_; }
  int32_t num_blocks() const { return num_blocks_; }
  int n_layers() const { return layout_.n_layers; }
  // A layer's KV heads (1 for MLA) and head size (kv_lora_rank + rope_dim for MLA); layer 0's by default, where
  // every layer has the same.
  int n_kv_heads(int layer = 0) const;
  int head_dim(int layer = 0) const;
  int block_size() const { return layout_.block_size; }
  bool has_v() const { return layout_.kind == AttentionKind::MHA; }
  // Elements per block of one layer (n_kv_heads * block_size * head_dim).
  int64_t block_stride(int layer = 0) const;
  size_t bytes() const;  // memory actually held
  KVCacheDType dtype(int layer) const;

  // Start of a layer's K (V) array: elements of dtype(layer), block b at b * block_stride() elements.
  void* k_layer(int layer);
  const void* k_layer(int layer) const;
  void* v_layer(int layer);  // nullptr for MLA
  const void* v_layer(int layer) const;

  // Stores one token's K and V ([n_kv_heads][head_dim] each, as the projections produce them) into
  // `slot` of `block` for every KV head, converted to the layer's dtype. For MLA, k is the latent and v
  // must be nullptr.
  void write(int layer, int32_t block, int slot, const float* k, const float* v);
  // The inverse of write: the stored values widened to f32 (v ignored for MLA).
  void read(int layer, int32_t block, int slot, float* k, float* v) const;
  // A layer's H2O slot records, [block][kv_head][slot] (layout().eviction_records; else nullptr).
  H2OSlot* eviction_records(int layer);
  // Copy-on-write after a fork: every layer's K and V (and records) of src into dst.
  void copy_block(int32_t src, int32_t dst);

  // Commits (prefault_pages) the memory of blocks [0, end_block) in every array, at most max_bytes of it a
  // call, the arrays in turn; false once all of it is committed (nothing done). The pool is committed
  // lazily, on huge pages, in one array per layer's K and V: a step that reaches a block past what was
  // touched before stops in a fault per array (~6-8 ms each where the host backs a VM's memory lazily),
  // unless an idle engine committed those pages ahead (EngineOptions::commit_kv_ahead).
  bool commit_ahead(int32_t end_block, size_t max_bytes);
  // Blocks a huge page of the array with the smallest blocks holds (at least 1): how far ahead of the
  // blocks in use commit_ahead is worth calling.
  int32_t blocks_per_huge_page() const;

 private:
  void check(int layer, int32_t block) const;
  size_t bytes_of(int layer, int64_t n_elements) const;  // of a layer's array
  std::byte* row(std::byte* arr, int layer, int32_t block, int head, int slot) const;

  KVLayout layout_;
  int32_t num_blocks_;
  std::vector<int> n_heads_;  // per layer
  std::vector<int> head_dim_;
  std::vector<int64_t> block_stride_;
  std::shared_ptr<uint8_t[]> memory_;  // every layer's K and V arrays
  size_t bytes_ = 0;
  std::vector<std::byte*> k_;  // per layer, into memory_
  std::vector<std::byte*> v_;  // per layer (nullptr for MLA)
  std::vector<H2OSlot*> records_;  // per layer, when the layout keeps them
  // Every array (records, K, V) with its bytes per block and how much of it commit_ahead committed.
  struct Committed {
    std::byte* base;
    size_t block_bytes;
    size_t bytes = 0;
  };
  std::vector<Committed> committed_;
  size_t commit_cursor_ = 0;  // the array commit_ahead goes on with
};

}  // namespace kvserve
