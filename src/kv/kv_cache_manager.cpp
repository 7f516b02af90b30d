#include "kv/kv_cache_manager.h"

#include <algorithm>
#include <limits>

#include "core/error.h"

namespace kvserve {

namespace {
int64_t blocks_for_tokens(int64_t n_tokens, int block_size) { return (n_tokens + block_size - 1) / block_size; }
}  // namespace

KVCacheManager::KVCacheManager(const KVCacheManagerConfig& config, KVClock clock)
    : block_size_(config.block_size),
      windows_(config.group_windows.empty() ? std::vector<int64_t>{0} : config.group_windows),
      max_chunk_tokens_(config.max_chunk_tokens),
      model_id_(config.model_id),
      pool_(config.num_blocks, config.enable_prefix_caching, std::move(clock)) {
  if (config.block_size <= 0) fail("kv cache: block size {} must be positive", config.block_size);
  if (config.prefix_cache_ttl_seconds < 0)
    fail("kv cache: prefix cache TTL {} s must not be negative", config.prefix_cache_ttl_seconds);
  for (int64_t w : windows_)
    if (w < 0) fail("kv cache: a group's sliding window {} is negative", w);
  sinks_ = config.group_sinks.empty() ? std::vector<int64_t>(windows_.size(), 0) : config.group_sinks;
  if (sinks_.size() != windows_.size())
    fail("kv cache: {} groups' attention sinks given for {} groups", sinks_.size(), windows_.size());
  for (size_t g = 0; g < sinks_.size(); ++g) {
    if (sinks_[g] < 0) fail("kv cache: a group's attention sinks {} are negative", sinks_[g]);
    if (sinks_[g] > 0 && windows_[g] == 0)
      fail("kv cache: attention sinks ({}) need a windowed group; group {} keeps every position", sinks_[g], g);
  }
  caps_ = config.group_caps.empty() ? std::vector<int64_t>(windows_.size(), 0) : config.group_caps;
  if (caps_.size() != windows_.size())
    fail("kv cache: {} groups' H2O budgets given for {} groups", caps_.size(), windows_.size());
  for (size_t g = 0; g < caps_.size(); ++g) {
    if (caps_[g] < 0) fail("kv cache: a group's H2O budget {} is negative", caps_[g]);
    if (caps_[g] > 0 && windows_[g] > 0)
      fail("kv cache: group {} has both a sliding window and an H2O budget", g);
    if (caps_[g] > 0 && config.enable_prefix_caching)
      fail("kv cache: H2O eviction needs the prefix cache off (a block's tokens depend on the sequence's history)");
  }
  if (config.max_chunk_tokens < 0) fail("kv cache: max chunk of {} tokens is negative", config.max_chunk_tokens);
  pool_.set_cache_ttl(config.prefix_cache_ttl_seconds);
}

bool KVCacheManager::has_windowed_groups() const {
  return std::any_of(windows_.begin(), windows_.end(), [](int64_t w) { return w > 0; });
}

size_t KVCacheManager::real_entries(size_t g, size_t entries) const {
  if (caps_[g] == 0) return entries;
  return std::min(entries, static_cast<size_t>(blocks_for_tokens(caps_[g], block_size_)));
}

int64_t KVCacheManager::capacity_tokens_for_chunk(int64_t max_chunk) const {
  const int64_t n = pool_.num_blocks();
  int64_t n_full = 0;
  std::vector<int64_t> bounds;  // per bounded group: most blocks it holds at once
  for (size_t g = 0; g < windows_.size(); ++g) {
    const int64_t w = windows_[g];
    if (caps_[g] > 0) {
      bounds.push_back(blocks_for_tokens(caps_[g], block_size_));
    } else if (w == 0 || max_chunk <= 0) {
      ++n_full;  // a chunk may hold the whole sequence
    } else {
      // Most entries a windowed group holds at once: the window before a chunk's first token, the chunk, the
      // partial blocks at both ends, and the sinks' blocks. Each group by its own window (PagedKVCache sizes
      // the pool so): a streaming window beside Gemma's sliding one, both held at the larger, had a pool
      // sized for the sum refuse prompts it holds.
      bounds.push_back(blocks_for_tokens(w + max_chunk, block_size_) + 1 + static_cast<int64_t>(sink_blocks(g)));
    }
  }
  // The longest sequence B blocks long with n_full * B + sum over bounded groups of min(B, bound) <= n.
  const auto blocks_at = [&](int64_t b) {
    int64_t total = n_full * b;
    for (int64_t bound : bounds) total += std::min(b, bound);
    return total;
  };
  if (n_full == 0 && blocks_at(n + 1) <= n) return std::numeric_limits<int64_t>::max() / 2;  // no bound
  int64_t lo = 0, hi = n + 1;  // blocks_at(lo) <= n < blocks_at(hi)
  while (hi - lo > 1) {
    const int64_t mid = lo + (hi - lo) / 2;
    (blocks_at(mid) <= n ? lo : hi) = mid;
  }
  return lo * block_size_;
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

const BlockTable& KVCacheManager::block_table(SeqId seq, int group) const {
  const Sequence& s = get(seq);
  if (group < 0 || group >= num_groups()) fail("kv cache: group {} out of range [0, {})", group, num_groups());
  return s.tables[static_cast<size_t>(group)];
}

int64_t KVCacheManager::num_tokens(SeqId seq) const { return get(seq).num_tokens; }

int64_t KVCacheManager::num_held_blocks(SeqId seq) const {
  const Sequence& s = get(seq);
  int64_t n = 0;
  for (size_t g = 0; g < s.tables.size(); ++g) {
    const size_t keep = sink_blocks(g);
    n += static_cast<int64_t>(real_entries(g, s.tables[g].size()) - (s.released[g] > keep ? s.released[g] - keep : 0));
  }
  return n;
}

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

int64_t KVCacheManager::first_needed_block(int64_t window, int64_t pos) const {
  if (window <= 0) return 0;
  return std::max<int64_t>(0, pos - window + 1) / block_size_;
}

CachedPrefix KVCacheManager::find_cached_prefix(std::span<const int32_t> tokens, std::string_view salt,
                                                size_t max_blocks) {
  CachedPrefix found;
  const size_t n_groups = windows_.size();
  found.other_groups.resize(n_groups - 1);
  if (!pool_.caching_enabled()) return found;
  const BlockHashExtraKeys extra = extra_keys(salt);
  const int64_t n_blocks = static_cast<int64_t>(std::min(max_blocks, tokens.size() / static_cast<size_t>(block_size_)));
  // Chained hashes, computed as far as a lookup needs them (a full group stops at its first miss).
  std::vector<BlockHash> chain;
  const auto hash_at = [&](int64_t i) {
    while (static_cast<int64_t>(chain.size()) <= i) {
      const size_t k = chain.size();
      chain.push_back(hash_block_tokens(chain.empty() ? std::nullopt : std::optional<BlockHash>(chain.back()),
                                        tokens.subspan(k * static_cast<size_t>(block_size_), block_size_), extra));
    }
    return chain[static_cast<size_t>(i)];
  };
  // Per group, the cached block of each logical block, looked up once when first needed (-2: not yet).
  std::vector<std::vector<int32_t>> ids(n_groups, std::vector<int32_t>(static_cast<size_t>(n_blocks), -2));
  const auto lookup = [&](size_t g, int64_t i) {
    int32_t& id = ids[g][static_cast<size_t>(i)];
    if (id == -2)
      id = pool_.get_cached_block(group_block_hash(hash_at(i), static_cast<int>(g))).value_or(-1);
    return id >= 0;
  };
  // Shrink the hit until every group serves it: a full group needs all its blocks (chained hashes: nothing
  // after a miss can match), a windowed group those its first computed token attends to.
  int64_t h = n_blocks;
  for (bool changed = true; changed && h > 0;) {
    changed = false;
    for (size_t g = 0; g < n_groups && h > 0; ++g) {
      int64_t fit = h;
      if (windows_[g] == 0) {
        for (int64_t i = 0; i < h; ++i)
          if (!lookup(g, i)) {
            fit = i;
            break;
          }
      } else {
        // From the end down: a miss at block i means a hit can end no later than i.
        int64_t i = fit - 1;
        while (fit > 0) {
          const int64_t lo = first_needed_block(windows_[g], fit * block_size_);
          while (i >= lo && lookup(g, i)) --i;
          if (i < lo) {
            // The window is there; so must the sinks' blocks before it be.
            int64_t miss = -1;
            for (int64_t j = 0; j < std::min(static_cast<int64_t>(sink_blocks(g)), lo) && miss < 0; ++j)
              if (!lookup(g, j)) miss = j;
            if (miss < 0) break;
            fit = miss;
          } else {
            fit = i;
          }
          i = fit - 1;
        }
      }
      if (fit < h) {
        h = fit;
        changed = true;
      }
    }
  }
  const auto group_ids = [&](size_t g) {
    std::vector<int32_t> out(static_cast<size_t>(h), null_block());
    for (int64_t i = 0; i < h; ++i)
      if (i >= first_needed_block(windows_[g], h * block_size_) || i < static_cast<int64_t>(sink_blocks(g)))
        out[static_cast<size_t>(i)] = ids[g][static_cast<size_t>(i)];
    return out;
  };
  found.block_ids = group_ids(0);
  for (size_t g = 1; g < n_groups; ++g) found.other_groups[g - 1] = group_ids(g);
  found.num_tokens = h * block_size_;
  return found;
}

std::vector<int32_t> KVCacheManager::held_ids(const CachedPrefix& prefix) {
  std::vector<int32_t> out;
  const auto add = [&](const std::vector<int32_t>& ids) {
    for (int32_t id : ids) out.push_back(id);
  };
  add(prefix.block_ids);
  for (const auto& g : prefix.other_groups) add(g);
  return out;
}

CachedPrefix KVCacheManager::get_computed_blocks(std::span<const int32_t> prompt, std::string_view cache_salt) {
  ++stats_.queries;
  stats_.query_tokens += prompt.size();
  if (prompt.size() <= 1) {
    CachedPrefix none;
    none.other_groups.resize(windows_.size() - 1);
    return none;
  }
  // Cap at n_prompt - 1 tokens: the last prompt token must run through the model for its logits.
  const size_t max_blocks = (prompt.size() - 1) / static_cast<size_t>(block_size_);
  CachedPrefix prefix = find_cached_prefix(prompt, cache_salt, max_blocks);
  if (prefix.num_tokens > 0) {
    ++stats_.hits;
    stats_.hit_tokens += static_cast<uint64_t>(prefix.num_tokens);
  }
  return prefix;
}

void KVCacheManager::grow_table(size_t g, BlockTable& t, size_t entries) {
  const size_t real = real_entries(g, entries) - real_entries(g, t.size());
  if (real > 0) t.append(pool_.get_new_blocks(static_cast<int32_t>(real)));
  while (t.size() < entries) t.append(null_block());
}

bool KVCacheManager::grow_tables(std::vector<BlockTable>& tables, size_t entries) {
  if (entries <= tables.front().size()) return true;
  int64_t need = 0;
  for (size_t g = 0; g < tables.size(); ++g)
    need += static_cast<int64_t>(real_entries(g, entries) - real_entries(g, tables[g].size()));
  if (need > pool_.num_free_blocks()) return false;
  for (size_t g = 0; g < tables.size(); ++g) grow_table(g, tables[g], entries);
  return true;
}

void KVCacheManager::release_outside_window(Sequence& s) {
  for (size_t g = 0; g < windows_.size(); ++g) {
    if (windows_[g] == 0) continue;
    BlockTable& t = s.tables[g];
    const size_t keep = std::min(sink_blocks(g), t.size());
    const size_t first =
        std::max(keep, std::min(static_cast<size_t>(first_needed_block(windows_[g], s.num_tokens)), t.size()));
    for (size_t i = std::max(s.released[g], keep); i < first; ++i) {
      const int32_t id = t[i];
      if (id == null_block()) continue;
      pool_.free_blocks(std::span<const int32_t>(&id, 1));
      t.release(i, null_block());
    }
    s.released[g] = std::max(s.released[g], first);
  }
}

bool KVCacheManager::allocate_slots(SeqId seq, int64_t n_new_tokens, const CachedPrefix& prefix,
                                    std::string_view cache_salt) {
  if (n_new_tokens < 0) fail("kv cache: cannot allocate {} tokens", n_new_tokens);
  const int64_t n_groups = num_groups();
  auto it = seqs_.find(seq);
  if (it != seqs_.end()) {
    if (!prefix.block_ids.empty()) fail("kv cache: sequence {} already exists; a prefix is only for a new one", seq);
    Sequence& s = it->second;
    release_outside_window(s);
    const auto entries = static_cast<size_t>(blocks_for_tokens(s.num_tokens + n_new_tokens, block_size_));
    if (!grow_tables(s.tables, entries)) return false;
    s.num_tokens += n_new_tokens;
    return true;
  }

  const size_t n_prefix = prefix.block_ids.size();
  if (prefix.num_tokens != static_cast<int64_t>(n_prefix) * block_size_)
    fail("kv cache: prefix of {} blocks claims {} tokens", n_prefix, prefix.num_tokens);
  if (n_prefix > 0) {
    if (static_cast<int64_t>(prefix.other_groups.size()) != n_groups - 1)
      fail("kv cache: prefix has {} groups, the cache {}", prefix.other_groups.size() + 1, n_groups);
    for (const auto& g : prefix.other_groups)
      if (g.size() != n_prefix) fail("kv cache: prefix groups differ in length ({} against {})", g.size(), n_prefix);
  }
  // Hit blocks that sit idle in the free queue leave it when touched, so they count against the free
  // blocks exactly like new ones.
  const std::vector<int32_t> hit = n_prefix > 0 ? held_ids(prefix) : std::vector<int32_t>{};
  std::vector<int32_t> touched;
  int64_t idle_hits = 0;
  for (int32_t id : hit) {
    if (id == null_block()) continue;
    const KVBlock& b = pool_.block(id);
    if (!b.hash) fail("kv cache: prefix block {} is no longer cached; call allocate_slots right after lookup", id);
    if (b.in_free_queue) ++idle_hits;
    touched.push_back(id);
  }
  const int64_t need =
      blocks_for_tokens(prefix.num_tokens + n_new_tokens, block_size_) - static_cast<int64_t>(n_prefix);
  int64_t need_all = 0;
  for (size_t g = 0; g < static_cast<size_t>(n_groups); ++g)
    need_all += static_cast<int64_t>(real_entries(g, n_prefix + static_cast<size_t>(std::max<int64_t>(need, 0))) -
                                     real_entries(g, n_prefix));
  if (need_all + idle_hits > pool_.num_free_blocks()) return false;
  // Touch before allocating: otherwise get_new_blocks could evict the very blocks we are reusing.
  pool_.touch(touched);
  Sequence s;
  s.tables.resize(static_cast<size_t>(n_groups));
  s.released.assign(static_cast<size_t>(n_groups), 0);
  for (int64_t g = 0; g < n_groups; ++g) {
    BlockTable& t = s.tables[static_cast<size_t>(g)];
    if (n_prefix > 0) t.append(g == 0 ? prefix.block_ids : prefix.other_groups[static_cast<size_t>(g - 1)]);
    s.released[static_cast<size_t>(g)] =
        static_cast<size_t>(std::min<int64_t>(first_needed_block(windows_[static_cast<size_t>(g)], prefix.num_tokens),
                                              static_cast<int64_t>(n_prefix)));
    if (need > 0) grow_table(static_cast<size_t>(g), t, n_prefix + static_cast<size_t>(need));
  }
  s.cache_salt = std::string(cache_salt);
  s.num_tokens = prefix.num_tokens + n_new_tokens;
  s.num_hashed_blocks = n_prefix;
  if (n_prefix > 0) s.last_hash = pool_.block(prefix.block_ids.back()).hash;  // group 0 keys by the chain itself
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
    for (size_t g = 0; g < s.tables.size(); ++g) {
      const int32_t id = s.tables[g][i];
      // A duplicate of an indexed block just stays unindexed.
      if (id != null_block()) pool_.cache_full_block(id, group_block_hash(h, static_cast<int>(g)));
    }
    s.last_hash = h;
    s.num_hashed_blocks = i + 1;
  }
}

ForkResult KVCacheManager::fork(SeqId parent, SeqId child) {
  if (seqs_.count(child)) fail("kv cache: fork target sequence {} already exists", child);
  const Sequence& p = get(parent);
  const size_t n_groups = p.tables.size();
  const bool partial_tail = !p.tables.front().empty() && p.num_tokens % block_size_ != 0;
  // A capped group's blocks are all rewritten as its tokens evict one another: the child copies them all.
  int64_t copies = 0;
  for (size_t g = 0; g < n_groups; ++g)
    copies += caps_[g] > 0 ? static_cast<int64_t>(real_entries(g, p.tables[g].size())) : partial_tail ? 1 : 0;
  if (copies > pool_.num_free_blocks()) return {};
  Sequence c;
  c.cache_salt = p.cache_salt;
  c.num_tokens = p.num_tokens;
  c.released = p.released;
  c.tables.resize(n_groups);
  ForkResult result;
  result.ok = true;
  const size_t n_shared = p.tables.front().size() - (partial_tail ? 1 : 0);
  for (size_t g = 0; g < n_groups; ++g) {
    const BlockTable& pt = p.tables[g];
    if (caps_[g] > 0) {
      for (int32_t id : pt.ids()) {
        if (id == null_block()) {
          c.tables[g].append(id);
          continue;
        }
        const int32_t dst = pool_.get_new_blocks(1).front();
        c.tables[g].append(dst);
        result.copies.push_back(BlockCopy{id, dst});
      }
      continue;
    }
    std::vector<int32_t> shared(pt.ids().begin(), pt.ids().begin() + static_cast<std::ptrdiff_t>(n_shared));
    std::vector<int32_t> held;
    for (int32_t id : shared)
      if (id != null_block()) held.push_back(id);
    pool_.touch(held);
    c.tables[g].append(shared);
    if (partial_tail) {
      const int32_t dst = pool_.get_new_blocks(1).front();
      c.tables[g].append(dst);
      result.copies.push_back(BlockCopy{pt.back(), dst});
    }
  }
  c.num_hashed_blocks = std::min(p.num_hashed_blocks, n_shared);
  c.last_hash = p.last_hash;
  seqs_.emplace(child, std::move(c));
  return result;
}

void KVCacheManager::truncate(SeqId seq, int64_t n_tokens) {
  Sequence& s = get(seq);
  if (n_tokens < 0 || n_tokens > s.num_tokens)
    fail("kv cache: cannot cut sequence {} of {} tokens back to {}", seq, s.num_tokens, n_tokens);
  for (size_t g = 0; g < caps_.size(); ++g)
    if (caps_[g] > 0 && s.num_tokens > caps_[g] && n_tokens < s.num_tokens)
      fail("kv cache: sequence {} has evicted tokens for its H2O budget of {}; it cannot be cut back", seq, caps_[g]);
  if (n_tokens < static_cast<int64_t>(s.num_hashed_blocks) * block_size_)
    fail("kv cache: cutting sequence {} back to {} tokens would reach into its {} cached blocks", seq, n_tokens,
         s.num_hashed_blocks);
  const auto keep = static_cast<size_t>(blocks_for_tokens(n_tokens, block_size_));
  std::vector<int32_t> reversed;
  for (size_t i = s.tables.front().size(); i-- > keep;)
    for (const BlockTable& t : s.tables)
      if (t[i] != null_block()) reversed.push_back(t[i]);
  for (size_t g = 0; g < s.tables.size(); ++g) {
    s.tables[g].truncate(keep);
    s.released[g] = std::min(s.released[g], keep);
  }
  s.num_tokens = n_tokens;
  pool_.free_blocks(reversed);
}

void KVCacheManager::free(SeqId seq) {
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) fail("kv cache: unknown sequence {}", seq);
  // Tail first, every group's block of a position together.
  std::vector<int32_t> reversed;
  const std::vector<BlockTable>& tables = it->second.tables;
  for (size_t i = tables.front().size(); i-- > 0;)
    for (const BlockTable& t : tables)
      if (t[i] != null_block()) reversed.push_back(t[i]);
  seqs_.erase(it);
  pool_.free_blocks(reversed);
}

int64_t KVCacheManager::pin_prefix(std::span<const int32_t> tokens, std::string_view cache_salt) {
  const CachedPrefix prefix = find_cached_prefix(tokens, cache_salt, tokens.size());
  for (int32_t id : held_ids(prefix))
    if (id != null_block()) pool_.pin(id);
  return prefix.num_tokens;
}

int64_t KVCacheManager::unpin_prefix(std::span<const int32_t> tokens, std::string_view cache_salt) {
  const CachedPrefix prefix = find_cached_prefix(tokens, cache_salt, tokens.size());
  // Unpin tail first so the prefix's last blocks are evicted before its first ones.
  const std::vector<int32_t> ids = held_ids(prefix);
  for (auto id = ids.rbegin(); id != ids.rend(); ++id)
    if (*id != null_block()) pool_.unpin(*id);
  return prefix.num_tokens;
}

PrefixCacheStats KVCacheManager::stats() const {
  PrefixCacheStats s = stats_;
  s.evictions = pool_.evictions();
  s.expirations = pool_.expirations();
  return s;
}

}  // namespace kvserve
