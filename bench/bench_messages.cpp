// Round-trip latency of annotated messages next to a raw MPI_Send/MPI_Recv round trip over the
// same Open MPI transport, in one run (2 ranks). The targets: NONE within 1.10x of raw
// MPI; REQUEST and RELEASE (no write notices) within 1.5x.
//
//   tools/mdsmrun -n 2 build/bench/bench_messages
//
// mdsm round trip: rank 0 sends to rank 1's "ping" handler, which replies with the same
// annotation to rank 0's "pong" handler (RELEASE kinds are accepted first, as a real protocol
// would); rank 0's application thread waits in wait_until, as rank 1's does, so both drive
// progress directly, like threads blocked in MPI_Recv.
#include "bench_report.hpp"

#include <mdsm/mdsm.hpp>

#include <mpi.h>

#include <atomic>
#include <cstdio>
#include <string>
#include <vector>

namespace {

constexpr int k_iterations = 20000;
int g_rank = 0;
MPI_Comm g_comm;

std::atomic<long> g_pings{0}, g_pongs{0};
mdsm::handler_id g_ping = 0, g_pong = 0;
std::vector<std::byte> g_payload;

void register_handlers() {
  g_ping = mdsm::register_handler("bench.ping", [](mdsm::message& m) {
    if (m.annot() == mdsm::annotation::release || m.annot() == mdsm::annotation::release_nt) m.accept();
    mdsm::send(m.origin(), g_pong, m.payload(), m.annot());
    g_pings.fetch_add(1, std::memory_order_release);
  });
  g_pong = mdsm::register_handler("bench.pong", [](mdsm::message& m) {
    if (m.annot() == mdsm::annotation::release || m.annot() == mdsm::annotation::release_nt) m.accept();
    g_pongs.fetch_add(1, std::memory_order_release);
  });
}

void mdsm_roundtrip(benchmark::State& state, mdsm::annotation a) {
  g_payload.assign(static_cast<std::size_t>(state.range(0)), std::byte{1});
  MPI_Barrier(g_comm);
  const long pings0 = g_pings.load(), pongs0 = g_pongs.load();
  long i = 0;
  for (auto _ : state) {
    ++i;
    if (g_rank == 0) {
      mdsm::send(1, g_ping, g_payload, a);
      mdsm::wait_until([&] { return g_pongs.load(std::memory_order_acquire) - pongs0 >= i; });
    } else if (g_rank == 1) {
      mdsm::wait_until([&] { return g_pings.load(std::memory_order_acquire) - pings0 >= i; });
    }
  }
  MPI_Barrier(g_comm);
}

void mpi_roundtrip(benchmark::State& state) {
  g_payload.assign(static_cast<std::size_t>(state.range(0)), std::byte{1});
  std::vector<std::byte> in(g_payload.size());
  const int n = static_cast<int>(g_payload.size());
  MPI_Barrier(g_comm);
  for (auto _ : state) {
    if (g_rank == 0) {
      MPI_Send(g_payload.data(), n, MPI_BYTE, 1, 7, g_comm);
      MPI_Recv(in.data(), n, MPI_BYTE, 1, 7, g_comm, MPI_STATUS_IGNORE);
    } else if (g_rank == 1) {
      MPI_Recv(in.data(), n, MPI_BYTE, 0, 7, g_comm, MPI_STATUS_IGNORE);
      MPI_Send(in.data(), n, MPI_BYTE, 0, 7, g_comm);
    }
  }
  MPI_Barrier(g_comm);
}

void register_all() {
  for (long bytes : {8L, 1024L}) {
    const std::string group = "roundtrip/" + std::string(bytes == 8 ? "8B" : "1KiB") + "/";
    auto fixed = [&](benchmark::internal::Benchmark* b) {
      b->Arg(bytes)->Iterations(k_iterations)->Repetitions(5)->ReportAggregatesOnly(true)->Unit(benchmark::kMicrosecond);
    };
    fixed(benchmark::RegisterBenchmark((group + "MPI_Send_Recv").c_str(), mpi_roundtrip));
    fixed(benchmark::RegisterBenchmark((group + "NONE").c_str(), mdsm_roundtrip, mdsm::annotation::none));
    fixed(benchmark::RegisterBenchmark((group + "REQUEST").c_str(), mdsm_roundtrip, mdsm::annotation::request));
    fixed(benchmark::RegisterBenchmark((group + "RELEASE").c_str(), mdsm_roundtrip, mdsm::annotation::release));
    fixed(benchmark::RegisterBenchmark((group + "RELEASE_NT").c_str(), mdsm_roundtrip, mdsm::annotation::release_nt));
  }
}

}  // namespace

int main(int argc, char** argv) {
  mdsm::init(&argc, &argv);
  g_rank = mdsm::rank();
  if (mdsm::size() < 2) {
    if (g_rank == 0) std::fprintf(stderr, "bench_messages needs 2 ranks: tools/mdsmrun -n 2 %s\n", argv[0]);
    mdsm::finalize();
    return 2;
  }
  MPI_Comm_dup(MPI_COMM_WORLD, &g_comm);
  register_handlers();
  benchmark::Initialize(&argc, argv);
  register_all();
  if (g_rank == 0) {
    std::printf("2 ranks of %d; medians of 5 repetitions x %d round trips\n", mdsm::size(), k_iterations);
    mdsm_bench::ratio_reporter report({"MPI_Send_Recv"},
                                      {{"NONE", 1.10}, {"REQUEST", 1.5}, {"RELEASE", 1.5}, {"RELEASE_NT", 1.5}});
    benchmark::RunSpecifiedBenchmarks(&report);
  } else {
    mdsm_bench::silent_reporter quiet;
    benchmark::RunSpecifiedBenchmarks(&quiet);
  }
  MPI_Comm_free(&g_comm);
  mdsm::finalize();
  return 0;
}
