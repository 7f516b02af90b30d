#pragma once
// Which physical blocks each running sequence owns, and the prefix cache over them. Pure bookkeeping
// of block ids: KV numbers live in KVStorage and the caller copies them when fork() asks for it.
//
// Life of a sequence, as the scheduler drives it:
//   auto prefix = mgr.get_computed_blocks(prompt, salt);      // cached prefix, capped at n_prompt-1
//   if (!mgr.allocate_slots(seq, n_new, prefix, salt)) ...    // false = "not now", nothing changed
//   ... forward step writes K/V for the new tokens ...
//   mgr.cache_blocks(seq, all_tokens, n_computed);            // index blocks that are now full
//   ... later steps: allocate_slots(seq, n_new), cache_blocks(...) ...
//   mgr.free(seq);                                           // also what preemption does
// Blocks are indexed only after the step that computed them (cache_blocks), so another sequence can
// never hit a block whose K/V has not been written yet.
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "kv/block_hash.h"
#include "kv/block_pool.h"
#include "kv/block_table.h"

namespace kvserve {

using SeqId = int64_t;

struct KVCacheManagerConfig {
  int32_t num_blocks = 0;
  int block_size = 16;
  bool enable_prefix_caching = true;
  double prefix_cache_ttl_seconds = 0;  // 0: cached blocks never expire
  std::string model_id;                 // part of every block hash
};

// A cached prefix found for a prompt: its blocks in order, and the tokens they hold.
struct CachedPrefix {
  std::vector<int32_t> block_ids;
  int64_t num_tokens = 0;
};

// The K/V of block `src` must be copied into block `dst` (all layers) before the next step.
struct BlockCopy {
  int32_t src = -1;
  int32_t dst = -1;
  friend bool operator==(const BlockCopy&, const BlockCopy&) = default;
};

struct ForkResult {
  bool ok = false;                // false: not enough free blocks now, nothing changed
  std::optional<BlockCopy> copy;  // the copy-on-write of the parent's partial last block, if any
  explicit operator bool() const { return ok; }
};

struct PrefixCacheStats {
  uint64_t queries = 0;       // get_computed_blocks calls
  uint64_t query_tokens = 0;  // prompt tokens looked up
  uint64_t hits = 0;          // lookups that found at least one block
  uint64_t hit_tokens = 0;    // tokens served from the cache
  uint64_t evictions = 0;     // cached blocks reused for new data
  uint64_t expirations = 0;   // cached blocks dropped by the TTL
};

class KVCacheManager {
 public:
  explicit KVCacheManager(const KVCacheManagerConfig& config, KVClock clock = steady_kv_clock());

  int block_size() const { return block_size_; }
  // Most tokens one sequence could ever hold: a request needing more can never run (reject it early).
  int64_t capacity_tokens() const { return int64_t{pool_.num_blocks()} * block_size_; }
  double usage() const { return pool_.usage(); }
  int32_t num_free_blocks() const { return pool_.num_free_blocks(); }

  // Longest run of cached full blocks matching the prompt's start, capped at prompt.size()-1 tokens so
  // the last prompt token is always computed (its logits are needed). Takes no references: pass the
  // result to allocate_slots right away. Counts one query.
  CachedPrefix get_computed_blocks(std::span<const int32_t> prompt, std::string_view cache_salt = {});

  // Ensures `seq` has slots for `n_new_tokens` more tokens. The first call for a sequence creates it,
  // starting from `prefix` (from get_computed_blocks, with the same salt); later calls pass no prefix.
  // Returns false when the pool is short right now; then nothing changed. Never throws for exhaustion.
  bool allocate_slots(SeqId seq, int64_t n_new_tokens, const CachedPrefix& prefix = {},
                      std::string_view cache_salt = {});

  // Registers the sequence's blocks that are full within its first `num_computed_tokens` tokens
  // (whose K/V are written) in the prefix cache. `tokens` are the sequence's token ids so far.
  void cache_blocks(SeqId seq, std::span<const int32_t> tokens, int64_t num_computed_tokens);

  // Child shares every block of parent (ref counts go up), except the parent's partial last block,
  // which the child gets a fresh copy of (copy-on-write done eagerly: both will write into it).
  ForkResult fork(SeqId parent, SeqId child);

  // Releases the sequence's blocks, tail first, so its last blocks are evicted before its first ones
  // (a later request is likelier to share the start of a prompt than its end).
  void free(SeqId seq);

  bool has_sequence(SeqId seq) const { return seqs_.count(seq) != 0; }
  const BlockTable& block_table(SeqId seq) const;
  int64_t num_tokens(SeqId seq) const;  // tokens the sequence has slots for
  std::vector<SeqId> sequences() const;

  // Pins the cached blocks of the prompt's longest cached prefix (no cap); returns the tokens pinned.
  int64_t pin_prefix(std::span<const int32_t> tokens, std::string_view cache_salt = {});
  // Unpins them again; returns the tokens unpinned.
  int64_t unpin_prefix(std::span<const int32_t> tokens, std::string_view cache_salt = {});

  PrefixCacheStats stats() const;
  BlockPool& pool() { return pool_; }
  const BlockPool& pool() const { return pool_; }

 private:
  struct Sequence {
    BlockTable table;
    std::string cache_salt;
    int64_t num_tokens = 0;        // tokens with allocated slots
    size_t num_hashed_blocks = 0;  // leading blocks whose chained hash is known
    std::optional<BlockHash> last_hash;  // hash of block num_hashed_blocks-1 (chain parent)
  };

  Sequence& get(SeqId seq);
  const Sequence& get(SeqId seq) const;
  BlockHashExtraKeys extra_keys(std::string_view salt) const;
  // Cached blocks matching the first full blocks of tokens, at most max_blocks of them.
  std::vector<int32_t> find_cached_prefix(std::span<const int32_t> tokens, std::string_view salt, size_t max_blocks);

  int block_size_;
  std::string model_id_;
  BlockPool pool_;
  std::unordered_map<SeqId, Sequence> seqs_;
  PrefixCacheStats stats_;
};

}  // namespace kvserve
