// The sampling a model file recommends: GGUF general.sampling.* (as llama.cpp's converter writes and its tools
// apply them) and a Hugging Face folder's generation_config.json (as vLLM reads it), and `kvserve generate`
// taking them for the flags it is not given.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "core/error.h"
#include "engine/sampling_params.h"
#include "hf_test_folder.h"
#include "model/gguf.h"
#include "model/gguf_writer.h"
#include "model/loaders.h"
#include "model/sampling_defaults.h"
#include "run_command.h"

namespace kvserve {
namespace {

const std::string kTinyGqa = std::string(KVSERVE_SHARED_DIR) + "/golden/gguf/models/tiny-gqa.gguf";

std::filesystem::path temp_path(const std::string& name) {
  return std::filesystem::path(testing::TempDir()) / ("kvserve_sampling_" + std::to_string(::getpid()) + "_" + name);
}

// tiny-gqa with extra metadata (added by `add`).
template <typename F>
std::vector<uint8_t> tiny_gqa_with(F&& add) {
  const GGUFFile src(kTinyGqa);
  GGUFWriter w;
  for (const auto& [key, value] : src.metadata())
    if (key != "general.alignment") w.add_value(key, value);
  add(w);
  for (const GGUFTensorInfo& t : src.tensors())
    w.add_tensor(t.name, t.type, std::vector<int64_t>(t.ne.begin(), t.ne.begin() + t.n_dims),
                 std::vector<uint8_t>(t.data, t.data + t.bytes));
  return w.to_bytes();
}

SamplingDefaults from_bytes(const std::vector<uint8_t>& bytes) {
  return load_gguf_model(std::make_shared<const GGUFFile>(bytes.data(), bytes.size(), "sampling.gguf"), {})
      ->sampling_defaults;
}

TEST(SamplingDefaults, GgufGeneralSamplingKeys) {
  EXPECT_TRUE(load_model(kTinyGqa)->sampling_defaults.empty());
  const SamplingDefaults d = from_bytes(tiny_gqa_with([](GGUFWriter& w) {
    w.add_f32("general.sampling.temp", 0.6f);
    w.add_f32("general.sampling.top_p", 0.95f);
    w.add_i32("general.sampling.top_k", 20);
    w.add_f32("general.sampling.min_p", 0.0f);
    w.add_f32("general.sampling.penalty_repeat", 1.05f);
  }));
  EXPECT_EQ(d.temperature, 0.6f);
  EXPECT_EQ(d.top_p, 0.95f);
  EXPECT_EQ(d.top_k, 20);
  EXPECT_EQ(d.min_p, 0.0f);
  EXPECT_EQ(d.repetition_penalty, 1.05f);
  EXPECT_EQ(d.describe(), "temperature 0.6, top_p 0.95, top_k 20, min_p 0, repetition_penalty 1.05");
  // Out of range: named, with the file.
  for (const auto& [key, value] : {std::pair<const char*, float>{"general.sampling.top_p", 1.5f},
                                   {"general.sampling.temp", -1.0f},
                                   {"general.sampling.penalty_repeat", 0.0f}}) {
    SCOPED_TRACE(key);
    try {
      from_bytes(tiny_gqa_with([&](GGUFWriter& w) { w.add_f32(key, value); }));
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("sampling.gguf"), std::string::npos) << e.what();
    }
  }
}

// vLLM's reading: the keys whose values differ from GenerationConfig's defaults (top_k 50 and temperature 1 say
// nothing); do_sample is not consulted.
TEST(SamplingDefaults, GenerationConfigAsVllmReadsIt) {
  const auto path = temp_path("generation_config.json");
  const auto with = [&](const nlohmann::json& j) {
    std::ofstream(path) << j.dump();
    return sampling_defaults_from_generation_config(path.string());
  };
  EXPECT_TRUE(sampling_defaults_from_generation_config((temp_path("none") / "x.json").string()).empty());
  SamplingDefaults d = with({{"do_sample", true},
                             {"temperature", 0.7},
                             {"top_p", 0.8},
                             {"top_k", 20},
                             {"repetition_penalty", 1.05},
                             {"bos_token_id", 1},
                             {"eos_token_id", {2, 7}}});
  EXPECT_EQ(d.temperature, 0.7f);
  EXPECT_EQ(d.top_p, 0.8f);
  EXPECT_EQ(d.top_k, 20);
  EXPECT_EQ(d.repetition_penalty, 1.05f);
  EXPECT_FALSE(d.min_p);
  EXPECT_FALSE(d.max_tokens);
  d = with({{"max_new_tokens", 2048}, {"max_length", 4096}});  // vLLM reads max_new_tokens alone
  EXPECT_EQ(d.max_tokens, 2048);
  EXPECT_FALSE(d.empty());
  EXPECT_EQ(d.describe(), "max_tokens 2048");
  d = with({{"do_sample", false}, {"temperature", 1.0}, {"top_k", 50}, {"top_p", 1.0}, {"repetition_penalty", 1.0}});
  EXPECT_TRUE(d.empty()) << d.describe();
  d = with({{"temperature", 0.0}, {"min_p", 0.1}, {"top_k", 0}});
  EXPECT_EQ(d.temperature, 0.0f);
  EXPECT_EQ(d.min_p, 0.1f);
  EXPECT_EQ(d.top_k, 0);
  for (const nlohmann::json& bad :
       {nlohmann::json{{"temperature", "hot"}}, nlohmann::json{{"top_p", 0}}, nlohmann::json{{"top_k", 2.5}},
        nlohmann::json{{"max_new_tokens", 0}}, nlohmann::json{{"max_new_tokens", 1.5}},
        nlohmann::json{{"max_new_tokens", 3000000000}}, nlohmann::json::array()}) {
    SCOPED_TRACE(bad.dump());
    EXPECT_THROW(with(bad), Error);
  }
  std::ofstream(path) << "{not json";
  EXPECT_THROW(sampling_defaults_from_generation_config(path.string()), Error);
}

TEST(SamplingDefaults, ApplyKeepsWhatWasGiven) {
  SamplingDefaults d;
  d.temperature = 0.6f;
  d.top_k = 20;
  SamplingParams p;
  p.temperature = 0.8f;
  p.top_k = 40;
  p.top_p = 0.9f;
  SamplingGiven given;
  given.temperature = true;
  apply_sampling_defaults(d, given, p);
  EXPECT_EQ(p.temperature, 0.8f);
  EXPECT_EQ(p.top_k, 20);
  EXPECT_EQ(p.top_p, 0.9f);  // no default for it
}

// `kvserve generate` without --temperature on a file that recommends 0: greedy, the ids of --temperature 0;
// --sampling-defaults none samples at its own 0.8 instead (other ids for this seed).
TEST(SamplingDefaults, GenerateTakesTheModelsRecommendation) {
  if (!std::filesystem::exists(KVSERVE_BINARY)) GTEST_SKIP() << "no kvserve binary at " KVSERVE_BINARY;
  const auto path = temp_path("greedy.gguf");
  {
    const std::vector<uint8_t> bytes = tiny_gqa_with([](GGUFWriter& w) { w.add_f32("general.sampling.temp", 0.0f); });
    std::ofstream(path, std::ios::binary)
        .write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  }
  const auto ids = [&](const std::string& flags) {
    const test::CommandResult r =
        test::run_command(std::string(KVSERVE_BINARY) + " generate -m " + path.string() +
                              " -t 1 -p 'Once upon a time' --ignore-eos -n 16 --seed 3 --json " + flags,
                          true);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return nlohmann::json::parse(r.out)["generated_ids"].get<std::vector<int32_t>>();
  };
  const std::vector<int32_t> greedy = ids("--temperature 0");
  EXPECT_EQ(ids(""), greedy);
  EXPECT_NE(ids("--sampling-defaults none"), greedy);
  EXPECT_NE(ids("--temperature 0.8"), greedy);
  std::filesystem::remove(path);
}

// generation_config.json's max_new_tokens is how many tokens `kvserve generate` makes without -n (as far as the
// context reaches); -n still wins, and --sampling-defaults none keeps 128.
TEST(SamplingDefaults, GenerateTakesTheModelsMaxNewTokens) {
  if (!std::filesystem::exists(KVSERVE_BINARY)) GTEST_SKIP() << "no kvserve binary at " KVSERVE_BINARY;
  const auto dir = temp_path("hf_max_new_tokens");
  std::filesystem::create_directories(dir);
  test::make_hf_folder_from_gguf(kTinyGqa, dir.string(), DType::F32);
  const auto run = [&](const std::string& flags) {
    const test::CommandResult r = test::run_command(std::string(KVSERVE_BINARY) + " generate -m " + dir.string() +
                                                        " -t 1 -p 'Once upon a time' --ignore-eos --json " + flags,
                                                    true);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return r.exit_code == 0 ? nlohmann::json::parse(r.out) : nlohmann::json::object();
  };
  const auto generated = [&](const std::string& flags) { return run(flags)["generated_ids"].size(); };
  std::ofstream(dir / "generation_config.json") << R"({"max_new_tokens": 5})";
  EXPECT_EQ(generated(""), 5u);
  EXPECT_EQ(generated("-n 7"), 7u);
  EXPECT_EQ(generated("--sampling-defaults none"), 128u);
  std::ofstream(dir / "generation_config.json") << R"({"max_new_tokens": 100000})";
  const nlohmann::json to_the_end = run("-c 40");
  EXPECT_EQ(to_the_end["prompt_ids"].size() + to_the_end["generated_ids"].size(), 40u);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace kvserve
