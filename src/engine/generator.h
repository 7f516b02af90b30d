#pragma once
// Single-request generation: prefill the prompt in chunks, then decode token by token, streaming text
// through the stop-string checker. The server's scheduler batches many of these; the CLI runs one.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/model_runner.h"
#include "engine/sampler.h"
#include "model/model.h"

namespace kvserve {

struct GenerationResult {
  std::vector<int32_t> prompt_ids;
  std::vector<int32_t> generated_ids;
  std::string text;
  std::string finish_reason;  // "stop" (EOS or stop string) or "length"
  int cached_tokens = 0;      // prompt tokens served from the prefix cache
  double prompt_seconds = 0;
  double generate_seconds = 0;
};

// Called with each new token and the text that became safe to emit; return false to cancel.
using TokenCallback = std::function<bool(int32_t id, const std::string& text)>;

struct GeneratorOptions {
  int block_size = 16;
  int64_t max_context = 0;   // 0 = the model's training context
  int prefill_chunk = 512;   // prompt tokens per forward step
};

class Generator {
 public:
  Generator(const Model& model, GeneratorOptions opts, ThreadPool& pool = ThreadPool::global());
  ~Generator();

  GenerationResult generate(const std::vector<int32_t>& prompt_ids, const SamplingParams& params,
                            const TokenCallback& on_token = {});

  // Logits of every position of `ids` fed one token at a time (teacher forcing), for tests/perplexity.
  std::vector<std::vector<float>> teacher_forced_logits(const std::vector<int32_t>& ids, int prompt_len);

 private:
  struct KV;
  const Model& model_;
  GeneratorOptions opts_;
  ModelRunner runner_;
  std::unique_ptr<KV> kv_;
};

}  // namespace kvserve
