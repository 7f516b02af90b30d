#pragma once
// One sequence's logical block index -> physical block id. Append-only while the sequence lives: ids
// handed to a forward step never change under it (copy-on-write gives a forked child its own table).
// The exceptions: release(), a sliding-window group's entries that no later token attends to, and
// truncate(), the tail of a sequence cut back between steps.
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace kvserve {

class BlockTable {
 public:
  BlockTable() = default;
  explicit BlockTable(std::vector<int32_t> ids) : ids_(std::move(ids)) {}

  void append(int32_t block_id) { ids_.push_back(block_id); }
  void append(std::span<const int32_t> block_ids) { ids_.insert(ids_.end(), block_ids.begin(), block_ids.end()); }

  // Drops the entries from `n` on (a sequence cut back: speculative tokens that were not accepted).
  void truncate(size_t n) {
    if (n < ids_.size()) ids_.resize(n);
  }
  // Entry `logical` now names `null_block` (a released sliding-window block).
  void release(size_t logical, int32_t null_block) { ids_.at(logical) = null_block; }

  size_t size() const { return ids_.size(); }
  bool empty() const { return ids_.empty(); }
  int32_t operator[](size_t logical) const { return ids_[logical]; }
  int32_t back() const { return ids_.back(); }
  // Contiguous ids, the form paged_attention's block_table argument takes.
  const int32_t* data() const { return ids_.data(); }
  const std::vector<int32_t>& ids() const { return ids_; }

 private:
  std::vector<int32_t> ids_;
};

}  // namespace kvserve
