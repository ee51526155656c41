#include "stats/counters.hpp"

#include <mutex>
#include <unordered_map>
#include <vector>

namespace mdsm::stats {


thread_local constinit activity t_activity = activity::none;
thread_local constinit bool work_scope::t_in_work = false;

namespace storage {
thread_local constinit block* t_block = nullptr;
std::array<std::atomic<std::uint64_t>, k_counters> g_shared{};

void raise_peak(counter peak, std::uint64_t v) {
  auto& p = g_shared[static_cast<unsigned>(peak)];
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
  bool ticks;
};
constexpr bool count = false;
constexpr bool time = false;  // a count in clock ticks: see get()
constexpr bool gauge = true;
constexpr entry k_entries[] = {
#define MDSM_STATS_ENTRY(n, kind, desc) {#n, kind, desc, std::string_view(#kind) == "time"},
    MDSM_STATS_COUNTERS(MDSM_STATS_ENTRY)
#undef MDSM_STATS_ENTRY
};
static_assert(sizeof(k_entries) / sizeof(k_entries[0]) == k_counters);
}  // namespace

std::string_view name(counter c) { return k_entries[static_cast<unsigned>(c)].name; }
std::optional<counter> find(std::string_view n) {
  // By name through a hash table: mdsm::statistic() is called per barrier.
  static const auto* by_name = [] {
    auto* m = new std::unordered_map<std::string_view, counter>;
    for (unsigned i = 0; i < k_counters; ++i) m->emplace(k_entries[i].name, static_cast<counter>(i));
    return m;
  }();
  const auto it = by_name->find(n);
  if (it == by_name->end()) return std::nullopt;
  return it->second;
}
std::string_view description(counter c) { return k_entries[static_cast<unsigned>(c)].description; }
bool is_gauge(counter c) { return k_entries[static_cast<unsigned>(c)].gauge; }

namespace {

// Gauges and the peak declared right after each live in storage::g_shared.
bool is_shared(unsigned i) { return k_entries[i].gauge || (i > 0 && k_entries[i - 1].gauge); }

// The registry of per-thread blocks. Guarded by g_registry_mutex: the list, `retired` (counts
// of finished threads) and `baseline` (the totals at the last reset, subtracted on reading, so
// that a reset never writes a block another thread owns).
std::mutex g_registry_mutex;
std::vector<storage::block*>& blocks() {
  static auto* v = new std::vector<storage::block*>;  // never destroyed: threads may outlive statics
  return *v;
}
std::array<std::uint64_t, k_counters> g_retired{};
std::array<std::uint64_t, k_counters> g_baseline{};

std::uint64_t total_locked(unsigned i) {
  std::uint64_t sum = g_retired[i];
  for (const storage::block* b : blocks()) sum += b->v[i].load(std::memory_order_relaxed);
  return sum;
}

// Folds the thread's block into the retired totals when the thread ends.
struct thread_retirer {
  storage::block* b = nullptr;
  ~thread_retirer() {
    if (b == nullptr) return;
    std::lock_guard lk(g_registry_mutex);
    for (unsigned i = 0; i < k_counters; ++i) g_retired[i] += b->v[i].load(std::memory_order_relaxed);
    auto& v = blocks();
    std::erase(v, b);
    storage::t_block = nullptr;
    delete b;
  }
};

}  // namespace

storage::block* storage::attach_thread() {
  thread_local thread_retirer retirer;
  auto* b = new block;
  {
    std::lock_guard lk(g_registry_mutex);
    blocks().push_back(b);
  }
  retirer.b = b;
  t_block = b;
  return b;
}

std::uint64_t get(counter c) {
  const auto i = static_cast<unsigned>(c);
  if (is_shared(i)) return storage::g_shared[i].load(std::memory_order_relaxed);
  std::uint64_t v;
  {
    std::lock_guard lk(g_registry_mutex);
    v = total_locked(i) - g_baseline[i];
  }
  return k_entries[i].ticks ? static_cast<std::uint64_t>(static_cast<double>(v) * ns_per_tick()) : v;
}

std::uint64_t get_since_load(counter c) {
  std::lock_guard lk(g_registry_mutex);
  return total_locked(static_cast<unsigned>(c));
}

void reset() {
  std::lock_guard lk(g_registry_mutex);
  for (unsigned i = 0; i < k_counters; ++i) {
    if (k_entries[i].gauge) {
      ++i;  // the peak that follows restarts at the current value
      storage::g_shared[i].store(storage::g_shared[i - 1].load(std::memory_order_relaxed), std::memory_order_relaxed);
      continue;
    }
    g_baseline[i] = total_locked(i);
  }
}

}  // namespace mdsm::stats
