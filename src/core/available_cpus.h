#pragma once
// How many threads the process should compute on by default. std::thread::hardware_concurrency() counts
// the machine's CPUs, not the ones the process may use: under `taskset`, a cpuset or a container's CPU
// quota (docker --cpus, a Kubernetes limit) it gives more threads than cores, and the pool's threads
// then wait on each other's time slices.
#include <filesystem>
#include <optional>
#include <string_view>
#include <vector>

namespace kvserve {

// The CPUs in this process's affinity mask, capped by its cgroup CPU quota rounded up; at least 1.
int available_cpus();

// The default compute thread count: the physical cores among the CPUs in this process's affinity mask
// (only its performance cores on a hybrid CPU, see performance_cpus), capped by its cgroup CPU quota
// rounded up; at least 1. On an SMT host two threads on one core share its
// load and FMA units and its caches, so a second thread there adds little to the arithmetic and nothing
// to the memory bandwidth a decode step waits on, while every barrier then waits for the slower sibling
// (llama.cpp defaults to physical cores for the same reason). -t still takes any count.
int default_compute_threads();

// How many physical cores the CPUs `cpus` sit on, from the topology under `sys_cpu`
// (/sys/devices/system/cpu): CPUs with the same core_cpus_list (or, on older kernels,
// thread_siblings_list) are one core. A CPU whose topology cannot be read counts as a core of its own.
int physical_cores(const std::vector<int>& cpus, const std::filesystem::path& sys_cpu);

// The CPUs of `cpus` on performance cores when the CPU is hybrid: Linux lists a hybrid Intel part's P-core
// and E-core CPUs in <sys_devices>/cpu_core/cpus and <sys_devices>/cpu_atom/cpus (/sys/devices). A decode
// step ends at a barrier, where the P-cores would wait for the slower E-cores; llama.cpp leaves E-cores out
// by default too. `cpus` unchanged when the host is not hybrid or none of them is on a P-core.
std::vector<int> performance_cpus(const std::vector<int>& cpus, const std::filesystem::path& sys_devices);

// A kernel CPU list ("0-3,8,10-11") as CPU numbers; nullopt when it is malformed.
std::optional<std::vector<int>> parse_cpu_list(std::string_view text);

// The CPU quota (in CPUs, e.g. 1.5) that the cgroups named in `self_cgroup` (the text of
// /proc/self/cgroup) impose, read under `root` (/sys/fs/cgroup): cgroup v2's cpu.max, or v1's
// cpu.cfs_quota_us / cpu.cfs_period_us, in the process's cgroup and each parent up to the root (inside a
// container the cgroup's path may not exist there, and the root holds the container's own limit). The
// smallest limit found; nullopt when there is none.
std::optional<double> cgroup_cpu_limit(std::string_view self_cgroup, const std::filesystem::path& root);

}  // namespace kvserve
