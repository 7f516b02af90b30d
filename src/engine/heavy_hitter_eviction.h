#pragma once
// H2O eviction (Zhang et al. 2023, "Heavy-Hitter Oracle"): each full-attention layer keeps, per KV head,
// at most `heavy + recent` tokens of a sequence: its `recent` latest ones and the `heavy` others that have
// drawn the most attention so far. When a token arrives and the budget is full, the kept token outside
// the recent ones with the least attention accumulated over every query since it was cached makes room
// for it (kernels/cpu/h2o_attention.h). Positions stay the text's, so the model's context still bounds a
// sequence, but its cache holds at most heavy + recent tokens however long it runs.
#include <cstdint>

namespace kvserve {

struct HeavyHitterEviction {
  int64_t heavy = 0;   // tokens kept for their accumulated attention
  int64_t recent = 0;  // the latest tokens, always kept (0: off)
  bool on() const { return recent > 0; }
  int64_t budget() const { return heavy + recent; }
};

}  // namespace kvserve
