// Structured output's cost per step: a grammar mask (GrammarMatcher::mask) at a structural point, inside a
// free string and inside a number, on GPT-2's vocabulary (50k) and Llama 3's (128k, when fetched), against
// the sampler's own step over the same logits (a temperature draw): the counter "vs_sample" is mask time /
// sample time, measured in the same run.
#include <benchmark/benchmark.h>

#include <chrono>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "engine/gbnf_grammar.h"
#include "engine/grammar_matcher.h"
#include "engine/json_grammar.h"
#include "engine/sampler.h"
#include "model/loaders.h"
#include "model/model_cache.h"
#include "model/tokenizer.h"
#include "server/tool_call_parser.h"

namespace {

using json = nlohmann::ordered_json;

std::string vocab_path(const std::string& which) {
  if (which == "gpt2") return std::string(KVSERVE_SOURCE_DIR) + "/../shared/models/vocab/ggml-vocab-gpt-2.gguf";
  return kvserve::model_cache_dir() + "/llama.cpp-vocab-0.3.36/ggml-vocab-llama-bpe.gguf";
}

// The grammar each case masks under: a JSON object; a string with a pattern; a qwen3_coder tool call whose
// string parameter is free raw text; any JSON object through llama.cpp's GBNF grammar for it.
// llama.cpp's grammars/json.gbnf, as llama-server users send it.
constexpr const char* kLlamaJsonGbnf = R"g(
root   ::= object
value  ::= object | array | string | number | ("true" | "false" | "null") ws
object ::= "{" ws ( string ":" ws value ("," ws string ":" ws value)* )? "}" ws
array  ::= "[" ws ( value ("," ws value)* )? "]" ws
string ::= "\"" ( [^"\\\x7F\x00-\x1F] | "\\" (["\\bfnrt] | "u" [0-9a-fA-F]{4}) )* "\"" ws
number ::= ("-"? ([0-9] | [1-9] [0-9]{0,15})) ("." [0-9]+)? ([eE] [-+]? [0-9] [1-9]{0,15})? ws
ws ::= | " " | "\n" [ \t]{0,20}
)g";

std::shared_ptr<const kvserve::Grammar> grammar_of(const std::string& kind) {
  if (kind == "gbnf") return kvserve::gbnf_grammar(kLlamaJsonGbnf);
  if (kind == "pattern")
    return kvserve::json_schema_grammar(json::parse(
        R"({"type": "object", "properties": {"code": {"type": "string", "pattern": "^[A-Za-z ]+-\\d+$"}}, "required": ["code"]})"));
  if (kind == "xml")
    return kvserve::server::forced_tool_call_grammar(
        kvserve::server::ToolCallFormat::Qwen3Coder,
        json::parse(
            R"([{"type": "function", "function": {"name": "note", "parameters": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}}}])"),
        "");
  return kvserve::json_schema_grammar(json::parse(
      R"({"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "number"}, "bio": {"type": "string"}}, "required": ["name", "age", "bio"]})"));
}

void mask_step(benchmark::State& state, const char* which, const char* prefix, const char* kind = "json") {
  const std::string path = vocab_path(which);
  if (!std::filesystem::exists(path)) {
    state.SkipWithError(("missing " + path).c_str());
    return;
  }
  const auto tok = kvserve::Tokenizer::create(kvserve::load_gguf_vocab(path));
  const kvserve::GrammarTokenTable table(*tok);
  const auto grammar = grammar_of(kind);
  kvserve::GrammarMatcher m(grammar, table);
  // Feed the prefix one byte-token at a time (every byte is a token in byte-level BPE).
  std::vector<int32_t> byte_ids(256, -1);
  for (int32_t id = 0; id < table.size(); ++id)
    if (table.bytes(id).size() == 1 && byte_ids[static_cast<unsigned char>(table.bytes(id)[0])] < 0)
      byte_ids[static_cast<unsigned char>(table.bytes(id)[0])] = id;
  for (unsigned char c : std::string(prefix))
    if (!m.accept(byte_ids[c])) {
      state.SkipWithError("the prefix does not follow the grammar");
      return;
    }
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::vector<float> logits(static_cast<size_t>(table.size()));
  for (float& x : logits) x = normal(rng);
  std::vector<float> work(logits);
  kvserve::SamplingParams params;
  params.temperature = 0.8f;
  kvserve::Sampler sampler(params);
  // The baseline, timed here: one temperature draw over the same vocabulary.
  double sample_s = 0;
  int samples = 0;
  for (; samples < 200; ++samples) {
    work = logits;
    const auto t0 = std::chrono::steady_clock::now();
    benchmark::DoNotOptimize(sampler.sample(work.data(), table.size()));
    sample_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  double mask_s = 0;
  int64_t allowed = 0;
  for (auto _ : state) {
    state.PauseTiming();
    work = logits;
    state.ResumeTiming();
    const auto t0 = std::chrono::steady_clock::now();
    allowed = m.mask(work.data(), table.size());
    mask_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  state.counters["allowed"] = static_cast<double>(allowed);
  state.counters["vs_sample"] = (mask_s / static_cast<double>(state.iterations())) / (sample_s / samples);
}

}  // namespace

BENCHMARK_CAPTURE(mask_step, gpt2_key, "gpt2", R"({"name": "Ann", )")->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(mask_step, gpt2_string, "gpt2", R"({"name": "An)")->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(mask_step, gpt2_number, "gpt2", R"({"name": "Ann", "age": 4)")->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(mask_step, llama3_key, "llama3", R"({"name": "Ann", )")->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(mask_step, llama3_string, "llama3", R"({"name": "An)")->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(mask_step, llama3_number, "llama3", R"({"name": "Ann", "age": 4)")->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(mask_step, gpt2_pattern, "gpt2", R"({"code": "Ab c)", "pattern")->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(mask_step, gpt2_xml_text, "gpt2", "<tool_call>\n<function=note>\n<parameter=text>\nDear Ann", "xml")
    ->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(mask_step, llama3_pattern, "llama3", R"({"code": "Ab c)", "pattern")->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(mask_step, llama3_xml_text, "llama3", "<tool_call>\n<function=note>\n<parameter=text>\nDear Ann",
                  "xml")
    ->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(mask_step, gpt2_gbnf_key, "gpt2", R"({"name": "Ann", )", "gbnf")->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(mask_step, gpt2_gbnf_string, "gpt2", R"({"name": "An)", "gbnf")->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(mask_step, gpt2_gbnf_number, "gpt2", R"({"name": "Ann", "age": 4)", "gbnf")
    ->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(mask_step, llama3_gbnf_key, "llama3", R"({"name": "Ann", )", "gbnf")->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(mask_step, llama3_gbnf_string, "llama3", R"({"name": "An)", "gbnf")->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(mask_step, llama3_gbnf_number, "llama3", R"({"name": "Ann", "age": 4)", "gbnf")
    ->Unit(benchmark::kMicrosecond);
BENCHMARK_MAIN();
