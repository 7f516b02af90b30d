// Greedy ids and logits from llama.cpp (through libllama) for a GGUF file, one JSON line per prompt, by
// the protocol of ../shared/golden/gguf/README.md: a fresh context per prompt (n_ctx 512, one thread, F32
// K/V, flash attention off), the prompt tokenized with special tokens added and not parsed, decoded in
// one batch; then n_steps greedy steps, one token per decode, the lowest id winning a tie. Written for
// scripts/make_arch_goldens.py, which builds it against the llama.cpp that llama-cpp-python vendors.
//
//   llama_cpp_golden MODEL.gguf N_STEPS PROMPT... > golden.jsonl
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "llama.h"

namespace {

void json_string(const std::string& s) {
  std::putchar('"');
  for (unsigned char ch : s) {
    if (ch == '"' || ch == '\\') {
      std::printf("\\%c", ch);
    } else if (ch < 0x20) {
      std::printf("\\u%04x", ch);
    } else {
      std::putchar(ch);
    }
  }
  std::putchar('"');
}

int argmax_lowest(const float* logits, int n) {
  int best = 0;
  for (int i = 1; i < n; ++i)
    if (logits[i] > logits[best]) best = i;
  return best;
}

std::vector<std::pair<int, float>> top5(const float* logits, int n) {
  std::vector<std::pair<int, float>> all(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) all[static_cast<size_t>(i)] = {i, logits[i]};
  std::partial_sort(all.begin(), all.begin() + 5, all.end(), [](const auto& a, const auto& b) {
    return a.second != b.second ? a.second > b.second : a.first < b.first;
  });
  all.resize(5);
  return all;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: %s MODEL.gguf N_STEPS PROMPT...\n", argv[0]);
    return 2;
  }
  const int n_steps = std::atoi(argv[2]);
  llama_log_set([](ggml_log_level, const char*, void*) {}, nullptr);
  llama_backend_init();
  llama_model_params mp = llama_model_default_params();
  mp.n_gpu_layers = 0;
  llama_model* model = llama_model_load_from_file(argv[1], mp);
  if (!model) {
    std::fprintf(stderr, "cannot load %s\n", argv[1]);
    return 1;
  }
  const llama_vocab* vocab = llama_model_get_vocab(model);
  const int n_vocab = llama_vocab_n_tokens(vocab);
  std::string stem = argv[1];
  stem = stem.substr(stem.find_last_of('/') + 1);

  for (int pi = 3; pi < argc; ++pi) {
    const std::string prompt = argv[pi];
    llama_context_params cp = llama_context_default_params();
    cp.n_ctx = 512;
    cp.n_batch = 512;
    cp.n_ubatch = 512;
    cp.n_threads = 1;
    cp.n_threads_batch = 1;
    cp.type_k = GGML_TYPE_F32;
    cp.type_v = GGML_TYPE_F32;
    cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
    cp.no_perf = true;
    llama_context* ctx = llama_init_from_model(model, cp);
    if (!ctx) {
      std::fprintf(stderr, "cannot create a context\n");
      return 1;
    }
    std::vector<llama_token> ids(prompt.size() + 8);
    const int n = llama_tokenize(vocab, prompt.data(), static_cast<int32_t>(prompt.size()), ids.data(),
                                 static_cast<int32_t>(ids.size()), /*add_special=*/true, /*parse_special=*/false);
    if (n < 0) return 1;
    ids.resize(static_cast<size_t>(n));
    std::vector<llama_token> prompt_ids = ids;
    if (llama_decode(ctx, llama_batch_get_one(ids.data(), n)) != 0) return 1;
    std::vector<float> first(llama_get_logits_ith(ctx, -1), llama_get_logits_ith(ctx, -1) + n_vocab);

    std::vector<int> generated;
    std::vector<std::vector<std::pair<int, float>>> tops;
    float min_margin = 1e30f;
    int min_step = 0;
    const float* logits = first.data();
    for (int s = 0; s < n_steps; ++s) {
      const auto t = top5(logits, n_vocab);
      tops.push_back(t);
      if (t[0].second - t[1].second < min_margin) min_margin = t[0].second - t[1].second, min_step = s;
      llama_token next = argmax_lowest(logits, n_vocab);
      generated.push_back(next);
      if (s + 1 == n_steps) break;
      if (llama_decode(ctx, llama_batch_get_one(&next, 1)) != 0) return 1;
      logits = llama_get_logits_ith(ctx, -1);
    }

    std::printf("{\"model\": ");
    json_string(stem);
    std::printf(", \"prompt\": ");
    json_string(prompt);
    std::printf(", \"prompt_ids\": [");
    for (size_t i = 0; i < prompt_ids.size(); ++i) std::printf("%s%d", i ? ", " : "", prompt_ids[i]);
    std::printf("], \"generated_ids\": [");
    for (size_t i = 0; i < generated.size(); ++i) std::printf("%s%d", i ? ", " : "", generated[i]);
    std::printf("], \"first_logits\": [");
    for (int i = 0; i < n_vocab; ++i) std::printf("%s%.9g", i ? ", " : "", first[static_cast<size_t>(i)]);
    std::printf("], \"step_logits_top\": [");
    for (size_t s = 0; s < tops.size(); ++s) {
      std::printf("%s[", s ? ", " : "");
      for (size_t j = 0; j < tops[s].size(); ++j)
        std::printf("%s[%d, %.9g]", j ? ", " : "", tops[s][j].first, tops[s][j].second);
      std::printf("]");
    }
    std::printf(
        "], \"min_top1_top2_margin\": %.9g, \"min_margin_step\": %d, \"n_steps\": %d, \"n_vocab\": %d, "
        "\"kv_cache_type\": \"f32\", \"n_threads\": 1, \"n_ctx\": 512}\n",
        min_margin, min_step, n_steps, n_vocab);
    llama_free(ctx);
  }
  llama_model_free(model);
  return 0;
}
