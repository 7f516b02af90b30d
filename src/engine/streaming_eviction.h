#pragma once
// StreamingLLM eviction (Xiao et al. 2023; kernels/cpu/attention_sinks.h): the full-attention layers attend
// to the first `sinks` positions of a sequence and its last `window` ones only, and the paged cache keeps
// only the blocks holding those (KVCacheManager's windowed groups with sinks), so a sequence's memory stays
// bounded however long it runs, and the model sees no position past sinks + window - 1.
#include <cstdint>

namespace kvserve {

struct StreamingEviction {
  int64_t window = 0;  // 0: off
  int64_t sinks = 0;
  bool on() const { return window > 0; }
};

// What a sequence may grow to under streaming when no limit is given: no practical limit (positions stay
// exact in the float RoPE angles to about 10^5 tokens, past which rounding grows as llama.cpp's does).
inline constexpr int64_t kStreamingContextLimit = int64_t{1} << 40;

}  // namespace kvserve
