// All-pairs shortest paths (Floyd-Warshall) on a deterministic random weighted directed graph of
// n nodes. The distance matrix (n x n int32, coherent memory) is block-distributed by rows. In
// iteration k every rank relaxes its rows through node k, reading row k, so iteration k needs
// row k as its owner left it after iteration k-1.
//
// Versions (--version=):
//   barrier  a global barrier after every iteration (n barriers).
//   hybrid   no barriers: in iteration k the owner of row k+1 relaxes that row first and
//            publishes it with a RELEASE message (payload: k+1) to every other rank; a rank
//            accepts the message for row k (an acquire) just before it needs the row, so it
//            runs ahead as far as the rows it needs have been published. At the end every rank
//            signals rank 0 with a RELEASE message, after which rank 0 sees the whole matrix.
//
// The hybrid version lets the owner of row k update it in a later iteration while another rank
// is still reading it for iteration k. That race is benign for Floyd-Warshall: every value read
// is the length of a real path and no larger than the value the sequential order would give, so
// the final matrix is exact (and verified exactly).
// Sizes: --size=N nodes (default 512, --quick 64). Rank 0 verifies against sequential code.
#include "apsp/apsp_kernel.hpp"
#include "common/app.hpp"
#include "common/phases.hpp"

#include <mdsm/mdsm.hpp>

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

using namespace mdsm_apps;

int main(int argc, char** argv) {
  const args opt = parse_args(argc, argv, "barrier");
  if (opt.version != "barrier" && opt.version != "hybrid") {
    std::fprintf(stderr, "apsp: unknown version '%s' (barrier, hybrid)\n", opt.version.c_str());
    return 2;
  }
  const long n = opt.size > 0 ? opt.size : (opt.quick ? 64 : 512);

  mdsm::init(&argc, &argv);
  const int me = mdsm::rank(), ranks = mdsm::size();
  const std::size_t nn = static_cast<std::size_t>(n) * static_cast<std::size_t>(n);
  std::int32_t* d = mdsm::alloc_collective_array<std::int32_t>(nn);
  mdsm::barrier bar;
  signals row_ready("apsp.row_ready");
  signals done("apsp.done");
  const row_block mine = block_of(n, ranks, me);
  const std::vector<int> others = other_ranks(me, ranks);
  auto owner = [&](long row) { return owner_of_row(n, ranks, row); };

  for (long i = mine.begin; i < mine.end; ++i)
    for (long j = 0; j < n; ++j) d[i * n + j] = edge_weight(opt.seed, i, j);
  bar.arrive_and_wait();

  const double start = begin_measurement();
  if (opt.version == "barrier") {
    for (long k = 0; k < n; ++k) {
      const std::int32_t* row_k = d + k * n;
      for (long i = mine.begin; i < mine.end; ++i)
        if (i != k) relax(d + i * n, row_k, k, n);
      bar.arrive_and_wait();
    }
  } else {
    if (owner(0) == me) row_ready.signal(others, 0);
    for (long k = 0; k < n; ++k) {
      if (owner(k) != me) row_ready.wait(k, owner(k));
      const std::int32_t* row_k = d + k * n;
      const long next = k + 1;
      if (next < n && mine.contains(next)) {
        relax(d + next * n, row_k, k, n);  // next != k
        row_ready.signal(others, next);
      }
      for (long i = mine.begin; i < mine.end; ++i)
        if (i != next && i != k) relax(d + i * n, row_k, k, n);
    }
    if (me != 0) done.signal(0, n);
    else done.wait(n, others);
  }
  const measurement m = end_measurement(start);

  bool ok = true;
  if (me == 0) {
    const std::vector<std::int32_t> want = sequential_apsp(opt.seed, n);
    ok = compare("apsp distances", d, want.data(), nn);
  }
  ok = ok && row_ready.pending() == 0 && done.pending() == 0;
  // Rank 0's verification fetches the others' pages: they must keep serving requests (inside
  // mdsm, not in report()'s plain MPI collectives) until it is done — there may be no
  // progress thread (MDSM_PROGRESS_THREAD=0).
  bar.arrive_and_wait();
  const int rc = report("apsp", opt.version, ok, m);
  mdsm::finalize();
  return rc;
}
