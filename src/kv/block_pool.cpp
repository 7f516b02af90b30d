#include "kv/block_pool.h"

#include <chrono>

#include "core/error.h"

namespace kvserve {

KVClock steady_kv_clock() {
  return [] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
  };
}

BlockPool::BlockPool(int32_t num_blocks, bool enable_caching, KVClock clock)
    : enable_caching_(enable_caching), clock_(clock ? std::move(clock) : steady_kv_clock()) {
  if (num_blocks <= 0) fail("block pool: need at least one block, got {}", num_blocks);
  blocks_.resize(static_cast<size_t>(num_blocks));
  // Initial queue order is by id, so a fresh pool hands out 0, 1, 2, ...
  for (int32_t i = 0; i < num_blocks; ++i) {
    blocks_[i].id = i;
    queue_push_back(blocks_[i]);
  }
}

const KVBlock& BlockPool::block(int32_t id) const {
  if (id < 0 || id >= num_blocks()) fail("block pool: block id {} out of range [0, {})", id, num_blocks());
  return blocks_[static_cast<size_t>(id)];
}

KVBlock& BlockPool::at(int32_t id) { return const_cast<KVBlock&>(static_cast<const BlockPool&>(*this).block(id)); }

void BlockPool::queue_push_back(KVBlock& b) {
  b.prev_free = free_tail_;
  b.next_free = -1;
  if (free_tail_ >= 0)
    blocks_[free_tail_].next_free = b.id;
  else
    free_head_ = b.id;
  free_tail_ = b.id;
  b.in_free_queue = true;
  ++num_free_;
}

void BlockPool::queue_remove(KVBlock& b) {
  if (b.prev_free >= 0)
    blocks_[b.prev_free].next_free = b.next_free;
  else
    free_head_ = b.next_free;
  if (b.next_free >= 0)
    blocks_[b.next_free].prev_free = b.prev_free;
  else
    free_tail_ = b.prev_free;
  b.prev_free = b.next_free = -1;
  b.in_free_queue = false;
  --num_free_;
}

void BlockPool::drop_hash(KVBlock& b) {
  if (!b.hash) return;
  auto it = cached_.find(*b.hash);
  if (it != cached_.end() && it->second == b.id) cached_.erase(it);
  b.hash.reset();
}

bool BlockPool::expired(const KVBlock& b) const {
  return ttl_seconds_ > 0 && !b.pinned && b.ref_count == 0 && clock_() - b.last_used > ttl_seconds_;
}

std::vector<int32_t> BlockPool::get_new_blocks(int32_t n) {
  if (n < 0) fail("block pool: cannot allocate {} blocks", n);
  if (n > num_free_) fail("block pool: asked for {} blocks with only {} free (check num_free_blocks first)", n, num_free_);
  std::vector<int32_t> out;
  out.reserve(static_cast<size_t>(n));
  for (int32_t i = 0; i < n; ++i) {
    KVBlock& b = blocks_[free_head_];
    queue_remove(b);
    if (b.hash) {
      drop_hash(b);  // the lazily kept cache entry dies only now, when the block is reused
      ++evictions_;
    }
    b.ref_count = 1;
    b.last_used = clock_();
    high_water_ = std::max(high_water_, b.id + 1);
    out.push_back(b.id);
  }
  return out;
}

std::optional<int32_t> BlockPool::get_cached_block(const BlockHash& hash) {
  if (!enable_caching_) return std::nullopt;
  auto it = cached_.find(hash);
  if (it == cached_.end()) return std::nullopt;
  KVBlock& b = blocks_[it->second];
  if (expired(b)) {
    drop_hash(b);  // stays in the free queue where it was; only its cache entry goes
    ++expirations_;
    return std::nullopt;
  }
  return b.id;
}

void BlockPool::touch(std::span<const int32_t> block_ids) {
  const double t = clock_();
  for (int32_t id : block_ids) {
    KVBlock& b = at(id);
    if (b.in_free_queue) queue_remove(b);
    ++b.ref_count;
    b.last_used = t;
  }
}

void BlockPool::free_blocks(std::span<const int32_t> ordered_block_ids) {
  const double t = clock_();
  for (int32_t id : ordered_block_ids) {
    KVBlock& b = at(id);
    if (b.ref_count <= 0) fail("block pool: block {} freed more often than it was taken", id);
    b.last_used = t;
    if (--b.ref_count == 0 && !b.pinned) queue_push_back(b);
  }
}

bool BlockPool::cache_full_block(int32_t block_id, const BlockHash& hash) {
  if (!enable_caching_) return false;
  KVBlock& b = at(block_id);
  if (b.ref_count <= 0) fail("block pool: cannot cache idle block {}", block_id);
  if (b.hash) return *b.hash == hash;  // already registered (a block shared after fork)
  auto [it, inserted] = cached_.try_emplace(hash, block_id);
  if (!inserted) {
    // The indexed block may be expired; then the fresh block takes its place.
    KVBlock& old = blocks_[it->second];
    if (!expired(old)) return false;
    old.hash.reset();
    ++expirations_;
    it->second = block_id;
  }
  b.hash = hash;
  b.last_used = clock_();
  return true;
}

void BlockPool::pin(int32_t block_id) {
  KVBlock& b = at(block_id);
  if (!b.hash) fail("block pool: only cached blocks can be pinned (block {})", block_id);
  if (b.pinned) return;
  b.pinned = true;
  if (b.in_free_queue) queue_remove(b);
}

void BlockPool::unpin(int32_t block_id) {
  KVBlock& b = at(block_id);
  if (!b.pinned) return;
  b.pinned = false;
  b.last_used = clock_();
  if (b.ref_count == 0) queue_push_back(b);  // idle again: evictable, most recently used
}

bool BlockPool::reset_prefix_cache() {
  for (const KVBlock& b : blocks_)
    if (b.ref_count > 0 || b.pinned) return false;
  for (KVBlock& b : blocks_) b.hash.reset();
  cached_.clear();
  return true;
}

std::vector<int32_t> BlockPool::free_queue_order() const {
  std::vector<int32_t> out;
  out.reserve(static_cast<size_t>(num_free_));
  for (int32_t id = free_head_; id >= 0; id = blocks_[id].next_free) out.push_back(id);
  return out;
}

}  // namespace kvserve
