#include "server/http_server.h"

#include "core/error.h"

#ifdef KVSERVE_HAVE_HTTPLIB

#include <httplib.h>
#include <sys/socket.h>

#include <atomic>
#include <chrono>

#include "server/api_error.h"
#include "server/completion_job.h"
#include "server/request_parser.h"
#include "server/response_format.h"
#include "server/web_page.h"

namespace kvserve::server {

namespace {

// httplib listens with a backlog of 5, too few for a burst of clients: the kernel would drop SYNs and
// clients would stall for a retransmit. listen() again on the bound socket raises it.
class ListeningServer : public httplib::Server {
 public:
  void raise_backlog(int backlog) {
    const auto sock = svr_sock_.load();
    if (sock != INVALID_SOCKET) ::listen(sock, backlog);
  }
};

constexpr int kListenBacklog = 1024;
// How long a non-streaming request may finish before its response switches to a chunked body with
// keep-alive probing (so most answers get an exact status and Content-Length).
constexpr std::chrono::milliseconds kPlainResponseWait{500};

void send_error(httplib::Response& res, const ApiError& e) {
  res.status = e.status();
  res.set_content(dump_json(e.to_json()), "application/json");
}

std::string bearer_token(const httplib::Request& req) {
  const std::string auth = req.get_header_value("Authorization");
  constexpr std::string_view prefix = "Bearer ";
  if (auth.size() <= prefix.size() || auth.compare(0, prefix.size(), prefix) != 0) return {};
  return auth.substr(prefix.size());
}

// Compares without an early exit, so response time does not reveal how much of the key matched.
bool keys_equal(const std::string& presented, const std::string& expected) {
  if (expected.empty()) return false;
  unsigned diff = presented.size() == expected.size() ? 0u : 1u;
  for (size_t i = 0; i < presented.size(); ++i)
    diff |= static_cast<unsigned char>(presented[i] ^ expected[i % expected.size()]);
  return diff == 0;
}

int64_t unix_seconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

bool http_server_available() { return true; }

struct HttpServer::Impl {
  EngineBackend& backend;
  ServerOptions opts;
  ServerMetrics metrics;
  ListeningServer http;
  std::atomic<bool> stop_requested{false};
  int64_t started_at = unix_seconds();
  const std::string chat_template;  // what the tool-call format is read from
  ToolCallFormat tool_format = ToolCallFormat::None;
  std::vector<int32_t> tool_marker_tokens;  // the format's markers that are single tokens
  // Gemma 4's thought channel's tags, where they are single tokens: shown, for the reasoning split to read.
  std::vector<int32_t> reasoning_marker_tokens;

  Impl(EngineBackend& b, ServerOptions o) : backend(b), opts(std::move(o)), chat_template(b.chat_template()) {
    if (opts.tool_call_parser == "auto") {
      tool_format = detect_tool_call_format(chat_template);
    } else if (std::optional<ToolCallFormat> f = tool_call_format_named(opts.tool_call_parser)) {
      tool_format = *f;
    } else {
      fail(
          "unknown tool-call parser '{}' (auto, hermes, qwen3_coder, glm45, llama3_json, llama4_json, mistral, "
          "openai, pythonic, llama4_pythonic, gemma4, none)",
          opts.tool_call_parser);
    }
    for (const std::string& marker : tool_call_markers(tool_format)) {
      const std::vector<int32_t> ids = backend.tokenize(marker, /*add_special=*/false);
      if (ids.size() == 1) tool_marker_tokens.push_back(ids[0]);
    }
    if (chat_template.find("<|channel>") != std::string::npos)
      for (const char* marker : {"<|channel>", "<channel|>"}) {
        const std::vector<int32_t> ids = backend.tokenize(marker, /*add_special=*/false);
        if (ids.size() == 1) reasoning_marker_tokens.push_back(ids[0]);
      }
    const size_t threads = static_cast<size_t>(std::max(1, opts.http_threads));
    http.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
    http.set_payload_max_length(opts.max_body_bytes);
    http.set_tcp_nodelay(true);
    http.set_keep_alive_max_count(1000);
    install_routes();
  }

  void install_routes() {
    http.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
      const bool guarded = req.path.rfind("/v1/", 0) == 0 || req.path == "/tokenize" || req.path == "/detokenize";
      if (opts.api_key.empty() || !guarded) return httplib::Server::HandlerResponse::Unhandled;
      if (keys_equal(bearer_token(req), opts.api_key)) return httplib::Server::HandlerResponse::Unhandled;
      send_error(res,
                 ApiError(401, "missing or invalid API key (send 'Authorization: Bearer KEY')", {}, "invalid_api_key"));
      return httplib::Server::HandlerResponse::Handled;
    });
    // Statuses httplib sets itself (no route, body too large, bad HTTP) get OpenAI-shaped bodies too.
    http.set_error_handler(
        httplib::Server::HandlerWithResponse([](const httplib::Request& req, httplib::Response& res) {
          if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
          std::string message, code;
          if (res.status == 404) {
            message = fmt::format("no such route: {} {}", req.method, req.path);
            code = "not_found";
          } else if (res.status == 413) {
            message = "request body too large";
            code = "payload_too_large";
          } else {
            message = fmt::format("HTTP error {}", res.status);
          }
          send_error(res, ApiError(res.status, message, {}, code));
          return httplib::Server::HandlerResponse::Handled;
        }));
    http.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
      std::string message = "internal error";
      try {
        if (ep) std::rethrow_exception(ep);
      } catch (const std::exception& e) {
        message = e.what();
      } catch (...) {
      }
      send_error(res, ApiError(500, message, {}, {}, "server_error"));
    });
    // Counted before the response goes out (httplib calls a logger only after it is sent), so a client that
    // reads /metrics right after its response sees it counted (ServerHttp.MetricsAndBlockMap failed now and
    // then under a loaded ctest).
    http.set_post_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
      if (req.path.rfind("/v1/", 0) == 0) metrics.count_http_status(res.status);
    });

    http.Get("/health", [](const httplib::Request&, httplib::Response& res) {
      res.set_content(R"({"status":"ok"})", "application/json");
    });
    http.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
      res.set_content(dump_json(models_json(opts.model_name, started_at, backend.context_length())),
                      "application/json");
    });
    http.Get("/v1/kv/blocks", [this](const httplib::Request&, httplib::Response& res) {
      // Stats first: a block map read a moment later is at least as fresh as the numbers beside it.
      const EngineStats stats = backend.stats();
      res.set_content(dump_json(kv_blocks_json(backend.block_map(), stats, backend.block_size())), "application/json");
    });
    http.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
      res.set_content(metrics.render(backend.stats()), "text/plain; version=0.0.4; charset=utf-8");
    });
    http.Get("/", [](const httplib::Request&, httplib::Response& res) {
      res.set_content(std::string(web_page_html()), "text/html; charset=utf-8");
    });
    http.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) {
      generate(Endpoint::Completions, req, res);
    });
    http.Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res) {
      generate(Endpoint::ChatCompletions, req, res);
    });
    // vLLM's and llama.cpp's token endpoints (both at the root): count a prompt as the server will.
    http.Post("/tokenize", [this](const httplib::Request& req, httplib::Response& res) {
      try {
        const TokenizeRequest t = parse_tokenize_request(req.body);
        check_model(t.model);
        std::vector<int32_t> ids;
        try {
          ids = backend.tokenize(
              t.is_chat ? backend.render_chat(t.messages, chat_template_variables(t.chat_template_kwargs, t.tools))
                        : t.text,
              t.add_special);
        } catch (const Error& e) {
          throw ApiError(400, e.what(), t.is_chat ? "messages" : "prompt");
        }
        const json body = {{"tokens", ids}, {"count", ids.size()}, {"max_model_len", backend.context_length()}};
        res.set_content(dump_json(body), "application/json");
      } catch (const ApiError& e) {
        send_error(res, e);
      }
    });
    http.Post("/detokenize", [this](const httplib::Request& req, httplib::Response& res) {
      try {
        const DetokenizeRequest d = parse_detokenize_request(req.body, backend.vocab_size());
        check_model(d.model);
        const std::string text = backend.detokenize(d.tokens);
        // "prompt" is vLLM's name for the text, "content" llama.cpp's.
        res.set_content(dump_json(json{{"prompt", text}, {"content", text}}), "application/json");
      } catch (const ApiError& e) {
        send_error(res, e);
      }
    });
  }

  void check_model(const std::string& model) const {
    if (!model.empty() && model != opts.model_name)
      throw ApiError(404,
                     fmt::format("the model '{}' does not exist (this server serves '{}')", model, opts.model_name),
                     "model", "model_not_found");
  }

  void generate(Endpoint endpoint, const httplib::Request& req, httplib::Response& res) {
    std::shared_ptr<CompletionJob> job;
    try {
      ApiRequest api = parse_api_request(endpoint, req.body);
      check_model(api.model);
      if (!api.split_reasoning) api.split_reasoning = opts.split_reasoning;
      if (api.calls_tools()) {
        if (tool_format == ToolCallFormat::None)
          throw bad_request(
              "this model's chat template writes tool calls in no format kvserve reads; start the server with "
              "--tool-call-parser (hermes, qwen3_coder, glm45, llama3_json, mistral, openai, pythonic, gemma4), or "
              "send "
              "tool_choice "
              "'none'",
              "tools");
        api.tool_format = tool_format;
        api.shown_special_tokens = tool_marker_tokens;
        if (api.tool_required || !api.forced_tool.empty()) {
          nlohmann::ordered_json tools = nlohmann::ordered_json::array();
          for (const auto& tool : api.tools)
            if (api.tool_required || tool["function"]["name"] == api.forced_tool) tools.push_back(tool);
          try {
            api.grammar = forced_tool_call_grammar(tool_format, tools, chat_template);
          } catch (const Error& e) {
            throw bad_request(e.what(), "tool_choice");
          }
        }
      }
      for (const int32_t id : reasoning_marker_tokens) api.shown_special_tokens.push_back(id);
      std::vector<BuiltPrompt> prompts = build_prompts(api, backend);
      // With the reasoning split on, a reasoning model thinks first and the constrained text follows its
      // </think> (reasoning_content stays free text). gpt-oss may write an analysis message first, then its
      // call, or its final message holding the constrained text. Without the split, the reply is the
      // constrained text alone (a harmony one read as content).
      if (api.grammar && api.endpoint == Endpoint::ChatCompletions && api.split_reasoning.value_or(false)) {
        if (api.reasoning_format == ReasoningFormat::ThinkTags)
          api.grammar = after_reasoning(api.grammar, api.reasoning_opened_by_prompt);
        if (api.reasoning_format == ReasoningFormat::Gemma4Channel)
          api.grammar = after_reasoning(api.grammar, api.reasoning_opened_by_prompt, "<|channel>thought", "<channel|>");
        if (api.reasoning_format == ReasoningFormat::Harmony) {
          if (!api.tool_required && api.forced_tool.empty())
            api.grammar = after_text("<|channel|>final<|message|>", api.grammar);
          api.grammar =
              after_reasoning(api.grammar, false, "<|channel|>analysis<|message|>", "<|end|>", "<|start|>assistant");
        }
      }
      std::string salt = derive_cache_salt(opts.api_key, opts.share_prefix_cache, api.cache_salt);
      job = std::make_shared<CompletionJob>(backend, metrics, std::move(api), std::move(prompts), opts.model_name,
                                            std::move(salt), opts.keep_alive);
      job->start();
    } catch (const ApiError& e) {
      send_error(res, e);
      return;
    }

    if (!job->streaming() && job->wait_finished(kPlainResponseWait)) {
      auto [status, body] = job->result();
      res.status = status;
      res.set_content(body, "application/json");
      return;
    }
    // The job lives as long as the provider: if httplib drops the response unsent (client gone before
    // the headers), destroying the job aborts the engine request.
    const bool streaming = job->streaming();
    if (streaming) res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider(streaming ? "text/event-stream" : "application/json",
                                     [job, streaming](size_t, httplib::DataSink& sink) {
                                       // httplib ends the body on an empty write, so never make one.
                                       auto write = [&sink](std::string_view bytes) {
                                         return bytes.empty() || sink.write(bytes.data(), bytes.size());
                                       };
                                       const bool delivered = streaming ? job->stream(write) : job->write_body(write);
                                       if (!delivered) return false;
                                       sink.done();
                                       return true;
                                     });
  }
};

HttpServer::HttpServer(EngineBackend& backend, ServerOptions opts)
    : impl_(std::make_unique<Impl>(backend, std::move(opts))) {}
HttpServer::~HttpServer() { stop(); }

int HttpServer::bind() {
  int port = impl_->opts.port;
  if (port == 0) {
    port = impl_->http.bind_to_any_port(impl_->opts.host);
    if (port <= 0) fail("cannot listen on {} (any port)", impl_->opts.host);
  } else if (!impl_->http.bind_to_port(impl_->opts.host, port)) {
    fail("cannot listen on {}:{} (in use, or not a local address?)", impl_->opts.host, port);
  }
  impl_->http.raise_backlog(kListenBacklog);
  return port;
}

void HttpServer::run() {
  if (!impl_->stop_requested) impl_->http.listen_after_bind();
}

void HttpServer::stop() {
  // A stop before run() starts listening is remembered, so run() then returns at once.
  impl_->stop_requested = true;
  impl_->http.stop();
}

ServerMetrics& HttpServer::metrics() { return impl_->metrics; }

}  // namespace kvserve::server

#else  // no cpp-httplib in this build: the type exists so the CLI links, but cannot serve.

namespace kvserve::server {

bool http_server_available() { return false; }

struct HttpServer::Impl {
  ServerMetrics metrics;
};

HttpServer::HttpServer(EngineBackend&, ServerOptions) : impl_(std::make_unique<Impl>()) {}
HttpServer::~HttpServer() = default;
int HttpServer::bind() { fail("this kvserve was built without cpp-httplib (install libcpp-httplib-dev and rebuild)"); }
void HttpServer::run() {}
void HttpServer::stop() {}
ServerMetrics& HttpServer::metrics() { return impl_->metrics; }

}  // namespace kvserve::server

#endif
