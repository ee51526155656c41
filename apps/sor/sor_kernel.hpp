// The red-black SOR arithmetic that sor.cpp (mdsm), sor_mpi.cpp (plain MPI) and the sequential
// check share, and the initial grid they all generate.
#pragma once

#include "common/rows.hpp"

#include <cstdint>

namespace mdsm_apps {

inline constexpr double k_omega = 1.25;

inline double initial_value(std::uint64_t seed, long i, long j) { return uniform3(seed, i, j); }

// Updates the points of `colour` ((i + j) % 2 == colour) in the global rows [begin, end),
// clipped to the interior, of an n x n grid; `rows` holds the grid's rows from global row
// `first` on (so row i is at rows + (i - first) * n, and rows begin - 1 and end must be there
// too, where interior).
inline void half_sweep(double* rows, long first, long n, long begin, long end, int colour) {
  if (begin < 1) begin = 1;
  if (end > n - 1) end = n - 1;
  for (long i = begin; i < end; ++i) {
    double* row = rows + (i - first) * n;
    const double* up = row - n;
    const double* down = row + n;
    long j = (i + colour) % 2;
    if (j == 0) j = 2;
    for (; j < n - 1; j += 2)
      row[j] = (1 - k_omega) * row[j] + k_omega * 0.25 * (up[j] + down[j] + row[j - 1] + row[j + 1]);
  }
}

}  // namespace mdsm_apps
