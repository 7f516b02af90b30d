#include "cli/compute_threads.h"

#include <cstdio>

#include "core/available_cpus.h"
#include "core/thread_pool.h"

namespace kvserve::cli {

void set_compute_threads(int requested) {
  if (requested <= 0) return;
  ThreadPool::set_global_threads(requested);
  const int cpus = available_cpus();
  if (requested > cpus)
    std::fprintf(stderr,
                 "kvserve: warning: %d threads on the %d CPU%s this process may use (affinity and CPU quota): "
                 "steps will wait on threads without a core; leave -t out to use %d\n",
                 requested, cpus, cpus == 1 ? "" : "s", default_compute_threads());
}

}  // namespace kvserve::cli
