#include "engine/perplexity.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace kvserve {

double negative_log_likelihood(const float* logits, int n_vocab, int32_t token) {
  float max_logit = logits[0];
  for (int i = 1; i < n_vocab; ++i) max_logit = std::max(max_logit, logits[i]);
  double sum_exp = 0.0;
  for (int i = 0; i < n_vocab; ++i) sum_exp += std::exp(logits[i] - max_logit);
  return -(static_cast<double>(logits[token] - max_logit) - std::log(sum_exp));
}

PerplexityResult perplexity(Generator& gen, const Vocab& vocab, const std::vector<int32_t>& tokens,
                            const PerplexityOptions& opts, const std::function<void(int, double)>& on_chunk) {
  const int n_ctx = opts.n_ctx;
  if (n_ctx < 4) fail("perplexity: a context of {} tokens is too short (at least 4)", n_ctx);
  const int64_t n_tokens = static_cast<int64_t>(tokens.size());
  if (n_tokens < 2 * int64_t{n_ctx})
    fail("perplexity: the text has {} tokens; a context of {} needs at least {} (two chunks)", n_tokens, n_ctx,
         2 * n_ctx);
  const int n_vocab = static_cast<int>(vocab.tokens.size());
  const int64_t whole = n_tokens / n_ctx;
  const int n_chunks = static_cast<int>(opts.max_chunks < 0 ? whole : std::min<int64_t>(opts.max_chunks, whole));
  if (n_chunks < 1) fail("perplexity: no chunk to score (--chunks {})", opts.max_chunks);
  const int first = n_ctx / 2;
  const bool add_bos = vocab.add_bos && vocab.bos_id >= 0;

  PerplexityResult r;
  r.n_chunks = n_chunks;
  double nll = 0, nll2 = 0;
  std::vector<int32_t> chunk(static_cast<size_t>(n_ctx));
  for (int i = 0; i < n_chunks; ++i) {
    const auto start = tokens.begin() + static_cast<int64_t>(i) * n_ctx;
    std::copy(start, start + n_ctx, chunk.begin());
    if (add_bos) chunk[0] = vocab.bos_id;
    const std::vector<float> logits = gen.prefill_logits(chunk, first);
    // Row k follows chunk[first + k] and predicts chunk[first + k + 1]; the last row predicts past the chunk.
    for (int k = 0; k + first + 1 < n_ctx; ++k) {
      for (int32_t id : {chunk[static_cast<size_t>(first + k + 1)]})
        if (id < 0 || id >= n_vocab) fail("perplexity: token id {} outside the vocabulary of {}", id, n_vocab);
      const double v =
          negative_log_likelihood(logits.data() + static_cast<size_t>(k) * n_vocab, n_vocab, chunk[first + k + 1]);
      nll += v;
      nll2 += v * v;
      ++r.scored;
    }
    r.running.push_back(std::exp(nll / static_cast<double>(r.scored)));
    if (on_chunk) on_chunk(i, r.running.back());
  }
  const double mean = nll / static_cast<double>(r.scored);
  r.ppl = std::exp(mean);
  const double var = nll2 / static_cast<double>(r.scored) - mean * mean;
  r.ppl_stderr = var > 0 && r.scored > 1 ? std::sqrt(var / static_cast<double>(r.scored - 1)) * r.ppl : 0.0;
  return r;
}

}  // namespace kvserve
