// Matrix multiply C = A x B (n x n doubles, all three in coherent memory), rows of C
// block-distributed over the ranks. The coarsest-grained of the reference applications: every
// rank reads its rows of A and all of B, writes its rows of C, and synchronizes once at the end.
//
// Versions (--version=):
//   barrier  each rank computes its block of C, then a global barrier.
//   hybrid   each rank sends rank 0 a RELEASE message when its block is done (a completion
//            signal instead of a barrier); rank 0 accepts them, after which it sees all of C.
// Sizes: --size=N (default 512, --quick 64). Rank 0 verifies C against a sequential product.
// The kernel (matmul_kernel.hpp, cache-blocked) is shared with matmul_mpi.cpp, the plain-MPI
// reference version, and with the sequential check.
#include "common/app.hpp"
#include "common/phases.hpp"
#include "matmul/matmul_kernel.hpp"

#include <mdsm/mdsm.hpp>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

using namespace mdsm_apps;

int main(int argc, char** argv) {
  const args opt = parse_args(argc, argv, "barrier");
  if (opt.version != "barrier" && opt.version != "hybrid") {
    std::fprintf(stderr, "matmul: unknown version '%s' (barrier, hybrid)\n", opt.version.c_str());
    return 2;
  }
  const long n = opt.size > 0 ? opt.size : (opt.quick ? 64 : 512);

  mdsm::init(&argc, &argv);
  const int me = mdsm::rank(), ranks = mdsm::size();
  const std::size_t nn = static_cast<std::size_t>(n) * static_cast<std::size_t>(n);
  double* a = mdsm::alloc_collective_array<double>(nn);
  double* b = mdsm::alloc_collective_array<double>(nn);
  double* c = mdsm::alloc_collective_array<double>(nn);
  mdsm::barrier bar;
  signals done("matmul.done");
  const row_block mine = block_of(n, ranks, me);

  // Each rank initializes its own rows of A and B; the barrier makes them visible everywhere.
  // It also zeroes its rows of C, as the plain-MPI version's C starts as a zeroed vector: the
  // pages C lands in are then this rank's before the measurement starts, in both versions.
  for (long i = mine.begin; i < mine.end; ++i)
    for (long j = 0; j < n; ++j) {
      a[i * n + j] = a_value(opt.seed, i, j);
      b[i * n + j] = b_value(opt.seed, i, j);
      c[i * n + j] = 0.0;
    }
  bar.arrive_and_wait();

  const double start = begin_measurement();
  // The block is computed in private memory and written to C once: the kernel adds into C block
  // by block, and each pass would otherwise write the coherent pages again.
  std::vector<double> block(static_cast<std::size_t>(mine.size() * n));
  multiply_rows(a + mine.begin * n, b, n, mine.size(), block.data());
  std::copy(block.begin(), block.end(), c + mine.begin * n);
  if (opt.version == "barrier") {
    bar.arrive_and_wait();
  } else if (me != 0) {
    done.signal(0, 0);
  } else {
    done.wait(0, other_ranks(me, ranks));
  }
  const measurement m = end_measurement(start);

  bool ok = true;
  if (me == 0) {
    std::vector<double> want(nn), ra(nn), rb(nn);
    for (long i = 0; i < n; ++i)
      for (long j = 0; j < n; ++j) {
        ra[i * n + j] = a_value(opt.seed, i, j);
        rb[i * n + j] = b_value(opt.seed, i, j);
      }
    multiply_rows(ra.data(), rb.data(), n, n, want.data());
    ok = compare("matmul C", c, want.data(), nn, 1e-12);
  }
  ok = ok && done.pending() == 0;
  // Rank 0's verification fetches the others' pages: they must keep serving requests (inside
  // mdsm, not in report()'s plain MPI collectives) until it is done — there may be no
  // progress thread (MDSM_PROGRESS_THREAD=0).
  bar.arrive_and_wait();
  const int rc = report("matmul", opt.version, ok, m);
  mdsm::finalize();
  return rc;
}
