#include "kv/kv_cache_manager.h"

#include <algorithm>

#include "core/error.h"

namespace kvserve {

namespace {
int64_t blocks_for_tokens(int64_t n_tokens, int block_size) { return (n_tokens + block_size - 1) / block_size; }
}  // namespace

KVCacheManager::KVCacheManager(const KVCacheManagerConfig& config, KVClock clock)
    : block_size_(config.block_size),
      model_id_(config.model_id),
      pool_(config.num_blocks, config.enable_prefix_caching, std::move(clock)) {
  if (config.block_size <= 0) fail("kv cache: block size {} must be positive", config.block_size);
  if (config.prefix_cache_ttl_seconds < 0)
    fail("kv cache: prefix cache TTL {} s must not be negative", config.prefix_cache_ttl_seconds);
  pool_.set_cache_ttl(config.prefix_cache_ttl_seconds);
}

KVCacheManager::Sequence& KVCacheManager::get(SeqId seq) {
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) fail("kv cache: unknown sequence {}", seq);
  return it->second;
}

const KVCacheManager::Sequence& KVCacheManager::get(SeqId seq) const {
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) fail("kv cache: unknown sequence {}", seq);
  return it->second;
}

const BlockTable& KVCacheManager::block_table(SeqId seq) const { return get(seq).table; }
int64_t KVCacheManager::num_tokens(SeqId seq) const { return get(seq).num_tokens; }

std::vector<SeqId> KVCacheManager::sequences() const {
  std::vector<SeqId> out;
  out.reserve(seqs_.size());
  for (const auto& [id, s] : seqs_) out.push_back(id);
  std::sort(out.begin(), out.end());
  return out;
}

BlockHashExtraKeys KVCacheManager::extra_keys(std::string_view salt) const {
  return BlockHashExtraKeys{std::string(salt), model_id_};
}

std::vector<int32_t> KVCacheManager::find_cached_prefix(std::span<const int32_t> tokens, std::string_view salt,
                                                        size_t max_blocks) {
  std::vector<int32_t> found;
  if (!pool_.caching_enabled()) return found;
  const BlockHashExtraKeys extra = extra_keys(salt);
  const size_t n_blocks = std::min(max_blocks, tokens.size() / static_cast<size_t>(block_size_));
  std::optional<BlockHash> parent;
  for (size_t i = 0; i < n_blocks; ++i) {
    parent = hash_block_tokens(parent, tokens.subspan(i * block_size_, block_size_), extra);
    const std::optional<int32_t> id = pool_.get_cached_block(*parent);
    if (!id) break;  // chained hashes: nothing after a miss can match
    found.push_back(*id);
  }
  return found;
}

CachedPrefix KVCacheManager::get_computed_blocks(std::span<const int32_t> prompt, std::string_view cache_salt) {
  ++stats_.queries;
  stats_.query_tokens += prompt.size();
  CachedPrefix prefix;
  if (prompt.size() <= 1) return prefix;
  // Cap at n_prompt - 1 tokens: the last prompt token must run through the model for its logits.
  const size_t max_blocks = (prompt.size() - 1) / static_cast<size_t>(block_size_);
  prefix.block_ids = find_cached_prefix(prompt, cache_salt, max_blocks);
  prefix.num_tokens = static_cast<int64_t>(prefix.block_ids.size()) * block_size_;
  if (!prefix.block_ids.empty()) {
    ++stats_.hits;
    stats_.hit_tokens += static_cast<uint64_t>(prefix.num_tokens);
  }
  return prefix;
}

bool KVCacheManager::allocate_slots(SeqId seq, int64_t n_new_tokens, const CachedPrefix& prefix,
                                    std::string_view cache_salt) {
  if (n_new_tokens < 0) fail("kv cache: cannot allocate {} tokens", n_new_tokens);
  auto it = seqs_.find(seq);
  if (it != seqs_.end()) {
    if (!prefix.block_ids.empty()) fail("kv cache: sequence {} already exists; a prefix is only for a new one", seq);
    Sequence& s = it->second;
    const int64_t need = blocks_for_tokens(s.num_tokens + n_new_tokens, block_size_) - static_cast<int64_t>(s.table.size());
    if (need > pool_.num_free_blocks()) return false;
    if (need > 0) s.table.append(pool_.get_new_blocks(static_cast<int32_t>(need)));
    s.num_tokens += n_new_tokens;
    return true;
  }

  if (prefix.num_tokens != static_cast<int64_t>(prefix.block_ids.size()) * block_size_)
    fail("kv cache: prefix of {} blocks claims {} tokens", prefix.block_ids.size(), prefix.num_tokens);
  // Hit blocks that sit idle in the free queue leave it when touched, so they count against the free
  // blocks exactly like new ones.
  int64_t idle_hits = 0;
  for (int32_t id : prefix.block_ids) {
    const KVBlock& b = pool_.block(id);
    if (!b.hash) fail("kv cache: prefix block {} is no longer cached; call allocate_slots right after lookup", id);
    if (b.in_free_queue) ++idle_hits;
  }
  const int64_t need =
      blocks_for_tokens(prefix.num_tokens + n_new_tokens, block_size_) - static_cast<int64_t>(prefix.block_ids.size());
  if (need + idle_hits > pool_.num_free_blocks()) return false;
  // Touch before allocating: otherwise get_new_blocks could evict the very blocks we are reusing.
  pool_.touch(prefix.block_ids);
  Sequence s;
  s.table.append(prefix.block_ids);
  if (need > 0) s.table.append(pool_.get_new_blocks(static_cast<int32_t>(need)));
  s.cache_salt = std::string(cache_salt);
  s.num_tokens = prefix.num_tokens + n_new_tokens;
  s.num_hashed_blocks = prefix.block_ids.size();
  if (!prefix.block_ids.empty()) s.last_hash = pool_.block(prefix.block_ids.back()).hash;
  seqs_.emplace(seq, std::move(s));
  return true;
}

void KVCacheManager::cache_blocks(SeqId seq, std::span<const int32_t> tokens, int64_t num_computed_tokens) {
  Sequence& s = get(seq);
  if (!pool_.caching_enabled()) return;
  const int64_t n = std::min<int64_t>({num_computed_tokens, static_cast<int64_t>(tokens.size()), s.num_tokens});
  const size_t n_full = static_cast<size_t>(std::max<int64_t>(n, 0) / block_size_);
  const BlockHashExtraKeys extra = extra_keys(s.cache_salt);
  for (size_t i = s.num_hashed_blocks; i < n_full; ++i) {
    const BlockHash h = hash_block_tokens(s.last_hash, tokens.subspan(i * block_size_, block_size_), extra);
    pool_.cache_full_block(s.table[i], h);  // a duplicate of an indexed block just stays unindexed
    s.last_hash = h;
    s.num_hashed_blocks = i + 1;
  }
}

ForkResult KVCacheManager::fork(SeqId parent, SeqId child) {
  if (seqs_.count(child)) fail("kv cache: fork target sequence {} already exists", child);
  const Sequence& p = get(parent);
  const bool partial_tail = !p.table.empty() && p.num_tokens % block_size_ != 0;
  if (partial_tail && pool_.num_free_blocks() < 1) return {};
  Sequence c;
  c.cache_salt = p.cache_salt;
  c.num_tokens = p.num_tokens;
  const size_t n_shared = p.table.size() - (partial_tail ? 1 : 0);
  std::vector<int32_t> shared(p.table.ids().begin(), p.table.ids().begin() + static_cast<std::ptrdiff_t>(n_shared));
  pool_.touch(shared);
  c.table.append(shared);
  ForkResult result;
  result.ok = true;
  if (partial_tail) {
    const int32_t dst = pool_.get_new_blocks(1).front();
    c.table.append(dst);
    result.copy = BlockCopy{p.table.back(), dst};
  }
  c.num_hashed_blocks = std::min(p.num_hashed_blocks, n_shared);
  c.last_hash = p.last_hash;
  seqs_.emplace(child, std::move(c));
  return result;
}

void KVCacheManager::free(SeqId seq) {
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) fail("kv cache: unknown sequence {}", seq);
  std::vector<int32_t> reversed(it->second.table.ids().rbegin(), it->second.table.ids().rend());
  seqs_.erase(it);
  pool_.free_blocks(reversed);
}

int64_t KVCacheManager::pin_prefix(std::span<const int32_t> tokens, std::string_view cache_salt) {
  const std::vector<int32_t> blocks = find_cached_prefix(tokens, cache_salt, tokens.size());
  for (int32_t id : blocks) pool_.pin(id);
  return static_cast<int64_t>(blocks.size()) * block_size_;
}

int64_t KVCacheManager::unpin_prefix(std::span<const int32_t> tokens, std::string_view cache_salt) {
  const std::vector<int32_t> blocks = find_cached_prefix(tokens, cache_salt, tokens.size());
  // Unpin tail first so the prefix's last blocks are evicted before its first ones.
  for (auto id = blocks.rbegin(); id != blocks.rend(); ++id) pool_.unpin(*id);
  return static_cast<int64_t>(blocks.size()) * block_size_;
}

PrefixCacheStats KVCacheManager::stats() const {
  PrefixCacheStats s = stats_;
  s.evictions = pool_.evictions();
  s.expirations = pool_.expirations();
  return s;
}

}  // namespace kvserve
