// The short paths of the annotated MPI calls (mpi_ext/point_to_point.cpp): a RELEASE that brings
// nothing new completes without decoding (engine::acquire_if_current), and a NONE message of up
// to 63 bytes goes without a header (mpi_ext/ext.hpp, headerless). Each case is built so that taking the
// short path where it does not apply would show: stale data, a wrong count, a lost truncation.
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

TEST_CASE("mpi_ext small: MPI_ANY_SOURCE over short NONE messages and RELEASEs", "[mpi][mpi_ext][np2+]") {
  session s;
  const int me = mdsm::rank(), n = mdsm::size();
  int* slots = mdsm::alloc_collective_array<int>(16 * static_cast<std::size_t>(n));
  constexpr int k_msgs = 6;
  if (me != 0) {
    int* mine = slots + 16 * me;
    for (int m = 0; m < k_msgs; ++m) {
      // m % 3: 0 NONE of 3 ints (short header), 1 RELEASE after writing, 2 RELEASE without.
      if (m % 3 == 1)
        for (int i = 0; i < 16; ++i) mine[i] = value(m, static_cast<std::size_t>(i), me);
      const int msg[3] = {me, m, 0};
      REQUIRE(MDSM_Send(msg, 3, MPI_INT, 0, 10 + m % 3, MPI_COMM_WORLD, m % 3 == 0 ? MDSM_NONE : MDSM_RELEASE) ==
              MPI_SUCCESS);
      int ack = 0;
      REQUIRE(MDSM_Recv(&ack, 1, MPI_INT, 0, 99, MPI_COMM_WORLD, MPI_STATUS_IGNORE) == MPI_SUCCESS);
    }
  } else {
    for (int k = 0; k < k_msgs * (n - 1); ++k) {
      int msg[8] = {-1, -1, -1, -1, -1, -1, -1, -1};
      MPI_Status st;
      REQUIRE(MDSM_Recv(msg, 8, MPI_INT, MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &st) == MPI_SUCCESS);
      REQUIRE(st.MPI_SOURCE == msg[0]);
      REQUIRE(st.MPI_TAG == 10 + msg[1] % 3);
      int count = 0;
      MPI_Get_count(&st, MPI_INT, &count);
      REQUIRE(count == 3);
      REQUIRE(msg[3] == -1);  // nothing beyond the message's data was written
      if (msg[1] % 3 != 0) {
        const int written = msg[1] % 3 == 1 ? msg[1] : msg[1] - 1;
        REQUIRE(all_match(slots + 16 * msg[0], 16, written, msg[0]));
      }
      const int ack = 1;
      REQUIRE(MDSM_Send(&ack, 1, MPI_INT, msg[0], 99, MPI_COMM_WORLD, MDSM_NONE) == MPI_SUCCESS);
    }
  }
  world_barrier();
  mdsm::free_collective(slots);
}

TEST_CASE("mpi_ext small: headerless NONE messages reach every receive form", "[mpi][mpi_ext][np2+]") {
  session s;
  const int me = mdsm::rank();
  returning_comm rc;
  // 0-63 bytes go headerless, 64 and more behind the full header: the receiver tells by size.
  const int sizes[] = {0, 1, 40, 55, 56, 63, 64};
  std::vector<char> out(64);
  for (std::size_t i = 0; i < out.size(); ++i) out[i] = static_cast<char>('a' + i % 26);
  char* coherent = static_cast<char*>(mdsm::alloc(128));
  if (me == 0) {
    for (int bytes : sizes) {
      for (int form = 0; form < 6; ++form)
        REQUIRE(MDSM_Send(out.data(), bytes, MPI_CHAR, 1, 100 * form + bytes, rc.comm, MDSM_NONE) == MPI_SUCCESS);
      MPI_Request r;
      REQUIRE(MDSM_Isend(out.data(), bytes, MPI_CHAR, 1, 700 + bytes, rc.comm, MDSM_NONE, &r) == MPI_SUCCESS);
      REQUIRE(MDSM_Wait(&r, MPI_STATUS_IGNORE) == MPI_SUCCESS);
    }
    REQUIRE(MDSM_Send(out.data(), 1, MPI_CHAR, MPI_PROC_NULL, 0, rc.comm, MDSM_NONE) == MPI_SUCCESS);
  } else if (me == 1) {
    // Every other char: a vector type received in place (a non-contiguous buffer).
    MPI_Datatype every_other;
    MPI_Type_vector(64, 1, 2, MPI_CHAR, &every_other);
    MPI_Type_commit(&every_other);
    MPI_Datatype three;  // 3 chars with a hole: 40 bytes are 13 whole elements and a partial one
    MPI_Type_vector(3, 1, 2, MPI_CHAR, &three);
    MPI_Type_commit(&three);
    for (int bytes : sizes) {
      const auto expect = [&](const char* got, int count, const MPI_Status& st) {
        REQUIRE(std::memcmp(got, out.data(), static_cast<std::size_t>(count)) == 0);
        int c = -1;
        MPI_Get_count(&st, MPI_CHAR, &c);
        REQUIRE(c == count);
      };
      std::vector<char> in(128, '#');
      MPI_Status st;
      // 0: the blocking fast path, exact size; 1: into a larger buffer.
      REQUIRE(MDSM_Recv(in.data(), bytes, MPI_CHAR, 0, bytes, rc.comm, &st) == MPI_SUCCESS);
      expect(in.data(), bytes, st);
      REQUIRE(in[static_cast<std::size_t>(bytes)] == '#');
      REQUIRE(MDSM_Recv(in.data(), 128, MPI_CHAR, 0, 100 + bytes, rc.comm, &st) == MPI_SUCCESS);
      expect(in.data(), bytes, st);
      // 2: probed first; then into the coherent region (received in place).
      REQUIRE(MDSM_Probe(0, 200 + bytes, rc.comm, &st) == MPI_SUCCESS);
      int c = -1;
      MPI_Get_count(&st, MPI_CHAR, &c);
      REQUIRE(c == bytes);
      std::memset(coherent, '#', 128);
      REQUIRE(MDSM_Recv(coherent, 128, MPI_CHAR, 0, 200 + bytes, rc.comm, &st) == MPI_SUCCESS);
      expect(coherent, bytes, st);
      REQUIRE(coherent[bytes] == '#');
      // 3: a non-contiguous buffer, in place: the chars land in every other slot.
      std::fill(in.begin(), in.end(), '#');
      REQUIRE(MDSM_Recv(in.data(), 1, every_other, 0, 300 + bytes, rc.comm, &st) == MPI_SUCCESS);
      int elements = -1;
      MPI_Get_elements(&st, MPI_CHAR, &elements);
      REQUIRE(elements == bytes);
      for (int i = 0; i < 128; ++i)
        REQUIRE(in[static_cast<std::size_t>(i)] == (i % 2 == 0 && i / 2 < bytes ? out[static_cast<std::size_t>(i / 2)] : '#'));
      // 4: a partial element of a non-contiguous type (the element's other bytes keep theirs).
      std::fill(in.begin(), in.end(), '#');
      REQUIRE(MDSM_Recv(in.data(), 22, three, 0, 400 + bytes, rc.comm, &st) == MPI_SUCCESS);
      MPI_Get_elements(&st, three, &elements);
      REQUIRE(elements == bytes);
      for (int i = 0; i < bytes; ++i) {
        const std::size_t at = static_cast<std::size_t>((i / 3) * 5 + (i % 3) * 2);  // extent 5
        REQUIRE(in[at] == out[static_cast<std::size_t>(i)]);
        if (i % 3 != 2) REQUIRE(in[at + 1] == '#');  // the holes keep their bytes
      }
      REQUIRE(in[static_cast<std::size_t>((bytes / 3) * 5 + (bytes % 3) * 2)] == '#');  // nothing beyond
      // 5: truncated (a buffer of half the bytes): MPI's error, what fitted, nothing beyond.
      std::fill(in.begin(), in.end(), '#');
      const int room = bytes / 2;
      const int code = MDSM_Recv(in.data(), room, MPI_CHAR, 0, 500 + bytes, rc.comm, &st);
      if (room == bytes) {
        REQUIRE(code == MPI_SUCCESS);
      } else {
        REQUIRE(error_class(code) == MPI_ERR_TRUNCATE);
        expect(in.data(), room, st);
        REQUIRE(in[static_cast<std::size_t>(room)] == '#');
      }
      // A nonblocking receive.
      MPI_Request r;
      std::fill(in.begin(), in.end(), '#');
      REQUIRE(MDSM_Irecv(in.data(), 64, MPI_CHAR, 0, 700 + bytes, rc.comm, &r) == MPI_SUCCESS);
      REQUIRE(MDSM_Wait(&r, &st) == MPI_SUCCESS);
      expect(in.data(), bytes, st);
      REQUIRE(in[static_cast<std::size_t>(bytes)] == '#');
    }
    MPI_Type_free(&every_other);
    MPI_Type_free(&three);
    MPI_Status st;
    char x = 0;
    REQUIRE(MDSM_Recv(&x, 1, MPI_CHAR, MPI_PROC_NULL, 0, rc.comm, &st) == MPI_SUCCESS);
    REQUIRE(st.MPI_SOURCE == MPI_PROC_NULL);
  }
  world_barrier();
  mdsm::free(coherent);
}

TEST_CASE("mpi_ext small: every small size, from and into every alignment", "[mpi][mpi_ext][np2+]") {
  // The receive's short path copies a few bytes with overlapping word loads and stores
  // (copy_small in point_to_point.cpp): every size 0-80 (headerless up to 63, then behind the full
  // header) from and into buffers at offsets 0-7 and 13, with the bytes around the data checked.
  session s;
  const int me = mdsm::rank();
  returning_comm rc;
  const int offsets[] = {0, 1, 2, 3, 4, 5, 6, 7, 13};
  const auto byte_of = [](int size, int offset, int i) { return static_cast<char>(size * 7 + offset * 3 + i + 1); };
  for (int size = 0; size <= 80; ++size) {
    for (int offset : offsets) {
      const int tag = size * 16 + offset;
      if (me == 0) {
        std::vector<char> out(96, '!');
        for (int i = 0; i < size; ++i) out[static_cast<std::size_t>(offset + i)] = byte_of(size, offset, i);
        REQUIRE(MDSM_Send(out.data() + offset, size, MPI_CHAR, 1, tag, rc.comm, MDSM_NONE) == MPI_SUCCESS);
      } else if (me == 1) {
        std::vector<char> in(96, '#');
        MPI_Status st;
        REQUIRE(MDSM_Recv(in.data() + offset, size, MPI_CHAR, 0, tag, rc.comm, &st) == MPI_SUCCESS);
        int count = -1;
        MPI_Get_count(&st, MPI_CHAR, &count);
        REQUIRE(count == size);
        for (int i = 0; i < 96; ++i) {
          const bool data = i >= offset && i < offset + size;
          INFO("size " << size << ", offset " << offset << ", byte " << i);
          REQUIRE(in[static_cast<std::size_t>(i)] == (data ? byte_of(size, offset, i - offset) : '#'));
        }
      }
    }
  }
  world_barrier();
}

TEST_CASE("mpi_ext small: a truncated short message received without a buffer, and Sendrecv", "[mpi][mpi_ext][np2+]") {
  session s;
  const int me = mdsm::rank();
  returning_comm rc;
  if (me <= 1) {
    const int peer = 1 - me;
    if (me == 0) {
      const char c = 'x';
      REQUIRE(MDSM_Send(&c, 1, MPI_CHAR, 1, 1, rc.comm, MDSM_NONE) == MPI_SUCCESS);
    } else {
      MPI_Status st;
      char c = '#';
      const int code = MDSM_Recv(&c, 0, MPI_CHAR, 0, 1, rc.comm, &st);  // count 0: one byte too many
      REQUIRE(error_class(code) == MPI_ERR_TRUNCATE);
      REQUIRE(c == '#');
      int count = -1;
      MPI_Get_count(&st, MPI_CHAR, &count);
      REQUIRE(count == 0);
    }
    // Sendrecv both ways, short NONE out, short NONE in.
    int mine[4] = {me, me, me, me}, theirs[4] = {-1, -1, -1, -1};
    MPI_Status st;
    REQUIRE(MDSM_Sendrecv(mine, 4, MPI_INT, peer, 2, theirs, 4, MPI_INT, peer, 2, rc.comm, &st, MDSM_NONE) ==
            MPI_SUCCESS);
    for (int v : theirs) REQUIRE(v == peer);
    int count = -1;
    MPI_Get_count(&st, MPI_INT, &count);
    REQUIRE(count == 4);
  }
  world_barrier();
}
