#include "kv/kv_storage.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "core/large_buffer.h"

namespace kvserve {

KVStorage::KVStorage(const KVLayout& layout, int32_t num_blocks, bool prefault)
    : layout_(layout), num_blocks_(num_blocks) {
  layout_.validate();
  if (num_blocks <= 0) fail("kv storage: need at least one block, got {}", num_blocks);
  for (int l = 0; l < layout_.n_layers; ++l) {
    const KVCacheDType t = layout_.layer_dtypes[static_cast<size_t>(l)];
    if (kv_dtype_has_scales(t) && layout_.row_elements(l) % kKVScaleGroup != 0)
      fail("kv storage: an {} KV cache stores rows in blocks of {} values; this model's rows have {} (head size)",
           kv_dtype_name(t), kKVScaleGroup, layout_.row_elements(l));
  }
  for (int l = 0; l < layout_.n_layers; ++l) {
    const bool mla = layout_.kind == AttentionKind::MLA;
    n_heads_.push_back(mla ? 1 : layout_.kv_heads_of(l));
    head_dim_.push_back(mla ? layout_.kv_lora_rank + layout_.rope_dim : layout_.head_dim_of(l));
    block_stride_.push_back(int64_t{n_heads_.back()} * layout_.block_size * head_dim_.back());
  }
  // One zeroed allocation for every layer's K and V, on huge pages when large: attention reads blocks
  // anywhere in the pool, and on 4 KiB pages most block reads would start with a TLB miss.
  const auto blocks = static_cast<size_t>(num_blocks);
  auto array_bytes = [&](int l) { return bytes_of(l, block_stride(l) * static_cast<int64_t>(blocks)); };
  const int arrays = has_v() ? 2 : 1;
  auto record_bytes = [&](int l) {
    return layout_.eviction_records
               ? sizeof(H2OSlot) * static_cast<size_t>(n_kv_heads(l)) * static_cast<size_t>(layout_.block_size) * blocks
               : 0;
  };
  static_assert(sizeof(H2OSlot) == kHeavyHitterRecordBytes);
  bytes_ = 0;
  for (int l = 0; l < layout_.n_layers; ++l) bytes_ += arrays * array_bytes(l) + record_bytes(l);
  memory_ = allocate_large_buffer(bytes_);
  // Otherwise the first decode steps that reach each block stop in page faults (~1.5-3% of a 16-sequence
  // 1B batched run, in clear_page under the K/V stores; far more where the host backs a VM's memory
  // lazily). Not the default: a 25%-of-RAM serving pool would be resident, and take seconds, at start.
  if (prefault) prefault_pages(memory_.get(), bytes_);
  // A small pool comes from the heap, zeroed: resident already.
  const bool resident = prefault || bytes_ < kHugePageBytes;
  auto* next = reinterpret_cast<std::byte*>(memory_.get());
  // The records first, where the buffer's alignment holds for them (value arrays end on any byte).
  for (int l = 0; l < layout_.n_layers && layout_.eviction_records; ++l) {
    records_.push_back(reinterpret_cast<H2OSlot*>(next));
    committed_.push_back({next, record_bytes(l) / blocks, resident ? record_bytes(l) : 0});
    next += record_bytes(l);
  }
  for (int l = 0; l < layout_.n_layers; ++l) {
    const size_t block_bytes = bytes_of(l, block_stride(l));
    k_.push_back(next);
    committed_.push_back({next, block_bytes, resident ? array_bytes(l) : 0});
    next += array_bytes(l);
    v_.push_back(has_v() ? next : nullptr);
    if (has_v()) {
      committed_.push_back({next, block_bytes, resident ? array_bytes(l) : 0});
      next += array_bytes(l);
    }
  }
}

bool KVStorage::commit_ahead(int32_t end_block, size_t max_bytes) {
  const auto end = static_cast<size_t>(std::clamp(end_block, 0, num_blocks_));
  size_t budget = std::max<size_t>(max_bytes, 1);
  bool did = false;
  for (size_t n = 0; n < committed_.size() && budget > 0; ++n) {
    Committed& a = committed_[commit_cursor_];
    const size_t want = end * a.block_bytes;
    if (a.bytes < want) {
      const size_t piece = std::min(want - a.bytes, budget);
      prefault_pages(a.base + a.bytes, piece);
      a.bytes += piece;
      budget -= piece;
      did = true;
      if (a.bytes < want) break;  // the budget ran out inside this array: go on here next time
    }
    commit_cursor_ = (commit_cursor_ + 1) % committed_.size();
  }
  return did;
}

int32_t KVStorage::blocks_per_huge_page() const {
  size_t smallest = 0;
  for (const Committed& a : committed_)
    if (a.block_bytes > 0) smallest = smallest == 0 ? a.block_bytes : std::min(smallest, a.block_bytes);
  if (smallest == 0) return 1;
  return static_cast<int32_t>(std::max<size_t>(1, kHugePageBytes / smallest));
}

H2OSlot* KVStorage::eviction_records(int layer) {
  if (layer < 0 || layer >= layout_.n_layers)
    fail("kv storage: layer {} out of range [0, {})", layer, layout_.n_layers);
  return records_.empty() ? nullptr : records_[static_cast<size_t>(layer)];
}

KVCacheDType KVStorage::dtype(int layer) const {
  if (layer < 0 || layer >= layout_.n_layers)
    fail("kv storage: layer {} out of range [0, {})", layer, layout_.n_layers);
  return layout_.layer_dtypes[static_cast<size_t>(layer)];
}

KVElemType kv_elem_type(KVCacheDType dtype) {
  switch (dtype) {
    case KVCacheDType::F32: return KVElemType::F32;
    case KVCacheDType::F16: return KVElemType::F16;
    case KVCacheDType::BF16: return KVElemType::BF16;
    case KVCacheDType::FP8_E4M3: return KVElemType::FP8_E4M3;
    case KVCacheDType::FP8_E5M2: return KVElemType::FP8_E5M2;
    case KVCacheDType::INT8: return KVElemType::Q8_0;
    case KVCacheDType::INT4: return KVElemType::Q4_0;
  }
  fail("kv storage: unknown KV cache dtype {}", static_cast<int>(dtype));
}

size_t KVStorage::bytes_of(int layer, int64_t n) const {
  // Rows start at multiples of row_elements(), whole scale blocks for int8 and int4.
  return kv_bytes(kv_elem_type(dtype(layer)), n);
}

size_t KVStorage::bytes() const { return bytes_; }

void KVStorage::check(int layer, int32_t block) const {
  if (layer < 0 || layer >= layout_.n_layers)
    fail("kv storage: layer {} out of range [0, {})", layer, layout_.n_layers);
  if (block < 0 || block >= num_blocks_) fail("kv storage: block {} out of range [0, {})", block, num_blocks_);
}

void* KVStorage::k_layer(int layer) { return k_.at(static_cast<size_t>(layer)); }
const void* KVStorage::k_layer(int layer) const { return k_.at(static_cast<size_t>(layer)); }
void* KVStorage::v_layer(int layer) { return v_.at(static_cast<size_t>(layer)); }
const void* KVStorage::v_layer(int layer) const { return v_.at(static_cast<size_t>(layer)); }

std::byte* KVStorage::row(std::byte* arr, int layer, int32_t block, int head, int slot) const {
  const int64_t elem = block * block_stride(layer) + (int64_t{head} * layout_.block_size + slot) * head_dim(layer);
  return arr + bytes_of(layer, elem);
}

int KVStorage::n_kv_heads(int layer) const { return n_heads_.at(static_cast<size_t>(layer)); }
int KVStorage::head_dim(int layer) const { return head_dim_.at(static_cast<size_t>(layer)); }
int64_t KVStorage::block_stride(int layer) const { return block_stride_.at(static_cast<size_t>(layer)); }

namespace {

void store_row(KVCacheDType t, const float* src, int n, std::byte* dst) { encode_kv_row(kv_elem_type(t), src, n, dst); }

void load_row(KVCacheDType t, const std::byte* src, int n, float* dst) { decode_kv_row(kv_elem_type(t), src, n, dst); }

}  // namespace

void KVStorage::write(int layer, int32_t block, int slot, const float* k, const float* v) {
  check(layer, block);
  if (slot < 0 || slot >= layout_.block_size)
    fail("kv storage: slot {} out of range [0, {})", slot, layout_.block_size);
  if (!k) fail("kv storage: write needs K values");
  if (has_v() != (v != nullptr)) fail("kv storage: V values must be given exactly when the layout has V");
  const KVCacheDType t = dtype(layer);
  const int D = head_dim(layer);
  for (int h = 0; h < n_kv_heads(layer); ++h) {
    store_row(t, k + static_cast<size_t>(h) * D, D, row(k_[static_cast<size_t>(layer)], layer, block, h, slot));
    if (v) store_row(t, v + static_cast<size_t>(h) * D, D, row(v_[static_cast<size_t>(layer)], layer, block, h, slot));
  }
}

void KVStorage::read(int layer, int32_t block, int slot, float* k, float* v) const {
  check(layer, block);
  if (slot < 0 || slot >= layout_.block_size)
    fail("kv storage: slot {} out of range [0, {})", slot, layout_.block_size);
  const KVCacheDType t = dtype(layer);
  const int D = head_dim(layer);
  for (int h = 0; h < n_kv_heads(layer); ++h) {
    load_row(t, row(k_[static_cast<size_t>(layer)], layer, block, h, slot), D, k + static_cast<size_t>(h) * D);
    if (has_v() && v)
      load_row(t, row(v_[static_cast<size_t>(layer)], layer, block, h, slot), D, v + static_cast<size_t>(h) * D);
  }
}

void KVStorage::copy_block(int32_t src, int32_t dst) {
  for (int l = 0; l < layout_.n_layers; ++l) {
    check(l, src);
    check(l, dst);
    const size_t n = bytes_of(l, block_stride(l));
    std::byte* k = k_[static_cast<size_t>(l)];
    std::memcpy(k + static_cast<size_t>(dst) * n, k + static_cast<size_t>(src) * n, n);
    if (has_v()) {
      std::byte* v = v_[static_cast<size_t>(l)];
      std::memcpy(v + static_cast<size_t>(dst) * n, v + static_cast<size_t>(src) * n, n);
    }
    if (!records_.empty()) {
      const size_t per_block = static_cast<size_t>(n_kv_heads(l)) * static_cast<size_t>(layout_.block_size);
      H2OSlot* r = records_[static_cast<size_t>(l)];
      std::copy_n(r + static_cast<size_t>(src) * per_block, per_block, r + static_cast<size_t>(dst) * per_block);
    }
  }
}

}  // namespace kvserve
