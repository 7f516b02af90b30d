#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "core/available_cpus.h"
#include "core/cpu_caches.h"
#include "core/dtype.h"
#include "core/fp16.h"
#include "core/handoff_probe.h"
#include "core/large_buffer.h"
#include "core/thread_pool.h"
#include "test_checks.h"

using namespace kvserve;

TEST(ThreadPool, ParallelForCoversEveryIndexOnce) {
  ThreadPool pool(3);
  for (int64_t n : {1, 2, 7, 64, 1000}) {
    for (int64_t grain : {1, 4, 16}) {
      std::vector<std::atomic<int>> hits(n);
      pool.parallel_for(n, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) hits[i]++;
      }, grain);
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << "n=" << n << " i=" << i;
    }
  }
}

TEST(ThreadPool, DynamicParallelForCoversEveryIndexOnceInGrainMultiples) {
  for (int threads : {1, 2, 3}) {
    ThreadPool pool(threads);
    for (int64_t n : {1, 2, 7, 64, 1000, 4099}) {
      for (int64_t grain : {1, 4, 16}) {
        std::vector<std::atomic<int>> hits(n);
        std::atomic<int> calls{0};
        std::atomic<bool> aligned{true};
        pool.parallel_for_dynamic(n, [&](int64_t b, int64_t e) {
          if (b % grain != 0 || (e != n && e % grain != 0) || b >= e) aligned = false;
          calls++;
          for (int64_t i = b; i < e; ++i) hits[i]++;
        }, grain);
        for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << "n=" << n << " i=" << i;
        EXPECT_TRUE(aligned.load()) << "n=" << n << " grain=" << grain;
        EXPECT_LE(calls.load(), std::max<int64_t>(1, threads * ThreadPool::kPiecesPerThread)) << "n=" << n;
      }
    }
  }
}

TEST(ThreadPool, BalancedParallelForCoversEveryIndexOnceInChunks) {
  for (int threads : {1, 2, 3}) {
    ThreadPool pool(threads);
    for (int64_t n : {1, 2, 7, 64, 1000, 4099}) {
      for (int64_t chunk : {1, 4, 16, 5000}) {
        std::vector<std::atomic<int>> hits(n);
        std::atomic<bool> aligned{true};
        pool.parallel_for_balanced(n, [&](int64_t b, int64_t e) {
          if (b % chunk != 0 || (e != n && e % chunk != 0) || b >= e) aligned = false;
          for (int64_t i = b; i < e; ++i) hits[i]++;
        }, chunk);
        for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << "n=" << n << " i=" << i;
        EXPECT_TRUE(aligned.load()) << "threads=" << threads << " n=" << n << " chunk=" << chunk;
      }
    }
  }
}

// The caller's share stalls after its first chunk until the worker, done with its own share, has taken a
// chunk from the back of the caller's: without stealing the caller would wait out the 10 s deadline.
TEST(ThreadPool, BalancedParallelForLetsAFreeThreadTakeTheOthersChunks) {
  ThreadPool pool(2);
  constexpr int64_t kN = 64;  // chunks of 1: the caller's share is [0, 32), the worker's [32, 64)
  const std::thread::id caller = std::this_thread::get_id();
  std::vector<std::atomic<int>> hits(kN);
  std::atomic<bool> stolen{false};
  std::atomic<int> caller_chunks{0};
  pool.parallel_for_balanced(kN, [&](int64_t b, int64_t e) {
    const bool on_caller = std::this_thread::get_id() == caller;
    if (!on_caller && b < kN / 2) stolen = true;
    if (on_caller && b < kN / 2 && caller_chunks++ > 0) {
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      while (!stolen && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
    }
    for (int64_t i = b; i < e; ++i) hits[i]++;
  }, 1);
  EXPECT_TRUE(stolen.load());
  for (int64_t i = 0; i < kN; ++i) ASSERT_EQ(hits[i].load(), 1) << i;
}

TEST(ThreadPool, RunGivesEachThreadItsIndex) {
  ThreadPool pool(4);
  for (int rep = 0; rep < 200; ++rep) {
    std::vector<std::atomic<int>> seen(4);
    pool.run([&](int ti, int nt) {
      ASSERT_EQ(nt, 4);
      seen[ti]++;
    });
    for (auto& s : seen) ASSERT_EQ(s.load(), 1);
  }
}

// Two threads of a job hand the probe's line back and forth (the others return at once), run after run with
// the line's values carried over: every run ends (a wrong base would leave a thread waiting for a value the
// line already passed) and thread a gets a positive time, everyone else 0. More threads than this machine's
// cores, so waits must yield.
TEST(HandoffProbe, ThreadsAAndBExchangeTheLineRunAfterRun) {
  for (int nt : {2, 3, 5}) {
    ThreadPool pool(nt);
    HandoffProbe probe;
    for (int run = 0; run < 20; ++run) {
      const int a = run % nt, b = (run + 1 + run / nt) % nt == a ? (a + 1) % nt : (run + 1 + run / nt) % nt;
      const int trips = 1 + run % 7, batches = 1 + run % 3;
      std::vector<double> got(static_cast<size_t>(nt), -1.0);
      pool.run([&](int ti, int) { got[static_cast<size_t>(ti)] = probe.run(ti, a, b, trips, batches); });
      probe.finish(trips, batches);
      for (int t = 0; t < nt; ++t) {
        if (t == a)
          EXPECT_GT(got[static_cast<size_t>(t)], 0.0) << "nt " << nt << " run " << run;
        else
          EXPECT_EQ(got[static_cast<size_t>(t)], 0.0) << "nt " << nt << " run " << run << " thread " << t;
      }
    }
  }
}

// Every thread's writes before a barrier are seen by every thread after it. With more threads than this
// machine has cores, and one thread 2 ms late in some phases (longer than any spin budget), waiting
// threads also go to sleep and must be woken.
TEST(ThreadPool, BarrierShowsEveryThreadsWritesEvenWhenWaitersSleep) {
  for (int nt : {2, 3, 8}) {
    ThreadPool pool(nt);
    constexpr int kPhases = 300;
    std::vector<int64_t> slot(static_cast<size_t>(nt), -1);  // plain: only the barriers order them
    std::atomic<int> mismatches{0};
    pool.run([&](int ti, int n) {
      for (int phase = 0; phase < kPhases; ++phase) {
        if (phase % 50 == 7 && ti == phase % n) std::this_thread::sleep_for(std::chrono::milliseconds(2));
        slot[static_cast<size_t>(ti)] = int64_t{phase} * n + ti;
        pool.barrier(ti);
        for (int j = 0; j < n; ++j)
          if (slot[static_cast<size_t>(j)] != int64_t{phase} * n + j) mismatches++;
        pool.barrier(ti);
      }
    });
    EXPECT_EQ(mismatches.load(), 0) << nt;
    EXPECT_GT(pool.sleeps(), 0u) << nt;
  }
}

TEST(ThreadPool, RunReturnsOnlyAfterASlowWorkerFinishes) {
  ThreadPool pool(3);
  for (int rep = 0; rep < 5; ++rep) {
    int finished = 0;  // plain: run() returning must order it
    pool.run([&](int ti, int) {
      if (ti != 2) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(3));
      finished = 1;
    });
    EXPECT_EQ(finished, 1) << rep;
  }
  EXPECT_GT(pool.sleeps(), 0u);  // the caller waited 3 ms: it slept instead of spinning
}

TEST(AvailableCpus, AtLeastOneAndNoMoreThanTheMachineHas) {
  const int n = available_cpus();
  EXPECT_GE(n, 1);
  if (std::thread::hardware_concurrency() > 0) {
    EXPECT_LE(n, static_cast<int>(std::thread::hardware_concurrency()));
  }
}

namespace {
void write_file(const std::filesystem::path& path, const std::string& text) {
  std::filesystem::create_directories(path.parent_path());
  std::ofstream(path) << text;
}
}  // namespace

TEST(AvailableCpus, PhysicalCoresCountSmtSiblingsOnce) {
  const std::filesystem::path root = std::filesystem::path(testing::TempDir()) / "kvserve_topology_test";
  std::filesystem::remove_all(root);
  // 2 cores x 2 threads, Linux's numbering (siblings n and n + 2), plus cpu4 on a kernel without
  // core_cpus_list and cpu5 without any topology.
  for (const auto& [cpu, list] : std::vector<std::pair<int, std::string>>{{0, "0,2"}, {1, "1,3"}, {2, "0,2"}, {3, "1,3"}})
    write_file(root / ("cpu" + std::to_string(cpu)) / "topology/core_cpus_list", list + "\n");
  write_file(root / "cpu4/topology/thread_siblings_list", "4\n");
  EXPECT_EQ(physical_cores({0, 1, 2, 3}, root), 2);
  EXPECT_EQ(physical_cores({0, 2}, root), 1);  // taskset on both threads of one core
  EXPECT_EQ(physical_cores({0, 1}, root), 2);  // one thread of each core
  EXPECT_EQ(physical_cores({3}, root), 1);
  EXPECT_EQ(physical_cores({0, 1, 2, 3, 4, 5}, root), 4);
  EXPECT_EQ(physical_cores({}, root), 0);
  std::filesystem::remove_all(root);
}

TEST(AvailableCpus, CpuListsParseAsTheKernelWritesThem) {
  EXPECT_EQ(parse_cpu_list("0-3,8,10-11\n"), (std::vector<int>{0, 1, 2, 3, 8, 10, 11}));
  EXPECT_EQ(parse_cpu_list("5"), (std::vector<int>{5}));
  EXPECT_EQ(parse_cpu_list(""), (std::vector<int>{}));
  for (const char* bad : {"3-1", "a", "1,", "1--2", "-1", "1,,2", "99999999"})
    EXPECT_EQ(parse_cpu_list(bad), std::nullopt) << bad;
}

TEST(AvailableCpus, HybridCpusKeepOnlyPerformanceCores) {
  const std::filesystem::path root = std::filesystem::path(testing::TempDir()) / "kvserve_hybrid_test";
  std::filesystem::remove_all(root);
  const std::vector<int> all = {0, 1, 2, 3, 4, 5, 6, 7};
  EXPECT_EQ(performance_cpus(all, root), all);  // not hybrid: no cpu_atom
  // An Alder Lake-like part: P-cores with SMT on CPUs 0-3, E-cores on 4-7.
  write_file(root / "cpu_core/cpus", "0-3\n");
  write_file(root / "cpu_atom/cpus", "4-7\n");
  EXPECT_EQ(performance_cpus(all, root), (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(performance_cpus({2, 5}, root), (std::vector<int>{2}));
  EXPECT_EQ(performance_cpus({5, 6}, root), (std::vector<int>{5, 6}));  // taskset on E-cores only
  write_file(root / "cpu_core/cpus", "garbage\n");
  EXPECT_EQ(performance_cpus(all, root), all);
  std::filesystem::remove_all(root);
}

TEST(CpuCaches, SizesParseAsSysfsWritesThem) {
  EXPECT_EQ(parse_cache_size("307200K\n"), int64_t{300} << 20);
  EXPECT_EQ(parse_cache_size("32M"), int64_t{32} << 20);
  EXPECT_EQ(parse_cache_size("1G"), int64_t{1} << 30);
  EXPECT_EQ(parse_cache_size("65536"), 65536);
  for (const char* bad : {"", "K", "0K", "-1K", "12KB", "1.5M", "x", "9999999999K"})
    EXPECT_EQ(parse_cache_size(bad), std::nullopt) << bad;
}

TEST(CpuCaches, LastLevelCountsEachInstanceOnce) {
  const std::filesystem::path root = std::filesystem::path(testing::TempDir()) / "kvserve_caches_test";
  std::filesystem::remove_all(root);
  EXPECT_EQ(last_level_cache_bytes(root), 0);  // no sysfs
  // Two CCDs of two CPUs: per CPU an L1d, an L1i, an L2 of its own; an L3 shared by each pair (by id).
  const auto write_cache = [](const std::filesystem::path& dir, const char* level, const char* type, const char* size) {
    write_file(dir / "level", std::string(level) + "\n");
    write_file(dir / "type", std::string(type) + "\n");
    write_file(dir / "size", std::string(size) + "\n");
  };
  for (int cpu = 0; cpu < 4; ++cpu) {
    const std::filesystem::path c = root / ("cpu" + std::to_string(cpu)) / "cache";
    write_cache(c / "index0", "1", "Data", "48K");
    write_cache(c / "index1", "1", "Instruction", "32K");
    write_cache(c / "index2", "2", "Unified", "2048K");
    write_cache(c / "index3", "3", "Unified", "32768K");
    write_file(c / "index3/id", std::to_string(cpu / 2) + "\n");
  }
  EXPECT_EQ(last_level_cache_bytes(root), int64_t{64} << 20);
  // Without ids the shared CPU lists tell the instances apart.
  for (int cpu = 0; cpu < 4; ++cpu) {
    const std::filesystem::path c = root / ("cpu" + std::to_string(cpu)) / "cache/index3";
    std::filesystem::remove(c / "id");
    write_file(c / "shared_cpu_list", cpu < 2 ? "0-1\n" : "2-3\n");
  }
  EXPECT_EQ(last_level_cache_bytes(root), int64_t{64} << 20);
  // A host whose caches stop at L2 (one per CPU, no id or list): each CPU's counts.
  for (int cpu = 0; cpu < 4; ++cpu) {
    std::filesystem::remove_all(root / ("cpu" + std::to_string(cpu)) / "cache/index3");
    if (cpu == 3) write_file(root / "cpu3/cache/index2/size", "garbage\n");  // unreadable: left out
  }
  EXPECT_EQ(last_level_cache_bytes(root), int64_t{6} << 20);
  // Entries that are not CPUs are not read.
  write_cache(root / "cpufreq/cache/index4", "4", "Unified", "1G");
  EXPECT_EQ(last_level_cache_bytes(root), int64_t{6} << 20);
  std::filesystem::remove_all(root);
}

TEST(CpuCaches, BeyondCachesIsAtLeastFourTimesThem) {
  EXPECT_GE(beyond_caches_bytes(1), 1);
  EXPECT_EQ(beyond_caches_bytes(int64_t{1} << 40), int64_t{1} << 40);
  EXPECT_EQ(beyond_caches_bytes(0), 4 * last_level_cache_bytes());
}

TEST(AvailableCpus, DefaultThreadsAreAtLeastOneAndNoMoreThanTheCpus) {
  const int n = default_compute_threads();
  EXPECT_GE(n, 1);
  EXPECT_LE(n, available_cpus());
}

TEST(AvailableCpus, CgroupLimitIsTheSmallestQuotaOnThePathToTheRoot) {
  const std::filesystem::path root = std::filesystem::path(testing::TempDir()) / "kvserve_cgroup_test";
  std::filesystem::remove_all(root);
  // v2: a 2-CPU limit on the parent, none on the process's own cgroup.
  write_file(root / "v2/kubepods/cpu.max", "200000 100000\n");
  write_file(root / "v2/kubepods/pod1/cpu.max", "max 100000\n");
  EXPECT_EQ(cgroup_cpu_limit("0::/kubepods/pod1\n", root / "v2"), 2.0);
  // A container: its cgroup's path does not exist in its own view, the root holds its limit.
  write_file(root / "ct/cpu.max", "150000 100000\n");
  EXPECT_EQ(cgroup_cpu_limit("0::/docker/abc\n", root / "ct"), 1.5);
  write_file(root / "nolimit/cpu.max", "max 100000\n");
  EXPECT_EQ(cgroup_cpu_limit("0::/\n", root / "nolimit"), std::nullopt);
  // v1, the cpu controller mounted with cpuacct; -1 is no limit.
  write_file(root / "v1/cpu,cpuacct/cpu.cfs_quota_us", "-1\n");
  write_file(root / "v1/cpu,cpuacct/cpu.cfs_period_us", "100000\n");
  const std::string v1 = "5:memory:/x\n4:cpu,cpuacct:/docker/x\n";
  EXPECT_EQ(cgroup_cpu_limit(v1, root / "v1"), std::nullopt);
  write_file(root / "v1/cpu,cpuacct/docker/x/cpu.cfs_quota_us", "50000\n");
  write_file(root / "v1/cpu,cpuacct/docker/x/cpu.cfs_period_us", "100000\n");
  EXPECT_EQ(cgroup_cpu_limit(v1, root / "v1"), 0.5);
  // Lines that say nothing, or files that do not parse, give no limit.
  write_file(root / "bad/cpu.max", "lots 100000\n");
  EXPECT_EQ(cgroup_cpu_limit("0::/\n", root / "bad"), std::nullopt);
  EXPECT_EQ(cgroup_cpu_limit("garbage\n\n3:memory:/\n", root / "v2"), std::nullopt);
  std::filesystem::remove_all(root);
}

TEST(LargeBuffer, ZeroFilledAlignedAndWritableOnBothPaths) {
  // Below one huge page: the heap, 64-byte aligned. From one huge page up: a 2 MiB aligned mapping whose
  // size is not a multiple of the huge page (the tail of the last page must still be ours).
  for (size_t bytes : {size_t{0}, size_t{1}, size_t{4097}, kHugePageBytes - 1, kHugePageBytes,
                       3 * kHugePageBytes + 12345}) {
    std::shared_ptr<uint8_t[]> buf = allocate_large_buffer(bytes);
    ASSERT_NE(buf, nullptr) << bytes;
    const auto addr = reinterpret_cast<uintptr_t>(buf.get());
    EXPECT_EQ(addr % 64, 0u) << bytes;
    if (bytes >= kHugePageBytes) {
      EXPECT_EQ(addr % kHugePageBytes, 0u) << bytes;
    }
    const size_t n = std::max<size_t>(bytes, 1);
    size_t nonzero = 0;
    for (size_t i = 0; i < n; i += 997) nonzero += buf[i] != 0;
    nonzero += buf[n - 1] != 0;
    EXPECT_EQ(nonzero, 0u) << bytes;
    buf[0] = 1;
    buf[n - 1] = 2;
    EXPECT_EQ(buf[n - 1], 2) << bytes;
  }
}

// A file-backed buffer: zeros, writable, in an unlinked file under $KVSERVE_TMPDIR (nothing left in the folder);
// nullptr, not a crash, where the folder cannot hold it.
TEST(LargeBuffer, FileBackedBufferLivesInAnUnlinkedFile) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("kvserve-file-buffer-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  ::setenv("KVSERVE_TMPDIR", dir.c_str(), 1);
  {
    const size_t bytes = 3 * kHugePageBytes + 123;
    std::shared_ptr<uint8_t[]> buf = allocate_file_backed_buffer(bytes);
    ASSERT_NE(buf, nullptr);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(buf.get()) % 64, 0u);
    EXPECT_EQ(buf[0] + buf[bytes / 2] + buf[bytes - 1], 0);
    buf[bytes - 1] = 7;
    EXPECT_EQ(buf[bytes - 1], 7);
    const std::string line = test::mapping_of(buf.get());
    EXPECT_NE(line.find("kvserve-weights-"), std::string::npos) << line;
    EXPECT_NE(line.find("(deleted)"), std::string::npos) << line;
    EXPECT_TRUE(std::filesystem::is_empty(dir));
  }
  ::setenv("KVSERVE_TMPDIR", (dir / "missing").c_str(), 1);
  EXPECT_EQ(allocate_file_backed_buffer(4096), nullptr);
  ::unsetenv("KVSERVE_TMPDIR");
  std::filesystem::remove_all(dir);
}

TEST(Fp16, RoundTripsEveryHalf) {
  for (uint32_t h = 0; h < 65536; ++h) {
    float f = fp16_to_fp32(static_cast<uint16_t>(h));
    if (std::isnan(f)) continue;
    ASSERT_EQ(fp32_to_fp16(f), h) << h;
  }
}

TEST(Fp16, RoundsToNearestEven) {
  EXPECT_EQ(fp32_to_fp16(1.0f), 0x3c00);
  EXPECT_EQ(fp16_to_fp32(fp32_to_fp16(1.0f + 1.0f / 4096)), 1.0f);  // exactly half an ulp: ties to even
  EXPECT_EQ(fp16_to_fp32(fp32_to_fp16(65520.0f)), INFINITY);
  EXPECT_EQ(fp32_to_bf16(1.00390625f), 0x3f80);  // tie to even
  EXPECT_EQ(bf16_to_fp32(fp32_to_bf16(-2.5f)), -2.5f);
}

TEST(DType, RowBytesMatchGgmlBlocks) {
  EXPECT_EQ(row_bytes(DType::Q8_0, 256), 8u * 34);
  EXPECT_EQ(row_bytes(DType::Q4_K, 512), 2u * 144);
  EXPECT_EQ(row_bytes(DType::Q6_K, 256), 210u);
  EXPECT_EQ(row_bytes(DType::F16, 10), 20u);
  EXPECT_FALSE(dtype_info(99u).has_value());
}
