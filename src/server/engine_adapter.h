#pragma once
// The production EngineBackend: the real Engine plus its Model's tokenizer and chat template.
#include "engine/engine.h"
#include "server/engine_backend.h"

namespace kvserve::server {

class EngineAdapter final : public EngineBackend {
 public:
  // Both must outlive the adapter. use_model_sampling_defaults false: requests never take the model file's.
  explicit EngineAdapter(Engine& engine, bool use_model_sampling_defaults = true);

  void add_request(EngineRequest req) override;
  void abort_request(const std::string& id) override;
  EngineStats stats() const override;
  BlockMap block_map() const override;
  int block_size() const override;

  std::vector<int32_t> tokenize(std::string_view text, bool add_special) const override;
  std::string detokenize(const std::vector<int32_t>& ids) const override;
  std::string render_chat(const std::vector<ChatMessage>& messages,
                          const nlohmann::ordered_json& template_kwargs) const override;
  std::string chat_template() const override;
  std::string token_piece(int32_t id) const override;
  int32_t vocab_size() const override;
  int64_t context_length() const override;
  int64_t default_completion_limit(int64_t n_prompt) const override;
  SamplingDefaults sampling_defaults() const override;

 private:
  Engine& engine_;
  const Model& model_;
  bool use_model_sampling_defaults_;
};

}  // namespace kvserve::server
