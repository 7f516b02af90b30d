#pragma once
// Format-specific model loaders. load_model (model.h) picks one of these by looking at the path; call
// them directly when the format is known. All throw Error naming the file and the problem.
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "model/model.h"
#include "model/vocab.h"

namespace kvserve {

class GGUFFile;

// GGUF v2/v3 model file (archs: see the table in load_gguf.cpp).
std::unique_ptr<Model> load_gguf_model(const std::string& path, const LoadOptions& opts = {});
// Same, from an already parsed file (e.g. one parsed from memory). The Model keeps `file` alive.
std::unique_ptr<Model> load_gguf_model(std::shared_ptr<const GGUFFile> file, const LoadOptions& opts = {});

// Gemma 2 and 3's sliding-window layers as llama.cpp reads a GGUF file: the window (0: none, and for
// every other architecture) and a flag per layer (`sliding_window_pattern`: a bool per layer, or n for
// "every n-th layer is global"; Gemma 2: window 4096 and n = 2 unless the file says, Gemma 3: n = 6). Llama 4's
// chunked layers too (all but every 4th, chunks of 8192 unless attention.sliding_window says; 0: none): a chunk
// bounds what a layer keeps as a window of its size does.
struct SlidingWindowLayers {
  int window = 0;
  std::vector<bool> layers;
};
SlidingWindowLayers gguf_sliding_window_layers(const GGUFFile& file, const std::string& arch, int n_layers);
// The same from a Hugging Face config.json (its text part) of model_type gemma2, gemma3, gemma3_text, mistral,
// mixtral, ministral, ministral3, olmo3 or qwen2, as transformers reads it (load_hf.cpp,
// read_sliding_window_layers), and Llama 4's chunked layers (llama4_text; their chunk as the window, which bounds
// what they keep). Other model types: none.
SlidingWindowLayers hf_sliding_window_layers(const nlohmann::json& config, const std::string& model_type,
                                             int n_layers, const std::string& path);

// The model configuration a Hugging Face config.json gives, as load_hf_model reads it (its `architectures` choose the
// reader); `path` names the file in errors.
ModelConfig hf_model_config(const nlohmann::json& config, const std::string& path);

// True when `path` is a regular file that starts with the GGUF magic.
bool is_gguf_file(const std::string& path);

// The vocabulary of a GGUF file, with llama.cpp's defaults for absent keys. Works on vocab-only files
// (no tensors, no architecture hyper-parameters).
Vocab load_gguf_vocab(const std::string& path);
Vocab vocab_from_gguf(const GGUFFile& file);

// llama.cpp's end-of-turn token texts ("<|im_end|>", "<|eot_id|>", ...), which give eot_id when the file
// does not name it.
bool is_end_of_turn_text(const std::string& text);

// As llama.cpp's loader: the first end-of-turn token becomes eot_id when none is set, and every
// end-of-turn or end-of-generation token (is_end_of_generation_text) becomes a control token.
void mark_end_of_turn_tokens(Vocab& v);

// llama2.c "v0" checkpoint (run.c format) with its tokenizer.bin: opts.tokenizer_path when set, else
// tokenizer.bin in the checkpoint's directory.
std::unique_ptr<Model> load_llama2c_model(const std::string& path, const LoadOptions& opts = {});

// llama2.c tokenizer.bin → SPM Vocab, converted as llama.cpp's convert-llama2c-to-ggml does.
// n_vocab comes from the checkpoint header.
Vocab load_llama2c_vocab(const std::string& path, int n_vocab);
Vocab llama2c_vocab_from_memory(const uint8_t* data, size_t size, int n_vocab, const std::string& name);

// Tokenizer::create(vocab). Kept as a loader entry point because load_hf.cpp calls it (it was a
// stopgap while the tokenizer was not yet linked in); new code can call Tokenizer::create directly.
std::unique_ptr<Tokenizer> make_tokenizer(const Vocab& vocab);

// Hugging Face model folder (config.json, *.safetensors, tokenizer.json). Implemented in load_hf.cpp.
std::unique_ptr<Model> load_hf_model(const std::string& dir, const LoadOptions& opts = {});

}  // namespace kvserve
