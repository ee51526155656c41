// The measurement of a plain-MPI reference version (apps/*/*_mpi.cpp): no mdsm, the same
// command line and result lines as the mdsm versions (apps/common/report.hpp), so the table
// harness puts them in the same tables.
//
// What the lines mean for such a program:
//   time_s       the rank's time for the measured section (MDSM_APP: the slowest rank's);
//   wait_s, sync_wait_s  the time the rank spent inside MPI communication calls (every call in
//                the section goes through mpi_section::communicate); handler_s, fault_s, gc_s,
//                coherence_s 0;
//   messages, msg_bytes  the messages the application sent, summed over the ranks. A
//                point-to-point send is one message. A collective is counted as the messages of
//                the ring algorithm (the bandwidth-optimal textbook one): an allgather sends P-1
//                messages per rank, an allreduce 2(P-1) carrying 2(P-1)/P of the vector. Open MPI
//                may choose another algorithm, so for collectives the count is a model; at 2 ranks
//                it is one message (allgather) or two half-vector messages (allreduce) per rank;
//   diffs, diff_requests  0.
#pragma once

#include "report.hpp"
#include "rows.hpp"

#include <mpi.h>

#include <cstdint>
#include <cstdio>
#include <span>
#include <string_view>
#include <vector>

namespace mdsm_apps {

// The start every plain-MPI version shares. `opt.version` must be "mpi", the only version such a
// program has: otherwise prints why (as `program`) and returns false, before MPI is started.
inline bool only_mpi_version(const args& opt, const char* program) {
  if (opt.version == "mpi") return true;
  std::fprintf(stderr, "%s: unknown version '%s' (mpi)\n", program, opt.version.c_str());
  return false;
}

// MPI_Init, and this process's place in MPI_COMM_WORLD.
struct mpi_world {
  int me = 0, ranks = 1;
  mpi_world(int* argc, char*** argv) {
    MPI_Init(argc, argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  }
};

// Every rank's block of an n-row matrix with `row_elems` elements per row (block_of), as the
// counts and displacements, in elements, of MPI's v-collectives (MPI_Gatherv, MPI_Allgatherv).
struct row_blocks {
  std::vector<int> counts, displs;
  row_blocks(long n, int ranks, long row_elems)
      : counts(static_cast<std::size_t>(ranks)), displs(static_cast<std::size_t>(ranks)) {
    for (int r = 0; r < ranks; ++r) {
      const row_block rb = block_of(n, ranks, r);
      counts[static_cast<std::size_t>(r)] = static_cast<int>(rb.size() * row_elems);
      displs[static_cast<std::size_t>(r)] = static_cast<int>(rb.begin * row_elems);
    }
  }
};

// One rank's measured section. Threads: the application thread only.
class mpi_section {
 public:
  // Collective: lines the ranks up, zeroes the counts and starts the clock.
  void begin() {
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &ranks_);
    times_ = {};
    messages_ = bytes_ = 0;
    MPI_Barrier(MPI_COMM_WORLD);
    start_ = now_s();
  }

  // Runs `call` (an MPI communication call of the section) and counts its time as waiting.
  template <class Call>
  void communicate(Call&& call) {
    const double t0 = now_s();
    call();
    const double dt = now_s() - t0;
    times_.wait_s += dt;
    times_.sync_wait_s += dt;
  }

  // One point-to-point message of `bytes` (nothing for MPI_PROC_NULL).
  void count_send(int dest, std::uint64_t bytes) {
    if (dest == MPI_PROC_NULL) return;
    messages_ += 1;
    bytes_ += bytes;
  }
  // MPI_Allgatherv with `block_bytes[r]` from rank r, as a ring: at step s rank r passes block
  // r - s on to rank r + 1, so it sends every block but its right neighbour's.
  void count_allgather(std::span<const std::uint64_t> block_bytes) {
    if (ranks_ < 2) return;
    std::uint64_t sum = 0;
    for (auto b : block_bytes) sum += b;
    messages_ += static_cast<std::uint64_t>(ranks_ - 1);
    bytes_ += sum - block_bytes[static_cast<std::size_t>((rank_ + 1) % ranks_)];
  }
  // MPI_Allreduce of `bytes`, as a ring: reduce-scatter then allgather of P blocks.
  void count_allreduce(std::uint64_t bytes) {
    if (ranks_ < 2) return;
    const auto p = static_cast<std::uint64_t>(ranks_);
    messages_ += 2 * (p - 1);
    bytes_ += 2 * (p - 1) * bytes / p;
  }

  // Collective: stops the clock (call it right after the section, before any verification) and
  // sums the counts over the ranks.
  void end() {
    times_.time_s = now_s() - start_;
    std::uint64_t mine[2] = {messages_, bytes_}, sum[2] = {0, 0};
    MPI_Allreduce(mine, sum, 2, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD);
    total_ = {sum[0], sum[1], 0, 0};
  }

  // Collective: the MDSM_APP lines (report_lines) for the section ended by end().
  int report(std::string_view app, std::string_view version, bool verified) const {
    return report_lines(app, version, verified, times_, total_);
  }

 private:
  int rank_ = 0, ranks_ = 1;
  double start_ = 0;
  rank_times times_;
  std::uint64_t messages_ = 0, bytes_ = 0;
  traffic_totals total_;
};

}  // namespace mdsm_apps
