#pragma once
// Zero-filled memory for the big, long-lived arrays the kernels stream through every step: repacked
// weights and the KV pool.
//
// Why not operator new: a decode step reads every weight byte once, and attention reads KV blocks that
// sit anywhere in the pool. On 4 KiB pages that is one TLB miss per page touched, and the hardware
// prefetchers stop at each page edge. Buffers of at least kHugePageBytes are therefore mapped 2 MiB
// aligned and advised as transparent huge pages (MADV_HUGEPAGE: most distributions only back a mapping
// with huge pages when asked, /sys/kernel/mm/transparent_hugepage/enabled = madvise). Where the kernel
// says no, the memory is still valid, on small pages. Smaller buffers come from the heap.
#include <cstddef>
#include <cstdint>
#include <memory>

namespace kvserve {

inline constexpr size_t kHugePageBytes = size_t{2} << 20;

// `bytes` zero bytes (at least 1), 64-byte aligned; 2 MiB aligned and huge-page advised from
// kHugePageBytes up. Throws Error when the memory cannot be had.
std::shared_ptr<uint8_t[]> allocate_large_buffer(size_t bytes);

// `bytes` zero bytes in a mapping of an unlinked temporary file (under $KVSERVE_TMPDIR, else $TMPDIR, else
// /var/tmp), 64-byte aligned: memory the kernel may drop once written back, for data that is written once and
// then rarely read, such as the row-major copy of a weight that the kernels read from its repacked copy (a
// weight converted at load has no model file to page back in from). nullptr where no such file can be had
// (its blocks are reserved up front, so a full disk fails here and not later in a write).
std::shared_ptr<uint8_t[]> allocate_file_backed_buffer(size_t bytes);

// Makes every page of [p, p + bytes) resident now (written as zeros where the kernel must fault it in),
// so the first writes of a later hot loop do not each stop in a page fault that clears a page: the KV
// pool is touched this way when asked (EngineOptions::prefault_kv), as llama.cpp clears its KV buffer
// and vLLM allocates its cache zeroed. Contents are kept; huge-page advice given before still applies.
void prefault_pages(void* p, size_t bytes);

}  // namespace kvserve
