// Quicksort (TreadMarks/CarlOS application): sorts integers in coherent memory in parallel.
//
//   quicksort --version=lock|hybrid1|hybrid2 [--size=N] [--seed=N] [--quick]
//
// The array (256K integers; --quick 16K) is allocated collectively and filled on rank 0 from the
// seed. A worker takes a subarray descriptor (lo, hi), partitions it around a median-of-three
// pivot, queues the larger part and continues with the smaller, until a part has fewer than 1K
// elements: that part is finished with bubble sort. Only parts of at least 1K elements are queued.
// Every version's stack hands a worker the newest part it queued itself, and another worker's
// only when it has none (a LIFO with locality): the worker then sorts data it wrote, which is
// in its own memory already, instead of fetching the other worker's newest writes. (With one
// LIFO for everybody, the parts ping-ponged between the ranks: at 2M integers and 2 ranks the
// hybrid1 version took 3.2 s against 2.4 s, one rank 3.7 s.)
//
//   lock     the stack of descriptors lives in coherent memory under one mdsm::mutex; a counter
//            of busy workers under the same lock detects termination (stack empty, nobody busy);
//            idle workers park on an mdsm::condition_variable.
//   hybrid1  mdsm::work_queue (order::lifo_local): push is a RELEASE the manager stores and
//            forwards to a popping worker, pop is a REQUEST; pop() returns nullopt at termination.
//   hybrid2  the same queue written here from handlers, with every message a RELEASE: the pop
//            request too (the manager accepts it when it hands out an item, or forwards it back
//            to its sender as the termination notice). The library's work_queue always sends
//            pop as a REQUEST, so hybrid2 has its own manager.
// A final mdsm::barrier makes every rank's writes visible; rank 0 verifies that the array is
// sorted and is the sorted input (element for element, so also a permutation of it).
#include "../common/app.hpp"

#include <mdsm/mdsm.hpp>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <deque>
#include <iterator>
#include <mutex>
#include <optional>
#include <vector>

namespace {

constexpr long k_bubble_below = 1024;

struct range {
  std::int64_t lo;
  std::int64_t hi;  // exclusive
};

// A queued part in the lock version's shared stack: the part and the rank that queued it.
struct entry {
  range r;
  std::int64_t by;
};

std::uint64_t splitmix(std::uint64_t& s) {
  std::uint64_t z = (s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

std::vector<std::int32_t> make_input(long n, std::uint64_t seed) {
  std::vector<std::int32_t> v(static_cast<std::size_t>(n));
  std::uint64_t s = seed * 104729 + 3;
  for (auto& x : v) x = static_cast<std::int32_t>(splitmix(s) % 1000000000u);
  return v;
}

void bubble_sort(std::int32_t* a, std::int64_t lo, std::int64_t hi) {
  for (std::int64_t end = hi; end > lo + 1; --end) {
    bool swapped = false;
    for (std::int64_t i = lo; i + 1 < end; ++i)
      if (a[i] > a[i + 1]) {
        std::swap(a[i], a[i + 1]);
        swapped = true;
      }
    if (!swapped) break;
  }
}

// Hoare partition around the median of three; returns p with lo < p < hi: [lo,p) <= [p,hi).
std::int64_t partition(std::int32_t* a, std::int64_t lo, std::int64_t hi) {
  const std::int64_t mid = lo + (hi - lo) / 2;
  std::int32_t x = a[lo], y = a[mid], z = a[hi - 1];
  const std::int32_t pivot = std::max(std::min(x, y), std::min(std::max(x, y), z));
  std::int64_t i = lo - 1, j = hi;
  for (;;) {
    do ++i; while (a[i] < pivot);
    do --j; while (a[j] > pivot);
    if (i >= j) return j + 1;
    std::swap(a[i], a[j]);
  }
}

// Sorts [r.lo, r.hi): queues the larger part of every partition (via `push`), keeps the smaller.
template <class Push>
void sort_range(std::int32_t* a, range r, Push&& push) {
  while (r.hi - r.lo >= k_bubble_below) {
    const std::int64_t p = partition(a, r.lo, r.hi);
    range left{r.lo, p}, right{p, r.hi};
    if (left.hi - left.lo > right.hi - right.lo) std::swap(left, right);
    // `right` is now the larger part.
    if (right.hi - right.lo >= k_bubble_below) push(right);
    else bubble_sort(a, right.lo, right.hi);
    r = left;
  }
  bubble_sort(a, r.lo, r.hi);
}

// ---- lock --------------------------------------------------------------------------------------

// The lock version's stack header; the entries are a separate coherent array.
struct shared_stack {
  std::int64_t top;
  std::int64_t busy;     // workers holding a range
  std::int64_t waiting;  // workers parked on the condition variable
};

void run_lock(std::int32_t* a, long n, mdsm::barrier& bar, mdsm_apps::measurement& m) {
  // Queued ranges are disjoint and at least k_bubble_below long.
  const long capacity = n / k_bubble_below + 4;
  auto* st = mdsm::alloc_collective_array<shared_stack>(1);
  auto* items = mdsm::alloc_collective_array<entry>(static_cast<std::size_t>(capacity));
  mdsm::mutex lock;
  mdsm::condition_variable cv;
  if (mdsm::rank() == 0) {
    st->top = 1;
    st->busy = 0;
    st->waiting = 0;
    items[0] = entry{range{0, n}, 0};
  }
  bar.arrive_and_wait();

  const std::int64_t me = mdsm::rank();
  const double start = mdsm_apps::begin_measurement();
  auto push = [&](range p) {
    std::lock_guard lk(lock);
    if (st->top >= capacity) {
      std::fprintf(stderr, "quicksort: the work stack overflowed (%ld entries)\n", capacity);
      std::abort();
    }
    items[st->top++] = entry{p, me};
    if (st->waiting > 0) cv.notify_one();
  };
  bool finished = false;
  for (;;) {
    range r;
    {
      std::unique_lock lk(lock);
      if (finished && --st->busy == 0 && st->top == 0 && st->waiting > 0) cv.notify_all();
      finished = false;
      while (st->top == 0 && st->busy > 0) {
        ++st->waiting;
        cv.wait(lk);
        --st->waiting;
      }
      if (st->top == 0) break;  // nothing queued and nobody busy: sorted
      // The newest entry this rank queued, else the newest of all; the ones above it move down.
      std::int64_t k = st->top - 1;
      while (k > 0 && items[k].by != me) --k;
      if (items[k].by != me) k = st->top - 1;
      r = items[k].r;
      for (std::int64_t j = k; j + 1 < st->top; ++j) items[j] = items[j + 1];
      --st->top;
      ++st->busy;
    }
    finished = true;
    sort_range(a, r, push);
  }
  bar.arrive_and_wait();
  m = mdsm_apps::end_measurement(start);
}

// ---- hybrid1: the library's work queue ---------------------------------------------------------

void run_hybrid1(std::int32_t* a, long n, mdsm::barrier& bar, mdsm_apps::measurement& m) {
  mdsm::work_queue q(mdsm::work_queue::order::lifo_local, 0);
  bar.arrive_and_wait();
  const double start = mdsm_apps::begin_measurement();
  if (mdsm::rank() == 0) q.push_value(range{0, n});
  while (auto r = q.pop_value<range>()) sort_range(a, *r, [&](range p) { q.push_value(p); });
  bar.arrive_and_wait();
  m = mdsm_apps::end_measurement(start);
}

// ---- hybrid2: a work stack whose every message is a RELEASE -------------------------------------
//
// Messages (all RELEASE; the manager is rank 0 and also sends to itself, so per-sender order puts
// a rank's pushes before its own pop request at the manager):
//   push  {range}  -> manager: stored; forwarded unchanged to a waiting popper (newest first).
//   pop   {}       -> manager: stored until an item is there, then accepted by the manager (an
//                     asynchronous acquire in the handler); when every rank waits on the empty
//                     stack, forwarded back to its sender as the termination notice.
// At a non-manager rank, a `push` message is an item forwarded to it and a `pop` message is its own
// request come back (termination). Items for the manager itself are handed over in-process.
struct stack_manager {
  // Touched by handlers (progress thread, or the application thread waiting in mdsm) and by the
  // application thread; guarded by `mu`.
  std::mutex mu;
  std::deque<mdsm::stored_message> items;    // manager: pushed, not yet handed out
  std::deque<mdsm::stored_message> waiters;  // manager: pop requests without an item
  mdsm::stored_message got;                  // consumer: the item or the returned pop request
  int result = 0;                            // consumer: 0 pending, 1 item, 2 done
  std::atomic<bool> ready{false};

  // Manager: hand items to waiters, then detect termination (mu held).
  void match() {
    const int me = mdsm::rank();
    while (!items.empty() && !waiters.empty()) {
      mdsm::stored_message req = std::move(waiters.front());
      waiters.pop_front();
      const int to = req.origin();
      // The newest item the waiter pushed itself, else the newest of all.
      auto own = std::find_if(items.rbegin(), items.rend(), [&](const mdsm::stored_message& m) { return m.origin() == to; });
      auto it = own != items.rend() ? std::prev(own.base()) : std::prev(items.end());
      mdsm::stored_message item = std::move(*it);
      items.erase(it);
      req.accept();  // dispose of the RELEASE pop request (in a handler: completes asynchronously)
      if (to == me) deliver(std::move(item), 1);
      else item.forward(to);
    }
    if (items.empty() && static_cast<int>(waiters.size()) == mdsm::size()) {
      for (auto& req : waiters) {
        if (req.origin() == me) deliver(std::move(req), 2);
        else req.forward(req.origin());
      }
      waiters.clear();
    }
  }
  void deliver(mdsm::stored_message msg, int what) {
    got = std::move(msg);
    result = what;
    ready.store(true, std::memory_order_release);
  }
};

void run_hybrid2(std::int32_t* a, long n, mdsm::barrier& bar, mdsm_apps::measurement& m) {
  stack_manager sm;
  const int me = mdsm::rank();
  constexpr int k_manager = 0;
  const auto h_push = mdsm::register_handler("quicksort.push", [&](mdsm::message& msg) {
    std::lock_guard lk(sm.mu);
    if (me == k_manager) {
      sm.items.push_back(msg.store());
      sm.match();
    } else {
      sm.deliver(msg.store(), 1);
    }
  });
  const auto h_pop = mdsm::register_handler("quicksort.pop", [&](mdsm::message& msg) {
    std::lock_guard lk(sm.mu);
    if (me == k_manager) {
      sm.waiters.push_back(msg.store());
      sm.match();
    } else {
      sm.deliver(msg.store(), 2);
    }
  });
  auto push = [&](range r) { mdsm::send_value(k_manager, h_push, r, mdsm::annotation::release); };
  auto pop = [&]() -> std::optional<range> {
    mdsm::send(k_manager, h_pop, {}, mdsm::annotation::release);
    mdsm::wait_until([&] { return sm.ready.load(std::memory_order_acquire); });
    mdsm::stored_message msg;
    int what;
    {
      std::lock_guard lk(sm.mu);
      msg = std::move(sm.got);
      what = sm.result;
      sm.result = 0;
      sm.ready.store(false, std::memory_order_relaxed);
    }
    msg.accept();  // the acquire: the producer's writes of this range become visible
    if (what == 2) return std::nullopt;
    return msg.as<range>();
  };
  bar.arrive_and_wait();
  const double start = mdsm_apps::begin_measurement();
  if (me == 0) push(range{0, n});
  while (auto r = pop()) sort_range(a, *r, push);
  bar.arrive_and_wait();
  m = mdsm_apps::end_measurement(start);
}

}  // namespace

int main(int argc, char** argv) {
  mdsm::init(&argc, &argv);
  auto args = mdsm_apps::parse_args(argc, argv, "lock");
  const long n = args.size > 0 ? args.size : (args.quick ? 16 * 1024 : 256 * 1024);
  const auto input = make_input(n, args.seed);
  auto* a = mdsm::alloc_collective_array<std::int32_t>(static_cast<std::size_t>(n));
  if (mdsm::rank() == 0) std::copy(input.begin(), input.end(), a);
  mdsm::barrier bar;  // makes the input visible before the parallel section

  mdsm_apps::measurement m;
  if (args.version == "lock") {
    run_lock(a, n, bar, m);
  } else if (args.version == "hybrid1") {
    run_hybrid1(a, n, bar, m);
  } else if (args.version == "hybrid2") {
    run_hybrid2(a, n, bar, m);
  } else {
    if (mdsm::rank() == 0)
      std::fprintf(stderr, "quicksort: unknown --version=%s (lock, hybrid1, hybrid2)\n", args.version.c_str());
    mdsm::finalize();
    return 2;
  }

  // After the final barrier every rank's writes are visible. Rank 0 copies the result out while
  // the others wait in one more barrier: the copy may fetch diffs from them, and without a
  // progress thread only a rank inside mdsm serves them (not one blocked in MPI in report()).
  std::vector<std::int32_t> result;
  if (mdsm::rank() == 0) result.assign(a, a + n);
  bar.arrive_and_wait();
  bool ok = true;
  if (mdsm::rank() == 0) {
    auto expect = input;
    std::sort(expect.begin(), expect.end());
    long first_bad = -1;
    for (long i = 0; i < n && first_bad < 0; ++i)
      if (result[static_cast<std::size_t>(i)] != expect[static_cast<std::size_t>(i)]) first_bad = i;
    std::uint64_t sum_in = 0, sum_out = 0;
    for (long i = 0; i < n; ++i) {
      sum_in += static_cast<std::uint32_t>(input[static_cast<std::size_t>(i)]);
      sum_out += static_cast<std::uint32_t>(result[static_cast<std::size_t>(i)]);
    }
    ok = first_bad < 0 && sum_in == sum_out;
    std::printf("quicksort %s: %ld integers, checksum %llu/%llu, %s\n", args.version.c_str(), n,
                static_cast<unsigned long long>(sum_out), static_cast<unsigned long long>(sum_in),
                ok ? "sorted permutation of the input" : "NOT the sorted input");
    if (first_bad >= 0)
      std::printf("quicksort: first difference at %ld: %d, expected %d\n", first_bad, result[static_cast<std::size_t>(first_bad)],
                  expect[static_cast<std::size_t>(first_bad)]);
  }
  const int rc = mdsm_apps::report("quicksort", args.version, ok, m);
  mdsm::finalize();
  return rc;
}
