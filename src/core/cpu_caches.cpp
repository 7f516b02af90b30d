#include "core/cpu_caches.h"

#include <algorithm>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <system_error>

namespace kvserve {

namespace {

std::optional<std::string> read_line(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::string line;
  if (!in || !std::getline(in, line)) return std::nullopt;
  while (!line.empty() && (line.back() == ' ' || line.back() == '\r')) line.pop_back();
  return line;
}

bool is_cpu_dir(const std::string& name) {
  return name.size() > 3 && name.compare(0, 3, "cpu") == 0 &&
         std::all_of(name.begin() + 3, name.end(), [](char c) { return c >= '0' && c <= '9'; });
}

}  // namespace

std::optional<int64_t> parse_cache_size(std::string_view text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.remove_suffix(1);
  int64_t unit = 1;
  if (!text.empty()) {
    switch (text.back()) {
      case 'K':
        unit = int64_t{1} << 10;
        break;
      case 'M':
        unit = int64_t{1} << 20;
        break;
      case 'G':
        unit = int64_t{1} << 30;
        break;
      default:
        break;
    }
    if (unit != 1) text.remove_suffix(1);
  }
  // At most 9 digits: with a G unit still far inside int64_t.
  if (text.empty() || text.size() > 9) return std::nullopt;
  int64_t n = 0;
  for (const char c : text) {
    if (c < '0' || c > '9') return std::nullopt;
    n = n * 10 + (c - '0');
  }
  if (n == 0) return std::nullopt;
  return n * unit;
}

int64_t last_level_cache_bytes(const std::filesystem::path& sys_cpu) {
  // Per level, each instance's size by its id (or CPU list).
  std::map<int, std::map<std::string, int64_t>> levels;
  std::error_code ec;
  for (std::filesystem::directory_iterator cpu(sys_cpu, ec), end; !ec && cpu != end; cpu.increment(ec)) {
    if (!is_cpu_dir(cpu->path().filename().string())) continue;
    std::error_code ec2;
    for (std::filesystem::directory_iterator idx(cpu->path() / "cache", ec2), end2; !ec2 && idx != end2;
         idx.increment(ec2)) {
      const std::filesystem::path dir = idx->path();
      if (dir.filename().string().rfind("index", 0) != 0) continue;
      const auto type = read_line(dir / "type");
      const auto level_text = read_line(dir / "level");
      const auto size_text = read_line(dir / "size");
      if (!type || (*type != "Unified" && *type != "Data") || !level_text || !size_text) continue;
      const auto size = parse_cache_size(*size_text);
      if (!size || level_text->size() != 1 || (*level_text)[0] < '1' || (*level_text)[0] > '9') continue;
      std::string key;
      if (const auto id = read_line(dir / "id"))
        key = "id:" + *id;
      else if (const auto cpus = read_line(dir / "shared_cpu_list"))
        key = "cpus:" + *cpus;
      else
        key = "own:" + cpu->path().filename().string();  // the CPU's own instance
      levels[(*level_text)[0] - '0'][key] = *size;
    }
  }
  if (levels.empty()) return 0;
  int64_t total = 0;
  for (const auto& [id, bytes] : levels.rbegin()->second) total += bytes;
  return total;
}

int64_t last_level_cache_bytes() {
  static const int64_t bytes = last_level_cache_bytes("/sys/devices/system/cpu");
  return bytes;
}

int64_t beyond_caches_bytes(int64_t at_least) { return std::max(at_least, 4 * last_level_cache_bytes()); }

}  // namespace kvserve
