// The Floyd-Warshall kernel that apsp.cpp (mdsm), apsp_mpi.cpp (plain MPI) and the sequential
// check share, and the graph they all generate.
#pragma once

#include "common/rows.hpp"

#include <cstddef>
#include <cstdint>
#include <cstring>
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

// Relaxes row i through node k: d[i][j] = min(d[i][j], d[i][k] + d[k][j]), for i != k (row k
// does not change in iteration k: d[k][k] is 0). Writes only the 8-entry chunks in which some
// entry shrinks, so pages of rows that do not change are not written (no fault, no twin, no
// diff). Written with vector types: the plain loop with a conditional store per entry compiled to
// scalar code whose speed swung by 1.6x with unrelated changes to the surrounding function.
inline void relax(std::int32_t* __restrict row_i, const std::int32_t* __restrict row_k, long k, long n) {
  using v4 = std::int32_t __attribute__((vector_size(16)));  // one SSE2 register
  const std::int32_t dik = row_i[k];
  if (dik >= k_infinity) return;
  const v4 add = v4{} + dik;
  long j = 0;
  for (; j + 8 <= n; j += 8) {
    v4 cur0, cur1, via0, via1;
    std::memcpy(&cur0, row_i + j, sizeof cur0);
    std::memcpy(&cur1, row_i + j + 4, sizeof cur1);
    std::memcpy(&via0, row_k + j, sizeof via0);
    std::memcpy(&via1, row_k + j + 4, sizeof via1);
    via0 += add;
    via1 += add;
    const v4 s0 = via0 < cur0, s1 = via1 < cur1;  // lanes: -1 where the path through k is shorter
    const v4 any = s0 | s1;
    if ((any[0] | any[1] | any[2] | any[3]) == 0) continue;
    const v4 best0 = (via0 & s0) | (cur0 & ~s0), best1 = (via1 & s1) | (cur1 & ~s1);
    std::memcpy(row_i + j, &best0, sizeof best0);
    std::memcpy(row_i + j + 4, &best1, sizeof best1);
  }
  for (; j < n; ++j) {
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
    for (long i = 0; i < n; ++i)
      if (i != k) relax(d.data() + i * n, d.data() + k * n, k, n);
  return d;
}

}  // namespace mdsm_apps
