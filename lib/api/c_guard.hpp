// The C boundary: runs C++ API code and turns mdsm::error into a status code plus the thread's
// last-error message. Nothing may throw across this boundary.
#pragma once

#include <mdsm/mdsm.h>
#include <mdsm/mdsm.hpp>

#include <new>
#include <string>

namespace mdsm::capi {

// The message behind the last non-success status of this thread (mdsm_last_error).
std::string& last_error();

template <class F>
mdsm_status guarded(F&& f) noexcept {
  try {
    f();
    return MDSM_SUCCESS;
  } catch (const mdsm::error& e) {
    last_error() = e.what();
    return e.code();
  } catch (const std::bad_alloc&) {
    last_error() = "mdsm: out of memory";
    return MDSM_ERR_OUT_OF_MEMORY;
  } catch (const std::exception& e) {
    last_error() = std::string("mdsm: ") + e.what();
    return MDSM_ERR_INTERNAL;
  }
}

inline mdsm_status null_arg(const char* what) {
  last_error() = std::string("mdsm: ") + what + " must not be NULL";
  return MDSM_ERR_INVALID_ARGUMENT;
}

}  // namespace mdsm::capi
