#include "core/available_cpus.h"

#include <sched.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace kvserve {

namespace {

std::optional<std::string> read_small_file(const std::filesystem::path& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

std::optional<double> parse_number(std::string_view s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.remove_suffix(1);
  if (s.empty()) return std::nullopt;
  try {
    size_t used = 0;
    const double v = std::stod(std::string(s), &used);
    if (used != s.size()) return std::nullopt;
    return v;
  } catch (...) {
    return std::nullopt;
  }
}

// cgroup v2 cpu.max: "max 100000" (no limit) or "<quota> <period>".
std::optional<double> limit_from_cpu_max(std::string_view text) {
  const size_t space = text.find(' ');
  if (space == std::string_view::npos) return std::nullopt;
  const auto quota = parse_number(text.substr(0, space));
  const auto period = parse_number(text.substr(space + 1));
  if (!quota || !period || *quota <= 0 || *period <= 0) return std::nullopt;
  return *quota / *period;
}

// cgroup v1: cpu.cfs_quota_us is -1 when there is no limit.
std::optional<double> limit_from_cfs(const std::filesystem::path& dir) {
  const auto quota_text = read_small_file(dir / "cpu.cfs_quota_us");
  const auto period_text = read_small_file(dir / "cpu.cfs_period_us");
  if (!quota_text || !period_text) return std::nullopt;
  const auto quota = parse_number(*quota_text);
  const auto period = parse_number(*period_text);
  if (!quota || !period || *quota <= 0 || *period <= 0) return std::nullopt;
  return *quota / *period;
}

// The smallest limit `read_limit` finds in base / cgroup_path and each of its parents up to base.
template <typename ReadLimit>
std::optional<double> smallest_limit_up_to(const std::filesystem::path& base, std::string_view cgroup_path,
                                           ReadLimit read_limit) {
  std::optional<double> smallest;
  std::filesystem::path rel = std::filesystem::path(std::string(cgroup_path)).relative_path();
  for (;;) {
    const std::filesystem::path dir = rel.empty() ? base : base / rel;
    if (const auto limit = read_limit(dir)) smallest = smallest ? std::min(*smallest, *limit) : *limit;
    if (rel.empty()) break;
    rel = rel.parent_path();
  }
  return smallest;
}

std::optional<double> min_of(std::optional<double> a, std::optional<double> b) {
  if (!a) return b;
  if (!b) return a;
  return std::min(*a, *b);
}

}  // namespace

std::optional<double> cgroup_cpu_limit(std::string_view self_cgroup, const std::filesystem::path& root) {
  std::optional<double> limit;
  std::istringstream lines{std::string(self_cgroup)};
  for (std::string line; std::getline(lines, line);) {
    // "<hierarchy id>:<controllers>:<path>"; cgroup v2 is "0::<path>".
    const size_t first = line.find(':');
    const size_t second = first == std::string::npos ? std::string::npos : line.find(':', first + 1);
    if (second == std::string::npos) continue;
    const std::string id = line.substr(0, first);
    const std::string controllers = line.substr(first + 1, second - first - 1);
    const std::string_view path = std::string_view(line).substr(second + 1);
    if (id == "0" && controllers.empty()) {
      limit = min_of(limit, smallest_limit_up_to(root, path, [](const std::filesystem::path& dir) {
                       const auto text = read_small_file(dir / "cpu.max");
                       return text ? limit_from_cpu_max(*text) : std::nullopt;
                     }));
      continue;
    }
    std::vector<std::string> names;
    std::istringstream list(controllers);
    for (std::string name; std::getline(list, name, ',');) names.push_back(name);
    if (std::find(names.begin(), names.end(), "cpu") == names.end()) continue;
    // The v1 cpu hierarchy is mounted under its controllers' names (cpu, or cpu,cpuacct with links).
    for (const char* mount : {"cpu", "cpu,cpuacct", "cpuacct,cpu"}) {
      const std::filesystem::path base = root / mount;
      std::error_code ec;
      if (!std::filesystem::is_directory(base, ec)) continue;
      limit = min_of(limit, smallest_limit_up_to(base, path, limit_from_cfs));
      break;
    }
  }
  return limit;
}

int physical_cores(const std::vector<int>& cpus, const std::filesystem::path& sys_cpu) {
  std::set<std::string> cores;
  for (const int cpu : cpus) {
    const std::filesystem::path topology = sys_cpu / ("cpu" + std::to_string(cpu)) / "topology";
    std::optional<std::string> siblings = read_small_file(topology / "core_cpus_list");
    if (!siblings || siblings->empty()) siblings = read_small_file(topology / "thread_siblings_list");
    while (siblings && !siblings->empty() && (siblings->back() == '\n' || siblings->back() == ' '))
      siblings->pop_back();
    cores.insert(siblings && !siblings->empty() ? *siblings : "cpu" + std::to_string(cpu) + " alone");
  }
  return static_cast<int>(cores.size());
}

std::optional<std::vector<int>> parse_cpu_list(std::string_view text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.remove_suffix(1);
  std::vector<int> cpus;
  constexpr int kMaxCpu = 1 << 16;
  auto number = [](std::string_view s) -> std::optional<int> {
    if (s.empty() || s.size() > 6) return std::nullopt;
    int v = 0;
    for (const char c : s) {
      if (c < '0' || c > '9') return std::nullopt;
      v = v * 10 + (c - '0');
    }
    return v < kMaxCpu ? std::optional<int>(v) : std::nullopt;
  };
  while (!text.empty()) {
    const size_t comma = text.find(',');
    const std::string_view item = text.substr(0, comma);
    const size_t dash = item.find('-');
    const auto first = number(item.substr(0, dash));
    const auto last = dash == std::string_view::npos ? first : number(item.substr(dash + 1));
    if (!first || !last || *last < *first) return std::nullopt;
    for (int cpu = *first; cpu <= *last; ++cpu) cpus.push_back(cpu);
    if (comma == std::string_view::npos) break;
    text.remove_prefix(comma + 1);
    if (text.empty()) return std::nullopt;  // a trailing comma
  }
  return cpus;
}

std::vector<int> performance_cpus(const std::vector<int>& cpus, const std::filesystem::path& sys_devices) {
  const auto atom_text = read_small_file(sys_devices / "cpu_atom" / "cpus");
  const auto core_text = read_small_file(sys_devices / "cpu_core" / "cpus");
  if (!atom_text || !core_text) return cpus;
  const auto core = parse_cpu_list(*core_text);
  if (!core) return cpus;
  std::vector<int> on_p_cores;
  for (const int cpu : cpus)
    if (std::find(core->begin(), core->end(), cpu) != core->end()) on_p_cores.push_back(cpu);
  return on_p_cores.empty() ? cpus : on_p_cores;
}

namespace {

std::vector<int> affinity_cpus() {
  std::vector<int> cpus;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu)
      if (CPU_ISSET(cpu, &set)) cpus.push_back(cpu);
  }
  return cpus;
}

int capped_by_quota(int n) {
  if (const auto self = read_small_file("/proc/self/cgroup")) {
    if (const auto limit = cgroup_cpu_limit(*self, "/sys/fs/cgroup"))
      n = std::min(n, static_cast<int>(std::ceil(*limit - 1e-9)));
  }
  return std::max(1, n);
}

}  // namespace

int available_cpus() {
  const std::vector<int> cpus = affinity_cpus();
  return capped_by_quota(cpus.empty() ? static_cast<int>(std::thread::hardware_concurrency())
                                      : static_cast<int>(cpus.size()));
}

int default_compute_threads() {
  const std::vector<int> cpus = affinity_cpus();
  return capped_by_quota(cpus.empty() ? static_cast<int>(std::thread::hardware_concurrency())
                                      : physical_cores(performance_cpus(cpus, "/sys/devices"),
                                                       "/sys/devices/system/cpu"));
}

}  // namespace kvserve
