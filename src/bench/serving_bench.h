#pragma once
// Serving benchmark: streams /v1/completions requests at any OpenAI-compatible server (kvserve serve,
// llama.cpp's llama-server, vLLM) and measures TTFT / TPOT / ITL / throughput from the client side,
// either with a fixed number of requests in flight (closed loop) or with Poisson arrivals at a rate.
#include <cstdint>
#include <string>
#include <vector>

#include "bench/bench_metrics.h"
#include "bench/prompts.h"

namespace kvserve::bench {

struct ServingBenchOptions {
  std::string url = "http://127.0.0.1:8080";  // base URL; a trailing /v1 is accepted
  std::string model;                          // "model" field; empty = the first id of GET /v1/models
  std::string api_key;
  PromptSpec prompts;
  std::vector<int32_t> token_pool;  // ids to draw prompts from (empty = [100, 500))
  int32_t bos = -1;                 // prepended to token-id prompts when >= 0
  bool text_prompts = false;        // send words instead of token ids
  int output_len = 128;
  int concurrency = 1;        // requests in flight (closed loop), or the cap with request_rate
  double request_rate = 0;    // requests per second, Poisson arrivals; 0 = closed loop
  bool ignore_eos = true;     // ask for exactly output_len tokens ("ignore_eos", understood by all three)
  float temperature = 0;
  int warmup = 1;
  double timeout_s = 600;
};

struct ServingBenchResult {
  BenchSummary summary;
  std::string model;  // the model name used
  std::vector<RequestRecord> records;
};

// Throws Error when the URL is malformed; request failures are counted in summary.failed.
ServingBenchResult run_serving_bench(const ServingBenchOptions& opts);

// Parses one server-sent-events stream incrementally: feed() bytes as they arrive; it calls on_data for
// every "data:" payload of every complete event.
class SSEParser {
 public:
  template <typename F>
  void feed(const char* p, size_t n, F&& on_data) {
    buf_.append(p, n);
    for (;;) {
      size_t end = buf_.find("\n\n");
      size_t skip = 2;
      const size_t crlf = buf_.find("\r\n\r\n");
      if (crlf != std::string::npos && (end == std::string::npos || crlf < end)) end = crlf, skip = 4;
      if (end == std::string::npos) return;
      const std::string event = buf_.substr(0, end);
      buf_.erase(0, end + skip);
      size_t pos = 0;
      while (pos <= event.size()) {
        size_t nl = event.find('\n', pos);
        if (nl == std::string::npos) nl = event.size();
        std::string line = event.substr(pos, nl - pos);
        if (!line.empty() && line.back() == '\r') line.pop_back();
        if (line.rfind("data:", 0) == 0) {
          size_t s = 5;
          while (s < line.size() && line[s] == ' ') ++s;
          on_data(line.substr(s));
        }
        pos = nl + 1;
      }
    }
  }

 private:
  std::string buf_;
};

}  // namespace kvserve::bench
