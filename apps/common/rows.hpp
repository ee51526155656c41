// Row-distributed matrices, for the numeric applications and their plain-MPI reference
// versions (no mdsm here): a block partition of rows over ranks, inputs that depend only on
// (seed, i, j), and the element-wise comparison with the sequential result.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>

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

// ---- verification -------------------------------------------------------------------------------

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

// ---- inputs -------------------------------------------------------------------------------------

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
