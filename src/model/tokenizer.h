#pragma once
// Text <-> token ids, exactly as the reference tokenizers do it (llama.cpp's llama-vocab for GGUF
// vocabularies, llama2.c's encode() for its tokenizer.bin, Hugging Face tokenizers for tokenizer.json).
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "model/vocab.h"

namespace kvserve {

// Token texts llama.cpp treats as ending generation besides the file's EOS / EOT ids ("<|im_end|>",
// "<end_of_turn>", ...). Its loader also makes such tokens control tokens.
bool is_end_of_generation_text(std::string_view text);
// True when a vocabulary has "<|end|>" with "<|return|>" and "<|call|>" (gpt-oss's harmony) or "<|calls|>" and
// "<|flush|>": there "<|end|>" closes one message of a turn and is not an end of generation (llama.cpp's rule).
bool harmony_end_is_message_end(const std::vector<std::string>& tokens);

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // add_special: BOS/EOS as the vocabulary asks (and the SPM dummy space prefix).
  // parse_special: text of control/user-defined tokens (e.g. "<|im_start|>") maps to those tokens;
  // otherwise such text is tokenized as plain text.
  virtual std::vector<int32_t> encode(std::string_view text, bool add_special, bool parse_special) const = 0;

  // Raw bytes of one token (byte tokens give their byte, SPM "▁" gives a space, byte-level BPE
  // symbols map back to bytes). Control tokens give their text only when `special` is true.
  virtual std::string token_to_piece(int32_t id, bool special = false) const = 0;

  // Concatenated pieces, with the SPM dummy-prefix space removed from the first piece after BOS.
  virtual std::string decode(const std::vector<int32_t>& ids, bool special = false) const;

  const Vocab& vocab() const { return vocab_; }
  int32_t n_vocab() const { return static_cast<int32_t>(vocab_.tokens.size()); }
  int32_t bos() const { return vocab_.bos_id; }
  int32_t eos() const { return vocab_.eos_id; }
  // End of generation: EOS, EOT, or any other token the vocabulary marks as ending a turn.
  virtual bool is_eog(int32_t id) const;
  // Every id is_eog() holds for, in increasing order.
  virtual std::vector<int32_t> eog_ids() const;

  // Builds the tokenizer the vocabulary describes; throws Error for an unsupported kind or pre-tokenizer.
  static std::unique_ptr<Tokenizer> create(Vocab vocab);

 protected:
  explicit Tokenizer(Vocab vocab) : vocab_(std::move(vocab)) {}
  Vocab vocab_;
};

}  // namespace kvserve
