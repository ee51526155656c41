// The annotated MPI calls (mpi_ext/, include/mdsm/mdsm_mpi.h) across real ranks: a pointer sent
// with MDSM_Send(RELEASE) makes the data behind it visible, with every receive form, wildcards,
// datatypes, coherent receive buffers, chains, collectives, and the misuse cases.
#include "mpi_ext/mpi_ext_support.hpp"

#include <mdsm/mdsm_mpi.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

using namespace mdsm_test;

// test/messages/c_calls.c: an int that is no annotation can only be passed from C (in C++ holding
// it in an mdsm_annotation is undefined behaviour).
extern "C" int c_mdsm_send_with_annotation(const void* buf, int count, MPI_Datatype type, int dest, int tag,
                                           MPI_Comm comm, int annotation);


TEST_CASE("mpi_ext: a pointer sent with MDSM_Send(RELEASE) makes the data behind it visible", "[mpi][mpi_ext][np2+]") {
  session s;
  const int me = mdsm::rank(), n = mdsm::size();
  int* data = mdsm::alloc_collective_array<int>(k_ints);
  for (int round = 0; round < 6; ++round) {
    if (me == 0) {
      for (std::size_t i = 0; i < k_ints; ++i) data[i] = value(round, i);
      const std::uint64_t side = stat("mpi_side_messages");
      for (int r = 1; r < n; ++r)
        REQUIRE(MDSM_Send(&data, sizeof data, MPI_BYTE, r, 7, MPI_COMM_WORLD, MDSM_RELEASE) == MPI_SUCCESS);
      // 40 pages' notices do not fit in the header: the information went on the side channel.
      REQUIRE(stat("mpi_side_messages") == side + static_cast<std::uint64_t>(n - 1));
    } else {
      int* p = nullptr;
      MPI_Status st;
      REQUIRE(MDSM_Recv(&p, sizeof p, MPI_BYTE, 0, 7, MPI_COMM_WORLD, &st) == MPI_SUCCESS);
      int count = -1;
      MPI_Get_count(&st, MPI_BYTE, &count);
      REQUIRE(count == static_cast<int>(sizeof p));
      REQUIRE(p == data);
      REQUIRE(all_match(p, k_ints, round));  // read every byte (the copy of the last round is stale)
    }
    REQUIRE(MDSM_Barrier(MPI_COMM_WORLD) == MPI_SUCCESS);  // the next round's writes start after the reads
  }
  mdsm::free_collective(data);
}

TEST_CASE("mpi_ext: NONE carries no consistency, RELEASE_NT and REQUEST are counted", "[mpi][mpi_ext][np2+]") {
  session s;
  const int me = mdsm::rank(), n = mdsm::size();
  const std::uint64_t sent0 = stat("mpi_cinfo_bytes_sent"), acq0 = stat("mpi_acquires");
  int token = 5;
  if (me == 0) {
    for (int r = 1; r < n; ++r) REQUIRE(MDSM_Send(&token, 1, MPI_INT, r, 1, MPI_COMM_WORLD, MDSM_NONE) == MPI_SUCCESS);
    REQUIRE(stat("mpi_cinfo_bytes_sent") == sent0);
    REQUIRE(stat("mpi_sends_none") >= static_cast<std::uint64_t>(n - 1));
    const std::uint64_t side = stat("mpi_side_messages");
    for (int r = 1; r < n; ++r)
      REQUIRE(MDSM_Send(&token, 1, MPI_INT, r, 2, MPI_COMM_WORLD, MDSM_RELEASE_NT) == MPI_SUCCESS);
    REQUIRE(stat("mpi_cinfo_bytes_sent") > sent0);
    REQUIRE(stat("mpi_side_messages") == side);  // nothing new to carry: it fits in the header
    for (int r = 1; r < n; ++r) REQUIRE(MDSM_Send(&token, 1, MPI_INT, r, 3, MPI_COMM_WORLD, MDSM_REQUEST) == MPI_SUCCESS);
  } else {
    int got = 0;
    REQUIRE(MDSM_Recv(&got, 1, MPI_INT, 0, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE) == MPI_SUCCESS);
    REQUIRE(got == 5);
    REQUIRE(stat("mpi_acquires") == acq0);
    REQUIRE(MDSM_Recv(&got, 1, MPI_INT, 0, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE) == MPI_SUCCESS);
    REQUIRE(stat("mpi_acquires") == acq0 + 1);
    REQUIRE(MDSM_Recv(&got, 1, MPI_INT, 0, 3, MPI_COMM_WORLD, MPI_STATUS_IGNORE) == MPI_SUCCESS);
    REQUIRE(stat("mpi_acquires") == acq0 + 1);
    // REQUEST taught this rank rank 0's vector time.
    REQUIRE(got == 5);
  }
  world_barrier();
}

TEST_CASE("mpi_ext: time blocked in MDSM_Recv, MDSM_Probe and MDSM_Wait counts as synchronization wait",
          "[mpi][mpi_ext][np2+]") {
  // Rank 1 sends rank 0 three messages, each 30 ms late (a NONE message short enough for the
  // short path, a RELEASE, and one rank 0 waits for with MDSM_Irecv + MDSM_Wait after an
  // MDSM_Probe). MPI itself waits in these calls; their time must show in wait_ns and
  // sync_wait_ns as a wait inside mdsm's own engine does (the apps' time breakdown reads them).
  session s;
  const int me = mdsm::rank();
  mdsm::set_statistics_timing(true);
  constexpr std::uint64_t k_late_ns = 30'000'000;
  if (me == 0) {
    auto waited = [](auto&& call) {
      const std::uint64_t wait0 = stat("wait_ns"), sync0 = stat("sync_wait_ns");
      call();
      CHECK(stat("wait_ns") - wait0 >= k_late_ns / 2);
      CHECK(stat("sync_wait_ns") - sync0 >= k_late_ns / 2);
    };
    int got = 0;
    waited([&] { REQUIRE(MDSM_Recv(&got, 1, MPI_INT, 1, 11, MPI_COMM_WORLD, MPI_STATUS_IGNORE) == MPI_SUCCESS); });
    CHECK(got == 1);
    waited([&] { REQUIRE(MDSM_Recv(&got, 1, MPI_INT, 1, 12, MPI_COMM_WORLD, MPI_STATUS_IGNORE) == MPI_SUCCESS); });
    CHECK(got == 2);
    MPI_Status st;
    waited([&] { REQUIRE(MDSM_Probe(1, 13, MPI_COMM_WORLD, &st) == MPI_SUCCESS); });
    MPI_Request req;
    REQUIRE(MDSM_Irecv(&got, 1, MPI_INT, 1, 13, MPI_COMM_WORLD, &req) == MPI_SUCCESS);
    REQUIRE(MDSM_Wait(&req, MPI_STATUS_IGNORE) == MPI_SUCCESS);
    CHECK(got == 3);
    REQUIRE(MDSM_Irecv(&got, 1, MPI_INT, 1, 14, MPI_COMM_WORLD, &req) == MPI_SUCCESS);
    waited([&] { REQUIRE(MDSM_Wait(&req, MPI_STATUS_IGNORE) == MPI_SUCCESS); });
    CHECK(got == 4);
  } else if (me == 1) {
    const mdsm_annotation how[] = {MDSM_NONE, MDSM_RELEASE, MDSM_NONE, MDSM_RELEASE};
    for (int i = 0; i < 4; ++i) {
      std::this_thread::sleep_for(std::chrono::nanoseconds(k_late_ns));
      const int v = i + 1;
      REQUIRE(MDSM_Send(&v, 1, MPI_INT, 0, 11 + i, MPI_COMM_WORLD, how[i]) == MPI_SUCCESS);
    }
  }
  mdsm::set_statistics_timing(false);
  world_barrier();
}

TEST_CASE("mpi_ext: MPI_ANY_SOURCE and MPI_ANY_TAG, order per source and tag", "[mpi][mpi_ext][np2+]") {
  session s;
  const int me = mdsm::rank(), n = mdsm::size();
  constexpr std::size_t k_each = 3000;
  int* slots = mdsm::alloc_collective_array<int>(k_each * static_cast<std::size_t>(n));
  constexpr int k_msgs = 5;
  if (me != 0) {
    int* mine = slots + k_each * static_cast<std::size_t>(me);
    for (int m = 0; m < k_msgs; ++m) {
      for (std::size_t i = 0; i < k_each; ++i) mine[i] = value(m, i, me);
      const int msg[2] = {me, m};
      REQUIRE(MDSM_Send(msg, 2, MPI_INT, 0, 100 + me, MPI_COMM_WORLD, MDSM_RELEASE) == MPI_SUCCESS);
      int ack = 0;  // the next round's writes wait until rank 0 has read this one's
      REQUIRE(MDSM_Recv(&ack, 1, MPI_INT, 0, 99, MPI_COMM_WORLD, MPI_STATUS_IGNORE) == MPI_SUCCESS);
    }
  } else {
    std::vector<int> next(static_cast<std::size_t>(n), 0);
    for (int k = 0; k < k_msgs * (n - 1); ++k) {
      int msg[2] = {-1, -1};
      MPI_Status st;
      REQUIRE(MDSM_Recv(msg, 2, MPI_INT, MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &st) == MPI_SUCCESS);
      REQUIRE(st.MPI_SOURCE == msg[0]);
      REQUIRE(st.MPI_TAG == 100 + msg[0]);
      int count = 0;
      MPI_Get_count(&st, MPI_INT, &count);
      REQUIRE(count == 2);
      REQUIRE(msg[1] == next[static_cast<std::size_t>(msg[0])]++);  // non-overtaking
      REQUIRE(all_match(slots + k_each * static_cast<std::size_t>(msg[0]), k_each, msg[1], msg[0]));
      const int ack = 1;
      REQUIRE(MDSM_Send(&ack, 1, MPI_INT, msg[0], 99, MPI_COMM_WORLD, MDSM_NONE) == MPI_SUCCESS);
    }
  }
  world_barrier();
  mdsm::free_collective(slots);
}

TEST_CASE("mpi_ext: nonblocking calls completed by every wait and test form", "[mpi][mpi_ext][np2+]") {
  session s;
  const int me = mdsm::rank(), n = mdsm::size();
  int* data = mdsm::alloc_collective_array<int>(k_ints);
  // Forms: 0 MDSM_Wait, 1 MDSM_Test loop, 2 MDSM_Waitall, 3 MDSM_Waitany, 4 MDSM_Testall,
  // 5 plain MPI_Wait (finished by the progress thread), 6 plain MPI_Test loop. Without a
  // progress thread nothing finishes a request that a plain MPI call waits for (docs/MPI.md).
  const char* thread_env = std::getenv("MDSM_PROGRESS_THREAD");
  const int forms = thread_env != nullptr && std::string(thread_env) == "0" ? 5 : 7;
  for (int form = 0; form < forms; ++form) {
    if (me == 0) {
      for (std::size_t i = 0; i < k_ints; ++i) data[i] = value(form, i);
      std::vector<MPI_Request> reqs(static_cast<std::size_t>(n - 1));
      for (int r = 1; r < n; ++r)
        REQUIRE(MDSM_Isend(&data, sizeof data, MPI_BYTE, r, form, MPI_COMM_WORLD, MDSM_RELEASE,
                           &reqs[static_cast<std::size_t>(r - 1)]) == MPI_SUCCESS);
      REQUIRE(MDSM_Waitall(n - 1, reqs.data(), MPI_STATUSES_IGNORE) == MPI_SUCCESS);
      for (MPI_Request r : reqs) REQUIRE(r == MPI_REQUEST_NULL);
    } else {
      int* p = nullptr;
      MPI_Request req[2];
      REQUIRE(MDSM_Irecv(&p, sizeof p, MPI_BYTE, 0, form, MPI_COMM_WORLD, &req[0]) == MPI_SUCCESS);
      // A plain request alongside (a self message) for the array forms.
      int self_out = 42, self_in = 0;
      MPI_Request self_send;
      MPI_Isend(&self_out, 1, MPI_INT, me, 1000, MPI_COMM_WORLD, &self_send);
      MPI_Irecv(&self_in, 1, MPI_INT, me, 1000, MPI_COMM_WORLD, &req[1]);
      MPI_Status st[2];
      int flag = 0;
      switch (form) {
        case 0:
          REQUIRE(MDSM_Wait(&req[0], &st[0]) == MPI_SUCCESS);
          REQUIRE(MDSM_Wait(&req[1], &st[1]) == MPI_SUCCESS);
          break;
        case 1:
          while (!flag) REQUIRE(MDSM_Test(&req[0], &flag, &st[0]) == MPI_SUCCESS);
          REQUIRE(MDSM_Wait(&req[1], &st[1]) == MPI_SUCCESS);
          break;
        case 2: REQUIRE(MDSM_Waitall(2, req, st) == MPI_SUCCESS); break;
        case 3: {
          int done = 0;
          for (int k = 0; k < 2; ++k) {
            int index = -1;
            MPI_Status one;
            REQUIRE(MDSM_Waitany(2, req, &index, &one) == MPI_SUCCESS);
            REQUIRE((index == 0 || index == 1));
            done |= 1 << index;
            st[index] = one;
          }
          REQUIRE(done == 3);
          break;
        }
        case 4:
          while (!flag) REQUIRE(MDSM_Testall(2, req, &flag, st) == MPI_SUCCESS);
          break;
        case 5:
          REQUIRE(MPI_Wait(&req[0], &st[0]) == MPI_SUCCESS);
          REQUIRE(MPI_Wait(&req[1], &st[1]) == MPI_SUCCESS);
          break;
        default:
          while (!flag) REQUIRE(MPI_Test(&req[0], &flag, &st[0]) == MPI_SUCCESS);
          REQUIRE(MPI_Wait(&req[1], &st[1]) == MPI_SUCCESS);
          break;
      }
      MPI_Wait(&self_send, MPI_STATUS_IGNORE);
      REQUIRE(req[0] == MPI_REQUEST_NULL);
      REQUIRE(self_in == 42);
      REQUIRE(st[0].MPI_SOURCE == 0);
      REQUIRE(st[0].MPI_TAG == form);
      int count = 0;
      MPI_Get_count(&st[0], MPI_BYTE, &count);
      REQUIRE(count == static_cast<int>(sizeof p));
      REQUIRE(p == data);
      REQUIRE(all_match(p, k_ints, form));
    }
    REQUIRE(MDSM_Barrier(MPI_COMM_WORLD) == MPI_SUCCESS);
  }
  mdsm::free_collective(data);
}

TEST_CASE("mpi_ext: derived datatypes keep MPI's counts and elements", "[mpi][mpi_ext][np2+]") {
  session s;
  const int me = mdsm::rank();
  if (me > 1) {
    world_barrier();
    return;
  }
  // Every other int of 2 x 300 ints: a vector type, sent from the coherent region and received
  // into private memory and into the coherent region.
  MPI_Datatype every_other;
  MPI_Type_vector(300, 1, 2, MPI_INT, &every_other);
  MPI_Type_commit(&every_other);
  MPI_Datatype pair;  // 4 ints: received in units of 4, so 10 ints are 2.5 units
  MPI_Type_contiguous(4, MPI_INT, &pair);
  MPI_Type_commit(&pair);
  int* shared = static_cast<int*>(mdsm::alloc(600 * sizeof(int)));
  if (me == 0) {
    for (int i = 0; i < 600; ++i) shared[i] = i;
    REQUIRE(MDSM_Send(shared, 1, every_other, 1, 1, MPI_COMM_WORLD, MDSM_RELEASE) == MPI_SUCCESS);
    REQUIRE(MDSM_Send(shared, 1, every_other, 1, 2, MPI_COMM_WORLD, MDSM_RELEASE) == MPI_SUCCESS);
    REQUIRE(MDSM_Send(shared, 10, MPI_INT, 1, 3, MPI_COMM_WORLD, MDSM_NONE) == MPI_SUCCESS);
    REQUIRE(MDSM_Send(shared, 10, MPI_INT, 1, 4, MPI_COMM_WORLD, MDSM_NONE) == MPI_SUCCESS);
  } else {
    std::vector<int> got(300, -1);
    MPI_Status st;
    REQUIRE(MDSM_Recv(got.data(), 300, MPI_INT, 0, 1, MPI_COMM_WORLD, &st) == MPI_SUCCESS);
    int count = 0, elements = 0;
    MPI_Get_count(&st, MPI_INT, &count);
    REQUIRE(count == 300);
    for (int i = 0; i < 300; ++i) REQUIRE(got[static_cast<std::size_t>(i)] == 2 * i);
    // Into the coherent region, with the vector type (every other slot written, the rest kept).
    int* into = static_cast<int*>(mdsm::alloc(600 * sizeof(int)));
    for (int i = 0; i < 600; ++i) into[i] = -1;
    REQUIRE(MDSM_Recv(into, 1, every_other, 0, 2, MPI_COMM_WORLD, &st) == MPI_SUCCESS);
    MPI_Get_count(&st, every_other, &count);
    REQUIRE(count == 1);
    MPI_Get_elements(&st, every_other, &elements);
    REQUIRE(elements == 300);
    for (int i = 0; i < 600; ++i) REQUIRE(into[i] == (i % 2 == 0 ? i : -1));
    // 10 ints into 3 units of 4 (struct path: a derived type): a partial unit.
    std::vector<int> partial(12, -1);
    REQUIRE(MDSM_Recv(partial.data(), 3, pair, 0, 3, MPI_COMM_WORLD, &st) == MPI_SUCCESS);
    MPI_Get_count(&st, pair, &count);
    MPI_Get_elements(&st, pair, &elements);
    REQUIRE(count == MPI_UNDEFINED);
    REQUIRE(elements == 10);
    for (int i = 0; i < 12; ++i) REQUIRE(partial[static_cast<std::size_t>(i)] == (i < 10 ? i : -1));
    // The same message probed first.
    REQUIRE(MDSM_Probe(0, 4, MPI_COMM_WORLD, &st) == MPI_SUCCESS);
    MPI_Get_count(&st, MPI_INT, &count);
    REQUIRE(count == 10);
    REQUIRE(MDSM_Recv(partial.data(), 12, MPI_INT, 0, 4, MPI_COMM_WORLD, &st) == MPI_SUCCESS);
    MPI_Get_count(&st, MPI_INT, &count);
    REQUIRE(count == 10);
    mdsm::free(into);
  }
  MPI_Type_free(&every_other);
  MPI_Type_free(&pair);
  world_barrier();
  if (me == 0) mdsm::free(shared);
}

TEST_CASE("mpi_ext: receive buffers in the coherent region, chains through three ranks", "[mpi][mpi_ext][np3+]") {
  session s;
  const int me = mdsm::rank(), n = mdsm::size();
  if (n < 3) return;
  int* a = mdsm::alloc_collective_array<int>(k_ints);
  int* b = mdsm::alloc_collective_array<int>(k_ints);
  std::vector<int> outside(k_ints);
  for (int round = 0; round < 4; ++round) {
    if (me == 0) {
      // Written here, sent by MPI into rank 1's copy of b (a receive buffer in the region).
      for (std::size_t i = 0; i < k_ints; ++i) a[i] = value(round, i, 0);
      for (std::size_t i = 0; i < k_ints; ++i) outside[i] = value(round, i, 9);
      REQUIRE(MDSM_Send(outside.data(), static_cast<int>(k_ints), MPI_INT, 1, 5, MPI_COMM_WORLD, MDSM_RELEASE) ==
              MPI_SUCCESS);
    } else if (me == 1) {
      MPI_Status st;
      REQUIRE(MDSM_Recv(b, static_cast<int>(k_ints), MPI_INT, 0, 5, MPI_COMM_WORLD, &st) == MPI_SUCCESS);
      REQUIRE(all_match(b, k_ints, round, 9));
      REQUIRE(all_match(a, k_ints, round, 0));
      // Rank 2 must see rank 0's writes (transitively) and the bytes MPI wrote here.
      const int go = round;
      REQUIRE(MDSM_Send(&go, 1, MPI_INT, 2, 6, MPI_COMM_WORLD, MDSM_RELEASE) == MPI_SUCCESS);
    } else if (me == 2) {
      int go = -1;
      REQUIRE(MDSM_Recv(&go, 1, MPI_INT, 1, 6, MPI_COMM_WORLD, MPI_STATUS_IGNORE) == MPI_SUCCESS);
      REQUIRE(go == round);
      REQUIRE(all_match(a, k_ints, round, 0));
      REQUIRE(all_match(b, k_ints, round, 9));
    }
    REQUIRE(MDSM_Barrier(MPI_COMM_WORLD) == MPI_SUCCESS);
  }
  mdsm::free_collective(a);
  mdsm::free_collective(b);
}

TEST_CASE("mpi_ext: large messages both ways, Sendrecv around a ring", "[mpi][mpi_ext][np2+]") {
  session s;
  const int me = mdsm::rank(), n = mdsm::size();
  constexpr std::size_t k_big = 1 << 18;  // 1 MiB of ints per rank
  int* slabs = mdsm::alloc_collective_array<int>(k_big * static_cast<std::size_t>(n));
  int* mine = slabs + k_big * static_cast<std::size_t>(me);
  const int right = (me + 1) % n, left = (me + n - 1) % n;
  int* from_left = slabs + k_big * static_cast<std::size_t>(left);
  std::vector<int> copy(k_big, -1);
  for (int round = 0; round < 3; ++round) {
    for (std::size_t i = 0; i < k_big; ++i) mine[i] = value(round, i, me);
    // Send my slab's data (from the region) to the right; receive the left's into private memory.
    MPI_Status st;
    REQUIRE(MDSM_Sendrecv(mine, static_cast<int>(k_big), MPI_INT, right, 8, copy.data(), static_cast<int>(k_big),
                          MPI_INT, left, 8, MPI_COMM_WORLD, &st, MDSM_RELEASE) == MPI_SUCCESS);
    REQUIRE(st.MPI_SOURCE == left);
    REQUIRE(all_match(copy.data(), k_big, round, left));
    REQUIRE(all_match(from_left, k_big, round, left));  // the RELEASE made the left's slab visible
    REQUIRE(MDSM_Barrier(MPI_COMM_WORLD) == MPI_SUCCESS);
  }
  mdsm::free_collective(slabs);
}

TEST_CASE("mpi_ext: collectives keep MPI's results and are consistent", "[mpi][mpi_ext][np2+]") {
  session s;
  const int me = mdsm::rank(), n = mdsm::size();
  constexpr std::size_t k_each = 2000;
  int* slots = mdsm::alloc_collective_array<int>(k_each * static_cast<std::size_t>(n));
  int* root_data = mdsm::alloc_collective_array<int>(k_ints);
  int* bcast_into = mdsm::alloc_collective_array<int>(256 * static_cast<std::size_t>(n));
  for (int round = 0; round < 3; ++round) {
    for (std::size_t i = 0; i < k_each; ++i) slots[k_each * static_cast<std::size_t>(me) + i] = value(round, i, me);
    REQUIRE(MDSM_Barrier(MPI_COMM_WORLD) == MPI_SUCCESS);
    for (int r = 0; r < n; ++r) REQUIRE(all_match(slots + k_each * static_cast<std::size_t>(r), k_each, round, r));
    REQUIRE(MDSM_Barrier(MPI_COMM_WORLD) == MPI_SUCCESS);

    // Bcast: the root's other writes become visible too; the data lands in each rank's own slice.
    const int root = round % n;
    if (me == root)
      for (std::size_t i = 0; i < k_ints; ++i) root_data[i] = value(round, i, root);
    int* slice = bcast_into + 256 * static_cast<std::size_t>(me);
    std::vector<int> payload(256);
    for (int i = 0; i < 256; ++i) payload[static_cast<std::size_t>(i)] = value(round, static_cast<std::size_t>(i), 77);
    if (me == root) std::memcpy(slice, payload.data(), sizeof(int) * 256);
    REQUIRE(MDSM_Bcast(slice, 256, MPI_INT, root, MPI_COMM_WORLD) == MPI_SUCCESS);
    REQUIRE(all_match(slice, 256, round, 77));
    REQUIRE(all_match(root_data, k_ints, round, root));

    long long mine = me + 1, sum = 0, rsum = -1;
    REQUIRE(MDSM_Allreduce(&mine, &sum, 1, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD) == MPI_SUCCESS);
    REQUIRE(sum == static_cast<long long>(n) * (n + 1) / 2);
    REQUIRE(MDSM_Reduce(&mine, &rsum, 1, MPI_LONG_LONG, MPI_MAX, root, MPI_COMM_WORLD) == MPI_SUCCESS);
    if (me == root) REQUIRE(rsum == n);
    std::vector<int> all(static_cast<std::size_t>(n), -1);
    const int tagged = me * 10 + round;
    REQUIRE(MDSM_Gather(&tagged, 1, MPI_INT, all.data(), 1, MPI_INT, root, MPI_COMM_WORLD) == MPI_SUCCESS);
    if (me == root)
      for (int r = 0; r < n; ++r) REQUIRE(all[static_cast<std::size_t>(r)] == r * 10 + round);
    // Allgather into the coherent region.
    REQUIRE(MDSM_Allgather(&tagged, 1, MPI_INT, bcast_into, 1, MPI_INT, MPI_COMM_WORLD) == MPI_SUCCESS);
    for (int r = 0; r < n; ++r) REQUIRE(bcast_into[r] == r * 10 + round);
    REQUIRE(MDSM_Barrier(MPI_COMM_WORLD) == MPI_SUCCESS);
  }
  mdsm::free_collective(slots);
  mdsm::free_collective(root_data);
  mdsm::free_collective(bcast_into);
}

TEST_CASE("mpi_ext: a communicator with other ranks in another order", "[mpi][mpi_ext][np2+]") {
  session s;
  const int me = mdsm::rank(), n = mdsm::size();
  MPI_Comm reversed;
  MPI_Comm_split(MPI_COMM_WORLD, 0, n - me, &reversed);  // comm rank = n - 1 - world rank
  int* data = mdsm::alloc_collective_array<int>(k_ints);
  int crank = -1;
  MPI_Comm_rank(reversed, &crank);
  REQUIRE(crank == n - 1 - me);
  // World rank n-1 (comm rank 0) writes and sends to everyone in comm ranks.
  for (int round = 0; round < 3; ++round) {
    if (crank == 0) {
      for (std::size_t i = 0; i < k_ints; ++i) data[i] = value(round, i, 3);
      for (int r = 1; r < n; ++r)
        REQUIRE(MDSM_Send(&round, 1, MPI_INT, r, 0, reversed, MDSM_RELEASE) == MPI_SUCCESS);
    } else {
      int got = -1;
      MPI_Status st;
      REQUIRE(MDSM_Recv(&got, 1, MPI_INT, MPI_ANY_SOURCE, 0, reversed, &st) == MPI_SUCCESS);
      REQUIRE(st.MPI_SOURCE == 0);
      REQUIRE(got == round);
      REQUIRE(all_match(data, k_ints, round, 3));
    }
    REQUIRE(MDSM_Barrier(reversed) == MPI_SUCCESS);
  }
  MPI_Comm_free(&reversed);
  mdsm::free_collective(data);
}

TEST_CASE("mpi_ext: misuse is reported the MPI way", "[mpi][mpi_ext][misuse][np2+]") {
  const int me = world_rank();
  {
    returning_comm rc;
    // Not initialized.
    int x = 0;
    const int code = MDSM_Send(&x, 1, MPI_INT, 0, 0, rc.comm, MDSM_NONE);
    REQUIRE(code != MPI_SUCCESS);
    REQUIRE(error_text(code).find("not initialized") != std::string::npos);
  }
  session s;
  returning_comm rc;
  int x = 1;
  // An invalid annotation.
  int code = c_mdsm_send_with_annotation(&x, 1, MPI_INT, 0, 0, rc.comm, 9);
  REQUIRE(code != MPI_SUCCESS);
  REQUIRE(error_text(code).find("annotation") != std::string::npos);
  REQUIRE(std::string(mdsm_last_error()).find("annotation") != std::string::npos);
  // A buffer that straddles the end of the coherent region (it begins inside it).
  {
    int* p = mdsm::alloc_collective_array<int>(16);
    MPI_Datatype huge;
    MPI_Type_contiguous(1 << 20, MPI_BYTE, &huge);
    MPI_Type_commit(&huge);
    code = MDSM_Send(p, 1 << 20, huge, (me + 1) % mdsm::size(), 0, rc.comm, MDSM_RELEASE);  // 1 TiB from p
    REQUIRE(code != MPI_SUCCESS);
    REQUIRE(error_text(code).find("coherent region") != std::string::npos);
    MPI_Type_free(&huge);
    mdsm::free_collective(p);
  }
  // A plain MPI message received by MDSM_Recv: one at least a header long is not an MDSM message;
  // a shorter one cannot be told from a headerless NONE message (docs/MPI.md) and is its data,
  // as a small NONE message is to a plain MPI_Recv.
  if (me == 0) {
    std::vector<int> plain(16, 7);  // 64 bytes
    MPI_Send(plain.data(), 16, MPI_INT, 1, 55, rc.comm);
    MPI_Send(&x, 1, MPI_INT, 1, 54, rc.comm);
    const int z = 42;
    REQUIRE(MDSM_Send(&z, 1, MPI_INT, 1, 53, rc.comm, MDSM_NONE) == MPI_SUCCESS);
  } else if (me == 1) {
    std::vector<int> y(16, 0);
    code = MDSM_Recv(y.data(), 16, MPI_INT, 0, 55, rc.comm, MPI_STATUS_IGNORE);
    REQUIRE(code != MPI_SUCCESS);
    REQUIRE(error_text(code).find("not sent by an MDSM_ call") != std::string::npos);
    MPI_Status st;
    REQUIRE(MDSM_Recv(y.data(), 16, MPI_INT, 0, 54, rc.comm, &st) == MPI_SUCCESS);
    int count = -1;
    MPI_Get_count(&st, MPI_INT, &count);
    REQUIRE(count == 1);
    REQUIRE(y[0] == x);
    REQUIRE(MPI_Recv(y.data(), 16, MPI_INT, 0, 53, rc.comm, &st) == MPI_SUCCESS);
    MPI_Get_count(&st, MPI_INT, &count);
    REQUIRE(count == 1);
    REQUIRE(y[0] == 42);
  }
  // Truncation, both paths, as MPI reports it.
  if (me == 0) {
    std::vector<int> big(20000, 3);
    REQUIRE(MDSM_Send(big.data(), 8, MPI_INT, 1, 56, rc.comm, MDSM_RELEASE) == MPI_SUCCESS);
    REQUIRE(MDSM_Send(big.data(), 20000, MPI_INT, 1, 57, rc.comm, MDSM_RELEASE) == MPI_SUCCESS);
  } else if (me == 1) {
    std::vector<int> small(10000, -1);
    MPI_Status st;
    code = MDSM_Recv(small.data(), 4, MPI_INT, 0, 56, rc.comm, &st);
    REQUIRE(error_class(code) == MPI_ERR_TRUNCATE);
    code = MDSM_Recv(small.data(), 10000, MPI_INT, 0, 57, rc.comm, &st);
    REQUIRE(error_class(code) == MPI_ERR_TRUNCATE);
  }
  // MPI_PROC_NULL.
  MPI_Status st;
  REQUIRE(MDSM_Send(&x, 1, MPI_INT, MPI_PROC_NULL, 0, rc.comm, MDSM_RELEASE) == MPI_SUCCESS);
  REQUIRE(MDSM_Recv(&x, 1, MPI_INT, MPI_PROC_NULL, 0, rc.comm, &st) == MPI_SUCCESS);
  REQUIRE(st.MPI_SOURCE == MPI_PROC_NULL);
  world_barrier();
}
