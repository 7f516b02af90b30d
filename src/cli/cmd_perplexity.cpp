// kvserve perplexity: a model's perplexity over a text file, computed as llama.cpp's llama-perplexity does
// (chunks of -c tokens, the second half of each scored), on the paged KV cache with any --kv-cache-dtype:
// how much a half-precision cache costs in quality, on the text you care about.
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "cli/commands.h"
#include "cli/compute_threads.h"
#include "cli/kv_cache_options.h"
#include "cli/model_path.h"
#include "core/error.h"
#include "core/text_file.h"
#include "engine/generator.h"
#include "engine/perplexity.h"
#include "model/model.h"

namespace kvserve::cli {

namespace {

struct PerplexityArgs {
  std::string model;
  std::string tokenizer;
  std::string file;
  int context = 512;
  int chunks = -1;
  int threads = 0;
  bool json = false;
  KVCacheArgs kv_cache;
};

void run_perplexity(const PerplexityArgs& a) {
  const double kv_cache_memory = a.kv_cache.kv_cache_memory_value();
  const KVCacheDType kv_cache_dtype = a.kv_cache.kv_cache_dtype_value();
  const std::vector<KVLayerDtype> kv_layer_dtypes = a.kv_cache.kv_layer_dtypes_value();
  if (a.context < 4) fail("perplexity: --context {} is too short (at least 4)", a.context);
  const std::string text = read_text_file(a.file);
  set_compute_threads(a.threads);
  std::unique_ptr<Model> model = load_cli_model(a.model, a.tokenizer, !a.json, "");
  const std::vector<int32_t> tokens = model->tokenizer->encode(text, true, false);

  GeneratorOptions go;
  go.max_context = a.context;
  go.prefill_chunk = a.context;
  go.kv_cache_memory = kv_cache_memory;
  go.block_size = a.kv_cache.block_size;
  go.hybrid_kv_cache = !a.kv_cache.no_hybrid;
  go.streaming = a.kv_cache.streaming();
  go.h2o = a.kv_cache.h2o();
  go.rope_factors = a.kv_cache.rope_factors_value();
  go.kv_layer_dtypes = kv_layer_dtypes;
  go.kv_cache_dtype = kv_cache_dtype;
  go.enable_prefix_caching = false;  // each chunk starts from an empty cache
  Generator gen(*model, go);
  PerplexityOptions po;
  po.n_ctx = a.context;
  po.max_chunks = a.chunks;
  if (!a.json)
    std::fprintf(stderr, "perplexity: %zu tokens, chunks of %d (the last %d of each scored), KV cache %s\n",
                 tokens.size(), a.context, a.context - a.context / 2 - 1, std::string(kv_dtype_name(kv_cache_dtype)).c_str());
  const PerplexityResult r = perplexity(gen, model->vocab, tokens, po, [&](int i, double ppl) {
    if (a.json) return;
    std::printf("[%d]%.4f,", i + 1, ppl);
    std::fflush(stdout);
  });
  if (a.json) {
    nlohmann::json j = {{"model", model->path},
                        {"file", a.file},
                        {"n_ctx", a.context},
                        {"n_chunks", r.n_chunks},
                        {"tokens", tokens.size()},
                        {"scored_tokens", r.scored},
                        {"kv_cache_dtype", std::string(kv_dtype_name(kv_cache_dtype))},
                        {"ppl", r.ppl},
                        {"ppl_stderr", r.ppl_stderr},
                        {"running_ppl", r.running}};
    std::printf("%s\n", j.dump().c_str());
    return;
  }
  std::printf("\nFinal estimate: PPL = %.4f +/- %.5f\n", r.ppl, r.ppl_stderr);
}

}  // namespace

void add_perplexity_command(CLI::App& app) {
  auto a = std::make_shared<PerplexityArgs>();
  CLI::App* c = app.add_subcommand(
      "perplexity", "Perplexity over a text file, as llama.cpp's llama-perplexity computes it (chunks of -c tokens)");
  c->add_option("-m,--model", a->model, "GGUF file, Hugging Face folder or llama2.c checkpoint (default: SmolLM2-135M-Instruct)");
  c->add_option("--tokenizer", a->tokenizer, "llama2.c tokenizer.bin (default: beside the checkpoint)");
  c->add_option("-f,--file", a->file, "Text file to score")->required();
  c->add_option("-c,--context", a->context, "Tokens per chunk; the second half of each is scored")->capture_default_str();
  c->add_option("--chunks", a->chunks, "Score at most this many chunks (default: all)");
  c->add_option("-t,--threads", a->threads, "Threads (default: the physical cores this process may use)");
  a->kv_cache.kv_cache_dtype = "f32";
  add_kv_cache_options(*c, a->kv_cache);
  c->add_flag("--json", a->json, "Print one JSON object (ppl, ppl_stderr, running_ppl, ...)");
  c->callback([a] { run_perplexity(*a); });
}

}  // namespace kvserve::cli
