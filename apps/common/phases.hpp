// Pieces the phase-structured applications (matmul, apsp, sor) share: a block partition of
// rows over ranks, and a point-to-point "signals" channel that replaces a global barrier by
// RELEASE messages to exactly the ranks that need to see a step's writes.
#pragma once

#include <mdsm/mdsm.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <map>
#include <mutex>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace mdsm_apps {

// ---- block row partition ---------------------------------------------------------------------

// Rows [begin, end) of an n-row matrix owned by `rank` out of `ranks`: contiguous blocks whose
// sizes differ by at most one (the first n % ranks ranks get one row more).
struct row_block {
  long begin = 0;
  long end = 0;
  long size() const { return end - begin; }
  bool contains(long row) const { return row >= begin && row < end; }
};

inline row_block block_of(long n, int ranks, int rank) {
  const long base = n / ranks, extra = n % ranks, r = rank;
  const long begin = r * base + std::min(r, extra);
  return {begin, begin + base + (r < extra ? 1 : 0)};
}

// The rank whose block holds `row` (inverse of block_of).
inline int owner_of_row(long n, int ranks, long row) {
  const long base = n / ranks, extra = n % ranks;
  const long big = extra * (base + 1);  // rows held by the ranks with one row more
  if (row < big) return static_cast<int>(row / (base + 1));
  return static_cast<int>(extra + (row - big) / base);
}

// ---- the signals channel ------------------------------------------------------------------------

// Point-to-point step signals. signal(dest, step) sends `dest` a RELEASE message naming `step`;
// wait(step, sources) returns once a signal for `step` has arrived from every rank in `sources`,
// and accepts them (together, as one acquire), so the caller then sees every write each source
// made before signalling. Signals for later steps that arrive early are kept until waited for.
//
// Threads: the handler (mdsm's delivery context) only stores messages, under `mu_`; the
// application thread takes them out under `mu_` and accepts them outside it. The handler never
// blocks and never touches coherent memory.
class signals {
 public:
  // Collective: registers the handler `name` (every rank creates its channels in the same order).
  explicit signals(const char* name) {
    id_ = mdsm::register_handler(name, [this](mdsm::message& m) {
      const auto step = m.as<std::int64_t>();
      std::lock_guard lk(mu_);
      arrived_.emplace(std::make_pair(step, m.origin()), m.store());
    });
  }
  signals(const signals&) = delete;
  signals& operator=(const signals&) = delete;

  void signal(int dest, std::int64_t step) { mdsm::send_value(dest, id_, step, mdsm::annotation::release); }
  void signal(std::span<const int> dests, std::int64_t step) {
    for (int d : dests) signal(d, step);
  }

  void wait(std::int64_t step, std::span<const int> sources) {
    if (sources.empty()) return;
    mdsm::wait_until([&] {
      std::lock_guard lk(mu_);
      for (int s : sources)
        if (arrived_.find({step, s}) == arrived_.end()) return false;
      return true;
    });
    std::vector<mdsm::stored_message> got;
    got.reserve(sources.size());
    {
      std::lock_guard lk(mu_);
      for (int s : sources) {
        auto it = arrived_.find({step, s});
        got.push_back(std::move(it->second));
        arrived_.erase(it);
      }
    }
    if (got.size() == 1) got.front().accept();
    else mdsm::accept_all(got);
  }
  void wait(std::int64_t step, int source) { wait(step, std::span<const int>(&source, 1)); }

  // Signals still waiting to be accepted (0 at the end of a correct program).
  std::size_t pending() {
    std::lock_guard lk(mu_);
    return arrived_.size();
  }

 private:
  mdsm::handler_id id_ = 0;
  std::mutex mu_;
  std::map<std::pair<std::int64_t, int>, mdsm::stored_message> arrived_;
};

// Every rank except `me`.
inline std::vector<int> other_ranks(int me, int ranks) {
  std::vector<int> v;
  for (int r = 0; r < ranks; ++r)
    if (r != me) v.push_back(r);
  return v;
}

// ---- verification helpers ------------------------------------------------------------------------

// Compares `got` with `want` element by element (absolute/relative tolerance `tol`; 0: exact).
// Prints the first few mismatches to stderr and returns whether all matched.
template <class T>
bool compare(const char* what, const T* got, const T* want, std::size_t n, double tol = 0) {
  std::size_t bad = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const double g = static_cast<double>(got[i]), w = static_cast<double>(want[i]);
    const bool ok = tol == 0 ? got[i] == want[i] : std::abs(g - w) <= tol * std::max(1.0, std::abs(w));
    if (!ok && bad++ < 5) std::fprintf(stderr, "%s: element %zu is %.17g, expected %.17g\n", what, i, g, w);
  }
  if (bad) std::fprintf(stderr, "%s: %zu of %zu elements wrong\n", what, bad, n);
  return bad == 0;
}

// A small deterministic generator (splitmix64), the same on every rank and machine.
struct splitmix64 {
  std::uint64_t state;
  explicit splitmix64(std::uint64_t seed) : state(seed) {}
  std::uint64_t next() {
    std::uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }  // [0, 1)
};

// A value that depends only on (seed, i, j): lets every rank fill its own rows of a matrix and
// the sequential reference fill the same matrix, without sharing a generator's state.
inline std::uint64_t hash3(std::uint64_t seed, std::uint64_t i, std::uint64_t j) {
  splitmix64 g(seed * 0x100000001b3ull ^ (i << 32) ^ j);
  g.next();
  return g.next();
}
inline double uniform3(std::uint64_t seed, std::uint64_t i, std::uint64_t j) {
  return static_cast<double>(hash3(seed, i, j) >> 11) * 0x1.0p-53;
}

}  // namespace mdsm_apps
