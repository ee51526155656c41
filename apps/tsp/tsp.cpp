// TSP: branch and bound for the travelling salesman problem (TreadMarks/CarlOS application).
//
//   tsp --version=lock|fibers|hybrid|msg [--size=CITIES] [--seed=N] [--quick]
//
// Cities are points drawn deterministically from the seed; distances are rounded Euclidean. A
// partial tour is a fixed-size descriptor. Tours shorter than the depth threshold are expanded
// into their children; longer ones are solved locally by depth-first branch and bound.
//
//   lock    the tour stack lives in coherent memory under one mdsm::mutex (a condition variable
//           parks idle workers; a worker takes up to 4 tours per acquire while the stack is
//           deep); the best tour lives in coherent memory under a second mutex. Its length is
//           read without the lock for pruning (a stale bound is only weaker) and, every 64K
//           search nodes, under it: that acquire brings a better tour another rank has found.
//   fibers  the lock version with 2 worker fibers per rank (mdsm/fibers.hpp): a worker waiting
//           for the stack's lock, a wake-up or a page suspends alone while the rank's others
//           search; every tick yields, so a worker whose wait is over runs soon.
//   hybrid  the tour stack is private to the manager (rank 0), whose application thread serves
//           work requests (REQUEST messages its handler only queues) with RELEASE replies; a
//           better tour is posted to the manager in a REQUEST, the manager writes it into
//           coherent memory and announces it to the other workers with a RELEASE, which they
//           accept during their search and then read the bound from coherent memory.
//   msg     the same protocol with NONE messages only and the bound in the payload: the
//           message-passing reference, no shared memory.
// In the manager versions a worker asks for its next tours when it starts the last one it
// holds, so the reply arrives while it searches. Every version pauses its progress thread
// during the search and polls for messages every 512 search nodes instead (see docs/APPS.md).
// The result (optimal tour length) is verified against a sequential branch and bound on rank 0.
// TSP_TRACE=1 prints a line per rank: nodes searched, tours, search and idle time.
#include "../common/app.hpp"

#include <mdsm/fibers.hpp>
#include <mdsm/mdsm.hpp>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <limits>
#include <mutex>
#include <optional>
#include <type_traits>
#include <vector>

namespace {

constexpr int k_max_cities = 24;
constexpr int k_queue_capacity = 2048;  // lock version: tours in the coherent stack
constexpr int k_no_tour = std::numeric_limits<std::int32_t>::max();
// The solver calls its tick every this many nodes (~40 us): the ranks poll for messages there
// and pick up a better bound.
constexpr unsigned k_tick_nodes = 512;

// Where a rank's time went (TSP_TRACE=1 prints it): the search itself, and waiting for work
// (lock: the stack's lock and condition variable; worker: the manager's reply).
struct search_trace {
  std::uint64_t nodes = 0, tours = 0;
  double search_s = 0, idle_s = 0;
  void searched(std::uint64_t n, double since) {
    nodes += n;
    ++tours;
    search_s += mdsm_apps::now_s() - since;
  }
  void print(const char* version) const {
    if (std::getenv("TSP_TRACE") == nullptr) return;
    std::printf("TSP_TRACE version=%s rank=%d nodes=%llu tours=%llu search_s=%.3f idle_s=%.3f\n", version,
                mdsm::rank(), static_cast<unsigned long long>(nodes), static_cast<unsigned long long>(tours), search_s,
                idle_s);
    std::fflush(stdout);
  }
};

// A partial tour: path[0..depth) starting at city 0.
struct tour {
  std::int32_t cost = 0;
  std::int32_t depth = 0;
  std::uint32_t visited = 0;
  std::uint8_t path[k_max_cities] = {};
};
static_assert(std::is_trivially_copyable_v<tour>);

struct best_tour {
  std::int32_t cost = k_no_tour;
  std::int32_t pad = 0;
  std::uint8_t path[k_max_cities] = {};
};

std::uint64_t splitmix(std::uint64_t& s) {
  std::uint64_t z = (s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

struct problem {
  int n = 0;
  int threshold = 0;          // tours of this depth are solved locally
  std::vector<int> dist;      // n*n
  std::vector<int> min_out;   // the shortest edge leaving each city
  std::vector<std::vector<std::uint8_t>> nearest;  // per city, the others by distance

  int d(int a, int b) const { return dist[static_cast<std::size_t>(a * n + b)]; }

  problem(int cities, std::uint64_t seed) : n(cities) {
    std::uint64_t s = seed * 7919 + 17;
    std::vector<double> x(n), y(n);
    for (int i = 0; i < n; ++i) {
      x[i] = static_cast<double>(splitmix(s) % 1000);
      y[i] = static_cast<double>(splitmix(s) % 1000);
    }
    dist.resize(static_cast<std::size_t>(n * n));
    min_out.assign(n, std::numeric_limits<int>::max());
    for (int a = 0; a < n; ++a)
      for (int b = 0; b < n; ++b) {
        const int v = a == b ? 0 : static_cast<int>(std::lround(std::hypot(x[a] - x[b], y[a] - y[b])));
        dist[static_cast<std::size_t>(a * n + b)] = v;
        if (a != b) min_out[a] = std::min(min_out[a], v);
      }
    nearest.resize(n);
    for (int a = 0; a < n; ++a) {
      for (int b = 0; b < n; ++b)
        if (b != a) nearest[a].push_back(static_cast<std::uint8_t>(b));
      std::stable_sort(nearest[a].begin(), nearest[a].end(), [&](int p, int q) { return d(a, p) < d(a, q); });
    }
    threshold = n >= 15 ? 4 : 3;
  }

  tour root() const {
    tour t;
    t.depth = 1;
    t.visited = 1u;
    t.path[0] = 0;
    return t;
  }

  // Sum of min_out over the last city and the unvisited ones: the remaining edges leave exactly
  // these cities, so cost + this is a lower bound of any completion.
  int remaining_bound(const tour& t) const {
    int b = min_out[t.path[t.depth - 1]];
    for (int c = 0; c < n; ++c)
      if (!(t.visited & (1u << c))) b += min_out[c];
    return b;
  }

  // The greedy nearest-neighbour tour: the initial bound of every version.
  best_tour greedy() const {
    best_tour b;
    std::uint32_t vis = 1;
    int last = 0, cost = 0;
    b.path[0] = 0;
    for (int k = 1; k < n; ++k) {
      for (int c : nearest[last])
        if (!(vis & (1u << c))) {
          cost += d(last, c);
          vis |= 1u << c;
          last = c;
          b.path[k] = static_cast<std::uint8_t>(c);
          break;
        }
    }
    b.cost = cost + d(last, 0);
    return b;
  }

  bool valid(const best_tour& b) const {
    std::uint32_t vis = 0;
    int cost = 0;
    if (b.path[0] != 0) return false;
    for (int k = 0; k < n; ++k) {
      if (b.path[k] >= n || (vis & (1u << b.path[k]))) return false;
      vis |= 1u << b.path[k];
      cost += d(b.path[k], b.path[(k + 1) % n]);
    }
    return cost == b.cost;
  }
};

// Depth-first branch and bound below `t`. `best` is the caller's bound (updated in place with
// `on_better`), `tick` is called every k_tick_nodes nodes and may lower `best`.
struct solver {
  const problem& p;
  int& best;
  std::uint8_t* best_path;
  std::uint64_t nodes = 0;
  std::uint8_t path[k_max_cities] = {};

  template <class OnBetter, class Tick>
  void run(const tour& t, OnBetter&& on_better, Tick&& tick) {
    std::copy(t.path, t.path + t.depth, path);
    int rem = p.remaining_bound(t) - p.min_out[t.path[t.depth - 1]];  // sum over unvisited
    dfs(t.depth, t.visited, t.cost, rem, on_better, tick);
  }

  template <class OnBetter, class Tick>
  void dfs(int depth, std::uint32_t visited, int cost, int rem, OnBetter& on_better, Tick& tick) {
    if ((++nodes % k_tick_nodes) == 0) tick();
    const int last = path[depth - 1];
    if (depth == p.n) {
      const int total = cost + p.d(last, 0);
      if (total < best) {
        best = total;
        std::copy(path, path + p.n, best_path);
        on_better();
      }
      return;
    }
    for (int c : p.nearest[last]) {
      if (visited & (1u << c)) continue;
      const int nc = cost + p.d(last, c);
      if (nc + rem >= best) continue;  // rem: min_out of c and of the other unvisited cities
      path[depth] = static_cast<std::uint8_t>(c);
      dfs(depth + 1, visited | (1u << c), nc, rem - p.min_out[c], on_better, tick);
    }
  }
};

best_tour solve_sequential(const problem& p) {
  best_tour b = p.greedy();
  solver s{p, b.cost, b.path};
  s.run(p.root(), [] {}, [] {});
  return b;
}

// Expands a tour whose depth is below the threshold (children that cannot beat `bound` dropped).
std::vector<tour> children_of(const problem& p, const tour& t, int bound) {
  std::vector<tour> out;
  const int last = t.path[t.depth - 1];
  const int rem = p.remaining_bound(t) - p.min_out[last];
  for (int c : p.nearest[last]) {
    if (t.visited & (1u << c)) continue;
    tour k = t;
    k.cost += p.d(last, c);
    k.path[k.depth++] = static_cast<std::uint8_t>(c);
    k.visited |= 1u << c;
    if (k.cost + rem >= bound) continue;
    out.push_back(k);
  }
  std::reverse(out.begin(), out.end());  // a LIFO stack then hands out the nearest child first
  return out;
}

// The search runs with the progress thread paused and polls for messages at every tick instead
// (mdsm::poll costs ~40 ns when nothing has arrived). Every rank is then either searching, and
// polls every k_tick_nodes nodes, or waiting inside mdsm, which delivers too, so requests to it
// (work, locks, diffs) are served within ~40 us. With the thread running on a core it shares with
// the search, its wake-ups cost the search 7-15% on our 2-core machine (docs/APPS.md).
class polling_section {
 public:
  polling_section() { mdsm::pause_progress_thread(); }
  ~polling_section() { mdsm::resume_progress_thread(); }
  polling_section(const polling_section&) = delete;
  polling_section& operator=(const polling_section&) = delete;
};

// ---- lock: everything in coherent memory ------------------------------------------------------

constexpr int k_lock_batch = 4;               // tours taken per acquire, at most
constexpr int k_lock_refresh_ticks = 128;     // every 64K nodes: read the bound under its lock
constexpr int k_fibers_per_rank = 2;          // fibers version: workers per rank

struct shared_stack {
  std::int32_t top;
  std::int32_t active;   // workers holding tours
  std::int32_t waiting;  // workers parked on the condition variable
  std::int32_t pad;
  tour items[k_queue_capacity];
};

// `workers` > 0: that many worker fibers per rank run the worker loop (the fibers version);
// 0: the application thread runs it (the lock version).
best_tour run_lock(const problem& p, mdsm_apps::measurement& m, int workers) {
  auto* q = mdsm::alloc_collective_array<shared_stack>(1);
  auto* best = mdsm::alloc_collective_array<best_tour>(1);
  mdsm::mutex qlock, block;
  mdsm::condition_variable qcv;
  mdsm::barrier bar;
  const int np = mdsm::size();
  // Workers in the job: the share of the stack one takes per acquire depends on it.
  const int nw = np * std::max(workers, 1);
  if (mdsm::rank() == 0) {
    q->top = 1;
    q->active = 0;
    q->waiting = 0;
    q->items[0] = p.root();
    *best = p.greedy();
  }
  bar.arrive_and_wait();

  search_trace trace;
  // One worker: takes tours from the stack (several while it is deep), expands the short ones
  // and solves the long ones, until the stack is empty and no worker holds a tour. With fibers
  // each waits for the stack's lock or condition variable alone: the rank's other workers search
  // meanwhile.
  auto worker = [&] {
    std::vector<tour> children;  // expanded here, to be pushed
    std::deque<tour> mine;       // taken from the stack (or not pushed: it was full), to work on here
    bool active = false;         // counted in q->active
    for (;;) {
      if (!children.empty() || mine.empty()) {
        const double idle_since = mdsm_apps::now_s();
        std::unique_lock lk(qlock);
        std::size_t pushed = 0;
        for (; pushed < children.size() && q->top < k_queue_capacity; ++pushed) q->items[q->top++] = children[pushed];
        mine.insert(mine.end(), children.begin() + static_cast<std::ptrdiff_t>(pushed), children.end());
        children.clear();
        if (active && mine.empty()) {
          --q->active;
          active = false;
        }
        if (q->waiting > 0 && (pushed > 0 || (q->top == 0 && q->active == 0))) qcv.notify_all();
        if (mine.empty()) {
          while (q->top == 0 && q->active > 0) {
            ++q->waiting;
            qcv.wait(lk);
            --q->waiting;
          }
          if (q->top == 0) break;  // nothing queued and nobody working: done
          // Several tours per acquire while the stack is deep (up to a share of top/2 per
          // worker); a tour to expand is taken alone, so that its children are pushed before its
          // siblings are looked at: the stack stays depth first, as in the sequential search.
          const int k = std::clamp(q->top / (2 * nw), 1, k_lock_batch);
          mine.push_back(q->items[--q->top]);
          while (static_cast<int>(mine.size()) < k && q->top > 0 && mine.front().depth >= p.threshold &&
                 q->items[q->top - 1].depth >= p.threshold)
            mine.push_back(q->items[--q->top]);
          ++q->active;
          active = true;
        }
        lk.unlock();
        trace.idle_s += mdsm_apps::now_s() - idle_since;
      }
      const tour t = mine.front();
      mine.pop_front();
      const int bound = best->cost;  // read without the lock: possibly stale, never too small
      if (t.depth < p.threshold) {
        auto ks = children_of(p, t, bound);
        children.insert(children.end(), ks.begin(), ks.end());
        continue;
      }
      if (t.cost + p.remaining_bound(t) >= bound) continue;
      best_tour found;
      found.cost = bound;
      solver s{p, found.cost, found.path};
      int ticks = 0;
      const double since = mdsm_apps::now_s();
      s.run(
          t,
          [&] {
            std::lock_guard lk(block);
            if (found.cost < best->cost) {
              best->cost = found.cost;
              std::copy(found.path, found.path + p.n, best->path);
            }
          },
          [&] {
            mdsm::poll();
            // Fibers: a worker whose lock or wake-up has come runs now (and the search goes on
            // when it waits again).
            if (workers > 0) mdsm::fibers::yield();
            if (++ticks % k_lock_refresh_ticks == 0) {
              // The acquire brings the newest bound: it was written under this lock. Without it
              // a rank searches on with the bound of its last acquire of the stack's lock, and
              // at 2 ranks the search grew by a third (46 M nodes instead of 34 M at 20 cities).
              // The lock stays at the rank that took it last, so this costs messages only when
              // the other ranks have taken it in between.
              std::lock_guard lk(block);
              found.cost = std::min(found.cost, static_cast<int>(best->cost));
            } else {
              found.cost = std::min(found.cost, static_cast<int>(best->cost));
            }
          });
      trace.searched(s.nodes, since);
    }
  };
  const double start = mdsm_apps::begin_measurement();
  {
    polling_section polling;
    if (workers == 0) {
      worker();
    } else {
      std::vector<mdsm::fibers::fiber> fs;
      for (int w = 0; w < workers; ++w) fs.push_back(mdsm::fibers::spawn(worker));
      for (auto& f : fs) mdsm::fibers::join(f);
    }
  }
  bar.arrive_and_wait();
  m = mdsm_apps::end_measurement(start);
  trace.print(workers == 0 ? "lock" : "fibers");
  best_tour result = *best;  // after the barrier every write is visible
  bar.arrive_and_wait();
  return result;
}

// ---- hybrid and msg: a manager at rank 0 --------------------------------------------------------

// Tours per work reply: a worker asks again when it starts the last tour it holds, so with two
// per reply it has one more to search while its next request is served.
constexpr int k_tours_per_reply = 2;

enum class req_kind : std::int32_t { get_work = 1, better = 2, bye = 3 };
struct request {
  req_kind kind;
  std::int32_t cost;  // better: the tour's length
  std::uint8_t path[k_max_cities];
};
enum class reply_kind : std::int32_t { work = 1, done = 2 };
struct reply {
  reply_kind kind;
  std::int32_t best;  // msg: the manager's bound (hybrid reads coherent memory instead)
  std::int32_t count;
  std::int32_t pad;
  tour t[k_tours_per_reply];
};

// Handler-side state: touched by handlers (a waiting or polling application thread) and by the
// application thread; guarded by `mu`, except the atomics.
struct inbox {
  std::mutex mu;
  std::deque<std::pair<int, request>> requests;                // manager: (origin, request)
  std::deque<std::pair<reply, mdsm::stored_message>> replies;  // worker (hybrid: RELEASEs to accept)
  std::vector<mdsm::stored_message> notices;                   // hybrid worker: better-bound RELEASEs
  std::atomic<int> pending{0};                                 // requests or replies queued
  std::atomic<int> notice_pending{0};
  std::atomic<int> bound{k_no_tour};  // msg worker: the best bound announced
};

best_tour run_manager(const problem& p, bool hybrid, mdsm_apps::measurement& m) {
  const int me = mdsm::rank(), np = mdsm::size();
  const auto req_annot = hybrid ? mdsm::annotation::request : mdsm::annotation::none;
  const auto reply_annot = hybrid ? mdsm::annotation::release : mdsm::annotation::none;
  inbox box;
  const auto h_req = mdsm::register_handler("tsp.request", [&](mdsm::message& msg) {
    std::lock_guard lk(box.mu);
    box.requests.emplace_back(msg.origin(), msg.as<request>());
    box.pending.fetch_add(1, std::memory_order_release);
  });
  const auto h_reply = mdsm::register_handler("tsp.reply", [&](mdsm::message& msg) {
    std::lock_guard lk(box.mu);
    box.replies.emplace_back(msg.as<reply>(), msg.annot() == mdsm::annotation::release ? msg.store()
                                                                                       : mdsm::stored_message());
    box.pending.fetch_add(1, std::memory_order_release);
  });
  // A better tour, announced by the manager: hybrid keeps the RELEASE for the application thread
  // to accept (the bound is then read from coherent memory), msg carries the bound itself.
  const auto h_notice = mdsm::register_handler("tsp.better", [&](mdsm::message& msg) {
    if (msg.annot() == mdsm::annotation::release) {
      std::lock_guard lk(box.mu);
      box.notices.push_back(msg.store());
    } else {
      const int b = msg.as<std::int32_t>();
      int cur = box.bound.load(std::memory_order_relaxed);
      while (b < cur && !box.bound.compare_exchange_weak(cur, b, std::memory_order_relaxed)) {
      }
    }
    box.notice_pending.store(1, std::memory_order_release);
  });
  best_tour* shared_best = hybrid ? mdsm::alloc_collective_array<best_tour>(1) : nullptr;
  mdsm::barrier bar;
  best_tour best = p.greedy();  // manager: the best known; worker: its own bound and last find
  if (hybrid && me == 0) *shared_best = best;
  bar.arrive_and_wait();

  search_trace trace;
  const double start = mdsm_apps::begin_measurement();
  if (me == 0) {
    polling_section polling;
    std::vector<tour> stack{p.root()};
    std::deque<int> waiting;  // ranks whose get_work is unanswered
    int byes = 0;
    // A better tour is known: into coherent memory (hybrid), then to every worker but `from`.
    auto announce = [&](int from) {
      if (hybrid) *shared_best = best;  // the application thread may write coherent memory
      for (int w = 1; w < np; ++w)
        if (w != from) mdsm::send_value(w, h_notice, static_cast<std::int32_t>(best.cost), reply_annot);
    };
    // Pops a tour of threshold depth, expanding shorter ones (the manager's private stack).
    auto next_tour = [&]() -> std::optional<tour> {
      while (!stack.empty()) {
        tour t = stack.back();
        stack.pop_back();
        if (t.depth >= p.threshold) {
          if (t.cost + p.remaining_bound(t) < best.cost) return t;
          continue;
        }
        auto ks = children_of(p, t, best.cost);
        stack.insert(stack.end(), ks.begin(), ks.end());
      }
      return std::nullopt;
    };
    // Serves queued requests. Only the manager creates tours, so once its stack is empty every
    // get_work is answered `done`; the worker then finishes the tours it holds and says bye (after
    // its last better tour: per-sender order).
    auto serve = [&] {
      std::deque<std::pair<int, request>> reqs;
      {
        std::lock_guard lk(box.mu);
        reqs.swap(box.requests);
        box.pending.store(0, std::memory_order_relaxed);
      }
      for (auto& [from, r] : reqs) {
        if (r.kind == req_kind::better) {
          if (r.cost < best.cost) {
            best.cost = r.cost;
            std::copy(r.path, r.path + p.n, best.path);
            announce(from);
          }
        } else if (r.kind == req_kind::bye) {
          ++byes;
        } else {
          waiting.push_back(from);
        }
      }
      for (; !waiting.empty(); waiting.pop_front()) {
        reply r{reply_kind::work, 0, 0, 0, {}};
        for (; r.count < k_tours_per_reply; ++r.count) {
          auto t = next_tour();
          if (!t) break;
          r.t[r.count] = *t;
        }
        if (r.count == 0) r.kind = reply_kind::done;
        r.best = best.cost;
        mdsm::send_value(waiting.front(), h_reply, r, reply_annot);
      }
    };
    for (;;) {
      serve();
      if (auto t = next_tour()) {
        solver s{p, best.cost, best.path};
        const double since = mdsm_apps::now_s();
        s.run(
            *t, [&] { announce(0); },  // the solver has lowered `best` itself
            [&] {
              mdsm::poll();
              if (box.pending.load(std::memory_order_acquire) != 0) serve();
            });
        trace.searched(s.nodes, since);
        continue;
      }
      if (byes == np - 1) break;
      const double idle_since = mdsm_apps::now_s();
      mdsm::wait_until([&] { return box.pending.load(std::memory_order_acquire) != 0; });
      trace.idle_s += mdsm_apps::now_s() - idle_since;
    }
  } else {
    polling_section polling;
    std::deque<tour> mine;  // tours received, not yet searched
    bool asked = false, done = false;
    auto ask = [&] {
      mdsm::send_value(0, h_req, request{req_kind::get_work, 0, {}}, req_annot);
      asked = true;
    };
    // Accepts what the manager sent (hybrid: each acquire makes its best tour visible).
    auto take_replies = [&] {
      std::deque<std::pair<reply, mdsm::stored_message>> rs;
      {
        std::lock_guard lk(box.mu);
        rs.swap(box.replies);
        box.pending.store(0, std::memory_order_relaxed);
      }
      for (auto& [r, msg] : rs) {
        if (msg) msg.accept();
        asked = false;
        if (r.kind == reply_kind::done) done = true;
        mine.insert(mine.end(), r.t, r.t + r.count);
        best.cost = std::min(best.cost, hybrid ? static_cast<int>(shared_best->cost) : r.best);
      }
    };
    auto take_notices = [&] {
      box.notice_pending.store(0, std::memory_order_relaxed);
      if (hybrid) {
        std::vector<mdsm::stored_message> notes;
        {
          std::lock_guard lk(box.mu);
          notes.swap(box.notices);
        }
        if (!notes.empty()) mdsm::accept_all(notes);  // the acquire brings the manager's best tour
        best.cost = std::min(best.cost, static_cast<int>(shared_best->cost));
      } else {
        best.cost = std::min(best.cost, box.bound.load(std::memory_order_relaxed));
      }
    };
    for (;;) {
      take_replies();
      if (mine.empty()) {
        if (done) break;
        if (!asked) ask();
        const double idle_since = mdsm_apps::now_s();
        mdsm::wait_until([&] { return box.pending.load(std::memory_order_acquire) != 0; });
        trace.idle_s += mdsm_apps::now_s() - idle_since;
        continue;
      }
      const tour t = mine.front();
      mine.pop_front();
      if (mine.empty() && !asked && !done) ask();  // the reply comes while this tour is searched
      if (box.notice_pending.load(std::memory_order_acquire) != 0) take_notices();
      if (t.cost + p.remaining_bound(t) >= best.cost) continue;
      solver s{p, best.cost, best.path};
      const double since = mdsm_apps::now_s();
      s.run(
          t,
          [&] {
            request b{req_kind::better, best.cost, {}};
            std::copy(best.path, best.path + p.n, b.path);
            mdsm::send_value(0, h_req, b, req_annot);
          },
          [&] {
            mdsm::poll();
            if (box.notice_pending.load(std::memory_order_acquire) != 0) take_notices();
          });
      trace.searched(s.nodes, since);
    }
    mdsm::send_value(0, h_req, request{req_kind::bye, 0, {}}, req_annot);
  }
  bar.arrive_and_wait();
  m = mdsm_apps::end_measurement(start);
  trace.print(hybrid ? "hybrid" : "msg");
  if (hybrid) {  // announcements that came after this worker's last search (sent before the barrier)
    std::vector<mdsm::stored_message> notes;
    {
      std::lock_guard lk(box.mu);
      notes.swap(box.notices);
    }
    if (!notes.empty()) mdsm::accept_all(notes);
  }
  bar.arrive_and_wait();
  return best;  // meaningful on rank 0
}

}  // namespace

int main(int argc, char** argv) {
  mdsm::init(&argc, &argv);
  auto a = mdsm_apps::parse_args(argc, argv, "lock");
  int cities = a.size > 0 ? static_cast<int>(a.size) : (a.quick ? 12 : 19);
  if (cities < 4 || cities > k_max_cities) {
    if (mdsm::rank() == 0) std::fprintf(stderr, "tsp: --size must be 4..%d cities\n", k_max_cities);
    mdsm::finalize();
    return 2;
  }
  const problem p(cities, a.seed);
  mdsm_apps::measurement m;
  best_tour result;
  if (a.version == "lock") {
    result = run_lock(p, m, 0);
  } else if (a.version == "fibers") {
    result = run_lock(p, m, k_fibers_per_rank);
  } else if (a.version == "hybrid" || a.version == "msg") {
    result = run_manager(p, a.version == "hybrid", m);
  } else {
    if (mdsm::rank() == 0) std::fprintf(stderr, "tsp: unknown --version=%s (lock, fibers, hybrid, msg)\n", a.version.c_str());
    mdsm::finalize();
    return 2;
  }
  bool ok = true;
  if (mdsm::rank() == 0) {
    const best_tour ref = solve_sequential(p);
    ok = result.cost == ref.cost && p.valid(result);
    std::printf("tsp %s: %d cities, optimal tour %d (sequential %d)%s\n", a.version.c_str(), p.n, result.cost, ref.cost,
                p.valid(result) ? "" : ", reported path INVALID");
  }
  const int rc = mdsm_apps::report("tsp", a.version, ok, m);
  mdsm::finalize();
  return rc;
}
