#include "bench/offline_bench.h"

#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/error.h"
#include "engine/paged_kv_cache.h"
#include "kv/kv_layout.h"

namespace kvserve::bench {

namespace {

using Clock = std::chrono::steady_clock;

// Collects events from the engine thread and tells the submitting thread when requests finish.
class Tracker {
 public:
  Tracker(size_t n, Clock::time_point t0) : records_(n), t0_(t0) {}

  std::function<void(const RequestEvent&)> callback(size_t i) {
    return [this, i](const RequestEvent& ev) {
      const double now = std::chrono::duration<double>(Clock::now() - t0_).count();
      std::lock_guard lk(mu_);
      RequestRecord& r = records_[i];
      if (!ev.tokens.empty()) {
        if (r.first < 0) r.first = now;
        r.chunk_times.push_back(now);
        r.chunk_tokens.push_back(static_cast<int>(ev.tokens.size()));
        r.output_tokens += static_cast<int>(ev.tokens.size());
      }
      if (ev.finished) {
        r.end = now;
        r.ok = ev.finish_reason != "error" && ev.finish_reason != "abort";
        if (!r.ok) r.error = ev.finish_reason + (ev.error.empty() ? "" : ": " + ev.error);
        r.prompt_tokens = ev.prompt_tokens;
        r.cached_tokens = ev.cached_tokens;
        if (ev.completion_tokens > 0) r.output_tokens = ev.completion_tokens;
        done_.push_back(i);
        cv_.notify_all();
      }
    };
  }

  void started(size_t i) {
    std::lock_guard lk(mu_);
    records_[i].start = std::chrono::duration<double>(Clock::now() - t0_).count();
  }

  // Blocks until some request finished; returns its index.
  size_t wait_one() {
    std::unique_lock lk(mu_);
    cv_.wait(lk, [&] { return !done_.empty(); });
    const size_t i = done_.front();
    done_.pop_front();
    return i;
  }

  std::vector<RequestRecord> records() {
    std::lock_guard lk(mu_);
    return records_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<size_t> done_;
  std::vector<RequestRecord> records_;
  Clock::time_point t0_;
};

// Runs `prompts` with at most `batch` in flight; returns the records and the wall time.
// With a probe (batch 1), it sees each request's events on the engine thread after the tracker has.
std::vector<RequestRecord> run_closed_loop(Engine& engine, const std::vector<std::vector<int32_t>>& prompts,
                                           const SamplingParams& sp, int batch, const std::string& tag,
                                           double* duration, BoundProbe* probe = nullptr) {
  const Clock::time_point t0 = Clock::now();
  Tracker tracker(prompts.size(), t0);
  size_t next = 0, finished = 0;
  auto make = [&] {
    EngineRequest req;
    req.id = tag + std::to_string(next);
    req.prompt_ids = prompts[next];
    req.params = sp;
    req.on_event = tracker.callback(next);
    if (probe != nullptr) {
      req.on_event = [track = std::move(req.on_event), probe, prompt_len = static_cast<int64_t>(prompts[next].size()),
                      begun = false](const RequestEvent& ev) mutable {
        track(ev);
        if (!begun) probe->begin_request(prompt_len), begun = true;
        if (!ev.tokens.empty()) probe->on_tokens(static_cast<int>(ev.tokens.size()));
        if (ev.finished) probe->on_finished();
      };
    }
    tracker.started(next);
    ++next;
    return req;
  };
  // The first `batch` requests enter the engine together: queued one by one, the engine's first step
  // could take only the first (it wakes on it) and decode it through the others' whole prefill, which
  // halved the measured decode rate of 16 sequences in some runs.
  std::vector<EngineRequest> first;
  while (next < prompts.size() && next < static_cast<size_t>(batch)) first.push_back(make());
  engine.add_requests(std::move(first));
  while (finished < prompts.size()) {
    tracker.wait_one();
    ++finished;
    if (next < prompts.size()) engine.add_request(make());
  }
  *duration = std::chrono::duration<double>(Clock::now() - t0).count();
  engine.wait_until_idle();
  return tracker.records();
}

}  // namespace

uint64_t kv_bytes_for_tokens(const Model& model, int64_t tokens, int block_size, KVCacheDType dtype) {
  const KVLayout layout = model_kv_layout(model.config, dtype, block_size);
  const int64_t blocks = (tokens + block_size - 1) / block_size;
  return static_cast<uint64_t>(blocks) * layout.stored_bytes_per_block();
}

OfflineBenchResult run_offline_bench(const Model& model, const OfflineBenchOptions& o) {
  if (o.batch < 1) fail("bench: --batch must be at least 1, got {}", o.batch);
  if (o.output_len < 1) fail("bench: output length must be at least 1, got {}", o.output_len);
  if (o.bound_segment_steps > 0 && o.batch != 1)
    fail("bench: decode segments against the bound are for batch 1 (one sequence decoding), got --batch {}",
         o.batch);
  // A streaming window has no context end unless one is given.
  const int64_t ctx = o.engine.max_model_len > 0  ? o.engine.max_model_len
                      : o.engine.streaming.on() ? kStreamingContextLimit
                                                : model.config.n_ctx_train;
  if (o.prompts.prompt_len + o.output_len > ctx)
    fail("bench: prompt {} + output {} tokens exceed the context of {} tokens", o.prompts.prompt_len, o.output_len,
         ctx);

  EngineOptions eo = o.engine;
  eo.max_num_seqs = o.batch;
  if (eo.model_id.empty()) eo.model_id = "bench@" + model.path;
  if (eo.kv_cache_memory <= 0) {
    // Every in-flight sequence's blocks (one spare block each), twice over so finished prompts can stay
    // cached for shared prefixes, and never less than 16 MiB.
    const int64_t per_seq = o.prompts.prompt_len + o.output_len + eo.block_size;
    const uint64_t need =
        2 * kv_bytes_for_tokens(model, per_seq, eo.block_size, eo.kv_cache_dtype) * static_cast<uint64_t>(o.batch);
    eo.kv_cache_memory = static_cast<double>(std::max<uint64_t>(need, 16ull << 20));
  }
  // Steady-state figures: the pool (sized to this run) is resident before the clock starts, as
  // llama.cpp's KV buffer is once its context exists.
  eo.prefault_kv = true;
  Engine engine(model, eo);

  SamplingParams sp;
  sp.temperature = o.temperature;
  sp.max_tokens = o.output_len;
  sp.ignore_eos = true;
  sp.seed = o.prompts.seed;
  sp.has_seed = true;

  const int32_t bos = model.vocab.add_bos ? model.vocab.bos_id : -1;
  const std::vector<int32_t> pool = token_pool(model.vocab);
  if (o.warmup > 0) {
    // Different seed: the warm-up must not put the measured prompts' prefixes in the cache.
    PromptSpec w;
    w.num_prompts = o.warmup;
    w.prompt_len = std::min(o.prompts.prompt_len, 16);
    w.seed = o.prompts.seed ^ 0x5bd1e995ull;
    SamplingParams wsp = sp;
    wsp.max_tokens = std::min(o.output_len, 4);
    double unused = 0;
    run_closed_loop(engine, make_prompts(w, pool, bos), wsp, o.batch, "warmup-", &unused);
  }
  if (o.phase_profile) engine.set_phase_profile(true);  // idle: no request yet, or the warm-up ended in wait_until_idle
  const EngineStats before = engine.stats();
  const std::vector<std::vector<int32_t>> prompts = make_prompts(o.prompts, pool, bos);
  std::unique_ptr<BoundProbe> probe;
  if (o.bound_segment_steps > 0) {
    const KVLayout layout = model_kv_layout(model.config, eo.kv_cache_dtype, eo.block_size);
    probe = std::make_unique<BoundProbe>(ThreadPool::global(), o.bound_segment_steps, model.weight_bytes(),
                                         layout.stored_bytes_per_token());
  }
  double duration = 0;
  std::vector<RequestRecord> records =
      run_closed_loop(engine, prompts, sp, o.batch, "bench-", &duration, probe.get());

  OfflineBenchResult res;
  res.summary = summarize(records, duration);
  res.engine_stats = engine.stats();
  res.engine_stats.preemptions -= before.preemptions;
  res.engine_stats.prefix_queries -= before.prefix_queries;
  res.engine_stats.prefix_hits -= before.prefix_hits;
  res.engine_stats.prompt_tokens -= before.prompt_tokens;
  res.engine_stats.generation_tokens -= before.generation_tokens;
  res.engine_stats.requests_finished -= before.requests_finished;
  res.kv_cache_bytes = static_cast<uint64_t>(eo.kv_cache_memory);
  if (probe) res.bound_segments = probe->segments();
  if (const StepPhaseProfile* profile = engine.phase_profile()) res.phases = summarize_phases(*profile);
  return res;
}

}  // namespace kvserve::bench
