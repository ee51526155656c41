// Not a benchmark: a fixed number of MDSM_Send / MDSM_Recv ping-pongs (8 B, or BYTES) between 2 ranks, for
// counting instructions with callgrind (bench/count_mdsm_mpi.sh runs it and prints mdsm's
// instructions per send and per receive, MPI's own calls subtracted). Timing belongs to
// bench_mdsm_mpi; instruction counts are what a loaded machine still measures repeatably.
//
//   tools/mdsmrun -n 2 build-rel/bench/count_mdsm_mpi none|release|release_nt ROUND_TRIPS [BYTES]
#include <mdsm/mdsm.hpp>
#include <mdsm/mdsm_mpi.h>

#include <mpi.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

int main(int argc, char** argv) {
  mdsm::init(&argc, &argv);
  const int rank = mdsm::rank();
  if ((argc != 3 && argc != 4) || mdsm::size() != 2) {
    if (rank == 0)
      std::fprintf(stderr, "usage: mdsmrun -n 2 %s none|release|release_nt ROUND_TRIPS [BYTES]\n", argv[0]);
    mdsm::finalize();
    return 2;
  }
  const mdsm_annotation a = std::strcmp(argv[1], "release") == 0      ? MDSM_RELEASE
                            : std::strcmp(argv[1], "release_nt") == 0 ? MDSM_RELEASE_NT
                                                                      : MDSM_NONE;
  const long n = std::atol(argv[2]);
  MPI_Comm comm;
  MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  const int bytes = argc == 4 ? std::atoi(argv[3]) : 8;
  std::vector<char> out(static_cast<std::size_t>(bytes), 1), in(static_cast<std::size_t>(bytes));
  const int peer = 1 - rank;
  MPI_Barrier(comm);
  for (long i = 0; i < n; ++i) {
    if (rank == 0) {
      MDSM_Send(out.data(), bytes, MPI_BYTE, peer, 7, comm, a);
      MDSM_Recv(in.data(), bytes, MPI_BYTE, peer, 7, comm, MPI_STATUS_IGNORE);
    } else {
      MDSM_Recv(in.data(), bytes, MPI_BYTE, peer, 7, comm, MPI_STATUS_IGNORE);
      MDSM_Send(out.data(), bytes, MPI_BYTE, peer, 7, comm, a);
    }
  }
  MPI_Barrier(comm);
  MPI_Comm_free(&comm);
  mdsm::finalize();
  return 0;
}
