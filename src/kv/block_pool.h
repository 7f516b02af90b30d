#pragma once
// Every physical KV block of the process, allocated once from a count, plus the prefix-cache index over
// them. The pool manages ids and bookkeeping only; the KV numbers live in KVStorage.
//
// Free blocks sit in a doubly linked queue in eviction order (front = evicted first), linked through
// indices stored in the blocks themselves, so push, pop and removal from the middle are all O(1).
// Eviction is lazy: a block whose ref count drops to 0 keeps its hash and stays findable in the cache
// map until get_new_blocks() actually reuses it, so a later request can still hit it.
//
// Pinned cached blocks are kept out of the free queue while idle, so they are never evicted. A TTL
// (when set) makes idle unpinned cached blocks stop matching once they have been unused that long.
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include "kv/block_hash.h"

namespace kvserve {

// Seconds on some monotonic clock; injectable so TTL tests do not sleep.
using KVClock = std::function<double()>;
KVClock steady_kv_clock();

struct KVBlock {
  int32_t id = -1;
  int32_t ref_count = 0;            // number of sequences' block tables holding this block
  std::optional<BlockHash> hash;    // set once the block is full and registered in the cache map
  bool pinned = false;              // cached block kept out of eviction
  double last_used = 0;             // clock time of the last hash/touch/free, for the TTL
  // Intrusive free-queue links (block ids, -1 = none); meaningful only while in_free_queue.
  int32_t prev_free = -1;
  int32_t next_free = -1;
  bool in_free_queue = false;
};

class BlockPool {
 public:
  explicit BlockPool(int32_t num_blocks, bool enable_caching = true, KVClock clock = steady_kv_clock());

  int32_t num_blocks() const { return static_cast<int32_t>(blocks_.size()); }
  // Blocks get_new_blocks() can hand out now (never-used, freed, and evictable cached ones).
  int32_t num_free_blocks() const { return num_free_; }
  // Fraction of blocks not in the free queue (held by sequences, or pinned).
  double usage() const { return 1.0 - static_cast<double>(num_free_) / static_cast<double>(blocks_.size()); }
  const KVBlock& block(int32_t id) const;
  bool caching_enabled() const { return enable_caching_; }

  // Pops n blocks from the front of the free queue (evicting their cached hashes) with ref_count 1.
  // Callers check num_free_blocks() first; asking for more is a programming error and throws.
  std::vector<int32_t> get_new_blocks(int32_t n);

  // The cached block holding this chained hash, or nullopt (unknown, or expired by the TTL, in which
  // case its hash is dropped now). Does not take a reference.
  std::optional<int32_t> get_cached_block(const BlockHash& hash);

  // Takes one more reference on each block; an idle block leaves the free queue (cache hit).
  void touch(std::span<const int32_t> block_ids);
  // Drops one reference from each block, in the given order: blocks reaching 0 join the back of the
  // free queue in that order, so pass the block to evict first first.
  void free_blocks(std::span<const int32_t> ordered_block_ids);

  // Registers a full, held block under its chained hash. Returns false (and leaves the block unhashed)
  // if another block already holds that hash: block ids never change under a running sequence, so
  // duplicates are simply not indexed. No-op returning false when caching is disabled.
  bool cache_full_block(int32_t block_id, const BlockHash& hash);

  // Pinning: pinned cached blocks never enter the free queue, so they are never evicted or expired.
  void pin(int32_t block_id);
  void unpin(int32_t block_id);

  // Seconds of idleness after which an unpinned cached block stops matching; 0 = never.
  void set_cache_ttl(double seconds) { ttl_seconds_ = seconds; }
  double cache_ttl() const { return ttl_seconds_; }
  double now() const { return clock_(); }

  // Drops every idle block's hash (e.g. after weights change). False if any block is in use or pinned.
  bool reset_prefix_cache();

  // Free-queue order, front (next evicted) first; for tests and debugging, O(n).
  std::vector<int32_t> free_queue_order() const;
  size_t num_cached_blocks() const { return cached_.size(); }

  // One past the highest block id ever handed out. The free queue starts in id order and takes freed blocks
  // at its tail, so a new pool's blocks are first used in id order, and those past this mark never yet.
  int32_t high_water() const { return high_water_; }

  uint64_t evictions() const { return evictions_; }       // cached hashes dropped to reuse a block
  uint64_t expirations() const { return expirations_; }   // cached hashes dropped by the TTL

 private:
  KVBlock& at(int32_t id);
  void queue_push_back(KVBlock& b);
  void queue_remove(KVBlock& b);
  void drop_hash(KVBlock& b);
  bool expired(const KVBlock& b) const;

  std::vector<KVBlock> blocks_;
  int32_t free_head_ = -1;
  int32_t free_tail_ = -1;
  int32_t num_free_ = 0;
  int32_t high_water_ = 0;
  bool enable_caching_;
  KVClock clock_;
  double ttl_seconds_ = 0;
  std::unordered_map<BlockHash, int32_t, BlockHashHasher> cached_;
  uint64_t evictions_ = 0;
  uint64_t expirations_ = 0;
};

}  // namespace kvserve
