// The short paths of the annotated MPI calls (mpi_ext/point_to_point.cpp): a RELEASE that brings
// nothing new completes without decoding (engine::acquire_if_current). Each case is built so that
// taking the short path where it does not apply would show: stale data, a missing fetch.
#include "mpi_ext/mpi_ext_support.hpp"

#include <mdsm/mdsm_mpi.h>

#include <cstring>
#include <vector>

using namespace mdsm_test;

TEST_CASE("mpi_ext small: RELEASEs that carry nothing new, then ones that carry writes", "[mpi][mpi_ext][np2+]") {
  session s;
  const int me = mdsm::rank();
  int* data = mdsm::alloc_collective_array<int>(64);
  if (me <= 1) {
    const int peer = 1 - me;
    int newest = -1;  // the round of the newest writes to data
    for (int round = 0; round < 12; ++round) {
      // The ranks take turns; each sends a RELEASE (or RELEASE_NT) with nothing written since its
      // last one (the short path), then one after writing, and so on.
      const int sender = round % 2;
      const bool writes = round % 4 >= 2;
      if (writes) newest = round;
      const mdsm_annotation a = round % 3 == 2 ? MDSM_RELEASE_NT : MDSM_RELEASE;
      const std::uint64_t acquires = stat("mpi_acquires"), side = stat("mpi_side_messages");
      if (me == sender) {
        if (writes)
          for (int i = 0; i < 64; ++i) data[i] = value(round, static_cast<std::size_t>(i), me);
        REQUIRE(MDSM_Send(&round, 1, MPI_INT, peer, 3, MPI_COMM_WORLD, a) == MPI_SUCCESS);
        // Nothing new fits in the header; an interval record does not (52 bytes at 2 ranks): the
        // fast path hands what it encoded to the side channel.
        REQUIRE(stat("mpi_side_messages") == side + (writes ? 1 : 0));
      } else {
        int got = -1;
        MPI_Status st;
        REQUIRE(MDSM_Recv(&got, 1, MPI_INT, peer, 3, MPI_COMM_WORLD, &st) == MPI_SUCCESS);
        REQUIRE(got == round);
        REQUIRE(stat("mpi_acquires") == acquires + 1);
        int count = 0;
        MPI_Get_count(&st, MPI_INT, &count);
        REQUIRE(count == 1);
        if (newest >= 0) REQUIRE(all_match(data, 64, newest, newest % 2));
      }
    }
  }
  world_barrier();
  mdsm::free_collective(data);
}

TEST_CASE("mpi_ext small: a RELEASE with nothing new that overtakes the one with the writes", "[mpi][mpi_ext][np2+]") {
  // Rank 0 sends its writes in a RELEASE with tag 1, then a RELEASE with tag 2 that carries no
  // records (rank 0 believes rank 1 now has them) but requires them. Rank 1 receives tag 2 first:
  // its vector time does not cover the required one, so it must not take the short path; it
  // fetches the records and sees the writes before the call returns.
  session s;
  const int me = mdsm::rank();
  int* data = mdsm::alloc_collective_array<int>(64);
  for (int round = 0; round < 3; ++round) {
    if (me == 0) {
      for (int i = 0; i < 64; ++i) data[i] = value(round, static_cast<std::size_t>(i));
      REQUIRE(MDSM_Send(&round, 1, MPI_INT, 1, 1, MPI_COMM_WORLD, MDSM_RELEASE) == MPI_SUCCESS);
      REQUIRE(MDSM_Send(&round, 1, MPI_INT, 1, 2, MPI_COMM_WORLD, MDSM_RELEASE) == MPI_SUCCESS);
      int ack = 0;  // an MDSM_ wait: serves rank 1's request for the records without a progress thread
      REQUIRE(MDSM_Recv(&ack, 1, MPI_INT, 1, 3, MPI_COMM_WORLD, MPI_STATUS_IGNORE) == MPI_SUCCESS);
    } else if (me == 1) {
      int got = -1;
      const std::uint64_t fetches = stat("interval_fetches");
      REQUIRE(MDSM_Recv(&got, 1, MPI_INT, 0, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE) == MPI_SUCCESS);
      REQUIRE(got == round);
      REQUIRE(stat("interval_fetches") == fetches + 1);  // the general path: the records fetched
      REQUIRE(all_match(data, 64, round));
      REQUIRE(MDSM_Recv(&got, 1, MPI_INT, 0, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE) == MPI_SUCCESS);
      REQUIRE(all_match(data, 64, round));
      REQUIRE(MDSM_Send(&got, 1, MPI_INT, 0, 3, MPI_COMM_WORLD, MDSM_RELEASE) == MPI_SUCCESS);
    }
    world_barrier();
  }
  mdsm::free_collective(data);
}

TEST_CASE("mpi_ext small: transitivity through a rank that wrote nothing", "[mpi][mpi_ext][np3+]") {
  // Rank 0 writes and releases to rank 1, which writes nothing itself and releases to rank 2:
  // rank 1 has no new interval of its own, but rank 2 lacks rank 0's, so the RELEASE must carry
  // it. Then rank 2 releases back to rank 0 and rank 1 with nothing new (the short path).
  session s;
  const int me = mdsm::rank(), n = mdsm::size();
  if (n < 3) return;
  int* data = mdsm::alloc_collective_array<int>(64);
  for (int round = 0; round < 4; ++round) {
    int got = -1;
    if (me == 0) {
      for (int i = 0; i < 64; ++i) data[i] = value(round, static_cast<std::size_t>(i));
      REQUIRE(MDSM_Send(&round, 1, MPI_INT, 1, 1, MPI_COMM_WORLD, MDSM_RELEASE) == MPI_SUCCESS);
      REQUIRE(MDSM_Recv(&got, 1, MPI_INT, 2, 3, MPI_COMM_WORLD, MPI_STATUS_IGNORE) == MPI_SUCCESS);
      REQUIRE(got == round);
    } else if (me == 1) {
      REQUIRE(MDSM_Recv(&got, 1, MPI_INT, 0, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE) == MPI_SUCCESS);
      const std::uint64_t created = stat("intervals_created");
      REQUIRE(MDSM_Send(&got, 1, MPI_INT, 2, 2, MPI_COMM_WORLD, MDSM_RELEASE) == MPI_SUCCESS);
      REQUIRE(stat("intervals_created") == created);  // nothing of its own to release
      REQUIRE(MDSM_Recv(&got, 1, MPI_INT, 2, 3, MPI_COMM_WORLD, MPI_STATUS_IGNORE) == MPI_SUCCESS);
      REQUIRE(all_match(data, 64, round));
    } else if (me == 2) {
      REQUIRE(MDSM_Recv(&got, 1, MPI_INT, 1, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE) == MPI_SUCCESS);
      REQUIRE(got == round);
      REQUIRE(all_match(data, 64, round));  // rank 0's writes, through rank 1
      REQUIRE(MDSM_Send(&got, 1, MPI_INT, 0, 3, MPI_COMM_WORLD, MDSM_RELEASE) == MPI_SUCCESS);
      REQUIRE(MDSM_Send(&got, 1, MPI_INT, 1, 3, MPI_COMM_WORLD, MDSM_RELEASE) == MPI_SUCCESS);
    }
    world_barrier();
  }
  mdsm::free_collective(data);
}
