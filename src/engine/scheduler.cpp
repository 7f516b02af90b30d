#include "engine/scheduler.h"

#include <algorithm>

#include "core/error.h"

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
  // re-admission usually starts from most of them.
  get(victim).num_computed_tokens = 0;
  waiting_.push_front(victim);
  ++num_preemptions_;
  return victim;
}

SchedulerOutput Scheduler::schedule() {
  SchedulerOutput out;
  int64_t budget = config_.max_num_batched_tokens;

  // Running sequences first, oldest first, so the newest is the one that loses its blocks.
  for (size_t i = 0; i < running_.size() && budget > 0;) {
    SequenceState& s = get(running_[i]);
    const int64_t n = std::min(s.num_tokens() - s.num_computed_tokens, budget);
    if (n <= 0) {  // nothing to compute (should not happen: the engine samples after each completion)
      ++i;
      continue;
    }
    bool preempted_self = false;
    while (!kv_.allocate_slots(s.id, n)) {
      const SeqId victim = preempt_newest();
      out.preempted.push_back(victim);
      if (victim == s.id) {
        preempted_self = true;
        break;
      }
    }
    if (preempted_self) break;  // everything after it was preempted too
    out.chunks.push_back({s.id, s.num_computed_tokens, n, s.num_computed_tokens + n == s.num_tokens()});
    out.total_tokens += n;
    budget -= n;
    ++i;
  }

  // Admission: in queue order, stopping at the first that does not fit (no overtaking), and not at all
  // in a step that had to preempt (memory is short; admitting would only preempt again).
  while (out.preempted.empty() && !waiting_.empty() && budget > 0 &&
         static_cast<int>(running_.size()) < config_.max_num_seqs) {
    SequenceState& s = get(waiting_.front());
    CachedPrefix prefix;
    if (config_.enable_prefix_caching) prefix = kv_.get_computed_blocks(s.tokens, s.cache_salt);
    const int64_t start = prefix.num_tokens;
    const int64_t n = std::min(s.num_tokens() - start, budget);
    if (!kv_.allocate_slots(s.id, n, prefix, s.cache_salt)) break;
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
    kv_.cache_blocks(s->id, s->tokens, s->num_computed_tokens);
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
