// What every mdsm application in apps/ shares: the command line and result lines of
// apps/common/report.hpp, and the measurement of a section from mdsm's counters. One place, so
// every program reports the same way (the plain-MPI reference versions measure themselves with
// apps/common/mpi_app.hpp and print the same lines).
//
// Per rank (MDSM_APP_RANK): wait_s every wait for a remote event; of the section's time, fault_s
// went to coherent-region faults (their remote fetches included), gc_s to garbage collection and
// sync_wait_s to the other waits (locks, barriers, messages), coherence_s to the consistency work
// its application threads did at releases and acquires (closing intervals, diffs pushed with a
// RELEASE, notices applied; waits excluded); handler_s is the time message handlers ran on any of
// the rank's threads (the progress thread's included).
// messages/msg_bytes (MDSM_APP) count every frame mdsm put on the wire (user, coordination and
// coherence protocol messages, summed over ranks), as the CarlOS tables did, and the MPI messages
// of the annotated MPI calls (mpi_ext/): one per MDSM_ send, plus its side-channel message of
// consistency information for REQUEST and RELEASE kinds; their bytes are the 16-byte headers and
// the consistency information (mdsm does not count the user's data of an MDSM_ send).
#pragma once

#include "report.hpp"

#include <mdsm/mdsm.hpp>

#include <mpi.h>

#include <cstdint>
#include <map>
#include <string>
#include <string_view>

namespace mdsm_apps {

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
  auto secs = [&](const char* c) { return static_cast<double>(m.mine.at(c)) * 1e-9; };
  const rank_times mine{m.seconds,        secs("wait_ns"), secs("handler_ns"),  secs("sync_wait_ns"),
                        secs("fault_ns"), secs("gc_ns"),   secs("coherence_ns")};
  const std::uint64_t mpi_ext_synchronizing =
      m.total.at("mpi_sends_request") + m.total.at("mpi_sends_release") + m.total.at("mpi_sends_release_nt");
  const std::uint64_t mpi_ext_sends = m.total.at("mpi_sends_none") + mpi_ext_synchronizing;
  constexpr std::uint64_t k_mpi_ext_header = 16;  // bytes in front of an MDSM_ message's data (mdsm_mpi.h)
  const traffic_totals total{m.total.at("frames_sent") + mpi_ext_sends + mpi_ext_synchronizing,
                             m.total.at("frame_bytes_sent") + k_mpi_ext_header * mpi_ext_sends +
                                 m.total.at("mpi_cinfo_bytes_sent"),
                             m.total.at("diffs_created"), m.total.at("diff_requests")};
  return report_lines(app, version, verified, mine, total);
}

}  // namespace mdsm_apps
