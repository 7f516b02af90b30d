#include "model/sampling_defaults.h"

#include <fmt/format.h>

#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "model/gguf.h"
#include "model/json_file.h"

namespace kvserve {

namespace {

void check(SamplingDefaults& d) {
  const auto bad = [&](const char* what, double v, const char* range) {
    fail("{}: the model's default {} {} is out of range ({})", d.source, what, v, range);
  };
  if (d.temperature && !(*d.temperature >= 0 && std::isfinite(*d.temperature)))
    bad("temperature", *d.temperature, ">= 0");
  if (d.top_p && !(*d.top_p > 0 && *d.top_p <= 1)) bad("top_p", *d.top_p, "(0, 1]");
  if (d.min_p && !(*d.min_p >= 0 && *d.min_p <= 1)) bad("min_p", *d.min_p, "[0, 1]");
  if (d.repetition_penalty && !(*d.repetition_penalty > 0 && std::isfinite(*d.repetition_penalty)))
    bad("repetition_penalty", *d.repetition_penalty, "> 0");
  if (d.top_k && *d.top_k < 0) d.top_k = 0;  // -1 and 0 both mean off
}

}  // namespace

std::string SamplingDefaults::describe() const {
  std::string s;
  const auto add = [&](const std::string& item) { s += (s.empty() ? "" : ", ") + item; };
  if (temperature) add(fmt::format("temperature {}", *temperature));
  if (top_p) add(fmt::format("top_p {}", *top_p));
  if (top_k) add(fmt::format("top_k {}", *top_k));
  if (min_p) add(fmt::format("min_p {}", *min_p));
  if (repetition_penalty) add(fmt::format("repetition_penalty {}", *repetition_penalty));
  if (max_tokens) add(fmt::format("max_tokens {}", *max_tokens));
  return s;
}

SamplingDefaults sampling_defaults_from_gguf(const GGUFFile& f) {
  SamplingDefaults d;
  d.source = f.name();
  d.temperature = f.find_f32("general.sampling.temp");
  d.top_p = f.find_f32("general.sampling.top_p");
  d.min_p = f.find_f32("general.sampling.min_p");
  d.repetition_penalty = f.find_f32("general.sampling.penalty_repeat");
  d.top_k = f.find_i32("general.sampling.top_k");
  check(d);
  return d;
}

SamplingDefaults sampling_defaults_from_generation_config(const std::string& path) {
  SamplingDefaults d;
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) return d;
  d.source = path;
  const nlohmann::json j = read_json_file(path);
  if (!j.is_object()) fail("'{}': not a JSON object", path);
  // A key counts where it is a number other than GenerationConfig's default (vLLM's to_diff_dict).
  const auto number = [&](const char* key, double transformers_default) -> std::optional<double> {
    if (!j.contains(key) || j[key].is_null()) return std::nullopt;
    if (!j[key].is_number()) fail("'{}': '{}' must be a number", path, key);
    const double v = j[key].get<double>();
    if (transformers_default == v) return std::nullopt;
    return v;
  };
  if (auto v = number("temperature", 1.0)) d.temperature = static_cast<float>(*v);
  if (auto v = number("top_p", 1.0)) d.top_p = static_cast<float>(*v);
  if (auto v = number("min_p", NAN)) d.min_p = static_cast<float>(*v);
  if (auto v = number("repetition_penalty", 1.0)) d.repetition_penalty = static_cast<float>(*v);
  if (auto v = number("top_k", 50.0)) {
    if (!j["top_k"].is_number_integer() || *v > 1e9) fail("'{}': 'top_k' must be an integer", path);
    d.top_k = static_cast<int>(*v);
  }
  if (auto v = number("max_new_tokens", NAN)) {
    if (!j["max_new_tokens"].is_number_integer() || !(*v >= 1 && *v <= 2147483647.0))
      fail("'{}': 'max_new_tokens' must be a positive integer, got {}", path, j["max_new_tokens"].dump());
    d.max_tokens = static_cast<int>(*v);
  }
  check(d);
  return d;
}

}  // namespace kvserve
