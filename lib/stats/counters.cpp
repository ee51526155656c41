#include "stats/counters.hpp"

namespace mdsm::stats {

namespace storage {
std::array<std::atomic<std::uint64_t>, k_counters> g_values{};

void raise_peak(counter peak, std::uint64_t v) {
  auto& p = g_values[static_cast<unsigned>(peak)];
  std::uint64_t seen = p.load(std::memory_order_relaxed);
  while (v > seen && !p.compare_exchange_weak(seen, v, std::memory_order_relaxed)) {
  }
}
}  // namespace storage

namespace {
struct entry {
  std::string_view name;
  bool gauge;
  std::string_view description;
};
constexpr bool count = false;
constexpr bool gauge = true;
constexpr entry k_entries[] = {
#define MDSM_STATS_ENTRY(n, kind, desc) {#n, kind, desc},
    MDSM_STATS_COUNTERS(MDSM_STATS_ENTRY)
#undef MDSM_STATS_ENTRY
};
static_assert(sizeof(k_entries) / sizeof(k_entries[0]) == k_counters);
}  // namespace

std::string_view name(counter c) { return k_entries[static_cast<unsigned>(c)].name; }
std::string_view description(counter c) { return k_entries[static_cast<unsigned>(c)].description; }
bool is_gauge(counter c) { return k_entries[static_cast<unsigned>(c)].gauge; }

void reset() {
  for (unsigned i = 0; i < k_counters; ++i) {
    if (k_entries[i].gauge) {
      ++i;  // the peak that follows restarts at the current value
      storage::g_values[i].store(storage::g_values[i - 1].load(std::memory_order_relaxed), std::memory_order_relaxed);
      continue;
    }
    storage::g_values[i].store(0, std::memory_order_relaxed);
  }
}

}  // namespace mdsm::stats
