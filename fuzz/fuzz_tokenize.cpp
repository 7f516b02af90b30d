// libFuzzer target: arbitrary bytes as text to tokenize with real vocabularies of each kind (WordPiece,
// byte-level BPE, SentencePiece, Gemma 4's SentencePiece-style BPE) from ../shared/models/vocab and
// llama.cpp's vocabulary tests. The first byte picks the vocabulary and the add_special / parse_special
// flags. Every id must be in range, decoding must not fail, and a byte-level BPE vocabulary with every
// byte's symbol must give valid UTF-8 text back exactly.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include "core/error.h"
#include "model/loaders.h"
#include "model/model_cache.h"
#include "model/tokenizer.h"
#include "model/unicode.h"

using namespace kvserve;

namespace {

struct Loaded {
  std::unique_ptr<Tokenizer> tokenizer;
  bool byte_level = false;
};

std::vector<Loaded> load_all() {
  const std::string shared = std::string(KVSERVE_SOURCE_DIR) + "/../shared/models/vocab/";
  // llama.cpp's vocabulary tests as scripts/fetch_llama_cpp_vocab.sh installs them.
  const std::string llama_cpp = model_cache_dir() + "/llama.cpp-vocab-0.3.36/";
  std::vector<Loaded> out;
  for (const std::string path :
       {shared + "ggml-vocab-bert-bge.gguf", shared + "ggml-vocab-gpt-2.gguf", shared + "ggml-vocab-llama-spm.gguf",
        shared + "ggml-vocab-falcon.gguf", shared + "ggml-vocab-phi-3.gguf", llama_cpp + "ggml-vocab-gemma-4.gguf",
        llama_cpp + "ggml-vocab-qwen35.gguf"}) {
    try {
      Vocab v = load_gguf_vocab(path);
      // Byte-level BPE round-trips any text only when every byte's symbol is a token: llama.cpp (and so
      // kvserve) drops bytes that have none, and some vocabularies (Falcon's) lack a few controls.
      bool byte_complete = v.kind == Vocab::Kind::BPE;
      const std::unordered_set<std::string> texts(v.tokens.begin(), v.tokens.end());
      for (int b = 0; b < 256 && byte_complete; ++b)
        byte_complete = texts.count(unicode::byte_to_symbol(static_cast<uint8_t>(b))) > 0;
      out.push_back({Tokenizer::create(std::move(v)), byte_complete});
    } catch (const Error&) {
      // Not there (no ../shared beside the checkout, or the llama.cpp tests not fetched): fuzz the others.
    }
  }
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::vector<Loaded> tokenizers = load_all();
  if (size < 1 || tokenizers.empty()) return 0;
  const Loaded& t = tokenizers[data[0] % tokenizers.size()];
  const bool add_special = (data[0] >> 4) & 1;
  const bool parse_special = (data[0] >> 5) & 1;
  const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
  const std::vector<int32_t> ids = t.tokenizer->encode(text, add_special, parse_special);
  for (const int32_t id : ids)
    if (id < 0 || id >= t.tokenizer->n_vocab()) __builtin_trap();
  const std::string decoded = t.tokenizer->decode(ids);
  if (t.byte_level && !add_special && !parse_special && unicode::sanitize_utf8(text) == text && decoded != text)
    __builtin_trap();
  return 0;
}
