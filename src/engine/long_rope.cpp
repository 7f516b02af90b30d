#include "engine/long_rope.h"

#include "core/error.h"

namespace kvserve {

LongRopeFactors parse_long_rope_factors(std::string_view s) {
  if (s == "auto") return LongRopeFactors::Auto;
  if (s == "short") return LongRopeFactors::Short;
  if (s == "long") return LongRopeFactors::Long;
  fail("rope factors: '{}' is not one of auto, short, long", s);
}

LongRopeFactors fixed_context_rope_factors(const ModelConfig& c, int64_t n_ctx) {
  const bool long_rope = c.rope_scaling.type == RopeScaling::Type::LongRope && n_ctx > c.rope_scaling.original_context;
  return long_rope ? LongRopeFactors::Long : LongRopeFactors::Short;
}

int64_t long_rope_after(const ModelConfig& c, LongRopeFactors mode, const StreamingEviction& streaming) {
  if (c.rope_scaling.type != RopeScaling::Type::LongRope) return -1;
  switch (mode) {
    case LongRopeFactors::Short:
      return -1;
    case LongRopeFactors::Long:
      return 0;
    case LongRopeFactors::Auto:
      break;
  }
  if (streaming.on() && streaming.sinks + streaming.window <= c.rope_scaling.original_context) return -1;
  return c.rope_scaling.original_context;
}

std::string long_rope_cache_key(std::string_view salt, int64_t long_rope_after, bool long_rope) {
  if (long_rope_after < 0) return std::string(salt);
  // Every key of such an engine carries one of two prefixes, so no tenant's salt can spell another's key.
  return std::string(long_rope ? "long-rope:" : "short-rope:") + std::string(salt);
}

}  // namespace kvserve
