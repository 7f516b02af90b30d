#include "kv/block_hash.h"

#include <xxhash.h>

#include <memory>

#include "core/error.h"

namespace kvserve {

namespace {

// Strings are length-prefixed so ("ab", "c") and ("a", "bc") hash differently.
void update_string(XXH3_state_t* st, const std::string& s) {
  const uint64_t n = s.size();
  XXH3_128bits_update(st, &n, sizeof n);
  XXH3_128bits_update(st, s.data(), s.size());
}

struct StateDeleter {
  void operator()(XXH3_state_t* st) const { XXH3_freeState(st); }
};

}  // namespace

BlockHash hash_block_tokens(const std::optional<BlockHash>& parent, std::span<const int32_t> block_tokens,
                            const BlockHashExtraKeys& extra) {
  thread_local std::unique_ptr<XXH3_state_t, StateDeleter> state(XXH3_createState());
  XXH3_state_t* st = state.get();
  if (!st || XXH3_128bits_reset(st) != XXH_OK) fail("block hash: cannot initialise XXH3 state");
  // A first block and a block whose parent hash happens to be zero must differ: hash the flag too.
  const uint8_t has_parent = parent.has_value() ? 1 : 0;
  XXH3_128bits_update(st, &has_parent, 1);
  if (parent) {
    XXH3_128bits_update(st, &parent->low, sizeof parent->low);
    XXH3_128bits_update(st, &parent->high, sizeof parent->high);
  }
  const uint64_t n = block_tokens.size();
  XXH3_128bits_update(st, &n, sizeof n);
  XXH3_128bits_update(st, block_tokens.data(), block_tokens.size_bytes());
  update_string(st, extra.cache_salt);
  update_string(st, extra.model_id);
  const XXH128_hash_t h = XXH3_128bits_digest(st);
  return BlockHash{h.low64, h.high64};
}

BlockHash group_block_hash(const BlockHash& h, int group) {
  if (group <= 0) return h;
  const uint64_t words[2] = {h.low, h.high};
  const XXH128_hash_t g = XXH3_128bits_withSeed(words, sizeof words, static_cast<XXH64_hash_t>(group));
  return BlockHash{g.low64, g.high64};
}

std::vector<BlockHash> hash_full_blocks(std::span<const int32_t> tokens, int block_size,
                                        const BlockHashExtraKeys& extra) {
  if (block_size <= 0) fail("block hash: block_size {} must be positive", block_size);
  std::vector<BlockHash> out;
  const size_t n_full = tokens.size() / static_cast<size_t>(block_size);
  out.reserve(n_full);
  std::optional<BlockHash> parent;
  for (size_t i = 0; i < n_full; ++i) {
    parent = hash_block_tokens(parent, tokens.subspan(i * block_size, block_size), extra);
    out.push_back(*parent);
  }
  return out;
}

}  // namespace kvserve
