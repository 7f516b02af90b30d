#pragma once
// Which of LongRoPE's two factor sets a sequence rotates with (Phi-3 128k, Phi-3.5, Phi-4-mini). Hugging Face
// and vLLM pick them by the positions in play: the short ones while a sequence is within the model's original
// context, the long ones past it. llama.cpp picks once, by its context size. The K/V of a sequence rotated
// with one set are wrong for the other, so a sequence that outgrows the original context is recomputed with
// the long factors (and the prefix cache keys the two apart).
#include <cstdint>
#include <string>
#include <string_view>

#include "engine/streaming_eviction.h"
#include "model/model_config.h"

namespace kvserve {

enum class LongRopeFactors {
  Auto,   // short within the original context, long past it: every logit that of one pass over the sequence
  Short,  // always the short factors
  Long,   // always the long factors (llama.cpp with a context larger than the original one)
};

// "auto", "short" or "long" (the command lines' --rope-factors); throws Error naming the choices otherwise.
LongRopeFactors parse_long_rope_factors(std::string_view s);

// llama.cpp's choice for every sequence of a context of n_ctx positions: Long past the original context, else
// Short (what reproduces its logits, e.g. the goldens made at n_ctx 512).
LongRopeFactors fixed_context_rope_factors(const ModelConfig& c, int64_t n_ctx);

// A sequence of n tokens rotates with the long factors when n > this; -1: never (the short factors always,
// or a model without LongRoPE). Under a streaming window (engine/streaming_eviction.h) the model sees no
// distance past sinks + window - 1, so auto keeps the short factors when that fits the original context.
int64_t long_rope_after(const ModelConfig& c, LongRopeFactors mode, const StreamingEviction& streaming = {});

// The prefix-cache key of a sequence with tenant salt `salt`: when long_rope_after >= 0 both factor sets can
// occur, and every key says which one its blocks were computed with.
std::string long_rope_cache_key(std::string_view salt, int64_t long_rope_after, bool long_rope);

}  // namespace kvserve
