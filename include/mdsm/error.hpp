// mdsm::error: what every C++ entry point throws. It carries the C status code (so C and C++
// callers see the same classification) and a message that says what went wrong and what to do.
#pragma once

#include <mdsm/mdsm_status.h>

#include <stdexcept>
#include <string>

namespace mdsm {

class error : public std::runtime_error {
 public:
  error(mdsm_status code, const std::string& what) : std::runtime_error(what), code_(code) {}
  mdsm_status code() const noexcept { return code_; }

 private:
  mdsm_status code_;
};

}  // namespace mdsm
