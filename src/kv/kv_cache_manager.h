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
//
// Groups (a hybrid cache, for models with sliding-window layers beside full-attention ones): every pool
// block holds the K/V of a fixed number of layers, and the layers are split into groups of that many
// (Gemma 3 1B: its 4 global layers, then its 22 local ones as 6 groups of 4). A sequence holds one block
// table per group, all of the same length. A group with a window releases the blocks no later token can
// attend to (wholly before `window - 1` positions ahead of the next token): their table entries become
// null_block(), a block the pool never hands out, which the storage keeps zeroed. So a long sequence holds
// every block of its full-attention layers and only the last window's worth of its sliding-window ones,
// and the released blocks stay in the prefix cache until evicted. A prefix hit needs every full group's
// blocks of the prefix and each windowed group's blocks within the window before its end. A windowed
// group with attention sinks (StreamingLLM) also keeps, and a hit also needs, the blocks of its first
// `sinks` positions. A capped group (H2O) holds blocks for its first `cap` positions only.
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
  // One entry per KV-cache group: 0 = full attention, else the sliding window in positions (a token at p
  // attends to [p - window + 1, p]). Empty: one full-attention group (every layer in every block).
  std::vector<int64_t> group_windows;
  // Per group (empty: none), StreamingLLM's attention sinks of a windowed group: its first this many
  // positions stay attended however far the window has moved, so the blocks holding them are never released.
  std::vector<int64_t> group_sinks;
  // Per group (empty: none), H2O's slot budget (engine/heavy_hitter_eviction.h) of a full group: its table
  // holds real blocks for the first `cap` positions only (entries past them are null_block()), and the
  // tokens past the cap overwrite evicted slots in those. Needs the prefix cache off (what such a block
  // holds depends on the sequence's history, not on its tokens' positions), and a fork copies them all.
  std::vector<int64_t> group_caps;
  // Most tokens one step computes for one sequence (the scheduler's token budget, the prefill chunk):
  // with windowed groups, what capacity_tokens() assumes a sequence holds at once. 0: no limit.
  int64_t max_chunk_tokens = 0;
};

// A cached prefix found for a prompt: its blocks in order (group 0's; a windowed group's blocks before
// its window are the null block), and the tokens they hold.
struct CachedPrefix {
  std::vector<int32_t> block_ids;
  int64_t num_tokens = 0;
  std::vector<std::vector<int32_t>> other_groups;  // groups 1.. (as block_ids), when there are several
};

// The K/V of block `src` must be copied into block `dst` (all layers) before the next step.
struct BlockCopy {
  int32_t src = -1;
  int32_t dst = -1;
  friend bool operator==(const BlockCopy&, const BlockCopy&) = default;
};

struct ForkResult {
  bool ok = false;                // false: not enough free blocks now, nothing changed
  std::vector<BlockCopy> copies;  // the copy-on-write of the parent's partial last block (one per group), if any
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
  int num_groups() const { return static_cast<int>(windows_.size()); }
  int64_t group_window(int group) const { return windows_.at(static_cast<size_t>(group)); }
  int64_t group_sinks(int group) const { return sinks_.at(static_cast<size_t>(group)); }
  int64_t group_cap(int group) const { return caps_.at(static_cast<size_t>(group)); }
  bool has_windowed_groups() const;
  // The id windowed groups' released table entries hold: one past the pool's blocks (the storage keeps it,
  // zeroed, for the attention reads of a window's first partition).
  int32_t null_block() const { return pool_.num_blocks(); }
  // Most tokens one sequence could ever hold: a request needing more can never run (reject it early).
  // With windowed groups this assumes steps of at most max_chunk_tokens (see capacity_tokens_for_chunk).
  int64_t capacity_tokens() const { return capacity_tokens_for_chunk(max_chunk_tokens_); }
  // The same for a sequence computed `max_chunk` tokens a step at most (0: all at once).
  int64_t capacity_tokens_for_chunk(int64_t max_chunk) const;
  double usage() const { return pool_.usage(); }
  int32_t num_free_blocks() const { return pool_.num_free_blocks(); }

  // Longest run of cached full blocks matching the prompt's start, capped at prompt.size()-1 tokens so
  // the last prompt token is always computed (its logits are needed). Takes no references: pass the
  // result to allocate_slots right away. Counts one query.
  CachedPrefix get_computed_blocks(std::span<const int32_t> prompt, std::string_view cache_salt = {});

  // Ensures `seq` has slots for `n_new_tokens` more tokens. The first call for a sequence creates it,
  // starting from `prefix` (from get_computed_blocks, with the same salt); later calls pass no prefix.
  // Returns false when the pool is short right now; then nothing else changed. Never throws for
  // exhaustion. A later call takes the sequence's tokens so far as computed: its windowed groups first
  // release the blocks the new tokens cannot attend to (even when it then returns false).
  bool allocate_slots(SeqId seq, int64_t n_new_tokens, const CachedPrefix& prefix = {},
                      std::string_view cache_salt = {});

  // Registers the sequence's blocks that are full within its first `num_computed_tokens` tokens
  // (whose K/V are written) in the prefix cache. `tokens` are the sequence's token ids so far.
  void cache_blocks(SeqId seq, std::span<const int32_t> tokens, int64_t num_computed_tokens);

  // Cuts the sequence back to its first n_tokens slots (speculative tokens that were not accepted): the
  // blocks past them go back to the pool, tail first. Throws when n_tokens is more than it holds, or cuts
  // into a block already registered in the prefix cache (whose tokens are final).
  void truncate(SeqId seq, int64_t n_tokens);

  // Child shares every block of parent (ref counts go up), except the parent's partial last block,
  // which the child gets a fresh copy of (copy-on-write done eagerly: both will write into it).
  ForkResult fork(SeqId parent, SeqId child);

  // Releases the sequence's blocks, tail first, so its last blocks are evicted before its first ones
  // (a later request is likelier to share the start of a prompt than its end).
  void free(SeqId seq);

  bool has_sequence(SeqId seq) const { return seqs_.count(seq) != 0; }
  const BlockTable& block_table(SeqId seq, int group = 0) const;
  // Blocks the sequence holds now, over all groups (released ones not counted).
  int64_t num_held_blocks(SeqId seq) const;
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
    std::vector<BlockTable> tables;  // one per group, of equal length
    // Per group: entries [sink_blocks, released) are null_block() (none while released <= sink_blocks).
    std::vector<size_t> released;
    std::string cache_salt;
    int64_t num_tokens = 0;        // tokens with allocated slots
    size_t num_hashed_blocks = 0;  // leading blocks whose chained hash is known
    std::optional<BlockHash> last_hash;  // hash of block num_hashed_blocks-1 (chain parent)
  };

  Sequence& get(SeqId seq);
  const Sequence& get(SeqId seq) const;
  BlockHashExtraKeys extra_keys(std::string_view salt) const;
  // The longest cached prefix of tokens' first full blocks, at most max_blocks of them, that every group
  // can serve (see the groups note above).
  CachedPrefix find_cached_prefix(std::span<const int32_t> tokens, std::string_view salt, size_t max_blocks);
  // Ids of a prefix in every group, null ones left out.
  static std::vector<int32_t> held_ids(const CachedPrefix& prefix);
  // First logical block a token at `pos` can attend to in a group with this window (0 for full groups).
  int64_t first_needed_block(int64_t window, int64_t pos) const;
  void release_outside_window(Sequence& s);
  // Extends a table (group g) to `entries` entries: new blocks, or null_block() past a capped group's cap.
  void grow_table(size_t g, BlockTable& t, size_t entries);
  // Every group's table to `entries` entries, or false (nothing changed) when the pool is short.
  bool grow_tables(std::vector<BlockTable>& tables, size_t entries);
  // Leading blocks of group g a window never releases: those holding its sink positions.
  size_t sink_blocks(size_t g) const {
    return static_cast<size_t>((sinks_[g] + block_size_ - 1) / block_size_);
  }

  // Real entries of a capped group's table of `entries` entries (all of them in other groups).
  size_t real_entries(size_t g, size_t entries) const;

  int block_size_;
  std::vector<int64_t> windows_;
  std::vector<int64_t> sinks_;  // per group
  std::vector<int64_t> caps_;   // per group (0: none)
  int64_t max_chunk_tokens_ = 0;
  std::string model_id_;
  BlockPool pool_;
  std::unordered_map<SeqId, Sequence> seqs_;
  PrefixCacheStats stats_;
};

}  // namespace kvserve
