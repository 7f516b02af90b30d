// kvserve bench: throughput and latency figures.
//   offline:  kvserve bench -m MODEL [--batch B] ...   N prompts through the in-process Engine
//   serving:  kvserve bench --url http://host:port ...  streaming /v1/completions against any
//             OpenAI-compatible server (kvserve serve, llama-server, vLLM)
//   --triad:  the STREAM triad bandwidth of this machine (alone, with its read-only bandwidth and the
//             round trip of a cache line between two threads; or next to an offline run, where it
//             gives the memory-bandwidth bound on batch-1 decode: triad bytes/s / weight bytes per token)
#include <cstdio>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "bench/offline_bench.h"
#include "bench/serving_bench.h"
#include "bench/triad.h"
#include "cli/compute_threads.h"
#include "cli/commands.h"
#include "cli/kv_cache_options.h"
#include "cli/model_path.h"
#include "cli/number_checks.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "kv/kv_layout.h"
#include "model/gguf.h"
#include "model/loaders.h"
#include "model/model.h"

namespace kvserve::cli {

namespace {

struct BenchArgs {
  std::string model;
  std::string tokenizer;
  std::string url;
  int num_prompts = 16;
  int prompt_len = 128;
  int output_len = 128;
  std::string prompts = "random";
  int prefix_len = -1;
  int prefix_groups = 1;
  int batch = 1;
  int concurrency = 1;
  double request_rate = 0;
  uint64_t seed = 0;
  int warmup = 1;
  float temperature = 0;
  // engine (offline)
  int threads = 0;
  int block_size = 16;
  int max_num_batched_tokens = 512;
  int64_t max_model_len = 0;
  std::string kv_cache_memory;
  std::string kv_cache_dtype = "f16";
  bool no_prefix_caching = false;
  bool no_hybrid = false;
  int64_t streaming_window = 0;
  int64_t attention_sinks = 0;
  int64_t h2o_heavy = 0, h2o_recent = 0;
  std::string rope_factors = "auto";
  std::string kv_layer_dtypes;
  // serving
  std::string served_model;
  std::string api_key;
  bool text_prompts = false;
  bool no_ignore_eos = false;
  double timeout = 600;
  int max_token_id = 500;
  // output
  bool triad = false;
  int bound_segments = 0;
  bool phase_profile = false;
  bool json = false;
};

bench::PromptSpec prompt_spec(const BenchArgs& a) {
  bench::PromptSpec p;
  p.num_prompts = a.num_prompts;
  p.prompt_len = a.prompt_len;
  p.seed = a.seed;
  p.prefix_groups = a.prefix_groups;
  if (a.prompts == "shared-prefix") {
    p.prefix_len = a.prefix_len >= 0 ? a.prefix_len : a.prompt_len / 2;
  } else if (a.prompts == "random") {
    if (a.prefix_len > 0) fail("bench: --prefix-len needs --prompts shared-prefix");
  } else {
    fail("bench: --prompts must be 'random' or 'shared-prefix', got '{}'", a.prompts);
  }
  return p;
}

nlohmann::json triad_json(const bench::TriadResult& t) {
  return {{"best_gb_s", t.best_gb_s},
          {"median_gb_s", t.median_gb_s},
          {"array_bytes", t.array_bytes},
          {"threads", t.threads}};
}

nlohmann::json read_json(const bench::ReadResult& r) {
  return {{"best_gb_s", r.best_gb_s}, {"median_gb_s", r.median_gb_s}, {"bytes", r.bytes}, {"threads", r.threads}};
}

void print_json(const nlohmann::json& j) {
  std::printf("%s\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
}

void run_offline(const BenchArgs& a) {
  // Flags fail before the (possibly long) load.
  const KVCacheDType kv_cache_dtype = parse_kv_cache_dtype_flag(a.kv_cache_dtype);
  std::unique_ptr<Model> model = load_cli_model(a.model, a.tokenizer, !a.json);

  bench::OfflineBenchOptions o;
  o.prompts = prompt_spec(a);
  o.output_len = a.output_len;
  o.batch = a.batch;
  o.warmup = a.warmup;
  o.temperature = a.temperature;
  o.bound_segment_steps = a.bound_segments;
  o.phase_profile = a.phase_profile;
  o.engine.block_size = a.block_size;
  o.engine.max_num_batched_tokens = a.max_num_batched_tokens;
  o.engine.max_model_len = a.max_model_len;
  o.engine.enable_prefix_caching = !a.no_prefix_caching;
  o.engine.hybrid_kv_cache = !a.no_hybrid;
  o.engine.streaming = {a.streaming_window, a.attention_sinks};
  o.engine.h2o = {a.h2o_heavy, a.h2o_recent};
  o.engine.rope_factors = parse_long_rope_factors(a.rope_factors);
  o.engine.kv_layer_dtypes = parse_kv_layer_dtypes_flag(a.kv_layer_dtypes);
  o.engine.kv_cache_dtype = kv_cache_dtype;
  if (!a.kv_cache_memory.empty())
    o.engine.kv_cache_memory = static_cast<double>(resolve_kv_memory_budget(a.kv_cache_memory));
  std::optional<bench::TriadResult> triad;
  if (a.triad) triad = bench::measure_triad();
  const bench::OfflineBenchResult r = bench::run_offline_bench(*model, o);

  const size_t wbytes = model->weight_bytes();
  nlohmann::json j = r.summary.to_json();
  j["mode"] = "offline";
  j["model"] = model->path;
  j["threads"] = ThreadPool::global().size();
  j["config"] = {{"num_prompts", a.num_prompts},
                 {"prompt_len", a.prompt_len},
                 {"output_len", a.output_len},
                 {"prompts", a.prompts},
                 {"prefix_len", o.prompts.prefix_len},
                 {"prefix_groups", a.prefix_groups},
                 {"batch", a.batch},
                 {"max_num_batched_tokens", a.max_num_batched_tokens},
                 {"block_size", a.block_size},
                 {"prefix_caching", !a.no_prefix_caching},
                 {"kv_cache_bytes", r.kv_cache_bytes},
                 {"seed", a.seed}};
  j["weight_bytes_per_token"] = wbytes;
  j["engine"] = {{"preemptions", r.engine_stats.preemptions},
                 {"prefix_query_tokens", r.engine_stats.prefix_queries},
                 {"prefix_hit_tokens", r.engine_stats.prefix_hits}};
  if (triad) {
    j["triad"] = triad_json(*triad);
    j["bandwidth_bound_tokens_per_s"] = wbytes > 0 ? triad->best_gb_s * 1e9 / static_cast<double>(wbytes) : 0.0;
  }
  if (!r.bound_segments.empty()) {
    nlohmann::json segs = nlohmann::json::array();
    for (const bench::BoundSegment& seg : r.bound_segments)
      segs.push_back({{"steps", seg.steps},
                      {"seconds", seg.seconds},
                      {"tokens_per_s", seg.tokens_per_s()},
                      {"context_first", seg.context_first},
                      {"bytes_per_token", seg.bytes_per_token},
                      {"triad_before_gb_s", seg.triad_before_gb_s},
                      {"triad_after_gb_s", seg.triad_after_gb_s},
                      {"round_trip_ns", seg.round_trip_ns},
                      {"of_bound", seg.of_bound()}});
    j["bound_segments"] = segs;
    j["bound_segments_median_of_bound"] = bench::median_of_bound(r.bound_segments);
  }
  if (a.phase_profile) j["phase_profile"] = bench::phases_json(r.phases);
  if (a.json) {
    print_json(j);
    return;
  }
  std::printf("offline bench: %s, %d threads, %d prompts of %d tokens (%s), %d output tokens, batch %d\n",
              model->path.c_str(), ThreadPool::global().size(), a.num_prompts, a.prompt_len, a.prompts.c_str(),
              a.output_len, a.batch);
  std::printf("%s", r.summary.to_text().c_str());
  std::printf("weights read per token: %.1f MiB; preemptions: %llu\n", static_cast<double>(wbytes) / (1 << 20),
              static_cast<unsigned long long>(r.engine_stats.preemptions));
  if (triad)
    std::printf("triad bandwidth: %.1f GB/s -> batch-1 decode bound %.1f tok/s\n", triad->best_gb_s,
                j["bandwidth_bound_tokens_per_s"].get<double>());
  if (!r.bound_segments.empty()) {
    std::printf("decode in segments of %d steps, each against the triads right before and after it (the rates above "
                "include those measurements):\n",
                a.bound_segments);
    for (const bench::BoundSegment& seg : r.bound_segments)
      std::printf("  context %6lld: %6.1f tok/s, triad %5.1f / %5.1f GB/s, round trip %5.0f ns -> %.2f of the bound\n",
                  static_cast<long long>(seg.context_first), seg.tokens_per_s(), seg.triad_before_gb_s,
                  seg.triad_after_gb_s, seg.round_trip_ns, seg.of_bound());
    std::printf("median of the segments: %.2f of the bound (weights + K/V per token)\n",
                bench::median_of_bound(r.bound_segments));
  }
  if (a.phase_profile) std::printf("%s", bench::format_phases(r.phases).c_str());
}

void run_serving(const BenchArgs& a) {
  bench::ServingBenchOptions o;
  o.url = a.url;
  o.model = a.served_model;
  o.api_key = a.api_key;
  o.prompts = prompt_spec(a);
  o.text_prompts = a.text_prompts;
  o.output_len = a.output_len;
  o.concurrency = a.concurrency;
  o.request_rate = a.request_rate;
  o.ignore_eos = !a.no_ignore_eos;
  o.temperature = a.temperature;
  o.warmup = a.warmup;
  o.timeout_s = a.timeout;
  if (!a.model.empty()) {
    // Only the vocabulary is needed: which ids are ordinary tokens, and BOS.
    Vocab v;
    if (is_gguf_file(a.model) && GGUFFile(a.model).has("tokenizer.ggml.tokens")) {
      v = load_gguf_vocab(a.model);
    } else {
      LoadOptions lo;
      lo.tokenizer_path = a.tokenizer;
      v = load_model(a.model, lo)->vocab;
    }
    o.token_pool = bench::token_pool(v);
    o.bos = v.add_bos ? v.bos_id : -1;
  } else {
    o.token_pool = bench::id_range_pool(std::min(100, a.max_token_id / 2), a.max_token_id);
  }
  std::optional<bench::TriadResult> triad;
  if (a.triad) triad = bench::measure_triad();
  const bench::ServingBenchResult r = bench::run_serving_bench(o);
  nlohmann::json j = r.summary.to_json();
  j["mode"] = "serving";
  j["url"] = a.url;
  j["model"] = r.model;
  j["config"] = {{"num_prompts", a.num_prompts},   {"prompt_len", a.prompt_len},         {"output_len", a.output_len},
                 {"prompts", a.prompts},           {"prefix_len", o.prompts.prefix_len}, {"concurrency", a.concurrency},
                 {"request_rate", a.request_rate}, {"text_prompts", a.text_prompts},     {"seed", a.seed}};
  if (triad) j["triad"] = triad_json(*triad);
  if (a.json) {
    print_json(j);
    return;
  }
  std::printf("serving bench: %s (model '%s'), %d prompts of %d tokens (%s%s), %d output tokens, %s\n", a.url.c_str(),
              r.model.c_str(), a.num_prompts, a.prompt_len, a.prompts.c_str(),
              a.text_prompts ? ", text" : ", token ids", a.output_len,
              a.request_rate > 0 ? fmt::format("{} req/s (max {} in flight)", a.request_rate, a.concurrency).c_str()
                                 : fmt::format("concurrency {}", a.concurrency).c_str());
  std::printf("%s", r.summary.to_text().c_str());
  if (triad) std::printf("triad bandwidth (this machine): %.1f GB/s\n", triad->best_gb_s);
}

void run_bench(const BenchArgs& a) {
  set_compute_threads(a.threads);
  if (a.bound_segments > 0 && (!a.url.empty() || (a.model.empty() && a.triad)))
    fail("bench: --bound-segments times the offline decode of a model (-m MODEL), not {}",
         a.url.empty() ? "--triad alone" : "a server (--url)");
  if (a.phase_profile && (!a.url.empty() || (a.model.empty() && a.triad)))
    fail("bench: --phase-profile times the offline decode steps of a model (-m MODEL), not {}",
         a.url.empty() ? "--triad alone" : "a server (--url)");
  if (!a.url.empty()) return run_serving(a);
  if (a.model.empty() && a.triad) {
    const bench::TriadResult t = bench::measure_triad();
    const bench::ReadResult r = bench::measure_read();
    const bench::HandoffResult h = bench::measure_handoff();
    if (a.json) {
      print_json(
          {{"mode", "triad"},
           {"triad", triad_json(t)},
           {"read", read_json(r)},
           {"handoff", {{"round_trip_ns", h.round_trip_ns}, {"round_trips", h.round_trips}, {"threads", h.threads}}}});
    } else {
      std::printf("STREAM triad: best %.1f GB/s, median %.1f GB/s (%d threads, 3 x %.0f MiB)\n", t.best_gb_s,
                  t.median_gb_s, t.threads, static_cast<double>(t.array_bytes) / (1 << 20));
      std::printf("reads alone: best %.1f GB/s, median %.1f GB/s (%d threads, %.0f MiB)\n", r.best_gb_s, r.median_gb_s,
                  r.threads, static_cast<double>(r.bytes) / (1 << 20));
      if (h.threads >= 2)
        std::printf("core-to-core round trip: %.0f ns (one cache line between the pool's threads 0 and 1)\n",
                    h.round_trip_ns);
    }
    return;
  }
  run_offline(a);
}

}  // namespace

void add_bench_command(CLI::App& app) {
  auto a = std::make_shared<BenchArgs>();
  CLI::App* c = app.add_subcommand(
      "bench", "Benchmark: offline through the engine (-m MODEL), or a running server (--url), or --triad");
  c->add_option("-m,--model", a->model,
                "Model for the offline run (default: SmolLM2-135M-Instruct); with --url, only its vocabulary is "
                "used to draw prompt tokens");
  c->add_option("--tokenizer", a->tokenizer, "llama2.c tokenizer.bin (default: beside the checkpoint)");
  c->add_option("--url", a->url, "Benchmark a running OpenAI-compatible server at this base URL instead");
  c->add_option("-n,--num-prompts", a->num_prompts, "Number of requests")->capture_default_str()->check(cli::kPositive);
  c->add_option("--prompt-len", a->prompt_len, "Prompt tokens per request (BOS included)")
      ->capture_default_str()
      ->check(cli::kPositive);
  c->add_option("--output-len", a->output_len, "Output tokens per request (EOS ignored)")
      ->capture_default_str()
      ->check(cli::kPositive);
  c->add_option("--prompts", a->prompts, "random, or shared-prefix (every prompt starts with the same tokens)")
      ->capture_default_str();
  c->add_option("--prefix-len", a->prefix_len, "Shared prefix tokens with --prompts shared-prefix (default: half)");
  c->add_option("--prefix-groups", a->prefix_groups, "Distinct shared prefixes, used round-robin")
      ->capture_default_str()
      ->check(cli::kPositive);
  c->add_option("-b,--batch", a->batch, "Offline: concurrent sequences (requests in flight)")
      ->capture_default_str()
      ->check(cli::kPositive);
  c->add_option("-c,--concurrency", a->concurrency, "Serving: requests in flight (the cap, with --request-rate)")
      ->capture_default_str()
      ->check(cli::kPositive);
  c->add_option("--request-rate", a->request_rate,
                "Serving: Poisson arrivals at this many requests/s (0 = closed loop)")
      ->check(cli::kNonNegative);
  c->add_option("--seed", a->seed, "Prompt seed")->capture_default_str();
  c->add_option("--warmup", a->warmup, "Short untimed requests first")->capture_default_str()->check(cli::kNonNegative);
  c->add_option("--temperature", a->temperature, "Sampling temperature (0 = greedy)")->capture_default_str();
  c->add_option("-t,--threads", a->threads, "Compute threads (default: the physical cores this process may use, counting its affinity and cgroup CPU quota)");
  c->add_option("--block-size", a->block_size, "Offline: tokens per KV block")->capture_default_str();
  c->add_option("--max-num-batched-tokens", a->max_num_batched_tokens, "Offline: token budget of one step")
      ->capture_default_str();
  c->add_option("--max-model-len", a->max_model_len, "Offline: context length (default: the model's)");
  c->add_option("--kv-cache-memory", a->kv_cache_memory,
                "Offline: KV budget, bytes (512M, 2G) or a RAM fraction (default: what the run needs)");
  c->add_option("--kv-cache-dtype", a->kv_cache_dtype, "Offline: KV element type f32, f16, bf16, fp8, fp8_e5m2, int8, int4 (f16 as llama.cpp)")
      ->capture_default_str();
  c->add_flag("--no-prefix-caching", a->no_prefix_caching, "Offline: never reuse KV blocks across requests");
  c->add_flag("--no-hybrid-kv-cache", a->no_hybrid,
              "Offline: sliding-window layers keep every position (default: only their window)");
  c->add_option("--kv-layer-dtypes", a->kv_layer_dtypes, std::string("Offline: ") + kKVLayerDtypesHelp);
  c->add_option("--streaming-window", a->streaming_window,
                "Offline: StreamingLLM eviction, full-attention layers keep only the last N positions (0: off)")
      ->check(CLI::NonNegativeNumber);
  c->add_option("--attention-sinks", a->attention_sinks, "Offline: with --streaming-window, first positions kept as sinks")
      ->check(CLI::NonNegativeNumber);
  c->add_option("--h2o-heavy", a->h2o_heavy, "Offline: H2O eviction, the most attended tokens kept per KV head")
      ->check(CLI::NonNegativeNumber);
  c->add_option("--h2o-recent", a->h2o_recent, "Offline: H2O eviction, the latest tokens always kept (0: off)")
      ->check(CLI::NonNegativeNumber);
  c->add_option("--rope-factors", a->rope_factors, std::string("Offline: ") + kRopeFactorsHelp)
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "short", "long"}));
  c->add_option("--served-model", a->served_model, "Serving: the 'model' field (default: first of GET /v1/models)");
  c->add_option("--api-key", a->api_key, "Serving: bearer token");
  c->add_flag("--text-prompts", a->text_prompts, "Serving: send words instead of token ids");
  c->add_flag("--no-ignore-eos", a->no_ignore_eos, "Serving: do not send ignore_eos (outputs may end early)");
  c->add_option("--timeout", a->timeout, "Serving: per-request timeout in seconds")->capture_default_str();
  c->add_option("--max-token-id", a->max_token_id, "Serving without -m: prompt ids are drawn from [100, this)")
      ->capture_default_str();
  c->add_flag(
      "--triad", a->triad,
      "Measure the STREAM triad bandwidth too (alone when no model or URL is given: then the read-only bandwidth "
      "and the core-to-core round trip too)");
  c->add_option("--bound-segments", a->bound_segments,
                "Offline, batch 1: time the decode in segments of this many steps, each against a triad and the "
                "core-to-core round trip measured right before and after it (for hosts whose bandwidth moves)")
      ->check(cli::kPositive);
  c->add_flag("--phase-profile", a->phase_profile,
              "Offline, batch 1: time each phase of the one-token decode steps (Q/K/V, attention, merge, output "
              "projection, gate/up, down, head) per thread, with the bytes each reads and its GB/s");
  c->add_flag("--json", a->json, "Print one JSON object with every figure");
  c->callback([a] { run_bench(*a); });
}

}  // namespace kvserve::cli
