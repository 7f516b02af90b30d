// kvserve gen-model: writes a random-weight GGUF (llama, qwen3, qwen3moe, gemma3, gemma4, deepseek2, gpt-oss or
// llama4 architecture)
// with the shapes of a real model (or any shapes), for benchmarks: weights N(0, stddev) with a seed, quantized to
// F32/F16/BF16/Q8_0/Q4_0/ Q4_1/Q4_K, norms 1, and the tokenizer metadata of a real GGUF (so prompts tokenize as they
// would).
#include <cctype>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>

#include "cli/compute_threads.h"
#include "cli/commands.h"
#include "cli/progress.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "model/random_model.h"

namespace kvserve::cli {

namespace {

struct GenModelArgs {
  std::string out;
  std::string preset;
  std::optional<int> hidden, layers, heads, kv_heads, ffn, head_dim, ctx, vocab_size, sliding_window;
  std::optional<int> experts, experts_used, expert_ffn, moe_layer_step;
  std::optional<int> swa_period, head_dim_swa, kv_heads_full, kv_shared_layers, per_layer_embd;
  std::optional<int> kv_lora_rank, q_lora_rank, nope_dim, rope_dim, v_head_dim, shared_experts, dense_lead;
  std::string arch;
  std::optional<float> rope_base, rms_eps;
  std::string type = "F16";
  std::string vocab_from;
  std::string name;
  bool untied = false;
  uint64_t seed = 0;
  float stddev = 0.02f;
  int threads = 0;
};

// The vocabulary used when none is given: llama-2-tiny-random's full Llama-2 SentencePiece vocabulary.
std::string default_vocab() {
  return std::string(KVSERVE_SOURCE_DIR) + "/../shared/models/llama-2-tiny-random/llama-2-tiny-random.gguf";
}

DType parse_type(std::string t) {
  for (char& c : t) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  const std::pair<const char*, DType> types[] = {
      {"F32", DType::F32},       {"F16", DType::F16},    {"BF16", DType::BF16}, {"Q8_0", DType::Q8_0},
      {"Q4_0", DType::Q4_0},     {"Q4_1", DType::Q4_1},  {"Q5_0", DType::Q5_0}, {"Q5_1", DType::Q5_1},
      {"Q4_K", DType::Q4_K},     {"Q5_K", DType::Q5_K},  {"Q6_K", DType::Q6_K}, {"IQ4_NL", DType::IQ4_NL},
      {"IQ4_XS", DType::IQ4_XS}, {"MXFP4", DType::MXFP4}};
  for (const auto& [name, type] : types)
    if (t == name) return type;
  fail(
      "gen-model: unknown weight type '{}' (F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K, IQ4_NL, "
      "IQ4_XS, MXFP4)",
      t);
}

void run_gen_model(const GenModelArgs& a) {
  set_compute_threads(a.threads);
  RandomModelSpec s;
  if (!a.preset.empty()) {
    auto p = random_model_preset(a.preset);
    if (!p) {
      std::string names;
      for (const std::string& n : random_model_preset_names()) names += (names.empty() ? "" : ", ") + n;
      fail("gen-model: unknown preset '{}' (known: {})", a.preset, names);
    }
    s = *p;
  } else if (!a.hidden || !a.layers || !a.heads || !a.ffn) {
    fail("gen-model: give --preset NAME, or at least --hidden, --layers, --heads and --ffn");
  }
  if (a.hidden) s.n_embd = *a.hidden;
  if (a.layers) s.n_layers = *a.layers;
  if (a.heads) s.n_heads = *a.heads;
  s.n_kv_heads = a.kv_heads ? *a.kv_heads : (s.n_kv_heads > 0 ? s.n_kv_heads : s.n_heads);
  if (a.ffn) s.n_ff = *a.ffn;
  if (a.head_dim) s.head_dim = *a.head_dim;
  if (a.ctx) s.n_ctx = *a.ctx;
  if (a.vocab_size) s.vocab_size = *a.vocab_size;
  if (a.rope_base) s.rope_base = *a.rope_base;
  if (a.rms_eps) s.rms_eps = *a.rms_eps;
  if (a.untied) s.tied_output = false;
  if (!a.arch.empty()) s.arch = a.arch;
  if (a.sliding_window) s.sliding_window = *a.sliding_window;
  if (a.experts) s.n_expert = *a.experts;
  if (a.experts_used) s.n_expert_used = *a.experts_used;
  if (a.expert_ffn) s.n_ff_exp = *a.expert_ffn;
  if (a.moe_layer_step) s.moe_layer_step = *a.moe_layer_step;
  if (a.swa_period) s.swa_period = *a.swa_period;
  if (a.head_dim_swa) s.head_dim_swa = *a.head_dim_swa;
  if (a.kv_heads_full) s.n_kv_heads_full = *a.kv_heads_full;
  if (a.kv_shared_layers) s.n_kv_shared_layers = *a.kv_shared_layers;
  if (a.per_layer_embd) s.n_embd_per_layer = *a.per_layer_embd;
  if (a.kv_lora_rank) s.kv_lora_rank = *a.kv_lora_rank;
  if (a.q_lora_rank) s.q_lora_rank = *a.q_lora_rank;
  if (a.nope_dim) s.qk_nope_dim = *a.nope_dim;
  if (a.rope_dim) s.qk_rope_dim = *a.rope_dim;
  if (a.v_head_dim) s.v_head_dim = *a.v_head_dim;
  if (a.shared_experts) s.n_expert_shared = *a.shared_experts;
  if (a.dense_lead) s.n_dense_lead = *a.dense_lead;
  if (!a.name.empty()) s.name = a.name;
  s.weight_type = parse_type(a.type);
  s.vocab_from = a.vocab_from.empty() ? default_vocab() : a.vocab_from;
  s.seed = a.seed;
  s.stddev = a.stddev;

  RandomModelPlan plan = plan_random_model(s);
  for (const std::string& note : plan.notes) std::fprintf(stderr, "note: %s\n", note.c_str());
  const double gib = static_cast<double>(plan.writer.file_size()) / (1024.0 * 1024 * 1024);
  std::fprintf(stderr, "gen-model: %s, %.1fM parameters, vocab %d, %s weights, %.2f GiB\n", s.name.c_str(),
               static_cast<double>(plan.n_params) / 1e6, plan.n_vocab, std::string(dtype_name(s.weight_type)).c_str(),
               gib);
  ProgressBar bar("writing " + a.out, true);
  plan.writer.write(a.out, [&](float f) { bar.update(f); });
  bar.done();
  std::fprintf(stderr, "gen-model: wrote %s\n", a.out.c_str());
}

}  // namespace

void add_gen_model_command(CLI::App& app) {
  auto a = std::make_shared<GenModelArgs>();
  CLI::App* c = app.add_subcommand(
      "gen-model",
      "Write a random-weight GGUF (llama, qwen3, qwen3moe, gemma3, gemma4, deepseek2, gpt-oss, llama4) "
      "with given shapes (for benchmarks)");
  c->add_option("-o,--output", a->out, "Output .gguf file")->required();
  c->add_option("--preset", a->preset,
                "Shapes of a real model: llama-3.2-1b, smollm2-135m, qwen3-0.6b, gemma-3-1b, qwen3-30b-a3b, "
                "deepseek-v2-lite, gpt-oss-20b, llama-4-scout (flags below override)");
  c->add_option(
      "--arch", a->arch,
      "Architecture: llama, qwen3 (q/k norms), qwen3moe (experts), gemma3, deepseek2 (MLA, shared experts), "
      "gpt-oss (sinks, biases, MXFP4 experts), llama4 (sigmoid-routed experts beside a shared one, chunked "
      "attention, NoPE layers), gemma4 (sliding and full layers of their own head sizes, shared KV, per-layer "
      "embeddings, experts beside a dense FFN) (default: the preset's, or llama)");
  c->add_option("--experts", a->experts, "qwen3moe, deepseek2, gpt-oss, llama4, gemma4: experts per layer");
  c->add_option("--experts-used", a->experts_used, "qwen3moe, deepseek2, gpt-oss, llama4: experts a token runs");
  c->add_option("--expert-ffn", a->expert_ffn, "qwen3moe, deepseek2, gpt-oss, llama4: each expert's feed-forward size");
  c->add_option("--moe-layer-step", a->moe_layer_step,
                "llama4: every Nth layer has experts, the others a dense FFN (Maverick: 2; default 1)");
  c->add_option("--swa-period", a->swa_period,
                "gemma4: every Nth layer full attention, the others sliding (default 6)");
  c->add_option("--head-dim-swa", a->head_dim_swa, "gemma4: the sliding layers' head size (default: --head-dim)");
  c->add_option("--kv-heads-full", a->kv_heads_full,
                "gemma4: the full-attention layers' KV heads (default: --kv-heads)");
  c->add_option("--kv-shared-layers", a->kv_shared_layers, "gemma4: the last N layers read earlier layers' KV");
  c->add_option("--per-layer-embd", a->per_layer_embd, "gemma4: per-layer embedding values per layer (0: none)");
  c->add_option("--shared-experts", a->shared_experts, "deepseek2: always-on experts per MoE layer");
  c->add_option("--dense-lead", a->dense_lead, "deepseek2: leading layers with a dense FFN (--ffn wide)");
  c->add_option("--kv-lora-rank", a->kv_lora_rank, "deepseek2: MLA latent size (cached per token and layer)");
  c->add_option("--q-lora-rank", a->q_lora_rank, "deepseek2: q's low rank (0: q projected directly)");
  c->add_option("--nope-dim", a->nope_dim, "deepseek2: each head's key dims without RoPE");
  c->add_option("--rope-dim", a->rope_dim, "deepseek2: the shared rope key's dims (also each head's)");
  c->add_option("--v-head-dim", a->v_head_dim, "deepseek2: each head's value size");
  c->add_option("--sliding-window", a->sliding_window,
                "gemma3, gemma4, gpt-oss: local layers attend to this many positions (gemma3: every 6th layer global; "
                "gemma4: every --swa-period-th; gpt-oss: the odd layers; 0 = none)");
  c->add_option("--hidden", a->hidden, "Hidden size (embedding length)");
  c->add_option("--layers", a->layers, "Number of layers");
  c->add_option("--heads", a->heads, "Attention heads");
  c->add_option("--kv-heads", a->kv_heads, "KV heads (default: --heads)");
  c->add_option("--ffn", a->ffn, "Feed-forward size");
  c->add_option("--head-dim", a->head_dim, "Head dimension (default: hidden / heads)");
  c->add_option("--ctx", a->ctx, "Training context length written to the file (default 2048; presets 8192)");
  c->add_option("--vocab-from", a->vocab_from,
                "GGUF whose tokenizer metadata (and vocabulary) is copied (default: ../shared/models/"
                "llama-2-tiny-random, the Llama-2 vocabulary)");
  c->add_option("--vocab-size", a->vocab_size,
                "Pad the vocabulary to this many tokens with unused [PAD] tokens (presets set the real size)");
  c->add_option(
       "--type", a->type,
       "Weight type: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS, MXFP4 (norms "
       "are F32; gpt-oss's experts MXFP4 whatever this)")
      ->capture_default_str();
  c->add_option("--rope-base", a->rope_base, "RoPE frequency base");
  c->add_option("--rms-eps", a->rms_eps, "RMS norm epsilon");
  c->add_flag("--untied", a->untied, "Write a separate output.weight instead of tying it to token_embd");
  c->add_option("--name", a->name, "general.name");
  c->add_option("--seed", a->seed, "Random seed")->capture_default_str();
  c->add_option("--stddev", a->stddev, "Standard deviation of the weights")->capture_default_str();
  c->add_option("-t,--threads", a->threads, "Threads (default: the physical cores this process may use, counting its affinity and cgroup CPU quota)");
  c->callback([a] { run_gen_model(*a); });
}

}  // namespace kvserve::cli
