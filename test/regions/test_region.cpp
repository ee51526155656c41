// The coherent region: bad input gives clear errors, addresses mean the same object everywhere,
// consistency metadata stays bounded in long runs, and faults that are not mdsm's still reach
// the program's own handler. (Accesses to unallocated coherent memory end the process, so they
// are tested by test/regions/fault_helper.cpp under a script.)
#include "support/mailbox.hpp"

#include "common/sanitizers.hpp"

#include <mdsm/mdsm.h>

#include <algorithm>
#include <atomic>
#include <csetjmp>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <sys/mman.h>
#include <unistd.h>
#include <vector>

#ifndef MAP_FIXED_NOREPLACE
#define MAP_FIXED_NOREPLACE 0x100000
#endif

using mdsm::annotation;
using namespace mdsm_test;

namespace {

constexpr std::size_t k_page = 4096;
constexpr int k_words_per_page = static_cast<int>(k_page / sizeof(int));


long long world_min(long long v) {
  long long out = 0;
  MPI_Allreduce(&v, &out, 1, MPI_LONG_LONG, MPI_MIN, MPI_COMM_WORLD);
  return out;
}
long long world_max(long long v) {
  long long out = 0;
  MPI_Allreduce(&v, &out, 1, MPI_LONG_LONG, MPI_MAX, MPI_COMM_WORLD);
  return out;
}

}  // namespace

TEST_CASE("region: an allocation larger than what is left is MDSM_ERR_OUT_OF_MEMORY and loses nothing",
          "[mpi][region][np1][np2+]") {
  mdsm::options opts;
  opts.coherent_size = std::size_t{8} << 20;  // a pool of 6 MiB (three quarters), shared by the ranks
  session s(opts);
  const int me = mdsm::rank();
  // More than the whole region: no arena, grown or not, can hold it.
  auto msg = error_of(MDSM_ERR_OUT_OF_MEMORY, [&] { mdsm::alloc(std::size_t{9} << 20); });
  CHECK(contains(msg, "MDSM_COHERENT_SIZE"));  // says what to do
  CHECK(contains(msg, "pool"));
  world_barrier();
  if (me == 0) {
    // Rank 0 takes most of the pool; an allocation that needs more than what is left fails, and
    // loses nothing.
    constexpr std::size_t most = std::size_t{5} << 20, ints = most / sizeof(int);
    auto* big = mdsm::alloc_array<int>(ints);
    for (std::size_t i = 0; i < ints; i += 1024) big[i] = static_cast<int>(i);
    error_of(MDSM_ERR_OUT_OF_MEMORY, [&] { mdsm::alloc(std::size_t{2} << 20); });
    void* ptr = nullptr;
    CHECK(mdsm_alloc(std::size_t{2} << 20, &ptr) == MDSM_ERR_OUT_OF_MEMORY);
    CHECK(ptr == nullptr);
    CHECK(std::string(mdsm_last_error()).find("arena") != std::string::npos);
    for (std::size_t i = 0; i < ints; i += 1024) REQUIRE(big[i] == static_cast<int>(i));
    // What is left can still be allocated.
    void* rest = mdsm::alloc(std::size_t{64} << 10);
    CHECK(mdsm::is_coherent(rest));
    mdsm::free(rest);
    mdsm::free(big);
  }
  world_barrier();
  // The collective arena fails alike, on every rank, and works after it.
  error_of(MDSM_ERR_OUT_OF_MEMORY, [&] { mdsm::alloc_collective(std::size_t{9} << 20); });
  int* c = mdsm::alloc_collective_array<int>(16);
  CHECK(mdsm::is_coherent(c));
  mdsm::free_collective(c);
  world_barrier();
}

TEST_CASE("region: one rank allocates 75% of the region; every rank reads, writes and frees it",
          "[mpi][region][np1][np2+]") {
  // The SPLASH pattern: the main process allocates everything. Its arena grows into the pool
  // (three quarters of the region), whatever the number of ranks.
  mdsm::options opts;
  opts.coherent_size = std::size_t{64} << 20;
  session s(opts);
  const int me = mdsm::rank(), n = mdsm::size();
  constexpr std::size_t big_ints = (std::size_t{40} << 20) / sizeof(int);
  constexpr int smalls = 1024;                             // 1024 x 8 KiB: 40 + 8 = 48 MiB = 75%
  constexpr std::size_t small_ints = 8192 / sizeof(int);
  auto** table = mdsm::alloc_collective_array<int*>(smalls + 1);
  mdsm::barrier b;
  if (me == 0) {
    auto* big = mdsm::alloc_array<int>(big_ints);
    for (std::size_t i = 0; i < big_ints; i += 1024) big[i] = static_cast<int>(i);
    table[0] = big;
    for (int k = 0; k < smalls; ++k) {
      auto* p = mdsm::alloc_array<int>(small_ints);
      p[0] = k;
      p[small_ints - 1] = -k;
      table[k + 1] = p;
    }
  }
  b.arrive_and_wait();
  int* big = table[0];
  int bad = 0;
  for (std::size_t i = 0; i < big_ints; i += 1024 * 37) bad += big[i] != static_cast<int>(i);
  for (int k = 0; k < smalls; k += 7) bad += table[k + 1][0] != k || table[k + 1][small_ints - 1] != -k;
  CHECK(bad == 0);
  // Every rank writes its slice of the big block (several writers in rank 0's pool chunks).
  const std::size_t slice = big_ints / static_cast<std::size_t>(n);
  for (std::size_t i = static_cast<std::size_t>(me) * slice + 1; i < (static_cast<std::size_t>(me) + 1) * slice; i += 512)
    big[i] = me + 1;
  b.arrive_and_wait();
  bad = 0;
  for (int r = 0; r < n; ++r)
    for (std::size_t i = static_cast<std::size_t>(r) * slice + 1; i < (static_cast<std::size_t>(r) + 1) * slice; i += 512 * 13)
      bad += big[i] != r + 1;
  CHECK(bad == 0);
  b.arrive_and_wait();
  // The last rank frees every other small block (rank 0's: the free goes to the chunk's owner).
  if (me == n - 1)
    for (int k = 1; k < smalls; k += 2) mdsm::free(table[k + 1]);
  b.arrive_and_wait();
  if (me == 0) {
    // The pool is full: a large block does not fit, the freed holes take small ones.
    error_of(MDSM_ERR_OUT_OF_MEMORY, [&] { mdsm::alloc(std::size_t{8} << 20); });
    for (int k = 1; k < smalls; k += 2) {
      auto* p = mdsm::alloc_array<int>(small_ints);
      CHECK(p == table[k + 1]);  // first fit: the same hole
      p[0] = 2 * k;
      table[k + 1] = p;
    }
  }
  b.arrive_and_wait();
  bad = 0;
  for (int k = 0; k < smalls; ++k) bad += table[k + 1][0] != (k % 2 == 1 ? 2 * k : k);
  CHECK(bad == 0);
  // The other ranks' own allocations still come from their arenas.
  auto* mine = mdsm::alloc_array<int>(1024);
  mine[0] = me;
  CHECK(mine[0] == me);
  mdsm::free(mine);
  b.arrive_and_wait();
  if (me == 0) {
    for (int k = 0; k <= smalls; ++k) mdsm::free(table[k]);
  }
  b.arrive_and_wait();
  mdsm::free_collective(table);
}

TEST_CASE("region: every rank grows into the pool at once; blocks are read, freed and reused everywhere",
          "[mpi][region][np2+]") {
  mdsm::options opts;
  opts.coherent_size = std::size_t{32} << 20;  // fixed arenas 4 MiB / ranks, pool 24 MiB
  session s(opts);
  const int me = mdsm::rank(), n = mdsm::size();
  constexpr int blocks = 64;
  constexpr std::size_t block_ints = (std::size_t{64} << 10) / sizeof(int);  // 64 x 64 KiB = 4 MiB per rank
  auto** table = mdsm::alloc_collective_array<int*>(static_cast<std::size_t>(n) * blocks);
  // And a collective allocation that does not fit in the collective arena (4 MiB): it claims
  // too, while the ranks' own claims reach rank 0.
  constexpr std::size_t shared_ints = (std::size_t{6} << 20) / sizeof(int);
  mdsm::barrier b;
  for (int k = 0; k < blocks; ++k) {
    auto* p = mdsm::alloc_array<int>(block_ints);
    p[0] = me * 1000 + k;
    p[block_ints - 1] = -(me * 1000 + k);
    table[me * blocks + k] = p;
  }
  int* shared = mdsm::alloc_collective_array<int>(shared_ints);
  shared[static_cast<std::size_t>(me) * 4096 + 7] = me + 100;
  b.arrive_and_wait();
  int bad = 0;
  for (int r = 0; r < n; ++r) {
    for (int k = 0; k < blocks; ++k) {
      const int* p = table[r * blocks + k];
      bad += p[0] != r * 1000 + k || p[block_ints - 1] != -(r * 1000 + k);
    }
    bad += shared[static_cast<std::size_t>(r) * 4096 + 7] != r + 100;
  }
  CHECK(bad == 0);
  b.arrive_and_wait();
  // Each rank frees the next rank's even blocks (its owner's, through the chunk directory) and
  // then allocates as many again; the owner gets the holes back.
  const int next = (me + 1) % n;
  for (int k = 0; k < blocks; k += 2) mdsm::free(table[next * blocks + k]);
  b.arrive_and_wait();
  for (int k = 0; k < blocks; k += 2) {
    auto* p = mdsm::alloc_array<int>(block_ints);
    p[1] = me;
    table[me * blocks + k] = p;
  }
  b.arrive_and_wait();
  bad = 0;
  for (int r = 0; r < n; ++r)
    for (int k = 0; k < blocks; ++k) bad += k % 2 == 0 ? table[r * blocks + k][1] != r : table[r * blocks + k][0] != r * 1000 + k;
  CHECK(bad == 0);
  b.arrive_and_wait();
  for (int k = 0; k < blocks; ++k) mdsm::free(table[me * blocks + k]);
  mdsm::free_collective(shared);
  b.arrive_and_wait();
  mdsm::free_collective(table);
}

TEST_CASE("region: two threads per rank grow the arena at once while rank 0 grants", "[mpi][region][np2+]") {
  // Claims from several threads of a rank in flight together, and rank 0 claiming for itself
  // while its handlers grant the others'.
  mdsm::options opts;
  opts.coherent_size = std::size_t{32} << 20;
  session s(opts);
  const int me = mdsm::rank(), n = mdsm::size();
  constexpr int threads = 2, blocks = 48;
  constexpr std::size_t block_ints = (std::size_t{32} << 10) / sizeof(int);  // 2 x 48 x 32 KiB = 3 MiB per rank
  auto** table = mdsm::alloc_collective_array<int*>(static_cast<std::size_t>(n) * threads * blocks);
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t)
    workers.emplace_back([&, t] {
      for (int k = 0; k < blocks; ++k) {
        auto* p = mdsm::alloc_array<int>(block_ints);
        const int v = (me * threads + t) * 1000 + k;
        p[0] = v;
        p[block_ints - 1] = -v;
        table[(me * threads + t) * blocks + k] = p;
      }
    });
  for (auto& w : workers) w.join();
  mdsm::barrier b;
  b.arrive_and_wait();
  int bad = 0;
  std::vector<int*> seen;
  for (int i = 0; i < n * threads * blocks; ++i) {
    const int v = (i / blocks) * 1000 + i % blocks;
    bad += table[i][0] != v || table[i][block_ints - 1] != -v;
    seen.push_back(table[i]);
  }
  CHECK(bad == 0);
  std::sort(seen.begin(), seen.end());
  CHECK(std::adjacent_find(seen.begin(), seen.end()) == seen.end());  // every block its own
  b.arrive_and_wait();
  for (int i = me * threads * blocks; i < (me + 1) * threads * blocks; ++i) mdsm::free(table[i]);
  b.arrive_and_wait();
  mdsm::free_collective(table);
}

TEST_CASE("region: freeing a pointer mdsm did not allocate is a clear error", "[mpi][region][np2+]") {
  session s;
  int local = 0;
  auto msg = error_of(MDSM_ERR_NOT_IN_REGION, [&] { mdsm::free(&local); });
  CHECK(contains(msg, "not in the coherent region"));
  std::vector<int> heap(10);
  error_of(MDSM_ERR_NOT_IN_REGION, [&] { mdsm::free(heap.data()); });
  CHECK(mdsm_free(&local) == MDSM_ERR_NOT_IN_REGION);
  auto* p = static_cast<char*>(mdsm::alloc(256));
  msg = error_of(MDSM_ERR_INVALID_ARGUMENT, [&] { mdsm::free(p + 16); });  // inside an object
  CHECK(contains(msg, "not the start of a live allocation"));
  mdsm::free(p);
  error_of(MDSM_ERR_INVALID_ARGUMENT, [&] { mdsm::free(p); });  // twice
  auto* c = static_cast<char*>(mdsm::alloc_collective(64));
  error_of(MDSM_ERR_INVALID_ARGUMENT, [&] { mdsm::free(c); });  // needs free_collective
  mdsm::free_collective(c);
  world_barrier();
}

TEST_CASE("region: a region beyond the address space is refused with a clear error", "[mpi][region][np2+]") {
  for (std::size_t size : {std::size_t{1} << 62, std::size_t{1} << 47}) {
    mdsm::options opts;
    opts.coherent_size = size;
    auto msg = error_of(MDSM_ERR_INVALID_ARGUMENT, [&] { mdsm::init(MPI_COMM_WORLD, opts); });
    CHECK(contains(msg, "beyond the address space"));
    CHECK_FALSE(mdsm::initialized());
  }
  mdsm_options copts;
  mdsm_options_init(&copts);
  copts.coherent_size = std::size_t{1} << 62;
  CHECK(mdsm_init_comm(MPI_COMM_WORLD, &copts) == MDSM_ERR_INVALID_ARGUMENT);
  // A failed init leaves nothing behind: the next one works.
  session s;
  CHECK(mdsm::is_coherent(mdsm::alloc(8)));
  world_barrier();
}

TEST_CASE("region: an address collision fails a strict placement and moves a non-strict one",
          "[mpi][region][np2+]") {
  const std::size_t size = std::size_t{16} << 20;
  const int me = world_rank(), last = world_size() - 1;
  // The last rank occupies a range; the other ranks check it is free for them (so only one
  // rank collides).
  unsigned long long at = 0;
  void* mine = nullptr;
  if (me == last) {
    mine = mmap(nullptr, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    REQUIRE(mine != MAP_FAILED);
    at = reinterpret_cast<unsigned long long>(mine);
  }
  MPI_Bcast(&at, 1, MPI_UNSIGNED_LONG_LONG, last, MPI_COMM_WORLD);
  int free_here = 1;
  if (me != last) {
    void* probe = mmap(reinterpret_cast<void*>(at), size, PROT_NONE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE, -1, 0);
    free_here = probe == reinterpret_cast<void*>(at) ? 1 : 0;
    if (probe != MAP_FAILED) munmap(probe, size);
  }
  if (world_min(free_here) == 0) {  // the range is taken elsewhere too; nothing to learn
    if (mine) munmap(mine, size);
    return;
  }
  mdsm::options opts;
  opts.coherent_size = size;
  opts.coherent_address = static_cast<std::uintptr_t>(at);
  opts.strict_address = true;
  auto msg = error_of(MDSM_ERR_REGION_MAP, [&] { mdsm::init(MPI_COMM_WORLD, opts); });
  CHECK(contains(msg, "something else is mapped there"));
  CHECK(contains(msg, "strict"));
  CHECK_FALSE(mdsm::initialized());
  {
    opts.strict_address = false;
    session s(opts);
    auto* p = static_cast<char*>(mdsm::alloc_collective(64));
    const auto addr = reinterpret_cast<long long>(p);
    CHECK(world_min(addr) == world_max(addr));  // one address, agreed on by every rank
    const auto a = static_cast<unsigned long long>(addr);
    CHECK((a + size <= at || a >= at + size));   // and not in the occupied range
    if (me == 0) p[0] = 1;
    world_barrier();
  }
  if (mine) munmap(mine, size);
}

TEST_CASE("region: a non-collective allocation is unique in the job and readable everywhere after a RELEASE",
          "[mpi][region][np2+]") {
  session s;
  const int me = mdsm::rank(), n = mdsm::size();
  struct object {
    long addr;
    long words;
  };
  std::mutex mu;
  std::vector<object> got;
  std::atomic<int> count{0};
  auto h = mdsm::register_handler("region.pointer", [&](mdsm::message& m) {
    m.accept();
    std::lock_guard lk(mu);
    got.push_back(m.as<object>());
    ++count;
  });
  // Every rank allocates a small object and a three-page object at the same time.
  const long sizes[2] = {5, 3 * 1024 + 7};
  std::vector<object> made;
  for (long words : sizes) {
    auto* p = mdsm::alloc_array<int>(static_cast<std::size_t>(words));
    for (long i = 0; i < words; ++i) p[i] = static_cast<int>(me * 100000 + i);
    made.push_back(object{reinterpret_cast<long>(p), words});
  }
  for (int r = 0; r < n; ++r)
    if (r != me)
      for (const object& o : made) mdsm::send_value(r, h, o, annotation::release);
  mdsm::wait_until([&] { return count.load() == 2 * (n - 1); });
  std::vector<long> all_addrs;
  for (const object& o : made) all_addrs.push_back(o.addr);
  std::lock_guard lk(mu);
  for (const object& o : got) {
    auto* p = reinterpret_cast<int*>(o.addr);
    REQUIRE(mdsm::is_coherent(p));
    const int owner = static_cast<int>((p[0] - p[0] % 100000) / 100000);
    REQUIRE(owner != me);
    for (long i = 0; i < o.words; ++i) REQUIRE(p[i] == owner * 100000 + i);
    all_addrs.push_back(o.addr);
  }
  std::sort(all_addrs.begin(), all_addrs.end());
  CHECK(std::adjacent_find(all_addrs.begin(), all_addrs.end()) == all_addrs.end());
  CHECK(all_addrs.size() == static_cast<std::size_t>(2 * n));
  world_barrier();
}

TEST_CASE("region: consistency metadata plateaus over 300 barrier epochs", "[mpi][region][gc][np2+]") {
  constexpr std::uint64_t threshold = 256 * 1024;
  setenv("MDSM_GC_THRESHOLD", "256K", 1);
  {
    session s;
    const int me = mdsm::rank(), n = mdsm::size();
    const int epochs = 300;
    int* a = mdsm::alloc_collective_array<int>(static_cast<std::size_t>(n) * 1024);
    mdsm::barrier b;
    std::uint64_t first_half = 0, second_half = 0;
    for (int e = 1; e <= epochs; ++e) {
      int* mine = a + me * 1024;
      for (int w = 0; w < 1024; ++w) mine[w] = e * 7 + w;  // the whole page changes
      b.arrive_and_wait();
      const int* next = a + ((me + 1) % n) * 1024;
      REQUIRE(next[e % 1024] == e * 7 + e % 1024);  // fetches the neighbour's diff
      b.arrive_and_wait();
      const std::uint64_t held = stat("metadata_bytes");
      (e <= epochs / 2 ? first_half : second_half) = std::max(e <= epochs / 2 ? first_half : second_half, held);
    }
    const std::uint64_t runs = stat("gc_runs"), peak = stat("metadata_bytes_peak");
    INFO("gc runs " << runs << ", metadata peak " << peak << " bytes, max in the first half " << first_half
                    << ", in the second " << second_half);
    CHECK(runs >= 3);                              // the barrier collected again and again
    CHECK(peak <= threshold + 128 * 1024);         // never far above the threshold
    CHECK(second_half <= first_half + 64 * 1024);  // flat: no growth from one half to the next
    world_barrier();
  }
  unsetenv("MDSM_GC_THRESHOLD");
}

TEST_CASE("region: consistency metadata stays bounded in a program that never calls a barrier",
          "[mpi][region][gc][np2+]") {
  // SOR's hybrid pattern: every rank rewrites its block of rows each iteration and exchanges only
  // boundary rows with its neighbours, synchronizing by RELEASE messages; nothing is global, so
  // only the background collection can free the records, notices and diffs this piles up.
  // (Without it, 600 iterations leave several MB per rank: MDSM_BACKGROUND_GC=0 fails this test.)
  constexpr std::uint64_t threshold = 256 * 1024;
  setenv("MDSM_GC_THRESHOLD", "256K", 1);
  {
    session s;
    mailbox box("metadata.box");
    mdsm::barrier all;  // only at the end
    const int me = mdsm::rank(), n = mdsm::size();
    constexpr int pages = 8, words = pages * k_words_per_page, iterations = 600;
    // Two grids, written in turn: iteration e writes grid e % 2 and reads the neighbours'
    // boundary pages of grid (e - 1) % 2, which they finished before their RELEASE of e - 1 (and
    // do not write again before our RELEASE of e).
    int* grid[2] = {mdsm::alloc_collective_array<int>(static_cast<std::size_t>(n) * words),
                    mdsm::alloc_collective_array<int>(static_cast<std::size_t>(n) * words)};
    world_barrier();
    std::vector<int> neighbours;
    if (me > 0) neighbours.push_back(me - 1);
    if (me + 1 < n) neighbours.push_back(me + 1);
    std::uint64_t first_half = 0, second_half = 0;
    for (int e = 1; e <= iterations; ++e) {
      long seen = 0;
      for (int nb : neighbours) {
        box.wait(e - 1, nb);
        if (e == 1) continue;
        // The neighbour's page next to this rank's block.
        const int* row = grid[(e - 1) % 2] + nb * words + (nb < me ? words - k_words_per_page : 0);
        for (int w = 0; w < k_words_per_page; w += 97) REQUIRE(row[w] == (e - 1) * 1000 + nb * 10 + w % 7);
        seen += row[0];
      }
      int* mine = grid[e % 2] + me * words;
      for (int w = 0; w < words; ++w) mine[w] = e * 1000 + me * 10 + w % 7;  // every page changes
      for (int nb : neighbours) box.send(nb, annotation::release, seen);
      const std::uint64_t held = stat("metadata_bytes");
      (e <= iterations / 2 ? first_half : second_half) = std::max(e <= iterations / 2 ? first_half : second_half, held);
    }
    for (int nb : neighbours) box.wait(iterations, nb);
    const std::uint64_t background = stat("gc_background_runs"), peak = stat("metadata_bytes_peak");
    INFO("background collections " << background << ", metadata peak " << peak << " bytes, max in the first half "
                                   << first_half << ", in the second " << second_half);
    if (n > 1) {
      CHECK(background >= 2);                          // collected again and again, without a barrier
      CHECK(peak <= 4 * threshold);                    // bounded by a small multiple of the threshold
      CHECK(second_half <= first_half + 128 * 1024);   // flat: no growth from one half to the next
    }
    // Every block is still right after the collections (the last iteration's grid); the barrier
    // makes every rank's writes visible to every rank.
    all.arrive_and_wait();
    for (int r = 0; r < n; ++r)
      for (int w = 0; w < words; w += 211) REQUIRE(grid[iterations % 2][r * words + w] == iterations * 1000 + r * 10 + w % 7);
    world_barrier();
  }
  unsetenv("MDSM_GC_THRESHOLD");
}

namespace {
sigjmp_buf g_jump;
std::atomic<int> g_handled{0};
void* volatile g_fault_addr = nullptr;
void user_segv_info(int, siginfo_t* info, void*) {
  g_fault_addr = info->si_addr;
  ++g_handled;
  siglongjmp(g_jump, 1);
}
void user_segv_plain(int) {
  ++g_handled;
  siglongjmp(g_jump, 1);
}

// Installs `sa` for SIGSEGV, runs an mdsm session that touches a protected page outside the
// region, and checks the program's handler saw it; restores the previous handler.
void check_chained(struct sigaction sa) {
  struct sigaction before;
  REQUIRE(sigaction(SIGSEGV, &sa, &before) == 0);
  void* guard = mmap(nullptr, k_page, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  REQUIRE(guard != MAP_FAILED);
  g_handled = 0;
  {
    session s;
    int* x = mdsm::alloc_collective_array<int>(1);
    CHECK_FALSE(mdsm::is_coherent(guard));
    if (sigsetjmp(g_jump, 1) == 0) {
      *static_cast<volatile int*>(guard) = 1;  // not mdsm's: must reach the program's handler
      FAIL_CHECK("the write to a PROT_NONE page did not fault");
    }
    CHECK(g_handled.load() == 1);
    if (sa.sa_flags & SA_SIGINFO) CHECK(g_fault_addr == guard);
    // mdsm still resolves its own faults afterwards.
    if (mdsm::rank() == 0) *x = 5;
    world_barrier();
    if (sigsetjmp(g_jump, 1) == 0) (void)*static_cast<volatile int*>(guard);
    CHECK(g_handled.load() == 2);
  }
  munmap(guard, k_page);
  sigaction(SIGSEGV, &before, nullptr);
}
}  // namespace

TEST_CASE("region: a segfault outside the region reaches the handler installed before init",
          "[mpi][region][fault][np2+]") {
  struct sigaction sa;
  std::memset(&sa, 0, sizeof sa);
  sigemptyset(&sa.sa_mask);
  SECTION("SA_SIGINFO handler") {
    sa.sa_sigaction = user_segv_info;
    sa.sa_flags = SA_SIGINFO;
    check_chained(sa);
  }
  SECTION("plain handler") {
    sa.sa_handler = user_segv_plain;
    check_chained(sa);
  }
}

TEST_CASE("region: memory freed and allocated again at the same address is read correctly elsewhere",
          "[mpi][region][np2+]") {
  session s;
  std::atomic<long> got{0};
  std::atomic<int> count{0};
  auto h = mdsm::register_handler("region.reuse", [&](mdsm::message& m) {
    got = m.as<long>();
    m.accept();
    ++count;
  });
  mailbox done("region.done");
  const std::size_t words = 2 * 1024 + 10;
  int* first = nullptr;
  for (int round = 1; round <= 5; ++round) {
    if (mdsm::rank() == 0) {
      auto* p = mdsm::alloc_array<int>(words);
      if (first == nullptr) first = p;
      CHECK(p == first);  // first fit hands the freed range out again
      // Round 1 writes everything; later rounds only some words, the rest keeps what the freed
      // object held (like malloc, reused memory is not cleared).
      for (std::size_t i = 0; i < words; i += (round == 1 ? 1 : 3)) p[i] = round * 1000 + static_cast<int>(i);
      mdsm::send_value(1, h, reinterpret_cast<long>(p), annotation::release);
      done.wait(round);  // rank 1 has read it
      mdsm::free(p);
    } else if (mdsm::rank() == 1) {
      mdsm::wait_until([&] { return count.load() == round; });
      const auto* p = reinterpret_cast<const int*>(got.load());
      for (std::size_t i = 0; i < words; ++i) {
        int want = 1000 + static_cast<int>(i);
        for (int r = 2; r <= round; ++r)
          if (i % 3 == 0) want = r * 1000 + static_cast<int>(i);
        REQUIRE(p[i] == want);
      }
      done.send(0, annotation::release);
    }
  }
  world_barrier();
}

TEST_CASE("region: a copy dropped by garbage collection is fetched again after the range is allocated anew",
          "[mpi][region][gc][np2+]") {
  // After a collection a non-home rank may hold no copy of a collective unit. If the range is
  // freed and allocated again collectively, that rank may leave alloc_collective and touch the
  // unit before its home has allocated it again: the home must not answer "not allocated".
  session s;
  mailbox box("region.box");
  const int me = mdsm::rank(), n = mdsm::size();
  const std::size_t words = static_cast<std::size_t>(n) * 1024;
  for (int round = 1; round <= 30; ++round) {
    int* a = mdsm::alloc_collective_array<int>(words);
    // The first collective allocation of a session starts at unit 0, and unit u's home is
    // u % n: each rank writes the page it is home of and tells everyone, who do not read, so
    // their copies keep pending notices.
    const int my_page = me;
    a[my_page * 1024] = round;
    for (int r = 0; r < n; ++r)
      if (r != me) box.send(r, annotation::release);
    box.wait(round * (n - 1));
    mdsm::gc();  // drops those copies
    mdsm::free_collective(a);
    int* b = mdsm::alloc_collective_array<int>(words);
    REQUIRE(b == a);
    // Read another rank's page at once (a whole-page fetch from its home, which may still be
    // inside alloc_collective).
    const int other_page = (my_page + 1) % n;
    REQUIRE(b[other_page * 1024] == round);
    world_barrier();
    mdsm::free_collective(b);
  }
  world_barrier();
}

namespace {
long resident_kb() {
  std::FILE* f = std::fopen("/proc/self/status", "r");
  if (f == nullptr) return -1;
  char line[256];
  long kb = -1;
  while (std::fgets(line, sizeof line, f) != nullptr)
    if (std::strncmp(line, "VmRSS:", 6) == 0) kb = std::atol(line + 6);
  std::fclose(f);
  return kb;
}
}  // namespace

TEST_CASE("region: 30 GiB allocated and untouched cost under 50 MB resident; the parts touched work",
          "[mpi][region][np1][np2+]") {
  // Entries of the page table are made for units someone looks at; an allocation only sets a bit
  // per unit (before: ~160 bytes of entry per unit, 1.2 GB per rank for these 30 GiB).
  setenv("MDSM_COHERENT_SIZE", "64G", 1);  // the collective arena (8 GiB) grows into the pool
  session s;
  unsetenv("MDSM_COHERENT_SIZE");
  const int me = mdsm::rank(), n = mdsm::size();
  // The bound: 50 MB, as issue 17 asks. Under ThreadSanitizer the resident size also holds its
  // shadow and trace memory, which grow with whatever the rank's threads touch meanwhile (a CI
  // run at 3 ranks once measured 64 MB here): four times as much is allowed there.
  const long limit_kb = (MDSM_TSAN ? 4 : 1) * 50 * 1024;
  const long before = resident_kb();
  std::vector<int*> blocks;
  for (int i = 0; i < 30; ++i) blocks.push_back(static_cast<int*>(mdsm::alloc_collective(std::size_t{1} << 30)));
  const long grown = resident_kb() - before;
  CHECK(grown < limit_kb);
  // Each rank writes a word in every block (its own page, and the last word of the block), then
  // every rank reads all of them: only those pages cost anything.
  mdsm::barrier b;
  constexpr std::size_t page_ints = 1024, block_ints = (std::size_t{1} << 30) / sizeof(int);
  for (int i = 0; i < 30; ++i) {
    blocks[i][static_cast<std::size_t>(me) * page_ints * 97] = i * 100 + me;
    if (me == n - 1) blocks[i][block_ints - 1] = -i;
  }
  b.arrive_and_wait();
  int bad = 0;
  for (int i = 0; i < 30; ++i) {
    for (int r = 0; r < n; ++r) bad += blocks[i][static_cast<std::size_t>(r) * page_ints * 97] != i * 100 + r;
    bad += blocks[i][block_ints - 1] != -i;
    bad += blocks[i][page_ints * 97 * static_cast<std::size_t>(n) + 5] != 0;  // untouched: zero
  }
  CHECK(bad == 0);
  CHECK(resident_kb() - before < limit_kb);
  b.arrive_and_wait();
  for (int* p : blocks) mdsm::free_collective(p);
  CHECK(resident_kb() - before < limit_kb);
  // Allocated again, the memory reads as zero... except what this rank still holds of the
  // writes above is gone too: a fresh allocation is fresh.
  int* again = static_cast<int*>(mdsm::alloc_collective(std::size_t{1} << 30));
  CHECK(again[5] == 0);
  b.arrive_and_wait();
  mdsm::free_collective(again);
}

TEST_CASE("region: one rank alone takes no faults, makes no twins and no diffs", "[mpi][region][np1]") {
  if (mdsm_test::world_size() != 1) return;
  session s;
  constexpr std::size_t ints = (std::size_t{8} << 20) / sizeof(int);
  int* a = mdsm::alloc_collective_array<int>(ints);
  int* c = mdsm::alloc_array<int>(ints);
  mdsm::barrier b;
  const auto faults = stat("write_faults") + stat("read_faults");
  long sum = 0;
  for (std::size_t i = 0; i < ints; ++i) {
    a[i] = static_cast<int>(i);
    c[i] = a[i] + 1;
  }
  b.arrive_and_wait();
  for (std::size_t i = 0; i < ints; ++i) sum += c[i] - a[i];
  CHECK(sum == static_cast<long>(ints));
  CHECK(stat("write_faults") + stat("read_faults") == faults);
  CHECK(stat("twins_created") == 0);
  CHECK(stat("diffs_created") == 0);
  mdsm::free(c);
  mdsm::free_collective(a);
}
