#pragma once
// One K or V row of a new token into its cache slot, rounded to the cache's element type.
#include <cstddef>
#include <cstdint>

#include "kernels/cpu/paged_attention.h"

namespace kvserve {

// Writes n floats of src at element offset elem_off of a layer's K or V array (elements of `type`).
void store_kv_row(KVElemType type, const float* src, int64_t n, void* base, int64_t elem_off);
// Where store_kv_row writes such a row, and how many bytes.
void* kv_row_address(KVElemType type, void* base, int64_t elem_off);
size_t kv_row_bytes(KVElemType type, int64_t n);

}  // namespace kvserve
