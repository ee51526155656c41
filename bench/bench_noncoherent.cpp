// One-sided access to the non-coherent region (mdsm::get / mdsm::put) next to MPI RMA on a
// window over a private buffer (MPI_Get / MPI_Put, each followed by MPI_Win_flush, in a
// passive-target epoch of MPI_Win_lock_all), in one run, 2 ranks: rank 0 reads or writes rank 1's
// memory, N = 8 B ... 1 MiB; rank 1 takes no part but waits (in mdsm::wait_until, polling an
// MPI_Ibarrier, for both kinds). The target (18): mdsm within 1.2x of MPI RMA.
//
//   tools/mdsmrun -n 2 build-rel/bench/bench_noncoherent
//
// Series:
//   put/<N>   MPI_Put       the baseline: MPI_Put + MPI_Win_flush(1) per iteration; mdsm's
//                           progress thread paused, as in a program without mdsm
//             mdsm_put      mdsm::put(1, ...): complete at the target when it returns
//   get/<N>   MPI_Get       the baseline: MPI_Get + MPI_Win_flush(1)
//             mdsm_get      mdsm::get(..., 1, ...) into the same private buffer
//             mdsm_get_nc   mdsm::get into this rank's own copy of the non-coherent region (page
//                           aligned): Open MPI receives a large message much faster there
//                           (docs/BENCHMARKS.md)
//   put16/<N> MPI_Put       16 MPI_Put of N bytes to consecutive places, one MPI_Win_flush
//             mdsm_put_nb   16 mdsm::put_nb, then 16 wait()
//   fetch_add MPI_Fetch_and_op  MPI_SUM on a 64-bit word + MPI_Win_flush(1)
//             mdsm_fetch_add    mdsm::fetch_add(1, ...)
//   compare_swap MPI_Compare_and_swap  + MPI_Win_flush(1)
//             mdsm_compare_swap      mdsm::compare_swap(1, ...)
// Every variant of a size runs once per round, rounds interleaved (bench_report.hpp); each row
// reports the median over rounds and the median of the per-round ratios to the baseline.
// Note: over TCP Open MPI 4.1's RMA windows fail with MPI_THREAD_MULTIPLE (osc/pt2pt refuses it,
// osc/rdma needs an RDMA network), so the baseline exists on one host only (vader).
#include "bench_report.hpp"

#include <mdsm/mdsm.hpp>

#include <mpi.h>

#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <vector>

namespace {

using mdsm_bench::round_options;

constexpr int k_rounds = 21;
constexpr long k_sizes[] = {8, 64, 512, 4 << 10, 32 << 10, 256 << 10, 1 << 20};
constexpr long k_max_bytes = 1 << 20;
constexpr int k_batch = 16;  // the put16 series
constexpr long k_area = k_max_bytes * k_batch;

int g_rank = 0;
MPI_Comm g_comm;
MPI_Win g_win = MPI_WIN_NULL;
std::vector<std::byte> g_window_memory;  // what the MPI window exposes (private memory)
std::vector<std::byte> g_local;          // the origin's buffer for both kinds
std::byte* g_nc = nullptr;               // the non-coherent area (collective: the same address)


benchmark::IterationCount iterations_for(long bytes) {
  return std::clamp<benchmark::IterationCount>((16L << 20) / bytes, 16, 4000);
}

// Both ranks, around a run: rank 1 waits inside mdsm (serving requests) until rank 0 is done.
void meet() {
  MPI_Request req;
  MPI_Ibarrier(g_comm, &req);
  mdsm::wait_until([&] {
    int done = 0;
    MPI_Test(&req, &done, MPI_STATUS_IGNORE);
    return done != 0;
  });
}

enum class op {
  mpi_put,
  mpi_get,
  mdsm_put,
  mdsm_get,
  mdsm_get_nc,
  mpi_put16,
  mdsm_put16,
  mpi_fetch_add,
  mdsm_fetch_add,
  mpi_compare_swap,
  mdsm_compare_swap
};

void run(benchmark::State& state, op o, long bytes) {
  const bool mpi = o == op::mpi_put || o == op::mpi_get || o == op::mpi_put16 || o == op::mpi_fetch_add ||
                   o == op::mpi_compare_swap;
  if (mpi) mdsm::pause_progress_thread();
  const auto n = static_cast<std::size_t>(bytes);
  meet();
  if (g_rank == 0) {
    std::vector<mdsm::nc_request> reqs(k_batch);
    auto* word = reinterpret_cast<std::uint64_t*>(g_nc);
    std::uint64_t one = 1, old = 0, seen = 0;
    for (auto _ : state) {
      switch (o) {
        case op::mpi_put:
          MPI_Put(g_local.data(), static_cast<int>(bytes), MPI_BYTE, 1, 0, static_cast<int>(bytes), MPI_BYTE, g_win);
          MPI_Win_flush(1, g_win);
          break;
        case op::mpi_get:
          MPI_Get(g_local.data(), static_cast<int>(bytes), MPI_BYTE, 1, 0, static_cast<int>(bytes), MPI_BYTE, g_win);
          MPI_Win_flush(1, g_win);
          break;
        case op::mdsm_put: mdsm::put(1, g_nc, g_local.data(), n); break;
        case op::mdsm_get: mdsm::get(g_local.data(), 1, g_nc, n); break;
        case op::mdsm_get_nc: mdsm::get(g_nc + k_area / 2, 1, g_nc, n); break;
        case op::mpi_put16:
          for (int i = 0; i < k_batch; ++i)
            MPI_Put(g_local.data(), static_cast<int>(bytes), MPI_BYTE, 1, static_cast<MPI_Aint>(i) * bytes,
                    static_cast<int>(bytes), MPI_BYTE, g_win);
          MPI_Win_flush(1, g_win);
          break;
        case op::mdsm_put16:
          for (int i = 0; i < k_batch; ++i) reqs[static_cast<std::size_t>(i)] = mdsm::put_nb(1, g_nc + i * n, g_local.data(), n);
          for (auto& r : reqs) r.wait();
          break;
        case op::mpi_fetch_add:
          MPI_Fetch_and_op(&one, &old, MPI_UINT64_T, 1, 0, MPI_SUM, g_win);
          MPI_Win_flush(1, g_win);
          break;
        case op::mdsm_fetch_add: old = mdsm::fetch_add(1, word, 1); break;
        case op::mpi_compare_swap:
          MPI_Compare_and_swap(&one, &seen, &old, MPI_UINT64_T, 1, 0, g_win);
          MPI_Win_flush(1, g_win);
          seen = old;
          break;
        case op::mdsm_compare_swap: seen = mdsm::compare_swap(1, word, seen, seen + 1); break;
      }
      benchmark::DoNotOptimize(old);
      benchmark::DoNotOptimize(seen);
    }
    state.SetBytesProcessed(state.iterations() * bytes * (o == op::mpi_put16 || o == op::mdsm_put16 ? k_batch : 1));
  } else {
    for (auto _ : state) {
    }
  }
  meet();
  if (mpi) mdsm::resume_progress_thread();
}

mdsm_bench::variant make(const char* name, op o, long bytes) {
  return {name, [=](benchmark::State& s) { run(s, o, bytes); }};
}

void register_all() {
  for (long bytes : k_sizes) {
    const round_options opt{.rounds = k_rounds, .iterations = iterations_for(bytes), .unit = benchmark::kMicrosecond};
    mdsm_bench::register_interleaved("put/" + mdsm_bench::size_name(bytes),
                                     {make("MPI_Put", op::mpi_put, bytes), make("mdsm_put", op::mdsm_put, bytes)}, opt);
    mdsm_bench::register_interleaved("get/" + mdsm_bench::size_name(bytes),
                                     {make("MPI_Get", op::mpi_get, bytes), make("mdsm_get", op::mdsm_get, bytes),
                                      make("mdsm_get_nc", op::mdsm_get_nc, bytes)},
                                     opt);
  }
  for (long bytes : {8L, 4L << 10, 64L << 10}) {
    const round_options opt{.rounds = k_rounds, .iterations = std::max<benchmark::IterationCount>(iterations_for(bytes) / k_batch, 16),
                            .unit = benchmark::kMicrosecond};
    mdsm_bench::register_interleaved(
        "put16/" + mdsm_bench::size_name(bytes),
        {make("MPI_Put", op::mpi_put16, bytes), make("mdsm_put_nb", op::mdsm_put16, bytes)}, opt);
  }
  const round_options opt{.rounds = k_rounds, .iterations = 4000, .unit = benchmark::kMicrosecond};
  mdsm_bench::register_interleaved(
      "fetch_add", {make("MPI_Fetch_and_op", op::mpi_fetch_add, 8), make("mdsm_fetch_add", op::mdsm_fetch_add, 8)}, opt);
  mdsm_bench::register_interleaved("compare_swap",
                                   {make("MPI_Compare_and_swap", op::mpi_compare_swap, 8),
                                    make("mdsm_compare_swap", op::mdsm_compare_swap, 8)},
                                   opt);
}

void print_summary(const mdsm_bench::ratio_reporter& r) {
  std::printf("\nmdsm / MPI RMA per size (median of per-round ratios; target <= 1.2x)\n%-8s %10s %10s %12s\n", "size",
              "put", "get", "get_nc");
  for (long bytes : k_sizes) {
    const double p = r.ratio("put/" + mdsm_bench::size_name(bytes), "mdsm_put"), g = r.ratio("get/" + mdsm_bench::size_name(bytes), "mdsm_get"),
                 gn = r.ratio("get/" + mdsm_bench::size_name(bytes), "mdsm_get_nc");
    std::printf("%-8s %9.3fx %9.3fx %11.3fx\n", mdsm_bench::size_name(bytes).c_str(), p, g, gn);
  }
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  mdsm::options opts;
  opts.noncoherent_size = std::size_t{64} << 20;
  mdsm::init(&argc, &argv, opts);
  g_rank = mdsm::rank();
  if (mdsm::size() != 2) {
    if (g_rank == 0) std::fprintf(stderr, "bench_noncoherent needs 2 ranks: tools/mdsmrun -n 2 %s\n", argv[0]);
    mdsm::finalize();
    return 2;
  }
  MPI_Comm_dup(MPI_COMM_WORLD, &g_comm);
  g_window_memory.assign(k_area, std::byte{0});
  g_local.assign(k_max_bytes, std::byte{1});
  g_nc = static_cast<std::byte*>(mdsm::nc_alloc_collective(k_area));
  std::memset(g_nc, 0, k_area);
  if (MPI_Win_create(g_window_memory.data(), k_area, 1, MPI_INFO_NULL, g_comm, &g_win) != MPI_SUCCESS) {
    if (g_rank == 0) std::fprintf(stderr, "MPI_Win_create failed: no RMA baseline on this transport\n");
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  MPI_Win_lock_all(0, g_win);
  benchmark::Initialize(&argc, argv);
  register_all();
  int rc = 0;
  if (g_rank == 0) {
    std::printf("2 ranks; %d interleaved rounds per variant\n", k_rounds);
    mdsm_bench::ratio_reporter report(
        {"MPI_Put", "MPI_Get", "MPI_Fetch_and_op", "MPI_Compare_and_swap"},
        {{"mdsm_put", 1.2}, {"mdsm_get", 1.2}, {"mdsm_get_nc", 1.2}, {"mdsm_put_nb", 1.2}, {"mdsm_fetch_add", 1.2}, {"mdsm_compare_swap", 1.2}});
    benchmark::RunSpecifiedBenchmarks(&report);
    print_summary(report);
    rc = report.errors() ? 1 : 0;
  } else {
    mdsm_bench::silent_reporter quiet;
    benchmark::RunSpecifiedBenchmarks(&quiet);
  }
  MPI_Win_unlock_all(g_win);
  MPI_Win_free(&g_win);
  mdsm::nc_free_collective(g_nc);
  MPI_Comm_free(&g_comm);
  mdsm::finalize();
  return rc;
}
