#include "bench/serving_bench.h"

#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <random>
#include <thread>

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace kvserve::bench {

namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

struct Endpoint {
  std::string base;    // scheme://host:port
  std::string prefix;  // path before /v1
};

Endpoint parse_url(const std::string& url) {
  const size_t scheme = url.find("://");
  if (scheme == std::string::npos || (url.compare(0, scheme, "http") != 0 && url.compare(0, scheme, "https") != 0))
    fail("bench: --url '{}' must look like http://host:port", url);
  const size_t path = url.find('/', scheme + 3);
  Endpoint e;
  e.base = url.substr(0, path);
  e.prefix = path == std::string::npos ? "" : url.substr(path);
  while (!e.prefix.empty() && e.prefix.back() == '/') e.prefix.pop_back();
  if (e.prefix.size() >= 3 && e.prefix.compare(e.prefix.size() - 3, 3, "/v1") == 0) e.prefix.resize(e.prefix.size() - 3);
  if (e.base.size() <= scheme + 3) fail("bench: --url '{}' has no host", url);
  return e;
}

std::unique_ptr<httplib::Client> make_client(const Endpoint& e, const ServingBenchOptions& o) {
  auto c = std::make_unique<httplib::Client>(e.base);
  if (!c->is_valid()) fail("bench: cannot make a client for '{}'", e.base);
  const auto secs = static_cast<time_t>(o.timeout_s);
  c->set_connection_timeout(10, 0);
  c->set_read_timeout(secs, 0);
  c->set_write_timeout(secs, 0);
  if (!o.api_key.empty()) c->set_bearer_token_auth(o.api_key);
  return c;
}

std::string discover_model(const Endpoint& e, const ServingBenchOptions& o) {
  auto c = make_client(e, o);
  auto res = c->Get(e.prefix + "/v1/models");
  if (!res) {
    // httplib names a refused or unreachable connection just "Connection".
    const bool connect = res.error() == httplib::Error::Connection;
    fail("bench: cannot reach {}: {}", e.base,
         connect ? std::string("could not connect (is a server listening there?)") : httplib::to_string(res.error()));
  }
  if (res->status != 200) fail("bench: GET /v1/models returned HTTP {}: {}", res->status, res->body.substr(0, 300));
  try {
    const json j = json::parse(res->body);
    if (j.contains("data") && j["data"].is_array() && !j["data"].empty()) return j["data"][0].at("id").get<std::string>();
  } catch (const json::exception&) {
  }
  fail("bench: GET /v1/models gave no model id; pass --served-model NAME");
}

// One streaming request; fills r (times relative to t0).
void run_request(const Endpoint& e, const ServingBenchOptions& o, const std::string& model,
                 const std::vector<int32_t>& ids, int max_tokens, Clock::time_point t0, RequestRecord& r) {
  auto now = [&] { return std::chrono::duration<double>(Clock::now() - t0).count(); };
  json body = {{"model", model},
               {"max_tokens", max_tokens},
               {"temperature", o.temperature},
               {"stream", true},
               {"stream_options", {{"include_usage", true}}}};
  if (o.ignore_eos) body["ignore_eos"] = true;
  if (o.text_prompts) {
    std::vector<int32_t> words = ids;
    if (o.bos >= 0 && !words.empty() && words.front() == o.bos) words.erase(words.begin());
    body["prompt"] = ids_to_words(words);
  } else {
    body["prompt"] = ids;
  }
  const int sent_prompt_tokens = static_cast<int>(ids.size());
  bool have_usage = false, saw_done = false;
  int chunks = 0;
  std::string error;
  SSEParser sse;
  auto on_data = [&](const std::string& data) {
    if (data == "[DONE]") {
      saw_done = true;
      return;
    }
    json j;
    try {
      j = json::parse(data);
    } catch (const json::exception&) {
      if (error.empty()) error = "unparseable stream chunk: " + data.substr(0, 200);
      return;
    }
    if (j.contains("error")) {
      if (error.empty()) error = "server error: " + j["error"].dump();
      return;
    }
    if (j.contains("choices") && j["choices"].is_array() && !j["choices"].empty()) {
      const json& c = j["choices"][0];
      const bool has_text = c.contains("text") && c["text"].is_string() && !c["text"].get<std::string>().empty();
      const bool finishing = c.contains("finish_reason") && !c["finish_reason"].is_null();
      // A server sends no chunk for a token whose text is still held back (the first bytes of a UTF-8
      // character), so a request whose every token was held back (a random-weight model repeating a byte
      // token) shows its tokens first in the finishing chunk, maybe with no text at all: that chunk then
      // carries them.
      if (has_text || !finishing || r.first < 0) {
        const double t = now();
        if (r.first < 0) r.first = t;
        r.chunk_times.push_back(t);
        ++chunks;
      }
    }
    if (j.contains("usage") && j["usage"].is_object()) {
      const json& u = j["usage"];
      have_usage = true;
      r.prompt_tokens = u.value("prompt_tokens", sent_prompt_tokens);
      r.output_tokens = u.value("completion_tokens", chunks);
      if (u.contains("prompt_tokens_details") && u["prompt_tokens_details"].is_object())
        r.cached_tokens = u["prompt_tokens_details"].value("cached_tokens", 0);
    }
  };

  auto client = make_client(e, o);
  httplib::Request req;
  req.method = "POST";
  req.path = e.prefix + "/v1/completions";
  req.body = body.dump();
  req.set_header("Content-Type", "application/json");
  req.set_header("Accept", "text/event-stream");
  int status = 0;
  std::string error_body;
  req.response_handler = [&](const httplib::Response& resp) {
    status = resp.status;
    return true;
  };
  req.content_receiver = [&](const char* p, size_t n, uint64_t, uint64_t) {
    if (status != 200) {
      if (error_body.size() < 1000) error_body.append(p, std::min<size_t>(n, 1000));
      return true;
    }
    sse.feed(p, n, on_data);
    return true;
  };
  r.start = now();
  auto res = client->send(req);
  r.end = now();
  if (!res) {
    r.error = "request failed: " + httplib::to_string(res.error());
  } else if (status != 200 && res->status != 200) {
    r.error = "HTTP " + std::to_string(status ? status : res->status) + ": " + error_body.substr(0, 300);
  } else if (!error.empty()) {
    r.error = error;
  } else if (chunks == 0) {
    r.error = "the stream carried no tokens";
  } else {
    r.ok = true;
    (void)saw_done;
    if (!have_usage) {
      r.prompt_tokens = sent_prompt_tokens;
      r.output_tokens = chunks;
    }
  }
}

}  // namespace

ServingBenchResult run_serving_bench(const ServingBenchOptions& o) {
  if (o.concurrency < 1) fail("bench: --concurrency must be at least 1, got {}", o.concurrency);
  if (o.output_len < 1) fail("bench: output length must be at least 1, got {}", o.output_len);
  if (o.request_rate < 0) fail("bench: --request-rate must not be negative");
  const Endpoint e = parse_url(o.url);
  ServingBenchResult res;
  res.model = o.model.empty() ? discover_model(e, o) : o.model;
  const std::vector<int32_t> pool = o.token_pool.empty() ? id_range_pool(100, 500) : o.token_pool;

  if (o.warmup > 0) {
    PromptSpec w;
    w.num_prompts = o.warmup;
    w.prompt_len = std::min(o.prompts.prompt_len, 16);
    w.seed = o.prompts.seed ^ 0x5bd1e995ull;
    for (const auto& ids : make_prompts(w, pool, o.bos)) {
      RequestRecord r;
      run_request(e, o, res.model, ids, std::min(o.output_len, 4), Clock::now(), r);
      if (!r.ok) fail("bench: warm-up request failed: {}", r.error);
    }
  }

  const std::vector<std::vector<int32_t>> prompts = make_prompts(o.prompts, pool, o.bos);
  std::vector<RequestRecord> records(prompts.size());
  const Clock::time_point t0 = Clock::now();
  if (o.request_rate <= 0) {
    std::atomic<size_t> next{0};
    std::vector<std::thread> workers;
    const int n_workers = std::min<int>(o.concurrency, static_cast<int>(prompts.size()));
    for (int w = 0; w < n_workers; ++w) {
      workers.emplace_back([&] {
        for (size_t i = next++; i < prompts.size(); i = next++)
          run_request(e, o, res.model, prompts[i], o.output_len, t0, records[i]);
      });
    }
    for (auto& t : workers) t.join();
  } else {
    // Poisson arrivals; at most `concurrency` in flight (later arrivals wait for a slot).
    std::mt19937_64 rng(o.prompts.seed ^ 0x9e3779b97f4a7c15ull);
    std::exponential_distribution<double> gap(o.request_rate);
    std::mutex mu;
    std::condition_variable cv;
    int in_flight = 0;
    std::vector<std::thread> threads;
    double at = 0;
    for (size_t i = 0; i < prompts.size(); ++i) {
      std::this_thread::sleep_until(t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(at)));
      {
        std::unique_lock lk(mu);
        cv.wait(lk, [&] { return in_flight < o.concurrency; });
        ++in_flight;
      }
      threads.emplace_back([&, i] {
        run_request(e, o, res.model, prompts[i], o.output_len, t0, records[i]);
        std::lock_guard lk(mu);
        --in_flight;
        cv.notify_all();
      });
      at += gap(rng);
    }
    for (auto& t : threads) t.join();
  }
  const double duration = std::chrono::duration<double>(Clock::now() - t0).count();
  res.summary = summarize(records, duration);
  res.records = std::move(records);
  return res;
}

}  // namespace kvserve::bench
