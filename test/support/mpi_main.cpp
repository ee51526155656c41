// Catch2 main for tests that run as real MPI ranks under mdsmrun.
//
// Every rank runs the same test cases in the same order. Rank 0 reports through Catch2's
// normal reporter; the other ranks stay quiet unless something fails. A failed assertion on any
// rank ends its test case and then the whole job (MPI_Abort): the other ranks would otherwise
// wait forever for the failed one at the next collective.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <mpi.h>

#include <cstdio>
#include <vector>

namespace {

int g_rank = 0;

struct abort_job_on_failure : Catch::TestEventListenerBase {
  using TestEventListenerBase::TestEventListenerBase;

  bool assertionEnded(Catch::AssertionStats const& stats) override {
    const auto& r = stats.assertionResult;
    if (r.isOk()) return true;
    std::fprintf(stderr, "[rank %d] FAILED at %s:%zu: %s  (expanded: %s)\n", g_rank, r.getSourceInfo().file,
                 r.getSourceInfo().line, r.getExpressionInMacro().c_str(), r.getExpandedExpression().c_str());
    if (r.hasMessage()) std::fprintf(stderr, "[rank %d]   message: %s\n", g_rank, r.getMessage().c_str());
    return true;
  }

  void testCaseEnded(Catch::TestCaseStats const& stats) override {
    if (stats.totals.assertions.failed == 0) return;
    std::fprintf(stderr, "[rank %d] test case '%s' failed; aborting the job\n", g_rank, stats.testInfo.name.c_str());
    std::fflush(stderr);
    std::fflush(stdout);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
};

}  // namespace

CATCH_REGISTER_LISTENER(abort_job_on_failure)

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
  std::vector<char*> args(argv, argv + argc);
  char out_flag[] = "-o";
  char dev_null[] = "/dev/null";
  if (g_rank != 0) {
    args.push_back(out_flag);
    args.push_back(dev_null);
  }
  int result = Catch::Session().run(static_cast<int>(args.size()), args.data());
  int worst = 0;
  MPI_Allreduce(&result, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  return worst;
}
