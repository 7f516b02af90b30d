#pragma once
// Everything a tokenizer needs, as the model file states it. Loaders fill this; Tokenizer::create builds
// the matching algorithm from it.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace kvserve {

enum class TokenType : int32_t {
  Undefined = 0,
  Normal = 1,
  Unknown = 2,
  Control = 3,
  UserDefined = 4,
  Unused = 5,
  Byte = 6,
};

struct Vocab {
  enum class Kind { SPM, BPE, WPM } kind = Kind::SPM;
  std::string pre;  // pre-tokenizer name, GGUF "tokenizer.ggml.pre" ("default", "llama-bpe", "qwen2", ...)
  std::vector<std::string> tokens;
  std::vector<float> scores;          // SPM merge priority; may be empty for BPE
  std::vector<TokenType> token_types;  // same length as tokens
  std::vector<std::string> merges;     // BPE "a b" pairs in rank order
  // A tokenizer.json's BPE ignore_merges, over what the pre-tokenizer's name implies (llama.cpp: Llama 3, tekken).
  std::optional<bool> ignore_merges;
  int32_t bos_id = -1;
  int32_t eos_id = -1;
  int32_t eot_id = -1;  // end-of-turn, e.g. <|im_end|>; -1 when none
  int32_t unk_id = -1;
  // More ends of generation: a Hugging Face folder's eos_token_id lists (generation_config.json, config.json),
  // as transformers' generate() and vLLM stop at each (Llama 3.1: <|end_of_text|>, <|eom_id|>, <|eot_id|>).
  std::vector<int32_t> extra_eog_ids;
  int32_t pad_id = -1;
  int32_t sep_id = -1;  // BERT's [SEP], appended after the text with add_special when add_sep
  bool add_bos = true;
  bool add_eos = false;
  bool add_sep = false;
  bool add_space_prefix = true;  // SPM dummy prefix
  // Per token, or empty: whitespace that a special token swallows when parse_special splits it out, to its
  // left (kStripLeft) or right (kStripRight); llama.cpp's LSTRIP / RSTRIP attributes (Phi-3's special
  // tokens strip to the right, so "<|user|>\nHi" tokenizes as "<|user|>Hi").
  static constexpr uint8_t kStripLeft = 1, kStripRight = 2;
  std::vector<uint8_t> strip;
  std::string chat_template;     // Jinja source from the file, may be empty
};

}  // namespace kvserve
