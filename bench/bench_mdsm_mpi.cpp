// The annotated MPI calls (mpi_ext/, mdsm_mpi.h) next to plain MPI, in one run (2 ranks): a
// ping-pong round trip of N bytes, N = 8 B ... 4 MiB. The targets (16): MDSM_NONE within
// 1.05x of MPI_Send/MPI_Recv at every size; MDSM_RELEASE within 1.5x at 8 B and 1.1x at >= 64 KiB.
//
//   tools/mdsmrun -n 2 build-rel/bench/bench_mdsm_mpi
//   /usr/bin/python3 bench/compare_launches.py -n 5 build-rel/bench/bench_mdsm_mpi cur=-   # over launches
//
// Series "roundtrip/<N>", both buffers private (outside the coherent region):
//   MPI_Send_Recv   the baseline: rank 0 MPI_Send, MPI_Recv the reply; rank 1 MPI_Recv, MPI_Send.
//                   mdsm's progress thread is paused, as in a program without mdsm;
//   MPI_progress    the same with the progress thread running (what plain MPI costs inside an
//                   mdsm program; tells a cost of mpi_ext from one of the progress thread);
//   MPI_plus64      plain MPI sending N + 64 bytes, progress thread running: the floor for an
//                   MDSM message, which carries a 64-byte header (NONE / MPI_plus64 is what
//                   mpi_ext adds beyond the header's bytes); a NONE message of up to 63 bytes goes
//                   without one (headerless), so its floor is MPI_progress;
//   NONE            MDSM_Send(..., MDSM_NONE) / MDSM_Recv;
//   RELEASE         MDSM_Send(..., MDSM_RELEASE) / MDSM_Recv (both directions; nothing written in
//                   the coherent region, so the intervals closed carry no write notices).
// Series "coherent/<N>": the sender writes its whole send buffer before every send (memset), as
// a producer would:
//   MPI_write       the baseline: private buffers, MPI_Send / MPI_Recv, progress thread paused;
//   RELEASE_coherent  the send buffer in the coherent region (every send releases the writes to
//                   it), MDSM_RELEASE; the receive buffer private;
//   RELEASE_coh_recv  both buffers in the coherent region (MDSM_Recv's writes are the receiving
//                   rank's writes: twinned, then released with its reply).
//
// Every variant of a size runs once per round, rounds interleaved (bench_report.hpp): the
// repetitions are the rounds, and each row reports the median over them and the median of the
// per-round ratios to the baseline (not --benchmark_repetitions, which would repeat one variant
// back to back and so compare different moments of this shared machine). A summary at the end
// lists the ratios per size.
#include "bench_report.hpp"

#include <mdsm/mdsm.hpp>
#include <mdsm/mdsm_mpi.h>

#include <mpi.h>

#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace {

using mdsm_bench::round_options;

constexpr int k_rounds = 21;
constexpr long k_sizes[] = {8, 64, 512, 4 << 10, 24 << 10, 32 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20};
constexpr long k_max_bytes = 4 << 20;
// The "steps/" series: sizes that take the side channel (docs/MPI.md, from 8 KiB).
constexpr long k_step_sizes[] = {8 << 10, 64 << 10, 256 << 10};
constexpr long k_header = 64;       // an MDSM message's header (MPI_plus64)
constexpr int k_tag = 7;

int g_rank = 0;
MPI_Comm g_mpi;   // plain MPI traffic
MPI_Comm g_mdsm;  // MDSM_ traffic (an MDSM message must be received by an MDSM_ call)
MPI_Comm g_side;  // the "steps/" series' second communicator

// This rank's buffers: private and coherent (mdsm::alloc, this rank's own arena), k_max_bytes each.
// All page-aligned: a copy whose destination lies a few bytes past its source modulo 4 KiB (a
// malloc'd vector's data starts 16 bytes into a page, mdsm::alloc's at a page) stalls on "4K
// aliasing" of loads with earlier stores, up to 2x for plain MPI_Send from a page-aligned buffer
// into a vector: a property of the two addresses, which must not decide a comparison of variants.
struct page_aligned_free {
  void operator()(std::byte* p) const { std::free(p); }
};
using page_buffer = std::unique_ptr<std::byte[], page_aligned_free>;
page_buffer page_aligned(std::size_t bytes, std::byte fill) {
  page_buffer b(static_cast<std::byte*>(std::aligned_alloc(4096, (bytes + 4095) / 4096 * 4096)));
  std::memset(b.get(), static_cast<int>(fill), bytes);
  return b;
}
page_buffer g_send, g_recv;
std::byte* g_coh_send = nullptr;
std::byte* g_coh_recv = nullptr;


// Round trips per run: a run takes ~10-40 ms at every size (round trips of 8 B take ~2 us here,
// of 4 MiB ~1-2 ms).
benchmark::IterationCount iterations_for(long bytes) {
  return std::clamp<benchmark::IterationCount>((32L << 20) / bytes, 16, 5000);
}

// mpi: plain MPI; mdsm: MDSM_Send / MDSM_Recv. The others replay the side channel's steps with
// plain MPI calls (series "steps/", docs/MPI.md "Cost"): the sender sends a 64-byte header on one
// communicator, then the data on another; the receiver takes the header
//   two_plain     into 64 bytes, then the data with a plain receive;
//   two_probed    into 64 bytes, then the data with a matched probe and MPI_Mrecv (as mpi_ext);
//   struct_kept   into a {header, buffer} struct datatype made once, then probe and MPI_Mrecv (as
//                 mpi_ext with its per-thread types);
//   struct_fresh  the same with the struct made and freed every receive (as mpi_ext before 8b0ac4f).
enum class kind { mpi, mdsm, two_plain, two_probed, struct_kept, struct_fresh };

MPI_Datatype header_and_buffer(std::byte* header, std::byte* buf, int n) {
  int lengths[2] = {static_cast<int>(k_header), n};
  MPI_Aint where[2];
  MPI_Get_address(header, &where[0]);
  MPI_Get_address(buf, &where[1]);
  MPI_Datatype types[2] = {MPI_BYTE, MPI_BYTE}, t;
  MPI_Type_create_struct(2, lengths, where, types, &t);
  MPI_Type_commit(&t);
  return t;
}

// One round trip per iteration. `write`: the sender fills its send buffer first.
void roundtrip(benchmark::State& state, kind k, mdsm_annotation a, long bytes, std::byte* out, std::byte* in,
               bool write, bool progress_thread) {
  const int n = static_cast<int>(bytes);
  if (!progress_thread) mdsm::pause_progress_thread();
  MPI_Barrier(g_mpi);
  int fill = 0;
  std::byte header_out[k_header] = {}, header_in[k_header];
  MPI_Datatype kept = k == kind::struct_kept ? header_and_buffer(header_in, in, n) : MPI_DATATYPE_NULL;
  auto send = [&](int dest) {
    if (write) std::memset(out, ++fill & 0xff, static_cast<std::size_t>(bytes));
    if (k == kind::mpi) {
      MPI_Send(out, n, MPI_BYTE, dest, k_tag, g_mpi);
    } else if (k == kind::mdsm) {
      MDSM_Send(out, n, MPI_BYTE, dest, k_tag, g_mdsm, a);
    } else {
      MPI_Send(header_out, static_cast<int>(k_header), MPI_BYTE, dest, k_tag, g_mpi);
      MPI_Send(out, n, MPI_BYTE, dest, k_tag + 1, g_side);
    }
  };
  auto recv = [&](int source) {
    switch (k) {
      case kind::mpi: MPI_Recv(in, n, MPI_BYTE, source, k_tag, g_mpi, MPI_STATUS_IGNORE); return;
      case kind::mdsm: MDSM_Recv(in, n, MPI_BYTE, source, k_tag, g_mdsm, MPI_STATUS_IGNORE); return;
      case kind::two_plain:
        MPI_Recv(header_in, static_cast<int>(k_header), MPI_BYTE, source, k_tag, g_mpi, MPI_STATUS_IGNORE);
        MPI_Recv(in, n, MPI_BYTE, source, k_tag + 1, g_side, MPI_STATUS_IGNORE);
        return;
      case kind::two_probed:
        MPI_Recv(header_in, static_cast<int>(k_header), MPI_BYTE, source, k_tag, g_mpi, MPI_STATUS_IGNORE);
        break;
      case kind::struct_kept: MPI_Recv(MPI_BOTTOM, 1, kept, source, k_tag, g_mpi, MPI_STATUS_IGNORE); break;
      case kind::struct_fresh: {
        MPI_Datatype t = header_and_buffer(header_in, in, n);
        MPI_Recv(MPI_BOTTOM, 1, t, source, k_tag, g_mpi, MPI_STATUS_IGNORE);
        MPI_Type_free(&t);
        break;
      }
    }
    MPI_Message m;
    MPI_Mprobe(source, k_tag + 1, g_side, &m, MPI_STATUS_IGNORE);
    MPI_Mrecv(in, n, MPI_BYTE, &m, MPI_STATUS_IGNORE);
  };
  for (auto _ : state) {
    if (g_rank == 0) {
      send(1);
      recv(1);
    } else if (g_rank == 1) {
      recv(0);
      send(0);
    }
  }
  MPI_Barrier(g_mpi);
  if (kept != MPI_DATATYPE_NULL) MPI_Type_free(&kept);
  if (!progress_thread) mdsm::resume_progress_thread();
}

mdsm_bench::variant make(const char* name, kind k, mdsm_annotation a, long bytes, bool coherent_send,
                         bool coherent_recv, bool write, bool progress_thread) {
  return {name, [=](benchmark::State& s) {
            s.SetLabel(std::to_string(bytes) + " B");
            roundtrip(s, k, a, bytes, coherent_send ? g_coh_send : g_send.get(),
                      coherent_recv ? g_coh_recv : g_recv.get(), write, progress_thread);
          }};
}

void register_all() {
  for (long bytes : k_sizes) {
    const round_options opt{.rounds = k_rounds, .iterations = iterations_for(bytes), .unit = benchmark::kMicrosecond};
    mdsm_bench::register_interleaved(
        "roundtrip/" + mdsm_bench::size_name(bytes),
        {make("MPI_Send_Recv", kind::mpi, MDSM_NONE, bytes, false, false, false, false),
         make("MPI_progress", kind::mpi, MDSM_NONE, bytes, false, false, false, true),
         make("MPI_plus64", kind::mpi, MDSM_NONE, bytes + k_header, false, false, false, true),
         make("NONE", kind::mdsm, MDSM_NONE, bytes, false, false, false, true),
         make("RELEASE", kind::mdsm, MDSM_RELEASE, bytes, false, false, false, true)},
        opt);
  }
  for (long bytes : k_step_sizes) {
    const round_options opt{.rounds = k_rounds, .iterations = iterations_for(bytes), .unit = benchmark::kMicrosecond};
    mdsm_bench::register_interleaved(
        "steps/" + mdsm_bench::size_name(bytes),
        {make("MPI_Send_Recv", kind::mpi, MDSM_NONE, bytes, false, false, false, true),
         make("two_plain", kind::two_plain, MDSM_NONE, bytes, false, false, false, true),
         make("two_probed", kind::two_probed, MDSM_NONE, bytes, false, false, false, true),
         make("struct_kept", kind::struct_kept, MDSM_NONE, bytes, false, false, false, true),
         make("struct_fresh", kind::struct_fresh, MDSM_NONE, bytes, false, false, false, true),
         make("NONE", kind::mdsm, MDSM_NONE, bytes, false, false, false, true)},
        opt);
  }
  for (long bytes : k_sizes) {
    const round_options opt{.rounds = k_rounds, .iterations = iterations_for(bytes), .unit = benchmark::kMicrosecond};
    mdsm_bench::register_interleaved(
        "coherent/" + mdsm_bench::size_name(bytes),
        {make("MPI_write", kind::mpi, MDSM_NONE, bytes, false, false, true, false),
         make("RELEASE_coherent", kind::mdsm, MDSM_RELEASE, bytes, true, false, true, true),
         make("RELEASE_coh_recv", kind::mdsm, MDSM_RELEASE, bytes, true, true, true, true)},
        opt);
  }
}

// The targets, per size.
std::map<std::string, double> targets() {
  std::map<std::string, double> t{{"NONE", 1.05}, {"roundtrip/8B/RELEASE", 1.5}};
  for (long bytes : k_sizes)
    if (bytes >= (64 << 10)) t["roundtrip/" + mdsm_bench::size_name(bytes) + "/RELEASE"] = 1.1;
  return t;
}

void print_summary(const mdsm_bench::ratio_reporter& r) {
  std::printf("\nratio to the baseline per size (median of per-round ratios)\n");
  const char* columns[][2] = {{"roundtrip/", "MPI_progress"},
                               {"roundtrip/", "MPI_plus64"},
                               {"roundtrip/", "NONE"},
                               {"roundtrip/", "RELEASE"},
                               {"coherent/", "RELEASE_coherent"},
                               {"coherent/", "RELEASE_coh_recv"}};
  std::printf("%-8s", "size");
  for (const auto& c : columns) std::printf(" %17s", c[1]);
  std::printf("\n");
  for (long bytes : k_sizes) {
    std::printf("%-8s", mdsm_bench::size_name(bytes).c_str());
    for (const auto& c : columns) {
      const double x = r.ratio(c[0] + mdsm_bench::size_name(bytes), c[1]);
      if (x > 0) std::printf(" %16.3fx", x);
      else std::printf(" %17s", "-");  // not run (--benchmark_filter)
    }
    std::printf("\n");
  }
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  mdsm::init(&argc, &argv);
  g_rank = mdsm::rank();
  if (mdsm::size() < 2) {
    if (g_rank == 0) std::fprintf(stderr, "bench_mdsm_mpi needs 2 ranks: tools/mdsmrun -n 2 %s\n", argv[0]);
    mdsm::finalize();
    return 2;
  }
  MPI_Comm_dup(MPI_COMM_WORLD, &g_mpi);
  MPI_Comm_dup(MPI_COMM_WORLD, &g_mdsm);
  MPI_Comm_dup(MPI_COMM_WORLD, &g_side);
  g_send = page_aligned(k_max_bytes + k_header, std::byte{1});
  g_recv = page_aligned(k_max_bytes + k_header, std::byte{0});
  g_coh_send = static_cast<std::byte*>(mdsm::alloc(k_max_bytes));
  g_coh_recv = static_cast<std::byte*>(mdsm::alloc(k_max_bytes));
  std::memset(g_coh_send, 1, k_max_bytes);
  std::memset(g_coh_recv, 0, k_max_bytes);
  benchmark::Initialize(&argc, argv);
  register_all();
  int rc = 0;
  if (g_rank == 0) {
    std::printf("2 ranks of %d; %d interleaved rounds per variant\n", mdsm::size(), k_rounds);
    mdsm_bench::ratio_reporter report({"MPI_Send_Recv", "MPI_write"}, targets());
    benchmark::RunSpecifiedBenchmarks(&report);
    print_summary(report);
    rc = report.errors() ? 1 : 0;
  } else {
    mdsm_bench::silent_reporter quiet;
    benchmark::RunSpecifiedBenchmarks(&quiet);
  }
  mdsm::free(g_coh_recv);
  mdsm::free(g_coh_send);
  MPI_Comm_free(&g_side);
  MPI_Comm_free(&g_mdsm);
  MPI_Comm_free(&g_mpi);
  mdsm::finalize();
  return rc;
}
