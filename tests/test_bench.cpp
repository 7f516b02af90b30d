// kvserve bench: the metric definitions (percentiles, interval unions, summaries), the SSE parser, prompt
// generation, an offline run through the Engine on stories260K (library and `kvserve bench --json`),
// and serving mode against a real `kvserve serve` started here. Only counts are checked, never timings.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "bench/bench_metrics.h"
#include "bench/bound_segments.h"
#include "bench/offline_bench.h"
#include "bench/prompts.h"
#include "bench/serving_bench.h"
#include "bench/triad.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "model/model.h"
#include "run_command.h"
#include "stories_model.h"

extern char** environ;

using namespace kvserve;
using namespace kvserve::bench;
using nlohmann::json;
using namespace std::chrono_literals;

namespace {

const std::string kStories = KVSERVE_SHARED_DIR "/models/stories260K/stories260K.bin";
const std::string kTok = KVSERVE_SHARED_DIR "/models/stories260K/tok512.bin";

const Model& stories() { return test::stories260k(); }

// stories260K as `kvserve serve` can load it: serve has no --tokenizer flag, and a llama2.c checkpoint
// finds tokenizer.bin beside itself, so a temporary folder holds links named that way.
class StoriesFolder {
 public:
  StoriesFolder() {
    dir_ = std::filesystem::temp_directory_path() / ("kvserve-bench-" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
    std::error_code ec;
    std::filesystem::create_symlink(std::filesystem::absolute(kStories), dir_ / "stories260K.bin", ec);
    std::filesystem::create_symlink(std::filesystem::absolute(kTok), dir_ / "tokenizer.bin", ec);
  }
  ~StoriesFolder() {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  std::string model() const { return (dir_ / "stories260K.bin").string(); }
  std::string log() const { return (dir_ / "serve.log").string(); }

 private:
  std::filesystem::path dir_;
};

// `kvserve serve` on a free port; SIGKILLed when the test ends.
class Server {
 public:
  Server(const std::string& model, const std::string& log) : log_(log) {
    std::vector<std::string> args = {
        KVSERVE_BINARY,      "serve", "-m", model, "--host", "127.0.0.1", "--port", "0", "--max-num-seqs", "8",
        "--kv-cache-memory", "64M"};
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 2, log_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    if (posix_spawn(&pid_, KVSERVE_BINARY, &fa, nullptr, argv.data(), environ) != 0) pid_ = -1;
    posix_spawn_file_actions_destroy(&fa);
  }
  ~Server() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }
  int wait_for_port() {
    const std::regex serving(R"(on http://127\.0\.0\.1:(\d+))");
    for (int i = 0; i < 600 && pid_ > 0; ++i) {  // up to 30 s
      std::ifstream in(log_);
      std::stringstream ss;
      ss << in.rdbuf();
      const std::string text = ss.str();
      std::smatch m;
      if (std::regex_search(text, m, serving)) return std::stoi(m[1]);
      if (::waitpid(pid_, nullptr, WNOHANG) == pid_) {
        pid_ = -1;
        return 0;
      }
      std::this_thread::sleep_for(50ms);
    }
    return 0;
  }
  bool alive() const { return pid_ > 0 && ::kill(pid_, 0) == 0; }

 private:
  std::string log_;
  pid_t pid_ = -1;
};

}  // namespace

TEST(BenchMetrics, PercentilesInterpolateLikeNumpy) {
  const std::vector<double> v = {4, 1, 3, 2};
  EXPECT_DOUBLE_EQ(percentile(v, 0), 1);
  EXPECT_DOUBLE_EQ(percentile(v, 50), 2.5);
  EXPECT_DOUBLE_EQ(percentile(v, 90), 3.7);  // numpy.percentile([1,2,3,4], 90)
  EXPECT_DOUBLE_EQ(percentile(v, 100), 4);
  EXPECT_DOUBLE_EQ(percentile({}, 50), 0);
  EXPECT_DOUBLE_EQ(percentile({7}, 99), 7);
  const LatencySummary s = summarize_ms({0.001, 0.003});
  EXPECT_EQ(s.count, 2u);
  EXPECT_DOUBLE_EQ(s.mean, 2.0);
  EXPECT_DOUBLE_EQ(s.max, 3.0);
}

TEST(BenchMetrics, UnionOfIntervals) {
  EXPECT_DOUBLE_EQ(union_length({}), 0);
  EXPECT_DOUBLE_EQ(union_length({{0, 1}, {2, 3}}), 2);
  EXPECT_DOUBLE_EQ(union_length({{0, 2}, {1, 3}, {1.5, 2.5}}), 3);
  EXPECT_DOUBLE_EQ(union_length({{5, 6}, {0, 1}, {0.5, 1}}), 2);
  EXPECT_DOUBLE_EQ(union_length({{1, 1}, {2, 1}}), 0);
}

TEST(BenchMetrics, SummaryOfHandMadeRecords) {
  // Two requests one after the other (batch 1): prefill 1 s each, decode 4 tokens in 2 s each.
  std::vector<RequestRecord> rs(3);
  rs[0] = {0.0, 1.0, 3.0, {1.0, 1.5, 2.0, 2.5, 3.0}, {}, 100, 5, 0, true, ""};
  rs[1] = {3.0, 4.0, 6.0, {4.0, 4.5, 5.0, 5.5, 6.0}, {}, 100, 5, 50, true, ""};
  rs[2].error = "HTTP 500: boom";
  const BenchSummary s = summarize(rs, 6.0);
  EXPECT_EQ(s.requests, 3);
  EXPECT_EQ(s.completed, 2);
  EXPECT_EQ(s.failed, 1);
  EXPECT_EQ(s.first_error, "HTTP 500: boom");
  EXPECT_EQ(s.prompt_tokens, 200);
  EXPECT_EQ(s.output_tokens, 10);
  EXPECT_EQ(s.cached_tokens, 50);
  EXPECT_DOUBLE_EQ(s.prefix_hit_rate, 0.25);
  EXPECT_DOUBLE_EQ(s.prefill_tokens_per_s, 150.0 / 2.0);  // 100 + 50 computed tokens over 2 s
  EXPECT_DOUBLE_EQ(s.decode_tokens_per_s, 8.0 / 4.0);
  EXPECT_DOUBLE_EQ(s.requests_per_s, 2.0 / 6.0);
  EXPECT_DOUBLE_EQ(s.output_tokens_per_s, 10.0 / 6.0);
  EXPECT_DOUBLE_EQ(s.ttft.p50, 1000.0);
  EXPECT_DOUBLE_EQ(s.tpot.mean, 500.0);
  EXPECT_EQ(s.itl.count, 8u);
  EXPECT_DOUBLE_EQ(s.itl.p99, 500.0);
  EXPECT_DOUBLE_EQ(s.e2e.mean, 3000.0);
  EXPECT_DOUBLE_EQ(s.steady_decode_tokens_per_s, 0);  // one after the other: never both decoding
  const json j = s.to_json();
  EXPECT_EQ(j["completed"], 2);
  EXPECT_EQ(j["ttft_ms"]["count"], 2);
  EXPECT_FALSE(s.to_text().empty());
}

TEST(BenchMetrics, SteadyDecodeCountsOnlyTheAllDecodingWindow) {
  // Two overlapping requests: b's first token at 2 s, a ends at 4 s; in (2, 4] a delivers 4 tokens (one
  // delivery of 2) and b 2.
  std::vector<RequestRecord> rs(2);
  rs[0] = {0.0, 1.0, 4.0, {1.0, 2.0, 2.5, 3.0, 4.0}, {1, 1, 1, 2, 1}, 10, 6, 0, true, ""};
  rs[1] = {0.5, 2.0, 5.0, {2.0, 3.0, 4.0, 5.0}, {}, 10, 4, 0, true, ""};
  const BenchSummary s = summarize(rs, 5.0);
  EXPECT_DOUBLE_EQ(s.steady_decode_tokens_per_s, (1 + 2 + 1 + 1 + 1) / 2.0);
  EXPECT_DOUBLE_EQ(s.decode_tokens_per_s, (5.0 + 3.0) / 4.0);  // union of [1, 4] and [2, 5]
}

TEST(BenchSSE, EventsSplitAcrossReads) {
  SSEParser p;
  std::vector<std::string> got;
  auto on = [&](const std::string& d) { got.push_back(d); };
  const std::string stream = "data: {\"a\":1}\n\ndata:{\"b\":2}\r\n\r\n: comment\n\ndata: [DONE]\n\n";
  for (char c : stream) p.feed(&c, 1, on);
  EXPECT_EQ(got, (std::vector<std::string>{"{\"a\":1}", "{\"b\":2}", "[DONE]"}));
}

TEST(BenchPrompts, LengthsBosAndSharedPrefixes) {
  PromptSpec s;
  s.num_prompts = 6;
  s.prompt_len = 20;
  s.prefix_len = 8;
  s.prefix_groups = 2;
  s.seed = 3;
  const std::vector<int32_t> pool = id_range_pool(10, 20);
  const auto ps = make_prompts(s, pool, 1);
  ASSERT_EQ(ps.size(), 6u);
  for (size_t i = 0; i < ps.size(); ++i) {
    ASSERT_EQ(ps[i].size(), 20u);
    EXPECT_EQ(ps[i][0], 1);
    for (size_t k = 1; k < 20; ++k) EXPECT_TRUE(ps[i][k] >= 10 && ps[i][k] < 20);
    const auto& same_group = ps[i % 2];
    EXPECT_TRUE(std::equal(ps[i].begin(), ps[i].begin() + 8, same_group.begin()));
  }
  EXPECT_NE(std::vector<int32_t>(ps[0].begin(), ps[0].begin() + 8),
            std::vector<int32_t>(ps[1].begin(), ps[1].begin() + 8));
  EXPECT_EQ(make_prompts(s, pool, 1), ps);  // reproducible
  s.prefix_len = 21;
  EXPECT_THROW(make_prompts(s, pool, 1), Error);

  const std::vector<int32_t> vp = token_pool(stories().vocab);
  EXPECT_GT(vp.size(), 200u);
  for (int32_t id : vp) {
    EXPECT_NE(id, stories().vocab.bos_id);
    EXPECT_NE(id, stories().vocab.eos_id);
  }
  EXPECT_EQ(ids_to_words({0, 1, 2}), "the of and");
}

TEST(BenchOffline, CountsAreRightOnStories260K) {
  OfflineBenchOptions o;
  o.prompts.num_prompts = 6;
  o.prompts.prompt_len = 24;
  o.output_len = 10;
  o.batch = 3;
  const OfflineBenchResult r = run_offline_bench(stories(), o);
  const BenchSummary& s = r.summary;
  EXPECT_EQ(s.requests, 6);
  EXPECT_EQ(s.completed, 6);
  EXPECT_EQ(s.failed, 0) << s.first_error;
  EXPECT_EQ(s.output_tokens, 6 * 10);
  EXPECT_EQ(s.prompt_tokens, 6 * 24);
  EXPECT_EQ(s.ttft.count, 6u);
  EXPECT_EQ(s.tpot.count, 6u);
  EXPECT_EQ(s.e2e.count, 6u);
  EXPECT_GE(s.itl.count, 6u);
  EXPECT_LE(s.itl.count, 6u * 9);
  EXPECT_GT(s.duration_s, 0);
  EXPECT_GT(s.prefill_tokens_per_s, 0);
  EXPECT_GT(s.decode_tokens_per_s, 0);
  EXPECT_EQ(s.steady_decode_tokens_per_s, 0);  // 6 requests, 3 at a time: never all decoding together
  EXPECT_GT(s.output_tokens_per_s, 0);
  EXPECT_LE(s.ttft.p50, s.ttft.p90);
  EXPECT_LE(s.ttft.p90, s.ttft.p99);
  EXPECT_EQ(r.engine_stats.preemptions, 0u);
}

TEST(BenchOffline, SharedPrefixesHitTheCache) {
  OfflineBenchOptions o;
  o.prompts.num_prompts = 5;
  o.prompts.prompt_len = 48;
  o.prompts.prefix_len = 32;  // two full blocks of 16
  o.output_len = 4;
  o.batch = 1;  // one at a time: every request after the first finds the prefix cached
  const OfflineBenchResult r = run_offline_bench(stories(), o);
  EXPECT_EQ(r.summary.completed, 5);
  EXPECT_EQ(r.summary.cached_tokens, 4 * 32);
  EXPECT_DOUBLE_EQ(r.summary.prefix_hit_rate, 4.0 * 32 / (5 * 48));

  o.engine.enable_prefix_caching = false;
  EXPECT_EQ(run_offline_bench(stories(), o).summary.cached_tokens, 0);

  o.prompts.prompt_len = 600;  // beyond stories260K's 512-token context
  EXPECT_THROW(run_offline_bench(stories(), o), Error);
}

// With a streaming window the context has no end: requests past stories260K's 512 tokens run.
TEST(BenchOffline, StreamingRunsPastTheContext) {
  OfflineBenchOptions o;
  o.prompts.num_prompts = 3;
  o.prompts.prompt_len = 100;
  o.output_len = 500;
  o.batch = 3;
  EXPECT_THROW(run_offline_bench(stories(), o), Error);
  o.engine.streaming = {.window = 64, .sinks = 4};
  const OfflineBenchResult r = run_offline_bench(stories(), o);
  EXPECT_EQ(r.summary.completed, 3);
  EXPECT_EQ(r.summary.output_tokens, 3 * 500);
  EXPECT_EQ(r.engine_stats.preemptions, 0u);
}

TEST(BenchOffline, CommandPrintsSaneJson) {
  if (!std::filesystem::exists(KVSERVE_BINARY)) GTEST_SKIP() << "no kvserve binary";
  const auto [status, out, err] =
      test::run_command(std::string(KVSERVE_BINARY) + " bench -m " + kStories + " --tokenizer " + kTok +
                        " -n 4 --prompt-len 16 --output-len 8 --batch 2 --json");
  ASSERT_EQ(status, 0) << out;
  const json j = json::parse(out);
  EXPECT_EQ(j["mode"], "offline");
  EXPECT_EQ(j["requests"], 4);
  EXPECT_EQ(j["completed"], 4);
  EXPECT_EQ(j["failed"], 0);
  EXPECT_EQ(j["output_tokens"], 4 * 8);
  EXPECT_EQ(j["prompt_tokens"], 4 * 16);
  EXPECT_EQ(j["config"]["batch"], 2);
  EXPECT_GT(j["weight_bytes_per_token"].get<double>(), 0);
  for (const char* k : {"ttft_ms", "tpot_ms", "itl_ms", "e2e_ms"})
    for (const char* p : {"p50", "p90", "p99"}) EXPECT_GE(j[k][p].get<double>(), 0) << k << " " << p;
  for (const char* k : {"prefill_tokens_per_s", "decode_tokens_per_s", "requests_per_s", "output_tokens_per_s"})
    EXPECT_GT(j[k].get<double>(), 0) << k;
  EXPECT_EQ(j["prefix_hit_rate"], 0.0);
}

// The probe sees a request's events as the engine sends them: the prefill's token, then one per decode
// step. Segments hold exactly segment_steps steps (the last what is left), with the context and bytes
// per token of their steps, and a triad on each side.
TEST(BenchBoundSegments, SegmentsCountStepsContextAndBytes) {
  ThreadPool two(2);
  BoundProbe probe(two, /*segment_steps=*/4, /*weight_bytes=*/1000, /*kv_bytes_per_position=*/10,
                   /*triad_floats=*/1 << 18);
  probe.begin_request(10);
  probe.on_tokens(1);  // prefill: 11 tokens in context for the first decode step
  for (int i = 0; i < 10; ++i) probe.on_tokens(1);
  probe.on_finished();
  const std::vector<BoundSegment>& segs = probe.segments();
  ASSERT_EQ(segs.size(), 3u);
  const int steps[] = {4, 4, 2};
  const int64_t first[] = {11, 15, 19};
  for (size_t i = 0; i < segs.size(); ++i) {
    EXPECT_EQ(segs[i].steps, steps[i]) << i;
    EXPECT_EQ(segs[i].context_first, first[i]) << i;
    EXPECT_DOUBLE_EQ(segs[i].bytes_per_token, 1000 + 10 * (first[i] + 0.5 * (steps[i] - 1))) << i;
    EXPECT_GT(segs[i].seconds, 0) << i;
    EXPECT_GT(segs[i].triad_before_gb_s, 0) << i;
    EXPECT_GT(segs[i].triad_after_gb_s, 0) << i;
    EXPECT_GT(segs[i].round_trip_ns, 0) << i;
    EXPECT_GT(segs[i].of_bound(), 0) << i;
    // Each segment's "after" triad is the next one's "before": one measurement between two segments.
    if (i > 0) {
      EXPECT_EQ(segs[i].triad_before_gb_s, segs[i - 1].triad_after_gb_s) << i;
    }
  }
  // A second request starts its own segments from its own prompt.
  probe.begin_request(3);
  probe.on_tokens(1);
  probe.on_tokens(1);
  probe.on_finished();
  ASSERT_EQ(probe.segments().size(), 4u);
  EXPECT_EQ(probe.segments()[3].steps, 1);
  EXPECT_EQ(probe.segments()[3].context_first, 4);
  EXPECT_THROW(BoundProbe(two, 0, 1, 1, 1 << 10), Error);
}

TEST(BenchBoundSegments, OfBoundAndMedian) {
  BoundSegment s;
  s.steps = 10;
  s.seconds = 0.1;            // 100 tok/s
  s.bytes_per_token = 100e6;  // 10 GB/s read
  s.triad_before_gb_s = 20;
  s.triad_after_gb_s = 25;  // the better of the two: 10 / 25
  EXPECT_DOUBLE_EQ(s.of_bound(), 0.4);
  BoundSegment t = s;
  t.triad_after_gb_s = 10;
  t.triad_before_gb_s = 12.5;  // 10 / 12.5
  BoundSegment u = s;
  u.seconds = 0.05;  // 200 tok/s: 20 / 25
  EXPECT_DOUBLE_EQ(median_of_bound({s, t, u}), 0.8);
  EXPECT_DOUBLE_EQ(median_of_bound({s, t}), 0.6);
  EXPECT_EQ(median_of_bound({}), 0);
}

TEST(BenchBoundSegments, OfflineRunSegmentsItsDecode) {
  OfflineBenchOptions o;
  o.prompts.num_prompts = 2;
  o.prompts.prompt_len = 20;
  o.output_len = 11;  // the prefill's token, then 10 decode steps: segments of 4, 4, 2 per request
  o.batch = 1;
  o.bound_segment_steps = 4;
  const OfflineBenchResult r = run_offline_bench(stories(), o);
  EXPECT_EQ(r.summary.completed, 2);
  ASSERT_EQ(r.bound_segments.size(), 6u);
  int steps = 0;
  for (const BoundSegment& seg : r.bound_segments) steps += seg.steps;
  EXPECT_EQ(steps, 2 * 10);
  EXPECT_EQ(r.bound_segments[0].context_first, 21);
  EXPECT_EQ(r.bound_segments[3].context_first, 21);
  o.batch = 2;
  EXPECT_THROW(run_offline_bench(stories(), o), Error);
}

// The triad's kernel against the scalar loop, over ranges that start and end off its 32-float steps.
TEST(BenchTriad, KernelMatchesTheScalarLoop) {
  const int64_t n = 1000;
  std::vector<float> b(n), c(n), a(n, -1.0f), want(n, -1.0f);
  for (int64_t i = 0; i < n; ++i) b[i] = 0.25f * static_cast<float>(i % 97), c[i] = 1.5f - static_cast<float>(i % 13);
  for (const auto& [begin, end] : {std::pair<int64_t, int64_t>{0, 1000}, {3, 70}, {33, 34}, {64, 96}, {5, 5}}) {
    triad_range(a.data(), b.data(), c.data(), begin, end);
    for (int64_t i = begin; i < end; ++i) want[i] = b[i] + 3.0f * c[i];
    ASSERT_EQ(a, want) << begin << ".." << end;
  }
}

TEST(BenchTriad, MeasuresSomething) {
  const TriadResult t = measure_triad(ThreadPool::global(), 1 << 20, 2);
  EXPECT_GT(t.best_gb_s, 0);
  EXPECT_GE(t.best_gb_s, t.median_gb_s);
  EXPECT_EQ(t.array_bytes, 4 << 20);
}

TEST(BenchTriad, DefaultArraysLieBeyondTheCaches) {
  const int64_t n = triad_floats_beyond_caches(int64_t{32} << 20);
  EXPECT_GE(n, int64_t{32} << 20);
  EXPECT_GE(3 * n * static_cast<int64_t>(sizeof(float)), 4 * last_level_cache_bytes());
  // A minimum above what the caches ask for is kept as it is.
  EXPECT_EQ(triad_floats_beyond_caches(int64_t{1} << 40), int64_t{1} << 40);
}

TEST(BenchRead, MeasuresTheBytesItReads) {
  const ReadResult r = measure_read(ThreadPool::global(), 8 << 20, 2);
  EXPECT_GT(r.best_gb_s, 0);
  EXPECT_GE(r.best_gb_s, r.median_gb_s);
  EXPECT_EQ(r.threads, ThreadPool::global().size());
  // Whole 256-byte steps of 8 streams per thread: at most one step of each stream short of the buffer.
  EXPECT_LE(r.bytes, 8 << 20);
  EXPECT_GT(r.bytes, (8 << 20) - int64_t{8} * 256 * r.threads);
  EXPECT_EQ(r.bytes % (int64_t{8} * 256 * r.threads), 0);
}

TEST(BenchRead, KernelSumsEveryWordOfItsStreams) {
  // 8 streams of 96 words (3 steps each, the last without prefetches), values that overflow 32 bits.
  const int64_t len = 96;
  std::vector<uint64_t> words(8 * len);
  uint64_t want = 0;
  for (size_t i = 0; i < words.size(); ++i) {
    words[i] = (uint64_t{0x9E3779B97F4A7C15} * (i + 1)) ^ (i << 40);
    want += words[i];
  }
  EXPECT_EQ(read_streams(words.data(), len), want);
  // A stream of one step: only its words.
  uint64_t first_steps = 0;
  for (int s = 0; s < 8; ++s)
    for (int w = 0; w < 32; ++w) first_steps += words[static_cast<size_t>(s * 32 + w)];
  EXPECT_EQ(read_streams(words.data(), 32), first_steps);
}

TEST(BenchRead, RejectsABufferTooSmallForItsStreams) {
  EXPECT_THROW(measure_read(ThreadPool::global(), 1024, 2), Error);
  EXPECT_THROW(measure_read(ThreadPool::global(), 8 << 20, 0), Error);
}

TEST(BenchHandoff, TimesALineBetweenThreadsZeroAndOne) {
  ThreadPool two(2);
  const HandoffResult h = measure_handoff(two, 2000, 2);
  EXPECT_GT(h.round_trip_ns, 0);
  EXPECT_EQ(h.round_trips, 2000);
  EXPECT_EQ(h.threads, 2);
  // Threads past the first two wait the run out; more threads than cores still finish (their waits yield).
  ThreadPool four(4);
  EXPECT_GT(measure_handoff(four, 200, 1).round_trip_ns, 0);
}

TEST(BenchHandoff, OneThreadHasNoOneToPassTo) {
  ThreadPool one(1);
  const HandoffResult h = measure_handoff(one, 100, 1);
  EXPECT_EQ(h.round_trip_ns, 0);
  EXPECT_EQ(h.threads, 1);
  EXPECT_THROW(measure_handoff(one, 0, 1), Error);
  EXPECT_THROW(measure_handoff(one, 100, 0), Error);
}

TEST(BenchServing, CompletesEveryRequestAgainstKvserveServe) {
  if (!std::filesystem::exists(KVSERVE_BINARY)) GTEST_SKIP() << "no kvserve binary";
  StoriesFolder folder;
  Server server(folder.model(), folder.log());
  const int port = server.wait_for_port();
  ASSERT_GT(port, 0) << "kvserve serve did not start";
  const std::string url = "http://127.0.0.1:" + std::to_string(port);

  // Closed loop, token-id prompts drawn from the model's vocabulary, through the library.
  ServingBenchOptions o;
  o.url = url;
  o.prompts.num_prompts = 8;
  o.prompts.prompt_len = 20;
  o.output_len = 6;
  o.concurrency = 4;
  o.token_pool = token_pool(stories().vocab);
  o.bos = stories().vocab.bos_id;
  o.timeout_s = 60;
  const ServingBenchResult r = run_serving_bench(o);
  EXPECT_EQ(r.model, "stories260K");
  EXPECT_EQ(r.summary.completed, 8);
  EXPECT_EQ(r.summary.failed, 0) << r.summary.first_error;
  EXPECT_EQ(r.summary.output_tokens, 8 * 6);
  EXPECT_EQ(r.summary.prompt_tokens, 8 * 20);
  EXPECT_EQ(r.summary.ttft.count, 8u);
  for (const RequestRecord& rec : r.records) {
    EXPECT_TRUE(rec.ok) << rec.error;
    EXPECT_GE(rec.first, rec.start);
    EXPECT_GE(rec.end, rec.first);
    EXPECT_GE(rec.chunk_times.size(), 1u);
  }

  // Poisson arrivals, text prompts, shared prefixes, through the command.
  const auto [status, out, err] =
      test::run_command(std::string(KVSERVE_BINARY) + " bench --url " + url +
                        " -n 6 --prompt-len 24 --output-len 5 --request-rate 50 -c 3 --text-prompts"
                        " --prompts shared-prefix --json");
  ASSERT_EQ(status, 0) << out;
  const json j = json::parse(out);
  EXPECT_EQ(j["mode"], "serving");
  EXPECT_EQ(j["completed"], 6);
  EXPECT_EQ(j["failed"], 0) << j.value("first_error", "");
  EXPECT_EQ(j["output_tokens"], 6 * 5);
  EXPECT_GT(j["prompt_tokens"].get<int>(), 6 * 12);  // the server's own count of the words
  EXPECT_GT(j["ttft_ms"]["count"].get<int>(), 0);

  // A server that is not there: every request fails, reported, no exception.
  ServingBenchOptions bad = o;
  bad.url = "http://127.0.0.1:1";
  bad.model = "x";
  bad.warmup = 0;
  bad.prompts.num_prompts = 2;
  const ServingBenchResult none = run_serving_bench(bad);
  EXPECT_EQ(none.summary.failed, 2);
  EXPECT_FALSE(none.summary.first_error.empty());
  EXPECT_THROW(
      [&] {
        ServingBenchOptions u = o;
        u.url = "localhost:8080";
        run_serving_bench(u);
      }(),
      Error);
  EXPECT_TRUE(server.alive());
}

// A stream whose tokens were all held back as unfinished UTF-8 (a random-weight model repeating a byte
// token) shows them only in its finishing chunk, with no text: that chunk carries them, and the request
// counts as completed with the server's token count (it failed as "the stream carried no tokens").
TEST(BenchServing, TokensShownOnlyByTheFinishingChunkCount) {
  httplib::Server fake;
  fake.Post("/v1/completions", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(
        "data: {\"choices\":[{\"index\":0,\"text\":\"\",\"finish_reason\":\"length\"}]}\n\n"
        "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":3}}\n\n"
        "data: [DONE]\n\n",
        "text/event-stream");
  });
  const int port = fake.bind_to_any_port("127.0.0.1");
  ASSERT_GT(port, 0);
  std::thread serving([&] { fake.listen_after_bind(); });
  ServingBenchOptions o;
  o.url = "http://127.0.0.1:" + std::to_string(port);
  o.model = "fake";
  o.prompts.num_prompts = 2;
  o.prompts.prompt_len = 5;
  o.output_len = 3;
  o.warmup = 1;
  o.timeout_s = 30;
  ServingBenchResult r;
  EXPECT_NO_THROW(r = run_serving_bench(o));
  fake.stop();
  serving.join();
  EXPECT_EQ(r.summary.completed, 2);
  EXPECT_EQ(r.summary.failed, 0) << r.summary.first_error;
  EXPECT_EQ(r.summary.output_tokens, 2 * 3);
  EXPECT_EQ(r.summary.ttft.count, 2u);
}

// bench/compare_llamacpp.py with --llama-bench / --llama-batched-bench: stand-in binaries answer with
// figures made from the arguments they got, so the script's flags (prompt, generation, depth, sequences)
// and its reading of their JSON are both checked. The kvserve side is a real run on a tiny model.
TEST(BenchCompare, LlamaCppFiguresFromLlamaBenchBinaries) {
  if (!std::filesystem::exists(KVSERVE_BINARY)) GTEST_SKIP() << "no kvserve binary";
  if (std::system("python3 -c '' >/dev/null 2>&1") != 0) GTEST_SKIP() << "no python3";
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("kvserve-compare-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const auto write_exe = [&](const std::string& name, const std::string& text) {
    const std::filesystem::path p = dir / name;
    std::ofstream(p) << text;
    std::filesystem::permissions(p, std::filesystem::perms::owner_all);
    return p.string();
  };
  // llama-bench: prefill (-n 0) answers 1000 + p tokens/s (7 fewer with flash attention on), generation
  // answers depth + n (5 more with it on). Both must be given -fa on or off.
  const std::string bench = write_exe("llama-bench", R"(#!/bin/bash
while [ $# -gt 0 ]; do case "$1" in -p) p=$2; shift;; -n) n=$2; shift;; -d) d=$2; shift;; -fa) fa=$2; shift;; esac; shift; done
case "$fa" in on) on=1;; off) on=0;; *) echo "bad -fa '$fa'" >&2; exit 3;; esac
if [ "$n" = 0 ]; then ts=$((1000 + p - 7 * on)); else ts=$((d + n + 5 * on)); fi
echo "[{\"n_prompt\": $p, \"n_gen\": $n, \"n_depth\": $d, \"avg_ts\": $ts}]"
)");
  // llama-batched-bench: speed_tg = 100 * npl + ntg (1 more with flash attention on), speed_pp = npp, the
  // whole run 2 s (4 s with it on).
  const std::string batched = write_exe("llama-batched-bench", R"(#!/bin/bash
while [ $# -gt 0 ]; do case "$1" in -npp) pp=$2; shift;; -ntg) tg=$2; shift;; -npl) pl=$2; shift;; -fa) fa=$2; shift;; esac; shift; done
case "$fa" in on) on=1;; off) on=0;; *) echo "bad -fa '$fa'" >&2; exit 3;; esac
echo "some log line"
echo "{\"pp\": $pp, \"tg\": $tg, \"pl\": $pl, \"speed_pp\": $pp, \"speed_tg\": $((100 * pl + tg + on)), \"t\": $((2 + 2 * on)), \"t_pp\": 0.5}"
)");
  const std::string model = KVSERVE_SHARED_DIR "/golden/gguf/models/tiny-gqa.gguf";
  const auto [status, out, err] = test::run_command(
      "python3 " KVSERVE_SOURCE_DIR "/bench/compare_llamacpp.py --kvserve " KVSERVE_BINARY " -m " + model +
          " -t 1 --prompt-len 16 --gen-len 8 --n-seqs 3 --batch-prompt-len 8 --batch-gen-len 4 --repeats 2 --json"
          " --llama-bench " +
          bench + " --llama-batched-bench " + batched,
      /*capture_stderr=*/true);
  // One setting asked for: llama.cpp runs with it alone.
  const auto [status_off, out_off, err_off] = test::run_command(
      "python3 " KVSERVE_SOURCE_DIR "/bench/compare_llamacpp.py --kvserve " KVSERVE_BINARY " -m " + model +
          " -t 1 --prompt-len 16 --gen-len 8 --skip-batched --repeats 1 --bound-segments 0 --json --llama-fa off"
          " --llama-bench " +
          bench,
      /*capture_stderr=*/true);
  std::filesystem::remove_all(dir);
  ASSERT_EQ(status_off, 0) << err_off;
  const json off = json::parse(out_off);
  EXPECT_EQ(off["llama_cpp_flash_attn"], "off");
  ASSERT_EQ(off["figures"].size(), 2u);
  EXPECT_DOUBLE_EQ(off["figures"][0]["llama.cpp"].get<double>(), 16 + 8);
  EXPECT_DOUBLE_EQ(off["figures"][1]["llama.cpp"].get<double>(), 1000 + 16);
  EXPECT_EQ(off["figures"][0]["llama.cpp_flash_attn"].get<std::vector<std::string>>(), std::vector<std::string>{"off"});
  ASSERT_EQ(status, 0) << err;
  const json j = json::parse(out);
  EXPECT_EQ(j["llama_cpp_via"], "llama-bench");
  const json& f = j["figures"];
  ASSERT_EQ(f.size(), 4u);
  // Each figure is llama.cpp's better one of flash attention off and on (the default --llama-fa best).
  EXPECT_DOUBLE_EQ(f[0]["llama.cpp"].get<double>(), 16 + 8 + 5);  // decode: generation at depth = prompt
  EXPECT_DOUBLE_EQ(f[1]["llama.cpp"].get<double>(), 1000 + 16);   // prefill
  EXPECT_DOUBLE_EQ(f[2]["llama.cpp"].get<double>(), 100 * 3 + 4 + 1);
  EXPECT_DOUBLE_EQ(f[3]["llama.cpp"].get<double>(), 3 * 4 / 2.0);  // output tokens over the whole run
  const std::vector<std::string> fa_on(2, "on"), fa_off(2, "off");
  EXPECT_EQ(f[0]["llama.cpp_flash_attn"].get<std::vector<std::string>>(), fa_on);
  EXPECT_EQ(f[1]["llama.cpp_flash_attn"].get<std::vector<std::string>>(), fa_off);
  EXPECT_EQ(f[2]["llama.cpp_flash_attn"].get<std::vector<std::string>>(), fa_on);
  EXPECT_EQ(f[3]["llama.cpp_flash_attn"].get<std::vector<std::string>>(), fa_off);
  // A triad before each of the 2 repeats and one after the last; the bound takes the best.
  const std::vector<double> triads = j["triads_gb_s"].get<std::vector<double>>();
  ASSERT_EQ(triads.size(), 3u);
  EXPECT_DOUBLE_EQ(j["triad_gb_s"].get<double>(), *std::max_element(triads.begin(), triads.end()));
  for (const json& row : f) {
    EXPECT_GT(row["kvserve"].get<double>(), 0);
    EXPECT_NEAR(row["ratio"].get<double>(), row["kvserve"].get<double>() / row["llama.cpp"].get<double>(), 1e-9);
    // Each repeat's pair: its kvserve run over its llama.cpp run.
    const auto ks = row["kvserve_runs"].get<std::vector<double>>();
    const auto ls = row["llama.cpp_runs"].get<std::vector<double>>();
    ASSERT_EQ(ks.size(), 2u);
    ASSERT_EQ(ls.size(), 2u);
    ASSERT_EQ(row["pair_ratios"].size(), 2u);
    for (size_t r = 0; r < 2; ++r) EXPECT_NEAR(row["pair_ratios"][r].get<double>(), ks[r] / ls[r], 1e-9);
    if (row["bound_with_kv"].is_null()) continue;
    // Against the triads next to each repeat: never a smaller fraction than against the best of all.
    const double whole = row["bound_with_kv"].get<double>();
    ASSERT_EQ(row["of_bound_with_kv_adjacent"].size(), 2u);
    for (size_t r = 0; r < 2; ++r) {
      const double adjacent = row["of_bound_with_kv_adjacent"][r].get<double>();
      EXPECT_GE(adjacent, ks[r] / whole - 1e-12);
      EXPECT_NEAR(adjacent, ks[r] / (whole * std::max(triads[r], triads[r + 1]) / j["triad_gb_s"].get<double>()), 1e-9);
    }
  }
  // Batch-1 decode also against a triad taken right before and right after each of its kvserve runs.
  const auto around = f[0]["decode_triads_gb_s"].get<std::vector<double>>();
  ASSERT_EQ(around.size(), 4u);
  // With them, the core-to-core round trip (none on one thread).
  const auto trips = f[0]["decode_round_trips_ns"].get<std::vector<double>>();
  ASSERT_EQ(trips.size(), 4u);
  for (double t : trips) EXPECT_EQ(t, 0);
  ASSERT_EQ(f[0]["of_bound_with_kv_around_run"].size(), 2u);
  std::vector<double> of_around;
  for (size_t r = 0; r < 2; ++r) {
    const double best = std::max(around[2 * r], around[2 * r + 1]);
    of_around.push_back(f[0]["kvserve_runs"][r].get<double>() /
                        (f[0]["bound_with_kv"].get<double>() * best / j["triad_gb_s"].get<double>()));
    EXPECT_NEAR(f[0]["of_bound_with_kv_around_run"][r].get<double>(), of_around[r], 1e-9);
  }
  // And its bytes per second (weights + K/V of the average position) against the read-only loops measured
  // by the same calls.
  const auto reads = f[0]["decode_reads_gb_s"].get<std::vector<double>>();
  ASSERT_EQ(reads.size(), 4u);
  ASSERT_EQ(f[0]["reads_of_read_loop_around_run"].size(), 2u);
  const double per_token =
      j["weight_bytes_per_token"].get<double>() + j["kv_bytes_per_position"].get<double>() * (16 + 8 / 2.0);
  for (size_t r = 0; r < 2; ++r) {
    EXPECT_GT(reads[2 * r], 0);
    EXPECT_NEAR(f[0]["reads_of_read_loop_around_run"][r].get<double>(),
                f[0]["kvserve_runs"][r].get<double>() * per_token / (std::max(reads[2 * r], reads[2 * r + 1]) * 1e9),
                1e-9);
  }
  // The targets: each median figure against its threshold, met exactly when it reaches it.
  const json& t = j["targets"];
  ASSERT_EQ(t.size(), 6u);
  // (The decode bound target: the median of its runs against the triads around each; with 2 runs, their mean.)
  const double values[] = {f[0]["ratio"].get<double>(), (of_around[0] + of_around[1]) / 2, f[1]["ratio"].get<double>(),
                           f[2]["ratio"].get<double>()};
  const double thresholds[] = {1.15, 0.85, 1.0, 3.0};
  // And each repeat alone: the pair ratios, or the decode runs against the triads around them.
  const json* per_repeat[] = {&f[0]["pair_ratios"], &f[0]["of_bound_with_kv_around_run"], &f[1]["pair_ratios"],
                              &f[2]["pair_ratios"]};
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_NEAR(t[i]["value"].get<double>(), values[i], 1e-9) << i;
    EXPECT_DOUBLE_EQ(t[i]["threshold"].get<double>(), thresholds[i]) << i;
    EXPECT_EQ(t[i]["met"].get<bool>(), values[i] >= thresholds[i]) << i;
    ASSERT_EQ(t[i]["per_repeat"].size(), 2u) << i;
    int met = 0;
    for (size_t r = 0; r < 2; ++r) {
      const double x = (*per_repeat[i])[r].get<double>();
      EXPECT_NEAR(t[i]["per_repeat"][r].get<double>(), x, 1e-9) << i;
      met += x >= thresholds[i] ? 1 : 0;
    }
    EXPECT_EQ(t[i]["repeats_met"].get<int>(), met) << i;
  }
  // The decode bound once more, over the runs whose triads before and after agree within 15 %: a run
  // whose bandwidth moved has no known bound. None such: no value, not met.
  const auto steady = f[0]["decode_triads_steady"].get<std::vector<bool>>();
  ASSERT_EQ(steady.size(), 2u);
  std::vector<double> steady_values;
  for (size_t r = 0; r < 2; ++r) {
    const double lo = std::min(around[2 * r], around[2 * r + 1]), hi = std::max(around[2 * r], around[2 * r + 1]);
    EXPECT_EQ(steady[r], lo >= 0.85 * hi) << r;
    if (steady[r]) steady_values.push_back(of_around[r]);
  }
  const json& ts = t[4];
  EXPECT_DOUBLE_EQ(ts["threshold"].get<double>(), 0.85);
  ASSERT_EQ(ts["per_repeat"].size(), steady_values.size());
  if (steady_values.empty()) {
    EXPECT_TRUE(ts["value"].is_null());
    EXPECT_FALSE(ts["met"].get<bool>());
  } else {
    double sum = 0;
    for (double v : steady_values) sum += v;
    const double median = sum / static_cast<double>(steady_values.size());  // one or two values
    EXPECT_NEAR(ts["value"].get<double>(), median, 1e-9);
    EXPECT_EQ(ts["met"].get<bool>(), median >= 0.85);
  }
  // kvserve's extra decode per repeat in segments (default 16 steps) against in-run triads: 8 tokens are
  // the prefill's and 7 decode steps, one short segment a repeat.
  const json& runs = f[0]["bound_segments_runs"];
  ASSERT_EQ(runs.size(), 2u);
  std::vector<double> seg_values;
  for (const json& run : runs) {
    ASSERT_EQ(run.size(), 1u);
    EXPECT_EQ(run[0]["steps"], 7);
    EXPECT_EQ(run[0]["context_first"], 17);
    EXPECT_GT(run[0]["of_bound"].get<double>(), 0);
    seg_values.push_back(run[0]["of_bound"].get<double>());
  }
  ASSERT_EQ(f[0]["bound_segments"].size(), 2u);
  const json& tg = t[5];
  EXPECT_DOUBLE_EQ(tg["threshold"].get<double>(), 0.85);
  EXPECT_NEAR(tg["value"].get<double>(), (seg_values[0] + seg_values[1]) / 2, 1e-9);
  ASSERT_EQ(tg["per_repeat"].size(), 2u);
  EXPECT_NEAR(tg["per_repeat"][0].get<double>(), seg_values[0], 1e-9);
}

// --phase-profile times the measured run's decode steps only (not the warm-up's): each request's steps after
// its prefill, when the single-token region runs them (two or more threads).
TEST(BenchOffline, PhaseProfileTimesTheMeasuredDecodeSteps) {
  OfflineBenchOptions o;
  o.prompts.num_prompts = 2;
  o.prompts.prompt_len = 20;
  o.output_len = 11;
  o.batch = 1;
  o.phase_profile = true;
  const OfflineBenchResult r = run_offline_bench(stories(), o);
  EXPECT_EQ(r.summary.completed, 2);
  if (ThreadPool::global().size() < 2) {
    EXPECT_EQ(r.phases.steps, 0);
    return;
  }
  EXPECT_EQ(r.phases.steps, 2 * 10);
  ASSERT_FALSE(r.phases.rows.empty());
  EXPECT_EQ(r.phases.rows.front().phase, "qkv");
  EXPECT_EQ(r.phases.rows.back().phase, "head");
  EXPECT_GT(r.phases.bytes, 0);
  o.phase_profile = false;
  EXPECT_EQ(run_offline_bench(stories(), o).phases.steps, 0);
}

// Bad options and an unreachable server: a message naming the problem and a non-zero exit, quickly.
TEST(BenchCommand, BadInputIsAClearError) {
  if (!std::filesystem::exists(KVSERVE_BINARY)) GTEST_SKIP() << "no kvserve binary";
  const std::string bin = KVSERVE_BINARY;
  struct Case {
    std::string args, message;
  };
  for (const Case& c :
       {Case{"bench --url http://127.0.0.1:1 --request-rate -1", "--request-rate: must be >= 0, got -1"},
        Case{"bench -n 0", "--num-prompts: must be > 0, got 0"},
        Case{"bench --prompt-len abc", "--prompt-len: must be a number, got 'abc'"},
        Case{"generate -n -3 -p hi", "--max-tokens: must be >= 0, got -3"},
        Case{"bench --url http://127.0.0.1:1 -n 2", "could not connect (is a server listening there?)"},
        Case{"bench --url http://127.0.0.1:1 --bound-segments 16", "--bound-segments times the offline decode"},
        Case{"bench --bound-segments 0", "--bound-segments: must be > 0, got 0"},
        Case{"bench --url http://127.0.0.1:1 --phase-profile", "--phase-profile times the offline decode"}}) {
    const auto r = test::run_command("timeout 60 " + bin + " " + c.args, /*capture_stderr=*/true);
    EXPECT_NE(r.exit_code, 0) << c.args;
    EXPECT_NE(r.exit_code, 124) << c.args << ": timed out";
    EXPECT_NE((r.out + r.err).find(c.message), std::string::npos) << c.args << ":\n" << r.out << r.err;
  }
}
