#include "engine/generator.h"

#include <chrono>

#include "core/error.h"
#include "engine/stop_checker.h"
#include "model/stream_decoder.h"

namespace kvserve {

// Contiguous storage for one sequence: physical block i is logical block i.
struct Generator::KV {
  std::vector<std::vector<float>> k, v;
  std::vector<int32_t> table;
  KVCacheView view;
};

Generator::Generator(const Model& model, GeneratorOptions opts, ThreadPool& pool)
    : model_(model), opts_(opts), runner_(model, pool), kv_(std::make_unique<KV>()) {
  const ModelConfig& c = model.config;
  if (opts_.max_context <= 0) opts_.max_context = c.n_ctx_train > 0 ? c.n_ctx_train : 2048;
  const int64_t n_blocks = (opts_.max_context + opts_.block_size - 1) / opts_.block_size;
  const int64_t stride = static_cast<int64_t>(c.n_kv_heads) * opts_.block_size * c.head_dim;
  kv_->k.assign(c.n_layers, std::vector<float>(n_blocks * stride));
  kv_->v.assign(c.n_layers, std::vector<float>(n_blocks * stride));
  for (int l = 0; l < c.n_layers; ++l) {
    kv_->view.k_layers.push_back(kv_->k[l].data());
    kv_->view.v_layers.push_back(kv_->v[l].data());
  }
  kv_->view.block_size = opts_.block_size;
  kv_->view.block_stride = stride;
  kv_->view.n_blocks = n_blocks;
  kv_->table.resize(n_blocks);
  for (int64_t i = 0; i < n_blocks; ++i) kv_->table[i] = static_cast<int32_t>(i);
}

Generator::~Generator() = default;

GenerationResult Generator::generate(const std::vector<int32_t>& prompt_ids, const SamplingParams& params,
                                     const TokenCallback& on_token) {
  using clock = std::chrono::steady_clock;
  params.validate();
  if (prompt_ids.empty()) fail("prompt is empty: at least one token is needed");
  const int64_t ctx = opts_.max_context;
  if (static_cast<int64_t>(prompt_ids.size()) >= ctx)
    fail("prompt has {} tokens, the context holds {}", prompt_ids.size(), ctx);

  GenerationResult r;
  r.prompt_ids = prompt_ids;
  Sampler sampler(params);
  sampler.set_prompt(prompt_ids);
  StopChecker stops(params.stop);
  StreamDecoder decoder(*model_.tokenizer);
  const int32_t n_vocab = model_.config.n_vocab;
  std::vector<float> logits;
  std::span<const int32_t> table(kv_->table);

  const auto t0 = clock::now();
  int64_t pos = 0;
  while (pos < static_cast<int64_t>(prompt_ids.size())) {
    const int64_t n = std::min<int64_t>(opts_.prefill_chunk, static_cast<int64_t>(prompt_ids.size()) - pos);
    BatchSequence s;
    s.tokens = std::span<const int32_t>(prompt_ids.data() + pos, n);
    s.pos0 = pos;
    s.block_table = table;
    s.want_logits = pos + n == static_cast<int64_t>(prompt_ids.size());
    runner_.forward(std::span<const BatchSequence>(&s, 1), kv_->view, logits);
    pos += n;
  }
  const auto t1 = clock::now();
  r.prompt_seconds = std::chrono::duration<double>(t1 - t0).count();

  r.finish_reason = "length";
  while (static_cast<int>(r.generated_ids.size()) < params.max_tokens) {
    const int32_t id = sampler.sample(logits.data(), n_vocab);
    sampler.accept(id);
    r.generated_ids.push_back(id);
    if (!params.ignore_eos && model_.tokenizer->is_eog(id)) {
      r.finish_reason = "stop";
      break;
    }
    std::string piece = stops.push(decoder.feed(id));
    r.text += piece;
    if (on_token && !on_token(id, piece)) break;
    if (stops.stopped()) {
      r.finish_reason = "stop";
      break;
    }
    if (static_cast<int>(r.generated_ids.size()) >= params.max_tokens || pos + 1 >= ctx) break;
    BatchSequence s;
    s.tokens = std::span<const int32_t>(&r.generated_ids.back(), 1);
    s.pos0 = pos;
    s.block_table = table;
    runner_.forward(std::span<const BatchSequence>(&s, 1), kv_->view, logits);
    ++pos;
  }
  if (!stops.stopped()) {
    std::string rest = stops.push(decoder.flush());
    rest += stops.flush();
    r.text += rest;
    if (on_token && !rest.empty()) on_token(-1, rest);
  }
  r.generate_seconds = std::chrono::duration<double>(clock::now() - t1).count();
  return r;
}

std::vector<std::vector<float>> Generator::teacher_forced_logits(const std::vector<int32_t>& ids, int prompt_len) {
  std::vector<std::vector<float>> out;
  std::vector<float> logits;
  std::span<const int32_t> table(kv_->table);
  if (static_cast<int64_t>(ids.size()) > opts_.max_context) fail("sequence longer than the context");
  // The prompt goes in as one batch (as the references do), then one token per step.
  BatchSequence s;
  s.tokens = std::span<const int32_t>(ids.data(), prompt_len);
  s.pos0 = 0;
  s.block_table = table;
  runner_.forward(std::span<const BatchSequence>(&s, 1), kv_->view, logits);
  out.push_back(logits);
  for (size_t i = prompt_len; i < ids.size(); ++i) {
    s.tokens = std::span<const int32_t>(ids.data() + i, 1);
    s.pos0 = static_cast<int64_t>(i);
    runner_.forward(std::span<const BatchSequence>(&s, 1), kv_->view, logits);
    out.push_back(logits);
  }
  return out;
}

}  // namespace kvserve
