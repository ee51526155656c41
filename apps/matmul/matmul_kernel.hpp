// The matrix multiply kernel that the mdsm versions, the plain-MPI version and the sequential
// check share, and the input matrices they all generate.
//
// The kernel is cache-blocked: the naive row loop streams all of B (n² doubles) once per row of C,
// so beyond a few hundred rows it runs at memory speed (2048² took ~6.6 s on one core of our
// machine). Here a block of k_block_k rows x k_block_j columns of B is copied into a packed
// buffer (256 KiB, in the L2 cache; packed, because the rows of B a power of two apart would
// otherwise fall into the same L1 sets) while the rows of C pass over it, and a k_tile_i x
// k_tile_j tile of C stays in registers while k runs over the block, so each element of B loaded
// serves k_tile_i rows. For every element of C the products are still added in ascending k, as in
// the naive loop, so the result is the same to the bit whatever the blocking and however the rows
// are distributed.
#pragma once

#include "common/rows.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace mdsm_apps {

inline double a_value(std::uint64_t seed, long i, long j) { return uniform3(seed, i, j) - 0.5; }
inline double b_value(std::uint64_t seed, long i, long j) { return uniform3(seed + 1, i, j) - 0.5; }

inline constexpr long k_block_k = 128;  // rows of B per block
inline constexpr long k_block_j = 256;  // columns of B (and C) per block
inline constexpr long k_tile_i = 4;     // a tile of C kept in registers: rows ...
inline constexpr long k_tile_j = 4;     // ... and columns

// c[r][j] += sum over k in [k0, k1), ascending, of a[r][k] * B[k][j] for the first `width`
// (<= k_tile_j) columns of the Rows x k_tile_j tile of C at c. a and c have row stride n and point
// to the tile's first row; `packed` holds the tile's columns of B, k_tile_j values per k (the
// columns beyond `width` are zero and not stored).
template <long Rows>
void multiply_tile(const double* a, const double* packed, long n, long k0, long k1, double* c, long width) {
  double acc[Rows][k_tile_j];
  for (long r = 0; r < Rows; ++r)
    for (long j = 0; j < k_tile_j; ++j) acc[r][j] = j < width ? c[r * n + j] : 0.0;
  for (long k = k0; k < k1; ++k, packed += k_tile_j)
    for (long r = 0; r < Rows; ++r) {
      const double x = a[r * n + k];
      for (long j = 0; j < k_tile_j; ++j) acc[r][j] += x * packed[j];
    }
  for (long r = 0; r < Rows; ++r)
    for (long j = 0; j < width; ++j) c[r * n + j] = acc[r][j];
}

// Copies B[k0..k1)[j0..j1) into `packed` tile by tile: for each k_tile_j columns, their values of
// row k0, then of row k0 + 1, ...; a last partial tile is padded with zeros.
inline void pack_block(const double* b, long n, long k0, long k1, long j0, long j1, double* packed) {
  for (long j = j0; j < j1; j += k_tile_j)
    for (long k = k0; k < k1; ++k)
      for (long x = 0; x < k_tile_j; ++x) *packed++ = j + x < j1 ? b[k * n + j + x] : 0.0;
}

// Rows Rows of C (starting at c, row stride n), columns [j0, j1), over k in [k0, k1), from the
// block packed by pack_block.
template <long Rows>
void multiply_strip(const double* a, const double* packed, long n, long k0, long k1, long j0, long j1, double* c) {
  for (long j = j0; j < j1; j += k_tile_j, packed += k_tile_j * (k1 - k0))
    multiply_tile<Rows>(a, packed, n, k0, k1, c + j, std::min(k_tile_j, j1 - j));
}

// Rows [0, rows) of C = A x B, n x n matrices: `a` and `c` point to the first of those rows of A
// and C (row stride n), `b` to all of B. c need not be initialized.
inline void multiply_rows(const double* a, const double* b, long n, long rows, double* c) {
  std::fill(c, c + rows * n, 0.0);
  std::vector<double> packed(static_cast<std::size_t>(k_block_k * (k_block_j + k_tile_j)));
  for (long j0 = 0; j0 < n; j0 += k_block_j) {
    const long j1 = std::min(n, j0 + k_block_j);
    for (long k0 = 0; k0 < n; k0 += k_block_k) {
      const long k1 = std::min(n, k0 + k_block_k);
      pack_block(b, n, k0, k1, j0, j1, packed.data());
      long i = 0;
      for (; i + k_tile_i <= rows; i += k_tile_i)
        multiply_strip<k_tile_i>(a + i * n, packed.data(), n, k0, k1, j0, j1, c + i * n);
      for (; i < rows; ++i) multiply_strip<1>(a + i * n, packed.data(), n, k0, k1, j0, j1, c + i * n);
    }
  }
}

}  // namespace mdsm_apps
