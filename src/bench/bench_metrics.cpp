#include "bench/bench_metrics.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

namespace kvserve::bench {

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double rank = std::clamp(p, 0.0, 100.0) / 100.0 * static_cast<double>(v.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(rank));
  const size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (rank - static_cast<double>(lo));
}

LatencySummary summarize_ms(const std::vector<double>& seconds) {
  LatencySummary s;
  s.count = seconds.size();
  if (seconds.empty()) return s;
  std::vector<double> ms;
  ms.reserve(seconds.size());
  for (double x : seconds) ms.push_back(x * 1000.0);
  double sum = 0;
  for (double x : ms) sum += x;
  s.mean = sum / static_cast<double>(ms.size());
  s.p50 = percentile(ms, 50);
  s.p90 = percentile(ms, 90);
  s.p99 = percentile(ms, 99);
  s.max = *std::max_element(ms.begin(), ms.end());
  return s;
}

double union_length(std::vector<std::pair<double, double>> iv) {
  std::sort(iv.begin(), iv.end());
  double total = 0, cur_b = 0, cur_e = 0;
  bool open = false;
  for (const auto& [b, e] : iv) {
    if (e <= b) continue;
    if (open && b <= cur_e) {
      cur_e = std::max(cur_e, e);
    } else {
      if (open) total += cur_e - cur_b;
      cur_b = b, cur_e = e, open = true;
    }
  }
  if (open) total += cur_e - cur_b;
  return total;
}

BenchSummary summarize(const std::vector<RequestRecord>& records, double duration_s) {
  BenchSummary s;
  s.requests = static_cast<int>(records.size());
  s.duration_s = duration_s;
  std::vector<double> ttft, tpot, itl, e2e;
  std::vector<std::pair<double, double>> prefill_iv, decode_iv;
  int64_t computed_prompt = 0, decode_tokens = 0;
  for (const RequestRecord& r : records) {
    if (!r.ok) {
      ++s.failed;
      if (s.first_error.empty()) s.first_error = r.error;
      continue;
    }
    ++s.completed;
    s.prompt_tokens += r.prompt_tokens;
    s.output_tokens += r.output_tokens;
    s.cached_tokens += r.cached_tokens;
    e2e.push_back(r.end - r.start);
    if (r.first < 0) continue;
    ttft.push_back(r.first - r.start);
    prefill_iv.emplace_back(r.start, r.first);
    computed_prompt += r.prompt_tokens - r.cached_tokens;
    if (r.output_tokens > 1) {
      tpot.push_back((r.end - r.first) / (r.output_tokens - 1));
      decode_iv.emplace_back(r.first, r.end);
      decode_tokens += r.output_tokens - 1;
    }
    for (size_t i = 1; i < r.chunk_times.size(); ++i) itl.push_back(r.chunk_times[i] - r.chunk_times[i - 1]);
  }
  if (duration_s > 0) {
    s.requests_per_s = s.completed / duration_s;
    s.output_tokens_per_s = static_cast<double>(s.output_tokens) / duration_s;
    s.total_tokens_per_s = static_cast<double>(s.prompt_tokens + s.output_tokens) / duration_s;
  }
  // The window in which every completed request was past its first token and not yet finished.
  double last_first = -1, first_end = -1;
  bool all_started = s.completed > 0;
  for (const RequestRecord& r : records) {
    if (!r.ok) continue;
    if (r.first < 0) all_started = false;
    last_first = std::max(last_first, r.first);
    first_end = first_end < 0 ? r.end : std::min(first_end, r.end);
  }
  if (all_started && first_end > last_first) {
    int64_t steady = 0;
    for (const RequestRecord& r : records) {
      if (!r.ok) continue;
      for (size_t i = 0; i < r.chunk_times.size(); ++i)
        if (r.chunk_times[i] > last_first && r.chunk_times[i] <= first_end)
          steady += i < r.chunk_tokens.size() ? r.chunk_tokens[i] : 1;
    }
    s.steady_decode_tokens_per_s = static_cast<double>(steady) / (first_end - last_first);
  }
  const double prefill_time = union_length(prefill_iv);
  const double decode_time = union_length(decode_iv);
  if (prefill_time > 0) s.prefill_tokens_per_s = static_cast<double>(computed_prompt) / prefill_time;
  if (decode_time > 0) s.decode_tokens_per_s = static_cast<double>(decode_tokens) / decode_time;
  if (s.prompt_tokens > 0) s.prefix_hit_rate = static_cast<double>(s.cached_tokens) / static_cast<double>(s.prompt_tokens);
  s.ttft = summarize_ms(ttft);
  s.tpot = summarize_ms(tpot);
  s.itl = summarize_ms(itl);
  s.e2e = summarize_ms(e2e);
  return s;
}

nlohmann::json LatencySummary::to_json() const {
  return {{"count", count}, {"mean", mean}, {"p50", p50}, {"p90", p90}, {"p99", p99}, {"max", max}};
}

nlohmann::json BenchSummary::to_json() const {
  nlohmann::json j = {{"requests", requests},
                      {"completed", completed},
                      {"failed", failed},
                      {"prompt_tokens", prompt_tokens},
                      {"output_tokens", output_tokens},
                      {"cached_tokens", cached_tokens},
                      {"duration_s", duration_s},
                      {"requests_per_s", requests_per_s},
                      {"output_tokens_per_s", output_tokens_per_s},
                      {"total_tokens_per_s", total_tokens_per_s},
                      {"prefill_tokens_per_s", prefill_tokens_per_s},
                      {"decode_tokens_per_s", decode_tokens_per_s},
                      {"steady_decode_tokens_per_s", steady_decode_tokens_per_s},
                      {"prefix_hit_rate", prefix_hit_rate},
                      {"ttft_ms", ttft.to_json()},
                      {"tpot_ms", tpot.to_json()},
                      {"itl_ms", itl.to_json()},
                      {"e2e_ms", e2e.to_json()}};
  if (!first_error.empty()) j["first_error"] = first_error;
  return j;
}

std::string BenchSummary::to_text() const {
  std::string out;
  out += fmt::format("requests:          {} completed, {} failed in {:.2f} s\n", completed, failed, duration_s);
  if (!first_error.empty()) out += fmt::format("first error:       {}\n", first_error);
  out += fmt::format("tokens:            {} prompt ({} from the prefix cache, hit rate {:.1f}%), {} output\n",
                     prompt_tokens, cached_tokens, 100.0 * prefix_hit_rate, output_tokens);
  out += fmt::format("throughput:        {:.2f} req/s, {:.1f} output tok/s, {:.1f} total tok/s\n", requests_per_s,
                     output_tokens_per_s, total_tokens_per_s);
  out += fmt::format("prefill:           {:.1f} tok/s\n", prefill_tokens_per_s);
  out += fmt::format("decode:            {:.1f} tok/s ({:.1f} tok/s while all {} requests were decoding)\n",
                     decode_tokens_per_s, steady_decode_tokens_per_s, completed);
  auto line = [&](const char* name, const LatencySummary& l) {
    out += fmt::format("{:<18} mean {:9.2f}  p50 {:9.2f}  p90 {:9.2f}  p99 {:9.2f}  (ms, n={})\n", name, l.mean, l.p50,
                       l.p90, l.p99, l.count);
  };
  line("TTFT:", ttft);
  line("TPOT:", tpot);
  line("ITL:", itl);
  line("E2E latency:", e2e);
  return out;
}

}  // namespace kvserve::bench
