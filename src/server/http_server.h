#pragma once
// The OpenAI-compatible HTTP front end (cpp-httplib): routes, API-key auth, OpenAI error bodies, and
// the bridge from HTTP worker threads to CompletionJobs. One worker thread per connection, from a pool
// sized for hundreds of concurrent streams.
#include <chrono>
#include <cstddef>
#include <memory>
#include <string>

#include "server/engine_backend.h"
#include "server/metrics.h"

namespace kvserve::server {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;  // 0 = any free port (see HttpServer::bind)
  std::string api_key;  // empty = no auth
  bool share_prefix_cache = false;  // one prefix-cache namespace for every API key
  std::string model_name = "kvserve";
  size_t max_body_bytes = size_t{16} << 20;  // larger bodies get 413
  int http_threads = 320;                    // concurrent connections served at once
  std::chrono::milliseconds keep_alive{250};  // idle streams probe their client this often
  bool split_reasoning = false;               // --reasoning-format deepseek: chat replies carry reasoning_content
  // --tool-call-parser: how tool calls are read out of chat replies ("auto": the format the model's chat
  // template writes, detect_tool_call_format; or a name tool_call_format_named knows).
  std::string tool_call_parser = "auto";
};

// True when this build has an HTTP server (cpp-httplib was found).
bool http_server_available();

class HttpServer {
 public:
  HttpServer(EngineBackend& backend, ServerOptions opts);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds and listens; returns the port. Throws Error when the address is unavailable.
  int bind();
  // Serves until stop(); returns once every in-flight response has been written.
  void run();
  // Stops accepting connections (callable from any thread).
  void stop();

  ServerMetrics& metrics();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvserve::server
