// kvserve serve: the OpenAI-compatible HTTP server over one continuous-batching Engine.
#include <pthread.h>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>

#include "cli/compute_threads.h"
#include "cli/commands.h"
#include "cli/number_checks.h"
#include "cli/kv_cache_options.h"
#include "cli/model_path.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "engine/engine.h"
#include "engine/paged_kv_cache.h"
#include "model/model.h"
#include "server/engine_adapter.h"
#include "server/http_server.h"

namespace kvserve::cli {

namespace {

struct ServeArgs {
  std::string model;
  std::string tokenizer;
  std::string chat_template;
  std::string host = "127.0.0.1";
  int port = 8080;
  std::string api_key;
  bool share_prefix_cache = false;
  std::string reasoning_format = "none";
  std::string tool_call_parser = "auto";
  KVCacheArgs kv_cache;
  int max_num_batched_tokens = 512;
  int max_num_seqs = 64;
  int64_t max_model_len = 0;
  bool no_prefix_caching = false;
  bool kv_prefault = false;
  double prefix_cache_ttl = 0;
  int threads = 0;
  std::string served_model_name;
  int speculative_tokens = 0;
  std::string draft_model;
  std::string draft_kv_cache_memory;
  int speculative_max_batch = -1;  // -1: 1 with a draft model, else no limit
  int ngram_max = 3;
  int ngram_min = 2;
  std::string sampling_defaults = "model";
};

// What /v1/models reports by default: the model file's name without its extension.
std::string default_served_name(const std::string& path) {
  std::filesystem::path p(path);
  if (p.has_filename() == false) p = p.parent_path();
  std::string name = std::filesystem::is_directory(p) ? p.filename().string() : p.stem().string();
  return name.empty() ? "kvserve" : name;
}

void run_serve(const ServeArgs& a) {
  if (!server::http_server_available())
    fail("this kvserve was built without cpp-httplib (install libcpp-httplib-dev and rebuild)");
  if (a.ngram_min > a.ngram_max) fail("--ngram-min {} is more than --ngram-max {}", a.ngram_min, a.ngram_max);
  // SIGINT/SIGTERM are blocked before any thread exists, so every thread inherits the mask and only the
  // signal thread below receives them (with sigwait), outside of async-signal context.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  // A client that vanishes mid-write must fail the write, not kill the process.
  std::signal(SIGPIPE, SIG_IGN);

  const double kv_cache_memory = a.kv_cache.kv_cache_memory_value();  // a bad flag fails before the load
  const KVCacheDType kv_cache_dtype = a.kv_cache.kv_cache_dtype_value();
  const std::vector<KVLayerDtype> kv_layer_dtypes = a.kv_cache.kv_layer_dtypes_value();
  double draft_kv_cache_memory = 0;
  if (!a.draft_kv_cache_memory.empty()) {
    try {
      draft_kv_cache_memory = parse_kv_cache_memory(a.draft_kv_cache_memory);
    } catch (const Error& e) {
      fail("--draft-kv-cache-memory: {}", e.what());
    }
  }
  set_compute_threads(a.threads);
  std::unique_ptr<Model> model = load_cli_model(a.model, a.tokenizer, true, a.chat_template);
  // A draft model alone turns speculation on, 4 tokens a step (as generate).
  std::unique_ptr<Model> draft;
  if (!a.draft_model.empty()) draft = load_cli_model(a.draft_model, "", true, "");

  EngineOptions eo;
  eo.kv_cache_memory = kv_cache_memory;
  eo.block_size = a.kv_cache.block_size;
  eo.hybrid_kv_cache = !a.kv_cache.no_hybrid;
  eo.streaming = a.kv_cache.streaming();
  eo.h2o = a.kv_cache.h2o();
  eo.rope_factors = a.kv_cache.rope_factors_value();
  eo.kv_layer_dtypes = kv_layer_dtypes;
  eo.kv_cache_dtype = kv_cache_dtype;
  eo.max_num_batched_tokens = a.max_num_batched_tokens;
  eo.max_num_seqs = a.max_num_seqs;
  eo.max_model_len = a.max_model_len;
  eo.enable_prefix_caching = !a.no_prefix_caching;
  eo.prefix_cache_ttl_seconds = a.prefix_cache_ttl;
  eo.prefault_kv = a.kv_prefault;
  eo.commit_kv_ahead = true;  // while idle: the pages the next blocks need (all of them with --kv-prefault)
  eo.speculative_tokens = a.speculative_tokens > 0 ? a.speculative_tokens : draft ? 4 : 0;
  eo.draft_model = draft.get();
  eo.speculative_max_batch = a.speculative_max_batch >= 0 ? a.speculative_max_batch : draft ? 1 : 0;
  eo.draft_kv_cache_memory = draft_kv_cache_memory;
  eo.ngram = {.max_n = a.ngram_max, .min_n = a.ngram_min};
  const std::string served_name = a.served_model_name.empty() ? default_served_name(model->path) : a.served_model_name;
  eo.model_id = served_name + "@" + model->path;

  Engine engine(*model, eo);
  server::EngineAdapter backend(engine, a.sampling_defaults == "model");
  server::ServerOptions so;
  so.host = a.host;
  so.port = a.port;
  so.api_key = a.api_key;
  so.share_prefix_cache = a.share_prefix_cache;
  so.split_reasoning = a.reasoning_format == "deepseek";
  so.tool_call_parser = a.tool_call_parser;
  so.model_name = served_name;
  server::HttpServer http(backend, so);
  const int port = http.bind();
  const EngineStats stats = engine.stats();
  std::fprintf(stderr, "kvserve: serving '%s' on http://%s:%d (KV cache: %lld blocks of %d tokens, %d threads)%s\n",
               served_name.c_str(), a.host.c_str(), port, static_cast<long long>(stats.num_blocks), a.kv_cache.block_size,
               ThreadPool::global().size(), a.api_key.empty() ? "" : ", API key required");
  if (const SamplingDefaults d = backend.sampling_defaults(); !d.empty())
    std::fprintf(stderr,
                 "kvserve: requests that leave them out sample with the model's %s (from %s; "
                 "--sampling-defaults none: the API's defaults)\n",
                 d.describe().c_str(), d.source.c_str());

  std::atomic<bool> serving_ended{false};
  std::thread signal_thread([&] {
    int sig = 0;
    sigwait(&stop_signals, &sig);
    if (!serving_ended)
      std::fprintf(stderr, "kvserve: %s received, finishing in-flight requests\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
    http.stop();
  });
  // Returns once the listener is closed and every in-flight response has been written.
  http.run();
  serving_ended = true;
  pthread_kill(signal_thread.native_handle(), SIGTERM);  // wakes it when run() ended on its own
  signal_thread.join();
  engine.drain();
  std::fprintf(stderr, "kvserve: stopped\n");
}

}  // namespace

void add_serve_command(CLI::App& app) {
  auto a = std::make_shared<ServeArgs>();
  CLI::App* c = app.add_subcommand("serve", "Serve an OpenAI-compatible API (and a web page) over HTTP");
  c->add_option("-m,--model", a->model, "GGUF file, Hugging Face folder or llama2.c checkpoint (default: SmolLM2-135M-Instruct)");
  c->add_option("--tokenizer", a->tokenizer, "llama2.c tokenizer.bin (default: beside the checkpoint)");
  c->add_option("--chat-template", a->chat_template,
                "Chat template instead of the model's: a Jinja file, or a family's name (chatml, llama3, ...)")
      ->check(cli::chat_template_name_check());
  c->add_option("--host", a->host, "Address to listen on")->capture_default_str();
  c->add_option("--port", a->port, "Port to listen on (0 = any free port)")->capture_default_str()->check(CLI::Range(0, 65535));
  c->add_option("--api-key", a->api_key, "Require 'Authorization: Bearer KEY' on /v1/*");
  c->add_option("--sampling-defaults", a->sampling_defaults,
                "model: requests that leave temperature, top_p, top_k, min_p or repetition_penalty out take the model "
                "file's recommendation (GGUF general.sampling.*, generation_config.json), as llama.cpp and vLLM do; "
                "none: the API's defaults")
      ->capture_default_str()
      ->check(CLI::IsMember({"model", "none"}));
  c->add_flag("--share-prefix-cache", a->share_prefix_cache,
              "Let requests under different API keys reuse each other's cached prefixes");
  c->add_option("--reasoning-format", a->reasoning_format,
                "deepseek: a chat reply's <think> text, or a harmony reply's analysis channel (gpt-oss), goes to "
                "reasoning_content (requests may set reasoning_format)")
      ->capture_default_str()
      ->check(CLI::IsMember({"none", "deepseek"}));
  c->add_option("--tool-call-parser", a->tool_call_parser,
                "How chat replies' tool calls are read: auto (the format the chat template writes), hermes, "
                "qwen3_coder, glm45, llama3_json (or llama4_json), mistral, openai (gpt-oss's harmony), pythonic (or "
                "llama4_pythonic: [f(a=1)], Llama 3.2 / 4's pythonic templates), gemma4 "
                "(<|tool_call>call:f{a:1}<tool_call|>), none")
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "hermes", "qwen3_coder", "glm45", "llama3_json", "llama4_json", "mistral",
                             "openai", "pythonic", "llama4_pythonic", "gemma4", "none"}));
  a->kv_cache.kv_cache_dtype = "f16";  // half the memory of f32: twice the tokens, the concurrency serving needs
  add_kv_cache_options(*c, a->kv_cache);
  c->add_option("--max-num-batched-tokens", a->max_num_batched_tokens, "Token budget of one forward step")
      ->capture_default_str()->check(cli::kPositive);
  c->add_option("--max-num-seqs", a->max_num_seqs, "Sequences per forward step")->capture_default_str()->check(cli::kPositive);
  c->add_option("--max-model-len", a->max_model_len, "Context length (default: the model's)")->check(cli::kNonNegative);
  c->add_flag("--no-prefix-caching", a->no_prefix_caching, "Never reuse KV blocks across requests");
  c->add_flag("--kv-prefault", a->kv_prefault,
              "Make the whole KV pool resident at start (no first-touch page faults in decode steps)");
  c->add_option("--prefix-cache-ttl", a->prefix_cache_ttl, "Seconds a cached prefix stays reusable (0 = forever)")
      ->check(cli::kNonNegative);
  c->add_option("-t,--threads", a->threads, "Compute threads (default: the physical cores this process may use, counting its affinity and cgroup CPU quota)");
  c->add_option("--served-model-name", a->served_model_name, "Model name in the API (default: the model file's name)");
  c->add_option("--speculative-tokens", a->speculative_tokens,
                "Speculative decoding with prompt-lookup (n-gram) drafts: up to this many tokens a sequence proposes "
                "and verifies in each batched step, kept by exact rejection sampling (0 = off)")
      ->capture_default_str()
      ->check(CLI::Range(0, 64));
  c->add_option("--draft-model", a->draft_model,
                "Speculative decoding with drafts from this model (GGUF, HF folder or llama2.c; the same vocabulary as "
                "-m), every decoding sequence's drafts in one batched pass a position, each drawn from the draft's "
                "distribution and verified against it; --speculative-tokens defaults to 4");
  c->add_option("--speculative-max-batch", a->speculative_max_batch,
                "No drafts in a step where more sequences than this decode (0 = no limit; default 1 with "
                "--draft-model, whose forwards cost more than a batched step saves, else no limit)")
      ->check(CLI::Range(0, 1 << 20));
  c->add_option("--draft-kv-cache-memory", a->draft_kv_cache_memory,
                "The draft model's KV cache budget, as --kv-cache-memory (default: the same)");
  c->add_option("--ngram-max", a->ngram_max, "Longest suffix the drafts look up (with --speculative-tokens)")
      ->capture_default_str()
      ->check(CLI::Range(1, 64));
  c->add_option("--ngram-min", a->ngram_min, "Shortest suffix the drafts look up")->capture_default_str()->check(CLI::Range(1, 64));
  c->callback([a] { run_serve(*a); });
}

}  // namespace kvserve::cli
