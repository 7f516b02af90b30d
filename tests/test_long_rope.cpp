// LongRoPE's factor choice (engine/long_rope.h): auto takes the short factors within the original context and
// the long ones past it, recomputing a sequence that outgrows it, so each step's logits are those of a
// fresh pass over the sequence so far with the factors its length calls for. The short and long factors
// themselves are checked against llama.cpp by the goldens (test_golden.cpp).
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "engine/generator.h"
#include "engine/long_rope.h"
#include "model/loaders.h"
#include "stories_model.h"
#include "test_checks.h"

using namespace kvserve;

namespace {

const Model& tiny_phi3() {
  static const std::unique_ptr<Model> m =
      load_model(std::string(KVSERVE_SOURCE_DIR) + "/tests/golden/arch/tiny-phi3-longrope.gguf");
  return *m;
}

std::vector<int32_t> random_ids(std::mt19937& rng, int len, int n_vocab) {
  std::uniform_int_distribution<int32_t> tok(3, n_vocab - 1);
  std::vector<int32_t> p(static_cast<size_t>(len));
  p[0] = 1;
  for (int i = 1; i < len; ++i) p[static_cast<size_t>(i)] = tok(rng);
  return p;
}


}  // namespace

TEST(LongRope, ParsesTheThreeChoicesAndNamesThemOtherwise) {
  EXPECT_EQ(parse_long_rope_factors("auto"), LongRopeFactors::Auto);
  EXPECT_EQ(parse_long_rope_factors("short"), LongRopeFactors::Short);
  EXPECT_EQ(parse_long_rope_factors("long"), LongRopeFactors::Long);
  try {
    parse_long_rope_factors("longest");
    FAIL() << "no error";
  } catch (const Error& e) {
    const std::string what = e.what();
    for (const char* w : {"longest", "auto", "short", "long"}) EXPECT_NE(what.find(w), std::string::npos) << what;
  }
}

TEST(LongRope, SwitchPointAndCacheKeys) {
  const ModelConfig& phi = tiny_phi3().config;
  ASSERT_EQ(phi.rope_scaling.original_context, 256);
  EXPECT_EQ(long_rope_after(phi, LongRopeFactors::Auto), 256);
  EXPECT_EQ(long_rope_after(phi, LongRopeFactors::Long), 0);
  EXPECT_EQ(long_rope_after(phi, LongRopeFactors::Short), -1);
  // Models without LongRoPE have one factor set whatever is asked.
  for (LongRopeFactors f : {LongRopeFactors::Auto, LongRopeFactors::Short, LongRopeFactors::Long})
    EXPECT_EQ(long_rope_after(test::stories260k().config, f), -1);
  EXPECT_EQ(fixed_context_rope_factors(test::stories260k().config, 1 << 20), LongRopeFactors::Short);

  // Without LongRoPE the key is the tenant's salt; with it, the two factor sets never share a key, whatever
  // a tenant chooses as its salt.
  EXPECT_EQ(long_rope_cache_key("tenant", -1, false), "tenant");
  EXPECT_NE(long_rope_cache_key("tenant", 256, false), long_rope_cache_key("tenant", 256, true));
  const std::vector<std::string> salts = {"", "x", "long-rope:", "short-rope:", "long-rope:x", "short-rope:x"};
  for (const std::string& a : salts)
    for (const std::string& b : salts) {
      EXPECT_NE(long_rope_cache_key(a, 256, false), long_rope_cache_key(b, 256, true)) << a << " / " << b;
      if (a != b) {
        EXPECT_NE(long_rope_cache_key(a, 256, true), long_rope_cache_key(b, 256, true));
      }
    }
}

// Teacher forcing across the original context: rows while the sequence has at most 256 tokens are the short
// factors' bits; the row that takes it to 257 and every later one are the long factors' bits, as if the
// whole sequence had been run with them from the start.
TEST(LongRope, AutoTeacherForcingSwitchesToTheLongFactorsPastTheOriginalContext) {
  const Model& phi = tiny_phi3();
  std::mt19937 rng(3);
  const std::vector<int32_t> ids = random_ids(rng, 270, phi.config.n_vocab);
  const int prompt = 250;
  const auto run = [&](LongRopeFactors f, int p) {
    Generator g(phi, {.max_context = 512, .rope_factors = f});
    auto rows = g.teacher_forced_logits(ids, p);
    test::expect_all_blocks_free_or_cached(g);
    return rows;
  };
  const auto autos = run(LongRopeFactors::Auto, prompt);
  const auto shorts = run(LongRopeFactors::Short, prompt);
  const auto longs = run(LongRopeFactors::Long, 257);
  ASSERT_EQ(autos.size(), 21u);  // after 250, 251, ..., 270 tokens
  for (size_t r = 0; r < autos.size(); ++r) {
    const int64_t n_tokens = prompt + static_cast<int64_t>(r);
    if (n_tokens <= 256) {
      EXPECT_EQ(autos[r], shorts[r]) << "row " << r;
      EXPECT_NE(autos[r], longs[0]);
    } else {
      EXPECT_EQ(autos[r], longs[static_cast<size_t>(n_tokens - 257)]) << "row " << r;
      EXPECT_NE(autos[r], shorts[r]) << "row " << r;
    }
  }
}

// generate() on auto: a sequence that grows past 256 tokens is recomputed once with the long factors, and
// every token is the argmax of the logits auto's teacher forcing gives (itself checked above). A prompt
// already past 256 tokens starts with the long factors: the same tokens as asking for them.
TEST(LongRope, AutoGenerateRecomputesOnceAndMatchesTeacherForcing) {
  const Model& phi = tiny_phi3();
  std::mt19937 rng(4);
  SamplingParams params;
  params.max_tokens = 24;
  params.ignore_eos = true;
  Generator gen(phi, {.max_context = 512});
  const std::vector<int32_t> prompt = random_ids(rng, 245, phi.config.n_vocab);
  const GenerationResult r = gen.generate(prompt, params);
  EXPECT_EQ(r.rope_restarts, 1);
  ASSERT_EQ(r.generated_ids.size(), 24u);
  test::expect_all_blocks_free_or_cached(gen);

  std::vector<int32_t> seq = prompt;
  seq.insert(seq.end(), r.generated_ids.begin(), r.generated_ids.end() - 1);
  Generator forced(phi, {.max_context = 512});
  const auto rows = forced.teacher_forced_logits(seq, static_cast<int>(prompt.size()));
  ASSERT_EQ(rows.size(), r.generated_ids.size());
  for (size_t i = 0; i < rows.size(); ++i) {
    const auto best = std::max_element(rows[i].begin(), rows[i].end()) - rows[i].begin();
    EXPECT_EQ(r.generated_ids[i], best) << "token " << i;
  }

  // Again on the same Generator: the short blocks of the prompt and the long blocks of the recompute are both
  // in the prefix cache, under keys of their own; the tokens do not change.
  const GenerationResult again = gen.generate(prompt, params);
  EXPECT_GT(again.cached_tokens, 0);
  EXPECT_EQ(again.generated_ids, r.generated_ids);
  EXPECT_EQ(again.rope_restarts, 1);
  test::expect_all_blocks_free_or_cached(gen);

  const std::vector<int32_t> long_prompt = random_ids(rng, 270, phi.config.n_vocab);
  const GenerationResult a = gen.generate(long_prompt, params);
  EXPECT_EQ(a.rope_restarts, 0);
  Generator always_long(phi, {.max_context = 512, .rope_factors = LongRopeFactors::Long});
  EXPECT_EQ(a.generated_ids, always_long.generate(long_prompt, params).generated_ids);
  Generator always_short(phi, {.max_context = 512, .rope_factors = LongRopeFactors::Short});
  const GenerationResult s = always_short.generate(prompt, params);
  EXPECT_EQ(s.rope_restarts, 0);
  EXPECT_NE(s.generated_ids, r.generated_ids);  // the recompute changed what came after it
}

// Perplexity's chunks are whole sequences: one factor set for each, by its length.
TEST(LongRope, PrefillLogitsTakeTheFactorsOfTheWholeSequence) {
  const Model& phi = tiny_phi3();
  std::mt19937 rng(5);
  for (int len : {200, 300}) {
    const std::vector<int32_t> ids = random_ids(rng, len, phi.config.n_vocab);
    Generator a(phi, {.max_context = 512});
    Generator want(phi, {.max_context = 512, .rope_factors = len > 256 ? LongRopeFactors::Long : LongRopeFactors::Short});
    Generator other(phi, {.max_context = 512, .rope_factors = len > 256 ? LongRopeFactors::Short : LongRopeFactors::Long});
    const auto got = a.prefill_logits(ids, len - 8);
    EXPECT_EQ(got, want.prefill_logits(ids, len - 8)) << len;
    EXPECT_NE(got, other.prefill_logits(ids, len - 8)) << len;
  }
}
