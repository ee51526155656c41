// Errors and invariant checks shared by every layer.
//
//   fail(code, parts...)      throw mdsm::error with a message built from the parts
//   MDSM_ASSERT(cond, what)   internal invariant; on in debug and test builds, aborts with file:line
#pragma once

#include <mdsm/error.hpp>

#include <sstream>
#include <string>
#include <utility>

namespace mdsm::detail {

template <class... Parts>
std::string cat(Parts&&... parts) {
  std::ostringstream out;
  (out << ... << std::forward<Parts>(parts));
  return out.str();
}

template <class... Parts>
[[noreturn]] void fail(mdsm_status code, Parts&&... parts) {
  throw error(code, cat("mdsm: ", std::forward<Parts>(parts)...));
}

[[noreturn]] void assert_failed(const char* expr, const char* what, const char* file, int line);

// Report a fatal condition found where nothing can be thrown (signal handlers, destructors,
// the progress thread) and abort. Uses only write(2).
[[noreturn]] void die(const char* what);

}  // namespace mdsm::detail

#ifdef NDEBUG
#define MDSM_ASSERT(cond, what) ((void)0)
#else
#define MDSM_ASSERT(cond, what) \
  ((cond) ? (void)0 : ::mdsm::detail::assert_failed(#cond, (what), __FILE__, __LINE__))
#endif
