// The part of the applications' common code that needs MPI only, not mdsm: the command line and
// the result lines the table harness (bench/apps/run_tables.py) reads. apps/common/app.hpp adds
// the measurement of an mdsm program, apps/common/mpi_app.hpp that of a plain-MPI reference
// version; both report through report_lines(), so every program prints the same lines.
//
// Command line: <program> [--version=NAME] [--size=N] [--steps=N] [--seed=N] [--quick]
// Output (rank 0), besides the program's own lines:
//   MDSM_APP app=<a> version=<v> ranks=<n> time_s=<t> verified=<0|1> messages=<m>
//            msg_bytes=<b> diffs=<d> diff_requests=<r>
//   MDSM_APP_RANK app=<a> version=<v> rank=<i> time_s=<t> wait_s=<w> handler_s=<h>
//            sync_wait_s=<s> fault_s=<f> gc_s=<g> coherence_s=<c>
// time_s on the MDSM_APP line is the slowest rank's time for the measured section.
#pragma once

#include <mpi.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
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

// One rank's time for the measured section and where it went (the MDSM_APP_RANK fields).
struct rank_times {
  double time_s = 0;       // the whole section
  double wait_s = 0;       // every wait for a remote event
  double handler_s = 0;    // message handlers, on any of the rank's threads
  double sync_wait_s = 0;  // waits for synchronization: locks, barriers, messages
  double fault_s = 0;      // coherent-region faults, their remote fetches included
  double gc_s = 0;         // garbage collection
  // The consistency work the application's threads did themselves at releases and acquires
  // (closing intervals, pushed diffs, notices applied), waits excluded: mdsm's coherence_ns.
  double coherence_s = 0;
};

// What every rank put on the wire during the section, summed over the ranks (the MDSM_APP fields).
struct traffic_totals {
  std::uint64_t messages = 0;
  std::uint64_t msg_bytes = 0;
  std::uint64_t diffs = 0;
  std::uint64_t diff_requests = 0;
};

// Collective over MPI_COMM_WORLD. Prints the result lines on rank 0 and returns the process exit
// code (0 only if every rank verified). `total` must already be summed over the ranks (the same
// on every rank; rank 0's is printed).
inline int report_lines(std::string_view app, std::string_view version, bool verified, const rank_times& mine,
                        const traffic_totals& total) {
  int me = 0, n = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &me);
  MPI_Comm_size(MPI_COMM_WORLD, &n);

  int ok_local = verified ? 1 : 0, ok_all = 0;
  MPI_Allreduce(&ok_local, &ok_all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  double t_max = 0;
  MPI_Allreduce(&mine.time_s, &t_max, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  constexpr int k_fields = 7;
  double row[k_fields] = {mine.time_s,  mine.wait_s, mine.handler_s,  mine.sync_wait_s,
                          mine.fault_s, mine.gc_s,   mine.coherence_s};
  std::vector<double> rows(me == 0 ? k_fields * static_cast<std::size_t>(n) : 0);
  MPI_Gather(row, k_fields, MPI_DOUBLE, rows.data(), k_fields, MPI_DOUBLE, 0, MPI_COMM_WORLD);

  if (me == 0) {
    const std::string a(app), v(version);
    std::printf("%s %s: %d ranks, %.3f s, verification %s\n", a.c_str(), v.c_str(), n, t_max,
                ok_all ? "passed" : "FAILED");
    std::printf("MDSM_APP app=%s version=%s ranks=%d time_s=%.6f verified=%d messages=%llu msg_bytes=%llu "
                "diffs=%llu diff_requests=%llu\n",
                a.c_str(), v.c_str(), n, t_max, ok_all, static_cast<unsigned long long>(total.messages),
                static_cast<unsigned long long>(total.msg_bytes), static_cast<unsigned long long>(total.diffs),
                static_cast<unsigned long long>(total.diff_requests));
    for (int r = 0; r < n; ++r) {
      const double* x = &rows[static_cast<std::size_t>(k_fields * r)];
      std::printf("MDSM_APP_RANK app=%s version=%s rank=%d time_s=%.6f wait_s=%.6f handler_s=%.6f sync_wait_s=%.6f "
                  "fault_s=%.6f gc_s=%.6f coherence_s=%.6f\n",
                  a.c_str(), v.c_str(), r, x[0], x[1], x[2], x[3], x[4], x[5], x[6]);
    }
    std::fflush(stdout);
  }
  return ok_all ? 0 : 1;
}

}  // namespace mdsm_apps
