#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/error.h"
#include "kernels/cpu/ops.h"

namespace kvserve {

void SamplingParams::validate() const {
  if (!(temperature >= 0.0f) || temperature > 100.0f) fail("temperature must be in [0, 100], got {}", temperature);
  if (top_k < 0) fail("top_k must be >= 0, got {}", top_k);
  if (!(top_p > 0.0f && top_p <= 1.0f)) fail("top_p must be in (0, 1], got {}", top_p);
  if (!(min_p >= 0.0f && min_p <= 1.0f)) fail("min_p must be in [0, 1], got {}", min_p);
  if (!(repetition_penalty > 0.0f) || repetition_penalty > 100.0f)
    fail("repetition_penalty must be in (0, 100], got {}", repetition_penalty);
  if (!(presence_penalty >= -2.0f && presence_penalty <= 2.0f))
    fail("presence_penalty must be in [-2, 2], got {}", presence_penalty);
  if (!(frequency_penalty >= -2.0f && frequency_penalty <= 2.0f))
    fail("frequency_penalty must be in [-2, 2], got {}", frequency_penalty);
  if (max_tokens < 0) fail("max_tokens must be >= 0, got {}", max_tokens);
  if (logprobs < 0 || logprobs > 20) fail("logprobs must be in [0, 20], got {}", logprobs);
  for (const auto& s : stop)
    if (s.empty()) fail("stop strings must not be empty");
}

Sampler::Sampler(const SamplingParams& params) : params_(params) {
  params_.validate();
  rng_.seed(params_.has_seed ? params_.seed : std::random_device{}());
}

void Sampler::set_prompt(const std::vector<int32_t>& prompt_ids) {
  prompt_counts_.clear();
  generated_counts_.clear();
  for (int32_t id : prompt_ids) prompt_counts_[id]++;
}

void Sampler::accept(int32_t id) { generated_counts_[id]++; }

int32_t Sampler::argmax(const float* logits, int32_t n_vocab) {
  return static_cast<int32_t>(kvserve::argmax(logits, n_vocab));
}

void Sampler::apply_penalties(float* logits, int32_t n_vocab) const {
  auto in_range = [&](int32_t id) { return id >= 0 && id < n_vocab; };
  if (params_.repetition_penalty != 1.0f) {
    auto penalize = [&](int32_t id) {
      float& l = logits[id];
      l = l > 0 ? l / params_.repetition_penalty : l * params_.repetition_penalty;
    };
    for (const auto& [id, n] : prompt_counts_)
      if (in_range(id)) penalize(id);
    for (const auto& [id, n] : generated_counts_)
      if (in_range(id) && !prompt_counts_.count(id)) penalize(id);
  }
  if (params_.presence_penalty != 0.0f || params_.frequency_penalty != 0.0f) {
    for (const auto& [id, n] : generated_counts_)
      if (in_range(id)) logits[id] -= params_.presence_penalty + params_.frequency_penalty * static_cast<float>(n);
  }
}

void Sampler::record_logprobs(const float* logits, int32_t n_vocab, int32_t chosen) {
  last_top_.clear();
  if (params_.logprobs <= 0) return;  // a full-vocabulary softmax per token is not free
  float mx = -std::numeric_limits<float>::infinity();
  for (int32_t i = 0; i < n_vocab; ++i) mx = std::max(mx, logits[i]);
  double sum = 0.0;
  for (int32_t i = 0; i < n_vocab; ++i) sum += std::exp(static_cast<double>(logits[i] - mx));
  const float log_z = mx + static_cast<float>(std::log(sum));
  last_logprob_ = logits[chosen] - log_z;
  const int k = std::min(params_.logprobs, n_vocab);
  std::vector<int32_t> idx(n_vocab);
  for (int32_t i = 0; i < n_vocab; ++i) idx[i] = i;
  std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), [&](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  });
  for (int i = 0; i < k; ++i) last_top_.push_back({idx[i], logits[idx[i]] - log_z});
}

int32_t Sampler::sample(float* logits, int32_t n_vocab) {
  if (n_vocab <= 0) fail("sampler: empty vocabulary");
  apply_penalties(logits, n_vocab);
  if (params_.temperature == 0.0f) {
    const int32_t id = argmax(logits, n_vocab);
    record_logprobs(logits, n_vocab, id);
    return id;
  }
  // Candidates sorted by logit, truncated by top-k.
  candidates_.resize(n_vocab);
  for (int32_t i = 0; i < n_vocab; ++i) candidates_[i] = {logits[i], i};
  size_t keep = static_cast<size_t>(n_vocab);
  if (params_.top_k > 0) keep = std::min(keep, static_cast<size_t>(params_.top_k));
  auto by_logit = [](const auto& a, const auto& b) { return a.first > b.first || (a.first == b.first && a.second < b.second); };
  if (keep < candidates_.size()) {
    std::partial_sort(candidates_.begin(), candidates_.begin() + keep, candidates_.end(), by_logit);
    candidates_.resize(keep);
  } else {
    std::sort(candidates_.begin(), candidates_.end(), by_logit);
  }
  // Softmax at temperature.
  const float inv_t = 1.0f / params_.temperature;
  const float mx = candidates_[0].first;
  double sum = 0.0;
  std::vector<double> probs(candidates_.size());
  for (size_t i = 0; i < candidates_.size(); ++i) {
    probs[i] = std::exp(static_cast<double>((candidates_[i].first - mx) * inv_t));
    sum += probs[i];
  }
  for (double& p : probs) p /= sum;
  // min-p: drop tokens below min_p times the top probability.
  size_t n = probs.size();
  if (params_.min_p > 0.0f) {
    const double floor = params_.min_p * probs[0];
    size_t m = 1;
    while (m < n && probs[m] >= floor) ++m;
    n = m;
  }
  // top-p: smallest prefix whose mass reaches top_p.
  if (params_.top_p < 1.0f) {
    double cum = 0.0;
    size_t m = 0;
    while (m < n) {
      cum += probs[m++];
      if (cum >= params_.top_p) break;
    }
    n = std::max<size_t>(1, m);
  }
  double mass = 0.0;
  for (size_t i = 0; i < n; ++i) mass += probs[i];
  std::uniform_real_distribution<double> uni(0.0, mass);
  const double r = uni(rng_);
  double cum = 0.0;
  size_t pick = n - 1;
  for (size_t i = 0; i < n; ++i) {
    cum += probs[i];
    if (r < cum) {
      pick = i;
      break;
    }
  }
  const int32_t id = candidates_[pick].second;
  record_logprobs(logits, n_vocab, id);
  return id;
}

}  // namespace kvserve
