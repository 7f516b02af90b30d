#pragma once
// Speculative decoding with a draft model: a smaller model of the same vocabulary (or a more quantized
// copy of the target) proposes the next k tokens, one cheap forward each, and the target verifies them in
// one forward of k + 1 positions (Generator). The draft keeps its own paged KV cache of the sequence, so a
// step only runs the tokens it has not seen: the target's correction or bonus token and the drafts it
// took. Each draft is drawn from the draft model's distribution under the request's sampling parameters
// (Sampler::propose), which the verification needs (Sampler::sample_with_draft with q).
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "engine/model_runner.h"
#include "engine/paged_kv_cache.h"
#include "engine/sampler.h"
#include "model/model.h"

namespace kvserve {

struct DraftModelOptions {
  int block_size = 16;
  KVCacheDType kv_cache_dtype = KVCacheDType::F32;
  int64_t max_context = 0;  // as the target's
  int prefill_chunk = 512;
  double kv_cache_memory = 0.25;  // bytes (> 1) or a fraction of RAM, capped at what one sequence uses
};

// Throws Error naming the difference when `draft` cannot propose tokens for `target`: another vocabulary
// size, or a token whose text differs.
void check_draft_vocabulary(const Model& draft, const Model& target);
void check_draft_vocabulary(const Vocab& draft, const Vocab& target);

class DraftModelProposer {
 public:
  DraftModelProposer(const Model& draft, const Model& target, const DraftModelOptions& opts,
                     ThreadPool& pool = ThreadPool::global());
  ~DraftModelProposer();

  // Forgets the sequence (a new request): its blocks are freed.
  void reset();
  // Runs the draft over the tokens of `tokens` it has not seen and draws up to k tokens after them with
  // `sampler`: drafts (size k) and their distributions q (k x n_vocab, row i the one drafts[i] came from).
  void propose(std::span<const int32_t> tokens, int k, Sampler& sampler, std::vector<int32_t>& drafts,
               std::vector<float>& q);
  // The target kept only the first `n` tokens: the draft's later K/V are cut.
  void keep(int64_t n);

  const PagedKVCache& kv_cache() const { return *kv_; }

 private:
  void forward(int64_t n, bool want_logits);

  const Model& draft_;
  DraftModelOptions opts_;
  ModelRunner runner_;
  std::unique_ptr<PagedKVCache> kv_;
  SeqId seq_ = 1;
  std::vector<int32_t> tokens_;  // the draft's sequence: [0, pos_) in its cache
  int64_t pos_ = 0;
  std::vector<float> logits_;
};

}  // namespace kvserve
