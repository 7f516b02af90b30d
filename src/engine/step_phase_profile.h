#pragma once
// Where a one-token decode step's time goes in the single-token region (single_token_step.cpp), phase by
// phase and thread by thread: the time a thread spends on a phase's own work, the time it then waits at
// the barrier that ends the phase, and the bytes the phase reads (its weights; attention's K/V rows). Off
// unless asked for (`kvserve bench --phase-profile`): on a new host it says which phase falls short of
// the memory bound, the question the benchmarks issue asks of every target that is not met.
#include <array>
#include <chrono>
#include <cstdint>
#include <memory>

namespace kvserve {

enum class StepPhase : int {
  Qkv,        // norm, conversion, the Q/K/V projection
  Attention,  // RoPE, the new K/V rows stored, this thread's attention units
  Merge,      // the attention partials merged into the heads' outputs
  Wo,         // the output projection into the residual
  GateUp,     // norm, conversion, the gate and up projections
  Down,       // the activation, conversion, the down projection into the residual
  Head,       // the final norm and the output head (no barrier after it)
  Count
};
inline constexpr int kStepPhases = static_cast<int>(StepPhase::Count);
const char* step_phase_name(StepPhase phase);

class StepPhaseProfile {
  // One cache line per thread: each thread writes only its own.
  struct alignas(64) PerThread {
    std::array<double, kStepPhases> work_ns{}, wait_ns{};
  };

 public:
  // Cleared, for n_threads threads.
  void reset(int n_threads);
  int threads() const { return n_threads_; }
  int64_t steps() const { return steps_; }
  // Over all steps: thread t's nanoseconds on phase p's work, and waiting at the barrier after it.
  double work_ns(int t, StepPhase p) const { return per_thread_[t].work_ns[index(p)]; }
  double wait_ns(int t, StepPhase p) const { return per_thread_[t].wait_ns[index(p)]; }
  // Bytes phase p read over all steps (weights, K/V rows), as the steps reported them.
  double bytes(StepPhase p) const { return bytes_[index(p)]; }

  // Called once a step, outside the parallel region.
  void add_step(const std::array<double, kStepPhases>& bytes);

  // One thread's marks inside a step: each interval runs from the previous mark (or the clock's start) to
  // now. A null profile makes every mark a no-op.
  class Clock {
   public:
    Clock(StepPhaseProfile* profile, int thread);
    void work_done(StepPhase p) { mark(p, false); }
    void wait_done(StepPhase p) { mark(p, true); }

   private:
    void mark(StepPhase p, bool wait);
    PerThread* totals_ = nullptr;
    std::chrono::steady_clock::time_point last_;
  };

 private:
  static size_t index(StepPhase p) { return static_cast<size_t>(p); }
  int n_threads_ = 0;
  int64_t steps_ = 0;
  std::array<double, kStepPhases> bytes_{};
  std::unique_ptr<PerThread[]> per_thread_;
};

}  // namespace kvserve
