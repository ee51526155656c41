// Red-black successive over-relaxation on an n x n grid of doubles (coherent memory), the
// boundary held fixed. Rows are block-distributed; a half-sweep updates the points of one colour
// ((i + j) % 2 == colour) from their four neighbours, which all have the other colour, so a rank
// needs only the boundary rows of the ranks next to it from the previous half-sweep.
//
// Versions (--version=):
//   barrier  a global barrier after every half-sweep.
//   hybrid   after each half-sweep a rank sends a RELEASE message only to its neighbour ranks
//            (those owning the rows just above and below its block) and, before the next
//            half-sweep, waits for and accepts its neighbours' messages. This orders both the
//            reads of a neighbour's boundary row after its writes and its next writes after
//            our reads. At the end every rank signals rank 0, which then sees the whole grid.
// Sizes: --size=N (default 1024, --quick 64), --steps=S iterations of red + black (default 20,
// --quick 4). Rank 0 verifies against a sequential red-black SOR (same arithmetic, sor_kernel.hpp,
// shared with sor_mpi.cpp, the plain-MPI reference version).
#include "common/app.hpp"
#include "common/phases.hpp"
#include "sor/sor_kernel.hpp"

#include <mdsm/mdsm.hpp>

#include <cstdio>
#include <string>
#include <vector>

using namespace mdsm_apps;

int main(int argc, char** argv) {
  const args opt = parse_args(argc, argv, "barrier");
  if (opt.version != "barrier" && opt.version != "hybrid") {
    std::fprintf(stderr, "sor: unknown version '%s' (barrier, hybrid)\n", opt.version.c_str());
    return 2;
  }
  const long n = opt.size > 0 ? opt.size : (opt.quick ? 64 : 1024);
  const long iterations = opt.steps > 0 ? opt.steps : (opt.quick ? 4 : 20);
  const long half_sweeps = 2 * iterations;

  mdsm::init(&argc, &argv);
  const int me = mdsm::rank(), ranks = mdsm::size();
  if (n < 3 || n < ranks) {
    if (me == 0) std::fprintf(stderr, "sor: the grid needs at least 3 rows and one row per rank\n");
    mdsm::finalize();
    return 2;
  }
  const std::size_t nn = static_cast<std::size_t>(n) * static_cast<std::size_t>(n);
  double* g = mdsm::alloc_collective_array<double>(nn);
  mdsm::barrier bar;
  signals step_done("sor.step_done");
  signals done("sor.done");
  const row_block mine = block_of(n, ranks, me);
  // The ranks owning the rows next to our block: the only ones we read from or that read us.
  std::vector<int> neighbours;
  if (mine.begin > 0) neighbours.push_back(owner_of_row(n, ranks, mine.begin - 1));
  if (mine.end < n) neighbours.push_back(owner_of_row(n, ranks, mine.end));

  for (long i = mine.begin; i < mine.end; ++i)
    for (long j = 0; j < n; ++j) g[i * n + j] = initial_value(opt.seed, i, j);
  bar.arrive_and_wait();

  const double start = begin_measurement();
  if (opt.version == "barrier") {
    for (long s = 0; s < half_sweeps; ++s) {
      half_sweep(g, 0, n, mine.begin, mine.end, static_cast<int>(s % 2));
      bar.arrive_and_wait();
    }
  } else {
    for (long s = 0; s < half_sweeps; ++s) {
      if (s > 0) step_done.wait(s - 1, neighbours);
      half_sweep(g, 0, n, mine.begin, mine.end, static_cast<int>(s % 2));
      if (s + 1 < half_sweeps) step_done.signal(neighbours, s);
    }
    if (me != 0) done.signal(0, half_sweeps);
    else done.wait(half_sweeps, other_ranks(me, ranks));
  }
  const measurement m = end_measurement(start);

  bool ok = true;
  if (me == 0) {
    std::vector<double> want(nn);
    for (long i = 0; i < n; ++i)
      for (long j = 0; j < n; ++j) want[i * n + j] = initial_value(opt.seed, i, j);
    for (long s = 0; s < half_sweeps; ++s) half_sweep(want.data(), 0, n, 0, n, static_cast<int>(s % 2));
    ok = compare("sor grid", g, want.data(), nn, 1e-12);
  }
  ok = ok && step_done.pending() == 0 && done.pending() == 0;
  // Rank 0's verification fetches the others' pages: they must keep serving requests (inside
  // mdsm, not in report()'s plain MPI collectives) until it is done — there may be no
  // progress thread (MDSM_PROGRESS_THREAD=0).
  bar.arrive_and_wait();
  const int rc = report("sor", opt.version, ok, m);
  mdsm::finalize();
  return rc;
}
