// Errors found where they cannot be thrown to the code that caused them: in a message handler
// running on the progress thread, in a destructor, in the fault path. The first such error is
// kept and rethrown by the next public API call on any application thread (every entry point
// calls rethrow_deferred()), and printed to stderr when it is recorded so it is never silent.
#pragma once

#include <mdsm/error.hpp>

#include <atomic>

namespace mdsm::detail {

extern std::atomic<bool> g_has_deferred;

void defer_error(const error& e);
[[noreturn]] void rethrow_deferred_slow();

inline void rethrow_deferred() {
  if (g_has_deferred.load(std::memory_order_acquire)) rethrow_deferred_slow();
}

// Forgets a recorded error (init/finalize, and tests that provoke one on purpose).
void clear_deferred();

}  // namespace mdsm::detail
