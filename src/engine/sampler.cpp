#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/error.h"
#include "kernels/cpu/ops.h"

namespace kvserve {

void apply_sampling_defaults(const SamplingDefaults& d, const SamplingGiven& given, SamplingParams& p) {
  if (d.temperature && !given.temperature) p.temperature = *d.temperature;
  if (d.top_p && !given.top_p) p.top_p = *d.top_p;
  if (d.top_k && !given.top_k) p.top_k = *d.top_k;
  if (d.min_p && !given.min_p) p.min_p = *d.min_p;
  if (d.repetition_penalty && !given.repetition_penalty) p.repetition_penalty = *d.repetition_penalty;
}

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
  if (min_tokens < 0 || min_tokens > max_tokens)
    fail("min_tokens must be in [0, max_tokens = {}], got {}", max_tokens, min_tokens);
  for (int32_t id : stop_token_ids)
    if (id < 0) fail("stop_token_ids must be >= 0, got {}", id);
  if (logprobs < 0 || logprobs > 20) fail("logprobs must be in [0, 20], got {}", logprobs);
  if (prompt_logprobs < -1 || prompt_logprobs > 20) fail("prompt_logprobs must be in [0, 20], got {}", prompt_logprobs);
  for (const auto& s : stop)
    if (s.empty()) fail("stop strings must not be empty");
  for (const auto& [id, bias] : logit_bias) {
    if (id < 0) fail("logit_bias token id must be >= 0, got {}", id);
    if (!(bias >= -100.0f && bias <= 100.0f)) fail("logit_bias must be in [-100, 100], got {} for token {}", bias, id);
  }
}

Sampler::Sampler(const SamplingParams& params) : params_(params) {
  params_.validate();
  rng_.seed(params_.has_seed ? params_.seed : std::random_device{}());
  set_eog_tokens({});
}

void Sampler::set_eog_tokens(const std::vector<int32_t>& eog_ids) {
  held_ids_ = params_.stop_token_ids;
  if (!params_.ignore_eos) held_ids_.insert(held_ids_.end(), eog_ids.begin(), eog_ids.end());
  std::sort(held_ids_.begin(), held_ids_.end());
  held_ids_.erase(std::unique(held_ids_.begin(), held_ids_.end()), held_ids_.end());
}

void Sampler::set_prompt(const std::vector<int32_t>& prompt_ids) {
  prompt_counts_.clear();
  generated_counts_.clear();
  num_generated_ = 0;
  for (int32_t id : prompt_ids) prompt_counts_[id]++;
}

void Sampler::accept(int32_t id) {
  generated_counts_[id]++;
  ++num_generated_;
}

int32_t Sampler::argmax(const float* logits, int32_t n_vocab) {
  return static_cast<int32_t>(kvserve::argmax(logits, n_vocab));
}

void Sampler::apply_bias_and_penalties(float* logits, int32_t n_vocab) const {
  auto in_range = [&](int32_t id) { return id >= 0 && id < n_vocab; };
  for (const auto& [id, bias] : params_.logit_bias)
    if (in_range(id)) logits[id] += bias;
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

namespace {
// Token order of the top-k and top-p truncations: higher logit first, lower id first among equals (a
// strict total order, so the kept set is the same whatever the algorithm that finds it).
bool by_logit(const std::pair<float, int32_t>& a, const std::pair<float, int32_t>& b) {
  return a.first > b.first || (a.first == b.first && a.second < b.second);
}

// NaN logits (a broken row) sort last, with weight 0.
float order_key(float logit) { return std::isnan(logit) ? -std::numeric_limits<float>::infinity() : logit; }

// The largest non-NaN logit (NaN when all are).
float max_logit(const float* logits, int32_t n_vocab) {
  const float at_argmax = logits[argmax(logits, n_vocab)];
  if (!std::isnan(at_argmax)) return at_argmax;
  float mx = std::numeric_limits<float>::quiet_NaN();  // argmax answers 0 when logits[0] is NaN
  for (int32_t i = 0; i < n_vocab; ++i)
    if (!std::isnan(logits[i]) && !(logits[i] <= mx)) mx = logits[i];
  return mx;
}

// Sum of w[0, n) in double, four chains (a 128k vocabulary per sequence per step: one chain is bound by
// the add latency).
double weight_sum(const float* w, int64_t n) {
  double s0 = 0.0, s1 = 0.0, s2 = 0.0, s3 = 0.0;
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    s0 += w[i];
    s1 += w[i + 1];
    s2 += w[i + 2];
    s3 += w[i + 3];
  }
  for (; i < n; ++i) s0 += w[i];
  return (s0 + s1) + (s2 + s3);
}

// The draw: the first id whose running weight (ids in increasing order) passes u times the total; whole
// runs of kWalkRun ids are stepped over by their sums. The answer always has a positive weight (the
// last such id if rounding leaves the running sum short of the target); -1 when every weight is 0.
constexpr int64_t kWalkRun = 256;
int32_t walk_to(const float* w, int32_t n, double u) {
  const double r = u * weight_sum(w, n);
  double cum = 0.0;
  for (int64_t start = 0; start < n; start += kWalkRun) {
    const int64_t end = std::min<int64_t>(n, start + kWalkRun);
    const double run = weight_sum(w + start, end - start);
    if (cum + run <= r) {
      cum += run;
      continue;
    }
    for (int64_t i = start; i < end; ++i) {
      cum += w[i];
      if (r < cum && w[i] > 0.0f) return static_cast<int32_t>(i);
    }
  }
  for (int32_t i = n - 1; i >= 0; --i)
    if (w[i] > 0.0f) return i;
  return -1;
}

// Bands of weight (relative to the top token's 1) in which top-p looks for its cut, highest first: at
// everyday temperatures the tokens above the first hold all but a sliver of the mass, so a sort of a few
// hundred tokens finds the cut; only a flat distribution needs the later bands.
constexpr float kTopPBands[] = {1e-4f, 1e-9f, 0.0f};

// Vocabulary-sized scratch, one per thread rather than per sampler: a server holds a sampler per running
// choice, and samples on the pool's threads (a 128k vocabulary: 1.5 MiB a copy).
struct Scratch {
  std::vector<std::pair<float, int32_t>> candidates;  // (logit, id) of the tokens being ordered
  std::vector<float> weights;                         // by id: exp((logit - max) / T), 0 once dropped
};
Scratch& scratch(int32_t n_vocab) {
  thread_local Scratch s;
  if (s.weights.size() < static_cast<size_t>(n_vocab)) s.weights.resize(static_cast<size_t>(n_vocab));
  return s;
}

// The k first tokens in by_logit order (0 < k < n), in that order: one pass keeping the k best seen in a
// heap whose top is the worst of them, which nearly every later token fails to beat in one comparison
// (ids come in increasing order, so a token only beats it with a strictly higher logit). A full
// nth_element over (logit, id) pairs took ~0.45 ms of a 49k vocabulary's draw, a tenth of a SmolLM2 step.
void top_k_candidates(const float* logits, int32_t n, int k, std::vector<std::pair<float, int32_t>>& out) {
  out.clear();
  for (int32_t i = 0; i < k; ++i) out.emplace_back(order_key(logits[i]), i);
  const auto before = [](const std::pair<float, int32_t>& a, const std::pair<float, int32_t>& b) {
    return by_logit(a, b);
  };
  std::make_heap(out.begin(), out.end(), before);
  float worst = out.front().first;
  for (int32_t i = k; i < n; ++i) {
    const float key = order_key(logits[i]);
    if (!(key > worst)) continue;
    std::pop_heap(out.begin(), out.end(), before);
    out.back() = {key, i};
    std::push_heap(out.begin(), out.end(), before);
    worst = out.front().first;
  }
  std::sort(out.begin(), out.end(), before);
}

// Zeroes the weights of every token after the top-p cut: the candidates gather the tokens of one band at
// a time and are sorted after the bands above (each band's tokens all weigh less than any above, so
// their sorted run extends the order as is) until the running weight reaches `target`.
void cut_top_p(const float* logits, int32_t n_vocab, double target, Scratch& sc) {
  float* w = sc.weights.data();
  auto& candidates = sc.candidates;
  candidates.clear();
  double cum = 0.0;
  float upper = std::numeric_limits<float>::infinity();
  for (float band : kTopPBands) {
    const size_t start = candidates.size();
    for (int32_t i = 0; i < n_vocab; ++i)
      if (w[i] > 0.0f && w[i] >= band && w[i] < upper) candidates.emplace_back(order_key(logits[i]), i);
    std::sort(candidates.begin() + static_cast<std::ptrdiff_t>(start), candidates.end(), by_logit);
    for (size_t k = start; k < candidates.size(); ++k) {
      cum += w[candidates[k].second];
      if (cum >= target) {
        for (size_t j = k + 1; j < candidates.size(); ++j) w[candidates[j].second] = 0.0f;
        for (int32_t i = 0; i < n_vocab; ++i)
          if (w[i] < band) w[i] = 0.0f;
        return;
      }
    }
    upper = band;
  }
  // Rounding left the whole set just short of the target: every token stays.
}
}  // namespace

// A full-vocabulary softmax at temperature 1 in one vectorized pass (the weights are free again once the
// draw is made), the top ones by selection rather than a sort.
float token_logprobs(const float* logits, int32_t n_vocab, int32_t chosen, int k, std::vector<TokenLogprob>& top,
                     int* rank) {
  top.clear();
  if (rank != nullptr) {
    *rank = 1;
    for (int32_t i = 0; i < n_vocab; ++i) *rank += logits[i] > logits[chosen] ? 1 : 0;
  }
  const float mx = max_logit(logits, n_vocab);
  if (std::isnan(mx)) return std::numeric_limits<float>::quiet_NaN();  // a row of NaNs has no distribution
  Scratch& sc = scratch(n_vocab);
  const double sum = exp_weights(logits, n_vocab, mx, 1.0f, sc.weights.data());
  const float log_z = mx + static_cast<float>(std::log(sum));
  k = std::min(k, n_vocab);
  if (k > 0) {
    auto& candidates = sc.candidates;
    candidates.clear();
    for (int32_t i = 0; i < n_vocab; ++i) candidates.emplace_back(order_key(logits[i]), i);
    std::nth_element(candidates.begin(), candidates.begin() + (k - 1), candidates.end(), by_logit);
    std::sort(candidates.begin(), candidates.begin() + k, by_logit);
    for (int i = 0; i < k; ++i) top.push_back({candidates[i].second, candidates[i].first - log_z});
  }
  return logits[chosen] - log_z;
}

void Sampler::record_logprobs(const float* logits, int32_t n_vocab, int32_t chosen) {
  last_top_.clear();
  if (params_.logprobs <= 0) return;
  last_logprob_ = token_logprobs(logits, n_vocab, chosen, params_.logprobs, last_top_);
}

void Sampler::hold_back_ends(float* logits, int32_t n_vocab) {
  if (num_generated_ >= params_.min_tokens || held_ids_.empty()) return;
  held_logits_.clear();
  for (int32_t id : held_ids_) {
    if (id >= n_vocab) break;
    held_logits_.emplace_back(id, logits[id]);
    logits[id] = -std::numeric_limits<float>::infinity();
  }
  // A grammar whose text is complete lets through only the ends: it decides, min_tokens yields.
  if (!(max_logit(logits, n_vocab) > -std::numeric_limits<float>::infinity()))
    for (const auto& [id, l] : held_logits_) logits[id] = l;
}

// What is kept, then one draw from it: top-k (the k first in by_logit order), min-p (at least min_p
// times the top token's probability), top-p (the shortest run from the top, in by_logit order, whose
// share of the top-k tokens' probability reaches top_p). The kept tokens are drawn from in id order,
// which only the order of the walk depends on, so no truncation sorts the vocabulary just to draw.
int32_t Sampler::sample(float* logits, int32_t n_vocab) { return draw(logits, n_vocab, -1, nullptr, nullptr, nullptr); }

int32_t Sampler::sample_with_draft(float* logits, int32_t n_vocab, int32_t draft, bool* accepted, const float* q) {
  if (draft < 0 || draft >= n_vocab) fail("sampler: draft token {} is outside the vocabulary of {}", draft, n_vocab);
  if (q != nullptr && !(q[draft] > 0.0f))
    fail("sampler: draft token {} has probability {} under the distribution it was drawn from", draft, q[draft]);
  return draw(logits, n_vocab, draft, q, accepted, nullptr);
}

int32_t Sampler::propose(float* logits, int32_t n_vocab, float* q) {
  return draw(logits, n_vocab, -1, nullptr, nullptr, q);
}

int32_t Sampler::draw(float* logits, int32_t n_vocab, int32_t draft, const float* q, bool* accepted, float* q_out) {
  if (n_vocab <= 0) fail("sampler: empty vocabulary");
  if (accepted != nullptr) *accepted = false;
  apply_bias_and_penalties(logits, n_vocab);
  hold_back_ends(logits, n_vocab);
  const float mx = params_.temperature == 0.0f ? 0.0f : max_logit(logits, n_vocab);
  // A row with no finite maximum (all NaN, all -inf, or a +inf) has no distribution to draw from: the
  // greedy choice, which is a +inf token when there is one.
  if (params_.temperature == 0.0f || !std::isfinite(mx)) {
    const int32_t id = argmax(logits, n_vocab);
    if (accepted != nullptr) *accepted = id == draft;
    if (q_out != nullptr) {
      std::fill(q_out, q_out + n_vocab, 0.0f);
      q_out[id] = 1.0f;
    }
    record_logprobs(logits, n_vocab, id);
    return id;
  }
  const float inv_t = 1.0f / params_.temperature;
  const double u = std::generate_canonical<double, std::numeric_limits<double>::digits>(rng_);
  Scratch& sc = scratch(n_vocab);
  float* w = sc.weights.data();
  // weights: exp((logit - max) / T), 0 for every token dropped so far; total: the top-k tokens' sum.
  double total = 0.0;
  if (params_.top_k > 0 && params_.top_k < n_vocab) {
    auto& candidates = sc.candidates;
    top_k_candidates(logits, n_vocab, params_.top_k, candidates);
    std::fill(w, w + n_vocab, 0.0f);
    for (int k = 0; k < params_.top_k; ++k) {
      const auto [l, i] = candidates[static_cast<size_t>(k)];
      w[i] = std::exp((l - mx) * inv_t);  // 0 for a NaN's -inf
      total += w[i];
    }
  } else {
    total = exp_weights(logits, n_vocab, mx, inv_t, w);
  }
  if (params_.min_p > 0.0f)
    for (int32_t i = 0; i < n_vocab; ++i)
      if (w[i] < params_.min_p) w[i] = 0.0f;
  if (params_.top_p < 1.0f) cut_top_p(logits, n_vocab, total * static_cast<double>(params_.top_p), sc);
  if (q_out != nullptr) {
    const double sum = weight_sum(w, n_vocab);
    for (int32_t i = 0; i < n_vocab; ++i) q_out[i] = static_cast<float>(static_cast<double>(w[i]) / sum);
  }
  double v = u;
  if (draft >= 0) {
    // Taken with probability min(1, p(draft) / q(draft)); otherwise the draw is from max(0, p - q)
    // renormalized (for a proposal that is always `draft`, p without it). Either way the token follows p
    // exactly.
    const double sum = weight_sum(w, n_vocab);
    const double p_draft = static_cast<double>(w[draft]) / sum;
    const double q_draft = q != nullptr ? static_cast<double>(q[draft]) : 1.0;
    if (u * q_draft < p_draft) {
      *accepted = true;
      record_logprobs(logits, n_vocab, draft);
      return draft;
    }
    if (q == nullptr) {
      w[draft] = 0.0f;
    } else {
      // In p's unnormalized weights: max(0, w - q * sum).
      for (int32_t i = 0; i < n_vocab; ++i)
        w[i] = static_cast<float>(std::max(0.0, static_cast<double>(w[i]) - static_cast<double>(q[i]) * sum));
      if (!(weight_sum(w, n_vocab) > 0.0)) {
        // p <= q everywhere: p = q but for rounding, and the draft is p's draw.
        *accepted = true;
        record_logprobs(logits, n_vocab, draft);
        return draft;
      }
    }
    v = std::generate_canonical<double, std::numeric_limits<double>::digits>(rng_);
  }
  const int32_t id = walk_to(w, n_vocab, v);
  if (id < 0) fail("sampler: no token left to draw");  // not reached: the top token keeps weight 1
  record_logprobs(logits, n_vocab, id);
  return id;
}

}  // namespace kvserve
