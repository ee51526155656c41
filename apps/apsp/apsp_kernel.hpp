// The Floyd-Warshall kernel that apsp.cpp (mdsm), apsp_mpi.cpp (plain MPI) and the sequential
// check share, and the graph they all generate.
#pragma once

#include "common/rows.hpp"

#include <cstddef>
#include <cstdint>
#include <vector>

namespace mdsm_apps {

inline constexpr std::int32_t k_infinity = 1 << 29;  // twice this still fits in int32

// Edge i -> j exists with probability 1/5, weight 1..100; the diagonal is 0.
inline std::int32_t edge_weight(std::uint64_t seed, long i, long j) {
  if (i == j) return 0;
  const std::uint64_t h = hash3(seed, static_cast<std::uint64_t>(i), static_cast<std::uint64_t>(j));
  if (h % 5 != 0) return k_infinity;
  return static_cast<std::int32_t>(1 + (h >> 16) % 100);
}

// Relaxes row i through node k: d[i][j] = min(d[i][j], d[i][k] + d[k][j]). Writes only entries
// that shrink, so pages of rows that do not change are not written (no twin, no diff).
// (A vectorized form, 8 entries per step and only shrinking chunks stored, ran 3x faster, but
// with it apsp hybrid at 4 ranks verified wrong distances in a few runs of 40; until that is
// understood the scalar loop stays. docs/APPS_numeric.md, "The apsp kernel".)
inline void relax(std::int32_t* row_i, const std::int32_t* row_k, long k, long n) {
  const std::int32_t dik = row_i[k];
  if (dik >= k_infinity) return;
  for (long j = 0; j < n; ++j) {
    const std::int32_t v = dik + row_k[j];
    if (v < row_i[j]) row_i[j] = v;
  }
}

// The distance matrix (n x n, row-major) the sequential algorithm computes: what every version
// is verified against.
inline std::vector<std::int32_t> sequential_apsp(std::uint64_t seed, long n) {
  std::vector<std::int32_t> d(static_cast<std::size_t>(n) * static_cast<std::size_t>(n));
  for (long i = 0; i < n; ++i)
    for (long j = 0; j < n; ++j) d[static_cast<std::size_t>(i * n + j)] = edge_weight(seed, i, j);
  for (long k = 0; k < n; ++k)
    for (long i = 0; i < n; ++i) relax(d.data() + i * n, d.data() + k * n, k, n);
  return d;
}

}  // namespace mdsm_apps
