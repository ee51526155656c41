// Test helpers: an mdsm session per test case, and small collective utilities.
#pragma once

#include <mdsm/mdsm.hpp>

#include <catch2/catch.hpp>
#include <mpi.h>

#include <atomic>
#include <functional>
#include <string>

namespace mdsm_test {

// mdsm::init on construction, mdsm::finalize on destruction (all ranks).
struct session {
  explicit session(const mdsm::options& opts = {}) { mdsm::init(MPI_COMM_WORLD, opts); }
  ~session() {
    if (mdsm::initialized()) mdsm::finalize();
  }
  session(const session&) = delete;
  session& operator=(const session&) = delete;
};

inline int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}
inline int world_size() {
  int n = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}

// A barrier on the user's communicator that keeps mdsm progressing meanwhile (a plain
// MPI_Barrier would also work with the progress thread on, but tests must not depend on it).
inline void world_barrier() {
  MPI_Request req;
  MPI_Ibarrier(MPI_COMM_WORLD, &req);
  mdsm::wait_until([&] {
    int done = 0;
    MPI_Test(&req, &done, MPI_STATUS_IGNORE);
    return done != 0;
  });
}

// Sum of an integer over all ranks (progress-friendly).
inline long long world_sum(long long v) {
  long long out = 0;
  MPI_Request req;
  MPI_Iallreduce(&v, &out, 1, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD, &req);
  mdsm::wait_until([&] {
    int done = 0;
    MPI_Test(&req, &done, MPI_STATUS_IGNORE);
    return done != 0;
  });
  return out;
}

inline std::uint64_t stat(const char* name) { return mdsm::statistics().at(name); }

// Runs f, which must throw mdsm::error with `code`; returns its message ("" if it did not throw).
template <class F>
std::string error_of(mdsm_status code, F&& f) {
  try {
    f();
  } catch (const mdsm::error& e) {
    CHECK(e.code() == code);
    return e.what();
  }
  FAIL_CHECK("no mdsm::error was thrown");
  return "";
}

inline bool contains(const std::string& s, const char* what) { return s.find(what) != std::string::npos; }

// Matches an mdsm::error with this status (CHECK_THROWS_MATCHES(call, mdsm::error, code_is(...))).
inline auto code_is(mdsm_status c) {
  return Catch::Predicate<mdsm::error>([c](const mdsm::error& e) { return e.code() == c; },
                                       std::string("has status ") + mdsm_strerror(c));
}

}  // namespace mdsm_test

// Requires at least n ranks; otherwise the test case passes vacuously on every rank.
#define MDSM_NEED_RANKS(n)                   \
  do {                                       \
    if (mdsm_test::world_size() < (n)) return; \
  } while (0)
