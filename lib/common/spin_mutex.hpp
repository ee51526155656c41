// A lock for short critical sections of bounded CPU work that several threads take on every
// message (the coherence engine's metadata lock, taken three times per RELEASE hop): lock and
// unlock are one exchange and one store, where a std::mutex pair costs ~100 instructions.
// Never hold it across a wait. A contended lock() spins briefly, then yields: on an
// oversubscribed machine the holder may be descheduled, and spinning would keep it from running.
// Meets the Lockable requirements (std::lock_guard, std::unique_lock).
#pragma once

#include <atomic>

namespace mdsm::detail {

class spin_mutex {
 public:
  void lock() noexcept {
    if (!locked_.exchange(true, std::memory_order_acquire)) [[likely]]
      return;
    lock_contended();
  }
  bool try_lock() noexcept {
    return !locked_.load(std::memory_order_relaxed) && !locked_.exchange(true, std::memory_order_acquire);
  }
  void unlock() noexcept { locked_.store(false, std::memory_order_release); }

 private:
  void lock_contended() noexcept;
  std::atomic<bool> locked_{false};
};

}  // namespace mdsm::detail
