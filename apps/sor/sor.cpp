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
//   mdsm_mpi the hybrid version's synchronization written as an MPI program (mpi_ext/,
//            mdsm_mpi.h): after each half-sweep a rank posts MDSM_Isend(..., MDSM_RELEASE) to each
//            neighbour rank, carrying only the index of the row of ours that the neighbour reads
//            (the row itself is read through coherent memory); before the next half-sweep it
//            receives its neighbours' messages with MDSM_Recv, the acquire. At the end every rank
//            but 0 sends rank 0 its block (MDSM_Send, MDSM_RELEASE), which rank 0 receives from
//            MPI_ANY_SOURCE and then sees the whole grid.
// Sizes: --size=N (default 1024, --quick 64), --steps=S iterations of red + black (default 20,
// --quick 4). Rank 0 verifies against a sequential red-black SOR (same arithmetic, sor_kernel.hpp,
// shared with sor_mpi.cpp, the plain-MPI reference version).
#include "common/app.hpp"
#include "common/phases.hpp"
#include "sor/sor_kernel.hpp"

#include <mdsm/mdsm.hpp>
#include <mdsm/mdsm_mpi.h>

#include <mpi.h>

#include <cstdio>
#include <string>
#include <vector>

using namespace mdsm_apps;

namespace {

constexpr int k_tag_step = 1;  // a half-sweep is done: the message names the row the receiver reads
constexpr int k_tag_done = 2;  // a rank's last half-sweep is done: the message names its block

// The mdsm_mpi version's parallel section on the n x n grid `g` (coherent memory), synchronized
// by annotated MPI messages on `comm`. Every message must name the row (or block) this rank
// expects; returns whether all did. The messages carry no grid data.
bool sweeps_with_mdsm_mpi(double* g, long n, const row_block& mine, int ranks, long half_sweeps, MPI_Comm comm) {
  // A neighbour rank, the row of theirs we read (their boundary row) and the row of ours they read.
  struct link {
    int rank;
    long theirs, ours;
  };
  std::vector<link> links;
  if (mine.begin > 0) links.push_back({owner_of_row(n, ranks, mine.begin - 1), mine.begin - 1, mine.begin});
  if (mine.end < n) links.push_back({owner_of_row(n, ranks, mine.end), mine.end, mine.end - 1});
  // Non-blocking sends: both neighbours send before they receive, so blocking sends would rely on
  // MPI buffering the messages. A send's buffer stays untouched until its request completes.
  std::vector<long> out(links.size());
  std::vector<MPI_Request> sends(links.size(), MPI_REQUEST_NULL);
  bool ok = true;
  for (long s = 0; s < half_sweeps; ++s) {
    if (s > 0) {
      for (const link& l : links) {
        long row = -1;
        MDSM_Recv(&row, 1, MPI_LONG, l.rank, k_tag_step, comm, MPI_STATUS_IGNORE);
        ok = ok && row == l.theirs;
      }
      MDSM_Waitall(static_cast<int>(sends.size()), sends.data(), MPI_STATUSES_IGNORE);
    }
    half_sweep(g, 0, n, mine.begin, mine.end, static_cast<int>(s % 2));
    if (s + 1 == half_sweeps) break;
    for (std::size_t i = 0; i < links.size(); ++i) {
      out[i] = links[i].ours;
      MDSM_Isend(&out[i], 1, MPI_LONG, links[i].rank, k_tag_step, comm, MDSM_RELEASE, &sends[i]);
    }
  }
  int me = 0;
  MPI_Comm_rank(comm, &me);
  long block[2] = {mine.begin, mine.end};
  if (me != 0) {
    MDSM_Send(block, 2, MPI_LONG, 0, k_tag_done, comm, MDSM_RELEASE);
  } else {
    std::vector<bool> seen(static_cast<std::size_t>(ranks), false);
    for (int k = 1; k < ranks; ++k) {
      MPI_Status st;
      MDSM_Recv(block, 2, MPI_LONG, MPI_ANY_SOURCE, k_tag_done, comm, &st);
      const row_block theirs = block_of(n, ranks, st.MPI_SOURCE);
      ok = ok && !seen[static_cast<std::size_t>(st.MPI_SOURCE)] && block[0] == theirs.begin && block[1] == theirs.end;
      seen[static_cast<std::size_t>(st.MPI_SOURCE)] = true;
    }
  }
  if (!ok) std::fprintf(stderr, "sor: rank %d received a message naming the wrong row or block\n", me);
  return ok;
}

}  // namespace

int main(int argc, char** argv) {
  const args opt = parse_args(argc, argv, "barrier");
  if (opt.version != "barrier" && opt.version != "hybrid" && opt.version != "mdsm_mpi") {
    std::fprintf(stderr, "sor: unknown version '%s' (barrier, hybrid, mdsm_mpi)\n", opt.version.c_str());
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

  MPI_Comm comm;  // the mdsm_mpi version's messages
  MPI_Comm_dup(MPI_COMM_WORLD, &comm);

  for (long i = mine.begin; i < mine.end; ++i)
    for (long j = 0; j < n; ++j) g[i * n + j] = initial_value(opt.seed, i, j);
  bar.arrive_and_wait();

  bool messages_ok = true;
  const double start = begin_measurement();
  if (opt.version == "mdsm_mpi") {
    messages_ok = sweeps_with_mdsm_mpi(g, n, mine, ranks, half_sweeps, comm);
  } else if (opt.version == "barrier") {
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
  ok = ok && messages_ok && step_done.pending() == 0 && done.pending() == 0;
  // Rank 0's verification fetches the others' pages: they must keep serving requests (inside
  // mdsm, not in report()'s plain MPI collectives) until it is done — there may be no
  // progress thread (MDSM_PROGRESS_THREAD=0).
  bar.arrive_and_wait();
  const int rc = report("sor", opt.version, ok, m);
  MPI_Comm_free(&comm);
  mdsm::finalize();
  return rc;
}
