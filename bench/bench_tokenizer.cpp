// Tokenizer encode speed on a 4 KB prompt (SPM and byte-level BPE vocabularies from ../shared).
#include <benchmark/benchmark.h>

#include <string>

#include "model/loaders.h"
#include "model/tokenizer.h"

namespace {

void encode_4kb(benchmark::State& state, const char* file) {
  auto tok = kvserve::Tokenizer::create(
      kvserve::load_gguf_vocab(std::string(KVSERVE_SOURCE_DIR) + "/../shared/models/vocab/" + file));
  std::string prompt;
  while (prompt.size() < 4096) prompt += "The quick brown fox jumps over the lazy dog, naïvely; 12345 times! ";
  for (auto _ : state) benchmark::DoNotOptimize(tok->encode(prompt, true, false));
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(prompt.size()));
}

}  // namespace

BENCHMARK_CAPTURE(encode_4kb, gpt2, "ggml-vocab-gpt-2.gguf")->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(encode_4kb, llama_spm, "ggml-vocab-llama-spm.gguf")->Unit(benchmark::kMicrosecond);
BENCHMARK_MAIN();
