#include "bench/prompts.h"

#include <random>

#include "core/error.h"

namespace kvserve::bench {

std::vector<std::vector<int32_t>> make_prompts(const PromptSpec& spec, const std::vector<int32_t>& pool, int32_t bos) {
  if (spec.num_prompts < 0) fail("bench: number of prompts {} is negative", spec.num_prompts);
  if (spec.prompt_len < 1) fail("bench: prompt length must be at least 1, got {}", spec.prompt_len);
  if (spec.prefix_len < 0 || spec.prefix_len > spec.prompt_len)
    fail("bench: shared prefix length {} must be in [0, prompt length {}]", spec.prefix_len, spec.prompt_len);
  if (spec.prefix_groups < 1) fail("bench: prefix groups must be at least 1, got {}", spec.prefix_groups);
  if (pool.empty()) fail("bench: no token ids to draw prompts from");
  std::mt19937_64 rng(spec.seed);
  std::uniform_int_distribution<size_t> pick(0, pool.size() - 1);
  const bool with_bos = bos >= 0;
  auto fill = [&](std::vector<int32_t>& v, size_t n) {
    while (v.size() < n) v.push_back(pool[pick(rng)]);
  };
  std::vector<std::vector<int32_t>> prefixes(static_cast<size_t>(spec.prefix_groups));
  for (auto& p : prefixes) {
    if (with_bos && spec.prefix_len > 0) p.push_back(bos);
    fill(p, static_cast<size_t>(spec.prefix_len));
  }
  std::vector<std::vector<int32_t>> prompts(static_cast<size_t>(spec.num_prompts));
  for (int i = 0; i < spec.num_prompts; ++i) {
    std::vector<int32_t>& p = prompts[static_cast<size_t>(i)];
    p = prefixes[static_cast<size_t>(i % spec.prefix_groups)];
    if (p.empty() && with_bos) p.push_back(bos);
    fill(p, static_cast<size_t>(spec.prompt_len));
  }
  return prompts;
}

std::vector<int32_t> token_pool(const Vocab& v) {
  std::vector<int32_t> pool;
  const int32_t n = static_cast<int32_t>(v.tokens.size());
  auto special = [&](int32_t id) { return id == v.bos_id || id == v.eos_id || id == v.eot_id; };
  for (int32_t id = 0; id < n; ++id) {
    const TokenType t = static_cast<size_t>(id) < v.token_types.size() ? v.token_types[static_cast<size_t>(id)]
                                                                        : TokenType::Normal;
    if (t == TokenType::Normal && !special(id)) pool.push_back(id);
  }
  if (pool.empty())
    for (int32_t id = 0; id < n; ++id)
      if (!special(id)) pool.push_back(id);
  return pool;
}

std::vector<int32_t> id_range_pool(int32_t lo, int32_t hi) {
  if (lo < 0 || hi <= lo) fail("bench: token id range [{}, {}) is empty or negative", lo, hi);
  std::vector<int32_t> pool;
  for (int32_t id = lo; id < hi; ++id) pool.push_back(id);
  return pool;
}

std::string ids_to_words(const std::vector<int32_t>& ids) {
  static const char* const kWords[] = {
      "the",   "of",    "and",   "to",    "in",    "is",    "you",   "that",  "it",    "he",    "was",   "for",
      "on",    "are",   "as",    "with",  "his",   "they",  "at",    "be",    "this",  "have",  "from",  "or",
      "one",   "had",   "by",    "word",  "but",   "not",   "what",  "all",   "were",  "we",    "when",  "your",
      "can",   "said",  "there", "use",   "an",    "each",  "which", "she",   "do",    "how",   "their", "if",
      "will",  "up",    "other", "about", "out",   "many",  "then",  "them",  "these", "so",    "some",  "her",
      "would", "make",  "like",  "him",   "into",  "time",  "has",   "look",  "two",   "more",  "write", "go",
      "see",   "number", "no",   "way",   "could", "people", "my",   "than",  "first", "water", "been",  "call",
      "who",   "oil",   "its",   "now",   "find",  "long",  "down",  "day",   "did",   "get",   "come",  "made",
      "may",   "part",  "over",  "new",   "sound", "take",  "only",  "little", "work", "know",  "place", "year",
      "live",  "me",    "back",  "give",  "most",  "very",  "after", "thing", "our",   "just",  "name",  "good",
      "man",   "think", "say",   "great", "where", "help",  "through", "much", "before", "line", "right", "too"};
  constexpr size_t kN = sizeof(kWords) / sizeof(kWords[0]);
  std::string out;
  for (int32_t id : ids) {
    if (!out.empty()) out += ' ';
    out += kWords[static_cast<size_t>(id < 0 ? -id : id) % kN];
  }
  return out;
}

}  // namespace kvserve::bench
