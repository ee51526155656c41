// Futexes on memory that other processes of the host map too (net::doorbells).
#pragma once

#include <atomic>
#include <cstdint>

namespace mdsm::os {

// Sleeps while *word == expected, at most `ns` nanoseconds (or until woken). Spurious returns
// are possible; the caller re-checks its condition.
void futex_wait(std::atomic<std::uint32_t>& word, std::uint32_t expected, std::uint64_t ns) noexcept;
// Sleeps while *word == expected, until woken (or spuriously).
void futex_wait_forever(std::atomic<std::uint32_t>& word, std::uint32_t expected) noexcept;
// Wakes one thread (of any process) sleeping on `word`.
void futex_wake(std::atomic<std::uint32_t>& word) noexcept;

// Asymmetric fences between the processes of the host (Linux membarrier, 4.16 and later): a
// process that registered may replace its full fences on a frequent path by compiler barriers
// when the rare path of the other side calls heavy_fence(), which has every running thread of
// every registered process execute a full memory barrier before it returns. Registers this
// process; false where the kernel does not offer it (then both sides must fence).
bool register_heavy_fence() noexcept;
// Pre: register_heavy_fence() returned true in every process whose fences this stands for.
void heavy_fence() noexcept;

}  // namespace mdsm::os

namespace mdsm::os {

// Asks the scheduler for a short time slice for the calling thread (Linux EEVDF, 6.12 and later:
// sched_attr::sched_runtime on SCHED_OTHER, no privilege needed): a thread that sleeps most of the
// time and must answer quickly when woken then preempts the thread running on its core at once,
// instead of after that thread's slice. Ignored where the kernel does not support it.
void request_short_slice() noexcept;

}  // namespace mdsm::os
