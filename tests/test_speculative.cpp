// Speculative decoding with prompt-lookup drafts: the n-gram proposer, the sampler's exact verification
// (a draft taken with probability p(draft), else a draw from p without it: the token follows p), and the
// Generator's speculative steps, which must give greedy decoding's very tokens (and stop where it stops)
// while proposing and taking drafts, leaving every block free or cached.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/thread_pool.h"
#include "engine/generator.h"
#include "engine/draft_pacing.h"
#include "engine/ngram_proposer.h"
#include "engine/sampler.h"
#include "model/loaders.h"
#include "stories_model.h"
#include "test_checks.h"

using namespace kvserve;
using json = nlohmann::json;

namespace {

using Tokens = std::vector<int32_t>;

using test::expect_all_blocks_free_or_cached;
using test::one_thread;

std::vector<json> stories_goldens() { return test::stories_greedy_goldens(); }

using test::greedy;

}  // namespace

TEST(NgramProposer, LongestSuffixFirstLatestOccurrenceUpToK) {
  const NgramProposer p({.max_n = 3, .min_n = 1});
  // Suffix [7 8 9] occurred at 0 and at 5; the latest (5) is followed by 4 4.
  EXPECT_EQ(p.propose(Tokens{7, 8, 9, 1, 2, 7, 8, 9, 4, 4, 0, 7, 8, 9}, 5), (Tokens{4, 4, 0, 7, 8}));
  EXPECT_EQ(p.propose(Tokens{7, 8, 9, 1, 2, 7, 8, 9, 4, 4, 0, 7, 8, 9}, 2), (Tokens{4, 4}));
  // No 3- or 2-gram repeats; the 1-gram [5] does (at 1, followed by 6 3).
  EXPECT_EQ(p.propose(Tokens{1, 5, 6, 3, 9, 5}, 4), (Tokens{6, 3, 9, 5}));
  // The longer match wins over a later shorter one: [2 3] at 1 (then 4), though [3] alone is later at 5 (then 0).
  EXPECT_EQ(p.propose(Tokens{1, 2, 3, 4, 9, 3, 0, 2, 3}, 1), (Tokens{4}));
  // A run of one token proposes more of it.
  EXPECT_EQ(p.propose(Tokens{5, 5, 5}, 3), (Tokens{5}));
  EXPECT_TRUE(p.propose(Tokens{1, 2, 3, 4}, 4).empty());
  EXPECT_TRUE(p.propose(Tokens{1}, 4).empty());
  EXPECT_TRUE(p.propose(Tokens{1, 2, 1}, 0).empty());
  const NgramProposer two({.max_n = 2, .min_n = 2});
  EXPECT_TRUE(two.propose(Tokens{1, 5, 6, 3, 9, 5}, 4).empty());  // 1-grams are not looked up
  EXPECT_THROW(NgramProposer({.max_n = 1, .min_n = 2}), Error);
  EXPECT_THROW(NgramProposer({.max_n = 3, .min_n = 0}), Error);
}

namespace {

// softmax(logits / T) over the top-k (0: all), in double.
std::vector<double> tempered(const std::vector<float>& logits, float temperature, int top_k) {
  const int n = static_cast<int>(logits.size());
  std::vector<int> order(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) order[static_cast<size_t>(i)] = i;
  std::sort(order.begin(), order.end(), [&](int a, int b) { return logits[a] > logits[b]; });
  const int kept = top_k > 0 ? top_k : n;
  double z = 0;
  for (int r = 0; r < kept; ++r) z += std::exp(logits[order[r]] / temperature);
  std::vector<double> p(static_cast<size_t>(n), 0.0);
  for (int r = 0; r < kept; ++r) p[order[r]] = std::exp(logits[order[r]] / temperature) / z;
  return p;
}

}  // namespace

// Greedy: the argmax, accepted exactly when it is the draft.
TEST(SpeculativeSampler, GreedyTakesTheDraftOnlyWhenItIsTheArgmax) {
  Sampler s(greedy(10));
  std::vector<float> logits = {0.1f, 2.0f, -1.0f, 1.5f};
  bool accepted = true;
  std::vector<float> l = logits;
  EXPECT_EQ(s.sample_with_draft(l.data(), 4, 3, &accepted), 1);
  EXPECT_FALSE(accepted);
  l = logits;
  EXPECT_EQ(s.sample_with_draft(l.data(), 4, 1, &accepted), 1);
  EXPECT_TRUE(accepted);
  l = logits;
  EXPECT_THROW(s.sample_with_draft(l.data(), 4, 4, &accepted), Error);
}

// Temperature sampling: over many seeded draws with a fixed draft, each token's frequency is its probability
// under the sampler's distribution (within 4.5 standard deviations), the draft accepted at its own
// probability; with top-k cutting the draft out it is never taken. A verification that always accepted, or
// drew the replacement from p itself, is off by far more.
TEST(SpeculativeSampler, VerifiedTokensFollowTheSamplersDistribution) {
  const std::vector<float> logits = {1.0f, 0.2f, -0.5f, 2.0f, 0.0f, 1.2f};
  const int n = static_cast<int>(logits.size());
  for (const auto& [temperature, top_k, draft] : {std::tuple<float, int, int32_t>{1.0f, 0, 3}, {0.7f, 0, 2},
                                                  {1.3f, 3, 1}, {1.0f, 3, 5}}) {
    SamplingParams p;
    p.temperature = temperature;
    p.top_k = top_k;
    p.seed = 1234;
    p.has_seed = true;
    Sampler s(p);
    const std::vector<double> want = tempered(logits, temperature, top_k);  // the target
    const int draws = 60000;
    std::vector<int> count(static_cast<size_t>(n), 0);
    int taken = 0;
    for (int d = 0; d < draws; ++d) {
      std::vector<float> l = logits;
      bool accepted = false;
      const int32_t t = s.sample_with_draft(l.data(), n, draft, &accepted);
      ++count[static_cast<size_t>(t)];
      taken += accepted;
      if (accepted) {
        EXPECT_EQ(t, draft);
      }
    }
    for (int i = 0; i < n; ++i) {
      const double pi = want[static_cast<size_t>(i)];
      const double sd = std::sqrt(pi * (1 - pi) / draws);
      EXPECT_NEAR(static_cast<double>(count[static_cast<size_t>(i)]) / draws, pi, 4.5 * sd + 1e-9)
          << "T " << temperature << " top_k " << top_k << " token " << i;
    }
    EXPECT_EQ(taken, count[static_cast<size_t>(draft)]);
  }
}

// A draft model's proposals: propose() fills q with the distribution sample() draws from and draws from it;
// verifying each draft against another distribution p (sample_with_draft with q) gives tokens that follow p
// (within 4.5 standard deviations over 60k draws), the draft taken at the rate sum_i min(p_i, q_i). Drafts
// q puts where p has no mass (top-k) are never taken. Keeping every draft, or replacing a rejected one by a
// draw from p itself, is off by far more.
TEST(SpeculativeSampler, DraftModelProposalsVerifiedFollowTheTarget) {
  const std::vector<float> target = {1.0f, 0.2f, -0.5f, 2.0f, 0.0f, 1.2f};
  const std::vector<float> draft_logits = {0.3f, 1.5f, 0.5f, 1.0f, -1.0f, 1.2f};
  const int n = static_cast<int>(target.size());
  for (const auto& [temperature, top_k] : {std::pair<float, int>{1.0f, 0}, {0.7f, 0}, {1.3f, 3}}) {
    SamplingParams sp;
    sp.temperature = temperature;
    sp.top_k = top_k;
    sp.seed = 99;
    sp.has_seed = true;
    Sampler verifier(sp);
    sp.seed = 7;
    sp.top_k = 0;  // the draft's own distribution need not be the target's
    Sampler proposer(sp);
    const std::vector<double> p = tempered(target, temperature, top_k);
    const std::vector<double> q_want = tempered(draft_logits, temperature, 0);
    double want_taken = 0;
    for (int i = 0; i < n; ++i) want_taken += std::min(p[static_cast<size_t>(i)], q_want[static_cast<size_t>(i)]);
    const int draws = 60000;
    std::vector<int> count(static_cast<size_t>(n), 0), proposed(static_cast<size_t>(n), 0);
    int taken = 0;
    std::vector<float> q(static_cast<size_t>(n));
    for (int d = 0; d < draws; ++d) {
      std::vector<float> dl = draft_logits;
      const int32_t draft = proposer.propose(dl.data(), n, q.data());
      if (d == 0) {
        for (int i = 0; i < n; ++i) ASSERT_NEAR(q[static_cast<size_t>(i)], q_want[static_cast<size_t>(i)], 1e-6) << i;
      }
      ++proposed[static_cast<size_t>(draft)];
      std::vector<float> l = target;
      bool accepted = false;
      const int32_t t = verifier.sample_with_draft(l.data(), n, draft, &accepted, q.data());
      ++count[static_cast<size_t>(t)];
      taken += accepted;
      if (accepted) {
        EXPECT_EQ(t, draft);
      }
      if (top_k > 0 && p[static_cast<size_t>(draft)] == 0.0) {
        EXPECT_FALSE(accepted);
      }
    }
    for (int i = 0; i < n; ++i) {
      const double pi = p[static_cast<size_t>(i)], qi = q_want[static_cast<size_t>(i)];
      EXPECT_NEAR(static_cast<double>(count[static_cast<size_t>(i)]) / draws, pi,
                  4.5 * std::sqrt(pi * (1 - pi) / draws) + 1e-9)
          << "T " << temperature << " top_k " << top_k << " token " << i;
      EXPECT_NEAR(static_cast<double>(proposed[static_cast<size_t>(i)]) / draws, qi,
                  4.5 * std::sqrt(qi * (1 - qi) / draws) + 1e-9)
          << "proposals, T " << temperature << " token " << i;
    }
    EXPECT_NEAR(static_cast<double>(taken) / draws, want_taken, 4.5 * std::sqrt(want_taken * (1 - want_taken) / draws));
  }
  // Greedy: q is all on the draft model's argmax; the target's argmax is returned, taken when the same.
  Sampler g(greedy(10));
  std::vector<float> q(static_cast<size_t>(n));
  std::vector<float> dl = draft_logits;
  EXPECT_EQ(g.propose(dl.data(), n, q.data()), 1);
  EXPECT_EQ(q[1], 1.0f);
  EXPECT_EQ(std::accumulate(q.begin(), q.end(), 0.0f), 1.0f);
  std::vector<float> l = target;
  bool accepted = true;
  EXPECT_EQ(g.sample_with_draft(l.data(), n, 1, &accepted, q.data()), 3);
  EXPECT_FALSE(accepted);
  // A draft its own distribution gives no mass is refused.
  q.assign(static_cast<size_t>(n), 0.0f);
  q[0] = 1.0f;
  l = target;
  EXPECT_THROW(g.sample_with_draft(l.data(), n, 2, &accepted, q.data()), Error);
}

// Greedy with speculation gives plain greedy's tokens on every golden prompt, for several draft lengths and
// n-gram sizes, while proposing drafts and taking many of them (stories260K retells its own phrases).
TEST(SpeculativeGenerator, GreedyTokensAreExactlyPlainGreedys) {
  const std::vector<json> goldens = stories_goldens();
  ASSERT_FALSE(goldens.empty());
  GeneratorOptions plain_opts;
  plain_opts.block_size = 8;
  Generator plain(test::stories260k(), plain_opts, one_thread());
  int drafted = 0, taken = 0;
  for (const json& g : goldens) {
    const Tokens prompt = g["prompt_ids"].get<Tokens>();
    const GenerationResult want = plain.generate(prompt, greedy(160));
    for (const auto& [k, max_n] : {std::pair{4, 3}, std::pair{1, 1}, std::pair{7, 4}}) {
      GeneratorOptions o = plain_opts;
      o.speculative_tokens = k;
      o.ngram = {.max_n = max_n, .min_n = 1};
      Generator spec(test::stories260k(), o, one_thread());
      const GenerationResult got = spec.generate(prompt, greedy(160));
      EXPECT_EQ(got.generated_ids, want.generated_ids) << g["prompt"] << " k " << k;
      EXPECT_EQ(got.text, want.text);
      EXPECT_LE(got.accepted_draft_tokens, got.draft_tokens);
      drafted += got.draft_tokens;
      taken += got.accepted_draft_tokens;
      expect_all_blocks_free_or_cached(spec);
      // Again on the same Generator: its prefix cache holds only verified tokens.
      const GenerationResult again = spec.generate(prompt, greedy(160));
      EXPECT_EQ(again.generated_ids, want.generated_ids);
      expect_all_blocks_free_or_cached(spec);
    }
  }
  EXPECT_GT(drafted, 0);
  EXPECT_GT(taken, drafted / 10);
  std::printf("n-gram drafts: %d proposed, %d taken\n", drafted, taken);
}

// Where plain greedy stops (max_tokens of 1-3, a stop string inside a run of taken drafts, EOS, the
// context's end), speculation stops at the same token with the same text and reason.
TEST(SpeculativeGenerator, StopsWhereGreedyStops) {
  const json g = stories_goldens().front();
  const Tokens prompt = g["prompt_ids"].get<Tokens>();
  GeneratorOptions spec_opts;
  spec_opts.speculative_tokens = 5;
  Generator plain(test::stories260k(), {}, one_thread());
  Generator spec(test::stories260k(), spec_opts, one_thread());
  const std::string full = plain.generate(prompt, greedy(150)).text;
  std::vector<SamplingParams> cases;
  for (int m : {1, 2, 3}) cases.push_back(greedy(m));
  SamplingParams stop = greedy(150);
  stop.stop = {full.substr(full.size() / 2, 6)};
  cases.push_back(stop);
  SamplingParams eos = greedy(400);
  eos.ignore_eos = false;
  cases.push_back(eos);
  for (const SamplingParams& p : cases) {
    const GenerationResult want = plain.generate(prompt, p);
    const GenerationResult got = spec.generate(prompt, p);
    EXPECT_EQ(got.generated_ids, want.generated_ids) << p.max_tokens;
    EXPECT_EQ(got.text, want.text) << p.max_tokens;
    EXPECT_EQ(got.finish_reason, want.finish_reason) << p.max_tokens;
    expect_all_blocks_free_or_cached(spec);
  }
  // The context's end: a 64-token context stops both after the same tokens.
  GeneratorOptions small = spec_opts;
  small.max_context = 64;
  Generator spec_small(test::stories260k(), small, one_thread());
  GeneratorOptions plain_small;
  plain_small.max_context = 64;
  Generator plain_ctx(test::stories260k(), plain_small, one_thread());
  SamplingParams p = greedy(64 - static_cast<int>(prompt.size()));
  EXPECT_EQ(spec_small.generate(prompt, p).generated_ids, plain_ctx.generate(prompt, p).generated_ids);
}

// Sampling with speculation: seeded runs repeat themselves, every draft taken counts, and the tokens are the
// model's (a temperature of 0.8 over stories260K): the verification rule itself is checked above.
TEST(SpeculativeGenerator, SeededSamplingIsReproducible) {
  const Tokens prompt = stories_goldens().front()["prompt_ids"].get<Tokens>();
  GeneratorOptions o;
  o.speculative_tokens = 4;
  SamplingParams p;
  p.temperature = 0.8f;
  p.seed = 99;
  p.has_seed = true;
  p.max_tokens = 120;
  p.ignore_eos = true;
  Generator a(test::stories260k(), o, one_thread());
  Generator b(test::stories260k(), o, one_thread());
  const GenerationResult ra = a.generate(prompt, p);
  EXPECT_EQ(ra.generated_ids, b.generate(prompt, p).generated_ids);
  EXPECT_EQ(ra.generated_ids.size(), 120u);
  EXPECT_GT(ra.draft_tokens, 0);
  expect_all_blocks_free_or_cached(a);
}

// LongRoPE on auto with speculation: drafts never carry a sequence past the original context on the short
// factors; the switch recomputes as without speculation, and greedy tokens stay plain greedy's.
TEST(SpeculativeGenerator, LongRopeSwitchUnderSpeculation) {
  auto phi = load_model(std::string(KVSERVE_SOURCE_DIR) + "/tests/golden/arch/tiny-phi3-longrope.gguf");
  Tokens prompt;
  for (int i = 0; i < 240; ++i) prompt.push_back(1 + (i * 7) % 40);  // repetitive: drafts get proposed
  GeneratorOptions o;
  o.max_context = 512;
  Generator plain(*phi, o, one_thread());
  o.speculative_tokens = 6;
  Generator spec(*phi, o, one_thread());
  const GenerationResult want = plain.generate(prompt, greedy(40));
  const GenerationResult got = spec.generate(prompt, greedy(40));
  EXPECT_EQ(got.generated_ids, want.generated_ids);
  EXPECT_EQ(got.rope_restarts, 1);
  EXPECT_GT(got.draft_tokens, 0);
  expect_all_blocks_free_or_cached(spec);
}

namespace {

std::unique_ptr<Model> golden_model(const std::string& stem) {
  return load_model(std::string(KVSERVE_SHARED_DIR) + "/golden/gguf/models/" + stem + ".gguf");
}

void expect_draft_cache_free(const Generator& g) {
  ASSERT_NE(g.draft_kv_cache(), nullptr);
  const KVCacheManager& kv = *g.draft_kv_cache()->manager;
  EXPECT_TRUE(kv.sequences().empty());
  EXPECT_EQ(kv.pool().num_free_blocks(), kv.pool().num_blocks());
}

}  // namespace

// A draft model: greedy tokens are plain greedy's on every golden prompt, with stories260K's GGUF copy as
// the draft (the same weights: every draft taken), its Q4_0 copy (most taken: 583 of 848 measured) and
// tiny-mha (random weights of the same vocabulary: none taken); both models' caches are free after every call.
TEST(SpeculativeGenerator, DraftModelGreedyTokensAreExactlyPlainGreedys) {
  const std::vector<json> goldens = stories_goldens();
  ASSERT_FALSE(goldens.empty());
  GeneratorOptions plain_opts;
  plain_opts.block_size = 8;
  plain_opts.max_context = 512;
  Generator plain(test::stories260k(), plain_opts, one_thread());
  for (const std::string stem : {"stories260K-F32", "stories260K-Q4_0", "tiny-mha"}) {
    const auto draft = golden_model(stem);
    GeneratorOptions o = plain_opts;
    o.speculative_tokens = 4;
    o.draft_model = draft.get();
    Generator spec(test::stories260k(), o, one_thread());
    int drafted = 0, taken = 0;
    for (const json& g : goldens) {
      const Tokens prompt = g["prompt_ids"].get<Tokens>();
      const GenerationResult want = plain.generate(prompt, greedy(120));
      const GenerationResult got = spec.generate(prompt, greedy(120));
      EXPECT_EQ(got.generated_ids, want.generated_ids) << stem;
      EXPECT_EQ(got.finish_reason, want.finish_reason) << stem;
      drafted += got.draft_tokens;
      taken += got.accepted_draft_tokens;
      expect_all_blocks_free_or_cached(spec);
      expect_draft_cache_free(spec);
    }
    std::printf("draft %s: %d of %d drafts taken\n", stem.c_str(), taken, drafted);
    EXPECT_GT(drafted, 0) << stem;
    if (stem == "stories260K-F32") {
      EXPECT_EQ(taken, drafted) << stem;
    } else if (stem == "stories260K-Q4_0") {
      EXPECT_GT(taken * 2, drafted) << stem;
    } else {
      EXPECT_LT(taken * 4, drafted) << stem;
    }
  }
}

// Sampling with a draft model of random weights (its proposals mostly outside the target's top 3): every
// token emitted is one of the target's 3 most likely at its position (teacher-forced logits), as top-k 3
// sampling allows; a verification that kept drafts the target gives no mass would break this at once.
// Seeded runs repeat themselves.
TEST(SpeculativeGenerator, DraftModelSamplesStayInTheTargetsTopK) {
  const auto draft = golden_model("tiny-mha");
  const Tokens prompt = stories_goldens().front()["prompt_ids"].get<Tokens>();
  GeneratorOptions o;
  o.max_context = 512;
  o.speculative_tokens = 4;
  o.draft_model = draft.get();
  Generator spec(test::stories260k(), o, one_thread());
  Generator again(test::stories260k(), o, one_thread());
  GeneratorOptions plain_opts;
  plain_opts.max_context = 512;
  Generator plain(test::stories260k(), plain_opts, one_thread());
  int drafted = 0, taken = 0;
  for (uint64_t seed : {1u, 2u, 3u, 4u}) {
    SamplingParams p;
    p.temperature = 1.5f;
    p.top_k = 3;
    p.seed = seed;
    p.has_seed = true;
    p.max_tokens = 60;
    p.ignore_eos = true;
    const GenerationResult r = spec.generate(prompt, p);
    ASSERT_EQ(r.generated_ids.size(), 60u);
    EXPECT_EQ(again.generate(prompt, p).generated_ids, r.generated_ids) << seed;
    drafted += r.draft_tokens;
    taken += r.accepted_draft_tokens;
    Tokens ids = prompt;
    ids.insert(ids.end(), r.generated_ids.begin(), r.generated_ids.end());
    const auto logits = plain.teacher_forced_logits(ids, static_cast<int>(prompt.size()));
    for (size_t s = 0; s < r.generated_ids.size(); ++s) {
      const std::vector<float>& l = logits[s];
      const float mine = l[static_cast<size_t>(r.generated_ids[s])];
      const auto above = std::count_if(l.begin(), l.end(), [&](float x) { return x > mine; });
      EXPECT_LT(above, 3) << "seed " << seed << " step " << s << " token " << r.generated_ids[s];
    }
  }
  EXPECT_GT(drafted, 0);
  expect_all_blocks_free_or_cached(spec);
  expect_draft_cache_free(spec);
}

// A draft model of another vocabulary is refused by name: another size (llama-2-tiny-random's 32000), or the
// same size with a token of another text.
TEST(SpeculativeGenerator, DraftModelOfAnotherVocabularyIsRefused) {
  const auto other = golden_model("llama-2-tiny-random");
  GeneratorOptions o;
  o.max_context = 256;
  o.speculative_tokens = 4;
  o.draft_model = other.get();
  try {
    Generator g(test::stories260k(), o, one_thread());
    FAIL() << "a 32000-token draft was taken for a 512-token target";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("32000 tokens and the target's 512"), std::string::npos) << e.what();
  }
  Vocab a = test::stories260k().tokenizer->vocab();
  Vocab b = a;
  EXPECT_NO_THROW(check_draft_vocabulary(a, b));
  b.tokens[300] = "something else";
  try {
    check_draft_vocabulary(a, b);
    FAIL() << "a different token 300 was taken";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("token 300"), std::string::npos) << e.what();
  }
}

// Drafting pauses for kPauseSteps steps once the smoothed fraction taken falls under kMinTakenFraction (two
// steps of nothing taken: 1 -> 0.5 -> 0.25), then drafts again; a step that takes every draft keeps it going.
TEST(DraftPacing, PausesAfterFewDraftsAreTakenThenTriesAgain) {
  DraftPacing p;
  EXPECT_TRUE(p.may_draft());
  p.record(4, 4);
  EXPECT_TRUE(p.may_draft());
  p.record(0, 4);  // 0.5
  EXPECT_TRUE(p.may_draft());
  p.record(0, 4);  // 0.25: paused
  for (int i = 0; i < DraftPacing::kPauseSteps; ++i) EXPECT_FALSE(p.may_draft()) << i;
  EXPECT_TRUE(p.may_draft());
  p.record(0, 0);  // nothing proposed: no change
  EXPECT_TRUE(p.may_draft());
}
