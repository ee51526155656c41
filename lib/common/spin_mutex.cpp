#include "common/spin_mutex.hpp"

#include <sched.h>

namespace mdsm::detail {

void spin_mutex::lock_contended() noexcept {
  // Critical sections are a few hundred instructions: spinning this long covers a holder that is
  // running; past it the holder is most likely descheduled, so give it the core.
  constexpr int k_spins = 128;
  for (int spins = 0;; ++spins) {
    // Test before exchanging: a failed exchange would still take the line from the holder.
    if (!locked_.load(std::memory_order_relaxed) && !locked_.exchange(true, std::memory_order_acquire)) return;
    if (spins < k_spins) {
#if defined(__x86_64__) || defined(__i386__)
      __builtin_ia32_pause();
#endif
    } else {
      sched_yield();
    }
  }
}

}  // namespace mdsm::detail
