#pragma once
// One K or V row of a new token into its cache slot, rounded to the cache's element type.
#include <cstdint>

#include "kernels/cpu/paged_attention.h"

namespace kvserve {

// Writes n floats of src at element offset elem_off of a layer's K or V array (elements of `type`).
void store_kv_row(KVElemType type, const float* src, int64_t n, void* base, int64_t elem_off);

}  // namespace kvserve
