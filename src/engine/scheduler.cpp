#include "engine/scheduler.h"

#include <algorithm>

#include "core/error.h"
#include "engine/long_rope.h"

namespace kvserve {

Scheduler::Scheduler(KVCacheManager& kv, SchedulerConfig config) : kv_(kv), config_(config) {
  if (config_.max_num_batched_tokens <= 0) fail("scheduler: max_num_batched_tokens must be positive");
  if (config_.max_num_seqs <= 0) fail("scheduler: max_num_seqs must be positive");
}

SequenceState& Scheduler::add_waiting(SequenceState seq) {
  if (seqs_.count(seq.id)) fail("scheduler: sequence {} already exists", seq.id);
  if (seq.tokens.empty()) fail("scheduler: sequence {} has no tokens", seq.id);
  seq.num_computed_tokens = 0;
  const SeqId id = seq.id;
  auto& slot = seqs_[id] = std::make_unique<SequenceState>(std::move(seq));
  waiting_.push_back(id);
  return *slot;
}

SequenceState& Scheduler::add_running(SequenceState seq) {
  if (seqs_.count(seq.id)) fail("scheduler: sequence {} already exists", seq.id);
  if (!kv_.has_sequence(seq.id)) fail("scheduler: running sequence {} holds no blocks", seq.id);
  const SeqId id = seq.id;
  auto& slot = seqs_[id] = std::make_unique<SequenceState>(std::move(seq));
  running_.push_back(id);
  return *slot;
}

SequenceState* Scheduler::find(SeqId seq) {
  auto it = seqs_.find(seq);
  return it == seqs_.end() ? nullptr : it->second.get();
}

SequenceState& Scheduler::get(SeqId seq) {
  SequenceState* s = find(seq);
  if (!s) fail("scheduler: unknown sequence {}", seq);
  return *s;
}

SeqId Scheduler::preempt_newest() {
  const SeqId victim = running_.back();
  running_.pop_back();
  kv_.free(victim);
  // Recompute rather than swap: its full blocks stay in the prefix cache until evicted, so the
  // re-admission usually starts from most of them. Drafts would be recomputed as if verified.
  get(victim).num_computed_tokens = 0;
  get(victim).drop_drafts();
  waiting_.push_front(victim);
  ++num_preemptions_;
  return victim;
}

std::string SequenceState::prefix_cache_key() const {
  return long_rope_cache_key(cache_salt, long_rope_after, long_rope);
}

void Scheduler::restart_with_long_rope(size_t running_index) {
  const SeqId id = running_[running_index];
  running_.erase(running_.begin() + static_cast<std::ptrdiff_t>(running_index));
  kv_.free(id);
  SequenceState& s = get(id);
  s.long_rope = true;
  s.num_computed_tokens = 0;
  s.drop_drafts();
  waiting_.push_front(id);
  ++num_rope_restarts_;
}

SchedulerOutput Scheduler::schedule() {
  SchedulerOutput out;
  int64_t budget = config_.max_num_batched_tokens;

  // Running sequences first, oldest first, so the newest is the one that loses its blocks.
  for (size_t i = 0; i < running_.size() && budget > 0;) {
    SequenceState& s = get(running_[i]);
    if (s.outgrew_short_rope()) {
      restart_with_long_rope(i);
      continue;
    }
    // Drafts go in whole with their token, or not at all: where the budget or the free blocks cannot take
    // them, they are dropped before anything is preempted for them.
    bool booked = false;
    if (s.num_draft_tokens > 0) {
      const int64_t whole = s.num_tokens() - s.num_computed_tokens;
      booked = whole <= budget && kv_.allocate_slots(s.id, whole);
      if (!booked) s.drop_drafts();
    }
    const int64_t n = std::min(s.num_tokens() - s.num_computed_tokens, budget);
    if (n <= 0) {  // nothing to compute (should not happen: the engine samples after each completion)
      ++i;
      continue;
    }
    bool preempted_self = false;
    while (!booked && !kv_.allocate_slots(s.id, n)) {
      const SeqId victim = preempt_newest();
      out.preempted.push_back(victim);
      if (victim == s.id) {
        preempted_self = true;
        break;
      }
    }
    if (preempted_self) break;  // everything after it was preempted too
    out.chunks.push_back(
        {s.id, s.num_computed_tokens, n, s.num_computed_tokens + n == s.num_tokens(), s.num_draft_tokens});
    out.total_tokens += n;
    budget -= n;
    ++i;
  }

  // Admission: in queue order, stopping at the first that does not fit (no overtaking), and not at all
  // in a step that had to preempt (memory is short; admitting would only preempt again).
  while (out.preempted.empty() && !waiting_.empty() && budget > 0 &&
         static_cast<int>(running_.size()) < config_.max_num_seqs) {
    SequenceState& s = get(waiting_.front());
    if (s.outgrew_short_rope()) s.long_rope = true;  // a prompt past the original context starts long
    const std::string key = s.prefix_cache_key();
    CachedPrefix prefix;
    if (config_.enable_prefix_caching && !s.computes_whole_prompt) prefix = kv_.get_computed_blocks(s.tokens, key);
    const int64_t start = prefix.num_tokens;
    const int64_t n = std::min(s.num_tokens() - start, budget);
    if (!kv_.allocate_slots(s.id, n, prefix, key)) break;
    waiting_.pop_front();
    running_.push_back(s.id);
    s.num_computed_tokens = start;
    if (s.num_cached_tokens < 0) s.num_cached_tokens = start;  // usage reports the first admission's hit
    prefix_query_tokens_ += static_cast<uint64_t>(s.num_tokens());
    prefix_hit_tokens_ += static_cast<uint64_t>(start);
    out.chunks.push_back({s.id, start, n, start + n == s.num_tokens()});
    out.total_tokens += n;
    budget -= n;
  }
  return out;
}

void Scheduler::update_after_step(const SchedulerOutput& out) {
  for (const ScheduledChunk& c : out.chunks) {
    SequenceState* s = find(c.seq);
    if (!s) continue;  // finished (aborted) since it was scheduled
    s->num_computed_tokens = c.start + c.num_tokens;
    kv_.cache_blocks(s->id, s->tokens, std::min(s->num_computed_tokens, s->num_verified_tokens()));
  }
}

void Scheduler::finish(SeqId seq) {
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) return;
  std::erase(running_, seq);
  std::erase(waiting_, seq);
  if (kv_.has_sequence(seq)) kv_.free(seq);
  seqs_.erase(it);
}

}  // namespace kvserve
