// Round-trip latency of annotated messages next to a raw MPI_Send/MPI_Recv round trip over the
// same Open MPI transport, in one run (2 ranks). The targets: NONE within 1.10x of raw
// MPI; REQUEST and RELEASE (no write notices) within 1.5x. Also one-way streaming throughput:
// a batch of NONE messages to a handler that counts them, next to the same batch of MPI_Send to
// MPI_Recv (flow control's credits are on this path).
//
//   tools/mdsmrun -n 2 build/bench/bench_messages
//   tools/mdsmrun --mca btl self,tcp -n 2 build/bench/bench_messages    # over TCP
//
// mdsm round trip: rank 0 sends to rank 1's "ping" handler, which replies with the same
// annotation to rank 0's "pong" handler (RELEASE kinds are accepted first, as a real protocol
// would); rank 0's application thread waits in wait_until, as rank 1's does, so both drive
// progress directly, like threads blocked in MPI_Recv. mdsm's progress thread stays on (parked
// while the application waits); it is paused only for the raw MPI baseline.
#include "bench_report.hpp"

#include <mdsm/mdsm.hpp>

#include <mpi.h>

#include <atomic>
#include <cstdio>
#include <string>
#include <vector>

namespace {

constexpr int k_iterations = 5000;  // round trips per run
constexpr int k_rounds = 21;        // interleaved runs of every variant
constexpr int k_stream = 1000;      // messages per streamed batch (one benchmark iteration)
constexpr int k_stream_iterations = 100;
int g_rank = 0;
MPI_Comm g_comm;

std::atomic<long> g_pings{0}, g_pongs{0};
mdsm::handler_id g_ping = 0, g_pong = 0;
std::atomic<long> g_sunk{0}, g_acks{0};
mdsm::handler_id g_sink = 0, g_ack = 0;
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
  g_sink = mdsm::register_handler("bench.sink", [](mdsm::message&) { g_sunk.fetch_add(1, std::memory_order_release); });
  g_ack = mdsm::register_handler("bench.ack", [](mdsm::message&) { g_acks.fetch_add(1, std::memory_order_release); });
}

void mdsm_roundtrip(benchmark::State& state, mdsm::annotation a, long bytes) {
  g_payload.assign(static_cast<std::size_t>(bytes), std::byte{1});
  // Read the counters before the barrier: once rank 0 leaves it, its first ping may be handled
  // on rank 1 before rank 1 has left it too.
  const long pings0 = g_pings.load(), pongs0 = g_pongs.load();
  MPI_Barrier(g_comm);
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

void mpi_roundtrip(benchmark::State& state, long bytes) {
  g_payload.assign(static_cast<std::size_t>(bytes), std::byte{1});
  std::vector<std::byte> in(g_payload.size());
  const int n = static_cast<int>(g_payload.size());
  // The baseline is a program without mdsm: left running, mdsm's progress thread would wake on
  // the cores the ranks spin on and slow this ping-pong by up to a third (2-core VMs).
  mdsm::pause_progress_thread();
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
  mdsm::resume_progress_thread();
}

// One iteration: rank 0 streams k_stream NONE messages to rank 1's counting handler; rank 1's
// application thread waits for the last and answers with one message, which rank 0 waits for.
void mdsm_stream(benchmark::State& state, long bytes) {
  g_payload.assign(static_cast<std::size_t>(bytes), std::byte{1});
  const long sunk0 = g_sunk.load(), acks0 = g_acks.load();
  MPI_Barrier(g_comm);
  long i = 0;
  for (auto _ : state) {
    ++i;
    if (g_rank == 0) {
      for (int k = 0; k < k_stream; ++k) mdsm::send(1, g_sink, g_payload, mdsm::annotation::none);
      mdsm::wait_until([&] { return g_acks.load(std::memory_order_acquire) - acks0 >= i; });
    } else if (g_rank == 1) {
      mdsm::wait_until([&] { return g_sunk.load(std::memory_order_acquire) - sunk0 >= i * k_stream; });
      mdsm::send(0, g_ack, {}, mdsm::annotation::none);
    }
  }
  MPI_Barrier(g_comm);
}

void mpi_stream(benchmark::State& state, long bytes) {
  g_payload.assign(static_cast<std::size_t>(bytes), std::byte{1});
  std::vector<std::byte> in(g_payload.size());
  const int n = static_cast<int>(g_payload.size());
  mdsm::pause_progress_thread();  // as in mpi_roundtrip: the baseline is a program without mdsm
  MPI_Barrier(g_comm);
  for (auto _ : state) {
    if (g_rank == 0) {
      for (int k = 0; k < k_stream; ++k) MPI_Send(g_payload.data(), n, MPI_BYTE, 1, 8, g_comm);
      MPI_Recv(nullptr, 0, MPI_BYTE, 1, 9, g_comm, MPI_STATUS_IGNORE);
    } else if (g_rank == 1) {
      for (int k = 0; k < k_stream; ++k) MPI_Recv(in.data(), n, MPI_BYTE, 0, 8, g_comm, MPI_STATUS_IGNORE);
      MPI_Send(nullptr, 0, MPI_BYTE, 0, 9, g_comm);
    }
  }
  MPI_Barrier(g_comm);
  mdsm::resume_progress_thread();
}

void register_all() {
  for (long bytes : {8L, 1024L}) {
    using mdsm::annotation;
    auto rt = [bytes](annotation a) {
      return [bytes, a](benchmark::State& s) {
        s.SetLabel(std::to_string(bytes) + " B");
        mdsm_roundtrip(s, a, bytes);
      };
    };
    mdsm_bench::register_interleaved(
        "roundtrip/" + std::string(bytes == 8 ? "8B" : "1KiB"),
        {{"MPI_Send_Recv", [bytes](benchmark::State& s) { mpi_roundtrip(s, bytes); }},
         {"NONE", rt(annotation::none)},
         {"REQUEST", rt(annotation::request)},
         {"RELEASE", rt(annotation::release)},
         {"RELEASE_NT", rt(annotation::release_nt)}},
        {.rounds = k_rounds, .iterations = k_iterations, .unit = benchmark::kMicrosecond});
  }
  for (long bytes : {8L, 1024L}) {
    const std::string label = std::to_string(bytes) + " B, " + std::to_string(k_stream) + " messages per iteration";
    mdsm_bench::register_interleaved(
        "stream/" + std::string(bytes == 8 ? "8B" : "1KiB"),
        {{"MPI_Send_Recv",
          [bytes, label](benchmark::State& s) {
            s.SetLabel(label);
            mpi_stream(s, bytes);
          }},
         {"NONE_stream",
          [bytes, label](benchmark::State& s) {
            s.SetLabel(label);
            mdsm_stream(s, bytes);
          }}},
        {.rounds = k_rounds, .iterations = k_stream_iterations, .unit = benchmark::kMicrosecond});
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
    std::printf("2 ranks of %d; %d interleaved rounds x %d round trips per variant\n", mdsm::size(), k_rounds,
                k_iterations);
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
