// Errors found where they cannot be thrown to the code that caused them: in a message handler
// running on the progress thread, in a destructor, in the fault path. The first such error is
// kept and rethrown by the next public API call on any application thread (every entry point
// calls rethrow_deferred()), and printed to stderr when it is recorded so it is never silent.
//
// Where it is thrown. Never in the middle of an operation another rank depends on: a thread
// inside a coordination call (a lock, barrier, semaphore, queue or condition operation, a
// collective creation or destruction) or inside a handler holds deferred errors (hold_deferred),
// so the mdsm calls it makes meanwhile do not throw them and its waits do not end for them; the
// operation completes and the error is thrown by the thread's next mdsm call. Thrown from the
// middle, it left the object half-changed (a barrier still marked entered, a lock request
// outstanding) and the other ranks waiting forever. mdsm::wait_until and poll, which wait for
// the application's own handlers, do end early for one: the handler that failed may be the one
// the wait waits for.
#pragma once

#include <mdsm/error.hpp>

#include <atomic>

namespace mdsm::detail {

extern std::atomic<bool> g_has_deferred;
// > 0 while this thread holds deferred errors (hold_deferred). Initial-exec TLS (lib/meson.build):
// read inline on every API entry.
extern thread_local constinit int t_deferred_hold;

void defer_error(const error& e);
[[noreturn]] void rethrow_deferred_slow();

// True if an error is recorded and this thread does not hold deferred errors.
inline bool deferred_pending_here() noexcept {
  return g_has_deferred.load(std::memory_order_acquire) && t_deferred_hold == 0;
}
inline void rethrow_deferred() {
  if (deferred_pending_here()) [[unlikely]]
    rethrow_deferred_slow();
}

// While alive, recorded errors are not thrown on this thread (see the file comment). Nests.
class hold_deferred {
 public:
  hold_deferred() noexcept { ++t_deferred_hold; }
  ~hold_deferred() { --t_deferred_hold; }
  hold_deferred(const hold_deferred&) = delete;
  hold_deferred& operator=(const hold_deferred&) = delete;
};

// Forgets a recorded error (init/finalize, and tests that provoke one on purpose).
void clear_deferred();

}  // namespace mdsm::detail
