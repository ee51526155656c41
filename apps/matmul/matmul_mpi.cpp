// Matrix multiply C = A x B, the plain-MPI reference version of matmul.cpp (no mdsm): the same
// inputs, kernel, row distribution and verification, with the data moved by MPI.
//
//   matmul_mpi [--version=mpi] [--size=N] [--seed=N] [--quick]
//
// Each rank generates its rows of A and B, as in matmul.cpp. Measured section: an MPI_Allgatherv
// gives every rank all of B, then each rank computes its rows of C into private memory. After
// the section, MPI_Gatherv collects C on rank 0, which compares it with the sequential product.
// Sizes: --size=N (default 512, --quick 64), as in matmul.cpp.
#include "common/mpi_app.hpp"
#include "common/rows.hpp"
#include "matmul/matmul_kernel.hpp"

#include <mpi.h>

#include <cstdint>
#include <cstdio>
#include <vector>

using namespace mdsm_apps;

int main(int argc, char** argv) {
  const args opt = parse_args(argc, argv, "mpi");
  if (!only_mpi_version(opt, "matmul_mpi")) return 2;
  const long n = opt.size > 0 ? opt.size : (opt.quick ? 64 : 512);

  const mpi_world world(&argc, &argv);
  const int me = world.me, ranks = world.ranks;
  const row_block mine = block_of(n, ranks, me);
  const std::size_t nn = static_cast<std::size_t>(n) * static_cast<std::size_t>(n);

  const row_blocks blocks(n, ranks, n);
  std::vector<std::uint64_t> block_bytes(static_cast<std::size_t>(ranks));
  for (int r = 0; r < ranks; ++r)
    block_bytes[static_cast<std::size_t>(r)] =
        static_cast<std::uint64_t>(blocks.counts[static_cast<std::size_t>(r)]) * sizeof(double);

  std::vector<double> a(static_cast<std::size_t>(mine.size() * n)), b(nn), c(a.size());
  for (long i = mine.begin; i < mine.end; ++i)
    for (long j = 0; j < n; ++j) {
      a[static_cast<std::size_t>((i - mine.begin) * n + j)] = a_value(opt.seed, i, j);
      b[static_cast<std::size_t>(i * n + j)] = b_value(opt.seed, i, j);
    }

  mpi_section section;
  section.begin();
  section.communicate([&] {
    MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, b.data(), blocks.counts.data(), blocks.displs.data(),
                   MPI_DOUBLE, MPI_COMM_WORLD);
  });
  section.count_allgather(block_bytes);
  multiply_rows(a.data(), b.data(), n, mine.size(), c.data());
  section.end();

  std::vector<double> all_c(me == 0 ? nn : 0);
  MPI_Gatherv(c.data(), static_cast<int>(c.size()), MPI_DOUBLE, all_c.data(), blocks.counts.data(),
              blocks.displs.data(), MPI_DOUBLE, 0, MPI_COMM_WORLD);
  bool ok = true;
  if (me == 0) {
    std::vector<double> want(nn), ra(nn), rb(nn);
    for (long i = 0; i < n; ++i)
      for (long j = 0; j < n; ++j) {
        ra[static_cast<std::size_t>(i * n + j)] = a_value(opt.seed, i, j);
        rb[static_cast<std::size_t>(i * n + j)] = b_value(opt.seed, i, j);
      }
    multiply_rows(ra.data(), rb.data(), n, n, want.data());
    ok = compare("matmul C", all_c.data(), want.data(), nn, 1e-12);
  }
  const int rc = section.report("matmul", opt.version, ok);
  MPI_Finalize();
  return rc;
}
