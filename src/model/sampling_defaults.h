#pragma once
// The sampling a model's authors recommend, for the parameters a request leaves out (llama.cpp and vLLM both
// apply them). From a GGUF file: its general.sampling.* keys, which llama.cpp's converter copies from
// generation_config.json and llama.cpp's tools apply as they are. From a Hugging Face folder: its
// generation_config.json, as vLLM reads it (--generation-config auto): the keys whose values differ from
// transformers' GenerationConfig defaults (temperature 1, top_p 1, top_k 50, repetition_penalty 1), and
// max_new_tokens.
#include <cstdint>
#include <optional>
#include <string>

namespace kvserve {

class GGUFFile;

struct SamplingDefaults {
  std::optional<float> temperature, top_p, min_p, repetition_penalty;
  std::optional<int> top_k;
  // generation_config.json's max_new_tokens: the new tokens of a request that names no max_tokens (where the
  // context leaves room). vLLM caps every request at it; here a request's own max_tokens stands.
  std::optional<int> max_tokens;
  std::string source;  // the file they came from

  bool empty() const { return !temperature && !top_p && !min_p && !repetition_penalty && !top_k && !max_tokens; }
  // "temperature 0.6, top_p 0.95, top_k 20": for the server's start-up line and /v1/models.
  std::string describe() const;
};

// Throws Error naming the key and the file when a value is out of range (a temperature below 0, top_p outside
// (0, 1], ...).
SamplingDefaults sampling_defaults_from_gguf(const GGUFFile& f);
// No file: no defaults. Malformed JSON or a value of the wrong type or range: Error naming it.
SamplingDefaults sampling_defaults_from_generation_config(const std::string& path);

}  // namespace kvserve
