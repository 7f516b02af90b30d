#pragma once
// Internal to the paged attention kernel: the per-range workers that paged_attention() dispatches to.
// The AVX2 worker lives in its own translation unit (compiled with -mavx2 -mfma) so nothing in the
// portable file can pick up AVX2 instructions by accident.
#include <cstdint>

#include "kernels/cpu/paged_attention.h"

namespace kvserve::detail {

// Computes the outputs of work items [begin, end), item = token * n_kv_heads + kv_head: every query
// head of that KV head's group for that token. Arguments are already validated.
void paged_attention_items_avx2(const PagedAttentionArgs& a, int64_t begin, int64_t end);

// The AVX2 worker's softmax exponential on one value (for tests): e^x for x <= 0.
float exp_nonpositive_avx2(float x);

}  // namespace kvserve::detail
