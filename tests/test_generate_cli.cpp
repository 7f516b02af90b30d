// `kvserve generate` end to end: the built binary on stories260K with an explicit paged KV cache gives
// llama2.c's greedy ids, logs its block count, and fails cleanly when the budget is too small.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <string>
#include <tuple>
#include <vector>

#include "core/available_cpus.h"
#include "model/gguf.h"
#include "model/gguf_writer.h"
#include "run_command.h"

using nlohmann::json;

namespace {

const std::string kShared = KVSERVE_SHARED_DIR;

using kvserve::test::CommandResult;

// Runs `kvserve generate` on stories260K with the given extra arguments.
CommandResult generate(const std::string& args) {
  return kvserve::test::run_command(std::string(KVSERVE_BINARY) + " generate -m " + kShared +
                                        "/models/stories260K/stories260K.bin --tokenizer " + kShared +
                                        "/models/stories260K/tok512.bin -t 1 " + args,
                                    /*capture_stderr=*/true);
}

json golden(const std::string& prompt) {
  std::ifstream f(kShared + "/golden/stories260K/greedy.jsonl");
  std::string line;
  while (std::getline(f, line)) {
    json g = json::parse(line);
    if (g["prompt"] == prompt) return g;
  }
  ADD_FAILURE() << "no golden for '" << prompt << "'";
  return json::object();
}

}  // namespace

TEST(GeneratorCli, JsonGreedyIdsMatchGoldenOnPagedCache) {
  if (!std::filesystem::exists(KVSERVE_BINARY)) GTEST_SKIP() << "no kvserve binary at " KVSERVE_BINARY;
  const json g = golden("Once upon a time");
  const auto want = g["generated_ids"].get<std::vector<int32_t>>();
  ASSERT_GE(want.size(), 100u);
  const CommandResult r =
      generate("-p 'Once upon a time' --temperature 0 --ignore-eos -n 100 --json --kv-cache-memory 1M --block-size 8");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json j = json::parse(r.out);
  EXPECT_EQ(j["prompt_ids"].get<std::vector<int32_t>>(), g["prompt_ids"].get<std::vector<int32_t>>());
  EXPECT_EQ(j["generated_ids"].get<std::vector<int32_t>>(), std::vector<int32_t>(want.begin(), want.begin() + 100));
  EXPECT_EQ(j["cached_tokens"], 0);
  EXPECT_EQ(j["kv_cache"]["block_size"], 8);
  EXPECT_EQ(j["kv_cache"]["budget_bytes"], 1024 * 1024);
  // stories260K: 5 layers x 4 KV heads x 8 dims x K,V x 4 bytes = 1280 bytes a token, 10240 a block of 8;
  // 1 MiB buys 102 blocks, capped at what the request reaches: its prompt and 100 tokens.
  const size_t reach_blocks = (j["prompt_ids"].size() + 100 + 7) / 8;
  EXPECT_EQ(j["kv_cache"]["num_blocks"], reach_blocks);
  EXPECT_NE(r.err.find(fmt::format("kv cache: {} blocks of 8 tokens = {} tokens", reach_blocks, reach_blocks * 8)),
            std::string::npos)
      << r.err;
}

// The completion text, not only the ids, is run.c's for every golden prompt: the first generated piece keeps
// its leading space after a prompt (" were playing" after "Lily and Ben") and loses it only right after a
// lone BOS (the empty prompt).
TEST(GeneratorCli, JsonTextIsRunCsGeneratedText) {
  if (!std::filesystem::exists(KVSERVE_BINARY)) GTEST_SKIP() << "no kvserve binary at " KVSERVE_BINARY;
  std::ifstream f(kShared + "/golden/stories260K/greedy.jsonl");
  ASSERT_TRUE(f) << "no golden file";
  int checked = 0;
  for (std::string line; std::getline(f, line);) {
    const json g = json::parse(line);
    const auto prompt = g["prompt"].get<std::string>();
    ASSERT_EQ(prompt.find('\''), std::string::npos);
    const CommandResult r =
        generate(fmt::format("-p '{}' --temperature 0 -n {} --json", prompt, g["generated_ids"].size()));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const json j = json::parse(r.out);
    EXPECT_EQ(j["generated_ids"], g["generated_ids"]) << "prompt '" << prompt << "'";
    EXPECT_EQ(j["text"], g["generated_text"]) << "prompt '" << prompt << "'";
    ++checked;
  }
  EXPECT_GE(checked, 8);
}

// The pool holds what the request reaches; a request past the context is refused by name.
TEST(GeneratorCli, PoolHoldsWhatTheRequestReaches) {
  if (!std::filesystem::exists(KVSERVE_BINARY)) GTEST_SKIP() << "no kvserve binary at " KVSERVE_BINARY;
  const CommandResult past = generate("-p 'Once upon a time' --temperature 0 -n 600 --json --block-size 8");
  EXPECT_NE(past.exit_code, 0);
  EXPECT_NE(past.err.find("exceeds the context of 512 tokens"), std::string::npos) << past.err;
  const CommandResult whole = generate("-p 'Once upon a time' --temperature 0 -n 400 --json --block-size 8");
  ASSERT_EQ(whole.exit_code, 0) << whole.err;
  const json j = json::parse(whole.out);
  EXPECT_EQ(j["kv_cache"]["num_blocks"], (j["prompt_ids"].size() + 400 + 7) / 8);
}

// --speculative-tokens: greedy ids still llama2.c's, with n-gram drafts proposed and counted in the JSON; a
// shortest n-gram longer than the longest is named.
TEST(GeneratorCli, SpeculativeTokensKeepGreedyIds) {
  if (!std::filesystem::exists(KVSERVE_BINARY)) GTEST_SKIP() << "no kvserve binary at " KVSERVE_BINARY;
  const json g = golden("Once upon a time");
  const auto want = g["generated_ids"].get<std::vector<int32_t>>();
  const CommandResult r = generate("-p 'Once upon a time' --temperature 0 --ignore-eos -n 100 --json --speculative-tokens 4");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json j = json::parse(r.out);
  EXPECT_EQ(j["generated_ids"].get<std::vector<int32_t>>(), std::vector<int32_t>(want.begin(), want.begin() + 100));
  EXPECT_GT(j["speculative"]["draft_tokens"].get<int>(), 0);
  EXPECT_LE(j["speculative"]["accepted_draft_tokens"].get<int>(), j["speculative"]["draft_tokens"].get<int>());
  const CommandResult bad = generate("-p hi --speculative-tokens 4 --ngram-min 3 --ngram-max 2");
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.err.find("--ngram-min 3 is more than --ngram-max 2"), std::string::npos) << bad.err;
}

// --draft-model (stories260K's Q4_0 GGUF drafting for the llama2.c checkpoint): llama2.c's greedy ids, drafts
// proposed by the model and most of them taken; a draft model of another vocabulary is an error naming both
// sizes.
TEST(GeneratorCli, DraftModelKeepsGreedyIds) {
  if (!std::filesystem::exists(KVSERVE_BINARY)) GTEST_SKIP() << "no kvserve binary at " KVSERVE_BINARY;
  const json g = golden("Once upon a time");
  const auto want = g["generated_ids"].get<std::vector<int32_t>>();
  const std::string models = kShared + "/golden/gguf/models/";
  const CommandResult r = generate("-p 'Once upon a time' --temperature 0 --ignore-eos -n 100 --json --draft-model " +
                                   models + "stories260K-Q4_0.gguf");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json j = json::parse(r.out);
  EXPECT_EQ(j["generated_ids"].get<std::vector<int32_t>>(), std::vector<int32_t>(want.begin(), want.begin() + 100));
  EXPECT_EQ(j["speculative"]["proposer"], "draft_model");
  EXPECT_GT(j["speculative"]["accepted_draft_tokens"].get<int>() * 2, j["speculative"]["draft_tokens"].get<int>());
  const CommandResult bad = generate("-p hi --draft-model " + models + "llama-2-tiny-random.gguf");
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.err.find("32000 tokens and the target's 512"), std::string::npos) << bad.err;
}

// More threads than the process has CPUs: a warning naming both counts, and the same greedy ids (the
// pool's waits sleep instead of spinning, so this also runs in reasonable time).
TEST(GeneratorCli, MoreThreadsThanCpusWarnsAndGivesTheSameIds) {
  if (!std::filesystem::exists(KVSERVE_BINARY)) GTEST_SKIP() << "no kvserve binary at " KVSERVE_BINARY;
  const json g = golden("Once upon a time");
  const auto want = g["generated_ids"].get<std::vector<int32_t>>();
  ASSERT_GE(want.size(), 40u);
  const int cpus = kvserve::available_cpus();
  const CommandResult r = kvserve::test::run_command(
      std::string(KVSERVE_BINARY) + " generate -m " + kShared + "/models/stories260K/stories260K.bin --tokenizer " +
          kShared + "/models/stories260K/tok512.bin -t " + std::to_string(cpus + 2) +
          " -p 'Once upon a time' --temperature 0 --ignore-eos -n 40 --json",
      /*capture_stderr=*/true);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("warning: " + std::to_string(cpus + 2) + " threads on the " + std::to_string(cpus) + " CPU"),
            std::string::npos)
      << r.err;
  const json j = json::parse(r.out);
  EXPECT_EQ(j["generated_ids"].get<std::vector<int32_t>>(), std::vector<int32_t>(want.begin(), want.begin() + 40));
  EXPECT_EQ(generate("-p 'Once upon a time' -n 1").err.find("warning:"), std::string::npos);  // -t 1: none
}

TEST(GeneratorCli, BudgetHoldingNoBlockExitsWithAMessage) {
  if (!std::filesystem::exists(KVSERVE_BINARY)) GTEST_SKIP() << "no kvserve binary at " KVSERVE_BINARY;
  const CommandResult r = generate("-p 'Once upon a time' -n 16 --json --kv-cache-memory 4K --block-size 8");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_TRUE(r.out.empty()) << r.out;
  EXPECT_NE(r.err.find("error: "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("4096 bytes"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("holds no block"), std::string::npos) << r.err;
}

TEST(GeneratorCli, BudgetTooSmallForTheRequestExitsWithAMessage) {
  if (!std::filesystem::exists(KVSERVE_BINARY)) GTEST_SKIP() << "no kvserve binary at " KVSERVE_BINARY;
  // 20480 bytes = 2 blocks of 8 = 16 tokens: the prompt (5) + 64 new tokens cannot fit.
  const CommandResult r = generate("-p 'Once upon a time' -n 64 --json --kv-cache-memory 20480 --block-size 8");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("does not fit in the KV cache"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("20480 bytes"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("kv cache: 2 blocks of 8 tokens"), std::string::npos) << r.err;
}

TEST(GeneratorCli, BadFlagsAndContextOverflowExitWithAMessage) {
  if (!std::filesystem::exists(KVSERVE_BINARY)) GTEST_SKIP() << "no kvserve binary at " KVSERVE_BINARY;
  const CommandResult bad = generate("-p hi --kv-cache-memory lots");
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.err.find("--kv-cache-memory"), std::string::npos) << bad.err;
  const CommandResult ctx = generate("-p 'Once upon a time' -n 100 -c 32 --kv-cache-memory 1M");
  EXPECT_NE(ctx.exit_code, 0);
  EXPECT_NE(ctx.err.find("exceeds the context of 32 tokens"), std::string::npos) << ctx.err;
  const CommandResult block = generate("-p hi --block-size 0");
  EXPECT_NE(block.exit_code, 0);
  // int8 needs head rows of whole 32-value blocks: stories260K's head size 8 is named, not misread.
  const CommandResult int8 = generate("-p hi --kv-cache-dtype int8");
  EXPECT_NE(int8.exit_code, 0);
  EXPECT_NE(int8.err.find("head size is 8"), std::string::npos) << int8.err;
  const CommandResult layers = generate("-p hi --kv-layer-dtypes 0=f16,7=int8");
  EXPECT_NE(layers.exit_code, 0);
  EXPECT_NE(layers.err.find("outside the model's 5 layers"), std::string::npos) << layers.err;
  const CommandResult spelling = generate("-p hi --kv-layer-dtypes first=f16");
  EXPECT_NE(spelling.exit_code, 0);
  EXPECT_NE(spelling.err.find("--kv-layer-dtypes"), std::string::npos) << spelling.err;
  const CommandResult int4 = generate("-p hi --kv-cache-dtype int4");
  EXPECT_NE(int4.exit_code, 0);
  EXPECT_NE(int4.err.find("int4 KV cache"), std::string::npos) << int4.err;
  const CommandResult unknown = generate("-p hi --kv-cache-dtype fp6");
  EXPECT_NE(unknown.exit_code, 0);
  EXPECT_NE(unknown.err.find("unknown KV cache dtype 'fp6'"), std::string::npos) << unknown.err;
  const CommandResult min_tokens = generate("-p hi -n 4 --min-tokens 5");
  EXPECT_NE(min_tokens.exit_code, 0);
  EXPECT_NE(min_tokens.err.find("min_tokens must be in [0, max_tokens = 4]"), std::string::npos) << min_tokens.err;
  const CommandResult stop_id = generate("-p hi --stop-token-id 512");
  EXPECT_NE(stop_id.exit_code, 0);
  EXPECT_NE(stop_id.err.find("stop token id 512 is outside the vocabulary"), std::string::npos) << stop_id.err;
}

// A GGUF tensor the loader does not read is named in a warning, and generation goes on.
TEST(GeneratorCli, UnreadTensorsAreNamedInAWarning) {
  if (!std::filesystem::exists(KVSERVE_BINARY)) GTEST_SKIP() << "no kvserve binary at " KVSERVE_BINARY;
  const kvserve::GGUFFile src(kShared + "/golden/gguf/models/tiny-gqa.gguf");
  kvserve::GGUFWriter w;
  for (const auto& [key, value] : src.metadata())
    if (key != "general.alignment") w.add_value(key, value);
  for (const kvserve::GGUFTensorInfo& t : src.tensors())
    w.add_tensor(t.name, t.type, std::vector<int64_t>(t.ne.begin(), t.ne.begin() + t.n_dims),
                 std::vector<uint8_t>(t.data, t.data + t.bytes));
  for (const char* name : {"blk.0.attn_rot_embd", "blk.1.attn_rot_embd", "blk.2.attn_rot_embd", "blk.3.attn_rot_embd",
                           "blk.4.attn_rot_embd"})
    w.add_tensor(name, kvserve::DType::F32, {32}, std::vector<uint8_t>(128));
  const std::string path =
      (std::filesystem::path(testing::TempDir()) / ("kvserve_unread_" + std::to_string(::getpid()) + ".gguf")).string();
  w.write(path);
  const CommandResult r = kvserve::test::run_command(
      std::string(KVSERVE_BINARY) + " generate -m " + path + " -t 1 -p hi -n 2 --json", /*capture_stderr=*/true);
  std::filesystem::remove(path);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find(": 5 tensors the llama model does not read (blk.0.attn_rot_embd, blk.1.attn_rot_embd, "
                       "blk.2.attn_rot_embd, blk.3.attn_rot_embd and 1 more)"),
            std::string::npos)
      << r.err;
}

// --kv-cache-dtype int8 on a model with 64-wide heads, its last layer at f16: the greedy tokens of llama.cpp's
// golden (made with an f32 cache) for as long as its margins are wide, and the start-up line names the dtypes.
// fp8 keeps the first 4 (6 measured). This random-weight model's first step is a near tie (28 at 3.765,
// 331 at 3.613, 497 at 3.576 in llama.cpp's logits), which int4 and fp8_e5m2 tip: their first token
// must be one of those three.
TEST(GeneratorCli, QuantizedKVCachesGenerate) {
  if (!std::filesystem::exists(KVSERVE_BINARY)) GTEST_SKIP() << "no kvserve binary at " KVSERVE_BINARY;
  std::ifstream f(kShared + "/golden/gguf/golden/tiny-gqa.jsonl");
  std::string line;
  ASSERT_TRUE(std::getline(f, line));
  const json g = json::parse(line);
  const std::string prompt = g["prompt"];
  const auto want = g["generated_ids"].get<std::vector<int32_t>>();
  const std::vector<int32_t> first_top3 = {28, 331, 497};
  ASSERT_EQ(want.front(), first_top3.front());
  for (auto [flags, n, names] : {std::tuple<std::string, size_t, std::string>{"int8 --kv-layer-dtypes=-1=f16", 8, "int8,f16"},
                                 {"int4", 0, "int4"},
                                 {"fp8", 4, "fp8_e4m3"},
                                 {"fp8_e5m2", 0, "fp8_e5m2"}}) {
    const CommandResult r = kvserve::test::run_command(
        std::string(KVSERVE_BINARY) + " generate -m " + kShared + "/golden/gguf/models/tiny-gqa.gguf -t 1 -p '" +
            prompt + "' --temperature 0 --ignore-eos -n 8 --json --kv-cache-dtype " + flags,
        true);
    ASSERT_EQ(r.exit_code, 0) << flags << "\n" << r.err;
    const auto got = json::parse(r.out)["generated_ids"].get<std::vector<int32_t>>();
    ASSERT_EQ(got.size(), 8u) << flags;
    EXPECT_NE(std::find(first_top3.begin(), first_top3.end(), got.front()), first_top3.end()) << flags;
    EXPECT_EQ(std::vector<int32_t>(got.begin(), got.begin() + static_cast<std::ptrdiff_t>(n)),
              std::vector<int32_t>(want.begin(), want.begin() + static_cast<std::ptrdiff_t>(n)))
        << flags;
    EXPECT_NE(r.err.find(names), std::string::npos) << r.err;  // the start-up line names each layer's dtype
  }
}

// --rope-factors on a LongRoPE model (original context 256): auto takes the short factors for a short
// sequence (the ids of `short`) and restarts once with the long ones when a sequence grows past 256 tokens
// (the ids of `long` for a prompt already past it); an unknown choice is named.
TEST(GeneratorCli, RopeFactorsFlag) {
  if (!std::filesystem::exists(KVSERVE_BINARY)) GTEST_SKIP() << "no kvserve binary at " KVSERVE_BINARY;
  const std::string phi = std::string(KVSERVE_BINARY) + " generate -m " + KVSERVE_SOURCE_DIR +
                          "/tests/golden/arch/tiny-phi3-longrope.gguf -t 1 --temperature 0 --ignore-eos --json ";
  const auto ids = [&](const std::string& args) {
    const CommandResult r = kvserve::test::run_command(phi + args, true);
    EXPECT_EQ(r.exit_code, 0) << args << "\n" << r.err;
    if (r.exit_code != 0) return std::pair{std::vector<int32_t>{}, -1};
    const json j = json::parse(r.out);
    return std::pair{j["generated_ids"].get<std::vector<int32_t>>(), j["rope_restarts"].get<int>()};
  };
  const auto a = ids("-p 'Once upon a time' -n 12");
  EXPECT_EQ(a.second, 0);
  EXPECT_EQ(a.first, ids("-p 'Once upon a time' -n 12 --rope-factors short").first);
  // Past 256 tokens before the first one is generated: the long factors from the start.
  std::string words;
  for (int i = 0; i < 150; ++i) words += "time upon ";
  const auto b = ids("-p '" + words + "' -n 4");
  EXPECT_EQ(b.second, 0);
  EXPECT_EQ(b.first, ids("-p '" + words + "' -n 4 --rope-factors long").first);
  EXPECT_NE(b.first, ids("-p '" + words + "' -n 4 --rope-factors short").first);
  const auto c = ids("-p 'Once upon a time' -n 260 -c 512");
  EXPECT_EQ(c.second, 1);
  const CommandResult bad = kvserve::test::run_command(phi + "-p hi --rope-factors longest", true);
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.err.find("--rope-factors"), std::string::npos) << bad.err;
}

// --chat-template replaces the model's template by a family's name; an unknown name lists the known ones.
TEST(GeneratorCli, ChatTemplateByName) {
  if (!std::filesystem::exists(KVSERVE_BINARY)) GTEST_SKIP() << "no kvserve binary at " KVSERVE_BINARY;
  const CommandResult r = generate("--chat --chat-template llama3 --system 'Be brief.' -p hi -n 1 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(json::parse(r.out)["prompt"],
            "<|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n");
  const CommandResult bad = generate("--chat --chat-template llama9 -p hi -n 1");
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.err.find("unknown chat template 'llama9'"), std::string::npos) << bad.err;
  EXPECT_NE(bad.err.find("mistral-v7"), std::string::npos) << bad.err;
}

// --chat-template FILE: a Jinja template of the user's, rendered as jinja2 renders it; one that does not
// parse is refused at start, naming the file and the line.
TEST(GeneratorCli, ChatTemplateFromAJinjaFile) {
  if (!std::filesystem::exists(KVSERVE_BINARY)) GTEST_SKIP() << "no kvserve binary at " KVSERVE_BINARY;
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / "kvserve_chat_template_file";
  std::filesystem::create_directories(dir);
  const std::string good = (dir / "turns.jinja").string(), bad = (dir / "broken.jinja").string();
  std::ofstream(good) << "{%- for m in messages %}[{{ m.role | upper }}] {{ m.content | trim }}\n{% endfor -%}\n"
                         "{%- if add_generation_prompt %}[ASSISTANT]{% endif %}\n";
  std::ofstream(bad) << "{% for m in messages %}\n{{ m.content }\n";
  const CommandResult r = generate("--chat --chat-template " + good + " --system ' Be brief. ' -p hi -n 1 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(json::parse(r.out)["prompt"], "[SYSTEM] Be brief.\n[USER] hi\n[ASSISTANT]");
  const CommandResult refused = generate("--chat --chat-template " + bad + " -p hi -n 1");
  EXPECT_NE(refused.exit_code, 0);
  EXPECT_NE(refused.err.find("broken.jinja"), std::string::npos) << refused.err;
  EXPECT_NE(refused.err.find("line 2"), std::string::npos) << refused.err;
  std::filesystem::remove_all(dir);
}

// `kvserve tokenize` needs only a GGUF's vocabulary: vocab-only files and architectures the engine does
// not run (BERT) tokenize too; llama2.c checkpoints still go through their tokenizer.bin.
// --grammar / --grammar-file / --json-schema, as llama-cli takes them: sampled replies of a real model follow the
// grammar (checked by std::regex) or the schema (checked by a JSON parser); bad ones exit with a message naming
// the flag.
TEST(GeneratorCli, GrammarAndJsonSchemaConstrainTheReply) {
  if (!std::filesystem::exists(KVSERVE_BINARY)) GTEST_SKIP() << "no kvserve binary at " KVSERVE_BINARY;
  const std::string gbnf = R"(root ::= " " ("Lily" | "Tom") " " word (" " word){2,5} "."
word ::= [a-z]+)";
  const std::string file = ::testing::TempDir() + "/kvserve_generate.gbnf";
  std::ofstream(file) << gbnf;
  const std::regex want(R"( (Lily|Tom) [a-z]+( [a-z]+){2,5}\.)");
  for (int seed = 0; seed < 3; ++seed) {
    const CommandResult r =
        generate(fmt::format("-p 'Once upon a time' --json --seed {} -n 60 --grammar-file {}", seed, file));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const json j = json::parse(r.out);
    EXPECT_TRUE(std::regex_match(j["text"].get<std::string>(), want)) << j["text"];
    EXPECT_EQ(j["finish_reason"], "stop");
    EXPECT_TRUE(j["stop_reason"].is_null()) << j["stop_reason"];  // the grammar's end
  }
  const std::string schema =
      R"({"type": "object", "properties": {"name": {"type": "string", "maxLength": 12}, "age": {"type": "integer", "minimum": 1, "maximum": 9}}, "required": ["name", "age"]})";
  const CommandResult r = generate("-p 'Once upon a time' --json --seed 4 -n 120 -j '" + schema + "'");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json reply = json::parse(json::parse(r.out)["text"].get<std::string>());
  ASSERT_TRUE(reply.is_object());
  EXPECT_TRUE(reply["name"].is_string() && reply["name"].get<std::string>().size() <= 12) << reply;
  EXPECT_TRUE(reply["age"].is_number_integer() && reply["age"] >= 1 && reply["age"] <= 9) << reply;
  EXPECT_EQ(reply.size(), 2u);

  const std::vector<std::pair<std::string, std::string>> refused = {
      {"--grammar 'root ::= a'", "--grammar: the grammar uses the rule 'a'"},
      {"--grammar-file /nonexistent.gbnf", "--grammar-file: cannot open"},
      {"--json-schema '{\"type\": '", "--json-schema: the schema is not valid JSON"},
      {"--json-schema '{\"not\": {}}'", "--json-schema:"},
      {"--grammar 'root ::= \"a\"' -j '{}'", "give one of --grammar"},
  };
  for (const auto& [flags, message] : refused) {
    const CommandResult bad = generate("-p x " + flags);
    EXPECT_NE(bad.exit_code, 0) << flags;
    EXPECT_NE(bad.err.find(message), std::string::npos) << flags << ": " << bad.err;
  }
}

// What ended the text, as vLLM's stop_reason in --json (the stop string, the stop token id, or null) and as a
// line on stderr otherwise.
TEST(GeneratorCli, StopReasonNamesTheStopStringOrToken) {
  if (!std::filesystem::exists(KVSERVE_BINARY)) GTEST_SKIP() << "no kvserve binary at " KVSERVE_BINARY;
  const std::string flags = "-p 'Once upon a time' --temp 0 -n 40 --ignore-eos ";
  const CommandResult free_run = generate(flags + "--json");
  ASSERT_EQ(free_run.exit_code, 0) << free_run.err;
  const json f = json::parse(free_run.out);
  EXPECT_EQ(f["finish_reason"], "length");
  EXPECT_TRUE(f["stop_reason"].is_null());
  const std::string text = f["text"];
  const std::vector<int32_t> ids = f["generated_ids"];
  ASSERT_GT(text.size(), 20u);
  ASSERT_EQ(ids.size(), 40u);

  const std::string stop = text.substr(12, 4);
  ASSERT_EQ(stop.find('\''), std::string::npos);
  const CommandResult by_string = generate(flags + "--json --stop '" + stop + "'");
  ASSERT_EQ(by_string.exit_code, 0) << by_string.err;
  const json s = json::parse(by_string.out);
  EXPECT_EQ(s["finish_reason"], "stop");
  EXPECT_EQ(s["stop_reason"], stop);
  EXPECT_EQ(s["text"], text.substr(0, text.find(stop)));

  const int32_t stop_id = ids[10];
  const CommandResult by_token = generate(flags + "--json --stop-token-id " + std::to_string(stop_id));
  ASSERT_EQ(by_token.exit_code, 0) << by_token.err;
  const json t = json::parse(by_token.out);
  EXPECT_EQ(t["finish_reason"], "stop");
  EXPECT_EQ(t["stop_reason"], stop_id);
  EXPECT_EQ(t["generated_ids"].back(), stop_id);

  const CommandResult shown = generate(flags + "--stop '" + stop + "'");
  ASSERT_EQ(shown.exit_code, 0) << shown.err;
  EXPECT_NE(shown.err.find("finished: stop (stop string " + json(stop).dump() + ")"), std::string::npos) << shown.err;
  const CommandResult at_length = generate(flags);
  ASSERT_EQ(at_length.exit_code, 0) << at_length.err;
  EXPECT_NE(at_length.err.find("finished: length"), std::string::npos) << at_length.err;
}

TEST(TokenizeCli, VocabOnlyGgufAndLlama2c) {
  if (!std::filesystem::exists(KVSERVE_BINARY)) GTEST_SKIP() << "no kvserve binary at " KVSERVE_BINARY;
  const std::string bin = KVSERVE_BINARY;
  const CommandResult bert = kvserve::test::run_command(bin + " tokenize -m " + kShared +
                                                        "/models/vocab/ggml-vocab-bert-bge.gguf 'Hello world'");
  ASSERT_EQ(bert.exit_code, 0);
  EXPECT_EQ(json::parse(bert.out), json({101, 7592, 2088, 102}));
  const CommandResult gpt2 = kvserve::test::run_command(bin + " tokenize --no-bos -m " + kShared +
                                                        "/models/vocab/ggml-vocab-gpt-2.gguf 'Hello world'");
  ASSERT_EQ(gpt2.exit_code, 0);
  EXPECT_EQ(json::parse(gpt2.out), json({15496, 995}));
  const CommandResult stories =
      kvserve::test::run_command(bin + " tokenize -m " + kShared + "/models/stories260K/stories260K.bin --tokenizer " +
                                 kShared + "/models/stories260K/tok512.bin 'Once upon a time'");
  ASSERT_EQ(stories.exit_code, 0);
  EXPECT_EQ(json::parse(stories.out), json({1, 403, 407, 261, 378}));
  const CommandResult missing = kvserve::test::run_command(bin + " tokenize -m /nonexistent.gguf hi", true);
  EXPECT_NE(missing.exit_code, 0);
  EXPECT_NE(missing.err.find("/nonexistent.gguf"), std::string::npos) << missing.err;
}
