#include "common/check.hpp"

#include <cstdlib>
#include <cstring>
#include <unistd.h>

namespace mdsm::detail {

namespace {
void write_all(const char* s) {
  std::size_t n = std::strlen(s);
  while (n > 0) {
    ssize_t w = ::write(2, s, n);
    if (w <= 0) return;
    s += w;
    n -= static_cast<std::size_t>(w);
  }
}
}  // namespace

void assert_failed(const char* expr, const char* what, const char* file, int line) {
  char buf[64];
  write_all("mdsm: internal invariant violated (please report): ");
  write_all(what);
  write_all(" [");
  write_all(expr);
  write_all("] at ");
  write_all(file);
  std::snprintf(buf, sizeof buf, ":%d\n", line);
  write_all(buf);
  std::abort();
}

void die(const char* what) {
  write_all(what);
  write_all("\n");
  std::abort();
}

}  // namespace mdsm::detail

extern "C" const char* mdsm_strerror(mdsm_status status) {
  // A C caller may pass any int (a code of a newer mdsm, a stray value): loading it as the enum
  // would be undefined behaviour in C++ (UBSan: "load of value 999"), so its bytes are read as an
  // int, as mdsm_send does with an annotation.
  int code = 0;
  static_assert(sizeof status == sizeof code);
  std::memcpy(&code, &status, sizeof code);
  switch (code) {
    case MDSM_SUCCESS: return "success";
    case MDSM_ERR_NOT_INITIALIZED: return "mdsm is not initialized (call mdsm_init first)";
    case MDSM_ERR_ALREADY_INITIALIZED: return "mdsm is already initialized";
    case MDSM_ERR_INVALID_ARGUMENT: return "invalid argument";
    case MDSM_ERR_INVALID_RANK: return "rank out of range";
    case MDSM_ERR_INVALID_ANNOTATION: return "invalid message annotation";
    case MDSM_ERR_UNKNOWN_HANDLER: return "unknown message handler";
    case MDSM_ERR_HANDLER_MISMATCH: return "handler registration differs between ranks";
    case MDSM_ERR_ALREADY_DISPOSED: return "message already accepted, forwarded or stored";
    case MDSM_ERR_NOT_DISPOSED: return "handler did not dispose of a RELEASE message";
    case MDSM_ERR_HANDLER_CONTEXT: return "operation not allowed in a message handler";
    case MDSM_ERR_OUT_OF_MEMORY: return "out of memory in the shared region";
    case MDSM_ERR_NOT_IN_REGION: return "pointer does not belong to an mdsm region";
    case MDSM_ERR_REGION_MAP: return "shared region could not be mapped at one address on all ranks";
    case MDSM_ERR_THREAD_LEVEL: return "MPI does not provide MPI_THREAD_MULTIPLE";
    case MDSM_ERR_MPI: return "MPI call failed";
    case MDSM_ERR_MALFORMED: return "malformed message";
    case MDSM_ERR_NOT_HELD: return "lock not held by this rank";
    case MDSM_ERR_BUSY: return "object is still in use";
    case MDSM_ERR_MISMATCH: return "ranks disagree on a collective call";
    case MDSM_ERR_INTERNAL: return "internal error in mdsm";
    case MDSM_ERR_OS: return "operating-system call failed";
    case MDSM_ERR_INVALID_HANDLE: return "null handle, or its object was destroyed";
    case MDSM_ERR_TASK_FAILED: return "a fiber or remote task ended with an exception";
  }
  return "unknown mdsm status";
}
