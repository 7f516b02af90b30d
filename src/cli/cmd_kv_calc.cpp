// kvserve kv-calc: KV cache size of a model (GGUF file, Hugging Face config.json, or plain
// hyper-parameters) per token, per request and per batch, and what a memory budget holds.
#include <cstdio>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "cli/commands.h"
#include "core/error.h"
#include "kv/kv_calc.h"
#include "kv/kv_layout.h"
#include "model/gguf.h"

namespace kvserve::cli {

namespace {

struct KVCalcArgs {
  std::string model;
  std::string config;
  std::optional<int> layers, heads, kv_heads, head_dim, kv_lora_rank, rope_dim, swa_layers;
  std::optional<int64_t> sliding_window;
  std::optional<int64_t> seq_len;
  int64_t batch = 1;
  std::string kv_dtype = "f16";
  std::string memory;
  int block_size = 16;
  int64_t streaming_window = 0;
  int64_t attention_sinks = 0;
  int64_t h2o_heavy = 0, h2o_recent = 0;
  bool json = false;
};

KVModelShape read_shape(const KVCalcArgs& a) {
  if (!a.model.empty() && !a.config.empty()) fail("kv-calc: give either -m MODEL or --config, not both");
  KVModelShape s;
  if (!a.model.empty()) {
    const GGUFFile file(a.model);
    s = kv_shape_from_gguf(file);
  } else if (!a.config.empty()) {
    std::ifstream in(a.config);
    if (!in) fail("kv-calc: cannot open config '{}'", a.config);
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(in);
    } catch (const nlohmann::json::exception& e) {
      fail("kv-calc: {} is not valid JSON: {}", a.config, e.what());
    }
    s = kv_shape_from_hf_config(j);
  } else if (!a.layers) {
    fail("kv-calc: say which model: -m MODEL.gguf, --config config.json, or --layers with --kv-heads/--head-dim "
         "(or --kv-lora-rank/--rope-dim for MLA)");
  }
  // Explicit flags override what the file says.
  if (a.layers) s.n_layers = *a.layers;
  if (a.heads) s.n_heads = *a.heads;
  if (a.kv_heads) s.n_kv_heads = *a.kv_heads;
  if (a.head_dim) s.head_dim = *a.head_dim;
  if (a.kv_lora_rank) {
    s.kv_lora_rank = *a.kv_lora_rank;
    s.kind = s.kv_lora_rank > 0 ? AttentionKind::MLA : AttentionKind::MHA;
  }
  if (a.rope_dim) s.rope_dim = *a.rope_dim;
  if (a.sliding_window) s.sliding_window = *a.sliding_window;
  if (a.swa_layers) s.n_swa_layers = *a.swa_layers;
  if (a.sliding_window && !a.swa_layers && s.n_swa_layers == 0) s.n_swa_layers = s.n_layers;  // every layer
  if (s.kind == AttentionKind::MHA && s.n_kv_heads == 0 && s.n_heads > 0) s.n_kv_heads = s.n_heads;
  validate_kv_shape(s);
  return s;
}

void run_kv_calc(const KVCalcArgs& a) {
  KVCalcRequest r;
  r.shape = read_shape(a);
  r.dtype = parse_kv_dtype(a.kv_dtype);
  if (a.seq_len)
    r.seq_len = *a.seq_len;
  else if (r.shape.context_length > 0)
    r.seq_len = r.shape.context_length;
  else
    fail("kv-calc: --seq-len is needed (the model does not state its context length)");
  r.batch = a.batch;
  r.block_size = a.block_size;
  r.streaming_window = a.streaming_window;
  r.attention_sinks = a.attention_sinks;
  r.h2o_heavy = a.h2o_heavy;
  r.h2o_recent = a.h2o_recent;
  if (!a.memory.empty()) r.memory_bytes = resolve_kv_memory_budget(a.memory);
  const KVCalcFigures f = compute_kv_figures(r);
  if (a.json)
    std::printf("%s\n", kv_figures_json(r, f).dump(2).c_str());
  else
    std::fputs(kv_figures_text(r, f).c_str(), stdout);
}

}  // namespace

void add_kv_calc_command(CLI::App& app) {
  auto a = std::make_shared<KVCalcArgs>();
  CLI::App* c = app.add_subcommand("kv-calc", "KV cache bytes per token / request / batch, and tokens a budget holds");
  c->add_option("-m,--model", a->model, "GGUF model file to read hyper-parameters from");
  c->add_option("--config", a->config, "Hugging Face config.json to read hyper-parameters from");
  c->add_option("--layers", a->layers, "Number of layers");
  c->add_option("--heads", a->heads, "Query heads (names MHA/GQA/MQA; MLA comparison)");
  c->add_option("--kv-heads", a->kv_heads, "KV heads");
  c->add_option("--head-dim", a->head_dim, "Dimension per head");
  c->add_option("--kv-lora-rank", a->kv_lora_rank, "MLA latent rank (DeepSeek-V2: 512); > 0 selects MLA");
  c->add_option("--rope-dim", a->rope_dim, "MLA decoupled rope key dim (DeepSeek-V2: 64)");
  c->add_option("--sliding-window", a->sliding_window,
                "Sliding window in tokens of the windowed layers (Gemma 2/3 GGUF files say theirs)");
  c->add_option("--swa-layers", a->swa_layers, "How many layers use the sliding window (default with --sliding-window: all)");
  c->add_option("--seq-len", a->seq_len, "Tokens per request (default: the model's context length)");
  c->add_option("--batch", a->batch, "Concurrent requests")->capture_default_str();
  c->add_option("--kv-dtype", a->kv_dtype,
                "KV dtype: f32, f16, bf16, fp8, fp8_e5m2, int8 (1 B), int4 (0.5 B); the figures count the values "
                "(int8, int4: what kvserve stores, with their scales, is shown too)")
      ->capture_default_str();
  c->add_option("--memory", a->memory, "Budget: bytes with K/M/G/T, KiB/MiB/GiB or KB/MB/GB suffix, or a RAM fraction (0.9, 90%)");
  c->add_option("--block-size", a->block_size, "Tokens per KV block")->capture_default_str();
  c->add_option("--streaming-window", a->streaming_window,
                "StreamingLLM eviction: full-attention layers keep only the last N tokens (plus --attention-sinks)");
  c->add_option("--attention-sinks", a->attention_sinks, "With --streaming-window: first tokens kept as sinks");
  c->add_option("--h2o-heavy", a->h2o_heavy, "H2O eviction: full-attention layers keep the N most attended tokens...");
  c->add_option("--h2o-recent", a->h2o_recent, "...and the last N tokens (per KV head, each with an 8-byte record)");
  c->add_flag("--json", a->json, "Print figures as JSON (all sizes in bytes)");
  c->callback([a] { run_kv_calc(*a); });
}

}  // namespace kvserve::cli
