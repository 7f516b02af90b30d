// tokenizer.json → Vocab. The result must tokenize exactly like Hugging Face `tokenizers` does with the
// same file, using kvserve's llama.cpp-compatible tokenizers; so only shapes of tokenizer.json that map
// onto one of those are accepted, and everything else is refused with a message naming the feature.
#include "model/hf_tokenizer.h"

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <unordered_map>

#include "core/error.h"
#include "model/json_file.h"
#include "model/loaders.h"

namespace kvserve {

namespace {

using json = nlohmann::json;

// The splitting regexes as they appear in tokenizer.json files, and the llama.cpp pre-tokenizer names
// (Vocab::pre) whose regex lists are equivalent. llama.cpp rewrites the case-insensitive groups for its
// own regex engine, so the names, not the strings, are what carries over.
constexpr const char* kGpt2Regex =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
constexpr const char* kLlama3Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char* kQwen2Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char* kQwen35Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char* kSingleDigitRegex = R"(\p{N})";
// Mistral's tekken (Nemo, Small 3, Ministral) and OpenAI's o200k (Llama 4, gpt-oss), as their tokenizer.json files
// (and transformers' GGUF conversion) write them.
constexpr const char* kTekkenRegex =
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char* kGpt4oRegex =
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

struct KnownPreTokenizer {
  std::vector<std::string> regexes;
  const char* pre;
};

const std::vector<KnownPreTokenizer>& known_pre_tokenizers() {
  static const std::vector<KnownPreTokenizer> table = {
      {{kGpt2Regex}, "gpt-2"},
      {{kSingleDigitRegex, kGpt2Regex}, "smollm"},  // SmolLM/StarCoder: Digits(individual) + ByteLevel
      {{kLlama3Regex}, "llama-bpe"},
      {{kQwen2Regex}, "qwen2"},
      {{kQwen35Regex}, "qwen35"},
      {{kTekkenRegex}, "tekken"},
      {{kGpt4oRegex}, "gpt-4o"},
  };
  return table;
}

bool file_exists(const std::string& path) {
  std::error_code ec;
  return !path.empty() && std::filesystem::is_regular_file(path, ec);
}

std::string type_of(const json& j) {
  if (!j.is_object()) return "";
  auto it = j.find("type");
  return it != j.end() && it->is_string() ? it->get<std::string>() : "";
}

// A component and, for "Sequence", its members, flattened in order.
void flatten(const json& j, const char* list_key, std::vector<json>* out) {
  if (j.is_null()) return;
  if (type_of(j) == "Sequence") {
    auto it = j.find(list_key);
    if (it != j.end() && it->is_array())
      for (const json& member : *it) flatten(member, list_key, out);
    return;
  }
  out->push_back(j);
}

// Byte-level pre-tokenizer → the llama.cpp pre-tokenizer name with the same splitting.
std::string byte_level_pre_name(const std::vector<json>& pre_tokenizers, const std::string& path) {
  std::vector<std::string> regexes;
  for (const json& p : pre_tokenizers) {
    const std::string type = type_of(p);
    if (type == "ByteLevel") {
      if (p.value("use_regex", true)) regexes.push_back(kGpt2Regex);
    } else if (type == "Split") {
      const json pattern = p.value("pattern", json::object());
      std::string regex;
      if (pattern.contains("Regex") && pattern["Regex"].is_string()) {
        regex = pattern["Regex"].get<std::string>();
      } else {
        fail("'{}': Split pre-tokenizer without a regex pattern is not supported", path);
      }
      if (p.value("invert", false) || p.value("behavior", std::string("Isolated")) != "Isolated")
        fail("'{}': Split pre-tokenizer with behavior other than Isolated is not supported", path);
      regexes.push_back(regex);
    } else if (type == "Digits") {
      if (!p.value("individual_digits", false))
        fail("'{}': Digits pre-tokenizer without individual_digits is not supported", path);
      regexes.push_back(kSingleDigitRegex);
    } else {
      fail("'{}': pre-tokenizer '{}' is not supported in a byte-level BPE tokenizer", path, type);
    }
  }
  for (const KnownPreTokenizer& k : known_pre_tokenizers())
    if (k.regexes == regexes) return k.pre;
  std::string listed;
  for (const std::string& r : regexes) listed += (listed.empty() ? "" : ", ") + ("'" + r + "'");
  fail(
      "'{}': byte-level pre-tokenizer splits with [{}], which matches no supported pre-tokenizer "
      "(gpt-2, smollm, llama-bpe, qwen2, qwen35, tekken, gpt-4o)",
      path, listed);
}

// tokenizer_config.json writes special tokens either as a string or as a serialized AddedToken.
std::string special_token_text(const json& j) {
  if (j.is_string()) return j.get<std::string>();
  if (j.is_object() && j.contains("content") && j["content"].is_string()) return j["content"].get<std::string>();
  return "";
}

// config.json ids may be an int or (Llama 3.1 eos) a list of ints; the first one is the primary id.
int32_t config_token_id(const json& config, const char* key) {
  auto it = config.find(key);
  if (it == config.end()) return -1;
  const json* v = &*it;
  if (v->is_array() && !v->empty()) v = &(*v)[0];
  if (v->is_number_integer()) {
    const int64_t id = v->get<int64_t>();
    if (id >= 0 && id <= INT32_MAX) return static_cast<int32_t>(id);
  }
  return -1;
}

bool is_byte_token(const std::string& t) {
  auto hex = [](char c) { return (c >= '0' && c <= '9') || (c >= 'A' && c <= 'F') || (c >= 'a' && c <= 'f'); };
  return t.size() == 6 && t.compare(0, 3, "<0x") == 0 && hex(t[3]) && hex(t[4]) && t[5] == '>';
}

// The TemplateProcessing post-processor (possibly inside a Sequence) says which special tokens the
// reference wraps a single sequence in; that is add_bos/add_eos when tokenizer_config.json is silent.
void template_specials(const json& post, std::string* first, std::string* last) {
  std::vector<json> parts;
  flatten(post, "processors", &parts);
  for (const json& p : parts) {
    if (type_of(p) != "TemplateProcessing") continue;
    auto single = p.find("single");
    if (single == p.end() || !single->is_array() || single->empty()) continue;
    auto special_id = [](const json& piece) -> std::string {
      if (piece.is_object() && piece.contains("SpecialToken") && piece["SpecialToken"].is_object())
        return piece["SpecialToken"].value("id", std::string());
      return "";
    };
    *first = special_id(single->front());
    *last = single->size() > 1 ? special_id(single->back()) : "";
  }
}

}  // namespace

Vocab vocab_from_tokenizer_json(const std::string& path, const std::string& tokenizer_config_path,
                                const std::string& config_path) {
  const json tj = read_json_file(path);
  if (!tj.is_object()) fail("'{}': not a JSON object", path);
  const json model = tj.value("model", json::object());
  const std::string model_type = type_of(model);
  if (model_type != "BPE")
    fail("'{}': tokenizer model type '{}' is not supported (supported: BPE)", path,
         model_type.empty() ? "(none)" : model_type);
  if (!model.contains("vocab") || !model["vocab"].is_object()) fail("'{}': model.vocab is missing", path);

  // Which flavour of BPE: byte-level (GPT-2 alphabet) or SentencePiece-style (▁ for spaces, byte fallback).
  std::vector<json> pre_tokenizers, normalizers;
  flatten(tj.value("pre_tokenizer", json()), "pretokenizers", &pre_tokenizers);
  flatten(tj.value("normalizer", json()), "normalizers", &normalizers);
  bool byte_level = false, metaspace = false, prepend_normalizer = false, add_space_prefix = true;
  for (const json& p : pre_tokenizers) {
    const std::string t = type_of(p);
    if (t == "ByteLevel") byte_level = true;
    if (t == "Metaspace") {
      metaspace = true;
      if (p.value("replacement", std::string("\u2581")) != "\u2581")
        fail("'{}': Metaspace replacement other than U+2581 is not supported", path);
      // prepend_scheme (newer files) or add_prefix_space (older ones) decide the dummy-prefix space.
      if (p.contains("prepend_scheme") && p["prepend_scheme"].is_string())
        add_space_prefix = p["prepend_scheme"].get<std::string>() != "never";
      else
        add_space_prefix = p.value("add_prefix_space", true);
    }
  }
  bool replaces_spaces = false;
  for (const json& n : normalizers) {
    const std::string t = type_of(n);
    if (t == "Prepend" && n.value("prepend", std::string()) == "\u2581") {
      prepend_normalizer = true;
    } else if (t == "Replace" && n.value("content", std::string()) == "\u2581") {
      replaces_spaces = true;
    } else if (t == "NFC" && byte_level) {
      // Qwen2: llama.cpp does not normalize either; NFC text (the common case) is unaffected.
    } else {
      fail("'{}': normalizer '{}' is not supported", path, t.empty() ? "(unnamed)" : t);
    }
  }

  Vocab v;
  if (byte_level && !metaspace && !prepend_normalizer) {
    v.kind = Vocab::Kind::BPE;
    v.pre = byte_level_pre_name(pre_tokenizers, path);
    // The file says whether a word that is a token skips the merges; llama.cpp ties that to the pre-tokenizer.
    if (auto it = model.find("ignore_merges"); it != model.end() && it->is_boolean()) v.ignore_merges = it->get<bool>();
    v.add_space_prefix = false;
    v.add_bos = false;
  } else if (!byte_level && (metaspace || (prepend_normalizer && replaces_spaces && pre_tokenizers.empty()))) {
    v.kind = Vocab::Kind::SPM;
    v.pre = "default";
    v.add_space_prefix = metaspace ? add_space_prefix : true;
    v.add_bos = true;
  } else {
    fail("'{}': unsupported tokenizer layout: neither byte-level BPE nor SentencePiece-style BPE "
         "(pre_tokenizer {}, normalizer {})",
         path, tj.value("pre_tokenizer", json()).dump(), tj.value("normalizer", json()).dump());
  }

  // Tokens: model.vocab plus added_tokens, by id; ids nobody names become unused padding, as
  // llama.cpp's converter writes them.
  std::map<int64_t, std::string> by_id;
  for (const auto& [text, id] : model["vocab"].items()) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= INT32_MAX)
      fail("'{}': vocab entry '{}' has an invalid id", path, text);
    by_id[id.get<int64_t>()] = text;
  }
  std::map<int64_t, bool> added_special;  // id -> special
  std::map<int64_t, uint8_t> added_strip;  // id -> Vocab::kStripLeft | kStripRight (its lstrip / rstrip)
  if (tj.contains("added_tokens") && tj["added_tokens"].is_array()) {
    for (const json& a : tj["added_tokens"]) {
      if (!a.is_object() || !a.contains("id") || !a["id"].is_number_integer() || !a.contains("content") ||
          !a["content"].is_string())
        fail("'{}': malformed added_tokens entry {}", path, a.dump());
      const int64_t id = a["id"].get<int64_t>();
      if (id < 0 || id >= INT32_MAX) fail("'{}': added token '{}' has an invalid id", path, a["content"].dump());
      by_id[id] = a["content"].get<std::string>();
      added_special[id] = a.value("special", false);
      const auto flag = [&](const char* key) { return a.contains(key) && a[key].is_boolean() && a[key].get<bool>(); };
      const uint8_t strip = (flag("lstrip") ? Vocab::kStripLeft : 0) | (flag("rstrip") ? Vocab::kStripRight : 0);
      if (strip != 0) added_strip[id] = strip;
    }
  }
  if (by_id.empty()) fail("'{}': empty vocabulary", path);
  const size_t n = static_cast<size_t>(by_id.rbegin()->first) + 1;
  if (n > (size_t{1} << 24)) fail("'{}': vocabulary of {} tokens is too large", path, n);
  v.tokens.resize(n);
  v.token_types.assign(n, TokenType::Normal);
  for (size_t i = 0; i < n; ++i) {
    auto it = by_id.find(static_cast<int64_t>(i));
    if (it == by_id.end()) {
      v.tokens[i] = "[PAD" + std::to_string(i) + "]";
      v.token_types[i] = TokenType::Unused;
    } else {
      v.tokens[i] = it->second;
    }
  }
  std::unordered_map<std::string, int32_t> id_of;
  for (size_t i = 0; i < n; ++i) id_of.emplace(v.tokens[i], static_cast<int32_t>(i));
  for (const auto& [id, special] : added_special)
    v.token_types[static_cast<size_t>(id)] = special ? TokenType::Control : TokenType::UserDefined;
  if (!added_strip.empty()) {
    v.strip.assign(n, 0);
    for (const auto& [id, strip] : added_strip) v.strip[static_cast<size_t>(id)] = strip;
  }

  // Merges: "a b" strings (older files) or [a, b] pairs (tokenizers >= 0.20).
  if (model.contains("merges") && model["merges"].is_array()) {
    v.merges.reserve(model["merges"].size());
    for (const json& m : model["merges"]) {
      if (m.is_string()) {
        v.merges.push_back(m.get<std::string>());
      } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
        v.merges.push_back(m[0].get<std::string>() + " " + m[1].get<std::string>());
      } else {
        fail("'{}': malformed merge {}", path, m.dump());
      }
    }
  }

  if (v.kind == Vocab::Kind::SPM) {
    // SentencePiece merges by piece score; tokenizer.json keeps only the merge order, which
    // transformers derived from those scores (best first). So a piece's score is minus the rank of
    // the first merge that produces it: the SPM tokenizer then picks merges in the same order.
    // Pieces no merge produces (single characters, bytes, specials) rank below every merge.
    const float unreachable = -static_cast<float>(v.merges.size() + 1);
    v.scores.assign(n, unreachable);
    for (size_t r = v.merges.size(); r-- > 0;) {
      const std::string& m = v.merges[r];
      const size_t space = m.find(' ');
      if (space == std::string::npos) fail("'{}': merge '{}' is not a pair", path, m);
      auto it = id_of.find(m.substr(0, space) + m.substr(space + 1));
      if (it != id_of.end()) v.scores[static_cast<size_t>(it->second)] = -static_cast<float>(r);
    }
    for (size_t i = 0; i < n; ++i) {
      if (v.token_types[i] == TokenType::Normal && is_byte_token(v.tokens[i])) v.token_types[i] = TokenType::Byte;
      if (v.token_types[i] != TokenType::Normal) v.scores[i] = 0.0f;
    }
  }

  // Unknown token: named by the BPE model, else by tokenizer_config.json (below), else SPM's "<unk>".
  if (model.contains("unk_token") && model["unk_token"].is_string()) {
    auto it = id_of.find(model["unk_token"].get<std::string>());
    if (it != id_of.end()) v.unk_id = it->second;
  }

  // Special tokens and flags: tokenizer_config.json, then config.json ids, then the post-processor.
  json tcfg = file_exists(tokenizer_config_path) ? read_json_file(tokenizer_config_path) : json::object();
  json cfg = file_exists(config_path) ? read_json_file(config_path) : json::object();
  if (!tcfg.is_object()) fail("'{}': not a JSON object", tokenizer_config_path);
  if (!cfg.is_object()) fail("'{}': not a JSON object", config_path);
  auto resolve = [&](const char* tcfg_key, const char* cfg_key) -> int32_t {
    if (auto it = tcfg.find(tcfg_key); it != tcfg.end()) {
      const std::string text = special_token_text(*it);
      if (!text.empty()) {
        auto t = id_of.find(text);
        if (t == id_of.end())
          fail("'{}': {} '{}' is not in the vocabulary of '{}'", tokenizer_config_path, tcfg_key, text, path);
        return t->second;
      }
    }
    const int32_t id = config_token_id(cfg, cfg_key);
    return id >= 0 && static_cast<size_t>(id) < n ? id : -1;
  };
  v.bos_id = resolve("bos_token", "bos_token_id");
  v.eos_id = resolve("eos_token", "eos_token_id");
  v.pad_id = resolve("pad_token", "pad_token_id");
  // Every id of config.json's and generation_config.json's eos_token_id (a number or a list) ends generation.
  const auto add_eos_ids = [&](const json& j, const std::string& file) {
    const auto it = j.find("eos_token_id");
    if (it == j.end() || it->is_null()) return;
    for (const json& e : it->is_array() ? *it : json::array({*it})) {
      if (!e.is_number_integer() || e.get<int64_t>() < 0 || e.get<int64_t>() > INT32_MAX)
        fail("'{}': eos_token_id must be a token id or a list of token ids, got {}", file, it->dump());
      const auto id = static_cast<int32_t>(e.get<int64_t>());
      if (static_cast<size_t>(id) < n && id != v.eos_id) v.extra_eog_ids.push_back(id);
    }
  };
  add_eos_ids(cfg, config_path);
  if (!config_path.empty()) {
    const std::string generation_config =
        (std::filesystem::path(config_path).parent_path() / "generation_config.json").string();
    if (file_exists(generation_config)) {
      const json g = read_json_file(generation_config);
      if (!g.is_object()) fail("'{}': not a JSON object", generation_config);
      add_eos_ids(g, generation_config);
    }
  }
  if (v.unk_id < 0) {
    const int32_t unk = resolve("unk_token", "unk_token_id");
    if (unk >= 0) v.unk_id = unk;
  }
  if (v.unk_id < 0 && v.kind == Vocab::Kind::SPM) {
    if (auto it = id_of.find("<unk>"); it != id_of.end()) v.unk_id = it->second;
  }
  // SentencePiece marks its unknown piece UNKNOWN (not CONTROL), as GGUF vocabularies have it.
  if (v.unk_id >= 0 && v.kind == Vocab::Kind::SPM) v.token_types[static_cast<size_t>(v.unk_id)] = TokenType::Unknown;

  std::string first_special, last_special;
  template_specials(tj.value("post_processor", json()), &first_special, &last_special);
  if (auto it = tcfg.find("add_bos_token"); it != tcfg.end() && it->is_boolean()) {
    v.add_bos = it->get<bool>();
  } else if (!first_special.empty() || tj.contains("post_processor")) {
    v.add_bos = !first_special.empty() && id_of.count(first_special) && id_of[first_special] == v.bos_id;
  }
  if (auto it = tcfg.find("add_eos_token"); it != tcfg.end() && it->is_boolean()) {
    v.add_eos = it->get<bool>();
  } else {
    v.add_eos = !last_special.empty() && id_of.count(last_special) && id_of[last_special] == v.eos_id;
  }
  if (v.add_bos && v.bos_id < 0) fail("'{}': add_bos_token is set but no bos_token is named", path);

  // Chat template: a string, or a list of {name, template} (the "default" one is used); newer
  // transformers versions save it beside the config as chat_template.jinja instead.
  if (auto it = tcfg.find("chat_template"); it != tcfg.end()) {
    if (it->is_string()) {
      v.chat_template = it->get<std::string>();
    } else if (it->is_array()) {
      for (const json& t : *it)
        if (t.is_object() && t.value("name", std::string()) == "default" && t.contains("template") &&
            t["template"].is_string())
          v.chat_template = t["template"].get<std::string>();
    }
  }
  if (v.chat_template.empty()) {
    const auto jinja = std::filesystem::path(path).parent_path() / "chat_template.jinja";
    if (file_exists(jinja.string())) {
      std::ifstream in(jinja, std::ios::binary);
      std::stringstream ss;
      ss << in.rdbuf();
      v.chat_template = ss.str();
    }
  }

  mark_end_of_turn_tokens(v);
  return v;
}

}  // namespace kvserve
