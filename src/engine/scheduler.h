#pragma once
// Continuous batching in the vLLM v1 manner (DESIGN.md, "Scheduler contract"). There are no prefill and
// decode phases: every sequence advances num_computed_tokens toward num_tokens(), and each step hands
// out at most max_num_batched_tokens tokens over at most max_num_seqs sequences. Running sequences go
// first (their decode token, or their next prompt chunk), then waiting ones are admitted in order,
// starting from whatever prefix of them the prefix cache already holds. When blocks run out the newest
// running sequence is preempted: blocks freed, recomputed from scratch later, back at the front of the
// queue. The scheduler only decides and books blocks; the engine runs the forward and samples.
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "kv/kv_cache_manager.h"

namespace kvserve {

struct SchedulerConfig {
  int max_num_batched_tokens = 512;  // tokens per step over all sequences
  int max_num_seqs = 64;             // running sequences
  bool enable_prefix_caching = true;
};

// One sequence (one choice of a request) as the scheduler sees it.
struct SequenceState {
  SeqId id = 0;
  std::vector<int32_t> tokens;  // prompt, then every sampled token
  int64_t num_prompt_tokens = 0;
  int64_t num_computed_tokens = 0;  // tokens whose K/V are in the cache
  int64_t num_cached_tokens = -1;   // prefix-cache hit at first admission; -1 until admitted
  std::string cache_salt;
  bool computes_whole_prompt = false;  // no prefix-cache hit: every prompt position's logits are wanted
  // LongRoPE (engine/long_rope.h): the sequence rotates with the long factors; it switches to them, its K/V
  // recomputed, once it has more than long_rope_after tokens (-1: never).
  bool long_rope = false;
  int64_t long_rope_after = -1;
  // Speculative decoding: the last num_draft_tokens of `tokens` are proposals, not yet verified. They are
  // computed with the token before them in one chunk, never enter the prefix cache, and are dropped
  // wherever the sequence cannot take them whole (the step's token budget, no blocks, preemption).
  int64_t num_draft_tokens = 0;

  int64_t num_tokens() const { return static_cast<int64_t>(tokens.size()); }
  int64_t num_verified_tokens() const { return num_tokens() - num_draft_tokens; }
  void drop_drafts() {
    tokens.resize(static_cast<size_t>(num_verified_tokens()));
    num_draft_tokens = 0;
  }
  bool outgrew_short_rope() const { return !long_rope && long_rope_after >= 0 && num_tokens() > long_rope_after; }
  std::string prefix_cache_key() const;
  // The forward step that completes num_tokens() yields the logits for the next token.
  bool needs_tokens() const { return num_computed_tokens < num_tokens(); }
};

// tokens[start, start + num_tokens) of one sequence go into this step's forward.
struct ScheduledChunk {
  SeqId seq = 0;
  int64_t start = 0;
  int64_t num_tokens = 0;
  bool completes_sequence = false;  // the chunk reaches num_tokens(): its logits give the next token
  int64_t num_draft_tokens = 0;     // its last ones are drafts: every position's logits are wanted
};

struct SchedulerOutput {
  std::vector<ScheduledChunk> chunks;  // running ones first, then the newly admitted, in order
  std::vector<SeqId> preempted;        // in the order they were preempted (newest first)
  int64_t total_tokens = 0;
  bool empty() const { return chunks.empty(); }
};

class Scheduler {
 public:
  Scheduler(KVCacheManager& kv, SchedulerConfig config);

  // Queues a new sequence at the back of the waiting queue (num_computed_tokens is reset).
  SequenceState& add_waiting(SequenceState seq);
  // Adds a sequence that already holds its blocks (a forked child) at the back of the running list.
  SequenceState& add_running(SequenceState seq);

  // Plans one step and books its blocks. Never drops a sequence: one that does not fit waits.
  SchedulerOutput schedule();
  // After the forward of `out` ran: advances num_computed_tokens and indexes newly full blocks in the
  // prefix cache (only now are their K/V written).
  void update_after_step(const SchedulerOutput& out);
  // Removes a sequence wherever it is (finished or aborted) and frees its blocks at once.
  void finish(SeqId seq);

  SequenceState* find(SeqId seq);
  const std::vector<SeqId>& running() const { return running_; }
  const std::deque<SeqId>& waiting() const { return waiting_; }
  bool has_work() const { return !running_.empty() || !waiting_.empty(); }

  uint64_t num_preemptions() const { return num_preemptions_; }
  uint64_t num_rope_restarts() const { return num_rope_restarts_; }      // sequences recomputed for LongRoPE
  uint64_t prefix_query_tokens() const { return prefix_query_tokens_; }  // tokens looked up at admission
  uint64_t prefix_hit_tokens() const { return prefix_hit_tokens_; }      // of those, served by the cache

 private:
  SequenceState& get(SeqId seq);
  // Frees the newest running sequence and puts it at the front of the waiting queue; returns its id.
  SeqId preempt_newest();
  // Frees a running sequence that outgrew its short LongRoPE factors and queues it, switched to the long
  // ones, at the front of the waiting queue to be recomputed.
  void restart_with_long_rope(size_t running_index);

  KVCacheManager& kv_;
  SchedulerConfig config_;
  std::unordered_map<SeqId, std::unique_ptr<SequenceState>> seqs_;
  std::vector<SeqId> running_;  // oldest first: the back is preempted first
  std::deque<SeqId> waiting_;
  uint64_t num_preemptions_ = 0;
  uint64_t num_rope_restarts_ = 0;
  uint64_t prefix_query_tokens_ = 0;
  uint64_t prefix_hit_tokens_ = 0;
};

}  // namespace kvserve
