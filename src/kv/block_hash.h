#pragma once
// Content hashes of full KV blocks for prefix caching. The hash of block i chains the hash of block
// i-1, so equal hashes mean equal whole prefixes, not just equal blocks:
//     h_i = XXH3-128(h_{i-1}, tokens of block i, extra keys)
// Extra keys (cache salt, model id) go into every block, so two tenants with different salts, or two
// models, can never share a block even when their tokens agree. 128 bits make an accidental collision
// (which would leak one request's KV into another) negligible.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace kvserve {

struct BlockHash {
  uint64_t low = 0;
  uint64_t high = 0;
  friend bool operator==(const BlockHash&, const BlockHash&) = default;
};

// What besides the tokens decides whether two blocks may share KV.
struct BlockHashExtraKeys {
  std::string cache_salt;  // tenant isolation: different salts never match
  std::string model_id;    // model (and adapter) the KV was computed with
};

BlockHash hash_block_tokens(const std::optional<BlockHash>& parent, std::span<const int32_t> block_tokens,
                            const BlockHashExtraKeys& extra);

// The key of a block of KV-cache group `group` (> 0) holding the tokens whose chained hash is `h`: groups of a
// hybrid cache (sliding-window layers beside full ones) keep different layers' K/V for the same tokens in
// one pool, so each needs its own keys. Group 0 uses the chained hash itself.
BlockHash group_block_hash(const BlockHash& h, int group);

// Hashes of the full blocks of `tokens` (a trailing partial block is not hashed), chained from the start.
std::vector<BlockHash> hash_full_blocks(std::span<const int32_t> tokens, int block_size,
                                        const BlockHashExtraKeys& extra);

struct BlockHashHasher {
  size_t operator()(const BlockHash& h) const { return static_cast<size_t>(h.low ^ (h.high * 0x9E3779B97F4A7C15ull)); }
};

}  // namespace kvserve
