#include "server/request_parser.h"

#include <xxhash.h>

#include <charconv>
#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "engine/gbnf_grammar.h"
#include "server/api_error.h"
#include "server/reasoning_split.h"

namespace kvserve::server {

using json = nlohmann::ordered_json;

namespace {

constexpr int kMaxChoices = 16;
constexpr int kMaxTopLogprobs = 20;
constexpr size_t kMaxStopStrings = 16;
// More than any real use (OpenAI documents no limit; vLLM none either), few enough that applying them is
// nothing next to a step.
constexpr size_t kMaxLogitBias = 1024;
constexpr size_t kMaxStopTokenIds = 1024;

// A known field, or nullptr when absent or JSON null (OpenAI treats null as "not given").
const json* field(const json& body, const char* name) {
  auto it = body.find(name);
  if (it == body.end() || it->is_null()) return nullptr;
  return &*it;
}

double number_field(const json& v, const char* name, double lo, double hi) {
  if (!v.is_number()) throw bad_request(fmt::format("'{}' must be a number", name), name);
  const double x = v.get<double>();
  if (!std::isfinite(x) || x < lo || x > hi)
    throw bad_request(fmt::format("'{}' must be in [{}, {}], got {}", name, lo, hi, x), name);
  return x;
}

// Integers may arrive as 3 or 3.0 (JSON has one number type); 3.5 is an error.
int64_t integer_field(const json& v, const char* name, int64_t lo, int64_t hi) {
  if (!v.is_number()) throw bad_request(fmt::format("'{}' must be an integer", name), name);
  int64_t x = 0;
  if (v.is_number_integer()) {
    if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      throw bad_request(fmt::format("'{}' is out of range", name), name);
    x = v.get<int64_t>();
  } else {
    const double d = v.get<double>();
    if (!std::isfinite(d) || std::floor(d) != d || std::fabs(d) > 9.0e18)
      throw bad_request(fmt::format("'{}' must be an integer", name), name);
    x = static_cast<int64_t>(d);
  }
  if (x < lo || x > hi) throw bad_request(fmt::format("'{}' must be in [{}, {}], got {}", name, lo, hi, x), name);
  return x;
}

bool bool_field(const json& v, const char* name) {
  if (!v.is_boolean()) throw bad_request(fmt::format("'{}' must be a boolean", name), name);
  return v.get<bool>();
}

std::string string_field(const json& v, const char* name) {
  if (!v.is_string()) throw bad_request(fmt::format("'{}' must be a string", name), name);
  return v.get<std::string>();
}

void parse_prompt(const json& body, ApiRequest& req) {
  const json* p = field(body, "prompt");
  if (!p) throw bad_request("'prompt' is required", "prompt");
  if (p->is_string()) {
    req.prompt_text = p->get<std::string>();
    return;
  }
  if (!p->is_array() || p->empty())
    throw bad_request("'prompt' must be a string, an array of token ids, or a non-empty array of those", "prompt");
  // A list of prompts: strings, or arrays of token ids. A list of one is that prompt.
  if ((*p)[0].is_string() || (*p)[0].is_array()) {
    if (p->size() > static_cast<size_t>(kMaxBatchChoices))
      throw bad_request(
          fmt::format("'prompt' lists {} prompts; at most {} are taken in one request", p->size(), kMaxBatchChoices),
          "prompt");
    for (const json& item : *p) {
      if (!item.is_string() && !(item.is_array() && !item.empty() && item[0].is_number_integer()))
        throw bad_request("each prompt of a list must be a string or a non-empty array of token ids", "prompt");
      ApiRequest one;
      parse_prompt(json{{"prompt", item}}, one);
      req.prompt_batch.push_back({std::move(one.prompt_text), std::move(one.prompt_ids), one.prompt_is_ids});
    }
    if (req.prompt_batch.size() == 1) {
      req.prompt_text = std::move(req.prompt_batch[0].text);
      req.prompt_ids = std::move(req.prompt_batch[0].ids);
      req.prompt_is_ids = req.prompt_batch[0].is_ids;
      req.prompt_batch.clear();
    }
    return;
  }
  for (const json& id : *p) {
    if (!id.is_number_integer())
      throw bad_request("'prompt' must be a string, an array of token ids, or an array of those", "prompt");
    req.prompt_ids.push_back(static_cast<int32_t>(
        integer_field(id, "prompt", std::numeric_limits<int32_t>::min(), std::numeric_limits<int32_t>::max())));
  }
  req.prompt_is_ids = true;
}

// Message content is a string or an array of {"type": "text", "text": ...} parts.
std::string message_content(const json& content) {
  if (content.is_null()) return {};
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) throw bad_request("message 'content' must be a string or an array of parts", "messages");
  std::string text;
  for (const json& part : content) {
    // json::value() throws a type_error (not a request error) for a "type" that is not a string.
    const json* type = part.is_object() ? field(part, "type") : nullptr;
    if (type == nullptr || !type->is_string() || type->get_ref<const std::string&>() != "text" ||
        !part.contains("text") || !part["text"].is_string())
      throw bad_request("only text content parts are supported", "messages");
    text += part["text"].get<std::string>();
  }
  return text;
}

// vLLM's and llama-server's extra variables for the chat template ({"enable_thinking": false}, ...), and
// OpenAI's `reasoning_effort` ("low", "medium", "high"), which vLLM hands gpt-oss's template as that variable
// (chat_template_kwargs' own value wins).
json parse_chat_template_kwargs(const json& body) {
  const json* v = field(body, "chat_template_kwargs");
  json kwargs;
  if (v && !v->is_null()) {
    if (!v->is_object()) throw bad_request("'chat_template_kwargs' must be an object", "chat_template_kwargs");
    kwargs = *v;
  }
  if (const json* effort = field(body, "reasoning_effort"); effort && !effort->is_null()) {
    const std::string e = effort->is_string() ? effort->get<std::string>() : "";
    if (e != "low" && e != "medium" && e != "high")
      throw bad_request("'reasoning_effort' must be \"low\", \"medium\" or \"high\"", "reasoning_effort");
    if (!kwargs.is_object()) kwargs = json::object();
    if (!kwargs.contains("reasoning_effort")) kwargs["reasoning_effort"] = e;
  }
  return kwargs;
}

// An assistant's tool_calls as the templates read them: each call's arguments an object (OpenAI sends
// them as JSON text; vLLM and llama-server parse it before rendering, as the templates were written for).
json parse_tool_calls_field(const json& calls) {
  if (!calls.is_array()) throw bad_request("an assistant message's 'tool_calls' must be an array", "messages");
  json out = json::array();
  for (const json& call : calls) {
    const json* fn = call.is_object() ? field(call, "function") : nullptr;
    const json* name = fn && fn->is_object() ? field(*fn, "name") : nullptr;
    if (!name || !name->is_string())
      throw bad_request("each tool call needs a 'function' with a string 'name'", "messages");
    json c = call;
    if (const json* args = field(*fn, "arguments")) {
      if (args->is_string()) {
        const std::string& text = args->get_ref<const std::string&>();
        json parsed = json::parse(text, nullptr, /*allow_exceptions=*/false);
        if (parsed.is_discarded() || !parsed.is_object())
          throw bad_request("a tool call's 'arguments' must be a JSON object (as text)", "messages");
        c["function"]["arguments"] = std::move(parsed);
      } else if (!args->is_object()) {
        throw bad_request("a tool call's 'arguments' must be a JSON object (as text)", "messages");
      }
    }
    out.push_back(std::move(c));
  }
  return out;
}

// The fields besides role and content a template may read (ChatMessage::extra).
json message_extra_fields(const json& m, const std::string& role) {
  json extra;
  for (const char* name : {"name", "tool_call_id", "reasoning_content"})
    if (const json* v = field(m, name)) extra[name] = string_field(*v, name);
  if (const json* calls = field(m, "tool_calls")) {
    if (role != "assistant") throw bad_request("only assistant messages carry 'tool_calls'", "messages");
    json parsed = parse_tool_calls_field(*calls);
    if (!parsed.empty()) extra["tool_calls"] = std::move(parsed);
  }
  return extra;
}

void parse_messages(const json& body, ApiRequest& req) {
  req.chat_template_kwargs = parse_chat_template_kwargs(body);
  const json* msgs = field(body, "messages");
  if (!msgs) throw bad_request("'messages' is required", "messages");
  if (!msgs->is_array() || msgs->empty()) throw bad_request("'messages' must be a non-empty array", "messages");
  for (const json& m : *msgs) {
    if (!m.is_object()) throw bad_request("each message must be an object", "messages");
    const json* role = field(m, "role");
    if (!role || !role->is_string()) throw bad_request("each message needs a string 'role'", "messages");
    std::string r = role->get<std::string>();
    if (r == "developer") r = "system";  // OpenAI's newer name for the system role
    if (r != "system" && r != "user" && r != "assistant" && r != "tool")
      throw bad_request(fmt::format("unknown message role '{}'", r), "messages");
    auto content = m.find("content");
    ChatMessage msg{r, message_content(content == m.end() ? json() : *content)};
    msg.extra = message_extra_fields(m, r);
    req.messages.push_back(std::move(msg));
  }
}

constexpr size_t kMaxTools = 128;  // OpenAI's limit

// tools: [{"type": "function", "function": {"name", "description"?, "parameters"?}}]; tool_choice: "auto",
// "none"; parallel_tool_calls. tool_choice "required" or a named function need decoding constrained to
// a call, which kvserve does not have: those are 400s rather than a reply that may not call.
void parse_tools(const json& body, ApiRequest& req) {
  if (const json* v = field(body, "functions"); v && !(v->is_array() && v->empty()))
    throw bad_request("'functions' is not supported: use 'tools'", "functions");
  if (const json* v = field(body, "tools")) {
    if (!v->is_array()) throw bad_request("'tools' must be an array", "tools");
    if (v->size() > kMaxTools) throw bad_request(fmt::format("at most {} tools", kMaxTools), "tools");
    for (const json& tool : *v) {
      if (!tool.is_object()) throw bad_request("each tool must be an object", "tools");
      if (const json* type = field(tool, "type"); type && (!type->is_string() || *type != "function"))
        throw bad_request("only tools of type 'function' are supported", "tools");
      const json* fn = field(tool, "function");
      if (!fn || !fn->is_object()) throw bad_request("each tool needs a 'function' object", "tools");
      const json* name = field(*fn, "name");
      if (!name || !name->is_string() || name->get_ref<const std::string&>().empty())
        throw bad_request("each tool's function needs a non-empty string 'name'", "tools");
      if (const json* d = field(*fn, "description"); d && !d->is_string())
        throw bad_request("a tool's 'description' must be a string", "tools");
      if (const json* p = field(*fn, "parameters"); p && !p->is_object())
        throw bad_request("a tool's 'parameters' must be a JSON schema object", "tools");
    }
    if (!v->empty()) req.tools = *v;
  }
  if (const json* v = field(body, "tool_choice")) {
    if (v->is_object()) {
      const json* fn = field(*v, "function");
      const json* name = fn && fn->is_object() ? field(*fn, "name") : nullptr;
      if (!name || !name->is_string())
        throw bad_request("a 'tool_choice' object must be {\"type\": \"function\", \"function\": {\"name\": ...}}",
                          "tool_choice");
      req.forced_tool = name->get<std::string>();
      bool known = false;
      if (req.tools.is_array())
        for (const json& tool : req.tools) known = known || tool["function"]["name"] == req.forced_tool;
      if (!known)
        throw bad_request(fmt::format("'tool_choice' names '{}', which is not among the tools", req.forced_tool),
                          "tool_choice");
    } else if (!v->is_string()) {
      throw bad_request("'tool_choice' must be 'none', 'auto', 'required' or a function", "tool_choice");
    } else if (*v == "none") {
      req.tool_choice_none = true;
    } else if (*v == "required") {
      if (!req.tools.is_array()) throw bad_request("'tool_choice' 'required' needs 'tools'", "tool_choice");
      req.tool_required = true;
    } else if (*v != "auto") {
      throw bad_request("'tool_choice' must be 'none', 'auto', 'required' or a function", "tool_choice");
    }
  }
  if (const json* v = field(body, "parallel_tool_calls")) req.parallel_tool_calls = bool_field(*v, "parallel_tool_calls");
}

// response_format: "text"; "json_object" (a JSON object); "json_schema" with {"json_schema": {"schema": ...}}
// (JSON valid for the schema). A schema the grammar cannot enforce is a 400 naming what it cannot.
// vLLM's own fields for the same: guided_json (a schema, or its text), guided_choice (strings) and
// guided_regex (the whole reply matches it), or the same under structured_outputs ({"json": ...,
// "choice": [...], "regex": ...}).
// A GBNF grammar (llama.cpp's format) comes as llama-server's `grammar`, vLLM's guided_grammar or
// structured_outputs.grammar; llama-server's `json_schema` is a schema, as guided_json.
void parse_guided(const json& body, ApiRequest& req) {
  const json* json_schema = field(body, "guided_json");
  const json* choice = field(body, "guided_choice");
  const json* regex = field(body, "guided_regex");
  const json* gbnf = field(body, "guided_grammar");
  const char* json_name = "guided_json";
  const char* choice_name = "guided_choice";
  const char* regex_name = "guided_regex";
  const char* gbnf_name = "guided_grammar";
  if (const json* so = field(body, "structured_outputs")) {
    if (!so->is_object()) throw bad_request("'structured_outputs' must be an object", "structured_outputs");
    if (json_schema || choice || regex || gbnf)
      throw bad_request(
          "give 'structured_outputs' or guided_json / guided_choice / guided_regex / guided_grammar, not both",
          "structured_outputs");
    json_schema = field(*so, "json");
    choice = field(*so, "choice");
    regex = field(*so, "regex");
    gbnf = field(*so, "grammar");
    json_name = choice_name = regex_name = gbnf_name = "structured_outputs";
  }
  // llama.cpp's clients send an empty `grammar` for none.
  const json* llama_grammar = field(body, "grammar");
  if (llama_grammar && llama_grammar->is_string() && llama_grammar->get<std::string>().empty()) llama_grammar = nullptr;
  if (const json* g = llama_grammar) {
    if (gbnf) throw bad_request(fmt::format("give 'grammar' or '{}', not both", gbnf_name), "grammar");
    gbnf = g;
    gbnf_name = "grammar";
  }
  // llama-server's own field for a schema.
  if (const json* schema = field(body, "json_schema")) {
    if (json_schema) throw bad_request(fmt::format("give 'json_schema' or '{}', not both", json_name), "json_schema");
    json_schema = schema;
    json_name = "json_schema";
  }
  const int kinds = (json_schema ? 1 : 0) + (choice ? 1 : 0) + (regex ? 1 : 0) + (gbnf ? 1 : 0);
  const char* name = choice ? choice_name : json_schema ? json_name : regex ? regex_name : gbnf_name;
  if (kinds > 1) throw bad_request("give one kind of structured output, not two", name);
  if (req.grammar && kinds > 0) throw bad_request(fmt::format("give 'response_format' or '{}', not both", name), name);
  try {
    if (regex) req.grammar = regex_grammar(string_field(*regex, regex_name));
    if (gbnf) req.grammar = gbnf_grammar(string_field(*gbnf, gbnf_name));
    if (json_schema) {
      json schema = *json_schema;
      if (schema.is_string()) {
        schema = json::parse(schema.get<std::string>(), nullptr, /*allow_exceptions=*/false);
        if (schema.is_discarded()) throw bad_request(fmt::format("'{}' is not valid JSON", json_name), json_name);
      }
      req.grammar = json_schema_grammar(schema);
    } else if (choice) {
      if (!choice->is_array())
        throw bad_request(fmt::format("'{}' must be an array of strings", choice_name), choice_name);
      std::vector<std::string> texts;
      for (const json& c : *choice) texts.push_back(string_field(c, choice_name));
      req.grammar = text_choice_grammar(texts);
    }
  } catch (const Error& e) {
    throw bad_request(fmt::format("'{}': {}", name, e.what()), name);
  }
}

void parse_response_format(const json& body, ApiRequest& req) {
  const json* v = field(body, "response_format");
  if (!v) return;
  if (!v->is_object() || !v->contains("type") || !(*v)["type"].is_string())
    throw bad_request("'response_format' must be an object with a string 'type'", "response_format");
  const std::string type = (*v)["type"].get<std::string>();
  if (type == "text") return;
  if (type == "json_object") {
    req.grammar = json_object_grammar();
    return;
  }
  if (type != "json_schema")
    throw bad_request(fmt::format("unknown 'response_format' type '{}' (text, json_object, json_schema)", type),
                      "response_format");
  const json* spec = field(*v, "json_schema");
  if (!spec || !spec->is_object())
    throw bad_request("'response_format' json_schema needs a 'json_schema' object", "response_format");
  const json* schema = field(*spec, "schema");
  try {
    req.grammar = json_schema_grammar(schema ? *schema : json(true));
  } catch (const Error& e) {
    throw bad_request(fmt::format("'response_format': {}", e.what()), "response_format");
  }
}

void parse_stop(const json& v, SamplingParams& params) {
  if (v.is_string()) {
    if (!v.get<std::string>().empty()) params.stop.push_back(v.get<std::string>());
    return;
  }
  if (!v.is_array()) throw bad_request("'stop' must be a string or an array of strings", "stop");
  if (v.size() > kMaxStopStrings) throw bad_request(fmt::format("at most {} stop strings", kMaxStopStrings), "stop");
  for (const json& s : v) {
    if (!s.is_string()) throw bad_request("'stop' must be a string or an array of strings", "stop");
    if (!s.get<std::string>().empty()) params.stop.push_back(s.get<std::string>());
  }
}

void check_min_tokens(const SamplingParams& p) {
  if (p.min_tokens > p.max_tokens)
    throw bad_request(fmt::format("'min_tokens' ({}) must be at most max_tokens ({})", p.min_tokens, p.max_tokens),
                      "min_tokens");
}

// vLLM's list of token ids that end generation; checked against the vocabulary in build_prompt.
void parse_stop_token_ids(const json& v, SamplingParams& params) {
  if (!v.is_array()) throw bad_request("'stop_token_ids' must be an array of token ids", "stop_token_ids");
  if (v.size() > kMaxStopTokenIds)
    throw bad_request(fmt::format("'stop_token_ids' takes at most {} tokens", kMaxStopTokenIds), "stop_token_ids");
  for (const json& id : v)
    params.stop_token_ids.push_back(
        static_cast<int32_t>(integer_field(id, "stop_token_ids", 0, std::numeric_limits<int32_t>::max())));
}

// {"<token id>": bias in [-100, 100], ...}, as OpenAI's API takes it; ids are checked against the
// vocabulary in build_prompt.
void parse_logit_bias(const json& v, SamplingParams& params) {
  if (!v.is_object()) throw bad_request("'logit_bias' must be an object mapping token ids to biases", "logit_bias");
  if (v.size() > kMaxLogitBias)
    throw bad_request(fmt::format("'logit_bias' takes at most {} tokens", kMaxLogitBias), "logit_bias");
  for (const auto& [key, bias] : v.items()) {
    int32_t id = -1;
    const auto [end, ec] = std::from_chars(key.data(), key.data() + key.size(), id);
    if (ec != std::errc() || end != key.data() + key.size() || id < 0)
      throw bad_request(fmt::format("'logit_bias' keys must be token ids, got '{}'", key), "logit_bias");
    params.logit_bias.emplace_back(id, static_cast<float>(number_field(bias, "logit_bias", -100, 100)));
  }
}

void parse_sampling(const json& body, ApiRequest& req) {
  SamplingParams& p = req.params;
  p.temperature = kDefaultTemperature;
  SamplingGiven& given = req.sampling_given;
  if (const json* v = field(body, "temperature")) {
    p.temperature = static_cast<float>(number_field(*v, "temperature", 0, 2));
    given.temperature = true;
  }
  if (const json* v = field(body, "top_p")) {
    given.top_p = true;
    p.top_p = static_cast<float>(number_field(*v, "top_p", 0, 1));
    if (p.top_p <= 0) throw bad_request("'top_p' must be in (0, 1]", "top_p");
  }
  if (const json* v = field(body, "top_k")) {
    given.top_k = true;
    const int64_t k = integer_field(*v, "top_k", -1, std::numeric_limits<int32_t>::max());
    p.top_k = k < 0 ? 0 : static_cast<int>(k);  // -1 is vLLM's "off"
  }
  if (const json* v = field(body, "min_p")) {
    p.min_p = static_cast<float>(number_field(*v, "min_p", 0, 1));
    given.min_p = true;
  }
  if (const json* v = field(body, "presence_penalty"))
    p.presence_penalty = static_cast<float>(number_field(*v, "presence_penalty", -2, 2));
  if (const json* v = field(body, "frequency_penalty"))
    p.frequency_penalty = static_cast<float>(number_field(*v, "frequency_penalty", -2, 2));
  if (const json* v = field(body, "repetition_penalty")) {
    given.repetition_penalty = true;
    p.repetition_penalty = static_cast<float>(number_field(*v, "repetition_penalty", 0, 2));
    if (p.repetition_penalty <= 0) throw bad_request("'repetition_penalty' must be in (0, 2]", "repetition_penalty");
  }
  if (const json* v = field(body, "seed")) {
    // Any 64-bit integer; negative seeds are reinterpreted, not rejected.
    if (v->is_number_unsigned()) {
      p.seed = v->get<uint64_t>();
    } else {
      p.seed = static_cast<uint64_t>(
          integer_field(*v, "seed", std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max()));
    }
    p.has_seed = true;
  }
  if (const json* v = field(body, "stop")) parse_stop(*v, p);
  if (const json* v = field(body, "logit_bias")) parse_logit_bias(*v, p);
  if (const json* v = field(body, "ignore_eos")) p.ignore_eos = bool_field(*v, "ignore_eos");
  if (const json* v = field(body, "stop_token_ids")) parse_stop_token_ids(*v, p);
  if (const json* v = field(body, "min_tokens"))
    p.min_tokens = static_cast<int>(integer_field(*v, "min_tokens", 0, std::numeric_limits<int32_t>::max()));

  // Chat's max_completion_tokens supersedes max_tokens.
  for (const char* name : {"max_tokens", "max_completion_tokens"}) {
    if (std::string_view(name) == "max_completion_tokens" && req.endpoint != Endpoint::ChatCompletions) continue;
    if (const json* v = field(body, name)) {
      p.max_tokens = static_cast<int>(integer_field(*v, name, 0, std::numeric_limits<int32_t>::max()));
      req.max_tokens_given = true;
    }
  }
}

void parse_logprobs(const json& body, ApiRequest& req) {
  if (const json* v = field(body, "return_tokens_as_token_ids"))
    req.tokens_as_ids = bool_field(*v, "return_tokens_as_token_ids");
  if (const json* v = field(body, "prompt_logprobs"))
    req.prompt_logprobs = static_cast<int>(integer_field(*v, "prompt_logprobs", 0, kMaxTopLogprobs));
  if (req.endpoint == Endpoint::Completions) {
    if (const json* v = field(body, "logprobs")) {
      req.logprobs = true;
      req.top_logprobs = static_cast<int>(integer_field(*v, "logprobs", 0, kMaxTopLogprobs));
    }
    return;
  }
  if (const json* v = field(body, "logprobs")) req.logprobs = bool_field(*v, "logprobs");
  if (const json* v = field(body, "top_logprobs")) {
    req.top_logprobs = static_cast<int>(integer_field(*v, "top_logprobs", 0, kMaxTopLogprobs));
    if (!req.logprobs) throw bad_request("'top_logprobs' requires 'logprobs' to be true", "top_logprobs");
  }
}

json parse_body(std::string_view body_text) {
  json body;
  try {
    body = json::parse(body_text);
  } catch (const json::exception& e) {
    // parse_error, and out_of_range for a number beyond a double (1e400): both the client's JSON.
    throw bad_request(fmt::format("request body is not valid JSON: {}", e.what()));
  }
  if (!body.is_object()) throw bad_request("request body must be a JSON object");
  return body;
}

}  // namespace

ApiRequest parse_api_request(Endpoint endpoint, std::string_view body_text) {
  const json body = parse_body(body_text);
  ApiRequest req;
  req.endpoint = endpoint;
  if (const json* v = field(body, "model")) req.model = string_field(*v, "model");
  if (endpoint == Endpoint::Completions) {
    parse_prompt(body, req);
    if (const json* v = field(body, "echo")) req.echo = bool_field(*v, "echo");
    if (const json* v = field(body, "best_of"); v && integer_field(*v, "best_of", 1, kMaxChoices) > 1)
      throw bad_request("'best_of' > 1 is not supported; use n", "best_of");
    if (const json* v = field(body, "suffix"); v && !string_field(*v, "suffix").empty())
      throw bad_request("'suffix' (text after the completion) is not supported", "suffix");
  } else {
    parse_messages(body, req);
    parse_tools(body, req);
  }
  parse_response_format(body, req);
  parse_guided(body, req);
  if (req.grammar && (req.tool_required || !req.forced_tool.empty()))
    throw bad_request("give 'response_format' or a 'tool_choice' that forces a call, not both", "response_format");
  parse_sampling(body, req);
  parse_logprobs(body, req);
  if (const json* v = field(body, "n")) req.n = static_cast<int>(integer_field(*v, "n", 1, kMaxChoices));
  if (!req.prompt_batch.empty() && req.prompt_batch.size() * static_cast<size_t>(req.n) > kMaxBatchChoices)
    throw bad_request(fmt::format("{} prompts with n = {} make {} choices; at most {} are taken in one request",
                                  req.prompt_batch.size(), req.n, req.prompt_batch.size() * req.n, kMaxBatchChoices),
                      "n");
  if (const json* v = field(body, "stream")) req.stream = bool_field(*v, "stream");
  if (const json* v = field(body, "stream_options")) {
    if (!v->is_object()) throw bad_request("'stream_options' must be an object", "stream_options");
    if (const json* u = field(*v, "include_usage")) req.include_usage = bool_field(*u, "stream_options.include_usage");
  }
  if (const json* v = field(body, "user")) req.user = string_field(*v, "user");
  if (const json* v = field(body, "cache_salt")) req.cache_salt = string_field(*v, "cache_salt");
  if (const json* v = field(body, "reasoning_format"); v && endpoint == Endpoint::ChatCompletions) {
    const std::string format = string_field(*v, "reasoning_format");
    if (format != "none" && format != "deepseek")
      throw bad_request(fmt::format("unknown reasoning_format '{}' (none, deepseek)", format), "reasoning_format");
    req.split_reasoning = format == "deepseek";
  }

  // 0 new tokens: only the echoed prompt (with logprobs, its scores), as OpenAI's legacy API and vLLM take it.
  if (req.max_tokens_given && req.params.max_tokens == 0 && !req.echo)
    throw bad_request("'max_tokens' must be at least 1 (0 only with echo: the prompt alone)", "max_tokens");
  // The engine reports logprobs only when asked for at least one alternative; we drop the extras.
  req.params.logprobs = req.logprobs ? std::max(1, req.top_logprobs) : 0;
  // Echo with logprobs reports the prompt's tokens too (the first has none), as OpenAI's legacy API and vLLM
  // do: how lm-evaluation-harness scores a continuation.
  if (req.echo && req.logprobs) req.params.prompt_logprobs = req.top_logprobs;
  req.params.prompt_logprobs = std::max(req.params.prompt_logprobs, req.prompt_logprobs);
  if (req.max_tokens_given) check_min_tokens(req.params);
  try {
    SamplingParams given = req.params;  // a default max_tokens is set where the prompt is built
    if (!req.max_tokens_given) given.max_tokens = std::numeric_limits<int32_t>::max();
    given.validate();
  } catch (const Error& e) {
    throw bad_request(e.what());
  }
  return req;
}

TokenizeRequest parse_tokenize_request(std::string_view body_text) {
  const json body = parse_body(body_text);
  TokenizeRequest req;
  if (const json* v = field(body, "model")) req.model = string_field(*v, "model");
  const json* prompt = field(body, "prompt");
  if (!prompt) prompt = field(body, "content");  // llama.cpp's name
  if (prompt && field(body, "messages")) throw bad_request("give 'prompt' or 'messages', not both", "messages");
  if (prompt) {
    req.text = string_field(*prompt, "prompt");
  } else if (field(body, "messages")) {
    ApiRequest chat;
    parse_messages(body, chat);
    req.messages = std::move(chat.messages);
    parse_tools(body, chat);
    req.chat_template_kwargs = std::move(chat.chat_template_kwargs);
    req.tools = std::move(chat.tools);
    req.is_chat = true;
  } else {
    throw bad_request("'prompt' (or 'messages') is required", "prompt");
  }
  if (const json* v = field(body, "add_special_tokens")) req.add_special = bool_field(*v, "add_special_tokens");
  return req;
}

json chat_template_variables(const json& kwargs, const json& tools) {
  if (!tools.is_array() || tools.empty()) return kwargs;
  json vars = kwargs.is_object() ? kwargs : json::object();
  if (!vars.contains("tools")) vars["tools"] = tools;
  return vars;
}

DetokenizeRequest parse_detokenize_request(std::string_view body_text, int32_t vocab_size) {
  const json body = parse_body(body_text);
  DetokenizeRequest req;
  if (const json* v = field(body, "model")) req.model = string_field(*v, "model");
  const json* tokens = field(body, "tokens");
  if (!tokens) throw bad_request("'tokens' is required", "tokens");
  if (!tokens->is_array()) throw bad_request("'tokens' must be an array of token ids", "tokens");
  for (const json& id : *tokens)
    req.tokens.push_back(static_cast<int32_t>(integer_field(id, "tokens", 0, int64_t{vocab_size} - 1)));
  return req;
}

std::vector<int32_t> build_prompt(ApiRequest& req, const EngineBackend& backend) {
  std::vector<int32_t> ids;
  try {
    if (req.endpoint == Endpoint::ChatCompletions) {
      const std::string prompt =
          backend.render_chat(req.messages, chat_template_variables(req.chat_template_kwargs, req.tools));
      if (prompt_is_harmony(prompt)) req.reasoning_format = ReasoningFormat::Harmony;
      if (prompt_is_gemma4(prompt)) req.reasoning_format = ReasoningFormat::Gemma4Channel;
      req.reasoning_opened_by_prompt = prompt_opens_reasoning(prompt, req.reasoning_format);
      ids = backend.tokenize(prompt, /*add_special=*/true);
    } else if (req.prompt_is_ids) {
      ids = req.prompt_ids;
    } else {
      ids = backend.tokenize(req.prompt_text, /*add_special=*/true);
    }
  } catch (const Error& e) {
    throw bad_request(e.what(), req.endpoint == Endpoint::ChatCompletions ? "messages" : "prompt");
  }
  const char* param = req.endpoint == Endpoint::ChatCompletions ? "messages" : "prompt";
  if (ids.empty()) throw bad_request("the prompt is empty", param);
  const int32_t n_vocab = backend.vocab_size();
  for (int32_t id : ids)
    if (id < 0 || id >= n_vocab)
      throw bad_request(fmt::format("token id {} is outside the vocabulary [0, {})", id, n_vocab), param);
  for (const auto& [id, bias] : req.params.logit_bias)
    if (id >= n_vocab)
      throw bad_request(fmt::format("'logit_bias' token id {} is outside the vocabulary [0, {})", id, n_vocab),
                        "logit_bias");
  for (int32_t id : req.params.stop_token_ids)
    if (id >= n_vocab)
      throw bad_request(fmt::format("'stop_token_ids' token id {} is outside the vocabulary [0, {})", id, n_vocab),
                        "stop_token_ids");

  const int64_t context = backend.context_length();
  if (context > 0 && static_cast<int64_t>(ids.size()) >= context)
    throw ApiError(400,
                   fmt::format("this model's maximum context length is {} tokens, but the prompt has {} tokens",
                               context, ids.size()),
                   param, "context_length_exceeded");
  const SamplingDefaults defaults = backend.sampling_defaults();
  apply_sampling_defaults(defaults, req.sampling_given, req.params);
  if (!req.max_tokens_given) {
    const int64_t limit = backend.default_completion_limit(static_cast<int64_t>(ids.size()));
    if (req.endpoint == Endpoint::Completions) {
      req.params.max_tokens = kDefaultCompletionMaxTokens;
      if (context > 0) req.params.max_tokens = static_cast<int>(std::min<int64_t>(req.params.max_tokens, limit));
    } else {
      req.params.max_tokens = context > 0 ? static_cast<int>(std::min<int64_t>(limit, 1 << 30)) : 256;
    }
    // The model's max_new_tokens bounds the default as vLLM's does (the completions API's 16 stays the lesser);
    // without a context length it replaces chat's 256.
    if (defaults.max_tokens)
      req.params.max_tokens = context > 0 || req.endpoint == Endpoint::Completions
                                  ? std::min(req.params.max_tokens, *defaults.max_tokens)
                                  : *defaults.max_tokens;
  }
  check_min_tokens(req.params);
  return ids;
}

std::vector<BuiltPrompt> build_prompts(ApiRequest& req, const EngineBackend& backend) {
  std::vector<BuiltPrompt> out;
  const auto built = [&](std::vector<int32_t> ids) {
    std::string echo_text;
    if (req.echo) echo_text = req.prompt_is_ids ? backend.detokenize(ids) : req.prompt_text;
    return BuiltPrompt{std::move(ids), req.params.max_tokens, std::move(echo_text)};
  };
  if (req.prompt_batch.empty()) {
    out.push_back(built(build_prompt(req, backend)));
    return out;
  }
  for (size_t i = 0; i < req.prompt_batch.size(); ++i) {
    req.prompt_text = req.prompt_batch[i].text;
    req.prompt_ids = req.prompt_batch[i].ids;
    req.prompt_is_ids = req.prompt_batch[i].is_ids;
    try {
      out.push_back(built(build_prompt(req, backend)));
    } catch (const ApiError& e) {
      throw ApiError(e.status(), fmt::format("prompt {}: {}", i, e.what()), e.param(), e.code(), e.type());
    }
  }
  req.prompt_text.clear();
  req.prompt_ids.clear();
  return out;
}

std::string derive_cache_salt(const std::string& api_key, bool share_prefix_cache, const std::string& request_salt) {
  std::string tenant;
  if (!share_prefix_cache && !api_key.empty())
    tenant = fmt::format("key:{:016x}", XXH3_64bits(api_key.data(), api_key.size()));
  if (request_salt.empty()) return tenant;
  // The separator cannot occur in the hex tenant part, so (tenant, salt) pairs never collide.
  return tenant + "|salt:" + request_salt;
}

}  // namespace kvserve::server
