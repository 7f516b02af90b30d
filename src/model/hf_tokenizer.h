#pragma once
// Hugging Face tokenizer.json (+ tokenizer_config.json) → Vocab, so the same tokenizers that serve GGUF
// vocabularies serve Hugging Face folders. Supported: model.type "BPE", either byte-level (GPT-2 style,
// pre-tokenizer recognized by its split regex and mapped to llama.cpp's pre-tokenizer name) or
// SentencePiece-style with byte fallback (Llama 1/2, TinyLlama, stories), whose merge ranks become SPM
// scores as llama.cpp's converter would have them.
#include <string>

#include "model/vocab.h"

namespace kvserve {

// tokenizer_config_path and config_path may be empty or name absent files; they supply bos/eos/pad,
// add_bos/add_eos and the chat template (tokenizer_config.json first, config.json ids as fallback).
// Throws Error naming the file and the unsupported feature.
Vocab vocab_from_tokenizer_json(const std::string& path, const std::string& tokenizer_config_path,
                                const std::string& config_path = "");

}  // namespace kvserve
