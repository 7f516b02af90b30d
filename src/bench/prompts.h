#pragma once
// Benchmark prompts: random token ids of a given length, optionally sharing a prefix (to exercise the
// prefix cache), reproducible from a seed; and a word rendering for servers that need text prompts.
#include <cstdint>
#include <string>
#include <vector>

#include "model/vocab.h"

namespace kvserve::bench {

struct PromptSpec {
  int num_prompts = 16;
  int prompt_len = 128;    // tokens, BOS included when one is added
  int prefix_len = 0;      // leading tokens shared within a group (0 = fully random prompts)
  int prefix_groups = 1;   // prompt i uses shared prefix i % prefix_groups
  uint64_t seed = 0;
};

// Ids drawn uniformly from `pool`; each prompt starts with `bos` when bos >= 0. Throws Error on a bad
// spec (prefix longer than the prompt, empty pool, ...).
std::vector<std::vector<int32_t>> make_prompts(const PromptSpec& spec, const std::vector<int32_t>& pool, int32_t bos);

// The ids worth sampling from a vocabulary: normal tokens (not control, byte, unused, BOS/EOS); every
// id but BOS/EOS/EOT when the vocabulary marks none as normal.
std::vector<int32_t> token_pool(const Vocab& vocab);
// Every id in [lo, hi).
std::vector<int32_t> id_range_pool(int32_t lo, int32_t hi);

// Text for servers that take text: each id becomes one common English word (most tokenizers give about
// one token per word, but the server's count is what gets reported).
std::string ids_to_words(const std::vector<int32_t>& ids);

}  // namespace kvserve::bench
