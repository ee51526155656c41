#include "stats/clock.hpp"

#include <fstream>
#include <sstream>
#include <string>

namespace mdsm::stats {

namespace {

bool tsc_invariant() {
#if defined(__x86_64__)
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("flags", 0) != 0) continue;
    std::istringstream words(line);
    bool constant = false, nonstop = false;
    for (std::string w; words >> w;) {
      constant = constant || w == "constant_tsc";
      nonstop = nonstop || w == "nonstop_tsc";
    }
    return constant && nonstop;  // the first CPU speaks for all
  }
#endif
  return false;
}

std::uint64_t steady_ns() noexcept {
  return static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count());
}

}  // namespace

const bool g_tsc_invariant = tsc_invariant();
std::atomic<bool> g_timing{false};

namespace {
// The reference pair the rate is measured from. Initialized after g_tsc_invariant (same
// translation unit, declaration order).
const std::uint64_t g_ref_ticks = ticks();
const std::uint64_t g_ref_ns = steady_ns();
}  // namespace

double ns_per_tick() noexcept {
  if (!g_tsc_invariant) return 1.0;
  // At least 200 us of reference, so the two clocks' read jitter stays below 0.1%.
  std::uint64_t ns = steady_ns();
  while (ns - g_ref_ns < 200'000) ns = steady_ns();
  const std::uint64_t t = ticks();
  return t > g_ref_ticks ? static_cast<double>(ns - g_ref_ns) / static_cast<double>(t - g_ref_ticks) : 1.0;
}

}  // namespace mdsm::stats
