#pragma once
// A bench run's phase profile of the one-token steps (engine/step_phase_profile.h), per step: each
// phase's time on every thread (work, then the wait at the barrier after it), the bytes it read, and
// the rate it read them at, to set against the triad the run measured.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/step_phase_profile.h"

namespace kvserve::bench {

struct PhaseRow {
  std::string phase;
  double bytes = 0;             // read per step
  std::vector<double> work_us;  // per step, per thread
  std::vector<double> wait_us;
  double wall_us = 0;  // per step: the threads' mean of work + wait
  double gb_s = 0;     // bytes / wall (0 where the phase took no time)
};

struct PhaseSummary {
  int64_t steps = 0;
  std::vector<PhaseRow> rows;  // in step order, the phases that ran
  double wall_us = 0;          // per step, all phases
  double bytes = 0;
  double gb_s = 0;
};

PhaseSummary summarize_phases(const StepPhaseProfile& profile);
nlohmann::json phases_json(const PhaseSummary& s);
// A text table, one line a phase, then the total.
std::string format_phases(const PhaseSummary& s);

}  // namespace kvserve::bench
