#include "bench/phase_table.h"

#include <fmt/format.h>

namespace kvserve::bench {

namespace {
double rate_gb_s(double bytes, double us) { return us > 0 ? bytes / (us * 1e3) : 0; }
}  // namespace

PhaseSummary summarize_phases(const StepPhaseProfile& profile) {
  PhaseSummary s;
  s.steps = profile.steps();
  if (s.steps == 0 || profile.threads() == 0) return s;
  const auto steps = static_cast<double>(s.steps);
  for (int i = 0; i < kStepPhases; ++i) {
    const auto p = static_cast<StepPhase>(i);
    PhaseRow row;
    row.phase = step_phase_name(p);
    row.bytes = profile.bytes(p) / steps;
    double total_ns = 0;
    for (int t = 0; t < profile.threads(); ++t) {
      row.work_us.push_back(profile.work_ns(t, p) / steps / 1e3);
      row.wait_us.push_back(profile.wait_ns(t, p) / steps / 1e3);
      total_ns += profile.work_ns(t, p) + profile.wait_ns(t, p);
    }
    if (total_ns == 0 && row.bytes == 0) continue;  // e.g. the merge where every thread merges on its own
    row.wall_us = total_ns / profile.threads() / steps / 1e3;
    row.gb_s = rate_gb_s(row.bytes, row.wall_us);
    s.wall_us += row.wall_us;
    s.bytes += row.bytes;
    s.rows.push_back(std::move(row));
  }
  s.gb_s = rate_gb_s(s.bytes, s.wall_us);
  return s;
}

nlohmann::json phases_json(const PhaseSummary& s) {
  nlohmann::json rows = nlohmann::json::array();
  for (const PhaseRow& r : s.rows)
    rows.push_back({{"phase", r.phase},
                    {"bytes_per_step", r.bytes},
                    {"work_us", r.work_us},
                    {"wait_us", r.wait_us},
                    {"wall_us", r.wall_us},
                    {"gb_s", r.gb_s}});
  return {{"steps", s.steps}, {"phases", rows}, {"wall_us", s.wall_us}, {"bytes_per_step", s.bytes}, {"gb_s", s.gb_s}};
}

std::string format_phases(const PhaseSummary& s) {
  if (s.steps == 0)
    return "phase profile: no one-token step ran in the single-token region (it needs batch 1, 2 or more "
           "threads, and a model without MoE or MLA)\n";
  std::string out = fmt::format(
      "phase profile of {} one-token steps (us a step; work + wait at the barrier after it, per thread)\n", s.steps);
  out +=
      fmt::format("{:<10} {:>10} {:>10} {:>8}  {}\n", "phase", "MiB", "wall us", "GB/s", "work / wait us per thread");
  for (const PhaseRow& r : s.rows) {
    std::string threads;
    for (size_t t = 0; t < r.work_us.size(); ++t)
      threads += fmt::format("{}{:.1f} / {:.1f}", t ? ", " : "", r.work_us[t], r.wait_us[t]);
    out += fmt::format("{:<10} {:>10.2f} {:>10.1f} {:>8.1f}  {}\n", r.phase, r.bytes / (1 << 20), r.wall_us, r.gb_s,
                       threads);
  }
  out += fmt::format("{:<10} {:>10.2f} {:>10.1f} {:>8.1f}\n", "all", s.bytes / (1 << 20), s.wall_us, s.gb_s);
  return out;
}

}  // namespace kvserve::bench
