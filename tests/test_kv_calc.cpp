// kv-calc figures for well-known models, config.json parsing, and the built CLI end to end.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "core/error.h"
#include "kv/kv_calc.h"
#include "run_command.h"

using namespace kvserve;

namespace {

KVModelShape mha(int layers, int heads, int kv_heads, int head_dim) {
  KVModelShape s;
  s.n_layers = layers;
  s.n_heads = heads;
  s.n_kv_heads = kv_heads;
  s.head_dim = head_dim;
  return s;
}

KVModelShape deepseek_v2() {
  KVModelShape s;
  s.kind = AttentionKind::MLA;
  s.n_layers = 60;
  s.n_heads = 128;
  s.head_dim = 128;
  s.kv_lora_rank = 512;
  s.rope_dim = 64;
  return s;
}

KVCalcFigures figures(const KVModelShape& s, int64_t seq_len, KVCacheDType dtype = KVCacheDType::F16,
                      int64_t batch = 1) {
  KVCalcRequest r;
  r.shape = s;
  r.seq_len = seq_len;
  r.dtype = dtype;
  r.batch = batch;
  return compute_kv_figures(r);
}

test::CommandResult run_cli(const std::string& args) {
  return test::run_command(std::string(KVSERVE_BINARY) + " " + args);
}

}  // namespace

TEST(KVCalc, Llama2_70B_MHA) {
  const KVCalcFigures f = figures(mha(80, 64, 64, 128), 4096);
  EXPECT_EQ(f.bytes_per_token_per_layer, 32768u);
  EXPECT_EQ(f.bytes_per_request, 10'737'418'240ull);
  EXPECT_EQ(figures(mha(80, 64, 64, 128), 4096, KVCacheDType::F16, 32).bytes_total, 343'597'383'680ull);
}

TEST(KVCalc, Llama3_70B_GQA) {
  EXPECT_EQ(figures(mha(80, 64, 8, 128), 131072).bytes_per_request, 42'949'672'960ull);
  EXPECT_EQ(attention_kind_name(mha(80, 64, 8, 128)), "GQA");
  EXPECT_EQ(attention_kind_name(mha(80, 64, 64, 128)), "MHA");
  EXPECT_EQ(attention_kind_name(mha(2, 8, 1, 64)), "MQA");
}

TEST(KVCalc, Llama3_8B_IsExactlyOneGiBAt8K) {
  EXPECT_EQ(figures(mha(32, 32, 8, 128), 8192, KVCacheDType::BF16).bytes_per_request, 1'073'741'824ull);
}

TEST(KVCalc, DeepSeekV2_MLA) {
  const KVCalcFigures f = figures(deepseek_v2(), 4096);
  EXPECT_EQ(f.bytes_per_token_per_layer, 1152u);
  ASSERT_TRUE(f.mha_bytes_per_token_per_layer.has_value());
  EXPECT_EQ(*f.mha_bytes_per_token_per_layer, 65536u);
  EXPECT_EQ(f.bytes_per_request, 283'115'520ull);
  EXPECT_EQ(attention_kind_name(deepseek_v2()), "MLA");
}

TEST(KVCalc, QuantizedDtypesAndMemoryBudget) {
  const KVModelShape s = mha(32, 32, 8, 128);
  EXPECT_EQ(figures(s, 8192, KVCacheDType::INT8).bytes_per_request, 536'870'912ull);
  // The textbook figure is the values'; kvserve's int8 also stores an f16 scale per 32 of them.
  EXPECT_EQ(figures(s, 8192, KVCacheDType::INT8).stored_bytes_per_token, 32u * 16u * (128u + 8u));
  EXPECT_FALSE(figures(s, 8192, KVCacheDType::F16).stored_bytes_per_token.has_value());
  // int4 (q4_0): 64 bytes of values and 4 scales a row of 128; fp8 stores exactly its values.
  EXPECT_EQ(figures(s, 8192, KVCacheDType::INT4).stored_bytes_per_token, 32u * 16u * (64u + 8u));
  EXPECT_FALSE(figures(s, 8192, KVCacheDType::FP8_E4M3).stored_bytes_per_token.has_value());
  // A budget holds what is stored: 10 GiB of int8 at 136 KiB a token (128 values + 4 scales a row, 32 x 16 rows).
  KVCalcRequest q;
  q.shape = s;
  q.seq_len = 8192;
  q.dtype = KVCacheDType::INT8;
  q.memory_bytes = 10ull << 30;
  const KVCalcFigures fq = compute_kv_figures(q);
  EXPECT_EQ(*fq.tokens_fit, (10ull << 30) / (32u * 16u * 136u));
  EXPECT_EQ(*fq.blocks_fit, (10ull << 30) / (16u * 32u * 16u * 136u));
  EXPECT_EQ(figures(s, 8192, KVCacheDType::FP8_E4M3).bytes_per_request, 536'870'912ull);
  EXPECT_EQ(figures(s, 8192, KVCacheDType::INT4).bytes_per_request, 268'435'456ull);
  EXPECT_EQ(figures(s, 8192, KVCacheDType::F32).bytes_per_request, 2'147'483'648ull);
  KVCalcRequest r;
  r.shape = s;
  r.seq_len = 8192;
  r.memory_bytes = 10ull << 30;  // 10 GiB at 128 KiB per token
  const KVCalcFigures f = compute_kv_figures(r);
  EXPECT_EQ(*f.tokens_fit, 81920u);
  EXPECT_EQ(*f.blocks_fit, 5120u);
  EXPECT_EQ(*f.requests_fit, 10u);
}

TEST(KVCalc, RejectsBadShapes) {
  EXPECT_THROW(figures(mha(0, 8, 8, 64), 10), Error);
  EXPECT_THROW(figures(mha(2, 8, 3, 64), 10), Error);
  EXPECT_THROW(figures(mha(2, 8, 8, 64), 0), Error);
  EXPECT_THROW(figures(mha(2, 8, 8, 64), 10, KVCacheDType::F16, 0), Error);
}

TEST(KVCalc, ReadsHuggingFaceConfigs) {
  const auto llama3_8b = nlohmann::json::parse(R"({"num_hidden_layers": 32, "num_attention_heads": 32,
      "num_key_value_heads": 8, "hidden_size": 4096, "max_position_embeddings": 8192, "model_type": "llama"})");
  KVModelShape s = kv_shape_from_hf_config(llama3_8b);
  EXPECT_EQ(s.n_layers, 32);
  EXPECT_EQ(s.n_kv_heads, 8);
  EXPECT_EQ(s.head_dim, 128);
  EXPECT_EQ(s.context_length, 8192);
  // Explicit head_dim wins over hidden_size / heads (Gemma-style), and kv heads default to heads.
  s = kv_shape_from_hf_config(nlohmann::json::parse(
      R"({"num_hidden_layers": 2, "num_attention_heads": 8, "hidden_size": 2048, "head_dim": 256})"));
  EXPECT_EQ(s.head_dim, 256);
  EXPECT_EQ(s.n_kv_heads, 8);
  const auto dsv2 = nlohmann::json::parse(R"({"num_hidden_layers": 60, "num_attention_heads": 128,
      "num_key_value_heads": 128, "hidden_size": 5120, "kv_lora_rank": 512, "qk_rope_head_dim": 64,
      "qk_nope_head_dim": 128, "v_head_dim": 128})");
  s = kv_shape_from_hf_config(dsv2);
  EXPECT_EQ(s.kind, AttentionKind::MLA);
  EXPECT_EQ(figures(s, 4096).bytes_per_request, 283'115'520ull);
  EXPECT_THROW(kv_shape_from_hf_config(nlohmann::json::parse(R"({"num_attention_heads": 8})")), Error);
  EXPECT_THROW(kv_shape_from_hf_config(nlohmann::json::parse(R"({"num_hidden_layers": "x", "num_attention_heads": 8})")),
               Error);
}

TEST(KVCalc, CliPrintsJsonFigures) {
  test::CommandResult r = run_cli("kv-calc --layers 80 --heads 64 --kv-heads 64 --head-dim 128 --seq-len 4096 --batch 32 "
                        "--kv-dtype f16 --json");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["bytes_per_request"].get<uint64_t>(), 10'737'418'240ull);
  EXPECT_EQ(j["bytes_total"].get<uint64_t>(), 343'597'383'680ull);
  EXPECT_EQ(j["attention"], "MHA");

  r = run_cli("kv-calc --layers 60 --heads 128 --head-dim 128 --kv-lora-rank 512 --rope-dim 64 --seq-len 4096 --json");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["attention"], "MLA");
  EXPECT_EQ(j["bytes_per_token_per_layer"].get<uint64_t>(), 1152u);
  EXPECT_EQ(j["mha_bytes_per_token_per_layer"].get<uint64_t>(), 65536u);
  EXPECT_EQ(j["bytes_per_request"].get<uint64_t>(), 283'115'520ull);

  r = run_cli("kv-calc --layers 32 --heads 32 --kv-heads 8 --head-dim 128 --seq-len 8192 --kv-dtype bf16 "
              "--memory 10GiB --json");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["bytes_per_request"].get<uint64_t>(), 1'073'741'824ull);
  EXPECT_EQ(j["memory_bytes"].get<uint64_t>(), 10ull << 30);
  EXPECT_EQ(j["tokens_fit"].get<uint64_t>(), 81920u);
  EXPECT_EQ(j["requests_fit"].get<uint64_t>(), 10u);
}

TEST(KVCalc, CliReadsConfigJson) {
  const auto dir = std::filesystem::temp_directory_path() / "kvserve_kv_calc_test";
  std::filesystem::create_directories(dir);
  const auto path = dir / "config.json";
  std::ofstream(path) << R"({"num_hidden_layers": 80, "num_attention_heads": 64, "num_key_value_heads": 8,
      "hidden_size": 8192, "max_position_embeddings": 131072})";
  test::CommandResult r = run_cli("kv-calc --config " + path.string() + " --json");  // seq len from the config
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["bytes_per_request"].get<uint64_t>(), 42'949'672'960ull);
  EXPECT_EQ(j["attention"], "GQA");
  std::filesystem::remove_all(dir);
}

TEST(KVCalc, CliRejectsBadFlags) {
  EXPECT_NE(run_cli("kv-calc --layers 2 --kv-heads 2 --head-dim 64 --seq-len 10 --kv-dtype f12").exit_code, 0);
  EXPECT_NE(run_cli("kv-calc --layers 2 --kv-heads 2 --head-dim 64 --seq-len 10 --memory lots").exit_code, 0);
  EXPECT_NE(run_cli("kv-calc --layers x").exit_code, 0);
  EXPECT_NE(run_cli("kv-calc --seq-len 10").exit_code, 0);           // no model at all
  EXPECT_NE(run_cli("kv-calc --layers 2 --head-dim 64").exit_code, 0);  // no kv heads, no seq len
  EXPECT_NE(run_cli("kv-calc --config /nonexistent/config.json --seq-len 10").exit_code, 0);
  EXPECT_NE(run_cli("kv-calc -m /nonexistent/model.gguf --seq-len 10").exit_code, 0);
  EXPECT_NE(run_cli("kv-calc --layers 2 --kv-heads 2 --head-dim 64 --seq-len 10 --bogus").exit_code, 0);
  EXPECT_EQ(run_cli("kv-calc --layers 2 --kv-heads 2 --head-dim 64 --seq-len 10").exit_code, 0);
}

TEST(KVCalc, ReadsGgufHyperParameters) {
  const std::string path = std::string(KVSERVE_SHARED_DIR) + "/golden/gguf/models/tiny-gqa-Q4_1.gguf";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "no " << path;
  // tiny-gqa: 2 layers, 4 query / 2 KV heads of 64, context 512 -> 2*2*64*2 B * 2 layers = 1 KiB/token.
  test::CommandResult r = run_cli("kv-calc -m " + path + " --json");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["attention"], "GQA");
  EXPECT_EQ(j["layers"], 2);
  EXPECT_EQ(j["kv_heads"], 2);
  EXPECT_EQ(j["head_dim"], 64);
  EXPECT_EQ(j["seq_len"], 512);
  EXPECT_EQ(j["bytes_per_token"].get<uint64_t>(), 1024u);
  EXPECT_EQ(j["bytes_per_request"].get<uint64_t>(), 524288u);
}

// Gemma-3-1B at 32k: 22 of 26 layers keep only their 512-token window, so a cache that drops the rest
// holds 4 * 32768 + 22 * 512 tokens of 1 KiB each (f16, one KV head of 256): 139 MiB against 832 MiB.
TEST(KVCalc, SlidingWindowLayersKeepOnlyTheirWindow) {
  KVModelShape s = mha(26, 4, 1, 256);
  s.sliding_window = 512;
  s.n_swa_layers = 22;
  KVCalcRequest r;
  r.shape = s;
  r.seq_len = 32768;
  r.batch = 3;
  r.memory_bytes = 4ull << 30;
  const KVCalcFigures f = compute_kv_figures(r);
  EXPECT_EQ(f.bytes_per_request, 26ull * 32768 * 1024);
  ASSERT_TRUE(f.windowed_bytes_per_request);
  EXPECT_EQ(*f.windowed_bytes_per_request, (4ull * 32768 + 22ull * 512) * 1024);
  EXPECT_EQ(*f.windowed_bytes_total, 3 * *f.windowed_bytes_per_request);
  EXPECT_EQ(*f.requests_fit, 4u);
  EXPECT_EQ(*f.windowed_requests_fit, (4ull << 30) / ((4ull * 32768 + 22ull * 512) * 1024));
  // Shorter than the window: nothing to drop.
  r.seq_len = 300;
  EXPECT_EQ(*compute_kv_figures(r).windowed_bytes_per_request, compute_kv_figures(r).bytes_per_request);
  // No windowed layers: no windowed figures.
  EXPECT_FALSE(figures(mha(26, 4, 1, 256), 32768).windowed_bytes_per_request);
  s.n_swa_layers = 27;
  EXPECT_THROW(validate_kv_shape(s), Error);
}

// StreamingLLM eviction: full-attention layers keep sinks + window tokens, sliding-window layers their window.
TEST(KVCalc, StreamingKeepsSinksAndTheWindow) {
  KVCalcRequest r;
  r.shape = mha(32, 32, 8, 128);  // Llama-3-8B: 128 KiB a token in f16
  r.seq_len = 100000;
  r.batch = 2;
  r.streaming_window = 4092;
  r.attention_sinks = 4;
  r.memory_bytes = 8ull << 30;
  KVCalcFigures f = compute_kv_figures(r);
  ASSERT_TRUE(f.streaming_bytes_per_request);
  EXPECT_EQ(*f.streaming_bytes_per_request, 4096ull * 131072);  // 512 MiB against 12.2 GiB
  EXPECT_EQ(*f.streaming_bytes_total, 2 * *f.streaming_bytes_per_request);
  EXPECT_EQ(*f.streaming_requests_fit, 16u);
  EXPECT_EQ(*f.requests_fit, 0u);
  r.seq_len = 1000;  // shorter than sinks + window: nothing dropped
  EXPECT_EQ(*compute_kv_figures(r).streaming_bytes_per_request, compute_kv_figures(r).bytes_per_request);
  // With sliding-window layers, those keep their own window.
  KVModelShape g = mha(26, 4, 1, 256);
  g.sliding_window = 512;
  g.n_swa_layers = 22;
  r.shape = g;
  r.seq_len = 32768;
  r.streaming_window = 1020;
  f = compute_kv_figures(r);
  EXPECT_EQ(*f.streaming_bytes_per_request, (4ull * 1024 + 22ull * 512) * 1024);
  EXPECT_FALSE(figures(g, 32768).streaming_bytes_per_request);
  r.streaming_window = 0;
  EXPECT_THROW(compute_kv_figures(r), Error);  // sinks without a window
  const test::CommandResult cli = run_cli(
      "kv-calc --layers 32 --kv-heads 8 --head-dim 128 --seq-len 100000 --streaming-window 4092 --attention-sinks 4 "
      "--json");
  ASSERT_EQ(cli.exit_code, 0) << cli.out;
  EXPECT_EQ(nlohmann::json::parse(cli.out)["streaming_bytes_per_request"].get<uint64_t>(), 4096ull * 131072);
  const test::CommandResult text = run_cli(
      "kv-calc --layers 32 --kv-heads 8 --head-dim 128 --seq-len 100000 --streaming-window 4092 --attention-sinks 4");
  EXPECT_NE(text.out.find("keep 4 sinks + the last 4,092 tokens"), std::string::npos) << text.out;
}

// H2O: the full-attention layers keep heavy + recent tokens a KV head, each with its 8-byte record.
TEST(KVCalc, HeavyHittersKeepTheBudgetAndTheirRecords) {
  KVCalcRequest r;
  r.shape = mha(32, 32, 8, 128);  // Llama-3-8B: 128 KiB a token in f16, 8 KV heads
  r.seq_len = 8192;
  r.batch = 4;
  r.h2o_heavy = 512;
  r.h2o_recent = 512;
  r.memory_bytes = 8ull << 30;
  KVCalcFigures f = compute_kv_figures(r);
  ASSERT_TRUE(f.h2o_bytes_per_request);
  EXPECT_EQ(*f.h2o_bytes_per_request, 1024ull * 32 * (4096 + 8 * 8));  // 130 MiB against 1 GiB
  EXPECT_EQ(*f.h2o_bytes_total, 4 * *f.h2o_bytes_per_request);
  EXPECT_EQ(*f.h2o_requests_fit, (8ull << 30) / *f.h2o_bytes_per_request);
  EXPECT_FALSE(f.streaming_bytes_per_request);
  r.streaming_window = 64;
  EXPECT_THROW(compute_kv_figures(r), Error);  // one eviction at a time
  r.streaming_window = 0;
  // MLA: one latent row (576 values, 1152 bytes in f16) and one record a token and layer.
  KVCalcRequest d = r;
  d.shape = deepseek_v2();
  EXPECT_EQ(*compute_kv_figures(d).h2o_bytes_per_request, 1024ull * d.shape.n_layers * (1152 + 8));
  r.h2o_recent = 0;
  EXPECT_THROW(compute_kv_figures(r), Error);  // heavy hitters without recent tokens
  const test::CommandResult text =
      run_cli("kv-calc --layers 32 --kv-heads 8 --head-dim 128 --seq-len 8192 --h2o-heavy 512 --h2o-recent 512");
  ASSERT_EQ(text.exit_code, 0) << text.out;
  EXPECT_NE(text.out.find("keep 512 heavy hitters + the last 512 tokens"), std::string::npos) << text.out;
}

// The GGUF's window and llama.cpp's default pattern (Gemma 3: every 6th layer global), and the flags.
TEST(KVCalc, CliReadsSlidingWindowsFromGgufAndFlags) {
  test::CommandResult r =
      run_cli("kv-calc -m " + std::string(KVSERVE_SOURCE_DIR) + "/tests/golden/arch/tiny-gemma3.gguf --json");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["layers"], 6);
  EXPECT_EQ(j["sliding_window"], 8);
  EXPECT_EQ(j["sliding_window_layers"], 5);
  const uint64_t per_layer = j["bytes_per_token_per_layer"].get<uint64_t>();
  const uint64_t seq = j["seq_len"].get<uint64_t>();
  EXPECT_EQ(j["windowed_bytes_per_request"].get<uint64_t>(), per_layer * (1 * seq + 5 * 8));
  // Llama 4: its chunked layers (3 of 4) keep at most a chunk of 8192 positions.
  r = run_cli("kv-calc -m " + std::string(KVSERVE_SOURCE_DIR) +
              "/tests/golden/arch/tiny-llama4.gguf --seq-len 32768 --json");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["sliding_window"], 8192);
  EXPECT_EQ(j["sliding_window_layers"], 3);
  EXPECT_EQ(j["windowed_bytes_per_request"].get<uint64_t>(),
            j["bytes_per_token_per_layer"].get<uint64_t>() * (1 * 32768 + 3 * 8192));

  r = run_cli("kv-calc --layers 26 --kv-heads 1 --head-dim 256 --sliding-window 512 --swa-layers 22 "
              "--seq-len 32768 --json");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["windowed_bytes_per_request"].get<uint64_t>(), 145'752'064ull);
  // --sliding-window alone: every layer is windowed (Mistral-style).
  r = run_cli("kv-calc --layers 32 --kv-heads 8 --head-dim 128 --sliding-window 4096 --seq-len 32768 --json");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_EQ(nlohmann::json::parse(r.out)["windowed_bytes_per_request"].get<uint64_t>(), 32ull * 4096 * 4096);
  EXPECT_NE(run_cli("kv-calc --layers 2 --kv-heads 2 --head-dim 64 --seq-len 10 --sliding-window 4 --swa-layers 3")
                .exit_code,
            0);
}

// Hugging Face configs name their local layers as transformers reads them.
TEST(KVCalc, ReadsSlidingWindowsFromHuggingFaceConfigs) {
  // Gemma-3-1B's config.json (the keys that matter): every 6th layer global.
  const nlohmann::json gemma3 = nlohmann::json::parse(R"({"architectures": ["Gemma3ForCausalLM"],
      "model_type": "gemma3_text", "num_hidden_layers": 26, "num_attention_heads": 4, "num_key_value_heads": 1,
      "head_dim": 256, "hidden_size": 1152, "max_position_embeddings": 32768, "sliding_window": 512,
      "sliding_window_pattern": 6})");
  KVModelShape s = kv_shape_from_hf_config(gemma3);
  EXPECT_EQ(s.sliding_window, 512);
  EXPECT_EQ(s.n_swa_layers, 22);
  // Gemma 3 4B's multimodal config: the text part, with explicit layer types.
  nlohmann::json text = gemma3;
  text["num_hidden_layers"] = 4;
  text["layer_types"] = {"sliding_attention", "full_attention", "sliding_attention", "sliding_attention"};
  const nlohmann::json mm{{"model_type", "gemma3"}, {"text_config", text}};
  s = kv_shape_from_hf_config(mm);
  EXPECT_EQ(s.n_swa_layers, 3);
  // Gemma 2: every even layer, window 4096 by default; null: none.
  nlohmann::json gemma2 = gemma3;
  gemma2["model_type"] = "gemma2";
  gemma2.erase("sliding_window");
  s = kv_shape_from_hf_config(gemma2);
  EXPECT_EQ(s.sliding_window, 4096);
  EXPECT_EQ(s.n_swa_layers, 13);
  gemma2["sliding_window"] = nullptr;
  EXPECT_EQ(kv_shape_from_hf_config(gemma2).n_swa_layers, 0);
  // Mistral-7B-v0.1: a window of 4096 on every layer (transformers' default too); v0.2 on: null, none.
  nlohmann::json mistral = nlohmann::json::parse(R"({"architectures": ["MistralForCausalLM"],
      "model_type": "mistral", "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
      "hidden_size": 4096, "max_position_embeddings": 32768, "sliding_window": 4096})");
  s = kv_shape_from_hf_config(mistral);
  EXPECT_EQ(s.sliding_window, 4096);
  EXPECT_EQ(s.n_swa_layers, 32);
  mistral["sliding_window"] = nullptr;
  EXPECT_EQ(kv_shape_from_hf_config(mistral).n_swa_layers, 0);
  // Qwen 2.5 configs name a window but use_sliding_window is false: every position kept.
  const nlohmann::json qwen2 = nlohmann::json::parse(R"({"model_type": "qwen2", "num_hidden_layers": 24,
      "num_attention_heads": 14, "num_key_value_heads": 2, "hidden_size": 896, "sliding_window": 32768,
      "max_window_layers": 21, "use_sliding_window": false})");
  EXPECT_EQ(kv_shape_from_hf_config(qwen2).n_swa_layers, 0);
  // Llama 4 Scout's text_config: chunks of 8192 on the 36 layers that rotate (all but every 4th); a chunk keeps at
  // most its size, as a window does. attention_chunk_size null (MobileLLM-style): none.
  nlohmann::json scout = nlohmann::json::parse(R"({"model_type": "llama4_text", "num_hidden_layers": 48,
      "num_attention_heads": 40, "num_key_value_heads": 8, "head_dim": 128, "hidden_size": 5120,
      "max_position_embeddings": 10485760, "attention_chunk_size": 8192})");
  s = kv_shape_from_hf_config(nlohmann::json{{"model_type", "llama4"}, {"text_config", scout}});
  EXPECT_EQ(s.sliding_window, 8192);
  EXPECT_EQ(s.n_swa_layers, 36);
  scout["no_rope_layers"] = std::vector<int>(48, 1);
  EXPECT_EQ(kv_shape_from_hf_config(scout).n_swa_layers, 48);
  scout["attention_chunk_size"] = nullptr;
  EXPECT_EQ(kv_shape_from_hf_config(scout).n_swa_layers, 0);
  // Other models keep every position.
  nlohmann::json llama = gemma3;
  llama["model_type"] = "llama";
  EXPECT_EQ(kv_shape_from_hf_config(llama).sliding_window, 0);
  // A bad layer type is named.
  text["layer_types"][1] = "global";
  EXPECT_THROW(kv_shape_from_hf_config(nlohmann::json{{"model_type", "gemma3"}, {"text_config", text}}), Error);
}

// Gemma-4-E2B-shaped (35 layers, every 5th full attention with one KV head of 512, the others sliding with one of
// 256 over a 512-token window, the last 20 on earlier layers' KV): 3 full and 12 sliding layers cache, f16:
// 3 * 2 KiB + 12 * 1 KiB = 18 KiB a token; at 32k the sliding ones keep their 512 tokens.
TEST(KVCalc, Gemma4CountsOnlyLayersWithTheirOwnKVAndEachKindsHeads) {
  KVModelShape s = mha(35, 8, 1, 512);
  s.n_kv_heads_swa = 1;
  s.head_dim_swa = 256;
  s.sliding_window = 512;
  s.n_swa_layers = 28;
  s.n_kv_shared_layers = 20;
  s.n_shared_swa_layers = 16;
  EXPECT_EQ(s.own_full_layers(), 3);
  EXPECT_EQ(s.own_swa_layers(), 12);
  KVCalcRequest r;
  r.shape = s;
  r.seq_len = 32768;
  const KVCalcFigures f = compute_kv_figures(r);
  EXPECT_EQ(f.bytes_per_token_per_layer, 2048u);
  ASSERT_TRUE(f.bytes_per_token_per_swa_layer);
  EXPECT_EQ(*f.bytes_per_token_per_swa_layer, 1024u);
  EXPECT_EQ(f.bytes_per_token, 3u * 2048 + 12u * 1024);
  ASSERT_TRUE(f.windowed_bytes_per_request);
  EXPECT_EQ(*f.windowed_bytes_per_request, 3ull * 2048 * 32768 + 12ull * 1024 * 512);
  s.n_shared_swa_layers = 21;
  EXPECT_THROW(validate_kv_shape(s), Error);

  // tiny-gemma4's file: full layers 1 and 3 with one KV head of 32, sliding 0 and 2 with four of 16, 4 and 5 shared.
  test::CommandResult c = run_cli("kv-calc -m " + std::string(KVSERVE_SOURCE_DIR) +
                                  "/tests/golden/arch/tiny-gemma4.gguf --seq-len 100 --json");
  ASSERT_EQ(c.exit_code, 0) << c.out;
  const nlohmann::json j = nlohmann::json::parse(c.out);
  EXPECT_EQ(j["kv_heads"], 1);
  EXPECT_EQ(j["kv_heads_swa"], 4);
  EXPECT_EQ(j["head_dim_swa"], 16);
  EXPECT_EQ(j["kv_shared_layers"], 2);
  EXPECT_EQ(j["bytes_per_token"].get<uint64_t>(), 2u * (2 * 32 * 2) + 2u * (2 * 4 * 16 * 2));
  EXPECT_EQ(j["windowed_bytes_per_request"].get<uint64_t>(), 2u * 128 * 100 + 2u * 256 * 8);
}

// Gemma 4 as Hugging Face configs give it, read as the model loader reads them. tiny-gemma4's (the full layers' head
// size and KV heads in per_layer_config, as transformers 5 saves it) gives its GGUF file's figures. A
// Gemma-4-E2B-shaped image-text config (text_config over Gemma4TextConfig's defaults: full layers' heads
// global_head_dim 512 wide, the sliding ones' head_dim 256, window 512) caches 3 full and 12 sliding layers of its own.
TEST(KVCalc, Gemma4HfConfigsCountOnlyLayersWithTheirOwnKV) {
  const auto dir = std::filesystem::temp_directory_path() / ("kvserve_kv_calc_gemma4_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  const auto path = dir / "config.json";
  std::ofstream(path) << R"({"architectures": ["Gemma4ForCausalLM"], "model_type": "gemma4_text",
      "hidden_size": 64, "num_hidden_layers": 6, "num_attention_heads": 4, "num_key_value_heads": 4, "head_dim": 16,
      "intermediate_size": 96, "max_position_embeddings": 512, "vocab_size": 512, "sliding_window": 8,
      "layer_types": ["sliding_attention", "full_attention", "sliding_attention", "full_attention",
                      "sliding_attention", "full_attention"],
      "per_layer_config": {"1": {"head_dim": 32, "num_key_value_heads": 1}, "3": {"head_dim": 32,
                           "num_key_value_heads": 1}, "5": {"head_dim": 32, "num_key_value_heads": 1}},
      "num_kv_shared_layers": 2, "hidden_size_per_layer_input": 8, "vocab_size_per_layer_input": 512})";
  test::CommandResult hf = run_cli("kv-calc --config " + path.string() + " --seq-len 100 --json");
  test::CommandResult gguf = run_cli("kv-calc -m " + std::string(KVSERVE_SOURCE_DIR) +
                                     "/tests/golden/arch/tiny-gemma4.gguf --seq-len 100 --json");
  ASSERT_EQ(hf.exit_code, 0) << hf.out;
  ASSERT_EQ(gguf.exit_code, 0) << gguf.out;
  nlohmann::json a = nlohmann::json::parse(hf.out), b = nlohmann::json::parse(gguf.out);
  a.erase("model");
  b.erase("model");
  EXPECT_EQ(a, b);
  EXPECT_EQ(a["bytes_per_token"].get<uint64_t>(), 2u * (2 * 32 * 2) + 2u * (2 * 4 * 16 * 2));

  std::string types;
  for (int l = 0; l < 35; ++l)
    types += std::string(l ? ", " : "") + ((l + 1) % 5 ? "\"sliding_attention\"" : "\"full_attention\"");
  std::ofstream(path) << R"({"architectures": ["Gemma4ForConditionalGeneration"], "model_type": "gemma4",
      "text_config": {"model_type": "gemma4_text", "hidden_size": 1536, "num_hidden_layers": 35,
      "num_attention_heads": 8, "num_key_value_heads": 1, "intermediate_size": 6144, "num_kv_shared_layers": 20,
      "use_double_wide_mlp": true, "layer_types": [)" +
                             types + R"(]}})";
  hf = run_cli("kv-calc --config " + path.string() + " --seq-len 32768 --json");
  ASSERT_EQ(hf.exit_code, 0) << hf.out;
  a = nlohmann::json::parse(hf.out);
  EXPECT_EQ(a["head_dim"], 512);
  EXPECT_EQ(a["head_dim_swa"], 256);
  EXPECT_EQ(a["kv_shared_layers"], 20);
  EXPECT_EQ(a["bytes_per_token"].get<uint64_t>(), 3u * 2048 + 12u * 1024);
  EXPECT_EQ(a["windowed_bytes_per_request"].get<uint64_t>(), 3ull * 2048 * 32768 + 12ull * 1024 * 512);

  // A config the loader refuses is refused here too, naming the problem.
  std::ofstream(path) << R"({"model_type": "gemma4_text", "num_hidden_layers": 6, "num_attention_heads": 4,
      "num_kv_shared_layers": 6})";
  hf = test::run_command(std::string(KVSERVE_BINARY) + " kv-calc --config " + path.string() + " --seq-len 100", true);
  EXPECT_NE(hf.exit_code, 0);
  EXPECT_NE(hf.err.find("num_kv_shared_layers 6"), std::string::npos) << hf.err;
  std::filesystem::remove_all(dir);
}
