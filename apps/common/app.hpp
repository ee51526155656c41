// What every application in apps/ shares: command-line parsing and the result report that the
// table harness (bench/apps) reads. One place, so every program reports the same way.
//
// Command line: <program> [--version=NAME] [--size=N] [--steps=N] [--seed=N] [--quick]
// Output (rank 0), besides the program's own lines:
//   MDSM_APP app=<a> version=<v> ranks=<n> time_s=<t> verified=<0|1> messages=<m>
//            msg_bytes=<b> diffs=<d> diff_requests=<r>
//   MDSM_APP_RANK app=<a> version=<v> rank=<i> time_s=<t> wait_s=<w> handler_s=<h>
//            sync_wait_s=<s> fault_s=<f> gc_s=<g>
// Per rank: wait_s every wait for a remote event; of the section's time, fault_s went to
// coherent-region faults (their remote fetches included), gc_s to garbage collection and
// sync_wait_s to the other waits (locks, barriers, messages); handler_s is the time message
// handlers ran on any of the rank's threads (the progress thread's included).
// messages/msg_bytes count every frame mdsm put on the wire (user, coordination and coherence
// protocol messages, summed over ranks), as the CarlOS tables did.
#pragma once

#include <mdsm/mdsm.hpp>

#include <mpi.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace mdsm_apps {

struct args {
  std::string version;
  long size = -1;   // -1: the program's default
  long steps = -1;  // -1: the program's default
  std::uint64_t seed = 1;
  bool quick = false;
};

inline args parse_args(int argc, char** argv, std::string_view default_version) {
  args a;
  a.version = default_version;
  for (int i = 1; i < argc; ++i) {
    std::string_view s = argv[i];
    auto value = [&](std::string_view key) -> const char* {
      if (s.substr(0, key.size()) == key) return argv[i] + key.size();
      return nullptr;
    };
    if (const char* v = value("--version=")) a.version = v;
    else if (const char* v = value("--size=")) a.size = std::strtol(v, nullptr, 10);
    else if (const char* v = value("--steps=")) a.steps = std::strtol(v, nullptr, 10);
    else if (const char* v = value("--seed=")) a.seed = std::strtoull(v, nullptr, 10);
    else if (s == "--quick") a.quick = true;
    else {
      std::fprintf(stderr, "%s: unknown argument '%s'\n"
                   "usage: %s [--version=NAME] [--size=N] [--steps=N] [--seed=N] [--quick]\n",
                   argv[0], argv[i], argv[0]);
      std::exit(2);
    }
  }
  return a;
}

// Wall-clock seconds, for timing the parallel section.
inline double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// The counters and time of a measured section, taken when it ends, so that verification and
// tear-down after it are not counted (the CarlOS tables count the parallel section only).
struct measurement {
  double seconds = 0;                              // this rank's time for the section
  std::map<std::string, std::uint64_t> mine;       // this rank's counters
  std::map<std::string, std::uint64_t> total;      // every rank's counters summed
};

// Collective: lines the ranks up, zeroes the counters and returns the start time. The report
// splits each rank's time into waiting and handlers, so the time counters are switched on.
inline double begin_measurement() {
  MPI_Barrier(MPI_COMM_WORLD);
  mdsm::set_statistics_timing(true);
  mdsm::statistics_reset();
  MPI_Barrier(MPI_COMM_WORLD);
  return now_s();
}

// Collective: ends the section begun at `start` (take the time before any verification).
inline measurement end_measurement(double start) {
  measurement m;
  m.seconds = now_s() - start;
  m.mine = mdsm::statistics();
  m.total = mdsm::statistics_total();
  return m;
}

// Collective. Prints the result lines on rank 0 and returns the process exit code (0 only if
// every rank verified). The reported time is the maximum of the ranks' section times.
inline int report(std::string_view app, std::string_view version, bool verified, const measurement& m) {
  const auto& mine = m.mine;
  const auto& total = m.total;
  const double seconds = m.seconds;
  const int me = mdsm::rank(), n = mdsm::size();

  int ok_local = verified ? 1 : 0, ok_all = 0;
  MPI_Allreduce(&ok_local, &ok_all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  double t_max = 0;
  MPI_Allreduce(&seconds, &t_max, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  auto secs = [&](const char* c) { return static_cast<double>(mine.at(c)) * 1e-9; };
  constexpr int k_fields = 6;
  double row[k_fields] = {seconds, secs("wait_ns"), secs("handler_ns"), secs("sync_wait_ns"), secs("fault_ns"),
                          secs("gc_ns")};
  std::vector<double> rows(me == 0 ? k_fields * static_cast<std::size_t>(n) : 0);
  MPI_Gather(row, k_fields, MPI_DOUBLE, rows.data(), k_fields, MPI_DOUBLE, 0, MPI_COMM_WORLD);

  if (me == 0) {
    const std::string a(app), v(version);
    std::printf("%s %s: %d ranks, %.3f s, verification %s\n", a.c_str(), v.c_str(), n, t_max,
                ok_all ? "passed" : "FAILED");
    std::printf("MDSM_APP app=%s version=%s ranks=%d time_s=%.6f verified=%d messages=%llu msg_bytes=%llu "
                "diffs=%llu diff_requests=%llu\n",
                a.c_str(), v.c_str(), n, t_max, ok_all,
                static_cast<unsigned long long>(total.at("frames_sent")),
                static_cast<unsigned long long>(total.at("frame_bytes_sent")),
                static_cast<unsigned long long>(total.at("diffs_created")),
                static_cast<unsigned long long>(total.at("diff_requests")));
    for (int r = 0; r < n; ++r) {
      const double* x = &rows[static_cast<std::size_t>(k_fields * r)];
      std::printf("MDSM_APP_RANK app=%s version=%s rank=%d time_s=%.6f wait_s=%.6f handler_s=%.6f sync_wait_s=%.6f "
                  "fault_s=%.6f gc_s=%.6f\n",
                  a.c_str(), v.c_str(), r, x[0], x[1], x[2], x[3], x[4], x[5]);
    }
    std::fflush(stdout);
  }
  return ok_all ? 0 : 1;
}

}  // namespace mdsm_apps
