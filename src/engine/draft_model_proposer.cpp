#include "engine/draft_model_proposer.h"

#include <algorithm>

#include "core/error.h"

namespace kvserve {

void check_draft_vocabulary(const Model& draft, const Model& target) {
  const int32_t nd = draft.config.n_vocab, nt = target.config.n_vocab;
  if (nd != nt)
    fail(
        "draft model: its vocabulary has {} tokens and the target's {}; a draft model must share the target's "
        "vocabulary",
        nd, nt);
  if (draft.tokenizer && target.tokenizer) check_draft_vocabulary(draft.tokenizer->vocab(), target.tokenizer->vocab());
}

void check_draft_vocabulary(const Vocab& a, const Vocab& b) {
  if (a.tokens.size() != b.tokens.size())
    fail(
        "draft model: its vocabulary has {} tokens and the target's {}; a draft model must share the target's "
        "vocabulary",
        a.tokens.size(), b.tokens.size());
  for (size_t i = 0; i < a.tokens.size(); ++i)
    if (a.tokens[i] != b.tokens[i])
      fail(
          "draft model: token {} is '{}' in the draft's vocabulary and '{}' in the target's; a draft model must "
          "share the target's vocabulary",
          i, a.tokens[i], b.tokens[i]);
}

DraftModelProposer::DraftModelProposer(const Model& draft, const Model& target, const DraftModelOptions& opts,
                                       ThreadPool& pool)
    : draft_(draft), opts_(opts), runner_(draft, pool) {
  check_draft_vocabulary(draft, target);
  PagedKVCacheOptions ko;
  ko.kv_cache_memory = opts_.kv_cache_memory;
  ko.block_size = opts_.block_size;
  ko.kv_dtype = opts_.kv_cache_dtype;
  ko.max_model_len = opts_.max_context;
  ko.max_num_seqs = 1;
  ko.enable_prefix_caching = false;  // the sequence is extended and cut back; nothing to share
  ko.max_chunk_tokens = opts_.prefill_chunk;
  ko.who = "draft model";
  kv_ = std::make_unique<PagedKVCache>(draft.config, ko);
}

DraftModelProposer::~DraftModelProposer() { reset(); }

void DraftModelProposer::reset() {
  KVCacheManager& kv = *kv_->manager;
  if (kv.has_sequence(seq_)) kv.free(seq_);
  tokens_.clear();
  pos_ = 0;
}

void DraftModelProposer::forward(int64_t n, bool want_logits) {
  KVCacheManager& kv = *kv_->manager;
  if (!kv.allocate_slots(seq_, n))
    fail("draft model: its KV cache has no free block for token {} ({} blocks of {} tokens)", pos_ + n, kv_->num_blocks,
         kv_->block_size);
  BatchSequence s;
  s.tokens = std::span<const int32_t>(tokens_.data() + pos_, static_cast<size_t>(n));
  s.pos0 = pos_;
  set_block_tables(kv, seq_, s);
  s.want_logits = want_logits;
  runner_.forward(std::span<const BatchSequence>(&s, 1), kv_->view, logits_);
  pos_ += n;
}

void DraftModelProposer::propose(std::span<const int32_t> tokens, int k, Sampler& sampler, std::vector<int32_t>& drafts,
                                 std::vector<float>& q) {
  drafts.clear();
  const int32_t n_vocab = draft_.config.n_vocab;
  const auto n = static_cast<int64_t>(tokens.size());
  if (k <= 0 || n == 0) {
    q.clear();
    return;
  }
  // What the cache holds must be a prefix of `tokens` (the target took those drafts): cut at the first
  // difference, then run the rest.
  int64_t same = 0;
  while (same < std::min(pos_, n) && tokens_[static_cast<size_t>(same)] == tokens[static_cast<size_t>(same)]) ++same;
  if (same == n) --same;  // the last token runs again: its logits are the first draft's
  if (same == 0) reset();
  keep(same);
  tokens_.assign(tokens.begin(), tokens.end());
  while (pos_ < n) forward(std::min<int64_t>(opts_.prefill_chunk, n - pos_), true);
  // k more positions must fit the draft's context and cache (the target checked its own).
  const int64_t room = std::min<int64_t>(k, opts_.max_context - n);
  q.resize(static_cast<size_t>(std::max<int64_t>(room, 0)) * n_vocab);
  for (int64_t i = 0; i < room; ++i) {
    const int32_t d = sampler.propose(logits_.data(), n_vocab, q.data() + i * n_vocab);
    drafts.push_back(d);
    if (i + 1 == room) break;
    tokens_.push_back(d);
    forward(1, true);
  }
}

void DraftModelProposer::keep(int64_t n) {
  if (pos_ <= n) return;
  kv_->manager->truncate(seq_, n);
  pos_ = n;
  tokens_.resize(static_cast<size_t>(n));
}

}  // namespace kvserve
