#include "engine/batch_draft_proposer.h"

#include <algorithm>

#include "core/error.h"

namespace kvserve {

BatchDraftProposer::BatchDraftProposer(const Model& draft, const Model& target, const DraftModelOptions& opts,
                                       int max_seqs, ThreadPool& pool)
    : draft_(draft), opts_(opts), runner_(draft, pool) {
  check_draft_vocabulary(draft, target);
  if (opts_.prefill_chunk <= 0) fail("draft model: prefill chunk must be positive, got {}", opts_.prefill_chunk);
  PagedKVCacheOptions ko;
  ko.kv_cache_memory = opts_.kv_cache_memory;
  ko.block_size = opts_.block_size;
  ko.kv_dtype = opts_.kv_cache_dtype;
  ko.max_model_len = opts_.max_context;
  ko.max_num_seqs = std::max(max_seqs, 1);
  ko.enable_prefix_caching = false;  // sequences are extended and cut back; nothing to share
  ko.max_chunk_tokens = opts_.prefill_chunk;
  ko.who = "draft model";
  kv_ = std::make_unique<PagedKVCache>(draft.config, ko);
}

BatchDraftProposer::~BatchDraftProposer() {
  KVCacheManager& kv = *kv_->manager;
  for (const auto& [seq, st] : states_)
    if (kv.has_sequence(st.draft_seq)) kv.free(st.draft_seq);
}

void BatchDraftProposer::drop(SeqId seq) {
  auto it = states_.find(seq);
  if (it == states_.end()) return;
  KVCacheManager& kv = *kv_->manager;
  if (kv.has_sequence(it->second.draft_seq)) kv.free(it->second.draft_seq);
  states_.erase(it);
}

void BatchDraftProposer::drop_unless(const std::function<bool(SeqId)>& alive) {
  std::vector<SeqId> gone;
  for (const auto& [seq, st] : states_)
    if (!alive(seq)) gone.push_back(seq);
  for (SeqId seq : gone) drop(seq);
}

void BatchDraftProposer::forward(std::vector<BatchSequence>& batch) { runner_.forward(batch, kv_->view, logits_); }

void BatchDraftProposer::propose(std::span<DraftAsk> asks) {
  const int32_t n_vocab = draft_.config.n_vocab;
  KVCacheManager& kv = *kv_->manager;
  struct Live {
    DraftAsk* ask;
    State* st;
    int64_t n;               // the ask's tokens
    int64_t room;            // drafts it can still get
    std::vector<float> row;  // the logits the next draft is drawn from
  };
  std::vector<Live> live;
  for (DraftAsk& a : asks) {
    a.drafts.clear();
    a.q.clear();
    const auto n = static_cast<int64_t>(a.tokens.size());
    const int64_t room = std::min<int64_t>(a.k, opts_.max_context - n);
    if (room <= 0 || n == 0 || a.sampler == nullptr) continue;
    auto [it, fresh] = states_.try_emplace(a.seq);
    State& st = it->second;
    if (fresh) st.draft_seq = next_draft_seq_++;
    // What the draft's cache holds must be a prefix of the tokens (the target took those drafts): cut at the
    // first difference; the last token runs again when the cache has them all (its logits give draft 1).
    int64_t same = 0;
    while (same < std::min(st.pos, n) && st.tokens[static_cast<size_t>(same)] == a.tokens[static_cast<size_t>(same)])
      ++same;
    if (same == n) --same;
    if (same < st.pos && kv.has_sequence(st.draft_seq)) {
      if (same == 0)
        kv.free(st.draft_seq);
      else
        kv.truncate(st.draft_seq, same);
    }
    st.pos = std::min(st.pos, same);
    st.tokens.assign(a.tokens.begin(), a.tokens.end());
    live.push_back({&a, &st, n, room, {}});
  }

  // Runs the listed entries' next tokens, chunks of at most prefill_chunk; each that reaches its end gets
  // its logits row. An entry whose cache cannot grow stops there (no more drafts).
  std::vector<BatchSequence> batch;
  std::vector<Live*> ran;
  const auto run = [&](const std::vector<Live*>& todo) {
    batch.clear();
    ran.clear();
    for (Live* l : todo) {
      State& st = *l->st;
      const int64_t end = static_cast<int64_t>(st.tokens.size());
      const int64_t m = std::min<int64_t>(opts_.prefill_chunk, end - st.pos);
      if (!kv.allocate_slots(st.draft_seq, m)) {
        l->room = std::min<int64_t>(l->room, static_cast<int64_t>(l->ask->drafts.size()));
        continue;
      }
      BatchSequence b;
      b.tokens = std::span<const int32_t>(st.tokens.data() + st.pos, static_cast<size_t>(m));
      b.pos0 = st.pos;
      set_block_tables(kv, st.draft_seq, b);
      b.want_logits = st.pos + m == end;
      batch.push_back(b);
      ran.push_back(l);
      st.pos += m;
    }
    if (batch.empty()) return;
    forward(batch);
    size_t row = 0;
    for (size_t i = 0; i < batch.size(); ++i) {
      if (!batch[i].want_logits) continue;
      const float* r = logits_.data() + row * static_cast<size_t>(n_vocab);
      ran[i]->row.assign(r, r + n_vocab);
      ++row;
    }
  };
  // Catch up: every entry's unseen tokens.
  for (;;) {
    std::vector<Live*> todo;
    for (Live& l : live)
      if (l.room > 0 && l.st->pos < l.n) todo.push_back(&l);
    if (todo.empty()) break;
    run(todo);
  }
  // Then one draft position at a time, all entries together.
  for (int64_t i = 0;; ++i) {
    std::vector<Live*> todo;
    for (Live& l : live) {
      if (i >= l.room || l.row.empty()) continue;
      DraftAsk& a = *l.ask;
      a.q.resize(static_cast<size_t>(i + 1) * n_vocab);
      const int32_t d = a.sampler->propose(l.row.data(), n_vocab, a.q.data() + i * n_vocab);
      a.drafts.push_back(d);
      if (i + 1 < l.room) {
        l.st->tokens.push_back(d);
        l.row.clear();
        todo.push_back(&l);
      }
    }
    if (todo.empty()) break;
    run(todo);
    for (Live* l : todo)
      if (l->row.empty()) {  // its cache could not take the draft: it keeps what it has
        l->room = static_cast<int64_t>(l->ask->drafts.size());
        l->st->tokens.pop_back();
      }
  }
}

}  // namespace kvserve
