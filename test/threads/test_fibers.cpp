// User-level threads: the upcalls (net/progress.hpp) and mdsm's fiber scheduler
// (mdsm/fibers.hpp). Many fibers fault on remote pages at once and every value is right; a fiber
// blocked on a lock, semaphore, barrier, queue or wait_until lets the others compute; remote spawn
// with each annotation; misuse. Run at 1-4 ranks (test/meson.build).
#include "support/session.hpp"

#include "common/sanitizers.hpp"

#include <mdsm/fibers.hpp>
#include <mdsm/mdsm.h>

#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

using namespace mdsm_test;
namespace fb = mdsm::fibers;

namespace {

constexpr std::size_t k_page = 4096;

// The value rank r writes into word w of page p of its block.
std::uint64_t value_of(int r, std::size_t p, std::size_t w) {
  return (static_cast<std::uint64_t>(r) << 40) ^ (p << 12) ^ w;
}

// A handler that raises a flag on the rank it is sent to (NONE messages only).
struct flag_handler {
  std::atomic<int> raised{0};
  mdsm::handler_id id;
  flag_handler() {
    id = mdsm::register_handler("test.fibers.flag", [this](mdsm::message&) { raised.fetch_add(1); });
  }
};

// Rank 1 runs two fibers: `blocking` waits inside mdsm on something rank 0 provides (`unblock`),
// and a counter that computes (yields) meanwhile and tells rank 0 once it has counted 1000 turns.
// Rank 0 unblocks only then, so the wait can end only if the counter ran while the first fiber was
// suspended. Other ranks look on.
template <class Blocking, class Unblock>
void blocked_while_computing(flag_handler& go, Blocking blocking, Unblock unblock) {
  const int me = world_rank();
  if (me == 1) {
    std::atomic<bool> a_done{false};
    std::atomic<long> counted{0};
    long counted_when_unblocked = -1;
    fb::fiber a = fb::spawn([&] {
      blocking();
      counted_when_unblocked = counted.load();
      a_done = true;
    });
    fb::fiber b = fb::spawn([&] {
      while (!a_done) {
        if (++counted == 1000) mdsm::send_value(0, go.id, 0, mdsm::annotation::none);
        fb::yield();
      }
    });
    fb::join(a);
    fb::join(b);
    CHECK(counted_when_unblocked >= 1000);
  } else if (me == 0) {
    mdsm::wait_until([&] { return go.raised.load() > 0; });
    go.raised = 0;
    unblock();
  }
  world_barrier();
}

}  // namespace

TEST_CASE("fibers: spawn, yield and join on one rank; exceptions reach the joiner", "[fibers][np1]") {
  session s;
  std::vector<int> order;
  fb::fiber a = fb::spawn([&] {
    for (int i = 0; i < 3; ++i) {
      order.push_back(1);
      fb::yield();
    }
  });
  fb::fiber b = fb::spawn([&] {
    for (int i = 0; i < 3; ++i) {
      order.push_back(2);
      fb::yield();
    }
  });
  CHECK(fb::live() == 2);
  CHECK_FALSE(fb::in_fiber());
  fb::join(a);
  fb::join(b);
  CHECK(order == std::vector<int>{1, 2, 1, 2, 1, 2});
  CHECK(fb::live() == 0);

  // A join inside a fiber suspends only the joiner.
  int inner = 0;
  fb::fiber outer = fb::spawn([&] {
    CHECK(fb::in_fiber());
    fb::fiber f = fb::spawn([&] { inner = 7; });
    fb::join(f);
    CHECK(inner == 7);
  });
  fb::join(outer);

  fb::fiber thrower = fb::spawn([] { throw std::runtime_error("from a fiber"); });
  CHECK_THROWS_WITH(fb::join(thrower), "from a fiber");

  // Many fibers, small stacks: each gets its own.
  std::atomic<int> sum{0};
  std::vector<fb::fiber> many;
  for (int i = 0; i < 200; ++i)
    many.push_back(fb::spawn(
        [&sum, i] {
          volatile char pad[2048];
          pad[0] = static_cast<char>(i);
          fb::yield();
          sum += pad[0] == static_cast<char>(i) ? i : -100000;
        },
        fb::spawn_options{.stack_bytes = 32 * 1024}));
  fb::run();
  for (auto& f : many) fb::join(f);
  CHECK(sum == 199 * 200 / 2);
}

// Fibers are cheap enough to spawn by the hundred thousand, and nothing of one that ended stays
// behind on the spawning thread or fiber. Under TSan this once failed: each fiber spawned by a
// fiber left the thread's TSan shadow stack a frame lower until it underflowed (a crash at exit
// after the fiber tests).
TEST_CASE("fibers: a hundred thousand fibers spawned, ended and joined in turn", "[fibers][np1]") {
  session s;
  constexpr int k_fibers = 100000;
  long sum = 0;
  // Half spawned by the thread, half by a fiber (whose spawns end under the thread's scheduler).
  const auto spawn_and_join = [&sum](int from, int to) {
    for (int i = from; i < to; i += 2) {
      fb::fiber a = fb::spawn([&sum, i] { sum += i; });
      fb::fiber b = fb::spawn([&sum, i] {
        fb::yield();
        sum += i + 1;
      });
      fb::join(b);
      fb::join(a);
    }
  };
  spawn_and_join(0, k_fibers / 2);
  fb::join(fb::spawn([&] { spawn_and_join(k_fibers / 2, k_fibers); }));
  CHECK(sum == static_cast<long>(k_fibers) * (k_fibers - 1) / 2);
  CHECK(fb::live() == 0);
}

TEST_CASE("fibers: misuse is a clear error", "[fibers][np1]") {
  session s;
  error_of(MDSM_ERR_INVALID_HANDLE, [] { fb::join(fb::fiber{}); });
  error_of(MDSM_ERR_INVALID_ARGUMENT, [] { (void)fb::spawn(std::function<void()>{}); });
  error_of(MDSM_ERR_INVALID_ARGUMENT, [] { (void)fb::spawn([] {}, fb::spawn_options{.stack_bytes = 1024}); });
  fb::fiber self;
  std::string self_join;
  self = fb::spawn([&] { self_join = error_of(MDSM_ERR_BUSY, [&] { fb::join(self); }); });
  std::string run_inside;
  fb::fiber r = fb::spawn([&] { run_inside = error_of(MDSM_ERR_BUSY, [] { fb::run(); }); });
  fb::join(r);
  fb::join(self);
  CHECK(contains(self_join, "cannot join itself"));
  CHECK(contains(run_inside, "from a fiber"));

  // A fiber that ends holding an mdsm mutex: its joiner learns so; the mutex stays locked.
  mdsm::mutex m;
  fb::fiber holder = fb::spawn([&] { m.lock(); });
  const std::string held = error_of(MDSM_ERR_TASK_FAILED, [&] { fb::join(holder); });
  CHECK(contains(held, "holding 1 mdsm mutex"));
  CHECK(m.held());
  m.unlock();

  // A handler may not spawn.
  std::atomic<bool> ran{false};
  std::string from_handler;
  const mdsm::handler_id h = mdsm::register_handler("test.fibers.spawn_in_handler", [&](mdsm::message&) {
    try {
      (void)fb::spawn([] {});
    } catch (const mdsm::error& e) {
      from_handler = std::to_string(e.code());
    }
    ran = true;
  });
  mdsm::send(world_rank(), h, {}, mdsm::annotation::none);
  mdsm::wait_until([&] { return ran.load(); });
  CHECK(from_handler == std::to_string(MDSM_ERR_HANDLER_CONTEXT));

  const fb::task_id t = fb::register_task(
      "test.fibers.echo", [](std::span<const std::byte> a) { return std::vector<std::byte>(a.begin(), a.end()); });
  error_of(MDSM_ERR_INVALID_RANK, [&] { (void)fb::spawn_remote(world_size(), t, {}, mdsm::annotation::none); });
  error_of(MDSM_ERR_INVALID_RANK, [&] { (void)fb::spawn_remote(-1, t, {}, mdsm::annotation::none); });
  error_of(MDSM_ERR_UNKNOWN_HANDLER,
           [&] { (void)fb::spawn_remote(world_rank(), t + 100, {}, mdsm::annotation::none); });
  error_of(MDSM_ERR_INVALID_ANNOTATION,
           [&] { (void)fb::spawn_remote(world_rank(), t, {}, static_cast<mdsm::annotation>(9)); });
  fb::remote_result none;
  error_of(MDSM_ERR_INVALID_HANDLE, [&] { (void)none.get(); });
  // A spawn to oneself runs on this rank's scheduler.
  const int x = 41;
  fb::remote_result echo = fb::spawn_remote(world_rank(), t, std::as_bytes(std::span(&x, 1)), mdsm::annotation::none);
  CHECK(echo.get_as<int>() == 41);  // get() outside a fiber runs this rank's scheduler: the task runs
  // A result never asked for is dropped without an undisposed-RELEASE report.
  (void)fb::spawn_remote(world_rank(), t, std::as_bytes(std::span(&x, 1)), mdsm::annotation::release);
  fb::remote_result later = fb::spawn_remote(world_rank(), t, {}, mdsm::annotation::release);
  (void)later.get();
  error_of(MDSM_ERR_INVALID_HANDLE, [&] { (void)echo.get(); });

  // Upcalls: a partial set is refused.
  mdsm_upcalls partial{};
  partial.current = [](void*) -> void* { return nullptr; };
  CHECK(mdsm_set_upcalls(&partial) == MDSM_ERR_INVALID_ARGUMENT);
  CHECK(mdsm_set_upcalls(nullptr) == MDSM_ERR_INVALID_ARGUMENT);
}

TEST_CASE("fibers: many fibers fault on remote pages at once, every value right", "[fibers][np2+]") {
  session s;
  const int me = world_rank(), n = world_size();
  constexpr std::size_t k_pages = 96, k_fibers = 16;
  auto* data = static_cast<std::uint64_t*>(mdsm::alloc_collective(static_cast<std::size_t>(n) * k_pages * k_page));
  constexpr std::size_t words = k_page / sizeof(std::uint64_t);
  auto word = [&](int r, std::size_t p, std::size_t w) -> std::uint64_t& {
    return data[(static_cast<std::size_t>(r) * k_pages + p) * words + w];
  };
  for (std::size_t p = 0; p < k_pages; ++p)
    for (std::size_t w = 0; w < words; w += 61) word(me, p, w) = value_of(me, p, w);
  mdsm::barrier b;
  b.arrive_and_wait();
  const std::uint64_t suspended_before = stat("waits_suspended");
  const int from = (me + 1) % n;
  std::atomic<std::size_t> wrong{0}, seen{0};
  std::vector<fb::fiber> readers;
  for (std::size_t f = 0; f < k_fibers; ++f)
    readers.push_back(fb::spawn([&, f] {
      // Fiber f reads pages f, f + 16, ...: all 16 fault on different pages at the same time.
      for (std::size_t p = f; p < k_pages; p += k_fibers)
        for (std::size_t w = 0; w < words; w += 61) {
          if (word(from, p, w) != value_of(from, p, w)) ++wrong;
          ++seen;
        }
    }));
  for (auto& f : readers) fb::join(f);
  CHECK(wrong == 0);
  CHECK(seen == k_pages * ((words + 60) / 61));
  // The faults' waits were suspended (under TSan they poll: lib/coherence/fault.cpp).
  if (!MDSM_TSAN) CHECK(stat("waits_suspended") > suspended_before);
  // Two fibers faulting on the same page share its fetch; both see it.
  b.arrive_and_wait();
  if (me == 0) word(0, 0, 1) = 1234;
  b.arrive_and_wait();
  if (me == 1) {
    std::uint64_t got[4] = {};
    std::vector<fb::fiber> same;
    for (int i = 0; i < 4; ++i) same.push_back(fb::spawn([&, i] { got[i] = word(0, 0, 1); }));
    for (auto& f : same) fb::join(f);
    for (auto g : got) CHECK(g == 1234);
  }
  b.arrive_and_wait();
  mdsm::free_collective(data);
}

TEST_CASE("fibers: a fiber blocked on a mutex, semaphore, barrier, queue or wait_until lets others compute",
          "[fibers][np2+]") {
  session s;
  flag_handler go;
  std::atomic<bool> released{false};
  const mdsm::handler_id h_release = mdsm::register_handler("test.fibers.release", [&](mdsm::message& m) {
    m.accept();
    released = true;
  });
  mdsm::mutex m;
  mdsm::semaphore sem(0);
  const int pair[] = {0, 1};
  mdsm::barrier two(pair);
  mdsm::work_queue q;
  const int me = world_rank();

  SECTION("mutex") {
    if (me == 0) m.lock();
    world_barrier();
    blocked_while_computing(
        go,
        [&] {
          m.lock();
          m.unlock();
        },
        [&] { m.unlock(); });
  }
  SECTION("semaphore") {
    blocked_while_computing(
        go, [&] { sem.acquire(); }, [&] { sem.release(); });
  }
  SECTION("barrier") {
    blocked_while_computing(
        go, [&] { two.arrive_and_wait(); }, [&] { two.arrive_and_wait(); });
  }
  SECTION("queue") {
    int popped = -1;
    blocked_while_computing(
        go, [&] { popped = q.pop_value<int>().value_or(-2); }, [&] { q.push_value(17); });
    if (me == 1) CHECK(popped == 17);
  }
  SECTION("wait_until on a handler's flag, the message a RELEASE") {
    auto* cell = static_cast<int*>(mdsm::alloc_collective(sizeof(int)));
    int read = -1;
    blocked_while_computing(
        go,
        [&] {
          mdsm::wait_until([&] { return released.load(); });
          read = *cell;
        },
        [&] {
          *cell = 99;
          mdsm::send(1, h_release, {}, mdsm::annotation::release);
        });
    if (me == 1) CHECK(read == 99);
    world_barrier();
    mdsm::free_collective(cell);
  }
}

TEST_CASE("fibers: two fibers of one rank contend for one mdsm mutex", "[fibers][np2+]") {
  session s;
  mdsm::mutex m;
  auto* counter = static_cast<long*>(mdsm::alloc_collective(sizeof(long)));
  constexpr int k_rounds = 100;
  std::vector<fb::fiber> fs;
  for (int i = 0; i < 3; ++i)
    fs.push_back(fb::spawn([&] {
      for (int k = 0; k < k_rounds; ++k) {
        m.lock();
        const long v = *counter;
        fb::yield();  // another fiber of this rank tries the lock meanwhile: it must wait
        *counter = v + 1;
        m.unlock();
      }
    }));
  for (auto& f : fs) fb::join(f);
  mdsm::barrier b;
  b.arrive_and_wait();
  m.lock();
  CHECK(*counter == 3L * k_rounds * world_size());
  m.unlock();
  b.arrive_and_wait();
  mdsm::free_collective(counter);
}

TEST_CASE("fibers: several fibers of one rank wait on one semaphore, with tries among them", "[fibers][np2+]") {
  // One permit guards a counter: every acquire must see the counter as the previous holder left
  // it (the permit carries the releaser's writes), and no two holders overlap. Four fibers per
  // rank wait in acquire at once; a fifth tries, and its "none" answers must not be taken for
  // the waiting fibers' grants (or theirs for its own).
  session s;
  mdsm::semaphore sem(1);
  auto* counter = static_cast<long*>(mdsm::alloc_collective(sizeof(long)));
  constexpr int k_fibers = 4, k_rounds = 10, k_tries = 30;
  std::atomic<int> inside{0};
  int overlaps = 0;
  long tried_ok = 0;
  auto critical = [&] {
    if (inside.fetch_add(1) != 0) ++overlaps;
    const long v = *counter;
    fb::yield();  // the other fibers of this rank run meanwhile (and wait for the permit)
    *counter = v + 1;
    inside.fetch_sub(1);
  };
  std::vector<fb::fiber> fs;
  for (int i = 0; i < k_fibers; ++i)
    fs.push_back(fb::spawn([&] {
      for (int k = 0; k < k_rounds; ++k) {
        sem.acquire();
        critical();
        sem.release();
      }
    }));
  fs.push_back(fb::spawn([&] {
    for (int k = 0; k < k_tries; ++k) {
      if (sem.try_acquire()) {
        ++tried_ok;
        critical();
        sem.release();
      }
      fb::yield();
    }
  }));
  for (auto& f : fs) fb::join(f);
  CHECK(overlaps == 0);
  long tried_all = 0;
  MPI_Allreduce(&tried_ok, &tried_all, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
  mdsm::barrier b;
  b.arrive_and_wait();
  sem.acquire();
  CHECK(*counter == static_cast<long>(k_fibers) * k_rounds * world_size() + tried_all);
  sem.release();
  b.arrive_and_wait();
  mdsm::free_collective(counter);
}

TEST_CASE("fibers: remote spawn with each annotation", "[fibers][np2+]") {
  session s;
  const int me = world_rank(), n = world_size();
  auto* cells = static_cast<long*>(mdsm::alloc_collective(sizeof(long) * 2 * static_cast<std::size_t>(n)));
  // read: returns the spawner's cell (the spawner wrote it just before spawning).
  const fb::task_id read = fb::register_task("test.fibers.read", [cells](std::span<const std::byte> a) {
    int from;
    std::memcpy(&from, a.data(), sizeof from);
    const long v = cells[2 * from];
    return std::vector<std::byte>(reinterpret_cast<const std::byte*>(&v),
                                  reinterpret_cast<const std::byte*>(&v) + sizeof v);
  });
  // write: writes the spawner's second cell (the spawner reads it after get()).
  const fb::task_id write = fb::register_task("test.fibers.write", [cells](std::span<const std::byte> a) {
    int from;
    std::memcpy(&from, a.data(), sizeof from);
    cells[2 * from + 1] = 1000 + from;
    return std::vector<std::byte>{};
  });
  const fb::task_id fails = fb::register_task(
      "test.fibers.fails",
      [](std::span<const std::byte>) -> std::vector<std::byte> { throw std::runtime_error("task said no"); });
  mdsm::barrier b;
  b.arrive_and_wait();
  const int to = (me + 1) % n;
  const auto args = std::as_bytes(std::span(&me, 1));
  std::atomic<int> done{0};
  // Every rank spawns on the next while serving the previous one's spawns.
  fb::fiber work = fb::spawn([&] {
    cells[2 * me] = 500 + me;
    CHECK(fb::spawn_remote(to, read, args, mdsm::annotation::release).get_as<long>() == 500 + me);
    cells[2 * me] = 600 + me;
    CHECK(fb::spawn_remote(to, read, args, mdsm::annotation::release_nt).get_as<long>() == 600 + me);
    // REQUEST: the reply is a RELEASE, so the task's write is seen here.
    (void)fb::spawn_remote(to, write, args, mdsm::annotation::request).get();
    CHECK(cells[2 * me + 1] == 1000 + me);
    // NONE both ways: only the bytes travel.
    fb::remote_result r = fb::spawn_remote(to, read, args, mdsm::annotation::none);
    CHECK(r.get().size() == sizeof(long));
    const std::string why =
        error_of(MDSM_ERR_TASK_FAILED, [&] { (void)fb::spawn_remote(to, fails, args, mdsm::annotation::none).get(); });
    CHECK(contains(why, "task said no"));
    CHECK(contains(why, "test.fibers.fails"));
    ++done;
  });
  // Serve until every rank's work is done (each rank's work needs the next rank's scheduler).
  std::atomic<int> finished_ranks{0};
  const mdsm::handler_id h_done = mdsm::register_handler("test.fibers.done", [&](mdsm::message&) { ++finished_ranks; });
  bool told = false;
  fb::run_until([&] {
    if (done == 1 && !told) {
      told = true;
      for (int r = 0; r < n; ++r) mdsm::send(r, h_done, {}, mdsm::annotation::none);
    }
    return finished_ranks.load() == n;
  });
  fb::join(work);
  b.arrive_and_wait();
  mdsm::free_collective(cells);
}

namespace {
// A "scheduler" of OS threads through the C upcalls: the thread marked as a user-level thread
// spins in block until wake comes (from the progress thread that delivers the event).
struct c_sched {
  static thread_local int mine;
  std::atomic<int> blocks{0}, wakes{0};
  std::atomic<bool> woken{false};
};
thread_local int c_sched::mine = 0;
}  // namespace

TEST_CASE("upcalls (C): block and wake reach a scheduler of one's own", "[fibers][np2+]") {
  session s;
  flag_handler go;
  static c_sched sched;
  mdsm_upcalls u{};
  u.current = [](void*) -> void* { return c_sched::mine ? &sched : nullptr; };
  u.block = [](mdsm_wait_token*, void* waiter, void*) {
    auto* sc = static_cast<c_sched*>(waiter);
    ++sc->blocks;
    while (!sc->woken.exchange(false)) std::this_thread::yield();
  };
  u.wake = [](mdsm_wait_token*, void* waiter, void*) {
    auto* sc = static_cast<c_sched*>(waiter);
    ++sc->wakes;
    sc->woken = true;
  };
  u.context = nullptr;
  REQUIRE(mdsm_set_upcalls(&u) == MDSM_SUCCESS);
  const int me = world_rank();
  if (me == 1) {
    c_sched::mine = 1;
    // The first look is always false, so the wait is handed to block (the flag may be up already);
    // the delivering thread's look, or this thread's own right after listing it, wakes it.
    int looks = 0;
    mdsm::wait_until([&] { return ++looks > 1 && go.raised.load() > 0; });
    c_sched::mine = 0;
    CHECK(sched.blocks >= 1);
    CHECK(sched.wakes == sched.blocks);
  } else if (me == 0) {
    mdsm::send_value(1, go.id, 0, mdsm::annotation::none);
  }
  world_barrier();
  mdsm_upcalls off{};
  CHECK(mdsm_set_upcalls(&off) == MDSM_SUCCESS);
}

TEST_CASE("fibers: several fibers of each rank wait on one condition variable", "[fibers][np2+]") {
  session s;
  const int me = world_rank(), n = world_size();
  constexpr int k_waiters = 3;
  mdsm::mutex m;
  mdsm::condition_variable cv;
  auto* tokens = static_cast<int*>(mdsm::alloc_collective(sizeof(int)));
  mdsm::barrier b;
  b.arrive_and_wait();
  std::atomic<int> got{0};
  std::vector<fb::fiber> fs;
  for (int i = 0; i < k_waiters; ++i)
    fs.push_back(fb::spawn([&] {
      m.lock();
      while (*tokens == 0) cv.wait(m);  // several fibers of this rank wait here at once
      --*tokens;
      m.unlock();
      ++got;
    }));
  if (me == 0)
    fs.push_back(fb::spawn([&] {
      // One token (and one notify_one) per waiter of the job, a few switches apart.
      for (int k = 0; k < k_waiters * n; ++k) {
        for (int y = 0; y < 20; ++y) fb::yield();
        m.lock();
        ++*tokens;
        cv.notify_one();
        m.unlock();
      }
    }));
  for (auto& f : fs) fb::join(f);
  CHECK(got == k_waiters);
  b.arrive_and_wait();
  m.lock();
  CHECK(*tokens == 0);
  m.unlock();
  b.arrive_and_wait();
  mdsm::free_collective(tokens);
}

namespace {
struct c_counter {
  int value = 0;
  int in_fiber = 0;
};
void c_fiber_body(void* arg) {
  auto* c = static_cast<c_counter*>(arg);
  c->in_fiber += mdsm_in_fiber();
  for (int i = 0; i < 5; ++i) {
    ++c->value;
    mdsm_fiber_yield();
  }
}
}  // namespace

TEST_CASE("fibers (C): spawn, yield, join, run", "[fibers][np1]") {
  session s;
  c_counter c;
  mdsm_fiber f[3] = {};
  for (auto& x : f) REQUIRE(mdsm_fiber_spawn(c_fiber_body, &c, 0, &x) == MDSM_SUCCESS);
  CHECK(mdsm_in_fiber() == 0);
  CHECK(mdsm_fiber_join(f[0]) == MDSM_SUCCESS);
  CHECK(mdsm_fibers_run() == MDSM_SUCCESS);  // the other two end here
  CHECK(mdsm_fiber_join(f[1]) == MDSM_SUCCESS);
  CHECK(mdsm_fiber_join(f[2]) == MDSM_SUCCESS);
  CHECK(c.value == 15);
  CHECK(c.in_fiber == 3);
  CHECK(mdsm_fiber_join(nullptr) == MDSM_ERR_INVALID_HANDLE);
  mdsm_fiber g = nullptr;
  CHECK(mdsm_fiber_spawn(nullptr, &c, 0, &g) == MDSM_ERR_INVALID_ARGUMENT);
  CHECK(mdsm_fiber_spawn(c_fiber_body, &c, 1024, &g) == MDSM_ERR_INVALID_ARGUMENT);
  CHECK(mdsm_fiber_spawn(c_fiber_body, &c, 0, nullptr) == MDSM_ERR_INVALID_ARGUMENT);
}

namespace {
// A C task: returns the caller's cell (args: its address) times 10, or fails for a negative one.
std::atomic<int> c_tasks_ran{0};  // tasks run to their end on this rank
int c_task_times_ten(const void* args, size_t len, void** result, size_t* result_len, void*) {
  struct count_end {
    ~count_end() { c_tasks_ran.fetch_add(1); }
  } counted;
  if (len != sizeof(long*)) return 2;
  const long* cell;
  std::memcpy(&cell, args, sizeof cell);
  const long v = *cell;  // the spawner wrote it just before a RELEASE spawn
  if (v < 0) return 1;
  auto* out = static_cast<long*>(std::malloc(sizeof(long)));
  *out = 10 * v;
  *result = out;
  *result_len = sizeof(long);
  return 0;
}
}  // namespace

TEST_CASE("fibers (C): remote spawn, its results and failures", "[fibers][np2+]") {
  session s;
  const int me = world_rank(), n = world_size(), peer = (me + 1) % n;
  auto* cells = static_cast<long*>(mdsm::alloc_collective(sizeof(long) * static_cast<std::size_t>(n)));
  c_tasks_ran = 0;
  mdsm_task t = 0;
  REQUIRE(mdsm_task_register("test.fibers.c_times_ten", c_task_times_ten, nullptr, &t) == MDSM_SUCCESS);
  // A RELEASE spawn: the task on the peer reads our cell.
  cells[me] = me + 1;
  long* mine = &cells[me];
  mdsm_remote_result* r = nullptr;
  REQUIRE(mdsm_spawn_remote(peer, t, &mine, sizeof mine, MDSM_RELEASE, &r) == MDSM_SUCCESS);
  size_t len = 0;
  long got = 0;
  // Too small a buffer first: the result is kept for the next call.
  CHECK(mdsm_remote_result_get(r, &got, 1, &len) == MDSM_ERR_INVALID_ARGUMENT);
  CHECK(len == sizeof(long));
  int ready = 0;
  CHECK(mdsm_remote_result_ready(r, &ready) == MDSM_SUCCESS);
  CHECK(ready == 1);
  CHECK(mdsm_remote_result_get(r, &got, sizeof got, &len) == MDSM_SUCCESS);
  CHECK(got == 10 * (me + 1));
  mdsm_remote_result_free(r);
  // Our predecessor's spawn runs on our fibers: keep scheduling until it has ended (our own result
  // may have come first).
  fb::run_until([] { return c_tasks_ran.load() >= 1; });
  // A failing task: its status reaches the spawner, with the task's name.
  world_barrier();
  cells[me] = -1;
  REQUIRE(mdsm_spawn_remote(peer, t, &mine, sizeof mine, MDSM_RELEASE, &r) == MDSM_SUCCESS);
  CHECK(mdsm_remote_result_get(r, &got, sizeof got, &len) == MDSM_ERR_TASK_FAILED);
  CHECK(std::string(mdsm_last_error()).find("test.fibers.c_times_ten") != std::string::npos);
  CHECK(mdsm_remote_result_get(r, &got, sizeof got, &len) == MDSM_ERR_INVALID_HANDLE);  // used
  mdsm_remote_result_free(r);
  // Misuse.
  CHECK(mdsm_spawn_remote(n, t, &mine, sizeof mine, MDSM_RELEASE, &r) == MDSM_ERR_INVALID_RANK);
  CHECK(mdsm_spawn_remote(peer, t + 1000, &mine, sizeof mine, MDSM_NONE, &r) == MDSM_ERR_UNKNOWN_HANDLER);
  CHECK(mdsm_spawn_remote(peer, t, nullptr, 8, MDSM_NONE, &r) == MDSM_ERR_INVALID_ARGUMENT);
  CHECK(mdsm_spawn_remote(peer, t, &mine, sizeof mine, MDSM_NONE, nullptr) == MDSM_ERR_INVALID_ARGUMENT);
  CHECK(mdsm_task_register("test.fibers.c_null", nullptr, nullptr, &t) == MDSM_ERR_INVALID_ARGUMENT);
  CHECK(mdsm_remote_result_ready(nullptr, &ready) == MDSM_ERR_INVALID_ARGUMENT);
  fb::run_until([] { return c_tasks_ran.load() >= 2; });
  world_barrier();
  mdsm::free_collective(cells);
}

TEST_CASE("fibers: finalize drops spawns never run and results never taken", "[fibers][np2+]") {
  fb::remote_result kept;  // outlives its session: its RELEASE was given up at finalize
  {
    session s;
    const int me = world_rank();
    std::atomic<bool> ran{false};
    const fb::task_id t = fb::register_task("test.fibers.flag", [&](std::span<const std::byte>) {
      ran = true;
      return std::vector<std::byte>{};
    });
    const fb::task_id never = fb::register_task("test.fibers.never", [](std::span<const std::byte>) {
      FAIL_CHECK("a spawn that came after its rank's last scheduling ran");
      return std::vector<std::byte>{};
    });
    mdsm::barrier b;
    b.arrive_and_wait();
    if (me == 1) kept = fb::spawn_remote(0, t, {}, mdsm::annotation::release);  // its result is never taken
    if (me == 0) fb::run_until([&] { return ran.load(); });
    b.arrive_and_wait();
    // Rank 0 runs no scheduler from here: this spawn stays in its inbox until finalize.
    if (me == 1) (void)fb::spawn_remote(0, never, {}, mdsm::annotation::release);
    b.arrive_and_wait();
  }
  // The result came (before finalize ended) and was given up: dropping it now reports nothing,
  // and the next session starts clean (a deferred error would be thrown by its first call).
  if (world_rank() == 1) CHECK(kept.ready());
  kept = fb::remote_result{};
  session s;
  CHECK_NOTHROW(mdsm::poll());
}
