#include "server/engine_adapter.h"

#include "core/error.h"

namespace kvserve::server {

EngineAdapter::EngineAdapter(Engine& engine, bool use_model_sampling_defaults)
    : engine_(engine), model_(engine.model()), use_model_sampling_defaults_(use_model_sampling_defaults) {
  if (!model_.tokenizer) fail("the model has no tokenizer; the server needs one");
}

SamplingDefaults EngineAdapter::sampling_defaults() const {
  return use_model_sampling_defaults_ ? model_.sampling_defaults : SamplingDefaults{};
}

void EngineAdapter::add_request(EngineRequest req) { engine_.add_request(std::move(req)); }
void EngineAdapter::abort_request(const std::string& id) { engine_.abort_request(id); }
EngineStats EngineAdapter::stats() const { return engine_.stats(); }
BlockMap EngineAdapter::block_map() const { return engine_.block_map(); }
int EngineAdapter::block_size() const { return engine_.options().block_size; }

std::vector<int32_t> EngineAdapter::tokenize(std::string_view text, bool add_special) const {
  return model_.tokenizer->encode(text, add_special, /*parse_special=*/true);
}

std::string EngineAdapter::render_chat(const std::vector<ChatMessage>& messages,
                                       const nlohmann::ordered_json& template_kwargs) const {
  return render_chat_prompt(model_.vocab, messages, local_date_for_chat_template(), template_kwargs);
}

std::string EngineAdapter::chat_template() const { return model_.vocab.chat_template; }

std::string EngineAdapter::detokenize(const std::vector<int32_t>& ids) const {
  return model_.tokenizer->decode(ids, /*special=*/false);
}

std::string EngineAdapter::token_piece(int32_t id) const { return model_.tokenizer->token_to_piece(id, false); }

int32_t EngineAdapter::vocab_size() const { return model_.tokenizer->n_vocab(); }

int64_t EngineAdapter::context_length() const {
  const int64_t configured = engine_.options().max_model_len;
  if (configured > 0) return configured;
  return engine_.options().streaming.on() ? kStreamingContextLimit : model_.config.n_ctx_train;
}

int64_t EngineAdapter::default_completion_limit(int64_t n_prompt) const {
  if (!engine_.options().streaming.on() || engine_.options().max_model_len > 0)
    return context_length() - n_prompt;
  return model_.config.n_ctx_train > 0 ? model_.config.n_ctx_train : 2048;
}

}  // namespace kvserve::server
