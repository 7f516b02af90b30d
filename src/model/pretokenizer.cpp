#include "model/pretokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <utility>

#include "core/error.h"
#include "model/unicode.h"

namespace kvserve {

namespace {

// llama.cpp's regex families (llama-vocab.cpp, llm_tokenizer_bpe). Kept as llama.cpp writes them, in
// std::regex (ECMAScript) syntax; adapt_for_pcre2 makes the few adjustments PCRE2 needs.
const char* const kGpt2 = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S))";
const char* const kLlama3 =
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const char* const kQwen2 =
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
// Qwen3.5: as Qwen2, with combining marks (\p{M}) kept inside letter runs.
const char* const kQwen35 =
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const char* const kTekken =
    R"([^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))*((?=[\p{L}])([^A-Z]))+|[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))+((?=[\p{L}])([^A-Z]))*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const char* const kGpt4o =
    R"([^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))*((?=[\p{L}])([^A-Z]))+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))+((?=[\p{L}])([^A-Z]))*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const char* const kDeepseekLlmLetters =
    // Cased letters as DeepSeek's tokenizer.json lists them. Written as escapes because several of these
    // code points (U+1F7D, U+1FBE, U+1FD3, U+1FDB, U+2126, U+212A) are NFC singletons that editors and
    // tools silently normalize into other characters, which breaks the ranges.
    "\\s?["
    "A-Za-z\\x{B5}\\x{C0}-\\x{D6}\\x{D8}-\\x{F6}\\x{F8}-\\x{1BA}\\x{1BC}-\\x{1BF}"
    "\\x{1C4}-\\x{293}\\x{295}-\\x{2AF}\\x{370}-\\x{373}\\x{376}\\x{377}\\x{37B}-\\x{37D}"
    "\\x{37F}\\x{386}\\x{388}-\\x{38A}\\x{38C}\\x{38E}-\\x{3A1}\\x{3A3}-\\x{3F5}"
    "\\x{3F7}-\\x{481}\\x{48A}-\\x{52F}\\x{531}-\\x{556}\\x{10A0}-\\x{10C5}"
    "\\x{13A0}-\\x{13F5}\\x{13F8}-\\x{13FD}\\x{1C90}-\\x{1CBA}\\x{1CBD}-\\x{1CBF}"
    "\\x{1D00}-\\x{1D2B}\\x{1D6B}-\\x{1D77}\\x{1D79}-\\x{1D9A}\\x{1E00}-\\x{1F15}"
    "\\x{1F18}-\\x{1F1D}\\x{1F20}-\\x{1F45}\\x{1F48}-\\x{1F4D}\\x{1F50}-\\x{1F57}\\x{1F59}"
    "\\x{1F5B}\\x{1F5D}\\x{1F5F}-\\x{1F7D}\\x{1F80}-\\x{1FB4}\\x{1FB6}-\\x{1FBC}\\x{1FBE}"
    "\\x{1FC2}-\\x{1FC4}\\x{1FC6}-\\x{1FCC}\\x{1FD0}-\\x{1FD3}\\x{1FD6}-\\x{1FDB}"
    "\\x{1FE0}-\\x{1FEC}\\x{1FF2}-\\x{1FF4}\\x{1FF6}-\\x{1FFC}\\x{2102}\\x{2107}"
    "\\x{210A}-\\x{2113}\\x{2115}\\x{2119}-\\x{211D}\\x{2124}\\x{2126}\\x{2128}"
    "\\x{212A}-\\x{212D}\\x{212F}-\\x{2134}\\x{2139}\\x{213C}-\\x{213F}\\x{2145}-\\x{2149}"
    "\\x{214E}\\x{2183}\\x{2184}\\x{2C00}-\\x{2C7B}\\x{2C7E}-\\x{2CE4}\\x{2CEB}-\\x{2CEE}"
    "\\x{2CF2}\\x{2CF3}\\x{A640}-\\x{A66D}\\x{A680}-\\x{A69B}\\x{A722}-\\x{A76F}"
    "\\x{A771}-\\x{A787}\\x{A78B}-\\x{A78E}\\x{AB70}-\\x{ABBF}\\x{FB00}-\\x{FB06}"
    "\\x{FB13}-\\x{FB17}\\x{FF21}-\\x{FF3A}\\x{FF41}-\\x{FF5A}\\x{10400}-\\x{1044F}"
    "\\x{104B0}-\\x{104D3}\\x{104D8}-\\x{104FB}\\x{10C80}-\\x{10CB2}\\x{10CC0}-\\x{10CF2}"
    "\\x{118A0}-\\x{118DF}\\x{1E900}-\\x{1E943}"
    "]+";

// llama.cpp's whitespace set (Unicode White_Space). std::regex's \s only knows ASCII, so llama.cpp maps
// every other whitespace code point to U+000B before matching; listing the set here does the same.
const char* const kWhitespaceClass = "\\t-\\r \\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}";

// Rewrites \s and \S into explicit classes over kWhitespaceClass, inside and outside brackets.
std::string adapt_for_pcre2(const std::string& expr) {
  std::string out;
  bool in_class = false;
  for (size_t i = 0; i < expr.size(); ++i) {
    const char c = expr[i];
    if (c == '\\' && i + 1 < expr.size()) {
      const char next = expr[i + 1];
      if (next == 's') {
        out += in_class ? std::string(kWhitespaceClass) : "[" + std::string(kWhitespaceClass) + "]";
      } else if (next == 'S' && !in_class) {
        out += "[^" + std::string(kWhitespaceClass) + "]";
      } else {
        out += c;
        out += next;
      }
      ++i;
      continue;
    }
    if (c == '[' && !in_class) {
      in_class = true;
    } else if (c == ']' && in_class) {
      in_class = false;
    }
    out += c;
  }
  return out;
}

}  // namespace

std::vector<std::string> PreTokenizer::regexes_for(const std::string& pre, PreTokenizerStyle* style) {
  auto is = [&](std::initializer_list<const char*> names) {
    for (const char* n : names)
      if (pre == n) return true;
    return false;
  };
  PreTokenizerStyle unused;
  PreTokenizerStyle& out = style ? *style : unused;
  out = PreTokenizerStyle{};
  if (pre.empty() || pre == "default") {
    return {R"([\p{P}\$\+<=>\^~\|]+)", kGpt2, R"(\p{N}+)", "[0-9][0-9][0-9]"};
  }
  if (is({"llama3", "llama-v3", "llama-bpe", "falcon3", "pixtral", "falcon-h1", "midm-2.0", "lfm2"})) {
    out.ignore_merges = true;
    return {kLlama3};
  }
  if (is({"dbrx", "smaug-bpe", "chatglm-bpe", "glm4"})) return {kLlama3};
  if (pre == "deepseek-llm") {
    return {"[\r\n]", kDeepseekLlmLetters, "\\s?[!-/:-~！-／：-～‘-‟　-。]+", "\\s+$", "[一-龥ࠀ-一가-퟿]+",
            R"(\p{N}+)"};
  }
  if (pre == "deepseek-coder") {
    return {"[\r\n]", R"(\s?\p{L}+)", R"(\s?\p{P}+)", "[一-龥ࠀ-一가-퟿]+", R"(\p{N})"};
  }
  if (pre == "deepseek-v3") {
    return {R"(\p{N}{1,3})", "[一-龥぀-ゟ゠-ヿ]+",
            R"([!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^)"
            "\r\n"
            R"(\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[)"
            "\r\n"
            R"(]*|\s*[)"
            "\r\n"
            R"(]+|\s+(?!\S)|\s+)"};
  }
  if (pre == "falcon") {
    return {R"([\p{P}\$\+<=>\^~\|`]+)", kGpt2, "[0-9][0-9][0-9]"};
  }
  if (is({"starcoder", "refact", "command-r", "smollm", "codeshell", "exaone", "minerva-7b"})) {
    return {R"(\p{N})", kGpt2};
  }
  if (is({"gpt-2", "phi-2", "jina-es", "jina-de", "gigachat", "jina-v2-es", "jina-v2-de", "jina-v1-en",
          "jina-v2-code", "roberta-bpe", "mpt", "olmo", "jais", "trillion", "exaone4", "a.x-4.0", "mellum",
          "modern-bert", "granite-docling"})) {
    return {kGpt2};
  }
  if (is({"qwen2", "deepseek-r1-qwen", "megrez", "stablelm2", "hunyuan", "kormo", "grok-2"})) return {kQwen2};
  if (pre == "qwen35") return {kQwen35};
  // SentencePiece-style BPE (spaces already escaped to U+2581, merges over whole lines): only runs of
  // newlines are split off, as merge lookup never sees a newline inside a longer symbol.
  if (is({"gemma4", "granite-embed-multi-311m", "sarvam-moe"})) {
    out.byte_level = false;
    out.escape_spaces = true;
    out.newline_runs_whole = pre != "sarvam-moe";
    return {"[^\n]+|[\n]+"};
  }
  if (is({"poro-chat", "bloom", "gpt3-finnish"})) return {R"( ?[^(\s|.,!?…。，、।۔،)]+)"};
  if (pre == "viking") return {R"( ?[^(\s|.,!?…。，、।۔،)]+)", R"(\p{N})"};
  if (pre == "tekken") {
    out.ignore_merges = true;
    return {kTekken};
  }
  if (pre == "chameleon") {
    return {"<sentinel:[0-9]+>",     "(IMGIMG)((A|B|C|D|E|F|G|H|I){1,4})Z", "([\\t\\n]|    |  )", R"(\p{N})",
            R"([\p{P}!-/:-@\[-`{-~])", kGpt2};
  }
  if (is({"gpt-4o", "llama4"})) return {kGpt4o};
  if (pre == "seed-coder") {
    return {R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1}| ?[^\s\p{L}\p{N}\r\n]+|\s*[\r\n]+|\s+(?!\S)|\s+)"};
  }
  if (is({"bailingmoe", "bailingmoe2", "llada-moe"})) {
    return {R"('(?:[sSdDmMtT]|[lL][lL]|[vV][eE]|[rR][eE])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+)"};
  }
  if (pre == "superbpe") return {R"(\p{N}+)", R"((?=(\d{3})+(?!\d)))"};
  return {};
}

struct PreTokenizer::Compiled {
  pcre2_code* code = nullptr;
  ~Compiled() { pcre2_code_free(code); }
};

PreTokenizer::PreTokenizer(const std::string& pre) {
  const std::vector<std::string> sources = regexes_for(pre, &style_);
  if (sources.empty()) fail("unsupported BPE pre-tokenizer '{}' (tokenizer.ggml.pre)", pre);
  for (const std::string& source : sources) {
    const std::string pattern = adapt_for_pcre2(source);
    int error_code = 0;
    PCRE2_SIZE error_offset = 0;
    // DOLLAR_ENDONLY: "$" means end of piece only, as in ECMAScript. MATCH_INVALID_UTF: sanitized text
    // is valid anyway, but this keeps a bad byte from turning into a hard error.
    pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                     PCRE2_UTF | PCRE2_DOLLAR_ENDONLY | PCRE2_MATCH_INVALID_UTF, &error_code,
                                     &error_offset, nullptr);
    if (!code) {
      PCRE2_UCHAR message[256];
      pcre2_get_error_message(error_code, message, sizeof(message));
      fail("pre-tokenizer '{}': regex does not compile at offset {}: {}", pre, error_offset,
           reinterpret_cast<const char*>(message));
    }
    // JIT is an optimization only; without it pcre2_match interprets the same pattern.
    pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
    auto compiled = std::make_unique<Compiled>();
    compiled->code = code;
    regexes_.push_back(std::move(compiled));
  }
}

PreTokenizer::~PreTokenizer() = default;

std::vector<std::string> PreTokenizer::split(std::string_view raw_text) const {
  const std::string text = unicode::sanitize_utf8(raw_text);
  // Pieces as (offset, length) into `text`.
  std::vector<std::pair<size_t, size_t>> pieces;
  if (!text.empty()) pieces.emplace_back(0, text.size());
  std::vector<std::pair<size_t, size_t>> next;

  for (const auto& regex : regexes_) {
    pcre2_match_data* match = pcre2_match_data_create_from_pattern(regex->code, nullptr);
    next.clear();
    next.reserve(pieces.size() * 2);
    for (const auto& [piece_offset, piece_length] : pieces) {
      // The piece is the whole subject: lookaheads and "$" see its end as the end of input, as
      // llama.cpp's regex iterator over [begin, end) does.
      const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data() + piece_offset);
      size_t emitted = 0;
      size_t search_from = 0;
      while (search_from < piece_length) {
        int rc = pcre2_match(regex->code, subject, piece_length, search_from, 0, match, nullptr);
        if (rc == PCRE2_ERROR_JIT_STACKLIMIT) {
          rc = pcre2_match(regex->code, subject, piece_length, search_from, PCRE2_NO_JIT, match, nullptr);
        }
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0) {
          pcre2_match_data_free(match);
          fail("pre-tokenizer regex failed with PCRE2 error {}", rc);
        }
        const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(match);
        const size_t match_begin = ovector[0];
        const size_t match_end = ovector[1];
        if (match_end == match_begin) {
          // An empty match still splits the text there (llama.cpp keeps the gap before it as a piece);
          // then step one character past it.
          if (match_begin > emitted) {
            next.emplace_back(piece_offset + emitted, match_begin - emitted);
            emitted = match_begin;
          }
          search_from = match_begin + unicode::utf8_len(static_cast<uint8_t>(text[piece_offset + match_begin]));
          continue;
        }
        if (match_begin > emitted) next.emplace_back(piece_offset + emitted, match_begin - emitted);
        next.emplace_back(piece_offset + match_begin, match_end - match_begin);
        emitted = match_end;
        search_from = match_end;
      }
      if (emitted < piece_length) next.emplace_back(piece_offset + emitted, piece_length - emitted);
    }
    pcre2_match_data_free(match);
    pieces.swap(next);
  }

  std::vector<std::string> words;
  words.reserve(pieces.size());
  for (const auto& [offset, length] : pieces) words.emplace_back(text, offset, length);
  return words;
}

}  // namespace kvserve
