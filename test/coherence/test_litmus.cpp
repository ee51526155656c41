// The litmus suite: small multi-rank programs that pin down the memory model of the coherent
// region (lazy release consistency driven by annotated messages). Each case states what it
// pins down; all values are asserted.
#include "support/mailbox.hpp"

#include <mdsm/fibers.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

using mdsm::annotation;
using namespace mdsm_test;

namespace {
constexpr int k_words_per_page = 1024;  // 4-byte words in a 4 KiB coherence unit

// `pages` pages of ints in the collective arena, which every rank reads once on construction so
// that it holds a valid read-only copy of each. at(page, word) is that word.
class paged_ints {
 public:
  explicit paged_ints(int pages)
      : base_(mdsm::alloc_collective_array<int>(static_cast<std::size_t>(pages) * k_words_per_page)) {
    for (int p = 0; p < pages; ++p) (void)(*this)(p, 0);
  }
  int& operator()(int page, int word) const { return base_[page * k_words_per_page + word]; }

 private:
  int* base_;
};
}

TEST_CASE("litmus 1: a RELEASE makes the sender's earlier writes visible", "[mpi][litmus][np2+]") {
  session s;
  mailbox box("litmus.box");
  int* a = mdsm::alloc_collective_array<int>(4 * k_words_per_page);
  if (mdsm::rank() == 0) {
    for (int i = 0; i < 4 * k_words_per_page; ++i) a[i] = 3 * i + 1;
    box.send(1, annotation::release);
  } else if (mdsm::rank() == 1) {
    box.wait(1);
    for (int i = 0; i < 4 * k_words_per_page; ++i) REQUIRE(a[i] == 3 * i + 1);
  }
  world_barrier();
}

TEST_CASE("litmus 2: a NONE message carries no writes", "[mpi][litmus][np2+]") {
  session s;
  mailbox box("litmus.box");
  int* x = mdsm::alloc_collective_array<int>(1);
  if (mdsm::rank() == 1) CHECK(*x == 0);  // rank 1 now holds a valid copy
  world_barrier();
  if (mdsm::rank() == 0) {
    *x = 1;
    box.send(1, annotation::none);
    box.wait(1, 1);
    box.send(1, annotation::release);
  } else if (mdsm::rank() == 1) {
    box.wait(1, 0);
    CHECK(*x == 0);  // the NONE did not invalidate the page
    box.send(0, annotation::none);
    box.wait(2, 0);
    CHECK(*x == 1);  // the RELEASE did
  }
  world_barrier();
}

TEST_CASE("litmus 3: a REQUEST carries no writes", "[mpi][litmus][np2+]") {
  session s;
  mailbox box("litmus.box");
  int* x = mdsm::alloc_collective_array<int>(1);
  if (mdsm::rank() == 1) CHECK(*x == 0);
  world_barrier();
  if (mdsm::rank() == 0) {
    *x = 1;
    box.send(1, annotation::request);
    box.wait(1, 1);
    box.send(1, annotation::release_nt);
  } else if (mdsm::rank() == 1) {
    box.wait(1, 0);
    CHECK(*x == 0);
    box.send(0, annotation::none);
    box.wait(2, 0);
    CHECK(*x == 1);
  }
  world_barrier();
}

TEST_CASE("litmus 4: visibility is transitive through a chain of RELEASEs", "[mpi][litmus][np3+]") {
  MDSM_NEED_RANKS(3);
  session s;
  mailbox box("litmus.box");
  const int me = mdsm::rank(), n = mdsm::size();
  int* a = mdsm::alloc_collective_array<int>(static_cast<std::size_t>(n) * k_words_per_page);
  // Rank r writes its own page, then passes a RELEASE to r+1; no rank in the middle reads.
  if (me > 0) box.wait(1, me - 1);
  a[me * k_words_per_page + me] = 100 + me;
  if (me < n - 1) {
    box.send(me + 1, annotation::release);
  } else {
    for (int r = 0; r < n; ++r) CHECK(a[r * k_words_per_page + r] == 100 + r);
  }
  world_barrier();
}

TEST_CASE("litmus 5: transitivity also covers a write the middle rank never saw", "[mpi][litmus][np3+]") {
  MDSM_NEED_RANKS(3);
  session s;
  mailbox box("litmus.box");
  int* a = mdsm::alloc_collective_array<int>(2 * k_words_per_page);
  if (mdsm::rank() == 0) {
    a[0] = 11;  // same page the middle rank writes, other word
    box.send(1, annotation::release);
  } else if (mdsm::rank() == 1) {
    box.wait(1);
    a[1] = 22;
    a[k_words_per_page] = 33;
    box.send(2, annotation::release);
  } else if (mdsm::rank() == 2) {
    box.wait(1);
    CHECK(a[0] == 11);
    CHECK(a[1] == 22);
    CHECK(a[k_words_per_page] == 33);
  }
  world_barrier();
}

namespace {
// Rank 0 writes a, passes a RELEASE to 1; rank 1 writes b and passes a RELEASE_NT to 2, which
// therefore lacks rank 0's interval: it must notice and fetch it.
void release_nt_gap(bool accept_in_handler) {
  session s;
  mailbox box("litmus.box", accept_in_handler);
  int* a = mdsm::alloc_collective_array<int>(2 * k_words_per_page);
  const int me = mdsm::rank();
  if (me == 0) {
    a[5] = 55;
    box.send(1, annotation::release);
  } else if (me == 1) {
    box.wait(1);
    if (!accept_in_handler) box.accept_stored();
    a[k_words_per_page + 6] = 66;
    box.send(2, annotation::release_nt);
  } else if (me == 2) {
    box.wait(1);
    if (!accept_in_handler) box.accept_stored();
    CHECK(stat("interval_fetches") == 1);
    CHECK(a[5] == 55);
    CHECK(a[k_words_per_page + 6] == 66);
  }
  world_barrier();
}
}  // namespace

TEST_CASE("litmus 6: RELEASE_NT omits third-party intervals; the receiver detects the gap and fetches it",
          "[mpi][litmus][np3+]") {
  MDSM_NEED_RANKS(3);
  release_nt_gap(true);
}

TEST_CASE("litmus 7: the same, with the message stored and accepted from the application thread",
          "[mpi][litmus][np3+]") {
  MDSM_NEED_RANKS(3);
  release_nt_gap(false);
}

TEST_CASE("litmus 8: RELEASE_NT with nothing missing needs no fetch", "[mpi][litmus][np2+]") {
  session s;
  mailbox box("litmus.box");
  int* a = mdsm::alloc_collective_array<int>(k_words_per_page);
  if (mdsm::rank() == 0) {
    a[3] = 7;
    box.send(1, annotation::release_nt);
  } else if (mdsm::rank() == 1) {
    box.wait(1);
    CHECK(a[3] == 7);
    CHECK(stat("interval_fetches") == 0);
  }
  world_barrier();
}

TEST_CASE("litmus 9: a RELEASE stored by a manager and forwarded later makes the consumer consistent with "
          "the producer and not with the manager",
          "[mpi][litmus][np3+]") {
  MDSM_NEED_RANKS(3);
  session s;
  const int me = mdsm::rank();
  int* producer_data = mdsm::alloc_collective_array<int>(k_words_per_page);
  int* manager_data = mdsm::alloc_collective_array<int>(k_words_per_page);
  std::mutex mu;
  std::vector<mdsm::stored_message> held;
  std::atomic<int> held_count{0};
  mailbox consumer_box("litmus.consumer");
  // The queue handler: the manager (rank 1) stores, never accepts.
  auto queue = mdsm::register_handler("litmus.queue", [&](mdsm::message& m) {
    std::lock_guard lk(mu);
    held.push_back(m.store());
    ++held_count;
  });
  // The forwarded message reaches the consumer's handler for the same id: make rank 2's copy of
  // that handler accept. Rank 2 receives only forwarded messages on it.
  if (me == 2) CHECK(manager_data[0] == 0);  // consumer holds a valid copy of the manager's page
  world_barrier();
  if (me == 0) {
    producer_data[0] = 5;
    mdsm::send_value(1, queue, 1, annotation::release);
  } else if (me == 1) {
    mdsm::wait_until([&] { return held_count.load() == 1; });
    manager_data[0] = 7;  // the manager's own interval
    std::lock_guard lk(mu);
    held.back().forward(2);
  } else if (me == 2) {
    mdsm::wait_until([&] { return held_count.load() == 1; });
    std::lock_guard lk(mu);
    CHECK(held.back().origin() == 0);
    CHECK(held.back().source() == 1);
    held.back().accept();
    CHECK(producer_data[0] == 5);   // consistent with the producer
    CHECK(manager_data[0] == 0);    // not with the manager
  }
  world_barrier();
  if (me == 1) consumer_box.send(2, annotation::release);
  if (me == 2) {
    consumer_box.wait(1);
    CHECK(manager_data[0] == 7);  // a RELEASE from the manager itself does carry its write
  }
  world_barrier();
  std::lock_guard lk(mu);
  held.clear();
}

TEST_CASE("litmus 10: a forwarded RELEASE tailored for another rank still makes the final receiver consistent",
          "[mpi][litmus][np3+]") {
  MDSM_NEED_RANKS(3);
  session s;
  const int me = mdsm::rank();
  int* a = mdsm::alloc_collective_array<int>(2 * k_words_per_page);
  mailbox box("litmus.box");
  std::atomic<int> relayed{0};
  // Rank 1 accepts the first message itself and forwards the second to rank 2.
  auto relay = mdsm::register_handler("litmus.relay", [&](mdsm::message& m) {
    if (mdsm::rank() == 1 && m.as<long>() == 2) m.forward(2);
    else m.accept();
    ++relayed;
  });
  if (me == 0) {
    a[0] = 1;
    mdsm::send_value(1, relay, 1L, annotation::release);  // rank 1 accepts: it now knows interval 1
    a[k_words_per_page] = 2;
    mdsm::send_value(1, relay, 2L, annotation::release);  // carries only interval 2
  } else if (me == 2) {
    mdsm::wait_until([&] { return relayed.load() == 1; });
    CHECK(a[0] == 1);                   // from the interval the forwarded message did not carry
    CHECK(a[k_words_per_page] == 2);
    CHECK(stat("interval_fetches") == 1);
  }
  world_barrier();
}

TEST_CASE("litmus 11: two writers of one page merge (false sharing)", "[mpi][litmus][np2+]") {
  session s;
  mailbox box("litmus.box");
  const int me = mdsm::rank();
  int* a = mdsm::alloc_collective_array<int>(k_words_per_page);
  if (me < 2) {
    for (int w = me; w < k_words_per_page; w += 2) a[w] = 1000 * (me + 1) + w;
    box.send(1 - me, annotation::release);
    box.wait(1, 1 - me);
    for (int w = 0; w < k_words_per_page; ++w) REQUIRE(a[w] == 1000 * (w % 2 + 1) + w);
  }
  world_barrier();
}

TEST_CASE("litmus 12: every rank writes its own words of one page; all see all", "[mpi][litmus][np3+]") {
  MDSM_NEED_RANKS(3);
  session s;
  mailbox box("litmus.box");
  const int me = mdsm::rank(), n = mdsm::size();
  int* a = mdsm::alloc_collective_array<int>(k_words_per_page);
  for (int w = me; w < k_words_per_page; w += n) a[w] = 7 * w + me;
  for (int r = 0; r < n; ++r)
    if (r != me) box.send(r, annotation::release);
  for (int r = 0; r < n; ++r)
    if (r != me) box.wait(1, r);
  for (int w = 0; w < k_words_per_page; ++w) REQUIRE(a[w] == 7 * w + w % n);
  world_barrier();
}

TEST_CASE("litmus 13: three writers of one page, gathered by one reader", "[mpi][litmus][np3+]") {
  MDSM_NEED_RANKS(3);
  session s;
  mailbox box("litmus.box");
  const int me = mdsm::rank();
  int* a = mdsm::alloc_collective_array<int>(k_words_per_page);
  if (me < 3) {
    for (int w = me; w < k_words_per_page; w += 3) a[w] = -w - 1;
    if (me != 0) box.send(0, annotation::release);
  }
  if (me == 0) {
    box.wait(2);  // one RELEASE from rank 1 and one from rank 2
    for (int w = 0; w < k_words_per_page; ++w) REQUIRE(a[w] == -w - 1);
    CHECK(stat("diff_requests") == 2);  // one request per writer, sent in parallel
  }
  world_barrier();
}

TEST_CASE("litmus 14: a diff requested while the writer keeps writing other words", "[mpi][litmus][np2+]") {
  session s;
  mailbox box("litmus.box");
  std::atomic<bool> stop{false};
  auto stop_h = mdsm::register_handler("litmus.stop", [&](mdsm::message&) { stop = true; });
  int* a = mdsm::alloc_collective_array<int>(k_words_per_page);
  if (mdsm::rank() == 0) {
    a[0] = 42;
    box.send(1, annotation::release);
    // Keep writing another word of the same page while rank 1 fetches the diff; the progress
    // thread write-protects the page to take the diff, so some of these writes fault.
    int i = 0;
    while (!stop.load()) a[1] = ++i;
    a[1] = -1;
    a[2] = 43;
    box.send(1, annotation::release);
  } else if (mdsm::rank() == 1) {
    box.wait(1);
    CHECK(a[0] == 42);
    mdsm::send_value(0, stop_h, 0, annotation::none);
    box.wait(2);
    CHECK(a[0] == 42);
    CHECK(a[1] == -1);
    CHECK(a[2] == 43);
  }
  world_barrier();
}

TEST_CASE("litmus 15: diffs are applied in happened-before order", "[mpi][litmus][np3+]") {
  MDSM_NEED_RANKS(3);
  session s;
  mailbox box("litmus.box");
  const int me = mdsm::rank();
  int* a = mdsm::alloc_collective_array<int>(k_words_per_page);
  if (me == 2) CHECK(a[0] == 0);  // rank 2 holds a copy, so it will apply both diffs itself
  world_barrier();
  if (me == 0) {
    for (int w = 0; w < 64; ++w) a[w] = 1;
    box.send(1, annotation::release);
    box.send(2, annotation::release);
  } else if (me == 1) {
    box.wait(1);
    for (int w = 0; w < 64; w += 2) a[w] = 2;  // overwrites half of rank 0's words
    box.send(2, annotation::release);
  } else if (me == 2) {
    box.wait(2);
    for (int w = 0; w < 64; ++w) REQUIRE(a[w] == (w % 2 == 0 ? 2 : 1));
  }
  world_barrier();
}

TEST_CASE("litmus 16: a rank's own writes survive another writer's diff on the same page", "[mpi][litmus][np2+]") {
  session s;
  mailbox box("litmus.box");
  int* a = mdsm::alloc_collective_array<int>(k_words_per_page);
  const int me = mdsm::rank();
  if (me == 0) {
    a[10] = 10;  // twin made; not yet released
    box.wait(1, 1);
    CHECK(a[20] == 20);  // fetch applies rank 1's diff on top of our unreleased write
    CHECK(a[10] == 10);
    a[11] = 11;
    box.send(1, annotation::release);
  } else if (me == 1) {
    a[20] = 20;
    box.send(0, annotation::release);
    box.wait(1, 0);
    CHECK(a[10] == 10);
    CHECK(a[11] == 11);
    CHECK(a[20] == 20);
  }
  world_barrier();
}

TEST_CASE("litmus 17: a rank with no copy fetches whole pages from their home, a run in one request",
          "[mpi][litmus][np2+]") {
  // Rank 1 has no copy of rank 0's arena. Its first read fetches the 3 pages rank 0 allocated in
  // one copy request (the neighbours have the same home); the home answers "not allocated" for
  // the units after them, which stay without a copy. Rank 0 then allocates 2 more pages (most
  // likely right after the first three: the ones the first reply left out) and rank 1 reads them.
  session s;
  mailbox box("litmus.pointer");
  std::atomic<long> got{0};
  auto h = mdsm::register_handler("litmus.pointer2", [&](mdsm::message& m) {
    got = m.as<long>();
    m.accept();
  });
  if (mdsm::rank() == 0) {
    auto* p = mdsm::alloc_array<int>(3 * k_words_per_page);  // rank 0's own arena: unique address
    for (int i = 0; i < 3 * k_words_per_page; ++i) p[i] = i ^ 0x5a5a;
    mdsm::send_value(1, h, reinterpret_cast<long>(p), annotation::release);
    box.wait(1, 1);  // rank 1 has read them
    auto* q = mdsm::alloc_array<int>(2 * k_words_per_page);
    for (int i = 0; i < 2 * k_words_per_page; ++i) q[i] = i * 7;
    mdsm::send_value(1, h, reinterpret_cast<long>(q), annotation::release);
  } else if (mdsm::rank() == 1) {
    mdsm::wait_until([&] { return got.load() != 0; });
    auto* p = reinterpret_cast<int*>(got.exchange(0));
    CHECK(mdsm::is_coherent(p));
    const auto requests = stat("page_requests");
    for (int i = 0; i < 3 * k_words_per_page; ++i) REQUIRE(p[i] == (i ^ 0x5a5a));
    CHECK(stat("page_requests") - requests == 1);
    box.send(0, annotation::none);
    mdsm::wait_until([&] { return got.load() != 0; });
    auto* q = reinterpret_cast<int*>(got.load());
    for (int i = 0; i < 2 * k_words_per_page; ++i) REQUIRE(q[i] == i * 7);
  }
  world_barrier();
}

TEST_CASE("litmus 18: several intervals without requests are served by one lazy diff", "[mpi][litmus][np2+]") {
  session s;
  mailbox box("litmus.box");
  int* a = mdsm::alloc_collective_array<int>(k_words_per_page);
  if (mdsm::rank() == 0) {
    for (int k = 0; k < 3; ++k) {
      a[k] = k + 1;
      box.send(1, annotation::release);
    }
  } else if (mdsm::rank() == 1) {
    box.wait(3);
    for (int k = 0; k < 3; ++k) CHECK(a[k] == k + 1);
    CHECK(stat("diff_requests") == 1);
  }
  world_barrier();
  if (mdsm::rank() == 0) CHECK(stat("diffs_created") == 1);
  world_barrier();
}

TEST_CASE("litmus 19: one interval writing many pages", "[mpi][litmus][np2+]") {
  session s;
  mailbox box("litmus.box");
  const int pages = 64;
  int* a = mdsm::alloc_collective_array<int>(static_cast<std::size_t>(pages) * k_words_per_page);
  if (mdsm::rank() == 0) {
    for (int p = 0; p < pages; ++p) a[p * k_words_per_page + p] = p + 1;
    box.send(1, annotation::release);
  } else if (mdsm::rank() == 1) {
    box.wait(1);
    for (int p = 0; p < pages; ++p) REQUIRE(a[p * k_words_per_page + p] == p + 1);
    CHECK(stat("write_notices_received") == static_cast<std::uint64_t>(pages));
  }
  world_barrier();
}

TEST_CASE("litmus 20: a write to an invalidated page fetches before it makes a twin", "[mpi][litmus][np2+]") {
  session s;
  mailbox box("litmus.box");
  int* a = mdsm::alloc_collective_array<int>(k_words_per_page);
  if (mdsm::rank() == 1) CHECK(a[0] == 0);
  world_barrier();
  if (mdsm::rank() == 0) {
    a[0] = 5;
    box.send(1, annotation::release);
    box.wait(1, 1);
    CHECK(a[0] == 5);
    CHECK(a[1] == 6);
  } else if (mdsm::rank() == 1) {
    box.wait(1, 0);
    a[1] = 6;  // first access after the invalidation is a write
    CHECK(a[0] == 5);
    box.send(0, annotation::release);
  }
  world_barrier();
}

TEST_CASE("litmus 21: a counter passed back and forth by RELEASE ends exact", "[mpi][litmus][np2+]") {
  session s;
  mailbox box("litmus.box");
  const int me = mdsm::rank(), n = mdsm::size();
  long* counter = mdsm::alloc_collective_array<long>(1);
  const int rounds = 200;
  // A token travels around the ring of ranks; each holder increments the counter.
  for (int k = 0; k < rounds; ++k) {
    if (!(me == 0 && k == 0)) box.wait(me == 0 ? k : k + 1);
    ++*counter;
    box.send((me + 1) % n, annotation::release);
  }
  if (me == 0) {
    box.wait(rounds);
    CHECK(*counter == static_cast<long>(rounds) * n);
  }
  world_barrier();
}

TEST_CASE("litmus 22: objects spanning several units of a multi-page coherence unit", "[mpi][litmus][np2+]") {
  mdsm::options opts;
  opts.unit_pages = 4;
  session s(opts);
  mailbox box("litmus.box");
  struct particle {
    double x, y, z;
    int id;
  };
  const int count = 3000;  // ~96 KiB: six 16 KiB units
  auto* ps = mdsm::alloc_collective_array<particle>(count);
  if (mdsm::rank() == 0) {
    for (int i = 0; i < count; ++i) ps[i] = particle{i * 0.5, i * 1.5, -i * 2.0, i};
    box.send(1, annotation::release);
  } else if (mdsm::rank() == 1) {
    box.wait(1);
    for (int i = 0; i < count; ++i) {
      REQUIRE(ps[i].id == i);
      REQUIRE(ps[i].z == -i * 2.0);
    }
    CHECK(stat("diff_requests") <= 6);
  }
  world_barrier();
}

TEST_CASE("litmus 23: garbage collection keeps values; copies dropped by it are fetched again",
          "[mpi][litmus][np2+]") {
  session s;
  mailbox box("litmus.box");
  const int me = mdsm::rank(), n = mdsm::size();
  int* a = mdsm::alloc_collective_array<int>(static_cast<std::size_t>(n) * k_words_per_page);
  // Everyone writes its own page and tells everyone; nobody reads, so every non-home copy keeps
  // pending notices until the collection drops it.
  a[me * k_words_per_page] = me + 1;
  for (int r = 0; r < n; ++r)
    if (r != me) box.send(r, annotation::release);
  box.wait(n - 1);
  mdsm::gc();
  CHECK(stat("gc_runs") == 1);
  for (int r = 0; r < n; ++r) CHECK(a[r * k_words_per_page] == r + 1);
  // After the collection the protocol goes on as before.
  world_barrier();
  a[me * k_words_per_page + 1] = 10 * (me + 1);
  for (int r = 0; r < n; ++r)
    if (r != me) box.send(r, annotation::release);
  box.wait(2 * (n - 1));
  for (int r = 0; r < n; ++r) CHECK(a[r * k_words_per_page + 1] == 10 * (r + 1));
  world_barrier();
}

TEST_CASE("litmus 24: collective allocations agree on addresses, non-collective ones are unique",
          "[mpi][litmus][np2+]") {
  session s;
  void* c = mdsm::alloc_collective(1000);
  long lo = 0, hi = 0, addr = reinterpret_cast<long>(c);
  MPI_Allreduce(&addr, &lo, 1, MPI_LONG, MPI_MIN, MPI_COMM_WORLD);
  MPI_Allreduce(&addr, &hi, 1, MPI_LONG, MPI_MAX, MPI_COMM_WORLD);
  CHECK(lo == hi);
  std::vector<long> mine;
  for (int i = 0; i < 50; ++i) mine.push_back(reinterpret_cast<long>(mdsm::alloc(64 + 8 * i)));
  std::vector<long> all(mine.size() * static_cast<std::size_t>(mdsm::size()));
  MPI_Allgather(mine.data(), static_cast<int>(mine.size()), MPI_LONG, all.data(), static_cast<int>(mine.size()),
                MPI_LONG, MPI_COMM_WORLD);
  std::sort(all.begin(), all.end());
  CHECK(std::adjacent_find(all.begin(), all.end()) == all.end());
  for (long p : mine) mdsm::free(reinterpret_cast<void*>(p));
  mdsm::free_collective(c);
  world_barrier();
}

TEST_CASE("litmus 25: a pointer to another rank's allocation is freed by its owner", "[mpi][litmus][np2+]") {
  session s;
  std::atomic<long> got{0};
  auto h = mdsm::register_handler("litmus.pointer", [&](mdsm::message& m) {
    got = m.as<long>();
    m.accept();
  });
  if (mdsm::rank() == 0) {
    auto* p = mdsm::alloc_array<long>(10);
    p[9] = 99;
    mdsm::send_value(1, h, reinterpret_cast<long>(p), annotation::release);
  } else if (mdsm::rank() == 1) {
    mdsm::wait_until([&] { return got.load() != 0; });
    auto* p = reinterpret_cast<long*>(got.load());
    CHECK(p[9] == 99);
    mdsm::free(p);
    try {
      mdsm::free(p);  // the owner knows it is gone
      FAIL("double free was accepted");
    } catch (const mdsm::error& e) {
      CHECK(e.code() == MDSM_ERR_INVALID_ARGUMENT);
    }
  }
  world_barrier();
}

TEST_CASE("litmus 26: a lazy diff that covers several intervals is applied once, never over later own writes",
          "[mpi][litmus][np3+]") {
  // Rank 1 writes A in interval I1 and B in I1'; the twin is still there when rank 2 asks for
  // I1, so the one diff made then holds both intervals' writes. Rank 2 then overwrites A. When
  // it later learns of I1' (through rank 0), that diff must not be applied again: it would put
  // rank 1's old A back over rank 2's newer write.
  session s;
  MDSM_NEED_RANKS(3);
  mailbox box("litmus.box");
  int* page = mdsm::alloc_collective_array<int>(k_words_per_page);
  int& a = page[0];
  int& b = page[100];
  const int me = mdsm::rank();
  if (me == 1) {
    a = 1;
    box.send(2, annotation::release);  // closes I1
    b = 1;
    box.send(0, annotation::release);  // closes I1'; the twin still holds both
    box.send(2, annotation::none);     // "go": rank 2 may read now
  } else if (me == 2) {
    box.wait(2, 1);
    CHECK(a == 1);  // the fetch makes one diff for I1 and I1'
    a = 2;
    box.send(0, annotation::none);     // "written"
    box.wait(1, 0);                    // rank 0's RELEASE brings the notice of I1'
    CHECK(a == 2);
    CHECK(b == 1);
  } else if (me == 0) {
    box.wait(1, 1);
    box.wait(1, 2);
    box.send(2, annotation::release);
  }
  world_barrier();
}

TEST_CASE("litmus 27: a lazy diff covering two intervals is not applied again for the second one",
          "[mpi][litmus][np2+]") {
  // Found by the random DRF test (MDSM_DRF_SEED=9, 2 ranks). Rank 1 writes a[0] in interval X
  // and a[1] in X+1 under one twin; rank 0 learns X only, and its fetch gets one diff made for
  // both intervals. Rank 0 then overwrites a[0]. When it learns X+1, the fetch brings the same
  // diff back: applying it again would restore rank 1's old a[0] over rank 0's newer write.
  session s;
  mailbox now("litmus.now");
  mailbox later("litmus.later", false);  // stored: rank 0 accepts it when it chooses
  int* a = mdsm::alloc_collective_array<int>(k_words_per_page);
  if (mdsm::rank() == 1) {
    a[0] = 1;
    now.send(0, annotation::release);  // closes X
    a[1] = 2;
    later.send(0, annotation::release);  // closes X+1; the twin still holds both
  } else if (mdsm::rank() == 0) {
    now.wait(1);
    later.wait(1);  // arrived, not accepted: X+1 is unknown here
    CHECK(a[0] == 1);
    a[0] = 3;
    later.accept_stored();
    CHECK(a[1] == 2);
    CHECK(a[0] == 3);
  }
  world_barrier();
}

TEST_CASE("litmus 28: a RELEASE that arrives while the receiver is still inside alloc_collective invalidates the "
          "new page",
          "[mpi][litmus][np2+]") {
  // Found by litmus 27: the faster rank returns from alloc_collective, writes and releases; the
  // receiver's handler invalidates the page before the receiver's allocation made it readable,
  // and the allocation then made it readable anyway (the old code changed protections after
  // releasing the page locks), so the receiver read its stale zero.
  session s;
  mailbox box("litmus.box");
  const int rounds = 40;
  for (int k = 1; k <= rounds; ++k) {
    int* a = mdsm::alloc_collective_array<int>(k_words_per_page);
    if (mdsm::rank() == 1) {
      a[0] = k;
      box.send(0, annotation::release);
    } else if (mdsm::rank() == 0) {
      box.wait(k);
      REQUIRE(a[0] == k);
    }
  }
  world_barrier();
}

TEST_CASE("litmus 41: a RELEASE that arrives inside alloc_collective invalidates a page no rank had looked at",
          "[mpi][litmus][np2+]") {
  // Litmus 28 where each allocation lies in a part of the region whose page-table entries were
  // never made (each starts 2 MiB + a page after the last, beyond the 512-unit chunk of entries
  // the previous round's reads made): the receiver's allocation then only sets valid bits, and
  // must leave the pages the early write notices name invalid (they get entries and are
  // settled). Also the last page of each allocation, written by another rank when there are 3.
  session s;
  mailbox box("litmus.box");
  const int rounds = 24;
  constexpr std::size_t words = (std::size_t{2} << 20) / sizeof(int) + k_words_per_page;
  std::vector<int*> kept;
  for (int k = 1; k <= rounds; ++k) {
    int* a = mdsm::alloc_collective_array<int>(words);
    kept.push_back(a);
    const int writer_last = mdsm::size() > 2 ? 2 : 1;
    if (mdsm::rank() == 1) {
      a[0] = k;
      a[words / 2] = -k;
    }
    if (mdsm::rank() == writer_last) a[words - 1] = 2 * k;
    if (mdsm::rank() == 1 || (mdsm::rank() == writer_last && writer_last != 1)) box.send(0, annotation::release);
    if (mdsm::rank() == 0) {
      box.wait(writer_last != 1 ? 2 * k : k);
      REQUIRE(a[0] == k);
      REQUIRE(a[words / 2] == -k);
      REQUIRE(a[words - 1] == 2 * k);
      REQUIRE(a[1] == 0);  // untouched by anyone: the zero page
    }
  }
  world_barrier();
  for (int* a : kept) mdsm::free_collective(a);
}

namespace {
// A read-modify-write that is a single write access (lock xadd): it faults once, as a write.
void increment(int& x) { std::atomic_ref<int>(x).fetch_add(1, std::memory_order_relaxed); }
}  // namespace

TEST_CASE("litmus 29: a write fault on an invalid or absent page fetches, twins and opens it read-write at once",
          "[mpi][litmus][np2+]") {
  // The write fault (a read-modify-write here) fetches the other writer's diff on top of this
  // rank's own unreleased write, makes the twin from the result and opens the page read-write
  // with one mprotect; the twin made after the fetch keeps the other writer's words out of this
  // rank's next diff. The same for a page this rank holds no copy of (whole-page fetch).
  //
  // The increments are one locked instruction (increment()): a plain ++ may be compiled as a
  // load and then a store (always so under sanitizer instrumentation), whose load faults as a
  // read first -- two faults and two mprotects that say nothing about the write-fault path.
  session s;
  mailbox box("litmus.box");
  std::atomic<long> got{0};
  auto ptr = mdsm::register_handler("litmus.pointer", [&](mdsm::message& m) {
    got = m.as<long>();
    m.accept();
  });
  int* a = mdsm::alloc_collective_array<int>(k_words_per_page);
  const int me = mdsm::rank();
  if (me == 0) {
    a[10] = 10;  // own write, twin kept, not released yet
    box.send(1, annotation::none);  // "written": rank 1's notice must find the page written
    box.wait(1, 1);
    const auto protects = stat("protect_calls"), faults = stat("write_faults") + stat("read_faults");
    increment(a[20]);  // invalid page, written by rank 1: one fault, one mprotect (none -> read-write)
    CHECK(stat("protect_calls") - protects == 1);
    CHECK(stat("write_faults") + stat("read_faults") - faults == 1);
    a[21] = 21;  // already writable: no further fault
    CHECK(stat("write_faults") + stat("read_faults") - faults == 1);
    CHECK(a[10] == 10);
    box.send(1, annotation::release);
    auto* p = mdsm::alloc_array<int>(k_words_per_page);  // rank 0's arena: rank 1 has no copy
    p[5] = 5;
    mdsm::send_value(1, ptr, reinterpret_cast<long>(p), annotation::release);
    box.wait(2, 1);
    CHECK(p[5] == 6);
    CHECK(p[6] == 7);
  } else if (me == 1) {
    box.wait(1, 0);
    a[20] = 20;
    box.send(0, annotation::release);
    a[22] = 22;  // written after the release: still only in rank 1's twin when rank 0's notice arrives
    box.wait(2, 0);
    CHECK(a[10] == 10);
    CHECK(a[20] == 21);
    CHECK(a[21] == 21);
    CHECK(a[22] == 22);
    mdsm::wait_until([&] { return got.load() != 0; });
    auto* p = reinterpret_cast<int*>(got.load());
    const auto protects = stat("protect_calls"), copies = stat("page_requests");
    increment(p[5]);  // no copy here: fetch the page, twin, read-write, with one mprotect
    CHECK(stat("protect_calls") - protects == 1);
    CHECK(stat("page_requests") - copies == 1);
    p[6] = 7;
    box.send(0, annotation::release);
  }
  world_barrier();
}

TEST_CASE("litmus 30: protection changes of contiguous units in different states are coalesced correctly",
          "[mpi][litmus][np2+]") {
  // Rank 0 writes six contiguous pages; rank 1's notices then invalidate two of them, and rank 0
  // reads one of those back (its own writes saved in a diff, the page read-only but still
  // written in this interval). At rank 0's release the six written units are read-write,
  // read-only and inaccessible: the read-write ones around the read-only one become read-only
  // with one mprotect, the invalid one keeps no access, the last one needs a second call.
  // Every unit must still catch the next write; rank 1's acquire invalidates all six with one.
  session s;
  mailbox box("litmus.box");
  constexpr int pages = 6;
  int* a = mdsm::alloc_collective_array<int>(pages * k_words_per_page);
  auto at = [&](int page, int word) -> int& { return a[page * k_words_per_page + word]; };
  const int me = mdsm::rank();
  world_barrier();
  if (me == 0) {
    for (int p = 0; p < pages; ++p) at(p, 0) = 100 + p;
    box.send(1, annotation::none);  // "written"
    box.wait(1, 1);                 // rank 1's notices for pages 2 and 4
    CHECK(at(2, 1) == 21);          // fetch; page 2 read-only, still written in this interval
    const auto protects = stat("protect_calls");
    box.send(1, annotation::release);
    CHECK(stat("protect_calls") - protects == 2);  // pages 0-3 and page 5; page 4 stays inaccessible
    const auto faults = stat("write_faults"), ahead = stat("write_ahead_units");
    // Every page must catch its write in the new interval: by a fault, or made writable ahead by
    // the fault before it (a run of write faults); rank 1 checks that all six writes arrive.
    for (int p = 0; p < pages; ++p) at(p, 2) = 200 + p;
    CHECK(stat("write_faults") - faults + stat("write_ahead_units") - ahead >= pages);
    CHECK(stat("write_faults") - faults >= 2);
    box.send(1, annotation::release);
  } else if (me == 1) {
    box.wait(1, 0);
    at(2, 1) = 21;
    at(4, 1) = 41;
    const auto protects = stat("protect_calls");
    box.send(0, annotation::release);  // write-protects pages 2 and 4: two calls
    box.wait(2, 0);                    // rank 0's first RELEASE: all six pages invalid, one call
    CHECK(stat("protect_calls") - protects == 3);
    box.wait(3, 0);
    for (int p = 0; p < pages; ++p) {
      CHECK(at(p, 0) == 100 + p);
      CHECK(at(p, 2) == 200 + p);
    }
    CHECK(at(2, 1) == 21);
    CHECK(at(4, 1) == 41);
  }
  world_barrier();
}

namespace {
// Sets an environment variable for one session (mdsm reads it at init).
struct scoped_env {
  const char* name;
  scoped_env(const char* n, const char* value) : name(n) { ::setenv(n, value, 1); }
  ~scoped_env() { ::unsetenv(name); }
};
}  // namespace

TEST_CASE("litmus 31: a page written in every interval stays writable, also while its diffs are served",
          "[mpi][litmus][np2+]") {
  // Rank 0 writes page 0 in 100 consecutive intervals, releasing to rank 1 after each; rank 1
  // accepts but reads only after rounds 50, 75 and 100. With MDSM_HOT_UNIT_INTERVALS=4 the second
  // write fault makes the page hot: from then on it stays read-write (its contents change
  // between the checks every 4 closes), and a diff served to rank 1 is a snapshot that leaves it
  // writable: two faults in all. With 0 every interval faults. Either way rank 1 reads the
  // latest round it acquired, so no write went unseen.
  for (const char* hot : {"4", "0"}) {
    CAPTURE(hot);
    scoped_env env("MDSM_HOT_UNIT_INTERVALS", hot);
    session s;
    mailbox box("litmus.box");
    int* a = mdsm::alloc_collective_array<int>(k_words_per_page);
    const int me = mdsm::rank();
    constexpr int rounds = 100, words = 8;
    world_barrier();
    if (me == 0) {
      const auto faults0 = stat("write_faults");
      int reads_seen = 0;
      for (int r = 1; r <= rounds; ++r) {
        if (r == 51 || r == 76) box.wait(++reads_seen, 1);  // rank 1 has read round r-1
        for (int w = 0; w < words; ++w) a[w] = r * 10 + w;
        box.send(1, annotation::release, r);
      }
      const auto faults = stat("write_faults") - faults0;
      if (hot[0] == '0') CHECK(faults == rounds);
      else CHECK(faults == 2);
    } else if (me == 1) {
      for (int r : {50, 75}) {
        box.wait(r, 0);
        for (int w = 0; w < words; ++w) CHECK(a[w] == r * 10 + w);
        box.send(0, annotation::none);
      }
      box.wait(rounds, 0);
      for (int w = 0; w < words; ++w) CHECK(a[w] == rounds * 10 + w);
    }
    world_barrier();
  }
}

TEST_CASE("litmus 32: two hot writers of one page, read by a third rank, merge correctly",
          "[mpi][litmus][np3+]") {
  // Ranks 0 and 1 write disjoint words of the same page in every interval and release only to
  // rank 2, so neither ever learns of the other's writes and both keep the page writable across
  // closes. Rank 2 reads every 10 rounds and at the end; each read must show both writers'
  // words of the latest round it acquired (served diffs hold the writes of every interval
  // that awaited the twin, and no piece is applied twice).
  MDSM_NEED_RANKS(3);
  session s;
  mailbox box("litmus.box");
  int* a = mdsm::alloc_collective_array<int>(k_words_per_page);
  const int me = mdsm::rank();
  constexpr int rounds = 60, words = 16;
  world_barrier();
  if (me == 0 || me == 1) {
    for (int r = 1; r <= rounds; ++r) {
      if (r > 1 && (r - 1) % 10 == 0) box.wait((r - 1) / 10, 2);  // rank 2 has read round r-1
      for (int w = 0; w < words; ++w) a[me * words + w] = r * 100 + me;
      box.send(2, annotation::release, r);
    }
  } else if (me == 2) {
    for (int r = 10; r <= rounds; r += 10) {
      box.wait(r, 0);
      box.wait(r, 1);
      for (int w = 0; w < words; ++w) {
        CHECK(a[w] == r * 100);
        CHECK(a[words + w] == r * 100 + 1);
      }
      for (int w = 2 * words; w < 3 * words; ++w) CHECK(a[w] == 0);
      if (r < rounds) {
        box.send(0, annotation::none);
        box.send(1, annotation::none);
      }
    }
  }
  world_barrier();
}

TEST_CASE("litmus 33: a hot page that stops being written stops being announced", "[mpi][litmus][np2+]") {
  // Rank 0 makes page 0 hot (MDSM_HOT_UNIT_INTERVALS=4), then writes only page 1 for 300 more
  // intervals. Page 0 is checked 4 closes after it became hot (interval 6: changed, so the next
  // check comes 8 closes later) and at interval 14 (unchanged: it stops), so it gets a notice in
  // at most 9 of the 300, each of which a reader may act on; rank 1 reads page 0 in the middle
  // and at the end and must always see the last values.
  scoped_env env("MDSM_HOT_UNIT_INTERVALS", "4");
  session s;
  mailbox box("litmus.box");
  int* a = mdsm::alloc_collective_array<int>(2 * k_words_per_page);
  int* b = a + k_words_per_page;
  const int me = mdsm::rank();
  world_barrier();
  if (me == 0) {
    for (int r = 1; r <= 5; ++r) {
      a[0] = r;
      box.send(1, annotation::release);
    }
    const auto notices = stat("write_notices_created");
    for (int r = 1; r <= 300; ++r) {
      b[0] = r;
      if (r == 150) {
        box.send(1, annotation::release);
        box.wait(1, 1);  // rank 1 read page 0
        continue;
      }
      box.send(1, annotation::release);
    }
    // page 1: one notice per interval; page 0: until the check that finds it unchanged
    CHECK(stat("write_notices_created") - notices <= 300 + 4 + 2 * 4);
    b[1] = 7;
    a[1] = 9;
    box.send(1, annotation::release);
  } else if (me == 1) {
    box.wait(5 + 150, 0);
    CHECK(a[0] == 5);
    CHECK(b[0] == 150);
    box.send(0, annotation::none);
    box.wait(5 + 300 + 1, 0);
    CHECK(a[0] == 5);
    CHECK(a[1] == 9);
    CHECK(b[0] == 300);
    CHECK(b[1] == 7);
  }
  world_barrier();
}

TEST_CASE("litmus 34: a page the consumer keeps reading rides on the producer's RELEASE", "[mpi][litmus][np2+]") {
  // Rank 0 rewrites words of page 0 and releases to rank 1 in every round; rank 1 reads them
  // after each acquire. Its first two reads fetch the diff; the second makes rank 0 push the page
  // along with its next 4 RELEASEs to rank 1, and each fetch after a budget ran out doubles it
  // (8, 16, ...). A pushed diff is applied at the acquire: no fault, no request, and always the
  // round's values. Over 40 rounds rank 1 therefore fetches 5 times (rounds 1, 2, 7, 16, 33).
  session s;
  mailbox box("litmus.box");
  int* a = mdsm::alloc_collective_array<int>(k_words_per_page);
  const int me = mdsm::rank();
  constexpr int rounds = 40, words = 16;
  world_barrier();
  if (me == 0) {
    const auto pushed = stat("pushed_units_sent");
    for (int r = 1; r <= rounds; ++r) {
      for (int w = 0; w < words; ++w) a[w * 7] = r * 100 + w;
      box.send(1, annotation::release, r);
      box.wait(r, 1);  // rank 1 has read round r
    }
    CHECK(stat("pushed_units_sent") - pushed == rounds - 5);
  } else if (me == 1) {
    const auto requests = stat("diff_requests"), faults = stat("read_faults"), applied = stat("pushed_units_applied");
    for (int r = 1; r <= rounds; ++r) {
      box.wait(r, 0);
      for (int w = 0; w < words; ++w) CHECK(a[w * 7] == r * 100 + w);
      box.send(0, annotation::none);
    }
    CHECK(stat("diff_requests") - requests == 5);
    CHECK(stat("read_faults") - faults == 5);
    CHECK(stat("pushed_units_applied") - applied == rounds - 5);
  }
  world_barrier();
}

TEST_CASE("litmus 35: a pushed diff travels with a stored and with a forwarded RELEASE", "[mpi][litmus][np3+]") {
  // Ranks 1 and 2 have each fetched page 0 from rank 0 twice, so rank 0's RELEASEs to them carry
  // the page's diff. Round 3: rank 1 stores the RELEASE and accepts it later (rank 2 gets a direct
  // one). Round 4: rank 1 forwards the RELEASE to rank 2, whose copy is where rank 1's was, so it
  // applies the diff pushed for rank 1. Both read the new values without a fetch.
  MDSM_NEED_RANKS(3);
  session s;
  mailbox box("litmus.box");
  int* a = mdsm::alloc_collective_array<int>(k_words_per_page);
  const int me = mdsm::rank();
  std::mutex mu;
  std::vector<mdsm::stored_message> held;
  std::atomic<int> relayed{0};
  auto relay = mdsm::register_handler("litmus.relay", [&](mdsm::message& m) {
    const long what = m.as<long>();
    if (mdsm::rank() == 1 && what == 3) {
      std::lock_guard lk(mu);
      held.push_back(m.store());
    } else if (mdsm::rank() == 1 && what == 4) {
      m.forward(2);
    } else {
      m.accept();
    }
    ++relayed;
  });
  world_barrier();
  if (me == 0) {
    for (int r = 1; r <= 3; ++r) {
      a[0] = r;
      if (r < 3) box.send(1, annotation::release);
      else mdsm::send_value(1, relay, 3L, annotation::release);  // stored by rank 1
      box.send(2, annotation::release);
      box.wait(r, 1);
      box.wait(r, 2);
    }
    a[0] = 4;
    mdsm::send_value(1, relay, 4L, annotation::release);  // forwarded to rank 2
    box.wait(4, 2);
  } else if (me == 1) {
    for (int r = 1; r <= 2; ++r) {
      box.wait(r, 0);
      CHECK(a[0] == r);
      box.send(0, annotation::none);
    }
    mdsm::wait_until([&] { return relayed.load() == 1; });
    const auto requests = stat("diff_requests"), applied = stat("pushed_units_applied");
    {
      std::lock_guard lk(mu);
      held.back().accept();
      held.clear();
    }
    CHECK(a[0] == 3);
    CHECK(stat("diff_requests") == requests);
    CHECK(stat("pushed_units_applied") == applied + 1);
    box.send(0, annotation::none);
  } else if (me == 2) {
    std::uint64_t requests = 0, applied = 0;
    for (int r = 1; r <= 3; ++r) {
      box.wait(r, 0);
      CHECK(a[0] == r);
      // Counted before the reply that lets rank 0 go on to round 4: its forwarded RELEASE may be
      // accepted here (by the handler) before this thread runs again.
      if (r == 3) requests = stat("diff_requests"), applied = stat("pushed_units_applied");
      box.send(0, annotation::none);
    }
    mdsm::wait_until([&] { return relayed.load() == 1; });  // the forwarded RELEASE, accepted here
    CHECK(a[0] == 4);
    CHECK(stat("diff_requests") == requests);
    CHECK(stat("pushed_units_applied") == applied + 1);
    box.send(0, annotation::none);
  }
  world_barrier();
}

TEST_CASE("litmus 36: a pushed diff is not applied alone when another writer's diff is missing too",
          "[mpi][litmus][np3+]") {
  // Rank 1 keeps reading page 0, so rank 0 pushes it. Rank 2 writes other words of the page and
  // releases to rank 1 first; rank 0's pushed diff then does not hold all rank 1 lacks, so rank 1
  // fetches both writers' diffs and sees both writes (applying the push alone would have made
  // the copy valid without rank 2's words).
  MDSM_NEED_RANKS(3);
  session s;
  mailbox box("litmus.box");
  int* a = mdsm::alloc_collective_array<int>(k_words_per_page);
  const int me = mdsm::rank();
  world_barrier();
  if (me == 0) {
    for (int r = 1; r <= 3; ++r) {
      a[0] = r;
      box.send(1, annotation::release);
      box.wait(r, 1);
    }
    box.wait(1, 2);  // rank 2 has released to rank 1
    a[0] = 4;
    box.send(1, annotation::release);
  } else if (me == 2) {
    box.wait(1, 1);  // rank 1 is done with round 3
    a[500] = 42;
    box.send(1, annotation::release);
    box.send(0, annotation::none);
  } else if (me == 1) {
    for (int r = 1; r <= 3; ++r) {
      box.wait(r, 0);
      CHECK(a[0] == r);
      box.send(0, annotation::none);
    }
    box.send(2, annotation::none);
    box.wait(1, 2);
    box.wait(4, 0);
    const auto unused = stat("pushed_units_unused");
    CHECK(a[500] == 42);
    CHECK(a[0] == 4);
    CHECK(stat("pushed_units_unused") == unused);  // counted at the acquire, before the reads
  }
  world_barrier();
}

TEST_CASE("litmus 37: a pushed diff for a page the receiver is writing keeps the receiver's words",
          "[mpi][litmus][np3+]") {
  // Ranks 0 and 1 write different words of page 0 in turn, passing a RELEASE back and forth (a
  // counter-like page under a lock, with false sharing); pushed diffs are applied on top of the
  // receiver's own unreleased writes. Rank 2 reads everything at the end.
  MDSM_NEED_RANKS(3);
  session s;
  mailbox box("litmus.box");
  int* a = mdsm::alloc_collective_array<int>(k_words_per_page);
  const int me = mdsm::rank();
  constexpr int rounds = 30;
  world_barrier();
  if (me == 0 || me == 1) {
    const int other = 1 - me;
    for (int r = 1; r <= rounds; ++r) {
      if (me == 1 || r > 1) box.wait(me == 1 ? r : r - 1, other);
      CHECK(a[other * 100] == (me == 1 ? r : r - 1));  // the other's last round
      a[me * 100] = r;
      a[me * 100 + 1] = r;  // written again after the RELEASE below arrives at the other rank
      box.send(other, annotation::release);
    }
    if (me == 1) box.send(2, annotation::release);
    else box.send(2, annotation::release);
  } else if (me == 2) {
    box.wait(1, 0);
    box.wait(1, 1);
    CHECK(a[0] == rounds);
    CHECK(a[1] == rounds);
    CHECK(a[100] == rounds);
    CHECK(a[101] == rounds);
  }
  world_barrier();
}

TEST_CASE("litmus 38: write notices as runs over partly overlapping ranges of units", "[mpi][litmus][np2+]") {
  // Rank 0 writes ranges of 12 pages that overlap partly from one interval to the next (a run
  // of 10, then 3 inside it, then 2 across its end, then single pages), releasing to rank 1 each
  // time; rank 1 reads some pages in between (its copies become valid and are invalidated again
  // by later runs) and checks every page at the end. A record carries runs, not pages.
  session s;
  mailbox box("litmus.box");
  constexpr int pages = 12;
  int* a = mdsm::alloc_collective_array<int>(pages * k_words_per_page);
  auto at = [&](int page) -> int& { return a[page * k_words_per_page + 3]; };
  const int me = mdsm::rank();
  struct range {
    int first, last;
  };
  const range ranges[] = {{0, 9}, {3, 5}, {8, 10}, {11, 11}, {0, 0}, {4, 4}, {2, 7}, {9, 11}};
  world_barrier();
  if (me == 0) {
    int value = 1;
    for (const range& g : ranges) {
      for (int p = g.first; p <= g.last; ++p) at(p) = value;
      const auto cinfo = stat("cinfo_bytes_sent_release"), pushed = stat("pushed_bytes_sent");
      box.send(1, annotation::release, value);
      // Vector time, count, one record with a few runs (this interval's pages and the still-hot
      // ones from before), whatever the number of pages; plus the diffs pushed along for the
      // pages rank 1 re-reads, which are counted apart.
      const std::uint64_t fixed = 36 + 8 * static_cast<std::uint64_t>(mdsm::size());
      CHECK(stat("cinfo_bytes_sent_release") - cinfo - (stat("pushed_bytes_sent") - pushed) <= fixed + 3 * 8);
      box.wait(value, 1);
      ++value;
    }
  } else if (me == 1) {
    int expect[pages] = {};
    int value = 1;
    for (const range& g : ranges) {
      box.wait(value, 0);
      for (int p = g.first; p <= g.last; ++p) expect[p] = value;
      if (value % 2 == 0)  // read every other round: valid copies that the next runs invalidate
        for (int p = 0; p < pages; ++p) CHECK(at(p) == expect[p]);
      box.send(0, annotation::none);
      ++value;
    }
    for (int p = 0; p < pages; ++p) {
      CAPTURE(p);
      CHECK(at(p) == expect[p]);
    }
  }
  world_barrier();
}

TEST_CASE("litmus 39: hot pages written and released while their diffs are being served", "[mpi][litmus][np2+]") {
  // Rank 0 writes the first words of 16 pages (one 64-page coherence unit) in every round, so the
  // unit is hot (writable across closes), releases round r to rank 1 and waits until rank 1 has
  // accepted it; then, after a delay that sweeps 0-126 us over the rounds, it writes and closes
  // round r + 1 while its progress thread makes the snapshot diff rank 1 now asks for. Rank 1
  // accepts one round at a time and reads: after round r every word must be at least r.
  // The interval a snapshot's range ends at must be the newest close taken BEFORE the page is
  // read: one taken after it (round r + 1 written behind the diff's scan, then closed) ends the
  // range at r + 1 with a diff that misses those words, and rank 1, acting on r + 1, never
  // fetches them. A race: before the fix this run failed 2 times in 10 (4000 rounds).
  // Pushed diffs are off so that rank 1 fetches; a long unit and a short progress nap widen the
  // window.
  scoped_env no_push("MDSM_PUSH_DIFFS", "0");
  scoped_env big_unit("MDSM_COHERENT_UNIT_PAGES", "64");
  scoped_env prompt("MDSM_PROGRESS_SLEEP_MAX_US", "50");
  session s;
  mailbox box("litmus.box", false);
  constexpr int pages = 16, rounds = 4000, words = 8;
  int* a = mdsm::alloc_collective_array<int>(pages * k_words_per_page);
  auto word = [&](int p, int w) -> int& { return a[p * k_words_per_page + w]; };
  const int me = mdsm::rank();
  world_barrier();
  if (me == 0) {
    for (int r = 1; r <= rounds; ++r) {
      // Rank 1 fetches now: sweep the moment of the next write and close across its serving.
      const auto until = std::chrono::steady_clock::now() + std::chrono::nanoseconds(2000 * (r % 64));
      while (std::chrono::steady_clock::now() < until) {
      }
      for (int p = 0; p < pages; ++p)
        for (int w = 0; w < words; ++w) word(p, w) = r;
      box.send(1, annotation::release, r);
      box.wait(r, 1);  // rank 1 accepted round r and is about to fetch while this writes r + 1
    }
  } else if (me == 1) {
    int stale = 0;
    for (int r = 1; r <= rounds; ++r) {
      box.wait(r, 0);
      box.accept_one();
      box.send(0, annotation::none);
      for (int p = 0; p < pages; ++p)
        for (int w = 0; w < words; ++w)
          if (word(p, w) < r) ++stale;
    }
    CHECK(stale == 0);
    for (int p = 0; p < pages; ++p)
      for (int w = 0; w < words; ++w) CHECK(word(p, w) == rounds);
  }
  world_barrier();
}

TEST_CASE("litmus 40: a rank walking another rank's pages reads ahead in growing batches", "[mpi][litmus][np2+]") {
  // Rank 0 writes 112 pages of its own arena (rank 1 has no copy) and 112 pages of a collective
  // array (rank 1's copies become invalid), and releases. Rank 1 reads both in ascending order:
  // each fault right after the previous batch doubles the batch, 16 + 32 + 64 = 112 pages in 3
  // requests each (without readahead: 7), and the neighbours of a batch are opened with one
  // mprotect. A fault elsewhere starts again at 16.
  session s;
  constexpr int pages = 112;
  int* shared = mdsm::alloc_collective_array<int>(pages * k_words_per_page);
  std::atomic<long> got{0};
  auto h = mdsm::register_handler("litmus.pointer", [&](mdsm::message& m) {
    got = m.as<long>();
    m.accept();
  });
  world_barrier();
  if (mdsm::rank() == 0) {
    auto* own = mdsm::alloc_array<int>(pages * k_words_per_page);
    for (int p = 0; p < pages; ++p) {
      own[p * k_words_per_page + 5] = p + 1;
      shared[p * k_words_per_page + 5] = 2 * p + 1;
    }
    mdsm::send_value(1, h, reinterpret_cast<long>(own), annotation::release);
  } else if (mdsm::rank() == 1) {
    mdsm::wait_until([&] { return got.load() != 0; });
    const auto* own = reinterpret_cast<const int*>(got.load());
    // A fault that continues the walk also asks for the window after its batch (a prefetch,
    // litmus 47): 16, 32 + 32 ahead, then the rest. A fault that meets a window still in flight
    // asks for the next one at once, so how many go ahead depends on timing; the faults' own
    // requests are at most 3.
    auto prefetches = stat("prefetches");
    const auto copies = stat("page_requests"), diffs = stat("diff_requests");
    for (int p = 0; p < pages; ++p) REQUIRE(own[p * k_words_per_page + 5] == p + 1);
    CHECK(stat("prefetches") - prefetches >= 1);
    CHECK(stat("page_requests") - copies - (stat("prefetches") - prefetches) <= 3);
    prefetches = stat("prefetches");
    const auto protects = stat("protect_calls");
    for (int p = 0; p < pages; ++p) REQUIRE(shared[p * k_words_per_page + 5] == 2 * p + 1);
    const auto ahead = stat("prefetches") - prefetches;
    CHECK(ahead >= 1);
    const auto own_requests = stat("diff_requests") - diffs - ahead;
    CHECK(own_requests <= 3);
    // Per batch one mprotect opens the faulting unit and one the neighbours it brought along; a
    // prefetch opens its units with one.
    CHECK(stat("protect_calls") - protects <= 2 * own_requests + ahead);
  }
  world_barrier();
}

TEST_CASE("litmus 42: a rank reading the next row after each RELEASE gets the rows pushed (a walk)",
          "[mpi][litmus][np2+]") {
  // Rank 0 rewrites every row of a matrix and releases to rank 1 in each round; rank 1 reads
  // row r in round r (Floyd-Warshall's pivot row), its last word first. Rows are 1.5 units long:
  // a row straddles units and the walk's stride is not whole. Each unit is read once, so no unit
  // is fetched twice and pushed for that; but once two steps agree, rank 0's RELEASEs carry the
  // units the walk reaches next (4, 8, 16 ... of them, renewed by a fault after a budget ran
  // out): rank 1 faults in a few rounds, not in each (about 11 faults in 48 rounds), and every
  // value is the round's. Then rank 1 writes a word of the row it reads next (a pushed diff for
  // a unit the receiver writes keeps its word) and jumps back to row 0 (the walk is wrong now:
  // it faults and fetches): values stay exact.
  session s;
  mailbox box("litmus.box");
  constexpr int row = 1536, rows = 56, walked = 48;
  int* m = mdsm::alloc_collective_array<int>(row * rows);
  auto value = [](int round, int i, int j) { return round * 100000 + i * 1000 + j % 1000; };
  auto check_row = [&](int round, int i) {
    constexpr int last = row - 1 - (row - 1) % 7;  // rank 0 writes the words j % 7 == 0
    REQUIRE(m[i * row + last] == value(round, i, last));
    for (int j = 0; j < row; j += 7) REQUIRE(m[i * row + j] == value(round, i, j));
  };
  const int me = mdsm::rank();
  world_barrier();
  if (me == 0) {
    for (int r = 1; r <= walked + 3; ++r) {
      for (int i = 0; i < rows; ++i)
        for (int j = 0; j < row; j += 7) m[i * row + j] = value(r, i, j);
      box.send(1, annotation::release, r);
      box.wait(r, 1);  // rank 1 has read round r
    }
  } else if (me == 1) {
    const auto faults = stat("read_faults"), applied = stat("pushed_units_applied");
    for (int r = 1; r <= walked; ++r) {
      box.wait(r, 0);
      check_row(r, r - 1);
      box.send(0, annotation::none);
    }
    CHECK(stat("read_faults") - faults <= 20);  // 14 as measured; without the walk, 1-2 per round
    CHECK(stat("pushed_units_applied") - applied >= static_cast<std::uint64_t>(walked));
    m[walked * row + 1] = -1;  // a word rank 0 never writes, of the row read next
    box.wait(walked + 1, 0);
    check_row(walked + 1, walked);
    REQUIRE(m[walked * row + 1] == -1);
    box.send(0, annotation::none);
    box.wait(walked + 2, 0);
    check_row(walked + 2, 0);
    check_row(walked + 2, rows - 1);
    box.send(0, annotation::none);
    box.wait(walked + 3, 0);
    check_row(walked + 3, walked + 1);
    REQUIRE(m[walked * row + 1] == -1);
    box.send(0, annotation::none);
  }
  world_barrier();
}

TEST_CASE("litmus 43: ranks walking rows after each barrier; a walk through rows they have no copy of",
          "[mpi][litmus][np2+]") {
  // The barrier form of litmus 42 (apsp's): rank 0 rewrites its rows, everyone arrives at the
  // barrier, and every other rank reads row r after barrier r. The manager's departures carry
  // its pushes (at 2 ranks: rank 1 faults in a few rounds, not in each); at 3 and 4 ranks only
  // the ranks whose acquire carries rank 0's releases get them, and the others fetch. Then rank 0
  // writes rows of its own arena, which the others have no copy of: a walk through copy
  // requests pushes only units already fetched, and values stay exact either way.
  session s;
  constexpr int row = 1536, rows = 40;
  int* m = mdsm::alloc_collective_array<int>(row * rows);
  mdsm::barrier bar;
  auto value = [](int round, int i, int j) { return round * 100000 + i * 1000 + j % 1000; };
  const int me = mdsm::rank();
  auto walk = [&](int* base, int salt) {
    const auto faults = stat("read_faults");
    for (int r = 1; r <= rows; ++r) {
      if (me == 0)
        for (int i = 0; i < rows; ++i)
          for (int j = 0; j < row; j += 5) base[i * row + j] = value(r + salt, i, j);
      bar.arrive_and_wait();
      if (me != 0)
        for (int j = 0; j < row; j += 5) REQUIRE(base[(r - 1) * row + j] == value(r + salt, r - 1, j));
      bar.arrive_and_wait();  // rank 0 writes the next round only after everyone read this one
    }
    return stat("read_faults") - faults;
  };
  world_barrier();
  const auto faults = walk(m, 0);
  if (me == 1 && mdsm::size() == 2) CHECK(faults <= 20);
  // Rows in rank 0's arena: the others have no copy until they fetch one.
  std::atomic<long> got{0};
  auto h = mdsm::register_handler("litmus.rows", [&](mdsm::message& msg) {
    got = msg.as<long>();
    msg.accept();
  });
  int* own = nullptr;
  if (me == 0) {
    own = mdsm::alloc_array<int>(row * rows);
    for (int d = 1; d < mdsm::size(); ++d) mdsm::send_value(d, h, reinterpret_cast<long>(own), annotation::release);
  } else {
    mdsm::wait_until([&] { return got.load() != 0; });
    own = reinterpret_cast<int*>(got.load());
  }
  walk(own, 1000);
  bar.arrive_and_wait();
  if (me == 0) mdsm::free(own);
  world_barrier();
}

TEST_CASE("litmus 44: a pushed walk across stored RELEASEs and a garbage collection", "[mpi][litmus][np2+]") {
  // Litmus 42's walk, with rank 1 storing each RELEASE in its handler and accepting it later
  // from the application thread (the pushes ride on the stored message), and a collection of
  // every rank's consistency metadata in the middle of the walk (copies it drops are fetched
  // again; pushes for them no longer apply and the walk starts over from the faults). Every value
  // is the round's; the walk still saves most fetches.
  session s;
  mailbox box("litmus.stored", /*accept_in_handler=*/false);
  constexpr int row = 1536, rows = 48, half = 24;
  int* m = mdsm::alloc_collective_array<int>(row * rows);
  auto value = [](int round, int i, int j) { return round * 100000 + i * 1000 + j % 1000; };
  const int me = mdsm::rank();
  world_barrier();
  const auto faults = stat("read_faults");
  auto rounds = [&](int first, int last) {
    for (int r = first; r <= last; ++r) {
      if (me == 0) {
        for (int i = 0; i < rows; ++i)
          for (int j = 0; j < row; j += 3) m[i * row + j] = value(r, i, j);
        box.send(1, annotation::release, r);
        box.wait(r, 1);  // rank 1 has read round r
      } else if (me == 1) {
        box.wait(r, 0);
        box.accept_one();
        for (int j = 0; j < row; j += 3) REQUIRE(m[(r - 1) * row + j] == value(r, r - 1, j));
        box.send(0, annotation::none);
      }
    }
  };
  rounds(1, half);
  world_barrier();
  const auto collections = stat("gc_runs");
  mdsm::gc();
  CHECK(stat("gc_runs") == collections + 1);
  rounds(half + 1, rows);
  if (me == 1) CHECK(stat("read_faults") - faults <= rows / 2);  // 12 as measured; 1-2 per round without
  world_barrier();
}

TEST_CASE("litmus 56: a walk whose reader prefetches ahead keeps its pushes (a window asked for ahead is no read)",
          "[mpi][litmus][np2+]") {
  // Rank 0 rewrites every row of a matrix and releases to rank 1 in each round; rank 1 reads
  // row r - 1 in round r. Rows are 16 units long, so each of rank 1's faults fetches a whole row
  // in one batch and the next one comes right after it: its readahead sees a walk and asks for
  // the window after each batch ahead of any fault (a prefetch). Only faults are reads: before
  // the prefetch had a request of its own, rank 0 took each window's first unit for one, far off
  // the stride, and started the walk over, so its RELEASEs pushed no row and rank 1 faulted in
  // every round. Now the walk holds: rank 1 faults in a few rounds, and every value is the round's.
  session s;
  mailbox box("litmus.ahead");
  constexpr int unit_ints = 4096 / static_cast<int>(sizeof(int)), row = 16 * unit_ints, rows = 24;
  int* m = mdsm::alloc_collective_array<int>(static_cast<std::size_t>(row) * rows);
  auto value = [](int round, int i, int j) { return round * 1000000 + i * 10000 + j % 10000; };
  const int me = mdsm::rank();
  world_barrier();
  if (me == 0) {
    for (int r = 1; r <= rows; ++r) {
      for (int i = 0; i < rows; ++i)
        for (int j = 0; j < row; j += 64) m[i * row + j] = value(r, i, j);
      box.send(1, annotation::release, r);
      box.wait(r, 1);  // rank 1 has read round r
    }
  } else if (me == 1) {
    const auto faults = stat("read_faults"), applied = stat("pushed_units_applied"), ahead = stat("prefetches");
    for (int r = 1; r <= rows; ++r) {
      box.wait(r, 0);
      for (int j = 0; j < row; j += 64) REQUIRE(m[(r - 1) * row + j] == value(r, r - 1, j));
      box.send(0, annotation::none);
    }
    const auto faulted = stat("read_faults") - faults, pushed = stat("pushed_units_applied") - applied;
    CHECK(stat("prefetches") > ahead);  // the case this pins
    CHECK(faulted <= rows / 3);  // 4 as measured; 24 (every round) before
    CHECK(pushed >= static_cast<std::uint64_t>(rows) * 16 / 2);  // 320 as measured; 38 before
  }
  world_barrier();
}

TEST_CASE("litmus 45: a run of write faults makes the next units writable ahead; unwritten ones announce nothing",
          "[mpi][litmus][np2+]") {
  // Rank 0 writes the first 40 of 100 pages front to back (a block it owns) and releases to rank 1.
  // The run's write faults make the units after them writable ahead (8, 16, 32, ... at a time), so
  // far fewer than 40 write faults happen; the write-ahead overshoots past page 40, and those
  // units, unchanged at the close, are write-protected with no twin and no notice: exactly 40
  // write notices, and rank 1's copies of pages 40-99 stay valid (no read fault there). Then
  // rank 1 writes other words of pages 30-59 (pages rank 0 made writable ahead, written or not)
  // and both read each other's words: the multiple-writer merge holds.
  session s;
  mailbox box("litmus.box");
  constexpr int pages = 100, written = 40;
  const paged_ints at(pages);  // valid read-only copies everywhere
  const int me = mdsm::rank();
  mdsm::barrier b;
  b.arrive_and_wait();
  if (me == 0) {
    const auto faults = stat("write_faults"), ahead = stat("write_ahead_units"), notices = stat("write_notices_created");
    for (int p = 0; p < written; ++p)
      for (int w = 0; w < k_words_per_page; w += 64) at(p, w) = p * 1000 + w + 1;
    CHECK(stat("write_faults") - faults < 10);
    CHECK(stat("write_ahead_units") - ahead >= written - 10);
    const auto unused = stat("write_ahead_unused");
    box.send(1, annotation::release);
    CHECK(stat("write_notices_created") - notices == written);
    CHECK(stat("write_ahead_unused") - unused > 0);
  } else if (me == 1) {
    box.wait(1, 0);
    const auto reads = stat("read_faults");
    for (int p = written; p < pages; ++p) CHECK(at(p, 0) == 0);  // nothing announced there: no fault
    CHECK(stat("read_faults") - reads == 0);
    for (int p = 0; p < written; ++p)
      for (int w = 0; w < k_words_per_page; w += 64) REQUIRE(at(p, w) == p * 1000 + w + 1);
  }
  b.arrive_and_wait();
  if (me == 1)
    for (int p = 30; p < 60; ++p) at(p, 7) = -p;
  if (me == 0)
    for (int p = 30; p < 60; ++p) at(p, 9) = p;  // a second run over the same units, concurrently
  b.arrive_and_wait();
  for (int p = 30; p < 60; ++p) {
    CHECK(at(p, 7) == -p);
    CHECK(at(p, 9) == p);
    if (p < written) CHECK(at(p, 0) == p * 1000 + 1);
  }
  b.arrive_and_wait();
}

TEST_CASE("litmus 46: a unit made writable ahead, then invalidated and read, announces nothing and loses nothing",
          "[mpi][litmus][np2+]") {
  // Rank 0's run of write faults over pages 0-2 makes pages 3-10 writable ahead. Before rank 0
  // closes its interval, rank 1's RELEASE brings notices for pages 5 and 6 (rank 1 wrote word 3 of
  // each); rank 0 reads page 5 (its speculative twin is diffed: empty, so not announced) and
  // writes page 6 (a real write). At rank 0's release exactly pages 0-2 and 6 are announced, and
  // rank 1 sees all of rank 0's writes and keeps its own.
  session s;
  mailbox box("litmus.box");
  constexpr int pages = 16;
  const paged_ints at(pages);  // valid read-only copies everywhere
  const int me = mdsm::rank();
  mdsm::barrier b;
  b.arrive_and_wait();
  if (me == 0) {
    const auto notices = stat("write_notices_created"), ahead = stat("write_ahead_units"),
               unused = stat("write_ahead_unused");
    for (int p = 0; p < 3; ++p) at(p, 1) = 10 + p;
    CHECK(stat("write_ahead_units") - ahead >= 7);  // pages 2..9 at least
    box.send(1, annotation::none);  // "made writable ahead"
    box.wait(1, 1);                 // rank 1's notices for pages 5 and 6
    CHECK(at(5, 3) == 53);
    CHECK(at(6, 3) == 63);
    at(6, 1) = 16;
    box.send(1, annotation::release);
    CHECK(stat("write_notices_created") - notices == 4);
    CHECK(stat("write_ahead_unused") - unused >= 5);  // 3, 4, 5 (diffed empty), 7, 8, ...
  } else if (me == 1) {
    box.wait(1, 0);
    at(5, 3) = 53;
    at(6, 3) = 63;
    box.send(0, annotation::release);
    box.wait(2, 0);
    for (int p = 0; p < 3; ++p) CHECK(at(p, 1) == 10 + p);
    CHECK(at(6, 1) == 16);
    CHECK(at(5, 1) == 0);
    CHECK(at(5, 3) == 53);
    CHECK(at(6, 3) == 63);
  }
  b.arrive_and_wait();
}

TEST_CASE("litmus 54: walks written in turn each get their write-ahead; overshoots into another writer's units announce nothing",
          "[mpi][litmus][np2+]") {
  // Rank 0 writes four runs of 30 pages in turn, a page of each run after the other (as a radix
  // sort scatters into one bucket per digit): each run's write faults make its next units
  // writable ahead although the faults of the four runs alternate, so far fewer than 120 write
  // faults happen. The windows overshoot each run's end into pages 30-49 of its stretch of 50,
  // where rank 1 writes other words at the same time: exactly 120 notices from rank 0, and both
  // ranks read both ranks' words.
  session s;
  constexpr int runs = 4, stretch = 50, run_pages = 30, pages = runs * stretch;
  const paged_ints at(pages);  // valid read-only copies everywhere
  const int me = mdsm::rank();
  mdsm::barrier b;
  b.arrive_and_wait();
  const auto faults = stat("write_faults"), ahead = stat("write_ahead_units"), notices = stat("write_notices_created");
  if (me == 0) {
    for (int i = 0; i < run_pages; ++i)
      for (int r = 0; r < runs; ++r) at(r * stretch + i, 3) = r * 1000 + i + 1;
    CHECK(stat("write_faults") - faults < 40);  // 120 with one walk remembered at a time
    CHECK(stat("write_ahead_units") - ahead >= 80);
  } else if (me == 1) {
    for (int r = 0; r < runs; ++r)
      for (int i = run_pages; i < stretch; ++i) at(r * stretch + i, 5) = -(r * 1000 + i);
  }
  b.arrive_and_wait();
  if (me == 0) CHECK(stat("write_notices_created") - notices == runs * run_pages);
  for (int r = 0; r < runs; ++r)
    for (int i = 0; i < stretch; ++i) {
      const int p = r * stretch + i;
      REQUIRE(at(p, 3) == (i < run_pages ? r * 1000 + i + 1 : 0));
      REQUIRE(at(p, 5) == (i < run_pages ? 0 : -(r * 1000 + i)));
    }
  b.arrive_and_wait();
}

TEST_CASE("litmus 55: a block walked again in the next interval opens ahead as hot; a walk stopping short loses nothing",
          "[mpi][litmus][np2+]") {
  // Rank 0 writes pages 0-59 in one interval, then walks pages 0-39 again in the next. Those
  // units still hold their twins (the diffs are lazy), so they cannot be opened speculatively;
  // the second walk opens them ahead as written (hot) and takes far fewer than 40 write faults.
  // The window overshoots into pages 40-59, written in the first interval only, where rank 1
  // writes another word at the same time (and into pages 60-69, never written by rank 0). Every
  // rank then reads every word, after a quiet interval too, and rank 0 reads rank 1's next write
  // to a unit it keeps open.
  session s;
  constexpr int pages = 100, first = 60, second = 40;
  const paged_ints at(pages);  // valid read-only copies everywhere
  const int me = mdsm::rank();
  mdsm::barrier b;
  b.arrive_and_wait();
  if (me == 0)
    for (int p = 0; p < first; ++p) at(p, 0) = p + 1;
  b.arrive_and_wait();
  if (me == 0) {
    const auto faults = stat("write_faults");
    for (int p = 0; p < second; ++p) at(p, 1) = p + 100;
    CHECK(stat("write_faults") - faults < 10);  // 40 when only untwinned units were opened ahead
  } else if (me == 1) {
    for (int p = second; p < 70; ++p) at(p, 5) = -p;
  }
  b.arrive_and_wait();
  auto check_all = [&] {
    for (int p = 0; p < pages; ++p) {
      REQUIRE(at(p, 0) == (p < first ? p + 1 : 0));
      REQUIRE(at(p, 1) == (p < second ? p + 100 : 0));
      REQUIRE(at(p, 5) == (p >= second && p < 70 ? -p : 0));
    }
  };
  check_all();
  b.arrive_and_wait();  // an interval in which nobody writes
  check_all();
  if (me == 1) at(45, 6) = 4545;
  b.arrive_and_wait();
  CHECK(at(45, 6) == 4545);
  check_all();
  b.arrive_and_wait();
}

TEST_CASE("litmus 47: the window ahead of a walk (prefetch) with notices, a free and a collection while in flight",
          "[mpi][litmus][np2+]") {
  // Rank 1 walks rank 0's pages; each fault that continues the walk asks for the next window
  // without waiting for it (the last reply installs it). While such a window may still be in
  // flight: (a) rank 0 rewrites its pages and releases to rank 1, which must then read the new
  // values whether the window's (older) diffs arrive before or after the notices; (b) both ranks
  // free the array and allocate another in its place, whose values rank 1 must read, not the old
  // array's; (c) a collection runs. Every round checks every page.
  session s;
  mailbox box("litmus.prefetch");
  constexpr int pages = 256;
  const int me = mdsm::rank();
  int* a = mdsm::alloc_collective_array<int>(pages * k_words_per_page);
  auto value = [](int round, int p) { return round * 1000 + p; };
  auto write_all = [&](int* m, int round) {
    for (int p = 0; p < pages; ++p) m[p * k_words_per_page + 5] = value(round, p);
  };
  auto read_range = [&](const int* m, int round, int first, int last) {
    for (int p = first; p < last; ++p) REQUIRE(m[p * k_words_per_page + 5] == value(round, p));
  };
  int messages = 0;  // from rank 0 to rank 1, and back
  world_barrier();
  const auto prefetches = stat("prefetches");
  // (a) Rank 1 reads pages 0-47 (faults at 0 and 16, the second asks for 48-79 ahead), then lets
  // rank 0 rewrite everything at once; its next reads are of the new round.
  if (me == 0) {
    write_all(a, 1);
    box.send(1, annotation::release);
    box.wait(++messages, 1);
    write_all(a, 2);
    box.send(1, annotation::release);
  } else if (me == 1) {
    box.wait(++messages, 0);
    read_range(a, 1, 0, 48);
    box.send(0, annotation::none);
    box.wait(++messages, 0);
    read_range(a, 2, 0, pages);
  }
  world_barrier();
  // (b) A walk, then a free and an allocation at once: the new array's values only.
  if (me == 0) {
    write_all(a, 3);
    box.send(1, annotation::release);
  } else if (me == 1) {
    box.wait(++messages, 0);
    read_range(a, 3, 0, 48);
  }
  mdsm::free_collective(a);
  int* b = mdsm::alloc_collective_array<int>(pages * k_words_per_page);
  if (me == 0) {
    write_all(b, 4);
    box.send(1, annotation::release);
  } else if (me == 1) {
    box.wait(++messages, 0);
    read_range(b, 4, 0, pages);
  }
  world_barrier();
  // (c) A walk, then a collection of every rank's metadata, then the rest of the walk.
  if (me == 0) {
    write_all(b, 5);
    box.send(1, annotation::release);
  } else if (me == 1) {
    box.wait(++messages, 0);
    read_range(b, 5, 0, 48);
  }
  mdsm::gc();
  if (me == 1) {
    read_range(b, 5, 48, pages);
    CHECK(stat("prefetches") - prefetches >= 3);
  }
  world_barrier();
  mdsm::free_collective(b);
}

TEST_CASE("litmus 48: a background collection's cut while a fetch is under way that lacks a notice up to the cut",
          "[mpi][litmus][np2+]") {
  // Rank 1 owns a page (its arena: rank 0 fetches copies of it from rank 1). Each round, rank 0
  // reads word 0 in fiber A: the fetch asks for what rank 0 knows then, and A waits for it.
  // Fiber B, run meanwhile, lets rank 1 write word 1 and release to rank 0 (accepted in the
  // handler): a notice the fetch did not ask for. Then rank 1 lowers its collection threshold,
  // writes word 2 and releases again: that release asks for a background collection, whose cut
  // covers the notice of word 1. B keeps the thread (no yield) until the cut has come, so A ends
  // its fetch only after the cut. The collection must then drop or refetch the copy: it forgets
  // every notice up to the cut, and a copy still lacking one would read 0 for word 1 forever (a
  // random DRF program did, under TSan).
  session s;
  mailbox box("litmus.cut");
  const int me = mdsm::rank();
  const std::uint64_t threshold = mdsm::gc_threshold();
  constexpr int rounds = 12;
  if (me == 1) {
    for (int k = 1; k <= rounds; ++k) {
      int* p = mdsm::alloc_array<int>(k_words_per_page);
      p[0] = k;
      box.send(0, annotation::release, reinterpret_cast<long>(p));
      box.wait(k, 0);  // rank 0's fiber A is fetching
      p[1] = k;
      box.send(0, annotation::release);
      const auto before = stat("gc_background_runs");
      mdsm::set_gc_threshold(1);
      p[2] = k;
      box.send(0, annotation::release);  // asks for a collection
      const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      mdsm::wait_until([&] { return stat("gc_background_runs") > before || std::chrono::steady_clock::now() > until; });
      mdsm::set_gc_threshold(threshold);
    }
  } else if (me == 0) {
    for (int k = 1; k <= rounds; ++k) {
      box.wait(3 * k - 2, 1);
      const auto* p = reinterpret_cast<const int*>(box.values().back());
      int first = -1;
      mdsm::fibers::spawn([&] { first = p[0]; });
      mdsm::fibers::spawn([&] {
        box.send(1, annotation::none);
        const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
        while (box.values().size() < static_cast<std::size_t>(3 * k) && std::chrono::steady_clock::now() < until)
          std::this_thread::sleep_for(std::chrono::milliseconds(1));
        std::this_thread::sleep_for(std::chrono::milliseconds(30));  // the collection's cut
      });
      mdsm::fibers::run();
      CHECK(first == k);
      CHECK(p[1] == k);
      CHECK(p[2] == k);
    }
    CHECK(stat("gc_background_runs") >= 1);
  }
  world_barrier();
}

// ---- private units: a unit no other rank has a copy of is plain memory at its home -----------

TEST_CASE("litmus 49: a rank's own allocation is private until a copy goes out: no fault, twin or notice before",
          "[mpi][litmus][np2+]") {
  // Rank 0 allocates in its own arena (no other rank has a copy of it), rewrites it in three
  // intervals: none of that costs a fault, a twin or a write notice. The first copy served ends
  // it (exactly the units served), and rank 0's writes after that reach rank 1 as usual.
  session s;
  mailbox box("litmus.box");
  constexpr int pages = 8, words = pages * k_words_per_page;
  const int me = mdsm::rank();
  if (me == 0) {
    const auto faults = stat("write_faults"), twins = stat("twins_created"), notices = stat("write_notices_created");
    const auto shared = stat("private_units_shared");
    int* p = mdsm::alloc_array<int>(words);
    for (int round = 1; round <= 3; ++round) {
      for (int i = 0; i < words; ++i) p[i] = round * 100000 + i;
      box.send(1, annotation::release);  // closes an interval; p is not announced
    }
    CHECK(stat("write_faults") == faults);
    CHECK(stat("twins_created") == twins);
    CHECK(stat("write_notices_created") == notices);
    box.send(1, annotation::release, reinterpret_cast<long>(p));
    box.wait(1, 1);  // rank 1 read every page: copies served
    CHECK(stat("private_units_shared") - shared == pages);
    p[7] = -7;  // recorded the ordinary way now
    p[words - 3] = -3;
    CHECK(stat("write_faults") - faults == 2);
    CHECK(stat("twins_created") - twins == 2);
    box.send(1, annotation::release);
    box.wait(2, 1);
  } else if (me == 1) {
    box.wait(4, 0);
    const int* p = reinterpret_cast<const int*>(box.values().back());
    int wrong = 0;
    for (int i = 0; i < words; ++i) wrong += p[i] == 300000 + i ? 0 : 1;
    CHECK(wrong == 0);
    box.send(0, annotation::none);
    box.wait(5, 0);
    wrong = 0;
    for (int i = 0; i < words; ++i) wrong += p[i] == (i == 7 ? -7 : i == words - 3 ? -3 : 300000 + i) ? 0 : 1;
    CHECK(wrong == 0);
    box.send(0, annotation::none);
  }
  world_barrier();
}

TEST_CASE("litmus 50: the home writing private units while their first copies are served loses no write",
          "[mpi][litmus][np2+]") {
  // Rank 0 writes new words of eight private pages one by one while rank 1 fetches them (a racy
  // read: rank 1 only wants the copies to go out). A word written after the copy was taken must
  // still reach rank 1 at the next RELEASE: the pages are write-protected before their bytes are
  // copied, so such a write faults and is recorded against a twin made after the copy. Several
  // rounds, each with fresh pages.
  session s;
  mailbox box("litmus.box");
  constexpr int pages = 8, words = pages * k_words_per_page, rounds = 10;  // ~40 ms of writes per round
  const int me = mdsm::rank();
  auto word = [](int k) { return (k % pages) * k_words_per_page + k / pages; };  // across the pages in turn
  if (me == 0) {
    int straddled = 0;  // rounds in which rank 1 fetched while rank 0 was still writing
    for (int round = 0; round < rounds; ++round) {
      int* p = mdsm::alloc_array<int>(words);
      box.send(1, annotation::none, reinterpret_cast<long>(p));
      int k = 0;
      for (; k < words && box.values().size() < static_cast<std::size_t>(2 * round + 1); ++k) {
        p[word(k)] = k + round;
        const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(5);
        while (std::chrono::steady_clock::now() < until) {
        }
      }
      straddled += k < words ? 1 : 0;
      for (; k < words; ++k) p[word(k)] = k + round;
      box.wait(2 * round + 1, 1);
      box.send(1, annotation::release);
      box.wait(2 * round + 2, 1);
    }
    CHECK(straddled > 0);
  } else if (me == 1) {
    for (int round = 0; round < rounds; ++round) {
      box.wait(2 * round + 1, 0);
      const int* p = reinterpret_cast<const int*>(box.values().back());
      volatile int racy = p[0];  // fetches the copies (rank 0 is writing them)
      (void)racy;
      box.send(0, annotation::none);
      box.wait(2 * round + 2, 0);
      int wrong = 0;
      for (int k = 0; k < words; ++k) wrong += p[word(k)] == k + round ? 0 : 1;
      CHECK(wrong == 0);
      box.send(0, annotation::none);
    }
  }
  world_barrier();
}

TEST_CASE("litmus 51: private writes reach a rank two RELEASEs away, and so do the recorded writes after",
          "[mpi][litmus][np3+]") {
  // No notice was ever made of rank 0's private writes, so nothing tells rank 2 its copy lacks
  // them: it has none, and the copy it fetches holds them. Rank 1, in the middle, never reads
  // until the second round, which rank 0 writes after its units were copied out.
  MDSM_NEED_RANKS(3);
  session s;
  mailbox box("litmus.box");
  const int me = mdsm::rank();
  constexpr int words = 2 * k_words_per_page;
  if (me == 0) {
    int* p = mdsm::alloc_array<int>(words);
    for (int i = 0; i < words; ++i) p[i] = i;
    box.send(1, annotation::release, reinterpret_cast<long>(p));
    box.wait(1, 2);  // rank 2 read it
    for (int i = 0; i < words; i += 3) p[i] = -i;
    box.send(1, annotation::release);
  } else if (me == 1) {
    box.wait(1, 0);
    box.send(2, annotation::release, box.values().back());
    box.wait(2, 0);
    const int* p = reinterpret_cast<const int*>(box.values().front());
    int wrong = 0;
    for (int i = 0; i < words; ++i) wrong += p[i] == (i % 3 == 0 ? -i : i) ? 0 : 1;
    CHECK(wrong == 0);
    box.send(2, annotation::release);
  } else if (me == 2) {
    box.wait(1, 1);
    const int* p = reinterpret_cast<const int*>(box.values().back());
    int wrong = 0;
    for (int i = 0; i < words; ++i) wrong += p[i] == i ? 0 : 1;
    CHECK(wrong == 0);
    box.send(0, annotation::none);
    box.wait(2, 1);
    wrong = 0;
    for (int i = 0; i < words; ++i) wrong += p[i] == (i % 3 == 0 ? -i : i) ? 0 : 1;
    CHECK(wrong == 0);
  }
  world_barrier();
}

TEST_CASE("litmus 52: a unit copied out once is never private again (freed and allocated again, collected)",
          "[mpi][litmus][np2+]") {
  // Rank 1 keeps its copy of a unit rank 0 frees and allocates again: if rank 0 wrote the new
  // allocation as private (without notices), rank 1 would read its stale copy. A collection in
  // between changes nothing about that, nor about a unit still private.
  session s;
  mailbox box("litmus.box");
  const int me = mdsm::rank();
  if (me == 0) {
    int* p = mdsm::alloc_array<int>(k_words_per_page);
    for (int i = 0; i < k_words_per_page; ++i) p[i] = 1;
    box.send(1, annotation::release, reinterpret_cast<long>(p));
    box.wait(1, 1);  // rank 1 holds a copy
    mdsm::free(p);
    int* q = mdsm::alloc_array<int>(k_words_per_page);
    REQUIRE(q == p);  // first fit: the same unit
    for (int i = 0; i < k_words_per_page; ++i) q[i] = 2;
    box.send(1, annotation::release, reinterpret_cast<long>(q));
    box.wait(2, 1);
  } else if (me == 1) {
    box.wait(1, 0);
    const int* p = reinterpret_cast<const int*>(box.values().back());
    CHECK(p[0] == 1);
    CHECK(p[k_words_per_page - 1] == 1);
    box.send(0, annotation::none);
    box.wait(2, 0);
    int wrong = 0;
    for (int i = 0; i < k_words_per_page; ++i) wrong += p[i] == 2 ? 0 : 1;
    CHECK(wrong == 0);
    box.send(0, annotation::none);
  }
  world_barrier();

  int* r = nullptr;
  const auto faults = stat("write_faults");
  if (me == 0) {
    r = mdsm::alloc_array<int>(k_words_per_page);
    r[0] = 10;
  }
  mdsm::gc();
  if (me == 0) {
    r[1] = 11;  // still private after the collection
    CHECK(stat("write_faults") == faults);
    box.send(1, annotation::release, reinterpret_cast<long>(r));
    box.wait(3, 1);
  } else if (me == 1) {
    box.wait(3, 0);
    const int* q = reinterpret_cast<const int*>(box.values().back());
    CHECK(q[0] == 10);
    CHECK(q[1] == 11);
    box.send(0, annotation::none);
  }
  world_barrier();
}

TEST_CASE("litmus 53: shortest paths with rows released one by one, read by ranks the writers never hear from",
          "[mpi][litmus][np3+]") {
  // apsp hybrid's pattern (Floyd-Warshall without barriers), with a check a racy program allows.
  // 64 nodes, rows in blocks per rank, so each of the 4 pages holds rows of two ranks. In step k
  // the owner of row k + 1 relaxes it first and releases it to every other rank (a stored
  // message, accepted when the row is needed), then every rank relaxes its other rows through
  // row k. The owner rewrites row k later while others read it; values only shrink, so a reader
  // accepting row k's release must see every entry at most what sequential Floyd-Warshall has
  // after step k - 1. Relaxing writes only the entries that shrink: sparse rewrites end hot
  // stretches (checked every 2nd close) and start new ones all the time. Before the fix, a
  // snapshot diff made while a close was opening a hot range (its interval not yet published as
  // closed) was served as holding the whole range; a third rank then never fetched the next
  // snapshot and read rows stale. A race (apsp hybrid at 3 ranks failed about 1 run in 60): the
  // program runs over 150 graphs, with diffs fetched rather than pushed and a prompt server,
  // which made 40 graphs fail 6 times in 20 before the fix.
  MDSM_NEED_RANKS(3);
  scoped_env hot("MDSM_HOT_UNIT_INTERVALS", "2");
  scoped_env no_push("MDSM_PUSH_DIFFS", "0");
  scoped_env prompt("MDSM_PROGRESS_SLEEP_MAX_US", "50");
  session s;
  constexpr int n = 64, graphs = 150;
  constexpr std::int32_t inf = 1 << 29;
  const int me = mdsm::rank(), ranks = mdsm::size();
  auto owner = [&](int row) { return static_cast<int>(static_cast<long>(row) * ranks / n); };
  auto weight = [](int g, int i, int j) -> std::int32_t {
    if (i == j) return 0;
    std::uint64_t x = (static_cast<std::uint64_t>(g) * 4096 + static_cast<std::uint64_t>(i) * 64 +
                       static_cast<std::uint64_t>(j)) * 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    x ^= x >> 31;
    return x % 5 != 0 ? inf : static_cast<std::int32_t>(1 + (x >> 16) % 100);
  };
  auto relax = [](std::int32_t* row_i, const std::int32_t* row_k, int k) {
    const std::int32_t dik = row_i[k];
    if (dik >= inf) return;
    for (int j = 0; j < n; ++j)
      if (dik + row_k[j] < row_i[j]) row_i[j] = dik + row_k[j];
  };

  std::mutex mu;
  std::map<std::pair<int, int>, mdsm::stored_message> arrived;  // (graph * (n + 1) + step, origin)
  auto h = mdsm::register_handler("litmus.rows", [&](mdsm::message& m) {
    std::lock_guard lk(mu);
    arrived.emplace(std::make_pair(m.as<int>(), m.origin()), m.store());
  });
  auto release_row = [&](int tag) {
    for (int r = 0; r < ranks; ++r)
      if (r != me) mdsm::send_value(r, h, tag, annotation::release);
  };
  auto accept_row = [&](int tag, int from) {
    mdsm::wait_until([&] {
      std::lock_guard lk(mu);
      return arrived.count({tag, from}) != 0;
    });
    mdsm::stored_message m;
    {
      std::lock_guard lk(mu);
      auto it = arrived.find({tag, from});
      m = std::move(it->second);
      arrived.erase(it);
    }
    m.accept();
  };
  mdsm::barrier bar;

  int stale = 0, wrong = 0;
  for (int g = 0; g < graphs; ++g) {
    // after[k]: the matrix sequential Floyd-Warshall has after steps 0 .. k - 1.
    std::vector<std::vector<std::int32_t>> after(n + 1, std::vector<std::int32_t>(n * n));
    for (int i = 0; i < n; ++i)
      for (int j = 0; j < n; ++j) after[0][i * n + j] = weight(g, i, j);
    for (int k = 0; k < n; ++k) {
      after[k + 1] = after[k];
      for (int i = 0; i < n; ++i)
        if (i != k) relax(&after[k + 1][i * n], &after[k + 1][k * n], k);
    }
    std::int32_t* d = mdsm::alloc_collective_array<std::int32_t>(n * n);
    for (int i = 0; i < n; ++i)
      if (owner(i) == me)
        for (int j = 0; j < n; ++j) d[i * n + j] = weight(g, i, j);
    bar.arrive_and_wait();
    const int tag = g * (n + 1);
    if (owner(0) == me) release_row(tag);
    for (int k = 0; k < n; ++k) {
      if (owner(k) != me) {
        accept_row(tag + k, owner(k));
        for (int j = 0; j < n; ++j) stale += d[k * n + j] > after[k][k * n + j] ? 1 : 0;
      }
      const std::int32_t* row_k = d + k * n;
      const int next = k + 1;
      if (next < n && owner(next) == me) {
        relax(d + next * n, row_k, k);
        release_row(tag + next);
      }
      for (int i = 0; i < n; ++i)
        if (owner(i) == me && i != next && i != k) relax(d + i * n, row_k, k);
    }
    bar.arrive_and_wait();
    for (int w = 0; w < n * n; ++w) wrong += d[w] == after[n][w] ? 0 : 1;
    bar.arrive_and_wait();
  }
  CHECK(stale == 0);
  CHECK(wrong == 0);
  world_barrier();
}
