#pragma once
// Perplexity of a model over a text, computed as llama.cpp's llama-perplexity computes it (so the two
// engines' figures compare): the text's tokens (BOS added where the vocabulary adds one) cut into chunks
// of n_ctx tokens, each chunk's first token replaced by BOS when BOS is added, every chunk run from an
// empty cache, and only the second half of each chunk scored (positions n_ctx/2 .. n_ctx-2 predicting the
// next token), so every scored token has at least n_ctx/2 tokens of context. PPL = exp(mean NLL).
#include <cstdint>
#include <functional>
#include <vector>

#include "engine/generator.h"
#include "model/vocab.h"

namespace kvserve {

struct PerplexityOptions {
  int n_ctx = 512;
  int max_chunks = -1;  // < 0: every whole chunk of the text
};

struct PerplexityResult {
  double ppl = 0;
  double ppl_stderr = 0;       // llama.cpp's "+/-": ppl times the standard error of the mean NLL
  int64_t scored = 0;          // tokens scored
  int n_chunks = 0;
  std::vector<double> running;  // perplexity after each chunk, as llama.cpp prints [1]x,[2]y,...
};

// -log p(token | logits) with llama.cpp's log-softmax (float max, double sum of expf): exact agreement
// with its figures needs the same rounding.
double negative_log_likelihood(const float* logits, int n_vocab, int32_t token);

// Throws Error when `tokens` holds fewer than 2 * n_ctx tokens, or n_ctx is below 4. `on_chunk` (may be
// empty) is called after each chunk with its index and the running perplexity.
PerplexityResult perplexity(Generator& gen, const Vocab& vocab, const std::vector<int32_t>& tokens,
                            const PerplexityOptions& opts, const std::function<void(int, double)>& on_chunk = {});

}  // namespace kvserve
