// Coordination objects created by one rank (handles) across real ranks: locks kept in shared
// structs in coherent memory, one lock per array element made by different ranks, semaphores,
// condition variables and counted barriers made by one rank and used by all, the cached-token
// fast path, destroy by any rank, and misuse (destroy while in use, use after destroy, null
// handles), from C++ and from C.
#include "support/session.hpp"

#include <mdsm/mdsm.h>

#include <cstdint>
#include <mutex>
#include <random>
#include <string>
#include <vector>

using namespace mdsm_test;

namespace {
// Sum over all ranks of the user messages sent (every annotation) plus forwards.
std::uint64_t user_messages() {
  const auto t = mdsm::statistics_total();
  return t.at("msgs_sent_none") + t.at("msgs_sent_request") + t.at("msgs_sent_release") +
         t.at("msgs_sent_release_nt") + t.at("msgs_forwarded");
}

// What a SPLASH-style program keeps in shared memory: a lock next to the data it protects.
struct guarded_counter {
  mdsm::mutex_handle lock;
  long count;
  long untouched;
};

struct cell {
  mdsm::mutex_handle lock;
  long value;
};

// The rank that created a handle's object (the high half of its id, mdsm.hpp).
int handle_creator_of(mdsm::mutex_handle h) { return static_cast<int>((h.id() >> 32) - 1); }
}  // namespace

TEST_CASE("mutex_handle: made by one rank inside a struct it allocated, used by every rank", "[sync][handles][np2+]") {
  session s;
  const int me = mdsm::rank(), n = mdsm::size();
  constexpr int k = 200;
  mdsm::barrier b;
  auto** root = mdsm::alloc_collective_array<guarded_counter*>(1);
  const int creator = n - 1;
  if (me == creator) {
    auto* g = mdsm::alloc_array<guarded_counter>(1);  // this rank's arena, not collective
    g->lock = mdsm::mutex_handle::create();
    g->count = 0;
    g->untouched = 7;
    *root = g;
  }
  b.arrive_and_wait();
  guarded_counter* g = *root;
  REQUIRE(g != nullptr);
  for (int i = 0; i < k; ++i) {
    std::lock_guard lk(g->lock);  // the handle is read from coherent memory on every call
    const long v = g->count;
    g->count = v + 1;
  }
  b.arrive_and_wait();
  CHECK(g->count == static_cast<long>(n) * k);
  CHECK(g->untouched == 7);
  const mdsm::mutex_handle h = g->lock;
  b.arrive_and_wait();
  if (me == 0) h.destroy();  // by a rank that did not create it
  b.arrive_and_wait();
  CHECK_THROWS_MATCHES(h.lock(), mdsm::error, code_is(MDSM_ERR_INVALID_HANDLE));
  b.arrive_and_wait();
  if (me == creator) mdsm::free(g);
}

TEST_CASE("mutex_handle: one lock per array element, made by different ranks, random increments",
          "[sync][handles][np2+]") {
  session s;
  const int me = mdsm::rank(), n = mdsm::size();
  constexpr int cells = 61, k = 300;
  mdsm::barrier b;
  auto* a = mdsm::alloc_collective_array<cell>(cells);
  for (int i = me; i < cells; i += n) {  // each rank makes the locks of its part
    a[i].lock = mdsm::mutex_handle::create();
    a[i].value = 0;
  }
  b.arrive_and_wait();
  std::vector<long> mine(cells, 0);
  std::mt19937 rng(static_cast<unsigned>(1234 + me));
  for (int j = 0; j < k; ++j) {
    const int i = static_cast<int>(rng() % cells);
    const mdsm::mutex_handle h = a[i].lock;
    CHECK(handle_creator_of(h) == i % n);
    h.lock();
    a[i].value = a[i].value + 1;
    h.unlock();
    ++mine[static_cast<std::size_t>(i)];
  }
  b.arrive_and_wait();
  long total = 0;
  for (int i = 0; i < cells; ++i) {
    total += a[i].value;
    CHECK(a[i].value == world_sum(mine[static_cast<std::size_t>(i)]));
  }
  CHECK(total == static_cast<long>(n) * k);
  b.arrive_and_wait();
  for (int i = me; i < cells; i += n) a[(i + 1) % cells].lock.destroy();  // any rank may destroy
  b.arrive_and_wait();
  for (int i = 0; i < cells; ++i)
    CHECK_THROWS_MATCHES(a[i].lock.try_lock(), mdsm::error, code_is(MDSM_ERR_INVALID_HANDLE));
  b.arrive_and_wait();
}

TEST_CASE("semaphore_handle: made by one rank, permits carry the releasers' writes", "[sync][handles][np2+]") {
  session s;
  const int me = mdsm::rank(), n = mdsm::size();
  constexpr int rounds = 5;
  mdsm::barrier b;
  auto* slot = mdsm::alloc_collective_array<mdsm::semaphore_handle>(1);
  auto* data = mdsm::alloc_collective_array<long>(static_cast<std::size_t>(n));
  if (me == n - 1) *slot = mdsm::semaphore_handle::create(0);
  b.arrive_and_wait();
  const mdsm::semaphore_handle sem = *slot;
  for (int round = 1; round <= rounds; ++round) {
    if (me != 0) {
      data[me] = round * 1000 + me;
      sem.release();
    } else {
      for (int r = 1; r < n; ++r) sem.acquire();
      for (int r = 1; r < n; ++r) CHECK(data[r] == round * 1000 + r);  // every releaser's write
    }
    b.arrive_and_wait();
  }
  if (me == 0) {
    CHECK_FALSE(sem.try_acquire());
    sem.release(2);
    CHECK(sem.try_acquire());
    CHECK(sem.try_acquire());
    CHECK_FALSE(sem.try_acquire());
  }
  b.arrive_and_wait();
  if (me == 0) sem.destroy();
  b.arrive_and_wait();
  CHECK_THROWS_MATCHES(sem.acquire(), mdsm::error, code_is(MDSM_ERR_INVALID_HANDLE));
  if (me == n - 1) CHECK_THROWS_MATCHES(sem.release(), mdsm::error, code_is(MDSM_ERR_INVALID_HANDLE));
  if (me == 0 && n - 1 != 0) {
    // A release after destroy: nobody waits for it, so the sender's next call reports it.
    sem.release();
    CHECK_THROWS_MATCHES(mdsm::wait_until([] { return false; }), mdsm::error, code_is(MDSM_ERR_INVALID_HANDLE));
  }
  b.arrive_and_wait();
  // Never destroyed, with unclaimed permits at finalize (as pthreads programs leave them): given
  // up quietly when the session ends.
  if (me == 0) *slot = mdsm::semaphore_handle::create(0);
  b.arrive_and_wait();
  slot->release(2);
  b.arrive_and_wait();
}

TEST_CASE("condition_handle: waiters made consistent through the mutex handle", "[sync][handles][np2+]") {
  session s;
  const int me = mdsm::rank(), n = mdsm::size();
  mdsm::barrier b;
  struct shared {
    mdsm::mutex_handle m;
    mdsm::condition_handle cv;
    long arrived;
    long go;
    long payload[8];
  };
  auto* sh = mdsm::alloc_collective_array<shared>(1);
  if (me == 0) sh->m = mdsm::mutex_handle::create();
  if (me == 1 % n) sh->cv = mdsm::condition_handle::create();
  if (me == 0) sh->arrived = sh->go = 0;
  b.arrive_and_wait();
  const mdsm::mutex_handle m = sh->m;
  const mdsm::condition_handle cv = sh->cv;
  // Everyone but rank 0 reports in; rank 0 waits for all of them.
  if (me != 0) {
    std::lock_guard lk(m);
    sh->payload[me % 8] += 1;
    sh->arrived = sh->arrived + 1;
    cv.notify_all();
  } else {
    std::unique_lock lk(m);
    cv.wait(m, [&] { return sh->arrived == n - 1; });
    long sum = 0;
    for (long v : sh->payload) sum += v;
    CHECK(sum == n - 1);  // the writes made under the lock before notifying
    sh->go = 42;
    cv.notify_all();
  }
  // Rank 0 lets everyone go; the others wait for it (possibly all at once).
  if (me != 0) {
    m.lock();
    cv.wait(m, [&] { return sh->go != 0; });
    CHECK(sh->go == 42);
    m.unlock();
  }
  b.arrive_and_wait();
  CHECK_THROWS_MATCHES(cv.wait(m), mdsm::error, code_is(MDSM_ERR_NOT_HELD));
  b.arrive_and_wait();
  if (me == n - 1) {
    cv.destroy();
    m.destroy();
  }
  b.arrive_and_wait();
  CHECK_THROWS_MATCHES(m.lock(), mdsm::error, code_is(MDSM_ERR_INVALID_HANDLE));
  b.arrive_and_wait();
}

TEST_CASE("barrier_handle: all ranks, made by one rank: writes visible after it, 2(N-1) messages",
          "[sync][handles][np2+]") {
  session s;
  const int me = mdsm::rank(), n = mdsm::size();
  auto* slot = mdsm::alloc_collective_array<mdsm::barrier_handle>(1);
  auto* slots = mdsm::alloc_collective_array<int>(static_cast<std::size_t>(n));
  mdsm::barrier setup;
  if (me == n - 1) *slot = mdsm::barrier_handle::create(n);
  setup.arrive_and_wait();
  const mdsm::barrier_handle b = *slot;
  for (int round = 1; round <= 20; ++round) {
    slots[me] = round * 100 + me;
    b.arrive_and_wait();
    for (int r = 0; r < n; ++r) CHECK(slots[r] == round * 100 + r);
    b.arrive_and_wait();
  }
  world_barrier();
  const auto before = mdsm::statistics_total();
  world_barrier();
  b.arrive_and_wait();  // the manager takes part: as the collective barrier
  world_barrier();
  const auto after = mdsm::statistics_total();
  CHECK(after.at("msgs_sent_release_nt") - before.at("msgs_sent_release_nt") == static_cast<std::uint64_t>(n - 1));
  CHECK(after.at("msgs_sent_release") - before.at("msgs_sent_release") == static_cast<std::uint64_t>(n - 1));
  CHECK(after.at("msgs_forwarded") - before.at("msgs_forwarded") == 0);
  setup.arrive_and_wait();
  if (me == 0) b.destroy();
  setup.arrive_and_wait();
  CHECK_THROWS_MATCHES(b.arrive_and_wait(), mdsm::error, code_is(MDSM_ERR_INVALID_HANDLE));
  setup.arrive_and_wait();
}

TEST_CASE("barrier_handle: fewer participants than ranks, its manager not among them", "[sync][handles][np2+]") {
  session s;
  const int me = mdsm::rank(), n = mdsm::size();
  auto* slot = mdsm::alloc_collective_array<mdsm::barrier_handle>(2);
  auto* data = mdsm::alloc_collective_array<long>(2);
  mdsm::barrier setup;
  // Two participants, ranks 0 and 1; the manager is the last rank (at 2 ranks: rank 1, taking
  // part; from 3 ranks on it is not, and the episode's last arrival collects it).
  if (me == n - 1) {
    slot[0] = mdsm::barrier_handle::create(2);
    slot[1] = mdsm::barrier_handle::create(1);
  }
  setup.arrive_and_wait();
  const mdsm::barrier_handle pair = slot[0], alone = slot[1];
  if (me < 2) {
    for (int round = 1; round <= 30; ++round) {
      data[me] = round * 10 + me;
      pair.arrive_and_wait();
      CHECK(data[1 - me] == round * 10 + (1 - me));
      pair.arrive_and_wait();
    }
  }
  alone.arrive_and_wait();  // one participant: every arrival is an episode of its own
  alone.arrive_and_wait();
  world_barrier();
  const auto before = mdsm::statistics_total();
  world_barrier();
  if (me < 2) pair.arrive_and_wait();
  world_barrier();
  const auto after = mdsm::statistics_total();
  const auto delta = [&](const char* c) { return after.at(c) - before.at(c); };
  CHECK(delta("msgs_sent_release_nt") == (n >= 3 ? 2u : 1u));  // the arrivals
  CHECK(delta("msgs_forwarded") == (n >= 3 ? 1u : 0u));        // to the collector
  CHECK(delta("msgs_sent_release") == 1u);                     // the departure
  setup.arrive_and_wait();
  if (me == 0) {
    pair.destroy();
    alone.destroy();
  }
  setup.arrive_and_wait();
}

TEST_CASE("mutex_handle: re-locking on the rank that last held it sends nothing", "[sync][handles][np2+]") {
  session s;
  const int me = mdsm::rank(), n = mdsm::size();
  auto* slot = mdsm::alloc_collective_array<mdsm::mutex_handle>(1);
  mdsm::barrier setup;
  if (me == n - 1) *slot = mdsm::mutex_handle::create();  // free at its manager
  setup.arrive_and_wait();
  const mdsm::mutex_handle m = *slot;
  world_barrier();
  auto before = user_messages();
  if (me == 0) {  // a rank that never used it: its state is made here, on first use
    m.lock();
    m.unlock();
  }
  world_barrier();
  CHECK(user_messages() - before == 2);  // REQUEST to the manager, RELEASE grant
  before = user_messages();
  if (me == 0)
    for (int i = 0; i < 100; ++i) {
      m.lock();
      m.unlock();
    }
  world_barrier();
  CHECK(user_messages() - before == 0);  // the token stays cached here
  if (n >= 3) {
    before = user_messages();
    if (me == 1) {
      m.lock();  // cached at rank 0: the manager forwards the REQUEST there
      m.unlock();
    }
    world_barrier();
    CHECK(user_messages() - before == 3);
  }
  setup.arrive_and_wait();
  if (me == 0) m.destroy();
  setup.arrive_and_wait();
}

TEST_CASE("handles: destroy while in use is BUSY and leaves the object usable; null and destroyed handles fail",
          "[sync][handles][np2+]") {
  session s;
  const int me = mdsm::rank(), n = mdsm::size();
  mdsm::barrier b;
  auto* slot = mdsm::alloc_collective_array<mdsm::mutex_handle>(1);
  auto* bslot = mdsm::alloc_collective_array<mdsm::barrier_handle>(1);
  auto* counter = mdsm::alloc_collective_array<long>(1);
  if (me == 0) {
    *slot = mdsm::mutex_handle::create();
    *bslot = mdsm::barrier_handle::create(2);
    *counter = 0;
  }
  b.arrive_and_wait();
  const mdsm::mutex_handle m = *slot;
  // Held by rank 1: every rank's destroy is refused, the holder's own too.
  if (me == 1) m.lock();
  b.arrive_and_wait();
  CHECK_THROWS_MATCHES(m.destroy(), mdsm::error, code_is(MDSM_ERR_BUSY));
  b.arrive_and_wait();
  if (me == 1) {
    ++*counter;
    m.unlock();
  }
  b.arrive_and_wait();
  {
    std::lock_guard lk(m);  // still usable after the refused destroys
    ++*counter;
  }
  b.arrive_and_wait();
  CHECK(*counter == n + 1);
  // Waited on: rank 1 is in the counted barrier, whose manager (rank 0) tries to destroy it.
  const mdsm::barrier_handle pair = *bslot;
  const auto stored_before = mdsm::statistic("msgs_stored");
  world_barrier();  // MPI only: rank 0 stores no message until rank 1's arrival
  if (me == 1) pair.arrive_and_wait();
  if (me == 0) {
    mdsm::wait_until([&] { return mdsm::statistic("msgs_stored") > stored_before; });  // rank 1's arrival is in
    CHECK_THROWS_MATCHES(pair.destroy(), mdsm::error, code_is(MDSM_ERR_BUSY));
    pair.arrive_and_wait();
    pair.destroy();
  }
  world_barrier();
  b.arrive_and_wait();
  if (me == n - 1) m.destroy();
  b.arrive_and_wait();
  CHECK_THROWS_MATCHES(m.lock(), mdsm::error, code_is(MDSM_ERR_INVALID_HANDLE));
  CHECK_THROWS_MATCHES(m.destroy(), mdsm::error, code_is(MDSM_ERR_INVALID_HANDLE));
  CHECK_THROWS_MATCHES(pair.arrive_and_wait(), mdsm::error, code_is(MDSM_ERR_INVALID_HANDLE));
  // Null handles and bad arguments.
  CHECK_THROWS_MATCHES(mdsm::mutex_handle{}.lock(), mdsm::error, code_is(MDSM_ERR_INVALID_HANDLE));
  CHECK_THROWS_MATCHES(mdsm::semaphore_handle{}.release(), mdsm::error, code_is(MDSM_ERR_INVALID_HANDLE));
  CHECK_THROWS_MATCHES(mdsm::condition_handle{}.notify_one(), mdsm::error, code_is(MDSM_ERR_INVALID_HANDLE));
  CHECK_THROWS_MATCHES(mdsm::barrier_handle{}.arrive_and_wait(), mdsm::error, code_is(MDSM_ERR_INVALID_HANDLE));
  CHECK_THROWS_MATCHES(mdsm::barrier_handle::create(0), mdsm::error, code_is(MDSM_ERR_INVALID_ARGUMENT));
  CHECK_THROWS_MATCHES(mdsm::semaphore_handle::create(-1), mdsm::error, code_is(MDSM_ERR_INVALID_ARGUMENT));
  CHECK_FALSE(mdsm::mutex_handle{});
  b.arrive_and_wait();
}

TEST_CASE("C API: handles made by one rank, a counter under a lock, and misuse", "[sync][handles][capi][np2+]") {
  session s;
  const int me = mdsm::rank(), n = mdsm::size();
  mdsm_barrier* b = nullptr;
  REQUIRE(mdsm_barrier_create(nullptr, 0, &b) == MDSM_SUCCESS);
  struct shared {
    mdsm_mutex_handle m;
    mdsm_barrier_handle bar;
    int counter;
  };
  auto* sh = mdsm::alloc_collective_array<shared>(1);
  if (me == 0) {
    REQUIRE(mdsm_mutex_handle_create(&sh->m) == MDSM_SUCCESS);
    REQUIRE(mdsm_barrier_handle_create(n, &sh->bar) == MDSM_SUCCESS);
    sh->counter = 0;
  }
  REQUIRE(mdsm_barrier_wait(b) == MDSM_SUCCESS);
  const mdsm_mutex_handle m = sh->m;
  for (int i = 0; i < 50; ++i) {
    REQUIRE(mdsm_mutex_handle_lock(m) == MDSM_SUCCESS);
    ++sh->counter;
    REQUIRE(mdsm_mutex_handle_unlock(m) == MDSM_SUCCESS);
  }
  CHECK(mdsm_mutex_handle_unlock(m) == MDSM_ERR_NOT_HELD);
  REQUIRE(mdsm_barrier_handle_wait(sh->bar) == MDSM_SUCCESS);
  CHECK(sh->counter == 50 * n);
  if (me == n - 1) REQUIRE(mdsm_mutex_handle_lock(m) == MDSM_SUCCESS);
  REQUIRE(mdsm_barrier_handle_wait(sh->bar) == MDSM_SUCCESS);
  if (me == 0) {
    CHECK(mdsm_mutex_handle_destroy(m) == MDSM_ERR_BUSY);
    CHECK(std::string(mdsm_last_error()).find("held") != std::string::npos);
  }
  REQUIRE(mdsm_barrier_handle_wait(sh->bar) == MDSM_SUCCESS);
  if (me == n - 1) {
    REQUIRE(mdsm_mutex_handle_unlock(m) == MDSM_SUCCESS);
    REQUIRE(mdsm_mutex_handle_destroy(m) == MDSM_SUCCESS);
  }
  REQUIRE(mdsm_barrier_handle_wait(sh->bar) == MDSM_SUCCESS);
  CHECK(mdsm_mutex_handle_lock(m) == MDSM_ERR_INVALID_HANDLE);
  CHECK(std::string(mdsm_last_error()).find("destroyed") != std::string::npos);
  const mdsm_mutex_handle null_mutex{};
  CHECK(mdsm_mutex_handle_lock(null_mutex) == MDSM_ERR_INVALID_HANDLE);
  CHECK(std::string(mdsm_last_error()).find("null") != std::string::npos);
  CHECK(mdsm_cond_handle_signal(mdsm_cond_handle{}) == MDSM_ERR_INVALID_HANDLE);
  CHECK(mdsm_mutex_handle_create(nullptr) == MDSM_ERR_INVALID_ARGUMENT);
  CHECK(mdsm_barrier_handle_create(0, nullptr) == MDSM_ERR_INVALID_ARGUMENT);
  mdsm_semaphore_handle sem{};
  CHECK(mdsm_semaphore_handle_create(-1, &sem) == MDSM_ERR_INVALID_ARGUMENT);
  CHECK(std::string(mdsm_strerror(MDSM_ERR_INVALID_HANDLE)).find("handle") != std::string::npos);
  REQUIRE(mdsm_barrier_handle_wait(sh->bar) == MDSM_SUCCESS);
  if (me == 0) CHECK(mdsm_barrier_handle_destroy(sh->bar) == MDSM_SUCCESS);
  REQUIRE(mdsm_barrier_wait(b) == MDSM_SUCCESS);
  CHECK(mdsm_barrier_destroy(b) == MDSM_SUCCESS);
}
