#pragma once
// How much the host's last-level caches hold, so that a benchmark meant to measure memory sizes its
// buffers beyond them. A fixed "far beyond any cache" is not: this project's Xeon VM has a 300 MiB L3, in
// which a triad over 3 x 64 MiB read ~1.6x faster than over arrays of 256 MiB and more (45-54 against
// ~30 GB/s), and a decode set against that triad looked 0.72 of a bound it was not measured against.
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string_view>

namespace kvserve {

// Bytes in a cache "size" file as sysfs writes it ("307200K", "32M", "1G", or plain bytes); nullopt when
// it is malformed or zero.
std::optional<int64_t> parse_cache_size(std::string_view text);

// The bytes of all the host's last-level caches together, from `sys_cpu` (/sys/devices/system/cpu): the
// data or unified caches of the highest level any CPU lists, each instance counted once (by its id, or its
// shared_cpu_list where there is no id). 0 when none can be read (no sysfs, another OS).
int64_t last_level_cache_bytes(const std::filesystem::path& sys_cpu);

// This host's, read once.
int64_t last_level_cache_bytes();

// A buffer size that memory, not the last-level caches, serves: at least `at_least`, and at least four
// times the caches (STREAM's rule for its arrays; a cyclic walk over a little more than the cache can
// still hit in it under a scan-resistant replacement policy).
int64_t beyond_caches_bytes(int64_t at_least);

}  // namespace kvserve
