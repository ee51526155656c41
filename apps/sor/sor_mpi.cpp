// Red-black SOR, the plain-MPI reference version of sor.cpp (no mdsm): the same grid, row
// distribution, arithmetic (sor_kernel.hpp) and verification, with the boundary rows moved by MPI.
//
//   sor_mpi [--version=mpi] [--size=N] [--steps=S] [--seed=N] [--quick]
//
// Each rank keeps its block of rows plus a ghost row above and below (where it has a neighbour
// rank), all generated from the seed. After every half-sweep but the last, each rank exchanges
// one row with each neighbour (MPI_Sendrecv: its first row up and the ghost below in, its last
// row down and the ghost above in), so the next half-sweep, which reads only points of the colour
// just updated, sees its neighbours' new values. After the measured section MPI_Gatherv collects
// the grid on rank 0, which compares it with the sequential SOR.
// Sizes: --size=N (default 1024, --quick 64), --steps=S iterations (default 20, --quick 4).
#include "common/mpi_app.hpp"
#include "common/rows.hpp"
#include "sor/sor_kernel.hpp"

#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <vector>

using namespace mdsm_apps;

int main(int argc, char** argv) {
  const args opt = parse_args(argc, argv, "mpi");
  if (!only_mpi_version(opt, "sor_mpi")) return 2;
  const long n = opt.size > 0 ? opt.size : (opt.quick ? 64 : 1024);
  const long iterations = opt.steps > 0 ? opt.steps : (opt.quick ? 4 : 20);
  const long half_sweeps = 2 * iterations;

  const mpi_world world(&argc, &argv);
  const int me = world.me, ranks = world.ranks;
  if (n < 3 || n < ranks) {
    if (me == 0) std::fprintf(stderr, "sor_mpi: the grid needs at least 3 rows and one row per rank\n");
    MPI_Finalize();
    return 2;
  }
  const row_block mine = block_of(n, ranks, me);
  const int up = mine.begin > 0 ? owner_of_row(n, ranks, mine.begin - 1) : MPI_PROC_NULL;
  const int down = mine.end < n ? owner_of_row(n, ranks, mine.end) : MPI_PROC_NULL;
  // Local rows: global rows [first, last), our block and its ghost rows.
  const long first = std::max(mine.begin - 1, 0L), last = std::min(mine.end + 1, n);
  std::vector<double> g(static_cast<std::size_t>((last - first) * n));
  for (long i = first; i < last; ++i)
    for (long j = 0; j < n; ++j) g[static_cast<std::size_t>((i - first) * n + j)] = initial_value(opt.seed, i, j);
  auto row = [&](long i) { return g.data() + (i - first) * n; };
  // Where a missing neighbour's (MPI_PROC_NULL) ghost row would go: Open MPI wants a valid buffer.
  std::vector<double> nowhere(static_cast<std::size_t>(n));
  double* const ghost_above = up == MPI_PROC_NULL ? nowhere.data() : row(mine.begin - 1);
  double* const ghost_below = down == MPI_PROC_NULL ? nowhere.data() : row(mine.end);
  const int row_len = static_cast<int>(n);
  const auto row_bytes = static_cast<std::uint64_t>(n) * sizeof(double);

  mpi_section section;
  section.begin();
  for (long s = 0; s < half_sweeps; ++s) {
    half_sweep(g.data(), first, n, mine.begin, mine.end, static_cast<int>(s % 2));
    if (s + 1 == half_sweeps) break;
    section.communicate([&] {
      MPI_Sendrecv(row(mine.begin), row_len, MPI_DOUBLE, up, 0, ghost_below, row_len, MPI_DOUBLE, down, 0,
                   MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      MPI_Sendrecv(row(mine.end - 1), row_len, MPI_DOUBLE, down, 1, ghost_above, row_len, MPI_DOUBLE, up, 1,
                   MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    });
    section.count_send(up, row_bytes);
    section.count_send(down, row_bytes);
  }
  section.end();

  const std::size_t nn = static_cast<std::size_t>(n) * static_cast<std::size_t>(n);
  const row_blocks blocks(n, ranks, n);
  std::vector<double> all(me == 0 ? nn : 0);
  MPI_Gatherv(row(mine.begin), static_cast<int>(mine.size() * n), MPI_DOUBLE, all.data(), blocks.counts.data(),
              blocks.displs.data(), MPI_DOUBLE, 0, MPI_COMM_WORLD);
  bool ok = true;
  if (me == 0) {
    std::vector<double> want(nn);
    for (long i = 0; i < n; ++i)
      for (long j = 0; j < n; ++j) want[static_cast<std::size_t>(i * n + j)] = initial_value(opt.seed, i, j);
    for (long s = 0; s < half_sweeps; ++s) half_sweep(want.data(), 0, n, 0, n, static_cast<int>(s % 2));
    ok = compare("sor grid", all.data(), want.data(), nn, 1e-12);
  }
  const int rc = section.report("sor", opt.version, ok);
  MPI_Finalize();
  return rc;
}
