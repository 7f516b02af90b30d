#include "core/large_buffer.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>

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

std::shared_ptr<uint8_t[]> allocate_file_backed_buffer(size_t bytes) {
  if (bytes == 0) bytes = 1;
  std::string dir = "/var/tmp";
  for (const char* var : {"KVSERVE_TMPDIR", "TMPDIR"})
    if (const char* v = std::getenv(var); v != nullptr && *v != '\0') {
      dir = v;
      break;
    }
  std::string path = dir + "/kvserve-weights-XXXXXX";
  const int fd = ::mkstemp(path.data());
  if (fd < 0) return nullptr;
  ::unlink(path.c_str());  // the mapping keeps the file; nothing is left behind on exit
  const auto size = static_cast<off_t>(bytes);
  void* p = MAP_FAILED;
  if (::posix_fallocate(fd, 0, size) == 0) p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);
  if (p == MAP_FAILED) return nullptr;
  return std::shared_ptr<uint8_t[]>(static_cast<uint8_t*>(p), [bytes](uint8_t* q) { ::munmap(q, bytes); });
}

void prefault_pages(void* p, size_t bytes) {
  if (p == nullptr || bytes == 0) return;
  constexpr size_t kSmallPage = 4096;
  const auto start = reinterpret_cast<uintptr_t>(p) / kSmallPage * kSmallPage;
  const uintptr_t end = reinterpret_cast<uintptr_t>(p) + bytes;
#ifdef MADV_POPULATE_WRITE
  // One call, faulted in by the kernel (huge pages where advised); Linux 5.14 and later.
  if (::madvise(reinterpret_cast<void*>(start), end - start, MADV_POPULATE_WRITE) == 0) return;
#endif
  // Older kernels: touch one byte per small page. Adding zero through a volatile pointer writes the page
  // without changing it (the memory may already hold data).
  for (uintptr_t a = std::max(start, reinterpret_cast<uintptr_t>(p)); a < end; a = (a / kSmallPage + 1) * kSmallPage) {
    volatile uint8_t* b = reinterpret_cast<volatile uint8_t*>(a);
    *b = static_cast<uint8_t>(*b + 0);
  }
}

}  // namespace kvserve
