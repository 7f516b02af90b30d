#pragma once
// Speculative decoding with a draft model in the Engine: every decoding sequence that wants drafts gets
// them from one batched pass of the draft model per draft position, as the target runs its sequences in
// one batched step. The draft keeps its own paged KV cache of each sequence (DraftModelProposer does the
// same for the one sequence of a Generator): a call runs only the tokens a sequence's draft cache has not
// seen (the target's correction or bonus token, the drafts it took; the whole prompt the first time), then
// draws each draft from the draft model's distribution under the sequence's sampling parameters
// (Sampler::propose), which the target's verification needs (Sampler::sample_with_draft with q).
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <unordered_map>
#include <vector>

#include "core/thread_pool.h"
#include "engine/draft_model_proposer.h"
#include "engine/model_runner.h"
#include "engine/paged_kv_cache.h"
#include "engine/sampler.h"
#include "kv/kv_cache_manager.h"
#include "model/model.h"

namespace kvserve {

// One sequence's ask: drafts after `tokens` (its tokens so far, all verified).
struct DraftAsk {
  SeqId seq = -1;  // the target's id; the draft's cache of it lives as long as drop() is not called
  std::span<const int32_t> tokens;
  int k = 0;  // drafts wanted
  Sampler* sampler = nullptr;
  std::vector<int32_t> drafts;  // out: up to k (fewer when the draft's cache is short of blocks)
  std::vector<float> q;         // out: drafts.size() x n_vocab, row i the distribution drafts[i] came from
};

class BatchDraftProposer {
 public:
  // opts.max_context and the cache budget are the draft cache's; max_seqs sequences at once.
  BatchDraftProposer(const Model& draft, const Model& target, const DraftModelOptions& opts, int max_seqs,
                     ThreadPool& pool = ThreadPool::global());
  ~BatchDraftProposer();

  // Fills every ask's drafts and q. A sequence whose draft cache cannot grow gets fewer drafts (or none),
  // never an error: drafts are an optimization.
  void propose(std::span<DraftAsk> asks);
  // Forgets sequences the target no longer runs (their blocks go back to the draft's pool).
  void drop(SeqId seq);
  void drop_unless(const std::function<bool(SeqId)>& alive);

  const PagedKVCache& kv_cache() const { return *kv_; }
  int64_t num_sequences() const { return static_cast<int64_t>(states_.size()); }

 private:
  struct State {
    SeqId draft_seq = -1;
    std::vector<int32_t> tokens;  // [0, pos) are in the draft's cache
    int64_t pos = 0;
  };
  // Runs each live ask's next tokens (up to `chunk` of them); rows of logits for those that asked for them.
  void forward(std::vector<BatchSequence>& batch);

  const Model& draft_;
  DraftModelOptions opts_;
  ModelRunner runner_;
  std::unique_ptr<PagedKVCache> kv_;
  std::unordered_map<SeqId, State> states_;
  SeqId next_draft_seq_ = 1;
  std::vector<float> logits_;
};

}  // namespace kvserve
