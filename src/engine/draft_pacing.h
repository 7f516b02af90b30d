#pragma once
// When to draft. A speculative step of 1 + k positions costs more than a plain one (SmolLM2 Q4_1 on 2
// cores: 5 positions ~2.3x one), so where few drafts are taken (text that does not repeat, a draft model
// that disagrees) drafting pauses for a while, then tries again. One per sequence.
#include <cstdint>

namespace kvserve {

class DraftPacing {
 public:
  static constexpr double kMinTakenFraction = 0.3;  // of the drafts, smoothed over speculative steps
  static constexpr int kPauseSteps = 16;

  // Whether this step may propose drafts (a paused step counts down instead).
  bool may_draft() {
    if (pause_ == 0) return true;
    --pause_;
    return false;
  }
  // A speculative step's outcome: `taken` of `proposed` drafts kept.
  void record(int64_t taken, int64_t proposed) {
    if (proposed <= 0) return;
    taken_fraction_ = 0.5 * taken_fraction_ + 0.5 * static_cast<double>(taken) / static_cast<double>(proposed);
    if (taken_fraction_ < kMinTakenFraction) {
      pause_ = kPauseSteps;
      taken_fraction_ = 1.0;
    }
  }

 private:
  double taken_fraction_ = 1.0;
  int pause_ = 0;
};

}  // namespace kvserve
