// All-pairs shortest paths, the plain-MPI reference version of apsp.cpp (no mdsm): the same
// graph, kernel, row distribution and verification, with the data moved by MPI.
//
//   apsp_mpi [--version=mpi] [--size=N] [--seed=N] [--quick]
//
// Each rank keeps its block of rows in private memory. In iteration k the owner of row k
// broadcasts it (MPI_Bcast, n int32) and every rank relaxes its rows through node k: the message
// a distributed Floyd-Warshall needs per iteration, and the same synchronization as the mdsm
// barrier version (no rank starts iteration k+1 before row k+1 is final). After the section,
// MPI_Gatherv collects the matrix on rank 0, which compares it with the sequential result.
// Sizes: --size=N nodes (default 512, --quick 64), as in apsp.cpp.
#include "apsp/apsp_kernel.hpp"
#include "common/mpi_app.hpp"
#include "common/rows.hpp"

#include <mpi.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <vector>

using namespace mdsm_apps;

int main(int argc, char** argv) {
  const args opt = parse_args(argc, argv, "mpi");
  if (!only_mpi_version(opt, "apsp_mpi")) return 2;
  const long n = opt.size > 0 ? opt.size : (opt.quick ? 64 : 512);

  const mpi_world world(&argc, &argv);
  const int me = world.me, ranks = world.ranks;
  const row_block mine = block_of(n, ranks, me);
  const std::size_t nn = static_cast<std::size_t>(n) * static_cast<std::size_t>(n);

  std::vector<std::int32_t> d(static_cast<std::size_t>(mine.size() * n)), row_k(static_cast<std::size_t>(n));
  auto row = [&](long i) { return d.data() + (i - mine.begin) * n; };
  for (long i = mine.begin; i < mine.end; ++i)
    for (long j = 0; j < n; ++j) row(i)[j] = edge_weight(opt.seed, i, j);

  mpi_section section;
  section.begin();
  for (long k = 0; k < n; ++k) {
    const int root = owner_of_row(n, ranks, k);
    if (root == me) std::copy(row(k), row(k) + n, row_k.begin());
    section.communicate([&] { MPI_Bcast(row_k.data(), static_cast<int>(n), MPI_INT32_T, root, MPI_COMM_WORLD); });
    // A broadcast as the messages of a flat tree: the root sends the row to every other rank.
    if (root == me)
      for (int r = 0; r < ranks; ++r)
        if (r != me) section.count_send(r, static_cast<std::uint64_t>(n) * sizeof(std::int32_t));
    for (long i = mine.begin; i < mine.end; ++i)
      if (i != k) relax(row(i), row_k.data(), k, n);
  }
  section.end();

  const row_blocks blocks(n, ranks, n);
  std::vector<std::int32_t> all(me == 0 ? nn : 0);
  MPI_Gatherv(d.data(), static_cast<int>(d.size()), MPI_INT32_T, all.data(), blocks.counts.data(),
              blocks.displs.data(), MPI_INT32_T, 0, MPI_COMM_WORLD);
  bool ok = true;
  if (me == 0) {
    const std::vector<std::int32_t> want = sequential_apsp(opt.seed, n);
    ok = compare("apsp distances", all.data(), want.data(), nn);
  }
  const int rc = section.report("apsp", opt.version, ok);
  MPI_Finalize();
  return rc;
}
