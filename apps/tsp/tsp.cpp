// TSP: branch and bound for the travelling salesman problem (TreadMarks/CarlOS application).
//
//   tsp --version=lock|hybrid|msg [--size=CITIES] [--seed=N] [--quick]
//
// Cities are points drawn deterministically from the seed; distances are rounded Euclidean. A
// partial tour is a fixed-size descriptor. Tours shorter than the depth threshold are expanded
// into their children; longer ones are solved locally by depth-first branch and bound.
//
//   lock    the tour stack lives in coherent memory under one mdsm::mutex (a condition variable
//           parks idle workers); the best tour lives in coherent memory under a second mutex and
//           its length is read without the lock for pruning (a stale bound is only weaker).
//   hybrid  the tour stack is private to the manager (rank 0), whose application thread serves
//           work requests (REQUEST messages its handler only queues) with RELEASE replies; a
//           better tour is posted to the manager in a REQUEST, the manager writes it into
//           coherent memory, and workers see it after the next RELEASE reply they accept.
//   msg     the same protocol with NONE messages only and the bound in the payload: the
//           message-passing reference, no shared memory.
// The result (optimal tour length) is verified against a sequential branch and bound on rank 0.
#include "../common/app.hpp"

#include <mdsm/mdsm.hpp>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdio>
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
// `on_better`), `tick` is called every 4096 nodes and may lower `best`.
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
    if ((++nodes & 4095) == 0) tick();
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

// ---- lock: everything in coherent memory ------------------------------------------------------

struct shared_stack {
  std::int32_t top;
  std::int32_t active;   // workers holding a tour
  std::int32_t waiting;  // workers parked on the condition variable
  std::int32_t pad;
  tour items[k_queue_capacity];
};

best_tour run_lock(const problem& p, mdsm_apps::measurement& m) {
  auto* q = mdsm::alloc_collective_array<shared_stack>(1);
  auto* best = mdsm::alloc_collective_array<best_tour>(1);
  mdsm::mutex qlock, block;
  mdsm::condition_variable qcv;
  mdsm::barrier bar;
  if (mdsm::rank() == 0) {
    q->top = 1;
    q->active = 0;
    q->waiting = 0;
    q->items[0] = p.root();
    *best = p.greedy();
  }
  bar.arrive_and_wait();

  const double start = mdsm_apps::begin_measurement();
  std::vector<tour> children;
  bool finished = false;
  for (;;) {
    tour t;
    {
      std::unique_lock lk(qlock);
      std::size_t pushed = 0;
      for (; pushed < children.size() && q->top < k_queue_capacity; ++pushed) q->items[q->top++] = children[pushed];
      children.erase(children.begin(), children.begin() + static_cast<std::ptrdiff_t>(pushed));
      if (finished) --q->active;
      if (q->waiting > 0 && (pushed > 0 || (q->top == 0 && q->active == 0))) qcv.notify_all();
      finished = false;
      if (children.empty()) {
        while (q->top == 0 && q->active > 0) {
          ++q->waiting;
          qcv.wait(lk);
          --q->waiting;
        }
        if (q->top == 0) break;  // nothing queued and nobody working: done
        t = q->items[--q->top];
      } else {  // the stack is full: work on an overflow tour here
        t = children.back();
        children.pop_back();
      }
      ++q->active;
    }
    finished = true;
    int bound = best->cost;  // read without the lock: possibly stale, never too small
    if (t.depth < p.threshold) {
      auto ks = children_of(p, t, bound);
      children.insert(children.end(), ks.begin(), ks.end());
      continue;
    }
    best_tour mine;
    mine.cost = bound;
    solver s{p, mine.cost, mine.path};
    s.run(
        t,
        [&] {
          std::lock_guard lk(block);
          if (mine.cost < best->cost) {
            best->cost = mine.cost;
            std::copy(mine.path, mine.path + p.n, best->path);
          }
        },
        [&] { mine.cost = std::min(mine.cost, static_cast<int>(best->cost)); });
  }
  bar.arrive_and_wait();
  m = mdsm_apps::end_measurement(start);
  best_tour result = *best;  // after the barrier every write is visible
  bar.arrive_and_wait();
  return result;
}

// ---- hybrid and msg: a manager at rank 0 --------------------------------------------------------

enum class req_kind : std::int32_t { get_work = 1, better = 2 };
struct request {
  req_kind kind;
  std::int32_t cost;
  std::uint8_t path[k_max_cities];
};
enum class reply_kind : std::int32_t { work = 1, done = 2 };
struct reply {
  reply_kind kind;
  std::int32_t best;  // msg: the manager's bound (hybrid reads coherent memory instead)
  tour t;
};

// Handler-side state: touched by handlers (progress thread or a waiting application thread) and
// by the application thread; guarded by `mu`.
struct inbox {
  std::mutex mu;
  std::deque<std::pair<int, request>> requests;  // manager: (origin, request)
  std::optional<reply> answer;                   // worker: the reply to its get_work
  mdsm::stored_message answer_msg;               // hybrid: the RELEASE to accept
  std::atomic<int> pending{0};
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
    box.answer = msg.as<reply>();
    if (msg.annot() == mdsm::annotation::release) box.answer_msg = msg.store();
    box.pending.fetch_add(1, std::memory_order_release);
  });
  best_tour* shared_best = hybrid ? mdsm::alloc_collective_array<best_tour>(1) : nullptr;
  mdsm::barrier bar;
  best_tour best = p.greedy();  // manager: the best known; worker: its own bound and last find
  if (hybrid && me == 0) *shared_best = best;
  bar.arrive_and_wait();

  const double start = mdsm_apps::begin_measurement();
  if (me == 0) {
    std::vector<tour> stack{p.root()};
    std::deque<int> waiting;  // ranks whose get_work is unanswered
    bool finished = false;
    auto improve = [&](int cost, const std::uint8_t* path) {
      if (cost >= best.cost) return;
      best.cost = cost;
      std::copy(path, path + p.n, best.path);
      if (hybrid) *shared_best = best;  // the application thread may write coherent memory
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
    auto answer = [&](int to, reply r) {
      r.best = best.cost;
      mdsm::send_value(to, h_reply, r, reply_annot);
    };
    // Serves queued requests; `idle`: the manager itself has no tour (for termination).
    auto serve = [&](bool idle) {
      std::deque<std::pair<int, request>> reqs;
      {
        std::lock_guard lk(box.mu);
        reqs.swap(box.requests);
        box.pending.store(0, std::memory_order_relaxed);
      }
      for (auto& [from, r] : reqs) {
        if (r.kind == req_kind::better) improve(r.cost, r.path);
        else waiting.push_back(from);
      }
      while (!waiting.empty()) {
        auto t = next_tour();
        if (!t) break;
        answer(waiting.front(), reply{reply_kind::work, 0, *t});
        waiting.pop_front();
      }
      if (idle && stack.empty() && static_cast<int>(waiting.size()) == np - 1) {
        for (int w : waiting) answer(w, reply{reply_kind::done, 0, tour{}});
        waiting.clear();
        finished = true;
      }
    };
    while (!finished) {
      serve(false);
      if (auto t = next_tour()) {
        solver s{p, best.cost, best.path};
        s.run(
            *t,
            [&] {  // the solver has lowered `best` itself: publish it
              if (hybrid) *shared_best = best;
            },
            [&] {
              if (box.pending.load(std::memory_order_acquire) != 0) serve(false);
            });
        continue;
      }
      serve(true);
      if (finished) break;
      mdsm::wait_until([&] { return box.pending.load(std::memory_order_acquire) != 0; });
    }
  } else {
    for (;;) {
      mdsm::send_value(0, h_req, request{req_kind::get_work, 0, {}}, req_annot);
      mdsm::wait_until([&] { return box.pending.load(std::memory_order_acquire) != 0; });
      reply r;
      mdsm::stored_message msg;
      {
        std::lock_guard lk(box.mu);
        r = *box.answer;
        box.answer.reset();
        msg = std::move(box.answer_msg);
        box.pending.store(0, std::memory_order_relaxed);
      }
      if (msg) msg.accept();  // hybrid: the acquire makes the manager's best tour visible
      if (r.kind == reply_kind::done) break;
      const int known = hybrid ? shared_best->cost : r.best;
      best.cost = std::min(best.cost, known);
      solver s{p, best.cost, best.path};
      s.run(
          r.t,
          [&] {
            request b{req_kind::better, best.cost, {}};
            std::copy(best.path, best.path + p.n, b.path);
            mdsm::send_value(0, h_req, b, req_annot);
          },
          [] {});
    }
  }
  bar.arrive_and_wait();
  m = mdsm_apps::end_measurement(start);
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
    result = run_lock(p, m);
  } else if (a.version == "hybrid" || a.version == "msg") {
    result = run_manager(p, a.version == "hybrid", m);
  } else {
    if (mdsm::rank() == 0) std::fprintf(stderr, "tsp: unknown --version=%s (lock, hybrid, msg)\n", a.version.c_str());
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
