#pragma once
// What `kvserve bench` measures, for the offline (Engine) and serving (HTTP client) modes alike: one
// record per request with the arrival time of every token chunk, summarised into throughputs and
// latency percentiles (vLLM benchmark_serving's definitions; percentiles interpolate like numpy).
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace kvserve::bench {

// Times are seconds since the start of the measured run.
struct RequestRecord {
  double start = 0;                 // request submitted
  double first = -1;                // first token arrived (-1: none)
  double end = 0;                   // last event (finished or failed)
  std::vector<double> chunk_times;  // arrival of each delivery that carried tokens (first included)
  std::vector<int> chunk_tokens;    // tokens of each delivery (empty: one each)
  int prompt_tokens = 0;
  int output_tokens = 0;
  int cached_tokens = 0;  // prompt tokens served from the prefix cache
  bool ok = false;
  std::string error;
};

struct LatencySummary {
  size_t count = 0;
  double mean = 0, p50 = 0, p90 = 0, p99 = 0, max = 0;  // milliseconds
  nlohmann::json to_json() const;
};

struct BenchSummary {
  int requests = 0;
  int completed = 0;
  int failed = 0;
  std::string first_error;
  int64_t prompt_tokens = 0;
  int64_t output_tokens = 0;
  int64_t cached_tokens = 0;
  double duration_s = 0;
  double requests_per_s = 0;
  double output_tokens_per_s = 0;  // all output tokens / duration
  double total_tokens_per_s = 0;   // (prompt + output) / duration
  // Prompt tokens actually computed (prompt - cached) over the time some request was waiting for its
  // first token (the union of every [start, first] interval): the prefill rate.
  double prefill_tokens_per_s = 0;
  // Tokens after each request's first over the time some request was decoding (union of [first, end]).
  double decode_tokens_per_s = 0;
  // Tokens delivered while every request was decoding (after the last first token, up to the first
  // request's end) over that window: the pure decode rate of the whole batch, with no prefill mixed in.
  // 0 when the requests did not all overlap (e.g. more requests than --batch).
  double steady_decode_tokens_per_s = 0;
  double prefix_hit_rate = 0;  // cached / prompt tokens
  LatencySummary ttft;         // time to first token
  LatencySummary tpot;         // per request: (end - first) / (output - 1)
  LatencySummary itl;          // gap between consecutive token deliveries
  LatencySummary e2e;          // end - start

  nlohmann::json to_json() const;
  std::string to_text() const;
};

// numpy.percentile (linear interpolation) of v, p in [0, 100]; 0 for an empty vector.
double percentile(std::vector<double> v, double p);
LatencySummary summarize_ms(const std::vector<double>& seconds);
// Total length covered by a set of [begin, end] intervals.
double union_length(std::vector<std::pair<double, double>> intervals);
BenchSummary summarize(const std::vector<RequestRecord>& records, double duration_s);

}  // namespace kvserve::bench
