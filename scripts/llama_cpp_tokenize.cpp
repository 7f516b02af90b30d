// llama.cpp's tokenization of strings with special tokens parsed, for a GGUF vocabulary: one JSON line per
// string, {"text": ..., "ids": [...]}, with add_special and parse_special as given. Written for
// scripts/make_special_token_fixture.py, built against the llama.cpp that llama-cpp-python vendors.
//
//   llama_cpp_tokenize VOCAB.gguf ADD_SPECIAL(0|1) PARSE_SPECIAL(0|1) < strings.jsonl-of-json-strings
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "llama.h"

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: %s VOCAB.gguf ADD_SPECIAL PARSE_SPECIAL < lines\n", argv[0]);
    return 2;
  }
  llama_log_set([](ggml_log_level, const char*, void*) {}, nullptr);
  llama_backend_init();
  llama_model_params mp = llama_model_default_params();
  mp.vocab_only = true;
  llama_model* model = llama_model_load_from_file(argv[1], mp);
  if (!model) return 1;
  const llama_vocab* vocab = llama_model_get_vocab(model);
  const bool add_special = std::atoi(argv[2]) != 0, parse_special = std::atoi(argv[3]) != 0;
  std::string line;
  // Each input line is one string with \n, \t and \\ escaped (the script writes them so).
  while (std::getline(std::cin, line)) {
    std::string text;
    for (size_t i = 0; i < line.size(); ++i) {
      if (line[i] == '\\' && i + 1 < line.size()) {
        const char c = line[++i];
        text += c == 'n' ? '\n' : c == 't' ? '\t' : c == 'r' ? '\r' : c;
      } else {
        text += line[i];
      }
    }
    std::vector<llama_token> ids(text.size() + 16);
    const int n = llama_tokenize(vocab, text.data(), static_cast<int32_t>(text.size()), ids.data(),
                                 static_cast<int32_t>(ids.size()), add_special, parse_special);
    if (n < 0) return 1;
    std::printf("[");
    for (int i = 0; i < n; ++i) std::printf("%s%d", i ? ", " : "", ids[static_cast<size_t>(i)]);
    std::printf("]\n");
  }
  llama_model_free(model);
  return 0;
}
