// The speedup this machine gives a program that does not communicate at all, and how much it
// varies: the ceiling and the noise of every two-rank application table (docs/APPS_numeric.md).
//
// Each round, interleaved: rank 0 alone runs SOR's half-sweeps (apps/sor/sor_kernel.hpp) over a
// whole private n x n grid while the other ranks wait; then every rank runs the same number of
// half-sweeps over its own private block of n/P rows at once, with no message in between. The
// round's "ideal speedup" is the alone time over the slowest rank's time. Printed: per round,
// and the median with its range.
//
// Run: tools/mdsmrun -n 2 build-rel/bench/compute_spread [n = 2048] [steps = 250] [rounds = 5]
#include "sor/sor_kernel.hpp"

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace {

// steps red + black sweeps over rows 1 .. rows of `g`, a grid n wide whose rows 0 and rows + 1
// are halos held fixed. Returns seconds.
double sweeps(std::vector<double>& g, long rows, long n, int steps) {
  const auto t0 = std::chrono::steady_clock::now();
  for (int s = 0; s < steps; ++s)
    for (int colour = 0; colour < 2; ++colour) mdsm_apps::half_sweep(g.data(), 0, n, 1, rows + 1, colour);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

std::vector<double> grid(long rows, long n) {
  std::vector<double> g(static_cast<std::size_t>((rows + 2) * n));
  for (long i = 0; i < rows + 2; ++i)
    for (long j = 0; j < n; ++j) g[static_cast<std::size_t>(i * n + j)] = mdsm_apps::initial_value(7, i, j);
  return g;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int me = 0, p = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &me);
  MPI_Comm_size(MPI_COMM_WORLD, &p);
  const long n = argc > 1 ? std::atol(argv[1]) : 2048;
  const int steps = argc > 2 ? std::atoi(argv[2]) : 250;
  const int rounds = argc > 3 ? std::atoi(argv[3]) : 5;
  if (n < 4 || steps < 1 || rounds < 1 || n / p < 1) {
    if (me == 0) std::fprintf(stderr, "usage: compute_spread [n >= 4] [steps >= 1] [rounds >= 1]\n");
    MPI_Finalize();
    return 1;
  }
  // Rows 1 .. n-2 are interior; each rank takes its share of them, as sor's row blocks do.
  const long interior = n - 2, mine = interior / p + (me < interior % p ? 1 : 0);
  std::vector<double> whole = me == 0 ? grid(interior, n) : std::vector<double>{};
  std::vector<double> part = grid(mine, n);
  std::vector<double> ideal;
  if (me == 0)
    std::printf("compute_spread: %ldx%ld grid, %d iterations, %d ranks\nround  alone_s  slowest_s  ideal_speedup\n", n,
                n, steps, p);
  for (int r = 0; r < rounds; ++r) {
    MPI_Barrier(MPI_COMM_WORLD);
    const double alone = me == 0 ? sweeps(whole, interior, n, steps) : 0.0;
    MPI_Barrier(MPI_COMM_WORLD);
    const double t = sweeps(part, mine, n, steps);
    double slowest = 0;
    MPI_Reduce(&t, &slowest, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    if (me == 0) {
      ideal.push_back(alone / slowest);
      std::printf("%5d  %7.3f  %9.3f  %13.2f\n", r + 1, alone, slowest, alone / slowest);
    }
  }
  if (me == 0)
    std::printf("ideal speedup: median %.2f [%.2f-%.2f]\n", median(ideal), *std::min_element(ideal.begin(), ideal.end()),
                *std::max_element(ideal.begin(), ideal.end()));
  MPI_Finalize();
  return 0;
}
