#include "core/large_buffer.h"

#include <sys/mman.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <new>

#include "core/error.h"

namespace kvserve {

namespace {

// Maps `bytes` (a multiple of kHugePageBytes) at a 2 MiB boundary: a huge page can only back an aligned
// 2 MiB range, so over-map by one huge page and unmap the unaligned head and tail.
uint8_t* map_huge_aligned(size_t bytes) {
  const size_t span = bytes + kHugePageBytes;
  void* raw = ::mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) fail("cannot map {} bytes: {}", bytes, std::strerror(errno));
  const auto start = reinterpret_cast<uintptr_t>(raw);
  const uintptr_t aligned = (start + kHugePageBytes - 1) & ~(uintptr_t{kHugePageBytes} - 1);
  if (aligned > start) ::munmap(raw, aligned - start);
  const uintptr_t end = start + span;
  if (end > aligned + bytes) ::munmap(reinterpret_cast<void*>(aligned + bytes), end - (aligned + bytes));
#ifdef MADV_HUGEPAGE
  // Advice only: on a kernel without THP the pages stay small.
  ::madvise(reinterpret_cast<void*>(aligned), bytes, MADV_HUGEPAGE);
#endif
  return reinterpret_cast<uint8_t*>(aligned);
}

}  // namespace

std::shared_ptr<uint8_t[]> allocate_large_buffer(size_t bytes) {
  if (bytes == 0) bytes = 1;
  if (bytes < kHugePageBytes) {
    auto* p = new (std::align_val_t{64}, std::nothrow) uint8_t[bytes]();
    if (p == nullptr) fail("cannot allocate {} bytes", bytes);
    return std::shared_ptr<uint8_t[]>(p, [](uint8_t* q) { ::operator delete[](q, std::align_val_t{64}); });
  }
  const size_t rounded = (bytes + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes;
  uint8_t* p = map_huge_aligned(rounded);
  return std::shared_ptr<uint8_t[]>(p, [rounded](uint8_t* q) { ::munmap(q, rounded); });
}

}  // namespace kvserve
