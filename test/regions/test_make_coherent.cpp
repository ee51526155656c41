// make_coherent: a program's globals join the coherent region (include/mdsm/mdsm.hpp). Globals of
// a position-independent executable lie at one address in every rank only without address space
// randomization, so test/meson.build runs this program under `mdsmrun --no-aslr`, at 1-4 ranks;
// one case passes rank-dependent addresses on purpose.
#include "support/session.hpp"

#include <mdsm/mdsm.h>
#include <mdsm/mdsm_mpi.h>
#include <mdsm/noncoherent.hpp>

#include <sys/mman.h>

#include <cstdlib>
#include <cstring>
#include <string>

using namespace mdsm_test;

namespace {

constexpr std::size_t k_page = 4096;

// The shape shared-memory programs give their globals: one object, page aligned, so its size is
// whole pages too (three here: the table alone is two).
struct alignas(k_page) shared_globals {
  int n;
  char name[32];
  double table[1024];
  long counter;
  long slots[64];
};
static_assert(sizeof(shared_globals) == 3 * k_page);

struct alignas(k_page) one_page {
  long words[k_page / sizeof(long)];
};

shared_globals g;        // in .bss, like a C program's globals
one_page g_kept;         // registered in two sessions one after the other
one_page g_limits[3];    // for the misuse cases
one_page g_mismatch[2];  // ranks pass different pages of it
one_page g_mpi;          // buffers of annotated MPI calls
one_page g_setup[2];     // set up by rank 0 before the others read it

}  // namespace

TEST_CASE("make_coherent: globals rank 0 set before the call are what every rank reads; writes reach every rank",
          "[make_coherent][np1]") {
  session s;
  const int me = world_rank(), n = world_size();
  // What every rank has there before the call: only rank 0's bytes count.
  g.n = me == 0 ? 42 : -1;
  std::strcpy(g.name, me == 0 ? "main process" : "worker");
  for (int i = 0; i < 1024; ++i) g.table[i] = me == 0 ? 0.5 * i : -1.0;
  g.counter = me == 0 ? 0 : 99;
  for (long& slot : g.slots) slot = -1;

  mdsm::make_coherent(g);
  CHECK(mdsm::is_coherent(&g.n));
  CHECK(mdsm::is_coherent(&g.slots[63]));
  CHECK(mdsm_is_coherent(&g.table[700]) == 1);
  CHECK(g.n == 42);
  CHECK(std::string(g.name) == "main process");
  int wrong = 0;
  for (int i = 0; i < 1024; ++i) wrong += g.table[i] == 0.5 * i ? 0 : 1;
  CHECK(wrong == 0);
  CHECK(g.counter == 0);

  // Each rank writes its slot; a barrier makes every slot visible everywhere (several writers of
  // one page).
  mdsm::barrier bar;
  bar.arrive_and_wait();
  g.slots[me] = 1000 + me;
  bar.arrive_and_wait();
  for (int r = 0; r < n; ++r) CHECK(g.slots[r] == 1000 + r);

  // A counter in a global under an mdsm mutex, as a threaded program keeps one.
  mdsm::mutex m;
  for (int k = 0; k < 50; ++k) {
    std::lock_guard lk(m);
    ++g.counter;
  }
  bar.arrive_and_wait();
  CHECK(g.counter == 50L * n);

  // A collection drops the copies of every rank but the home (rank 0); they fetch again.
  mdsm::gc();
  CHECK(g.counter == 50L * n);
  CHECK(g.n == 42);
  g.slots[me] = 2000 + me;
  bar.arrive_and_wait();
  for (int r = 0; r < n; ++r) CHECK(g.slots[r] == 2000 + r);
  // One rank alone has nothing to keep coherent: its globals stay plain memory.
  if (n == 1) CHECK(stat("write_faults") == 0);
  bar.arrive_and_wait();
}

TEST_CASE("make_coherent: rank 0 setting up registered globals before the others read them pays no fault",
          "[make_coherent][np1]") {
  // No other rank has a copy of a registered range until it fetches one from rank 0, so rank
  // 0's writes before that are private: no fault, twin or notice (COHERENCE.md §3).
  session s;
  const int me = world_rank(), n = world_size();
  mdsm::make_coherent(g_setup, sizeof g_setup);
  mdsm::barrier bar;
  if (me == 0) {
    const auto faults = stat("write_faults"), twins = stat("twins_created");
    for (int round = 1; round <= 3; ++round) {
      for (one_page& p : g_setup)
        for (std::size_t i = 0; i < std::size(p.words); ++i) p.words[i] = round * 10000 + static_cast<long>(i);
      bar.arrive_and_wait();  // an interval closes; nobody reads yet
    }
    CHECK(stat("write_faults") == faults);
    CHECK(stat("twins_created") == twins);
  } else {
    for (int round = 1; round <= 3; ++round) bar.arrive_and_wait();
  }
  int wrong = 0;
  for (const one_page& p : g_setup)
    for (std::size_t i = 0; i < std::size(p.words); ++i) wrong += p.words[i] == 30000 + static_cast<long>(i) ? 0 : 1;
  CHECK(wrong == 0);
  bar.arrive_and_wait();
  if (me == n - 1) g_setup[1].words[5] = -5;  // read by every rank now: recorded as usual
  bar.arrive_and_wait();
  CHECK(g_setup[1].words[5] == -5);
  CHECK(g_setup[0].words[5] == 30005);
  bar.arrive_and_wait();
}

TEST_CASE("make_coherent: after finalize each rank keeps its copy, and a new session registers the range again",
          "[make_coherent][np1]") {
  const int me = world_rank(), n = world_size();
  {
    session s;
    g_kept.words[0] = me == 0 ? 7 : 0;
    mdsm::make_coherent(g_kept);
    CHECK(g_kept.words[0] == 7);
    mdsm::barrier bar;
    bar.arrive_and_wait();
    if (me == n - 1) g_kept.words[1] = 11;
    bar.arrive_and_wait();
    CHECK(g_kept.words[1] == 11);
    bar.arrive_and_wait();
  }
  // Ordinary memory again, holding what this rank's copy held.
  CHECK(g_kept.words[0] == 7);
  CHECK(g_kept.words[1] == 11);
  g_kept.words[2] = 100 + me;  // private: no other rank sees it
  CHECK(g_kept.words[2] == 100 + me);
  {
    session s;
    mdsm::make_coherent(g_kept);
    CHECK(g_kept.words[2] == 100);  // rank 0's
    CHECK(g_kept.words[0] == 7);
    mdsm::barrier bar;
    bar.arrive_and_wait();
  }
}

TEST_CASE("make_coherent: misuse is a clear error on every rank, and the job goes on", "[make_coherent][np1]") {
  session s;
  auto* base = reinterpret_cast<std::byte*>(&g_limits[0]);
  std::string e;

  e = error_of(MDSM_ERR_INVALID_ARGUMENT, [&] { mdsm::make_coherent(base + 8, k_page); });
  CHECK(contains(e, "unit boundary"));
  e = error_of(MDSM_ERR_INVALID_ARGUMENT, [&] { mdsm::make_coherent(base, 100); });
  CHECK(contains(e, "unit boundary"));
  e = error_of(MDSM_ERR_INVALID_ARGUMENT, [&] { mdsm::make_coherent(base, 0); });
  CHECK(contains(e, "empty range"));

  // mdsm's own regions.
  auto* coherent = static_cast<std::byte*>(mdsm::alloc_collective(2 * k_page));
  auto* page_in = reinterpret_cast<std::byte*>((reinterpret_cast<std::uintptr_t>(coherent) + k_page - 1) & ~(k_page - 1));
  e = error_of(MDSM_ERR_INVALID_ARGUMENT, [&] { mdsm::make_coherent(page_in, k_page); });
  CHECK(contains(e, "overlaps the coherent region"));
  mdsm::free_collective(coherent);
  void* nc = mdsm::nc_alloc_collective(2 * k_page);
  auto* nc_page = reinterpret_cast<std::byte*>((reinterpret_cast<std::uintptr_t>(nc) + k_page - 1) & ~(k_page - 1));
  e = error_of(MDSM_ERR_INVALID_ARGUMENT, [&] { mdsm::make_coherent(nc_page, k_page); });
  CHECK(contains(e, "non-coherent region"));
  mdsm::nc_free_collective(nc);

  // Memory this process does not have (the same address on every rank: mmap's choice may differ,
  // so rank 0's is used everywhere: it is unmapped on every rank that checks it, or taken by
  // something else there, in which case the call must not succeed either).
  void* gone = mmap(nullptr, 4 * k_page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  REQUIRE(gone != MAP_FAILED);
  munmap(gone, 4 * k_page);
  auto gone_addr = reinterpret_cast<std::uintptr_t>(gone);
  MPI_Bcast(&gone_addr, 1, MPI_UINT64_T, 0, MPI_COMM_WORLD);
  try {
    mdsm::make_coherent(reinterpret_cast<void*>(gone_addr), k_page);
    FAIL_CHECK("make_coherent accepted memory the process does not have");
  } catch (const mdsm::error& err) {
    CHECK((err.code() == MDSM_ERR_INVALID_ARGUMENT || err.code() == MDSM_ERR_MISMATCH));
  }

  // A registered range: not again, not in part, and never freed.
  g_limits[0].words[0] = 5;
  mdsm::make_coherent(&g_limits[0], 2 * k_page);
  e = error_of(MDSM_ERR_INVALID_ARGUMENT, [&] { mdsm::make_coherent(&g_limits[1], 2 * k_page); });
  CHECK(contains(e, "registered before"));
  e = error_of(MDSM_ERR_INVALID_ARGUMENT, [&] { mdsm::free(&g_limits[0]); });
  CHECK(contains(e, "make_coherent"));
  e = error_of(MDSM_ERR_INVALID_ARGUMENT, [&] { mdsm::free_collective(&g_limits[0]); });
  CHECK(contains(e, "make_coherent"));

  // The C API: a status and the message.
  CHECK(mdsm_make_coherent(base + 1, k_page) == MDSM_ERR_INVALID_ARGUMENT);
  CHECK(contains(mdsm_last_error(), "unit boundary"));

  // The job goes on: the range registered above works, and so does another one.
  CHECK(g_limits[0].words[0] == 5);
  g_limits[2].words[3] = world_rank() == 0 ? 33 : 0;
  mdsm::make_coherent(g_limits[2]);
  CHECK(g_limits[2].words[3] == 33);
  mdsm::barrier bar;
  bar.arrive_and_wait();
}

TEST_CASE("make_coherent: more than MDSM_MAKE_COHERENT_MAX is MDSM_ERR_OUT_OF_MEMORY", "[make_coherent][np1]") {
  setenv("MDSM_MAKE_COHERENT_MAX", "8192", 1);
  {
    session s;
    const std::string e = error_of(MDSM_ERR_OUT_OF_MEMORY, [&] { mdsm::make_coherent(g); });
    CHECK(contains(e, "MDSM_MAKE_COHERENT_MAX"));
  }
  unsetenv("MDSM_MAKE_COHERENT_MAX");
}

TEST_CASE("make_coherent: ranks passing different addresses get MDSM_ERR_MISMATCH, naming the cause",
          "[make_coherent][np2+]") {
  session s;
  // What a position-independent program's globals look like with address randomization on.
  const std::string e =
      error_of(MDSM_ERR_MISMATCH, [&] { mdsm::make_coherent(&g_mismatch[world_rank() == 0 ? 0 : 1], k_page); });
  CHECK(contains(e, "-no-pie"));
  CHECK(contains(e, "--no-aslr"));
  // Nothing was registered: the same call with one address works.
  g_mismatch[0].words[0] = world_rank() == 0 ? 3 : 4;
  mdsm::make_coherent(g_mismatch[0]);
  CHECK(g_mismatch[0].words[0] == 3);
  mdsm::barrier bar;
  bar.arrive_and_wait();
}

TEST_CASE("make_coherent: MPI buffers in a registered range are made safe; one past its end is refused",
          "[make_coherent][np2+]") {
  session s;
  const int me = world_rank();
  if (me == 0)
    for (int i = 0; i < 8; ++i) g_mpi.words[i] = 10 + i;
  mdsm::make_coherent(g_mpi);
  if (me == 0) {
    // A send from the range: a RELEASE, so rank 1 also sees the write that is not in the message.
    g_mpi.words[8] = 99;
    g_mpi.words[300] = 77;
    REQUIRE(MDSM_Send(&g_mpi.words[0], 9, MPI_LONG, 1, 5, MPI_COMM_WORLD, MDSM_RELEASE) == MPI_SUCCESS);
    // A receive into the range: MPI's writes are ordinary writes with write notices.
    REQUIRE(MDSM_Recv(&g_mpi.words[100], 4, MPI_LONG, 1, 6, MPI_COMM_WORLD, MPI_STATUS_IGNORE) == MPI_SUCCESS);
    for (int i = 0; i < 4; ++i) CHECK(g_mpi.words[100 + i] == 500 + i);
  } else if (me == 1) {
    long got[9] = {};
    REQUIRE(MDSM_Recv(got, 9, MPI_LONG, 0, 5, MPI_COMM_WORLD, MPI_STATUS_IGNORE) == MPI_SUCCESS);
    for (int i = 0; i < 8; ++i) CHECK(got[i] == 10 + i);
    CHECK(got[8] == 99);
    CHECK(g_mpi.words[300] == 77);
    const long mine[4] = {500, 501, 502, 503};
    REQUIRE(MDSM_Send(mine, 4, MPI_LONG, 0, 6, MPI_COMM_WORLD, MDSM_RELEASE) == MPI_SUCCESS);
  }
  // A buffer from the range's last word on is partly inside: refused, with MPI_ERRORS_RETURN.
  MPI_Comm comm;
  MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
  if (me == 0) {
    CHECK(MDSM_Send(&g_mpi.words[511], 2, MPI_LONG, 1, 7, comm, MDSM_RELEASE) != MPI_SUCCESS);
    CHECK(contains(mdsm_last_error(), "partly inside the coherent region"));
  }
  MPI_Comm_free(&comm);
  mdsm::barrier bar;
  bar.arrive_and_wait();
  if (me == 1) CHECK(g_mpi.words[101] == 501);
}
