#pragma once
// Prometheus text exposition for /metrics: engine gauges and counters (read from EngineStats at scrape
// time) plus latency histograms the server measures per request from event timings.
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "engine/engine.h"

namespace kvserve::server {

// A cumulative Prometheus histogram with fixed upper bounds (seconds).
class Histogram {
 public:
  explicit Histogram(std::vector<double> upper_bounds);
  void observe(double value);
  // Appends # HELP / # TYPE and the _bucket{le=...}, _sum and _count lines.
  void render(std::string& out, const std::string& name, const std::string& help) const;

 private:
  mutable std::mutex mu_;
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;  // per bucket, not cumulative; the +Inf bucket is last
  double sum_ = 0;
  uint64_t count_ = 0;
};

class ServerMetrics {
 public:
  ServerMetrics();

  // One finished request: time to first token, mean time per output token after the first (skipped
  // when fewer than two tokens), and end-to-end latency, all in seconds.
  void observe_request(double ttft, double tpot, int completion_tokens, double e2e);
  void count_http_status(int status);

  std::string render(const EngineStats& stats) const;

 private:
  Histogram ttft_, tpot_, e2e_;
  mutable std::mutex mu_;
  uint64_t requests_ok_ = 0, requests_client_error_ = 0, requests_server_error_ = 0;
};

}  // namespace kvserve::server
