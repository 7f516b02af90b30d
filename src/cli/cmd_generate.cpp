// kvserve generate: one prompt in, streamed text out, with timings. Runs on the same paged KV cache as
// `kvserve serve` (one sequence), sized by the same --kv-cache-memory and --block-size.
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "cli/commands.h"
#include "cli/compute_threads.h"
#include "cli/kv_cache_options.h"
#include "cli/model_path.h"
#include "cli/number_checks.h"
#include "core/error.h"
#include "core/text_file.h"
#include "core/thread_pool.h"
#include "engine/gbnf_grammar.h"
#include "engine/generator.h"
#include "engine/json_grammar.h"
#include "model/chat_template.h"
#include "model/model.h"

namespace kvserve::cli {

namespace {

struct GenerateArgs {
  std::string model;
  std::string tokenizer;
  std::string prompt;
  std::string system;
  std::string chat_template;
  bool chat = false;
  bool json = false;
  int threads = 0;
  int context = 0;
  int speculative_tokens = 0;
  std::string draft_model;
  int ngram_max = 3;
  int ngram_min = 2;
  KVCacheArgs kv_cache;
  SamplingParams sp;
  bool max_tokens_given = false;
  SamplingGiven sp_given;  // flags given; the others take the model's defaults unless sampling_defaults is "none"
  std::string sampling_defaults = "model";
  // Structured output, as llama-cli takes it: a GBNF grammar or a JSON schema, given or in a file.
  std::string grammar, grammar_file, json_schema, json_schema_file;
};

// The grammar the flags ask for (null: none); an error names the flag.
std::shared_ptr<const Grammar> requested_grammar(const GenerateArgs& a) {
  const int given = !a.grammar.empty() + !a.grammar_file.empty() + !a.json_schema.empty() + !a.json_schema_file.empty();
  if (given > 1) fail("give one of --grammar, --grammar-file, --json-schema and --json-schema-file");
  try {
    if (!a.grammar.empty()) return gbnf_grammar(a.grammar);
    if (!a.grammar_file.empty()) return gbnf_grammar(read_text_file(a.grammar_file));
    std::string schema_text = a.json_schema;
    if (!a.json_schema_file.empty()) schema_text = read_text_file(a.json_schema_file);
    if (schema_text.empty()) return nullptr;
    const auto schema = nlohmann::ordered_json::parse(schema_text, nullptr, /*allow_exceptions=*/false);
    if (schema.is_discarded()) fail("the schema is not valid JSON");
    return json_schema_grammar(schema);
  } catch (const Error& e) {
    const char* flag = !a.grammar.empty()        ? "--grammar"
                       : !a.grammar_file.empty() ? "--grammar-file"
                       : !a.json_schema.empty()  ? "--json-schema"
                                                 : "--json-schema-file";
    fail("{}: {}", flag, e.what());
  }
}

// Why the text ended, for a person: "length (max tokens)", "stop (stop string "\n\n")", ...
std::string finish_description(const GenerationResult& r) {
  if (r.finish_reason == "length") return "length (the token limit or the context)";
  if (!r.stop_string.empty())
    return fmt::format("stop (stop string {})",
                       nlohmann::json(r.stop_string).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
  if (r.stop_token_id >= 0) return fmt::format("stop (stop token id {})", r.stop_token_id);
  return "stop (an end-of-generation token, or the grammar's end)";
}

void run_generate(const GenerateArgs& a) {
  const double kv_cache_memory = a.kv_cache.kv_cache_memory_value();  // a bad flag fails before the load
  const KVCacheDType kv_cache_dtype = a.kv_cache.kv_cache_dtype_value();
  const std::vector<KVLayerDtype> kv_layer_dtypes = a.kv_cache.kv_layer_dtypes_value();
  if (a.ngram_min > a.ngram_max) fail("--ngram-min {} is more than --ngram-max {}", a.ngram_min, a.ngram_max);
  const std::shared_ptr<const Grammar> grammar = requested_grammar(a);  // before the load, as a bad flag
  set_compute_threads(a.threads);
  std::unique_ptr<Model> model = load_cli_model(a.model, a.tokenizer, !a.json, a.chat_template);
  // A draft model alone turns speculation on, 4 tokens a step.
  const int speculative_tokens = a.speculative_tokens > 0 ? a.speculative_tokens : a.draft_model.empty() ? 0 : 4;
  std::unique_ptr<Model> draft;
  if (!a.draft_model.empty()) draft = load_cli_model(a.draft_model, "", !a.json);

  std::string text = a.prompt;
  bool parse_special = false;
  if (a.chat) {
    std::vector<ChatMessage> msgs;
    if (!a.system.empty()) msgs.push_back({"system", a.system});
    msgs.push_back({"user", a.prompt});
    text = apply_chat_template(model->vocab, msgs, true);
    parse_special = true;
  }
  const std::vector<int32_t> ids = model->tokenizer->encode(text, true, parse_special);

  GeneratorOptions go;
  if (a.context > 0) go.max_context = a.context;
  go.streaming = a.kv_cache.streaming();
  const bool model_sampling = a.sampling_defaults == "model";
  SamplingParams sp = a.sp;
  if (model_sampling) {
    apply_sampling_defaults(model->sampling_defaults, a.sp_given, sp);
    // Without -n, the model's max_new_tokens, as far as the context reaches.
    const std::optional<int> model_max = model->sampling_defaults.max_tokens;
    if (model_max && !a.max_tokens_given)
      sp.max_tokens = static_cast<int>(std::max<int64_t>(
          0, std::min<int64_t>(*model_max, generator_context(model->config, go) - static_cast<int64_t>(ids.size()))));
  }
  // One request: the cache need not hold more than it can reach.
  go.max_request_tokens = static_cast<int64_t>(ids.size()) + sp.max_tokens;
  go.kv_cache_memory = kv_cache_memory;
  go.block_size = a.kv_cache.block_size;
  go.hybrid_kv_cache = !a.kv_cache.no_hybrid;
  go.h2o = a.kv_cache.h2o();
  go.rope_factors = a.kv_cache.rope_factors_value();
  go.kv_layer_dtypes = kv_layer_dtypes;
  go.kv_cache_dtype = kv_cache_dtype;
  go.speculative_tokens = speculative_tokens;
  go.ngram = {.max_n = a.ngram_max, .min_n = a.ngram_min};
  go.draft_model = draft.get();
  go.enable_prefix_caching = false;  // one request: nothing to share, and half the blocks suffice
  Generator gen(*model, go);
  std::fprintf(stderr, "%s\n", gen.kv_cache().summary().c_str());
  const bool stream = !a.json;
  if (!a.json && !model->sampling_defaults.empty() && model_sampling)
    std::fprintf(stderr, "sampling: the model's %s where no flag says otherwise (--sampling-defaults none: ours)\n",
                 model->sampling_defaults.describe().c_str());
  GenerationResult r = gen.generate(
      ids, sp,
      [&](int32_t, const std::string& piece) {
        if (stream) {
          std::fwrite(piece.data(), 1, piece.size(), stdout);
          std::fflush(stdout);
        }
        return true;
      },
      grammar);
  const double pp = r.prompt_seconds > 0 ? r.prompt_ids.size() / r.prompt_seconds : 0;
  const double tg = r.generate_seconds > 0 ? r.generated_ids.size() / r.generate_seconds : 0;
  // vLLM's stop_reason: the stop string or stop token id that ended the text, else null.
  const nlohmann::json stop_reason = !r.stop_string.empty() ? nlohmann::json(r.stop_string)
                                     : r.stop_token_id >= 0 ? nlohmann::json(r.stop_token_id)
                                                            : nlohmann::json(nullptr);
  if (a.json) {
    nlohmann::json j;
    j["model"] = model->path;
    j["prompt"] = text;
    j["prompt_ids"] = r.prompt_ids;
    j["generated_ids"] = r.generated_ids;
    j["text"] = r.text;
    j["finish_reason"] = r.finish_reason;
    j["stop_reason"] = stop_reason;
    j["cached_tokens"] = r.cached_tokens;
    j["rope_restarts"] = r.rope_restarts;
    if (speculative_tokens > 0)
      j["speculative"] = {{"draft_tokens", r.draft_tokens},
                          {"accepted_draft_tokens", r.accepted_draft_tokens},
                          {"proposer", draft ? "draft_model" : "ngram"}};
    j["kv_cache"] = {{"num_blocks", gen.kv_cache().num_blocks},
                     {"block_size", gen.kv_cache().block_size},
                     {"capacity_tokens", gen.kv_cache().capacity_tokens()},
                     {"budget_bytes", gen.kv_cache().budget_bytes},
                     {"dtype", gen.kv_cache().dtype_names}};
    j["timings"] = {{"prompt_seconds", r.prompt_seconds},
                    {"generate_seconds", r.generate_seconds},
                    {"prompt_tokens_per_second", pp},
                    {"generate_tokens_per_second", tg},
                    {"threads", ThreadPool::global().size()}};
    std::printf("%s\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  } else {
    std::printf("\n");
    std::fprintf(stderr, "\nprompt: %zu tokens, %.1f tokens/s | generation: %zu tokens, %.1f tokens/s | %d threads\n",
                 r.prompt_ids.size(), pp, r.generated_ids.size(), tg, ThreadPool::global().size());
    std::fprintf(stderr, "finished: %s\n", finish_description(r).c_str());
    if (speculative_tokens > 0)
      std::fprintf(stderr, "%s drafts: %d proposed, %d accepted (%.0f%%)\n", draft ? "draft-model" : "n-gram",
                   r.draft_tokens, r.accepted_draft_tokens,
                   r.draft_tokens > 0 ? 100.0 * r.accepted_draft_tokens / r.draft_tokens : 0.0);
  }
}

}  // namespace

void add_generate_command(CLI::App& app) {
  auto a = std::make_shared<GenerateArgs>();
  a->sp.temperature = 0.8f;
  a->sp.top_k = 40;
  a->sp.top_p = 0.95f;
  a->sp.max_tokens = 128;
  CLI::App* c = app.add_subcommand("generate", "Generate text from a prompt");
  c->add_option("-m,--model", a->model, "GGUF file, Hugging Face folder or llama2.c checkpoint (default: SmolLM2-135M-Instruct)");
  c->add_option("--tokenizer", a->tokenizer, "llama2.c tokenizer.bin (default: beside the checkpoint)");
  c->add_option("-p,--prompt", a->prompt, "Prompt text")->required();
  c->add_flag("--chat", a->chat, "Wrap the prompt in the model's chat template as a user message");
  c->add_option("--system", a->system, "System message (with --chat)");
  c->add_option("--chat-template", a->chat_template,
                "Chat template instead of the model's: a Jinja file, or a family's name (chatml, llama3, ...)")
      ->check(cli::chat_template_name_check());
  c->add_option("-n,--max-tokens", a->sp.max_tokens,
                "Maximum new tokens (default: the model's max_new_tokens where its generation_config.json has one, "
                "else 128)")
      ->check(cli::kNonNegative)
      ->each([a](const std::string&) { a->max_tokens_given = true; });
  // The model file's recommendation (GGUF general.sampling.*, generation_config.json) replaces the defaults below
  // for each flag not given, as llama-cli does.
  c->add_option("--temperature,--temp", a->sp.temperature, "Sampling temperature (0 = greedy)")
      ->capture_default_str()
      ->each([a](const std::string&) { a->sp_given.temperature = true; });
  c->add_option("--top-k", a->sp.top_k, "Top-k (0 = off)")->capture_default_str()->each([a](const std::string&) {
    a->sp_given.top_k = true;
  });
  c->add_option("--top-p", a->sp.top_p, "Top-p (1 = off)")->capture_default_str()->each([a](const std::string&) {
    a->sp_given.top_p = true;
  });
  c->add_option("--min-p", a->sp.min_p, "Min-p (0 = off)")->each([a](const std::string&) { a->sp_given.min_p = true; });
  c->add_option("--repeat-penalty", a->sp.repetition_penalty, "Repetition penalty (1 = off)")
      ->each([a](const std::string&) { a->sp_given.repetition_penalty = true; });
  c->add_option("--sampling-defaults", a->sampling_defaults,
                "model: flags not given take the model file's recommended sampling (GGUF general.sampling.*, "
                "generation_config.json); none: the defaults shown here")
      ->capture_default_str()
      ->check(CLI::IsMember({"model", "none"}));
  c->add_option("--presence-penalty", a->sp.presence_penalty, "Presence penalty");
  c->add_option("--frequency-penalty", a->sp.frequency_penalty, "Frequency penalty");
  c->add_option("--seed", a->sp.seed, "Random seed (same seed, same output)")->each([a](const std::string&) {
    a->sp.has_seed = true;
  });
  c->add_option("--stop", a->sp.stop, "Stop string (repeatable)");
  c->add_flag("--ignore-eos", a->sp.ignore_eos, "Keep generating after end-of-sequence tokens");
  c->add_option("--stop-token-id", a->sp.stop_token_ids, "A token id that ends generation (repeatable)");
  c->add_option("--min-tokens", a->sp.min_tokens,
                "Tokens generated before an end of generation or a stop string may end it")
      ->check(CLI::NonNegativeNumber);
  c->add_option("-t,--threads", a->threads, "Threads (default: the physical cores this process may use, counting its affinity and cgroup CPU quota)");
  c->add_option("-c,--context", a->context, "Context length (default: the model's)");
  c->add_option("--speculative-tokens", a->speculative_tokens,
                "Speculative decoding: up to this many tokens proposed a step (prompt-lookup n-grams, or --draft-model) "
                "and verified in one forward, each kept by exact rejection sampling, so the output follows the same "
                "distribution (0 = off)")
      ->check(CLI::Range(0, 64));
  c->add_option("--draft-model", a->draft_model,
                "Speculative decoding with drafts from this model (GGUF, HF folder or llama2.c; the same vocabulary as "
                "-m), each drawn from its distribution and verified against it; --speculative-tokens defaults to 4");
  c->add_option("--ngram-max", a->ngram_max, "Longest suffix the drafts look up (with --speculative-tokens)")
      ->capture_default_str()
      ->check(CLI::Range(1, 64));
  c->add_option("--ngram-min", a->ngram_min, "Shortest suffix the drafts look up")->capture_default_str()->check(CLI::Range(1, 64));
  a->kv_cache.kv_cache_dtype = "f32";  // one sequence: memory is not the limit, keep the reference numerics
  add_kv_cache_options(*c, a->kv_cache);
  c->add_option("--grammar", a->grammar, "GBNF grammar the reply follows (llama.cpp's format; root rule 'root')");
  c->add_option("--grammar-file", a->grammar_file, "File holding a GBNF grammar the reply follows");
  c->add_option("--json-schema,-j", a->json_schema, "JSON schema the reply is valid JSON for");
  c->add_option("--json-schema-file", a->json_schema_file, "File holding a JSON schema the reply is valid JSON for");
  c->add_flag("--json", a->json, "Print one JSON object with ids, text and timings instead of streaming");
  c->callback([a] { run_generate(*a); });
}

}  // namespace kvserve::cli
