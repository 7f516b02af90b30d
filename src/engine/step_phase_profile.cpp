#include "engine/step_phase_profile.h"

namespace kvserve {

const char* step_phase_name(StepPhase phase) {
  switch (phase) {
    case StepPhase::Qkv:
      return "qkv";
    case StepPhase::Attention:
      return "attention";
    case StepPhase::Merge:
      return "merge";
    case StepPhase::Wo:
      return "wo";
    case StepPhase::GateUp:
      return "gate_up";
    case StepPhase::Down:
      return "down";
    case StepPhase::Head:
      return "head";
    case StepPhase::Count:
      break;
  }
  return "?";
}

void StepPhaseProfile::reset(int n_threads) {
  n_threads_ = n_threads;
  steps_ = 0;
  bytes_ = {};
  per_thread_ = std::make_unique<PerThread[]>(static_cast<size_t>(n_threads));
}

void StepPhaseProfile::add_step(const std::array<double, kStepPhases>& bytes) {
  ++steps_;
  for (size_t i = 0; i < bytes_.size(); ++i) bytes_[i] += bytes[i];
}

StepPhaseProfile::Clock::Clock(StepPhaseProfile* profile, int thread) {
  if (profile == nullptr || thread >= profile->n_threads_) return;
  totals_ = &profile->per_thread_[thread];
  last_ = std::chrono::steady_clock::now();
}

void StepPhaseProfile::Clock::mark(StepPhase p, bool wait) {
  if (totals_ == nullptr) return;
  const auto now = std::chrono::steady_clock::now();
  const double ns = std::chrono::duration<double, std::nano>(now - last_).count();
  (wait ? totals_->wait_ns : totals_->work_ns)[index(p)] += ns;
  last_ = now;
}

}  // namespace kvserve
