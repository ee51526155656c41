#include "common/deferred.hpp"

#include <cstdio>
#include <mutex>
#include <optional>

namespace mdsm::detail {

std::atomic<bool> g_has_deferred{false};
thread_local constinit int t_deferred_hold = 0;

namespace {
std::mutex g_mutex;
std::optional<error> g_error;  // guarded by g_mutex
}  // namespace

void defer_error(const error& e) {
  std::fprintf(stderr, "%s\n", e.what());
  std::lock_guard lk(g_mutex);
  if (g_error) return;  // keep the first: later ones are usually its consequences
  g_error.emplace(e);
  g_has_deferred.store(true, std::memory_order_release);
}

void rethrow_deferred_slow() {
  std::lock_guard lk(g_mutex);
  if (!g_error) {
    g_has_deferred.store(false, std::memory_order_release);
    throw error(MDSM_ERR_INTERNAL, "mdsm: deferred error vanished");
  }
  error e = *g_error;
  g_error.reset();
  g_has_deferred.store(false, std::memory_order_release);
  throw e;
}

void clear_deferred() {
  std::lock_guard lk(g_mutex);
  g_error.reset();
  g_has_deferred.store(false, std::memory_order_release);
}

}  // namespace mdsm::detail
