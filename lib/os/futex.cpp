#include "os/futex.hpp"

#include <ctime>
#include <linux/futex.h>
#include <linux/membarrier.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace mdsm::os {

static_assert(sizeof(std::atomic<std::uint32_t>) == sizeof(std::uint32_t) &&
              std::atomic<std::uint32_t>::is_always_lock_free);

// Not FUTEX_PRIVATE_FLAG: the word lives in memory shared between processes.
void futex_wait(std::atomic<std::uint32_t>& word, std::uint32_t expected, std::uint64_t ns) noexcept {
  timespec ts{static_cast<time_t>(ns / 1'000'000'000), static_cast<long>(ns % 1'000'000'000)};
  syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&word), FUTEX_WAIT, expected, &ts, nullptr, 0);
}

void futex_wait_forever(std::atomic<std::uint32_t>& word, std::uint32_t expected) noexcept {
  syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&word), FUTEX_WAIT, expected, nullptr, nullptr, 0);
}

void futex_wake(std::atomic<std::uint32_t>& word) noexcept {
  syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&word), FUTEX_WAKE, 1, nullptr, nullptr, 0);
}

bool register_heavy_fence() noexcept {
  const long offered = syscall(SYS_membarrier, MEMBARRIER_CMD_QUERY, 0, 0);
  if (offered < 0 || (offered & MEMBARRIER_CMD_GLOBAL_EXPEDITED) == 0 ||
      (offered & MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED) == 0)
    return false;
  return syscall(SYS_membarrier, MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED, 0, 0) == 0;
}

void heavy_fence() noexcept {
  // Cannot fail once registered (EINVAL only for an unknown command).
  syscall(SYS_membarrier, MEMBARRIER_CMD_GLOBAL_EXPEDITED, 0, 0);
}

}  // namespace mdsm::os

namespace mdsm::os {

void request_short_slice() noexcept {
  struct sched_attr_v1 {  // struct sched_attr of <linux/sched/types.h>, first version
    std::uint32_t size;
    std::uint32_t policy;
    std::uint64_t flags;
    std::int32_t nice;
    std::uint32_t priority;
    std::uint64_t runtime;
    std::uint64_t deadline;
    std::uint64_t period;
  } attr{};
  attr.size = sizeof attr;
  attr.policy = 0;            // SCHED_OTHER
  attr.runtime = 100'000;     // ns: the slice (the kernel clamps it to its own bounds)
  syscall(SYS_sched_setattr, 0, &attr, 0u);
}

}  // namespace mdsm::os
