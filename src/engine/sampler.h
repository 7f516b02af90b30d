#pragma once
// Turns one position's logits into the next token: logit bias and penalties, then greedy or top-k / temperature /
// min-p / top-p filtering and a draw from a seeded generator (same seed, same tokens).
#include <cstdint>
#include <random>
#include <unordered_map>
#include <utility>
#include <vector>

#include "engine/sampling_params.h"

namespace kvserve {

struct TokenLogprob {
  int32_t id;
  float logprob;
};

// log softmax(logits)[chosen] at temperature 1, and the k most likely tokens' (id, log-probability), most
// likely first, into `top`. NaN for a row of NaNs (then no top). `rank` (may be null): 1 + the tokens more
// likely than `chosen`, as vLLM ranks a prompt token.
float token_logprobs(const float* logits, int32_t n_vocab, int32_t chosen, int k, std::vector<TokenLogprob>& top,
                     int* rank = nullptr);

class Sampler {
 public:
  explicit Sampler(const SamplingParams& params);

  // Tokens already in the sequence: the prompt first, then each sampled token via accept().
  void set_prompt(const std::vector<int32_t>& prompt_ids);
  void accept(int32_t id);
  // The vocabulary's ends of generation: with params.stop_token_ids (unless params.ignore_eos), the tokens
  // whose logits are -inf while fewer than params.min_tokens tokens were accepted (only the stop_token_ids
  // until this is called).
  void set_eog_tokens(const std::vector<int32_t>& eog_ids);

  // Modifies logits in place (logit bias, penalties, temperature) and returns the chosen id.
  int32_t sample(float* logits, int32_t n_vocab);
  // Speculative decoding's verification of a proposed token. With p what sample() would draw from and q the
  // distribution the draft was drawn from (q null: a proposer that always proposes it, q = 1 there, as
  // n-gram lookup): `draft` kept with probability min(1, p(draft) / q(draft)) (*accepted true), else a
  // token drawn from max(0, p - q) renormalized. The result follows p exactly (Leviathan et al. 2023);
  // greedy returns the argmax, accepted when it is the draft.
  int32_t sample_with_draft(float* logits, int32_t n_vocab, int32_t draft, bool* accepted, const float* q = nullptr);
  // A draft model's proposal: fills q (n_vocab) with the distribution sample() would draw from these
  // logits (greedy: all of it on the argmax) and returns a token drawn from it.
  int32_t propose(float* logits, int32_t n_vocab, float* q);

  // Log-probabilities of the distribution the last sample() drew from (after logit bias and penalties, before
  // truncation): the chosen token's and the top `params.logprobs` ones. Only when params.logprobs > 0.
  float last_logprob() const { return last_logprob_; }
  const std::vector<TokenLogprob>& last_top_logprobs() const { return last_top_; }

  static int32_t argmax(const float* logits, int32_t n_vocab);  // lowest id wins exact ties

 private:
  // sample(), sample_with_draft() (draft >= 0) and propose() (q_out) in one walk over the weights.
  int32_t draw(float* logits, int32_t n_vocab, int32_t draft, const float* q, bool* accepted, float* q_out);
  void apply_bias_and_penalties(float* logits, int32_t n_vocab) const;
  void hold_back_ends(float* logits, int32_t n_vocab);
  void record_logprobs(const float* logits, int32_t n_vocab, int32_t chosen);

  SamplingParams params_;
  std::mt19937_64 rng_;
  std::unordered_map<int32_t, int> prompt_counts_;
  std::unordered_map<int32_t, int> generated_counts_;
  int num_generated_ = 0;
  std::vector<int32_t> held_ids_;  // sorted, distinct
  std::vector<std::pair<int32_t, float>> held_logits_;
  float last_logprob_ = 0.0f;
  std::vector<TokenLogprob> last_top_;
};

}  // namespace kvserve
