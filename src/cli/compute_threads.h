#pragma once
// The -t option of the subcommands that compute.

namespace kvserve::cli {

// Sizes the global pool to `requested` threads (0: leave the default, default_compute_threads(): the
// physical cores the process may use). More threads
// than the process has CPUs is allowed (a user may know better), with a warning on stderr: each step
// then waits on threads that have no core.
void set_compute_threads(int requested);

}  // namespace kvserve::cli
