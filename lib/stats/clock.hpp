// Cheap timestamps for the time counters (handler_ns, wait_ns), which are taken around every
// handler and every wait: on this project's VMs clock_gettime costs 25-35 ns, four of them per
// message round trip were a sixth of its cost.
//
// ticks() reads the TSC where it is invariant (x86-64 with constant_tsc and nonstop_tsc: the rate
// never changes and it never stops, which is also when Linux uses it as its clocksource), else
// steady_clock nanoseconds. Tick counts are turned into nanoseconds only when read, with the
// rate measured against steady_clock between library load and the reading.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>

#if defined(__x86_64__)
#include <x86intrin.h>
#endif

namespace mdsm::stats {

extern const bool g_tsc_invariant;  // decided once, at library load

inline std::uint64_t ticks() noexcept {
#if defined(__x86_64__)
  if (g_tsc_invariant) return __rdtsc();
#endif
  return static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count());
}

// Nanoseconds per tick (1 without an invariant TSC).
double ns_per_tick() noexcept;

// Whether the `time` counters (handler_ns, wait_ns) are kept. Off unless statistics were asked
// for (MDSM_STATS, MDSM_STATS_TIMING=1, mdsm::set_statistics_timing): each takes two clock reads
// per handler or wait, ~15 ns each on our VMs, and four of them sit on the critical path of every
// message round trip.
extern std::atomic<bool> g_timing;
inline bool timing() noexcept { return g_timing.load(std::memory_order_relaxed); }

}  // namespace mdsm::stats
