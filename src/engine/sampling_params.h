#pragma once
// What a request asks of the sampler and the stopping rules; shared by the CLI and the server.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "model/sampling_defaults.h"

namespace kvserve {

struct SamplingParams {
  float temperature = 0.0f;  // 0 = greedy
  int top_k = 0;             // 0 = off
  float top_p = 1.0f;        // 1 = off
  float min_p = 0.0f;        // 0 = off
  float repetition_penalty = 1.0f;  // HF/llama.cpp style, over prompt + generated tokens
  float presence_penalty = 0.0f;    // OpenAI style, over generated tokens
  float frequency_penalty = 0.0f;   // OpenAI style, over generated tokens
  uint64_t seed = 0;
  bool has_seed = false;
  int max_tokens = 256;
  std::vector<std::string> stop;  // stop strings (not included in the output)
  bool ignore_eos = false;
  // vLLM's: tokens that end generation besides the vocabulary's ends (not in the output text, as those), and
  // how many tokens come before any end may (ends held back in the sampler, stop strings not looked for).
  std::vector<int32_t> stop_token_ids;
  int min_tokens = 0;
  int logprobs = 0;  // top log-probabilities to report per token (0 = none)
  // vLLM's prompt_logprobs: each prompt token's log-probability given the ones before it, with this many top
  // alternatives (-1 = none). The prompt is then computed whole, not read from the prefix cache.
  int prompt_logprobs = -1;
  // OpenAI's logit_bias: added to a token's logit before the penalties and any sampling, greedy included.
  // Ids are checked against the vocabulary where the request is admitted.
  std::vector<std::pair<int32_t, float>> logit_bias;

  // Throws Error naming the first out-of-range field.
  void validate() const;
};

// Which sampling parameters a request or a command line gave itself; the others take the model's defaults.
struct SamplingGiven {
  bool temperature = false, top_p = false, top_k = false, min_p = false, repetition_penalty = false;
};

// Each parameter not given takes the model's default, where it has one (sampler.cpp).
void apply_sampling_defaults(const SamplingDefaults& d, const SamplingGiven& given, SamplingParams& p);

}  // namespace kvserve
