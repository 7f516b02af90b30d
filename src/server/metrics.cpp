#include "server/metrics.h"

#include <fmt/format.h>

#include <algorithm>

namespace kvserve::server {

Histogram::Histogram(std::vector<double> upper_bounds)
    : bounds_(std::move(upper_bounds)), counts_(bounds_.size() + 1, 0) {
  std::sort(bounds_.begin(), bounds_.end());
}

void Histogram::observe(double value) {
  const size_t bucket = std::lower_bound(bounds_.begin(), bounds_.end(), value) - bounds_.begin();
  std::lock_guard lock(mu_);
  counts_[bucket]++;
  sum_ += value;
  count_++;
}

void Histogram::render(std::string& out, const std::string& name, const std::string& help) const {
  std::lock_guard lock(mu_);
  out += fmt::format("# HELP {} {}\n# TYPE {} histogram\n", name, help, name);
  uint64_t cumulative = 0;
  for (size_t i = 0; i < bounds_.size(); ++i) {
    cumulative += counts_[i];
    out += fmt::format("{}_bucket{{le=\"{}\"}} {}\n", name, bounds_[i], cumulative);
  }
  cumulative += counts_.back();
  out += fmt::format("{}_bucket{{le=\"+Inf\"}} {}\n{}_sum {}\n{}_count {}\n", name, cumulative, name, sum_, name, count_);
}

namespace {
// Bucket bounds in the spirit of vLLM's: fine where interactive serving lives, coarse in the tail.
std::vector<double> ttft_buckets() { return {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 20, 40, 80}; }
std::vector<double> tpot_buckets() { return {0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1, 2.5, 5}; }
std::vector<double> e2e_buckets() { return {0.3, 0.5, 0.8, 1, 1.5, 2, 2.5, 5, 10, 15, 20, 30, 40, 50, 60, 120, 240, 480}; }

void gauge(std::string& out, const char* name, const char* help, double value) {
  out += fmt::format("# HELP {} {}\n# TYPE {} gauge\n{} {}\n", name, help, name, name, value);
}
void counter(std::string& out, const char* name, const char* help, uint64_t value) {
  out += fmt::format("# HELP {} {}\n# TYPE {} counter\n{} {}\n", name, help, name, name, value);
}
}  // namespace

ServerMetrics::ServerMetrics() : ttft_(ttft_buckets()), tpot_(tpot_buckets()), e2e_(e2e_buckets()) {}

void ServerMetrics::observe_request(double ttft, double tpot, int completion_tokens, double e2e) {
  if (completion_tokens > 0) ttft_.observe(ttft);
  if (completion_tokens > 1) tpot_.observe(tpot);
  e2e_.observe(e2e);
}

void ServerMetrics::count_http_status(int status) {
  std::lock_guard lock(mu_);
  if (status >= 500) {
    requests_server_error_++;
  } else if (status >= 400) {
    requests_client_error_++;
  } else {
    requests_ok_++;
  }
}

std::string ServerMetrics::render(const EngineStats& s) const {
  std::string out;
  gauge(out, "kvserve_kv_cache_usage_ratio", "Fraction of KV cache blocks held by running sequences.", s.kv_usage);
  out += "# HELP kvserve_kv_blocks KV cache blocks by state.\n# TYPE kvserve_kv_blocks gauge\n";
  out += fmt::format("kvserve_kv_blocks{{state=\"free\"}} {}\n", s.free_blocks);
  out += fmt::format("kvserve_kv_blocks{{state=\"used\"}} {}\n", s.used_blocks);
  out += fmt::format("kvserve_kv_blocks{{state=\"cached\"}} {}\n", s.cached_blocks);
  gauge(out, "kvserve_kv_blocks_total", "KV cache blocks in the pool.", static_cast<double>(s.num_blocks));
  counter(out, "kvserve_prefix_cache_queries_total", "Prompt tokens looked up in the prefix cache.", s.prefix_queries);
  counter(out, "kvserve_prefix_cache_hits_total", "Prompt tokens served from the prefix cache.", s.prefix_hits);
  counter(out, "kvserve_prefix_cache_evictions_total", "Cached prefix blocks evicted (reused for new data).",
          s.prefix_evictions);
  counter(out, "kvserve_preemptions_total", "Requests preempted for lack of KV blocks.", s.preemptions);
  counter(out, "kvserve_rope_restarts_total",
          "Sequences recomputed with LongRoPE's long factors past the original context.", s.rope_restarts);
  counter(out, "kvserve_spec_decode_draft_tokens_total", "Speculative decoding: draft tokens proposed and verified.",
          s.draft_tokens);
  counter(out, "kvserve_spec_decode_accepted_tokens_total", "Speculative decoding: draft tokens taken.",
          s.accepted_draft_tokens);
  gauge(out, "kvserve_requests_running", "Requests being computed.", s.running);
  gauge(out, "kvserve_requests_waiting", "Requests queued for admission.", s.waiting);
  counter(out, "kvserve_prompt_tokens_total", "Prompt tokens computed or served from cache.", s.prompt_tokens);
  counter(out, "kvserve_generation_tokens_total", "Tokens generated.", s.generation_tokens);
  counter(out, "kvserve_requests_finished_total", "Requests finished by the engine.", s.requests_finished);
  {
    std::lock_guard lock(mu_);
    out += "# HELP kvserve_http_requests_total API responses by status class.\n# TYPE kvserve_http_requests_total counter\n";
    out += fmt::format("kvserve_http_requests_total{{status=\"2xx\"}} {}\n", requests_ok_);
    out += fmt::format("kvserve_http_requests_total{{status=\"4xx\"}} {}\n", requests_client_error_);
    out += fmt::format("kvserve_http_requests_total{{status=\"5xx\"}} {}\n", requests_server_error_);
  }
  ttft_.render(out, "kvserve_time_to_first_token_seconds", "Time from request arrival to its first token.");
  tpot_.render(out, "kvserve_time_per_output_token_seconds", "Mean time between output tokens after the first.");
  e2e_.render(out, "kvserve_e2e_request_latency_seconds", "Time from request arrival to its last token.");
  return out;
}

}  // namespace kvserve::server
