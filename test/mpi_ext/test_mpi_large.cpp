// Large annotated messages (mpi_ext, docs/MPI.md "Large messages"): the header alone on the user's
// communicator, the data with the user's datatype on mdsm's side channel. Every receive form must
// keep MPI's semantics: counts, wildcards, order per sender, truncation, probes, requests.
#include "mpi_ext/mpi_ext_support.hpp"

#include <mdsm/mdsm_mpi.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

using namespace mdsm_test;

namespace {

constexpr std::size_t k_64k = 16384, k_1m = 262144, k_4m = 1048576;  // in ints
// Data sent in place: above the copy threshold, below the side channel's (ext.hpp).
constexpr std::size_t k_in_place = 1500;  // 6,000 bytes

// Every other int of n: a vector type spanning 2n - 1 ints.
struct every_other {
  MPI_Datatype type;
  explicit every_other(int n) {
    MPI_Type_vector(n, 1, 2, MPI_INT, &type);
    MPI_Type_commit(&type);
  }
  ~every_other() { MPI_Type_free(&type); }
};

// Rank 0 fills a message: its round and number first, then value(round, i, tag).
void fill(int* p, std::size_t n, int round, int tag) {
  for (std::size_t i = 0; i < n; ++i) p[i] = value(round, i, tag);
}

}  // namespace

TEST_CASE("mpi_ext large: RELEASE and NONE, contiguous and vector, private and coherent receive buffers",
          "[mpi][mpi_ext][np2+]") {
  session s;
  const int me = mdsm::rank();
  // Coherent: the sender's source (a RELEASE makes it visible) and a receive buffer.
  int* src = mdsm::alloc_collective_array<int>(2 * k_4m);
  int* dst = mdsm::alloc_collective_array<int>(2 * k_4m);
  std::vector<int> priv;
  int round = 0;
  for (const std::size_t n : {k_64k, k_1m, k_4m}) {
    every_other vec(static_cast<int>(n));
    for (const mdsm_annotation a : {MDSM_RELEASE, MDSM_NONE})
      for (const bool vector : {false, true})
        for (const bool coherent : {false, true}) {
          ++round;
          const int tag = round;
          if (me == 0) {
            fill(src, 2 * n, round, 0);
            const std::uint64_t side = stat("mpi_side_data");
            if (vector)
              REQUIRE(MDSM_Send(src, 1, vec.type, 1, tag, MPI_COMM_WORLD, a) == MPI_SUCCESS);
            else
              REQUIRE(MDSM_Send(src, static_cast<int>(n), MPI_INT, 1, tag, MPI_COMM_WORLD, a) == MPI_SUCCESS);
            REQUIRE(stat("mpi_side_data") == side + 1);  // the data went on the side channel
          } else if (me == 1) {
            int* buf = dst;
            if (!coherent) {
              priv.assign(2 * n, -1);
              buf = priv.data();
            } else {
              for (std::size_t i = 0; i < 2 * n; ++i) dst[i] = -1;
            }
            const std::uint64_t acq = stat("mpi_acquires");
            MPI_Status st;
            int count = -1, elements = -1;
            if (vector) {
              REQUIRE(MDSM_Recv(buf, 1, vec.type, 0, tag, MPI_COMM_WORLD, &st) == MPI_SUCCESS);
              MPI_Get_count(&st, vec.type, &count);
              MPI_Get_elements(&st, vec.type, &elements);
              REQUIRE(count == 1);
              REQUIRE(elements == static_cast<int>(n));
              std::vector<int> want(2 * n - 1);
              for (std::size_t i = 0; i < want.size(); ++i) want[i] = i % 2 == 0 ? value(round, i, 0) : -1;
              REQUIRE(equal_ints(buf, want));
            } else {
              REQUIRE(MDSM_Recv(buf, static_cast<int>(n), MPI_INT, 0, tag, MPI_COMM_WORLD, &st) == MPI_SUCCESS);
              MPI_Get_count(&st, MPI_INT, &count);
              REQUIRE(count == static_cast<int>(n));
              REQUIRE(all_match(buf, n, round, 0));
              REQUIRE(buf[n] == -1);
            }
            REQUIRE(st.MPI_SOURCE == 0);
            REQUIRE(st.MPI_TAG == tag);
            REQUIRE(stat("mpi_acquires") == acq + (a == MDSM_RELEASE ? 1 : 0));
            if (a == MDSM_RELEASE) REQUIRE(all_match(src, 2 * n, round, 0));  // the sender's writes, visible
          }
          REQUIRE(MDSM_Barrier(MPI_COMM_WORLD) == MPI_SUCCESS);  // the next round's writes after these reads
        }
  }
  mdsm::free_collective(src);
  mdsm::free_collective(dst);
}

TEST_CASE("mpi_ext large: MPI_ANY_SOURCE and MPI_ANY_TAG, large and small interleaved, order per sender",
          "[mpi][mpi_ext][np2+]") {
  session s;
  const int me = mdsm::rank(), n = mdsm::size();
  constexpr int k_msgs = 6;
  constexpr std::size_t k_large = 65536, k_small = 8;  // 256 KiB, 32 B
  std::vector<int> buf(k_large + 2);
  if (me != 0) {
    for (int m = 0; m < k_msgs; ++m) {
      const std::size_t len = m % 2 == 0 ? k_large : k_small;
      buf[0] = me;
      buf[1] = m;
      for (std::size_t i = 2; i < len; ++i) buf[i] = value(m, i, me);
      const mdsm_annotation a = m % 3 == 0 ? MDSM_NONE : MDSM_RELEASE;
      REQUIRE(MDSM_Send(buf.data(), static_cast<int>(len), MPI_INT, 0, 100 + me, MPI_COMM_WORLD, a) == MPI_SUCCESS);
    }
  } else {
    std::vector<int> next(static_cast<std::size_t>(n), 0);
    for (int k = 0; k < k_msgs * (n - 1); ++k) {
      std::fill(buf.begin(), buf.end(), -1);
      MPI_Status st;
      REQUIRE(MDSM_Recv(buf.data(), static_cast<int>(buf.size()), MPI_INT, MPI_ANY_SOURCE, MPI_ANY_TAG,
                        MPI_COMM_WORLD, &st) == MPI_SUCCESS);
      const int from = buf[0], m = buf[1];
      REQUIRE(from >= 1);
      REQUIRE(from < n);
      REQUIRE(st.MPI_SOURCE == from);
      REQUIRE(st.MPI_TAG == 100 + from);
      REQUIRE(m == next[static_cast<std::size_t>(from)]++);  // non-overtaking
      const std::size_t len = m % 2 == 0 ? k_large : k_small;
      int count = 0;
      MPI_Get_count(&st, MPI_INT, &count);
      REQUIRE(count == static_cast<int>(len));
      std::vector<int> want(len - 2);
      for (std::size_t i = 2; i < len; ++i) want[i - 2] = value(m, i, from);
      REQUIRE(buf[len] == -1);
      REQUIRE(equal_ints(buf.data() + 2, want));
    }
  }
  world_barrier();
}

TEST_CASE("mpi_ext large: MDSM_Isend and MDSM_Irecv completed by Wait, Waitany and Testall",
          "[mpi][mpi_ext][np2+]") {
  session s;
  const int me = mdsm::rank();
  int* src = mdsm::alloc_collective_array<int>(3 * k_1m);
  if (me == 0) {
    fill(src, 3 * k_1m, 7, 0);
    MPI_Request req[3];
    for (int k = 0; k < 3; ++k)
      REQUIRE(MDSM_Isend(src + static_cast<std::size_t>(k) * k_1m, static_cast<int>(k_1m), MPI_INT, 1, k,
                         MPI_COMM_WORLD, MDSM_RELEASE, &req[k]) == MPI_SUCCESS);
    REQUIRE(MDSM_Waitall(3, req, MPI_STATUSES_IGNORE) == MPI_SUCCESS);
  } else if (me == 1) {
    std::vector<int> in(3 * k_1m, -1);
    MPI_Request req[3];
    // Posted in reverse order: each matches its own tag.
    for (int k = 2; k >= 0; --k)
      REQUIRE(MDSM_Irecv(in.data() + static_cast<std::size_t>(k) * k_1m, static_cast<int>(k_1m), MPI_INT, 0, k,
                         MPI_COMM_WORLD, &req[k]) == MPI_SUCCESS);
    MPI_Status st[3];
    REQUIRE(MDSM_Wait(&req[0], &st[0]) == MPI_SUCCESS);
    int index = -1;
    REQUIRE(MDSM_Waitany(1, &req[1], &index, &st[1]) == MPI_SUCCESS);
    REQUIRE(index == 0);
    int flag = 0;
    while (!flag) REQUIRE(MDSM_Testall(1, &req[2], &flag, &st[2]) == MPI_SUCCESS);
    for (int k = 0; k < 3; ++k) {
      REQUIRE(req[k] == MPI_REQUEST_NULL);
      REQUIRE(st[k].MPI_SOURCE == 0);
      REQUIRE(st[k].MPI_TAG == k);
      int count = 0;
      MPI_Get_count(&st[k], MPI_INT, &count);
      REQUIRE(count == static_cast<int>(k_1m));
    }
    REQUIRE(all_match(in.data(), 3 * k_1m, 7, 0));
    REQUIRE(all_match(src, 3 * k_1m, 7, 0));  // acquired: rank 0's writes
  }
  REQUIRE(MDSM_Barrier(MPI_COMM_WORLD) == MPI_SUCCESS);
  mdsm::free_collective(src);
}

TEST_CASE("mpi_ext large: MDSM_Probe and MDSM_Iprobe report the user's count; the receive takes the probed message",
          "[mpi][mpi_ext][np2+]") {
  session s;
  const int me = mdsm::rank();
  std::vector<int> out(k_1m);
  if (me == 0) {
    // 1: large RELEASE, 2: small, 3: large NONE, 4: large (received by MDSM_Irecv), 5: empty.
    const std::size_t lens[] = {0, k_1m, 8, k_64k, k_64k + 5, 0};
    for (int tag = 1; tag <= 5; ++tag) {
      fill(out.data(), lens[tag], 50, tag);
      REQUIRE(MDSM_Send(out.data(), static_cast<int>(lens[tag]), MPI_INT, 1, tag, MPI_COMM_WORLD,
                        tag == 1 ? MDSM_RELEASE : MDSM_NONE) == MPI_SUCCESS);
    }
  } else if (me == 1) {
    std::vector<int> in(k_1m + 1, -1);
    MPI_Status st;
    int count = -1;
    // Probed twice (a specific tag, then any tag): the same message, its count the user's.
    REQUIRE(MDSM_Probe(0, 1, MPI_COMM_WORLD, &st) == MPI_SUCCESS);
    MPI_Get_count(&st, MPI_INT, &count);
    REQUIRE(count == static_cast<int>(k_1m));
    REQUIRE(st.MPI_TAG == 1);
    REQUIRE(MDSM_Probe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &st) == MPI_SUCCESS);
    MPI_Get_count(&st, MPI_BYTE, &count);
    REQUIRE(count == static_cast<int>(k_1m * sizeof(int)));
    REQUIRE(st.MPI_TAG == 1);
    REQUIRE(st.MPI_SOURCE == 0);
    REQUIRE(MDSM_Recv(in.data(), static_cast<int>(in.size()), MPI_INT, 0, 1, MPI_COMM_WORLD, &st) == MPI_SUCCESS);
    MPI_Get_count(&st, MPI_INT, &count);
    REQUIRE(count == static_cast<int>(k_1m));
    REQUIRE(all_match(in.data(), k_1m, 50, 1));
    REQUIRE(in[k_1m] == -1);
    // Iprobe until the small one is there; it stays in MPI.
    int flag = 0;
    while (!flag) REQUIRE(MDSM_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &flag, &st) == MPI_SUCCESS);
    REQUIRE(st.MPI_TAG == 2);
    MPI_Get_count(&st, MPI_INT, &count);
    REQUIRE(count == 8);
    REQUIRE(MDSM_Recv(in.data(), 8, MPI_INT, 0, 2, MPI_COMM_WORLD, &st) == MPI_SUCCESS);
    REQUIRE(all_match(in.data(), 8, 50, 2));
    // Iprobe of a large one by its tag, then a receive with wildcards takes it.
    flag = 0;
    while (!flag) REQUIRE(MDSM_Iprobe(0, 3, MPI_COMM_WORLD, &flag, &st) == MPI_SUCCESS);
    MPI_Get_count(&st, MPI_INT, &count);
    REQUIRE(count == static_cast<int>(k_64k));
    std::fill(in.begin(), in.end(), -1);
    REQUIRE(MDSM_Recv(in.data(), static_cast<int>(in.size()), MPI_INT, MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD,
                      &st) == MPI_SUCCESS);
    REQUIRE(st.MPI_TAG == 3);
    MPI_Get_count(&st, MPI_INT, &count);
    REQUIRE(count == static_cast<int>(k_64k));
    REQUIRE(all_match(in.data(), k_64k, 50, 3));
    REQUIRE(in[k_64k] == -1);
    // Probed, then received by MDSM_Irecv and MDSM_Wait.
    REQUIRE(MDSM_Probe(0, MPI_ANY_TAG, MPI_COMM_WORLD, &st) == MPI_SUCCESS);
    REQUIRE(st.MPI_TAG == 4);
    MPI_Get_count(&st, MPI_INT, &count);
    REQUIRE(count == static_cast<int>(k_64k + 5));
    MPI_Request req;
    REQUIRE(MDSM_Irecv(in.data(), static_cast<int>(in.size()), MPI_INT, 0, MPI_ANY_TAG, MPI_COMM_WORLD, &req) ==
            MPI_SUCCESS);
    REQUIRE(MDSM_Wait(&req, &st) == MPI_SUCCESS);
    REQUIRE(st.MPI_TAG == 4);
    MPI_Get_count(&st, MPI_INT, &count);
    REQUIRE(count == static_cast<int>(k_64k + 5));
    REQUIRE(all_match(in.data(), k_64k + 5, 50, 4));
    // An empty message is a header alone too: probed (count 0), then received.
    REQUIRE(MDSM_Probe(0, 5, MPI_COMM_WORLD, &st) == MPI_SUCCESS);
    MPI_Get_count(&st, MPI_INT, &count);
    REQUIRE(count == 0);
    REQUIRE(MDSM_Recv(in.data(), 1, MPI_INT, 0, 5, MPI_COMM_WORLD, &st) == MPI_SUCCESS);
    MPI_Get_count(&st, MPI_INT, &count);
    REQUIRE(count == 0);
    REQUIRE(st.MPI_TAG == 5);
  }
  world_barrier();
}

TEST_CASE("mpi_ext large: truncation is MPI's MPI_ERR_TRUNCATE and the next message still arrives",
          "[mpi][mpi_ext][np2+]") {
  session s;
  const int me = mdsm::rank();
  returning_comm rc;
  std::vector<int> out(k_1m);
  if (me == 0) {
    for (int tag = 1; tag <= 9; ++tag) {
      const std::size_t len = tag >= 8 ? k_in_place : tag == 2 || tag == 4 || tag >= 6 ? 8 : k_1m;
      fill(out.data(), len, 60, tag);
      REQUIRE(MDSM_Send(out.data(), static_cast<int>(len), MPI_INT, 1, tag, rc.comm,
                        tag == 3 ? MDSM_NONE : MDSM_RELEASE) == MPI_SUCCESS);
    }
  } else if (me == 1) {
    constexpr std::size_t k_short = 1000;
    std::vector<int> in(k_1m, -1);
    MPI_Status st;
    int count = -1;
    // 1: blocking, into a buffer too small (a copied receive on the receiver's side).
    int code = MDSM_Recv(in.data(), static_cast<int>(k_short), MPI_INT, 0, 1, rc.comm, &st);
    REQUIRE(error_class(code) == MPI_ERR_TRUNCATE);
    REQUIRE(all_match(in.data(), k_short, 60, 1));  // what fitted
    REQUIRE(in[k_short] == -1);                     // nothing beyond
    // 2: the next message, whole.
    REQUIRE(MDSM_Recv(in.data(), 8, MPI_INT, 0, 2, rc.comm, &st) == MPI_SUCCESS);
    MPI_Get_count(&st, MPI_INT, &count);
    REQUIRE(count == 8);
    REQUIRE(all_match(in.data(), 8, 60, 2));
    // 3: nonblocking, too small, probed first.
    REQUIRE(MDSM_Probe(0, 3, rc.comm, &st) == MPI_SUCCESS);
    MPI_Get_count(&st, MPI_INT, &count);
    REQUIRE(count == static_cast<int>(k_1m));
    std::fill(in.begin(), in.end(), -1);
    MPI_Request req;
    REQUIRE(MDSM_Irecv(in.data(), static_cast<int>(k_1m / 2), MPI_INT, 0, 3, rc.comm, &req) == MPI_SUCCESS);
    code = MDSM_Wait(&req, &st);
    REQUIRE(error_class(code) == MPI_ERR_TRUNCATE);
    REQUIRE(all_match(in.data(), k_1m / 2, 60, 3));
    REQUIRE(in[k_1m / 2] == -1);
    // 4 and 5: the following messages arrive, the large one whole.
    REQUIRE(MDSM_Recv(in.data(), 8, MPI_INT, 0, 4, rc.comm, &st) == MPI_SUCCESS);
    REQUIRE(all_match(in.data(), 8, 60, 4));
    REQUIRE(MDSM_Recv(in.data(), static_cast<int>(k_1m), MPI_INT, 0, 5, rc.comm, &st) == MPI_SUCCESS);
    MPI_Get_count(&st, MPI_INT, &count);
    REQUIRE(count == static_cast<int>(k_1m));
    REQUIRE(all_match(in.data(), k_1m, 60, 5));
    // 6 and 7: small messages (copied on both sides) truncated the same way, blocking and not.
    std::fill(in.begin(), in.end(), -1);
    code = MDSM_Recv(in.data(), 4, MPI_INT, 0, 6, rc.comm, &st);
    REQUIRE(error_class(code) == MPI_ERR_TRUNCATE);
    MPI_Get_count(&st, MPI_INT, &count);
    REQUIRE(count == 4);
    REQUIRE(all_match(in.data(), 4, 60, 6));
    REQUIRE(in[4] == -1);
    REQUIRE(MDSM_Irecv(in.data() + 100, 4, MPI_INT, 0, 7, rc.comm, &req) == MPI_SUCCESS);
    code = MDSM_Wait(&req, &st);
    REQUIRE(error_class(code) == MPI_ERR_TRUNCATE);
    MPI_Get_count(&st, MPI_INT, &count);
    REQUIRE(count == 4);
    REQUIRE(all_match(in.data() + 100, 4, 60, 7));
    REQUIRE(in[104] == -1);
    // 8 and 9: messages in place (header and data as one struct datatype) truncated into copied
    // receives, blocking and not: the error, what fitted, nothing beyond.
    std::fill(in.begin(), in.end(), -1);
    code = MDSM_Recv(in.data(), 10, MPI_INT, 0, 8, rc.comm, &st);
    REQUIRE(error_class(code) == MPI_ERR_TRUNCATE);
    REQUIRE(all_match(in.data(), 10, 60, 8));
    REQUIRE(in[10] == -1);
    REQUIRE(MDSM_Irecv(in.data() + 100, 10, MPI_INT, 0, 9, rc.comm, &req) == MPI_SUCCESS);
    code = MDSM_Wait(&req, &st);
    REQUIRE(error_class(code) == MPI_ERR_TRUNCATE);
    REQUIRE(all_match(in.data() + 100, 10, 60, 9));
    REQUIRE(in[110] == -1);
  }
  world_barrier();
}

TEST_CASE("mpi_ext large: Sendrecv with large data both ways, derived types on one side", "[mpi][mpi_ext][np2+]") {
  session s;
  const int me = mdsm::rank(), n = mdsm::size();
  const int right = (me + 1) % n, left = (me + n - 1) % n;
  every_other vec(static_cast<int>(k_1m));
  std::vector<int> out(2 * k_1m), in(2 * k_1m);
  for (int round = 0; round < 2; ++round) {
    fill(out.data(), 2 * k_1m, round, me);
    std::fill(in.begin(), in.end(), -1);
    const std::uint64_t side = stat("mpi_side_data");
    MPI_Status st;
    // Round 0 sends contiguous ints and receives every other slot; round 1 the other way round.
    if (round == 0)
      REQUIRE(MDSM_Sendrecv(out.data(), static_cast<int>(k_1m), MPI_INT, right, 9, in.data(), 1, vec.type, left, 9,
                            MPI_COMM_WORLD, &st, MDSM_RELEASE) == MPI_SUCCESS);
    else
      REQUIRE(MDSM_Sendrecv(out.data(), 1, vec.type, right, 9, in.data(), static_cast<int>(k_1m), MPI_INT, left, 9,
                            MPI_COMM_WORLD, &st, MDSM_NONE) == MPI_SUCCESS);
    REQUIRE(stat("mpi_side_data") == side + 1);
    REQUIRE(st.MPI_SOURCE == left);
    REQUIRE(st.MPI_TAG == 9);
    int elements = 0;
    MPI_Get_elements(&st, MPI_INT, &elements);
    REQUIRE(elements == static_cast<int>(k_1m));
    std::vector<int> want(round == 0 ? 2 * k_1m - 1 : k_1m);
    for (std::size_t i = 0; i < want.size(); ++i)
      want[i] = round == 0 ? (i % 2 == 0 ? value(round, i / 2, left) : -1) : value(round, 2 * i, left);
    REQUIRE(equal_ints(in.data(), want));
    world_barrier();
  }
}

TEST_CASE("mpi_ext large: a large message to the rank itself, receive posted first", "[mpi][mpi_ext][np2+]") {
  session s;
  // Only the progress thread moves the posted receive on while this rank blocks in the send
  // (docs/MPI.md, "Requests"): without it the send waits forever.
  const char* thread_env = std::getenv("MDSM_PROGRESS_THREAD");
  if (thread_env != nullptr && std::string(thread_env) == "0") return;
  const int me = mdsm::rank();
  std::vector<int> out(k_1m), in(k_1m, -1);
  fill(out.data(), k_1m, 70, me);
  MPI_Request req;
  REQUIRE(MDSM_Irecv(in.data(), static_cast<int>(k_1m), MPI_INT, me, 3, MPI_COMM_WORLD, &req) == MPI_SUCCESS);
  // A blocking send to itself returns once the posted receive took the data (as with plain MPI).
  REQUIRE(MDSM_Send(out.data(), static_cast<int>(k_1m), MPI_INT, me, 3, MPI_COMM_WORLD, MDSM_RELEASE) ==
          MPI_SUCCESS);
  MPI_Status st;
  REQUIRE(MDSM_Wait(&req, &st) == MPI_SUCCESS);
  REQUIRE(st.MPI_SOURCE == me);
  REQUIRE(all_match(in.data(), k_1m, 70, me));
  world_barrier();
}

TEST_CASE("mpi_ext large: in-place messages into the same buffers again, more pending than a thread keeps types for",
          "[mpi][mpi_ext][np2+]") {
  // A thread keeps the {header, buffer} datatypes it made last (ext.hpp, header_and): each round
  // sends from and receives into the same 12 buffers (in place: 6,000 bytes, private, and
  // a coherent receive buffer whatever its size), with counts that change between rounds, all 12
  // pending at once, so types are replaced while in use, and blocking sends from one buffer with
  // fewer ints each time, so a type must not be reused for another count. A type reused for the
  // wrong buffer or count would put data in the wrong place or send the wrong count.
  session s;
  const int me = mdsm::rank();
  constexpr int k_buffers = 12;
  int* coherent = mdsm::alloc_collective_array<int>(k_in_place);
  std::vector<std::vector<int>> bufs(k_buffers, std::vector<int>(k_in_place + 1, -1));  // + 1: a guard
  for (int round = 0; round < 4; ++round) {
    const std::size_t len = round % 2 == 0 ? k_in_place : k_in_place - 100;
    if (me == 0) {
      MPI_Request req[k_buffers + 1];
      for (int k = 0; k < k_buffers; ++k) {
        fill(bufs[static_cast<std::size_t>(k)].data(), len, round, k);
        REQUIRE(MDSM_Isend(bufs[static_cast<std::size_t>(k)].data(), static_cast<int>(len), MPI_INT, 1, k,
                           MPI_COMM_WORLD, k % 2 == 0 ? MDSM_NONE : MDSM_RELEASE, &req[k]) == MPI_SUCCESS);
      }
      REQUIRE(MDSM_Waitall(k_buffers, req, MPI_STATUSES_IGNORE) == MPI_SUCCESS);
      fill(bufs[0].data(), 8, round, 99);
      REQUIRE(MDSM_Send(bufs[0].data(), 8, MPI_INT, 1, 99, MPI_COMM_WORLD, MDSM_RELEASE) == MPI_SUCCESS);
      fill(bufs[1].data(), len, round, 100);
      REQUIRE(MDSM_Send(bufs[1].data(), static_cast<int>(len), MPI_INT, 1, 100, MPI_COMM_WORLD, MDSM_RELEASE) ==
              MPI_SUCCESS);
      for (int j = 0; j < 3; ++j) {  // one buffer, back to back, fewer ints each time
        fill(bufs[2].data(), len - 10 * static_cast<std::size_t>(j), round, 101 + j);
        REQUIRE(MDSM_Send(bufs[2].data(), static_cast<int>(len) - 10 * j, MPI_INT, 1, 101 + j, MPI_COMM_WORLD,
                          MDSM_NONE) == MPI_SUCCESS);
      }
    } else if (me == 1) {
      MPI_Request req[k_buffers];
      for (auto& b : bufs) std::fill(b.begin(), b.end(), -1);
      for (int k = k_buffers - 1; k >= 0; --k)  // posted in reverse: each matches its own tag
        REQUIRE(MDSM_Irecv(bufs[static_cast<std::size_t>(k)].data(), static_cast<int>(k_in_place), MPI_INT, 0, k,
                           MPI_COMM_WORLD, &req[k]) == MPI_SUCCESS);
      MPI_Status st[k_buffers];
      REQUIRE(MDSM_Waitall(k_buffers, req, st) == MPI_SUCCESS);
      for (int k = 0; k < k_buffers; ++k) {
        int count = 0;
        MPI_Get_count(&st[k], MPI_INT, &count);
        REQUIRE(count == static_cast<int>(len));
        REQUIRE(all_match(bufs[static_cast<std::size_t>(k)].data(), len, round, k));
        REQUIRE(bufs[static_cast<std::size_t>(k)][len] == -1);  // nothing past the message
      }
      // Blocking receives into one buffer, private then coherent, each with a full-size count.
      MPI_Status one;
      int count = 0;
      REQUIRE(MDSM_Recv(bufs[0].data(), static_cast<int>(k_in_place), MPI_INT, 0, 99, MPI_COMM_WORLD, &one) ==
              MPI_SUCCESS);
      MPI_Get_count(&one, MPI_INT, &count);
      REQUIRE(count == 8);
      REQUIRE(all_match(bufs[0].data(), 8, round, 99));
      REQUIRE(MDSM_Recv(coherent, static_cast<int>(k_in_place), MPI_INT, 0, 100, MPI_COMM_WORLD, &one) ==
              MPI_SUCCESS);
      MPI_Get_count(&one, MPI_INT, &count);
      REQUIRE(count == static_cast<int>(len));
      REQUIRE(all_match(coherent, len, round, 100));
      for (int j = 0; j < 3; ++j) {
        const std::size_t want = len - 10 * static_cast<std::size_t>(j);
        std::fill(bufs[3].begin(), bufs[3].end(), -1);
        REQUIRE(MDSM_Recv(bufs[3].data(), static_cast<int>(k_in_place), MPI_INT, 0, 101 + j, MPI_COMM_WORLD, &one) ==
                MPI_SUCCESS);
        MPI_Get_count(&one, MPI_INT, &count);
        REQUIRE(count == static_cast<int>(want));
        REQUIRE(all_match(bufs[3].data(), want, round, 101 + j));
        REQUIRE(bufs[3][want] == -1);
      }
    }
  }
  REQUIRE(MDSM_Barrier(MPI_COMM_WORLD) == MPI_SUCCESS);
  mdsm::free_collective(coherent);
}
