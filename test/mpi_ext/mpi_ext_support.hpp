// Helpers the mpi_ext test files share (test_mpi_ext.cpp, test_mpi_large.cpp).
#pragma once

#include "support/session.hpp"

#include <mdsm/mdsm_mpi.h>

#include <cstring>
#include <string>
#include <vector>

namespace mdsm_test {

// A value that differs per round and position, so a stale copy from an earlier round fails.
inline int value(int round, std::size_t i, int writer = 0) { return static_cast<int>(round * 1000003 + writer * 7919 + i); }

// Whether the ints at `got` equal `want`, compared with one memcmp. Not element by element: under
// TSan every read of a byte Open MPI wrote on another thread (ordered by MPI, which TSan cannot
// see with an uninstrumented MPI) is a race report, suppressed but costly -- a loop over a MiB
// then takes minutes, and whether MPI's copy ran on the reading thread or the progress thread
// depends on the machine's load. memcmp reads the range in one intercepted call.
inline bool equal_ints(const int* got, const std::vector<int>& want) {
  return std::memcmp(got, want.data(), want.size() * sizeof(int)) == 0;
}

inline bool all_match(const int* a, std::size_t n, int round, int writer = 0) {
  std::vector<int> want(n);
  for (std::size_t i = 0; i < n; ++i) want[i] = value(round, i, writer);
  return equal_ints(a, want);
}

inline std::string error_text(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(code, text, &len);
  return std::string(text, static_cast<std::size_t>(len));
}

inline int error_class(int code) {
  int cls = 0;
  MPI_Error_class(code, &cls);
  return cls;
}

// A duplicate of MPI_COMM_WORLD whose errors return instead of ending the job.
struct returning_comm {
  MPI_Comm comm;
  returning_comm() {
    MPI_Comm_dup(MPI_COMM_WORLD, &comm);
    MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
  }
  ~returning_comm() { MPI_Comm_free(&comm); }
};

constexpr std::size_t k_ints = 40000;  // 160 KB: 40 pages, above the copy threshold

}  // namespace mdsm_test
