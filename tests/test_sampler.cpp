#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <map>
#include <random>
#include <vector>

#include "core/error.h"
#include "engine/sampler.h"
#include "engine/stop_checker.h"

using namespace kvserve;

TEST(Sampler, GreedyTakesArgmaxLowestIdOnTies) {
  SamplingParams p;
  Sampler s(p);
  std::vector<float> l = {0.1f, 2.0f, 2.0f, -1.0f};
  EXPECT_EQ(s.sample(l.data(), 4), 1);
}

TEST(Sampler, SameSeedSameTokensDifferentSeedDiffers) {
  SamplingParams p;
  p.temperature = 1.0f;
  p.has_seed = true;
  auto run = [&](uint64_t seed) {
    p.seed = seed;
    Sampler s(p);
    std::vector<int32_t> out;
    for (int i = 0; i < 64; ++i) {
      std::vector<float> l(50);
      for (int j = 0; j < 50; ++j) l[j] = std::sin(j * 0.7f + i);
      out.push_back(s.sample(l.data(), 50));
    }
    return out;
  };
  EXPECT_EQ(run(7), run(7));
  EXPECT_NE(run(7), run(8));
}

TEST(Sampler, TopKOneIsGreedy) {
  SamplingParams p;
  p.temperature = 5.0f;
  p.top_k = 1;
  Sampler s(p);
  std::vector<float> l = {0.0f, 0.5f, 3.0f, 0.2f};
  for (int i = 0; i < 20; ++i) {
    auto c = l;
    EXPECT_EQ(s.sample(c.data(), 4), 2);
  }
}

TEST(Sampler, TopPKeepsOnlyTheNucleus) {
  SamplingParams p;
  p.temperature = 1.0f;
  p.top_p = 0.5f;
  p.has_seed = true;
  Sampler s(p);
  // probs ~ 0.64, 0.24, 0.09, 0.03: top_p 0.5 keeps only token 0.
  std::vector<float> l = {3.0f, 2.0f, 1.0f, 0.0f};
  for (int i = 0; i < 50; ++i) {
    auto c = l;
    EXPECT_EQ(s.sample(c.data(), 4), 0);
  }
}

TEST(Sampler, MinPDropsUnlikelyTokens) {
  SamplingParams p;
  p.temperature = 1.0f;
  p.min_p = 0.2f;
  p.has_seed = true;
  Sampler s(p);
  std::vector<float> l = {2.0f, 2.0f, -5.0f, -5.0f};
  for (int i = 0; i < 100; ++i) {
    auto c = l;
    int id = s.sample(c.data(), 4);
    EXPECT_TRUE(id == 0 || id == 1);
  }
}

TEST(Sampler, DistributionFollowsSoftmax) {
  SamplingParams p;
  p.temperature = 1.0f;
  p.has_seed = true;
  p.seed = 1;
  Sampler s(p);
  std::vector<float> l = {std::log(0.5f), std::log(0.3f), std::log(0.2f)};
  std::map<int, int> counts;
  const int n = 20000;
  for (int i = 0; i < n; ++i) {
    auto c = l;
    counts[s.sample(c.data(), 3)]++;
  }
  EXPECT_NEAR(counts[0] / double(n), 0.5, 0.02);
  EXPECT_NEAR(counts[1] / double(n), 0.3, 0.02);
  EXPECT_NEAR(counts[2] / double(n), 0.2, 0.02);
}

namespace {
// The sampling rules written the plain way: every token sorted by logit (ties: lower id first), top-k,
// softmax at temperature over the kept tokens, min-p against the top one, the top-p prefix; then the
// kept tokens in id order, walked to u times their mass.
int32_t reference_draw(const std::vector<float>& logits, const SamplingParams& p, double u) {
  std::vector<std::pair<float, int32_t>> c;
  for (int32_t i = 0; i < static_cast<int32_t>(logits.size()); ++i) c.emplace_back(logits[i], i);
  std::sort(c.begin(), c.end(), [](const auto& a, const auto& b) {
    return a.first > b.first || (a.first == b.first && a.second < b.second);
  });
  if (p.top_k > 0 && static_cast<size_t>(p.top_k) < c.size()) c.resize(static_cast<size_t>(p.top_k));
  std::vector<double> prob(c.size());
  double sum = 0;
  for (size_t i = 0; i < c.size(); ++i)
    sum += prob[i] = std::exp(static_cast<double>(c[i].first - c[0].first) / p.temperature);
  size_t n = c.size();
  if (p.min_p > 0) {
    size_t m = 1;
    while (m < n && prob[m] >= p.min_p * prob[0]) ++m;
    n = m;
  }
  if (p.top_p < 1) {
    double cum = 0;
    size_t m = 0;
    while (m < n) {
      cum += prob[m++];
      if (cum >= p.top_p * sum) break;
    }
    n = std::max<size_t>(1, m);
  }
  std::vector<double> kept(logits.size(), 0.0);
  double mass = 0;
  for (size_t i = 0; i < n; ++i) mass += kept[static_cast<size_t>(c[i].second)] = prob[i];
  double cum = 0;
  for (size_t id = 0; id < kept.size(); ++id) {
    cum += kept[id];
    if (u * mass < cum) return static_cast<int32_t>(id);
  }
  ADD_FAILURE() << "the walk did not reach u * mass";
  return -1;
}

// Rows shaped like a model's: the top token at 0, seven more within 3 temperatures of it, and a tail
// `depth` temperatures down (at 10.5 its weights, ~3e-5 of the top's, lie in top-p's second band and
// hold a few percent of the mass; at 21.5, ~5e-10, in its third).
std::vector<float> model_like_row(std::mt19937& rng, int n, float temperature, float depth) {
  std::normal_distribution<float> noise(0.0f, 0.3f);
  std::uniform_real_distribution<float> head(0.0f, 3.0f);
  std::vector<float> l(static_cast<size_t>(n));
  for (float& v : l) v = -temperature * (depth + noise(rng));
  l[rng() % n] = 0.0f;
  for (int k = 0; k < 7; ++k) l[rng() % n] = -temperature * head(rng);
  l[rng() % n] = l[rng() % n];  // a tie
  return l;
}

// The first canonical draw of a sampler seeded with `seed` (it takes one per token).
double first_uniform(uint64_t seed) {
  std::mt19937_64 stream(seed);
  return std::generate_canonical<double, std::numeric_limits<double>::digits>(stream);
}
}  // namespace

// The sampler draws exactly the reference's token for the same uniforms, across top-k, top-p, min-p and
// temperatures, with tails deep enough that top-p's cut lies in its second or third band.
TEST(Sampler, BandedDrawMatchesFullSortReference) {
  std::mt19937 rows(5);
  int checked = 0;
  for (int config = 0; config < 36; ++config) {
    SamplingParams p;
    p.temperature = std::array{0.7f, 1.0f, 1.6f}[config % 3];
    p.top_p = std::array{1.0f, 0.9f, 0.99999f, 0.9999999f}[config / 3 % 4];
    const float depth = std::array{2.0f, 10.5f, 21.5f}[config / 12];
    p.top_k = config % 7 == 1 ? 40 : 0;
    p.min_p = config % 5 == 3 ? 0.05f : 0.0f;
    p.has_seed = true;
    p.seed = 100 + config;
    Sampler s(p);
    std::mt19937_64 same_stream(p.seed);
    for (int i = 0; i < 40; ++i) {
      const std::vector<float> l = model_like_row(rows, 3000, p.temperature, depth);
      const double u = std::generate_canonical<double, std::numeric_limits<double>::digits>(same_stream);
      const int32_t want = reference_draw(l, p, u);
      auto c = l;
      ASSERT_EQ(s.sample(c.data(), 3000), want) << "config " << config << " row " << i;
      ++checked;
    }
  }
  EXPECT_EQ(checked, 36 * 40);
}

// A draw near the top of the mass (u > 0.999) lands in the tail of the second band when top-p keeps it
// (0.99999: the cut lies in that band) and in the head when top-p drops it (0.9).
TEST(Sampler, TopPCutInTheSecondBand) {
  uint64_t seed = 1;
  while (first_uniform(seed) <= 0.999) ++seed;
  std::mt19937 rows(9);
  const std::vector<float> l = model_like_row(rows, 3000, 1.0f, 10.5f);
  for (float top_p : {0.99999f, 0.9f}) {
    SamplingParams p;
    p.temperature = 1.0f;
    p.top_p = top_p;
    p.has_seed = true;
    p.seed = seed;
    Sampler s(p);
    auto c = l;
    const int32_t id = s.sample(c.data(), 3000);
    EXPECT_EQ(id, reference_draw(l, p, first_uniform(seed)));
    if (top_p > 0.99f) {
      EXPECT_LT(l[id], -5.0f) << "top_p " << top_p;
    } else {
      EXPECT_GE(l[id], -3.0f) << "top_p " << top_p;
    }
  }
}

// NaN logits (a broken row) are never drawn and do not stop the draw; rows of NaNs or of infinities still
// answer.
TEST(Sampler, NanLogitsAreNeverDrawn) {
  SamplingParams p;
  p.temperature = 1.0f;
  p.has_seed = true;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (int top_k : {0, 3}) {
    p.top_k = top_k;
    Sampler s(p);
    for (int i = 0; i < 200; ++i) {
      std::vector<float> l = {nan, 1.0f, nan, 0.5f, -1.0f, nan};
      const int32_t id = s.sample(l.data(), 6);
      EXPECT_TRUE(id == 1 || id == 3 || id == 4) << id;
    }
    std::vector<float> all_nan(5, nan);
    const int32_t id = s.sample(all_nan.data(), 5);
    EXPECT_TRUE(id >= 0 && id < 5);
    // Infinite logits: a +inf token is the draw; a row of -inf (everything masked) still answers.
    std::vector<float> inf_row = {1.0f, INFINITY, 2.0f, nan};
    EXPECT_EQ(s.sample(inf_row.data(), 4), 1);
    std::vector<float> masked(5, -INFINITY);
    const int32_t m = s.sample(masked.data(), 5);
    EXPECT_TRUE(m >= 0 && m < 5);
  }
}

TEST(Sampler, PenaltiesLowerRepeatedTokens) {
  SamplingParams p;
  p.repetition_penalty = 2.0f;
  p.presence_penalty = 0.5f;
  p.frequency_penalty = 0.25f;
  Sampler s(p);
  s.set_prompt({0});
  s.accept(1);
  s.accept(1);
  std::vector<float> l = {4.0f, 4.0f, 1.5f, -1.0f};
  // token 0: prompt only -> 4/2 = 2; token 1: generated twice -> 4/2 - 0.5 - 0.5 = 1.0
  EXPECT_EQ(s.sample(l.data(), 4), 0);
  EXPECT_FLOAT_EQ(l[0], 2.0f);
  EXPECT_FLOAT_EQ(l[1], 1.0f);
  EXPECT_FLOAT_EQ(l[2], 1.5f);
}

// logit_bias is added to the raw logits before the penalties: greedy follows it, -100 bans a token, and
// a draw at a temperature never picks a banned one.
TEST(Sampler, LogitBiasShiftsLogitsBeforePenaltiesAndSampling) {
  {
    SamplingParams p;
    p.logit_bias = {{2, 5.0f}, {0, -100.0f}};
    Sampler s(p);
    std::vector<float> l = {3.0f, 1.0f, -1.0f, 2.5f};
    EXPECT_EQ(s.sample(l.data(), 4), 2);  // -1 + 5 = 4 beats 3 - 100 and 2.5
    EXPECT_FLOAT_EQ(l[2], 4.0f);
    EXPECT_FLOAT_EQ(l[0], -97.0f);
  }
  {
    SamplingParams p;
    p.logit_bias = {{1, 2.0f}};
    p.repetition_penalty = 2.0f;
    Sampler s(p);
    s.set_prompt({1});
    std::vector<float> l = {0.0f, 2.0f};
    s.sample(l.data(), 2);
    EXPECT_FLOAT_EQ(l[1], 2.0f);  // (2 + 2) / 2: the bias first, then the penalty
  }
  {
    SamplingParams p;
    p.temperature = 1.0f;
    p.seed = 7;
    p.has_seed = true;
    p.logit_bias = {{0, -100.0f}, {1, -100.0f}};
    Sampler s(p);
    for (int i = 0; i < 200; ++i) {
      std::vector<float> l = {5.0f, 5.0f, 0.0f, 0.0f};
      const int32_t id = s.sample(l.data(), 4);
      ASSERT_TRUE(id == 2 || id == 3) << id;
    }
  }
  SamplingParams bad;
  bad.logit_bias = {{3, 101.0f}};
  EXPECT_THROW(bad.validate(), Error);
  bad.logit_bias = {{-1, 1.0f}};
  EXPECT_THROW(bad.validate(), Error);
}

TEST(Sampler, LogprobsAreNormalised) {
  SamplingParams p;
  p.logprobs = 3;
  Sampler s(p);
  std::vector<float> l = {1.0f, 2.0f, 3.0f};
  EXPECT_EQ(s.sample(l.data(), 3), 2);
  double sum = 0;
  for (auto& t : s.last_top_logprobs()) sum += std::exp(t.logprob);
  EXPECT_NEAR(sum, 1.0, 1e-5);
  EXPECT_EQ(s.last_top_logprobs()[0].id, 2);
  EXPECT_NEAR(s.last_logprob(), s.last_top_logprobs()[0].logprob, 1e-6);
}

// The reported log-probabilities against a double-precision softmax of the same row: the chosen token's
// and the top ones, in order (ties: lower id first), on a 32k-token row with repeated values.
TEST(Sampler, LogprobsMatchDoubleSoftmax) {
  std::mt19937 rng(3);
  std::normal_distribution<float> noise(0.0f, 3.0f);
  std::vector<float> l(32000);
  for (float& v : l) v = std::round(noise(rng) * 4.0f) / 4.0f;  // many ties
  double mx = -1e30;
  for (float v : l) mx = std::max(mx, static_cast<double>(v));
  double z = 0;
  for (float v : l) z += std::exp(static_cast<double>(v) - mx);
  std::vector<int32_t> order(l.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int32_t>(i);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return l[a] > l[b]; });
  for (float temperature : {0.0f, 0.8f}) {
    SamplingParams p;
    p.temperature = temperature;
    p.logprobs = 7;
    p.has_seed = true;
    Sampler s(p);
    auto c = l;
    const int32_t id = s.sample(c.data(), static_cast<int32_t>(l.size()));
    const auto logprob = [&](int32_t i) { return static_cast<double>(l[i]) - mx - std::log(z); };
    EXPECT_NEAR(s.last_logprob(), logprob(id), 1e-5);
    ASSERT_EQ(s.last_top_logprobs().size(), 7u);
    for (int k = 0; k < 7; ++k) {
      EXPECT_EQ(s.last_top_logprobs()[k].id, order[k]) << k;
      EXPECT_NEAR(s.last_top_logprobs()[k].logprob, logprob(order[k]), 1e-5) << k;
    }
  }
}

TEST(Sampler, RejectsOutOfRangeParameters) {
  SamplingParams p;
  p.top_p = 0.0f;
  EXPECT_THROW(Sampler{p}, Error);
  p = {};
  p.temperature = -1;
  EXPECT_THROW(Sampler{p}, Error);
  p = {};
  p.max_tokens = -5;
  EXPECT_THROW(p.validate(), Error);
}

TEST(StopChecker, HoldsBackPossibleStopPrefixAndCutsAtStop) {
  StopChecker s({"STOP", "\n\n"});
  EXPECT_EQ(s.push("Hello S"), "Hello ");
  EXPECT_EQ(s.push("T"), "");
  EXPECT_EQ(s.push("x"), "STx");
  EXPECT_EQ(s.push(" aST"), " a");
  EXPECT_EQ(s.push("OP tail"), "");
  EXPECT_TRUE(s.stopped());
  EXPECT_EQ(s.text(), "Hello STx a");
  EXPECT_EQ(s.push("more"), "");
}

TEST(StopChecker, StopSpanningManyPiecesAndFlush) {
  StopChecker s({"<end>"});
  std::string out;
  for (const char* p : {"a", "<", "e", "n", "d", ">"}) out += s.push(p);
  EXPECT_TRUE(s.stopped());
  EXPECT_EQ(out, "a");
  StopChecker t({"xyz"});
  EXPECT_EQ(t.push("abcx"), "abc");
  EXPECT_EQ(t.flush(), "x");
  EXPECT_FALSE(t.stopped());
}

// Top-k with ties at its cut keeps the lowest ids among the equal logits, as the full-sort reference does,
// wherever the tied tokens sit in the vocabulary (before, among and after the higher ones), NaNs last.
TEST(Sampler, TopKTiesAtTheCutKeepTheLowestIds) {
  std::mt19937 rows(12);
  for (int trial = 0; trial < 30; ++trial) {
    std::vector<float> l(2000);
    std::uniform_real_distribution<float> low(-20.0f, -5.0f);
    for (float& v : l) v = low(rows);
    for (int j = 0; j < 12; ++j) l[rows() % l.size()] = -1.0f;  // a dozen tied at the cut
    for (int j = 0; j < 3; ++j) l[rows() % l.size()] = 0.5f * static_cast<float>(j);
    l[rows() % l.size()] = std::numeric_limits<float>::quiet_NaN();
    SamplingParams p;
    p.temperature = 0.9f;
    p.top_k = 8;
    p.has_seed = true;
    p.seed = 500 + static_cast<uint64_t>(trial);
    Sampler s(p);
    std::mt19937_64 same_stream(p.seed);
    for (int i = 0; i < 5; ++i) {
      const double u = std::generate_canonical<double, std::numeric_limits<double>::digits>(same_stream);
      std::vector<float> no_nan = l;
      for (float& v : no_nan)
        if (std::isnan(v)) v = -std::numeric_limits<float>::infinity();
      auto c = l;
      ASSERT_EQ(s.sample(c.data(), static_cast<int32_t>(c.size())), reference_draw(no_nan, p, u)) << trial << " " << i;
    }
  }
}

// vLLM's min_tokens: the vocabulary's ends and the stop token ids are -inf until min_tokens tokens were
// accepted, then drawn as before; ignore_eos leaves the vocabulary's ends alone (only stop ids are held).
TEST(Sampler, MinTokensHoldsBackEveryEndUntilReached) {
  const std::vector<float> row = {0.0f, 5.0f, 4.0f, 1.0f, 3.0f};  // 1 and 4 end, 2 is a stop token id
  for (const bool ignore_eos : {false, true}) {
    SamplingParams p;
    p.min_tokens = 2;
    p.stop_token_ids = {2};
    p.ignore_eos = ignore_eos;
    Sampler s(p);
    s.set_prompt({3});
    s.set_eog_tokens({4, 1});
    std::vector<float> l = row;
    const int32_t first = s.sample(l.data(), 5);
    EXPECT_EQ(first, ignore_eos ? 1 : 3);
    EXPECT_EQ(l[2], -std::numeric_limits<float>::infinity());
    EXPECT_EQ(std::isinf(l[4]), !ignore_eos);
    s.accept(first);
    l = row;
    EXPECT_EQ(s.sample(l.data(), 5), ignore_eos ? 1 : 3);
    s.accept(3);
    l = row;
    EXPECT_EQ(s.sample(l.data(), 5), 1);  // two accepted: the ends are back
    EXPECT_EQ(l[2], 4.0f);
  }
  // A sampled distribution never gives an end before min_tokens either, over many draws.
  SamplingParams p;
  p.temperature = 1.0f;
  p.has_seed = true;
  p.max_tokens = 1000;
  p.min_tokens = 1000;
  Sampler s(p);
  s.set_eog_tokens({1});
  for (int i = 0; i < 300; ++i) {
    std::vector<float> l = {0.0f, 3.0f, 0.5f};
    EXPECT_NE(s.sample(l.data(), 3), 1);
    s.accept(0);
  }
}

// A row where only ends are left (a grammar whose text is complete) keeps them: min_tokens yields.
TEST(Sampler, MinTokensYieldsWhenOnlyEndsRemain) {
  SamplingParams p;
  p.min_tokens = 5;
  Sampler s(p);
  s.set_eog_tokens({2});
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> l = {-inf, -inf, 1.0f, -inf};
  EXPECT_EQ(s.sample(l.data(), 4), 2);
  EXPECT_EQ(l[2], 1.0f);
  // With a draft, the target distribution holds the end back: an end proposed early is not taken.
  std::vector<float> m = {0.5f, 0.0f, 9.0f, 0.0f};
  bool accepted = true;
  EXPECT_EQ(s.sample_with_draft(m.data(), 4, 2, &accepted), 0);
  EXPECT_FALSE(accepted);
}

TEST(Sampler, MinTokensAndStopTokenIdsAreChecked) {
  SamplingParams p;
  p.max_tokens = 4;
  p.min_tokens = 5;
  EXPECT_THROW(p.validate(), Error);
  p.min_tokens = -1;
  EXPECT_THROW(p.validate(), Error);
  p.min_tokens = 4;
  p.validate();
  p.stop_token_ids = {3, -2};
  EXPECT_THROW(p.validate(), Error);
}

// Only a stop string that ends in the newly pushed text counts, so one that was passed over while
// look was false (before min_tokens) does not stop later text; one straddling into a looked-at piece does.
TEST(StopChecker, LookFalseFindsNoStopButTheNextPieceDoes) {
  StopChecker s({"\n", "END"});
  EXPECT_EQ(s.push("a\nb", false), "a\nb");
  EXPECT_FALSE(s.stopped());
  EXPECT_EQ(s.push("c", true), "c");    // the earlier "\n" no longer counts
  EXPECT_EQ(s.push("xE", false), "x");  // held back all the same
  EXPECT_EQ(s.push("ND tail", true), "");
  EXPECT_TRUE(s.stopped());
  EXPECT_EQ(s.text(), "a\nbcx");
  StopChecker t({"ab"});
  EXPECT_EQ(t.push("ab", false), "ab");
  EXPECT_EQ(t.push("", true), "");
  EXPECT_FALSE(t.stopped());
  EXPECT_EQ(t.push("zab", true), "z");
  EXPECT_TRUE(t.stopped());
}
