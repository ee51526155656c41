// Coordination primitives across real ranks: mutual exclusion, grant order, try_lock by
// lending, semaphores, condition variables, barriers (global and subset), the work queue with
// termination, and the message counts each operation costs.
#include "support/mailbox.hpp"
#include "support/session.hpp"

#include <mdsm/mdsm.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <thread>
#include <mutex>
#include <memory>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

using namespace mdsm_test;

namespace {
// Sum over all ranks of the user messages sent (every annotation) plus forwards.
std::uint64_t user_messages() {
  const auto t = mdsm::statistics_total();
  return t.at("msgs_sent_none") + t.at("msgs_sent_request") + t.at("msgs_sent_release") +
         t.at("msgs_sent_release_nt") + t.at("msgs_forwarded");
}
}  // namespace

TEST_CASE("mutex: N ranks x K increments end at N*K", "[sync][np2+]") {
  session s;
  const int n = mdsm::size();
  constexpr int k = 200;
  mdsm::mutex m;
  mdsm::barrier b;
  auto* counter = mdsm::alloc_collective_array<long>(2);  // [0] guarded, [1] never touched
  if (mdsm::rank() == 0) counter[0] = counter[1] = 0;
  b.arrive_and_wait();
  for (int i = 0; i < k; ++i) {
    std::lock_guard g(m);
    const long v = counter[0];
    counter[0] = v + 1;
  }
  b.arrive_and_wait();
  CHECK(counter[0] == static_cast<long>(n) * k);
  CHECK(counter[1] == 0);
  b.arrive_and_wait();
}

TEST_CASE("mutex: grants follow request order, through forwarding", "[sync][np3+]") {
  MDSM_NEED_RANKS(3);
  session s;
  const int me = mdsm::rank(), n = mdsm::size();
  std::atomic<int> go{0};
  const auto go_h = mdsm::register_handler("test.sync.go", [&](mdsm::message&) { go.store(1); });
  mdsm::mutex m(0);
  mdsm::barrier b;
  auto* log = mdsm::alloc_collective_array<int>(static_cast<std::size_t>(n) + 1);  // [0] = length
  if (me == 0) {
    std::fill(log, log + n + 1, 0);
    m.lock();
  }
  b.arrive_and_wait();
  if (me == 0) {
    const auto base = mdsm::statistics().at("msgs_received_request");
    // Let ranks request one after another, each only once the previous request reached us.
    for (int r = n - 1; r >= 1; --r) {
      mdsm::send(r, go_h, {}, mdsm::annotation::none);
      const auto want = base + static_cast<std::uint64_t>(n - r);
      mdsm::wait_until([&] { return mdsm::statistics().at("msgs_received_request") >= want; });
    }
    m.unlock();
  } else {
    mdsm::wait_until([&] { return go.load() == 1; });
    std::lock_guard g(m);
    log[1 + log[0]] = me;
    ++log[0];
  }
  b.arrive_and_wait();
  REQUIRE(log[0] == n - 1);
  for (int i = 0; i < n - 1; ++i) CHECK(log[1 + i] == n - 1 - i);  // requested from n-1 down to 1
  b.arrive_and_wait();
}

TEST_CASE("mutex: try_lock fails while held, lends a free lock, and the loan carries writes", "[sync][np2+]") {
  session s;
  const int me = mdsm::rank(), n = mdsm::size();
  mdsm::mutex m(0);
  mdsm::barrier b;
  auto* x = mdsm::alloc_collective_array<int>(1);
  if (me == 0) {
    *x = 0;
    m.lock();
  }
  b.arrive_and_wait();
  if (me == 1) CHECK_FALSE(m.try_lock());
  b.arrive_and_wait();
  if (me == 0) {
    *x = 10;
    m.unlock();
  }
  b.arrive_and_wait();
  if (me == 1) {
    REQUIRE(m.try_lock());  // the free token at rank 0 is lent
    CHECK(*x == 10);
    *x = 11;
    m.unlock();  // returned to rank 0
  }
  b.arrive_and_wait();
  // Every rank in turn sees all earlier writes through the lock.
  for (int r = 0; r < n; ++r) {
    if (me == r) {
      std::lock_guard g(m);
      CHECK(*x == 11 + r);
      *x = 12 + r;
    }
    b.arrive_and_wait();
  }
}

TEST_CASE("mutex: the lender locks while its token is lent, with and without a queued rank", "[sync][np2+]") {
  // Rank 1 borrows rank 0's free token (try_lock). While it holds the loan, rank 0 -- and with
  // 3+ ranks also rank 2 -- call lock(): rank 0's own request must not queue it behind itself,
  // and the returning token must reach every waiter exactly once, in whatever order.
  session s;
  const int me = mdsm::rank(), n = mdsm::size();
  const int lockers = n > 2 ? 2 : 1;
  mdsm::mutex m(0);
  mdsm::barrier b;
  auto* x = mdsm::alloc_collective_array<int>(1);
  std::atomic<int> notes{0};
  auto note = mdsm::register_handler("test.note", [&](mdsm::message&) { ++notes; });
  b.arrive_and_wait();
  if (me == 1) {
    REQUIRE(m.try_lock());
    *x = 1;
    for (int r : {0, 2})
      if (r < n) mdsm::send(r, note, {}, mdsm::annotation::none);
    mdsm::wait_until([&] { return notes.load() == lockers; });  // both are about to lock
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // let their requests queue
    m.unlock();  // the loan returns to rank 0
  } else if (me == 0 || me == 2) {
    mdsm::wait_until([&] { return notes.load() == 1; });
    mdsm::send(1, note, {}, mdsm::annotation::none);
    m.lock();
    CHECK(*x >= 1);
    *x += 1;
    m.unlock();
  }
  b.arrive_and_wait();
  CHECK(*x == 1 + lockers);
  b.arrive_and_wait();
  // The lock keeps working for everybody afterwards, with all writes visible.
  for (int r = 0; r < n; ++r) {
    if (me == r) {
      std::lock_guard g(m);
      CHECK(*x == 1 + lockers + r);
      *x += 1;
    }
    b.arrive_and_wait();
  }
}

TEST_CASE("mutex: locking a mutex this thread holds is an error, not a deadlock", "[sync][np2+]") {
  session s;
  mdsm::mutex m;
  mdsm::barrier b;
  if (mdsm::rank() == 1) {
    m.lock();
    try {
      m.lock();
      FAIL("a recursive lock succeeded");
    } catch (const mdsm::error& e) {
      CHECK(e.code() == MDSM_ERR_BUSY);
    }
    CHECK(m.held());
    m.unlock();
  }
  b.arrive_and_wait();
}

namespace {
// Runs f; the code of the mdsm::error it throws and its message ("" and MDSM_SUCCESS if none).
template <class F>
std::pair<mdsm_status, std::string> error_of(F&& f) {
  try {
    f();
  } catch (const mdsm::error& e) {
    return {e.code(), e.what()};
  }
  return {MDSM_SUCCESS, ""};
}

// Lets messages in flight arrive (rank 1's request, its barrier arrival) before going on.
void settle(int ms) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
  while (std::chrono::steady_clock::now() < until) mdsm::poll();
}
}  // namespace

TEST_CASE("destroying a mutex or barrier while another rank waits on it ends that wait with BUSY",
          "[sync][np2+]") {
  // Before, the waiter waited forever for a grant or departure, and every destroyer for the
  // waiter in the destroy's collective: the job hung without a word (issue 19, item 4).
  setenv("MDSM_DESTROY_GRACE_MS", "500", 1);  // the default, 10 s, would only make this slow
  session s;
  unsetenv("MDSM_DESTROY_GRACE_MS");
  const int me = mdsm::rank();
  {
    auto m = std::make_unique<mdsm::mutex>(0);
    if (me == 0) m->lock();
    world_barrier();
    if (me == 1) {
      const auto [code, what] = error_of([&] { m->lock(); });  // rank 0 destroys it meanwhile
      CHECK(code == MDSM_ERR_BUSY);
      CHECK(what.find("mutex::lock: mutex #") != std::string::npos);
      CHECK(what.find("was destroyed by rank") != std::string::npos);
      CHECK_FALSE(m->held());
    } else if (me == 0) {
      settle(50);
    }
    m.reset();  // every rank; rank 0's while it holds it and rank 1 waits
    if (me == 0) CHECK(error_of([] { mdsm::poll(); }).first == MDSM_ERR_BUSY);  // "destroyed while held"
  }
  world_barrier();
  {
    auto b = std::make_unique<mdsm::barrier>();
    world_barrier();
    if (me == 1) {
      const auto [code, what] = error_of([&] { b->arrive_and_wait(); });  // alone in it
      CHECK(code == MDSM_ERR_BUSY);
      CHECK(what.find("was destroyed by rank") != std::string::npos);
    } else {
      settle(50);
    }
    b.reset();
    (void)error_of([] { mdsm::poll(); });  // the barrier's manager may report the arrival it held
  }
  world_barrier();
  // Destroyed with nobody waiting: no error anywhere, and the objects still work until then.
  {
    mdsm::mutex m;
    mdsm::barrier b;
    m.lock();
    m.unlock();
    b.arrive_and_wait();
  }
  CHECK(error_of([] { mdsm::poll(); }).first == MDSM_SUCCESS);
  world_barrier();
}

TEST_CASE("a handler's error while a coordination call waits is reported after it; the object stays usable",
          "[sync][np2+]") {
  // Before, the error was thrown out of the middle of the wait: the barrier stayed marked entered
  // (BUSY forever) while the other ranks hung, the next mutex::lock hung, semaphore::try_acquire
  // failed with BUSY forever (issue 19, item 2). Now the call completes and the next one reports.
  session s;
  const int me = mdsm::rank();
  // Returns without disposing of its RELEASE: MDSM_ERR_NOT_DISPOSED is recorded on the receiver.
  const auto drop = mdsm::register_handler("test.sync.drop", [](mdsm::message&) {});
  const auto provoke = [&](int victim) {  // the other rank of 0/1, while the victim waits
    settle(150);
    mdsm::send(victim, drop, {}, mdsm::annotation::release);
    settle(150);
  };
  const auto reported_next = [] { return error_of([] { mdsm::poll(); }).first; };
  auto* counter = static_cast<long*>(mdsm::alloc_collective(sizeof(long)));
  if (me == 0) *counter = 0;
  mdsm::barrier b;
  mdsm::mutex m(0);
  mdsm::semaphore sem(0, 0);
  mdsm::work_queue q(mdsm::work_queue::order::fifo, 0);
  b.arrive_and_wait();

  for (int victim : {0, 1}) {  // the barrier's and the objects' manager (0), and another rank (1)
    const int helper = 1 - victim;
    INFO("victim rank " << victim);
    // barrier
    if (me == helper) provoke(victim);
    if (me == victim) {
      CHECK(error_of([&] { b.arrive_and_wait(); }).first == MDSM_SUCCESS);
      CHECK(reported_next() == MDSM_ERR_NOT_DISPOSED);
    } else {
      b.arrive_and_wait();
    }
    b.arrive_and_wait();
    b.arrive_and_wait();

    // mutex: the victim waits for the helper's unlock
    if (me == helper) m.lock();
    b.arrive_and_wait();
    if (me == helper) {
      provoke(victim);
      m.unlock();
    } else if (me == victim) {
      CHECK(error_of([&] { m.lock(); }).first == MDSM_SUCCESS);
      CHECK(m.held());
      // unlock does not report it: it runs in destructors (std::lock_guard)
      if (m.held()) CHECK(error_of([&] { m.unlock(); }).first == MDSM_SUCCESS);
      CHECK(reported_next() == MDSM_ERR_NOT_DISPOSED);
    }
    for (int i = 0; i < 20; ++i) {
      std::lock_guard lk(m);
      ++*counter;
    }
    b.arrive_and_wait();

    // semaphore: the victim waits for the helper's permit
    if (me == helper) {
      provoke(victim);
      sem.release();
    } else if (me == victim) {
      CHECK(error_of([&] { sem.acquire(); }).first == MDSM_SUCCESS);
      CHECK(reported_next() == MDSM_ERR_NOT_DISPOSED);
      bool got = true;
      CHECK(error_of([&] { got = sem.try_acquire(); }).first == MDSM_SUCCESS);
      CHECK_FALSE(got);
    }
    b.arrive_and_wait();

    // work queue: the victim waits for the helper's item
    if (me == helper) {
      provoke(victim);
      q.push_value(41 + victim);
    } else if (me == victim) {
      std::optional<int> item;
      CHECK(error_of([&] { item = q.pop_value<int>(); }).first == MDSM_SUCCESS);
      CHECK(item == std::optional<int>(41 + victim));
      CHECK(reported_next() == MDSM_ERR_NOT_DISPOSED);
    }
    b.arrive_and_wait();
  }
  {
    std::lock_guard lk(m);
    CHECK(*counter == 2 * 20 * mdsm::size());
  }
  CHECK(reported_next() == MDSM_SUCCESS);
  b.arrive_and_wait();
}

TEST_CASE("mutex: message counts of uncontended remote acquires", "[sync][np3+]") {
  MDSM_NEED_RANKS(3);
  session s;
  const int me = mdsm::rank();
  mdsm::mutex m(0);  // free at its manager
  world_barrier();
  auto before = user_messages();
  if (me == 1) {
    m.lock();
    m.unlock();
  }
  world_barrier();
  CHECK(user_messages() - before == 2);  // REQUEST to the manager, RELEASE grant
  before = user_messages();
  if (me == 2) {
    m.lock();  // the token is cached at rank 1: manager forwards the REQUEST there
    m.unlock();
  }
  world_barrier();
  CHECK(user_messages() - before == 3);
  before = user_messages();
  if (me == 2) {
    m.lock();  // cached here now: no messages at all
    m.unlock();
  }
  world_barrier();
  CHECK(user_messages() - before == 0);
}

TEST_CASE("barrier: every rank's writes are visible to all, and it costs 2(N-1) messages", "[sync][np2+]") {
  session s;
  const int me = mdsm::rank(), n = mdsm::size();
  mdsm::barrier b;
  auto* slots = mdsm::alloc_collective_array<int>(static_cast<std::size_t>(n));  // one page: false sharing
  for (int round = 1; round <= 20; ++round) {
    slots[me] = round * 100 + me;
    b.arrive_and_wait();
    for (int r = 0; r < n; ++r) CHECK(slots[r] == round * 100 + r);
    b.arrive_and_wait();
  }
  world_barrier();
  const auto before = mdsm::statistics_total();
  world_barrier();
  b.arrive_and_wait();
  world_barrier();
  const auto after = mdsm::statistics_total();
  // Arrivals to the manager (RELEASE_NT) and departures (RELEASE); two members send each other
  // their arrivals as RELEASEs instead.
  const auto arrivals = static_cast<std::uint64_t>(n == 2 ? 0 : n - 1);
  CHECK(after.at("msgs_sent_release_nt") - before.at("msgs_sent_release_nt") == arrivals);
  CHECK(after.at("msgs_sent_release") - before.at("msgs_sent_release") == static_cast<std::uint64_t>(2 * (n - 1)) - arrivals);
}

namespace {
// `rounds` rounds in which every rank writes its share of words (a[i] for i = rank mod ranks) and
// meets the others at `b`, which must collect garbage each time (gc_runs counts up from
// `gc_runs_before`); then every rank reads every word back, and a second barrier keeps the next
// round's writes after the reads.
void collecting_rounds(mdsm::barrier& b, int* a, std::size_t words, int rounds, std::uint64_t gc_runs_before) {
  const auto me = static_cast<std::size_t>(mdsm::rank()), n = static_cast<std::size_t>(mdsm::size());
  for (int round = 1; round <= rounds; ++round) {
    for (std::size_t i = me; i < words; i += n) a[i] = round * 7 + static_cast<int>(i);
    b.arrive_and_wait();
    CHECK(stat("gc_runs") == gc_runs_before + static_cast<std::uint64_t>(round));
    int bad = 0;
    for (std::size_t i = 0; i < words; ++i) bad += a[i] != round * 7 + static_cast<int>(i);
    CHECK(bad == 0);
    b.arrive_and_wait();
  }
}
}  // namespace

TEST_CASE("barrier: collects garbage once metadata passes MDSM_GC_THRESHOLD, values intact", "[sync][gc][np2+]") {
  // Only the barrier collects here (at this threshold the background collection would run between
  // the barriers and leave some of them nothing to collect); region tests cover that one.
  setenv("MDSM_BACKGROUND_GC", "0", 1);
  session s;
  unsetenv("MDSM_BACKGROUND_GC");
  mdsm::barrier b;
  constexpr std::size_t pages = 16, words = pages * 1024;
  auto* a = mdsm::alloc_collective_array<int>(words);
  mdsm::set_gc_threshold(1);  // any metadata at all
  collecting_rounds(b, a, words, 5, 0);
  mdsm::set_gc_threshold(0);
  CHECK(mdsm::gc_threshold() == 0);
  b.arrive_and_wait();
  CHECK(stat("gc_runs") == 5u);  // 0: never
}

TEST_CASE("barrier: a rank whose metadata passes its own threshold makes every rank collect", "[sync][gc][np2+]") {
  // A rank's threshold is its own (mdsm.hpp): here only rank 1 would ever ask, and rank 0 -- the
  // manager at 3-4 ranks, the other member of the pair at 2 -- never would. Before, the manager
  // compared every arrival's metadata with its own threshold (no collection here at 3-4 ranks),
  // and the two members of a pair, deciding each by its own, would have disagreed: one in gc(),
  // the other gone on.
  setenv("MDSM_BACKGROUND_GC", "0", 1);
  session s;
  unsetenv("MDSM_BACKGROUND_GC");
  const int me = mdsm::rank();
  mdsm::barrier b;
  constexpr std::size_t words = 4 * 1024;
  auto* a = mdsm::alloc_collective_array<int>(words);
  mdsm::set_gc_threshold(me == 1 ? 1 : 0);
  b.arrive_and_wait();
  const std::uint64_t before = stat("gc_runs");
  collecting_rounds(b, a, words, 3, before);
  mdsm::set_gc_threshold(0);
  a[me] = -1;
  b.arrive_and_wait();
  CHECK(stat("gc_runs") == before + 3);  // nobody asks
}

TEST_CASE("gc threshold: the default grows with collective allocations; a set one stays", "[sync][gc][np2+]") {
  unsetenv("MDSM_GC_THRESHOLD");
  {
    session s;
    constexpr std::uint64_t mib = std::uint64_t{1} << 20, floor = 64 * mib;
    CHECK(mdsm::gc_threshold() == floor);
    auto* small = mdsm::alloc_collective(8 * mib);
    CHECK(mdsm::gc_threshold() == floor);  // the default is never below 64 MiB
    auto* large = mdsm::alloc_collective(96 * mib);
    CHECK(mdsm::gc_threshold() >= 104 * mib);  // every collectively allocated byte (padding too)
    CHECK(mdsm::gc_threshold() < 105 * mib);
    mdsm::free_collective(large);
    CHECK(mdsm::gc_threshold() == floor);
    mdsm::set_gc_threshold(16 * mib);  // a threshold set by the program is the threshold
    large = mdsm::alloc_collective(96 * mib);
    CHECK(mdsm::gc_threshold() == 16 * mib);
    mdsm::free_collective(large);
    mdsm::free_collective(small);
  }
  setenv("MDSM_GC_THRESHOLD", "32M", 1);
  session s;
  unsetenv("MDSM_GC_THRESHOLD");
  auto* large = mdsm::alloc_collective(std::size_t{96} << 20);
  CHECK(mdsm::gc_threshold() == std::uint64_t{32} << 20);  // so is one set in the environment
  mdsm::free_collective(large);
}

TEST_CASE("barrier: a subset of ranks synchronizes among itself", "[sync][np3+]") {
  MDSM_NEED_RANKS(3);
  session s;
  const int me = mdsm::rank(), n = mdsm::size();
  const std::vector<int> evens = [&] {
    std::vector<int> v;
    for (int r = 0; r < n; r += 2) v.push_back(r);
    return v;
  }();
  mdsm::barrier sub(evens);
  mdsm::barrier all;
  auto* slots = mdsm::alloc_collective_array<int>(static_cast<std::size_t>(n));
  slots[me] = 0;
  all.arrive_and_wait();
  if (me % 2 == 0) {
    for (int round = 1; round <= 10; ++round) {
      slots[me] = round;
      sub.arrive_and_wait();
      for (int r : evens) CHECK(slots[r] == round);
      sub.arrive_and_wait();
    }
  } else {
    CHECK_THROWS_MATCHES(sub.arrive_and_wait(), mdsm::error, Catch::Predicate<mdsm::error>([](const mdsm::error& e) {
                           return e.code() == MDSM_ERR_INVALID_ARGUMENT;
                         }));
  }
  all.arrive_and_wait();
}

TEST_CASE("barrier: two members in quick succession; an arrival for the next barrier waits for it", "[sync][np2+]") {
  // Two members send each other their arrivals. A member that leaves a barrier may send its
  // arrival at the next one before the other has taken in its arrival at this one: each barrier
  // must take the arrival of its own epoch. Rank 1 stalls now and then, so both orders occur.
  // (Ranks 0 and 1 only; at 3-4 ranks the others watch.)
  session s;
  const int me = mdsm::rank(), other = 1 - me;
  const std::vector<int> pair{0, 1};
  mdsm::barrier b(pair);
  auto* words = mdsm::alloc_collective_array<long>(2);  // one page, both written every round
  if (me > 1) return;
  words[me] = 0;
  b.arrive_and_wait();
  int wrong = 0;
  for (long round = 1; round <= 400; ++round) {
    words[me] = round;
    if (me == 1 && round % 7 == 0) std::this_thread::sleep_for(std::chrono::microseconds(300));
    b.arrive_and_wait();
    wrong += words[other] != round;
    b.arrive_and_wait();  // both have read before the next round writes
  }
  CHECK(wrong == 0);
}

TEST_CASE("barrier: two members exchange arrivals, and an arrival carries a third rank's writes", "[sync][np3+]") {
  // The two members of a barrier send each other their arrivals (no manager). Each round: rank 2
  // writes a word and RELEASEs it to rank 0, which accepts it before arriving; ranks 0 and 1
  // write other words of the same page; after the pair's barrier both see all three words --
  // rank 1 sees rank 2's through rank 0's arrival, which must carry what rank 0 acquired.
  MDSM_NEED_RANKS(3);
  session s;
  mailbox box("sync.pair_box");
  const int me = mdsm::rank();
  const std::vector<int> pair{0, 1};
  mdsm::barrier two(pair);
  mdsm::barrier all;
  auto* words = mdsm::alloc_collective_array<long>(3);
  all.arrive_and_wait();
  constexpr int rounds = 20;
  for (int round = 1; round <= rounds; ++round) {
    if (me == 2) {
      words[2] = 2000 + round;
      box.send(0, mdsm::annotation::release);
    } else if (me <= 1) {
      words[me] = 1000 * me + round;
      if (me == 0) box.wait(round, 2);
      two.arrive_and_wait();
      REQUIRE(words[0] == round);
      REQUIRE(words[1] == 1000 + round);
      REQUIRE(words[2] == 2000 + round);
      two.arrive_and_wait();  // both have read before the next round writes
    }
    all.arrive_and_wait();
  }
}

TEST_CASE("semaphore: permits carry the releaser's writes", "[sync][np2+]") {
  session s;
  const int me = mdsm::rank(), n = mdsm::size();
  mdsm::semaphore sem(0, 0);
  mdsm::semaphore initial(1);
  mdsm::barrier b;
  auto* data = mdsm::alloc_collective_array<int>(static_cast<std::size_t>(n));
  if (me != 0) CHECK_FALSE(sem.try_acquire());
  b.arrive_and_wait();
  if (me != 0) {
    data[me] = 1000 + me;
    sem.release();
  } else {
    for (int i = 1; i < n; ++i) sem.acquire();
    for (int r = 1; r < n; ++r) CHECK(data[r] == 1000 + r);  // each permit brought its writer's data
  }
  b.arrive_and_wait();
  // The initial permit: exactly one rank gets it with try_acquire... then it is released again.
  const bool got = initial.try_acquire();
  CHECK(world_sum(got ? 1 : 0) == 1);
  b.arrive_and_wait();
  if (got) initial.release();
  b.arrive_and_wait();
}

TEST_CASE("condition variable: producer and consumers over a bounded buffer", "[sync][np2+]") {
  session s;
  const int me = mdsm::rank(), n = mdsm::size();
  constexpr int items = 300, cap = 4;
  struct buffer {
    int head, tail, count, done;
    long sum;
    int slots[cap];
  };
  mdsm::mutex m(0);
  mdsm::condition_variable not_empty, not_full;
  mdsm::barrier b;
  auto* buf = mdsm::alloc_collective_array<buffer>(1);
  if (me == 0) *buf = buffer{};
  b.arrive_and_wait();
  if (me == 0) {
    for (int i = 1; i <= items; ++i) {
      std::unique_lock lk(m);
      not_full.wait(lk, [&] { return buf->count < cap; });
      buf->slots[buf->tail] = i;
      buf->tail = (buf->tail + 1) % cap;
      ++buf->count;
      not_empty.notify_one();
    }
    std::unique_lock lk(m);
    buf->done = 1;
    not_empty.notify_all();
  }
  if (me != 0 || n == 1) {
    for (;;) {
      std::unique_lock lk(m);
      not_empty.wait(lk, [&] { return buf->count > 0 || buf->done; });
      if (buf->count == 0) break;
      buf->sum += buf->slots[buf->head];
      buf->head = (buf->head + 1) % cap;
      --buf->count;
      not_full.notify_one();
    }
  }
  b.arrive_and_wait();
  CHECK(buf->sum == static_cast<long>(items) * (items + 1) / 2);
  b.arrive_and_wait();
}

TEST_CASE("work queue: 100,000 items carrying pointers, none lost or duplicated, then termination",
          "[sync][np2+]") {
  session s;
  const int me = mdsm::rank(), n = mdsm::size();
  constexpr int total = 100000;
  const int per = total / n + (me < total % n ? 1 : 0);
  const int first = me * (total / n) + std::min(me, total % n);
  struct item {
    const long* data;
    int id;
  };
  mdsm::work_queue q;
  auto* data = mdsm::alloc_array<long>(static_cast<std::size_t>(per));
  for (int i = 0; i < per; ++i) data[i] = 7L * (first + i) + 3;
  for (int i = 0; i < per; ++i) q.push_value(item{data + i, first + i});
  std::vector<int> got;
  int bad = 0;
  while (auto it = q.pop_value<item>()) {
    if (*it->data != 7L * it->id + 3) ++bad;
    got.push_back(it->id);
  }
  CHECK(bad == 0);
  // Gather every id at rank 0: each exactly once.
  int mine = static_cast<int>(got.size());
  std::vector<int> counts(static_cast<std::size_t>(n)), displs(static_cast<std::size_t>(n));
  MPI_Gather(&mine, 1, MPI_INT, counts.data(), 1, MPI_INT, 0, MPI_COMM_WORLD);
  std::partial_sum(counts.begin(), counts.end() - 1, displs.begin() + 1);
  std::vector<int> all(me == 0 ? total : 0);
  if (me == 0) REQUIRE(std::accumulate(counts.begin(), counts.end(), 0) == total);
  MPI_Gatherv(got.data(), mine, MPI_INT, all.data(), counts.data(), displs.data(), MPI_INT, 0, MPI_COMM_WORLD);
  if (me == 0) {
    std::sort(all.begin(), all.end());
    for (int i = 0; i < total; ++i)
      if (all[static_cast<std::size_t>(i)] != i) FAIL("item " << i << " lost or duplicated");
  }
  world_barrier();
  mdsm::free(data);
}

TEST_CASE("work stack: LIFO order at the manager, termination with an empty stack", "[sync][np2+]") {
  session s;
  const int me = mdsm::rank();
  mdsm::work_queue st(mdsm::work_queue::order::lifo, 0);
  mdsm::barrier b;
  if (me == 0) {
    for (int i = 0; i < 5; ++i) st.push_value(i);
    b.arrive_and_wait();
    b.arrive_and_wait();
    for (int i = 4; i >= 0; --i) CHECK(st.pop_value<int>() == i);
    b.arrive_and_wait();  // only now do the others pop: a pop request arriving earlier would get an item
    CHECK_FALSE(st.pop_value<int>().has_value());
  } else {
    b.arrive_and_wait();
    b.arrive_and_wait();
    b.arrive_and_wait();
    CHECK_FALSE(st.pop().has_value());  // terminates once rank 0 waits on the empty stack
  }
  world_barrier();
}

TEST_CASE("work stack with locality: a rank gets its own newest item first, another's only when it has none",
          "[sync][np2+]") {
  session s;
  const int me = mdsm::rank(), n = mdsm::size();
  mdsm::work_queue st(mdsm::work_queue::order::lifo_local, 0);
  mdsm::barrier b;
  int* data = mdsm::alloc_collective_array<int>(static_cast<std::size_t>(n) * 4);
  // Every rank but the manager pushes three items, then pops three: its own, newest first, though
  // the other ranks' items are newer still (per-sender order: its pushes reach the manager before
  // its pop requests, and nobody else takes them, having items of its own).
  if (me != 0) {
    for (int i = 0; i < 3; ++i) {
      data[me * 4 + i] = me * 10 + i;
      st.push_value(me * 10 + i);
    }
    for (int i = 2; i >= 0; --i) {
      const auto v = st.pop_value<int>();
      REQUIRE(v.has_value());
      CHECK(*v == me * 10 + i);
    }
  }
  b.arrive_and_wait();
  // The manager, with no item of its own, gets rank 1's, and sees what rank 1 wrote before pushing.
  if (me == 0) {
    const auto v = st.pop_value<int>();
    REQUIRE(v.has_value());
    CHECK(*v == 1000);
    CHECK(data[3] == 77);
  } else if (me == 1) {
    data[3] = 77;
    st.push_value(1000);
  }
  b.arrive_and_wait();
  CHECK_FALSE(st.pop().has_value());  // every rank waits on the empty stack: terminated
  world_barrier();
}

TEST_CASE("work queue: the manager's own push is not lost when it pops while every other rank waits",
          "[sync][np2+]") {
  // The manager's pop is handled in place but its push travels to itself as a message; the round
  // must not end while that push is in flight (the item would be lost and pop() return nullopt).
  session s;
  const int me = mdsm::rank();
  for (int round = 0; round < 20; ++round) {
    mdsm::work_queue q(mdsm::work_queue::order::fifo, 0);
    int got = 0;
    if (me == 0) {
      // Let the others' pop requests reach the manager first.
      const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(20);
      while (std::chrono::steady_clock::now() < until) mdsm::poll();
      q.push_value(round);
    }
    while (auto v = q.pop_value<int>()) {
      CHECK(*v == round);
      ++got;
    }
    int total = 0;
    MPI_Allreduce(&got, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    CHECK(total == 1);
  }
  world_barrier();
}

TEST_CASE("work queue: items that take no time are shared between the manager and remote poppers",
          "[sync][np2+]") {
  // The manager's own pops are served in place, a remote pop costs a round trip: with items that
  // take no time the manager took ~99.99% of them (issue 19, item 9). Every rank that keeps
  // popping must get a fair share whatever the items cost.
  session s;
  const int me = mdsm::rank(), n = mdsm::size();
  constexpr int k_items = 10000;
  mdsm::work_queue q(mdsm::work_queue::order::fifo, 0);
  if (me == 0)
    for (int i = 0; i < k_items; ++i) q.push_value(i);
  world_barrier();
  long got = 0, sum = 0;
  while (auto v = q.pop_value<int>()) {
    ++got;
    sum += *v;
  }
  CHECK(world_sum(got) == k_items);
  CHECK(world_sum(sum) == static_cast<long long>(k_items) * (k_items - 1) / 2);
  INFO("rank " << me << " got " << got << " of " << k_items << " items at " << n << " ranks");
  // At least 1% of a fair share (before: 0 or 1 item). Most runs share exactly; on the
  // oversubscribed 2-core VMs, busy with other work, a rank off its core longer than the
  // manager's patience gets less (worst seen: 1.7% of a share while the machine compiled).
  CHECK(got >= k_items / n / 100);
  world_barrier();
}

TEST_CASE("work queue: poppers slower than the manager still get a share", "[sync][np2+]") {
  // Every remote rank spends 2 ms after each item (off its core, or computing) while the
  // manager's items take no time. With a patience per item (wait one turn for a rank, then treat
  // it as inactive until its next request) the manager emptied the queue while they were away
  // (299 of 300 items at 2 ranks); it may now move ahead of a rank by one item per turn (twice
  // the rank's turnaround, at most 1 ms), so each slow rank keeps about half of the manager's
  // count (asserted: a quarter).
  session s;
  const int me = mdsm::rank();
  constexpr int k_items = 300;
  mdsm::work_queue q(mdsm::work_queue::order::fifo, 0);
  if (me == 0)
    for (int i = 0; i < k_items; ++i) q.push_value(i);
  world_barrier();
  long got = 0;
  while (q.pop_value<int>()) {
    ++got;
    if (me != 0) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  CHECK(world_sum(got) == k_items);
  std::vector<long> all(static_cast<std::size_t>(mdsm::size()));
  MPI_Allgather(&got, 1, MPI_LONG, all.data(), 1, MPI_LONG, MPI_COMM_WORLD);
  for (std::size_t r = 1; r < all.size(); ++r) {
    INFO("manager got " << all[0] << ", rank " << r << " got " << all[r] << " of " << k_items);
    CHECK(4 * all[r] >= all[0]);
  }
  world_barrier();
}

TEST_CASE("sync misuse returns clear errors", "[sync][np2+]") {
  session s;
  const int me = mdsm::rank(), n = mdsm::size();
  mdsm::mutex m;
  CHECK_THROWS_MATCHES(m.unlock(), mdsm::error, code_is(MDSM_ERR_NOT_HELD));
  mdsm::condition_variable cv;
  CHECK_THROWS_MATCHES(cv.wait(m), mdsm::error, code_is(MDSM_ERR_NOT_HELD));
  CHECK_THROWS_MATCHES(mdsm::mutex(n), mdsm::error, code_is(MDSM_ERR_INVALID_RANK));
  CHECK_THROWS_MATCHES(mdsm::semaphore(-1), mdsm::error, code_is(MDSM_ERR_INVALID_ARGUMENT));
  // Participant lists that differ between ranks.
  {
    std::vector<int> mine{0, me == 0 ? 1 : n - 1};
    if (n == 2) mine = me == 0 ? std::vector<int>{0} : std::vector<int>{0, 1};
    CHECK_THROWS_MATCHES(mdsm::barrier(mine), mdsm::error, code_is(MDSM_ERR_MISMATCH));
  }
  // Blocking from a handler.
  std::atomic<int> code{0};
  const auto h = mdsm::register_handler("test.sync.misuse", [&](mdsm::message&) {
    try {
      m.lock();
    } catch (const mdsm::error& e) {
      code.store(e.code());
    }
  });
  mdsm::send((me + 1) % n, h, {}, mdsm::annotation::none);
  mdsm::wait_until([&] { return code.load() != 0; });
  CHECK(code.load() == MDSM_ERR_HANDLER_CONTEXT);
  world_barrier();
  // Destroying a held mutex is reported by the next call.
  {
    mdsm::mutex held(0);
    if (me == 0) held.lock();
  }
  if (me == 0) CHECK_THROWS_MATCHES(mdsm::rank(), mdsm::error, code_is(MDSM_ERR_BUSY));
  world_barrier();
}

TEST_CASE("C API: a counter under an mdsm_mutex, and a barrier", "[sync][capi][np2+]") {
  session s;
  const int n = mdsm::size();
  mdsm_mutex* m = nullptr;
  mdsm_barrier* b = nullptr;
  REQUIRE(mdsm_mutex_create(-1, &m) == MDSM_SUCCESS);
  REQUIRE(mdsm_barrier_create(nullptr, 0, &b) == MDSM_SUCCESS);
  auto* counter = mdsm::alloc_collective_array<int>(1);
  *counter = 0;
  REQUIRE(mdsm_barrier_wait(b) == MDSM_SUCCESS);
  for (int i = 0; i < 50; ++i) {
    REQUIRE(mdsm_mutex_lock(m) == MDSM_SUCCESS);
    ++*counter;
    REQUIRE(mdsm_mutex_unlock(m) == MDSM_SUCCESS);
  }
  CHECK(mdsm_mutex_unlock(m) == MDSM_ERR_NOT_HELD);
  CHECK(std::string(mdsm_last_error()).find("not held") != std::string::npos);
  REQUIRE(mdsm_barrier_wait(b) == MDSM_SUCCESS);
  CHECK(*counter == 50 * n);
  REQUIRE(mdsm_barrier_wait(b) == MDSM_SUCCESS);
  mdsm_queue* q = nullptr;
  CHECK(mdsm_queue_create(3, 0, &q) == MDSM_ERR_INVALID_ARGUMENT);  // no such order
  CHECK(std::string(mdsm_last_error()).find("MDSM_QUEUE_LIFO_LOCAL") != std::string::npos);
  CHECK(mdsm_queue_create(-1, 0, &q) == MDSM_ERR_INVALID_ARGUMENT);
  CHECK(q == nullptr);
  REQUIRE(mdsm_queue_create(MDSM_QUEUE_FIFO, 0, &q) == MDSM_SUCCESS);
  const long v = 42;
  REQUIRE(mdsm_queue_push(q, &v, sizeof v) == MDSM_SUCCESS);
  char small[2];
  std::size_t len = 0;
  int got = 0;
  CHECK(mdsm_queue_pop(q, small, sizeof small, &len, &got) == MDSM_ERR_INVALID_ARGUMENT);
  CHECK(len == sizeof v);
  long out = 0;
  REQUIRE(mdsm_queue_pop(q, &out, sizeof out, &len, &got) == MDSM_SUCCESS);  // the kept item
  CHECK(got == 1);
  CHECK(out == 42);
  REQUIRE(mdsm_barrier_wait(b) == MDSM_SUCCESS);  // every rank has taken its one item
  REQUIRE(mdsm_queue_pop(q, &out, sizeof out, &len, &got) == MDSM_SUCCESS);
  CHECK(got == 0);  // every rank waits on the empty queue: terminated
  CHECK(mdsm_queue_destroy(q) == MDSM_SUCCESS);
  CHECK(mdsm_barrier_destroy(b) == MDSM_SUCCESS);
  CHECK(mdsm_mutex_destroy(m) == MDSM_SUCCESS);
}
