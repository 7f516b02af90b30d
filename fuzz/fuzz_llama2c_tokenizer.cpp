// libFuzzer target: arbitrary bytes as a llama2.c tokenizer.bin. The first byte picks the vocab size
// the checkpoint header would give, so both short and long vocabularies are tried.
#include <cstddef>
#include <cstdint>

#include "core/error.h"
#include "model/loaders.h"

using namespace kvserve;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const int n_vocab = 1 + data[0] * 4;
  try {
    Vocab v = llama2c_vocab_from_memory(data + 1, size - 1, n_vocab, "fuzz-tokenizer.bin");
    if (v.tokens.size() != static_cast<size_t>(n_vocab)) __builtin_trap();
  } catch (const Error&) {
  }
  return 0;
}
