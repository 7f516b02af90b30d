#include <gtest/gtest.h>

#include <cmath>
#include <map>
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
