// Coherence costs next to what they are made of, in one run:
//   (a) a remote read fault on rank 0 that fetches a diff from rank 1 (1% and 10% of the page's
//       words changed) or a whole page (rank 0 has no copy), next to a raw MPI_Send/MPI_Recv
//       round trip (16-byte request, reply of the same bytes the fault moves) on the same
//       transport settings, while mdsm's progress threads run;
//   (b) diff creation and application for a 4 KiB page with 1%, 10% and 100% of its words
//       changed, next to memcmp and memcpy of the page (internal API, lib/coherence/diff.hpp);
//   (c) the hand-off of a dirty page: ranks 0 and 1 in turn read the page's counter words the
//       other wrote, write them +1 and send the other a RELEASE (a page moving between writers,
//       as under a lock), next to an mdsm NONE round trip;
//   (d) a remote read fault while the serving rank computes (its progress thread naps), next to
//       the same fault while it waits;
//   (e) rank 0 reading a 16 MiB block rank 1 has just written (as matmul reads B), next to raw
//       MPI sending the same bytes.
// The summary at the end prints each ratio (targets: fault <= 2x the raw round trip; diff
// creation >= 0.5x memcmp bandwidth; hand-off <= 5 us and <= 10x a NONE round trip), and the
// floor of (a): a local protection fault with no network, which bounds the best ratio any
// page-based DSM can reach on the machine.
//
// Every rank runs the (a) benchmarks with fixed iteration counts so they stay in step; rank 0
// reports. (b) runs on rank 0 only. Run: tools/mdsmrun -n 2 build/bench/bench_coherence
#include "diff_pages.hpp"

#include "coherence/diff.hpp"

#include <mdsm/mdsm.hpp>

#include <benchmark/benchmark.h>
#include <mpi.h>
#include <signal.h>
#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace {

using namespace mdsm::bench;

constexpr int k_fault_iterations = 1000;
constexpr int k_local_iterations = 20000;  // (b): ~0.1-2 ms a run
constexpr int k_repetitions = 5;
// (b) runs its variants in this many interleaved rounds (memcmp, memcpy, create and apply at each
// density, then again): a ratio is taken within a round, where both sides saw the same machine
// state. On these VMs another tenant's load on the host core slows vector-heavy code (make_diff's
// compares and permutes) far more than load-bound memcmp, and comes and goes within seconds; runs
// of one variant after another measured that, not the code.
constexpr int k_local_rounds = 15;
int g_rank = 0, g_size = 1;
MPI_Comm g_comm;

// Mean time per operation (ns) of each repetition, by benchmark name; the summary uses medians.
std::map<std::string, std::vector<double>> g_means;
// Fastest single operation (ns) over all repetitions: on a shared machine the median mostly
// measures how long the scheduler keeps a waiting rank off a core; the minimum shows the cost of
// the protocol itself.
std::map<std::string, double> g_best;
void best(const std::string& name, double seconds) {
  if (g_rank != 0) return;
  auto [it, fresh] = g_best.emplace(name, seconds * 1e9);
  if (!fresh) it->second = std::min(it->second, seconds * 1e9);
}
double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// The encoded size of the diff that changing those words produces.
std::size_t diff_size(int percent) {
  std::vector<std::uint32_t> twin(k_words, 0), page(k_words, 0);
  for (std::size_t w : changed_words(percent)) page[w] = 1;
  return mdsm::coherence::make_diff(reinterpret_cast<const std::byte*>(page.data()),
                                    reinterpret_cast<const std::byte*>(twin.data()), k_page)
      .size();
}

// ---- (a) remote faults ----------------------------------------------------------------------

std::atomic<int> g_releases{0}, g_acks{0};
mdsm::handler_id g_release_h = 0, g_ack_h = 0;
std::atomic<long> g_pointer{0};

void register_handlers() {
  g_release_h = mdsm::register_handler("bench.release", [](mdsm::message& m) {
    g_pointer = m.as<long>();
    m.accept();
    ++g_releases;
  });
  g_ack_h = mdsm::register_handler("bench.ack", [](mdsm::message&) { ++g_acks; });
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void record(benchmark::State& state, const std::string& name, double total_seconds) {
  if (g_rank == 0) g_means[name].push_back(total_seconds * 1e9 / static_cast<double>(state.iterations()));
}

// Rank 1 changes `percent` of a page's words and releases to rank 0; rank 0's next read of
// the page faults and fetches the diff (timed). Rank 0 then acknowledges with a NONE message.
void fault_diff(benchmark::State& state) {
  const int percent = static_cast<int>(state.range(0));
  const auto words = changed_words(percent);
  // A page read for the first time since it was written, in every iteration: a page rank 0
  // re-read after each release would be pushed to it along with the release (no fault at all;
  // that path is (c)). Pages written in turn, one apart, so no fetch takes a neighbour along.
  // Fresh pages for every repetition, for the same reason.
  std::uint32_t* pages = mdsm::alloc_collective_array<std::uint32_t>(2 * k_fault_iterations * k_words);
  std::uint32_t* page = pages;
  mdsm::barrier b;
  // Before the barrier: rank 1's first release may arrive before rank 0 has left it.
  const int base_rel = g_releases.load(), base_ack = g_acks.load();
  b.arrive_and_wait();
  std::uint32_t value = static_cast<std::uint32_t>(percent) << 20;
  int i = 0;
  double total = 0;
  for (auto _ : state) {
    page = pages + 2 * static_cast<std::size_t>(i % k_fault_iterations) * k_words;
    ++i;
    if (g_rank == 1) {
      ++value;
      for (std::size_t w : words) page[w] = value;
      mdsm::send_value(0, g_release_h, 0L, mdsm::annotation::release);
      mdsm::wait_until([&] { return g_acks.load() == base_ack + i; });
      state.SetIterationTime(0);
    } else if (g_rank == 0) {
      mdsm::wait_until([&] { return g_releases.load() == base_rel + i; });
      const auto t0 = std::chrono::steady_clock::now();
      // A plain read. (DoNotOptimize on the volatile lvalue itself may store the value back,
      // which adds a write fault and a twin to what is timed.)
      const std::uint32_t v = *static_cast<const volatile std::uint32_t*>(&page[words[0]]);
      const double t = seconds_since(t0);
      benchmark::DoNotOptimize(v);
      total += t;
      best("fault/diff_" + std::to_string(percent) + "pct", t);
      state.SetIterationTime(t);
      mdsm::send_value(1, g_ack_h, 0, mdsm::annotation::none);
    } else {
      state.SetIterationTime(0);
    }
  }
  b.arrive_and_wait();
  // Correctness: every rank agrees on the page's last value.
  std::uint32_t seen = page[words.back()], lo = 0, hi = 0;
  MPI_Allreduce(&seen, &lo, 1, MPI_UINT32_T, MPI_MIN, g_comm);
  MPI_Allreduce(&seen, &hi, 1, MPI_UINT32_T, MPI_MAX, g_comm);
  if (lo != hi) state.SkipWithError("ranks disagree on the page after the run");
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * static_cast<std::int64_t>(diff_size(percent)));
  state.counters["diff_bytes"] = static_cast<double>(diff_size(percent));
  record(state, "fault/diff_" + std::to_string(percent) + "pct", total);
}

// Rank 1 allocates one page per iteration in its own arena, writes them, and releases their
// address; rank 0 reads one word of each page. whole_page (Arg 0): in descending address order,
// so every read faults and fetches one whole page from rank 1 (a fault gathers only the units
// *after* it). page_run (Arg 1): ascending, as a program reads another rank's block: a fault
// fetches the page and up to 15 following ones in one request; the time is per page.
void fault_page(benchmark::State& state) {
  const bool run = state.range(0) != 0;
  const char* name = run ? "fault/page_run" : "fault/whole_page";
  const int iters = static_cast<int>(state.max_iterations);
  const int base_rel = g_releases.load();  // before the collective below (see fault_diff)
  mdsm::barrier b;
  if (g_rank == 1) {
    // Never freed: a reused address would still be a valid copy on rank 0 (no fetch to time).
    auto* pages = mdsm::alloc_array<std::uint32_t>(static_cast<std::size_t>(iters) * k_words);
    for (int p = 0; p < iters; ++p)
      for (std::size_t w = 0; w < k_words; w += 64) pages[p * k_words + w] = static_cast<std::uint32_t>(p + w);
    mdsm::send_value(0, g_release_h, reinterpret_cast<long>(pages), mdsm::annotation::release);
  }
  if (g_rank == 0) mdsm::wait_until([&] { return g_releases.load() == base_rel + 1; });
  // Collect the write notices, so each fault below is a plain whole-page fetch (no diff).
  mdsm::gc();
  b.arrive_and_wait();
  const auto* pages = reinterpret_cast<const std::uint32_t*>(g_pointer.load());
  int i = 0;
  double total = 0;
  bool ok = true;
  for (auto _ : state) {
    if (g_rank == 0) {
      const auto t0 = std::chrono::steady_clock::now();
      const int p = run ? i : iters - 1 - i;
      const std::uint32_t v = *static_cast<const volatile std::uint32_t*>(&pages[p * k_words + 64]);
      const double t = seconds_since(t0);
      ok = ok && v == static_cast<std::uint32_t>(p + 64);
      total += t;
      best(name, t);
      state.SetIterationTime(t);
    } else {
      state.SetIterationTime(0);
    }
    ++i;
  }
  b.arrive_and_wait();  // rank 1 serves the copies until here
  if (!ok) state.SkipWithError("wrong page contents");
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * static_cast<std::int64_t>(k_page));
  record(state, name, total);
}

// The floor under every remote fault of a page-based DSM, with no network in it: a read of a
// PROT_NONE page, the SIGSEGV, and the one mprotect that opens the page, on a private page of
// this process (our own handler for the duration; mdsm's is restored afterwards). A remote
// fault costs at least this plus a round trip, so (floor + round trip) / round trip is the best
// ratio any implementation can reach on this machine.
std::byte* g_floor_page = nullptr;

void floor_handler(int, siginfo_t* info, void*) {
  if (static_cast<std::byte*>(info->si_addr) != g_floor_page) std::abort();  // not ours: never expected here
  mprotect(g_floor_page, k_page, PROT_READ | PROT_WRITE);
}

void local_fault(benchmark::State& state) {
  if (g_floor_page == nullptr) {
    void* p = mmap(nullptr, k_page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
      state.SkipWithError("mmap failed");
      return;
    }
    g_floor_page = static_cast<std::byte*>(p);
    g_floor_page[0] = std::byte{1};  // committed: the fault below is protection only
  }
  struct sigaction ours {}, previous {};
  ours.sa_sigaction = floor_handler;
  ours.sa_flags = SA_SIGINFO;
  sigemptyset(&ours.sa_mask);
  sigaction(SIGSEGV, &ours, &previous);
  double total = 0;
  for (auto _ : state) {
    mprotect(g_floor_page, k_page, PROT_NONE);
    const auto t0 = std::chrono::steady_clock::now();
    benchmark::DoNotOptimize(*static_cast<volatile std::byte*>(g_floor_page));
    const double t = seconds_since(t0);
    total += t;
    best("fault/local_floor", t);
    state.SetIterationTime(t);
  }
  sigaction(SIGSEGV, &previous, nullptr);
  record(state, "fault/local_floor", total);
}

// The same exchange in raw MPI: a 16-byte request, a reply of `bytes`.
void mpi_round_trip(benchmark::State& state) {
  const auto bytes = static_cast<std::size_t>(state.range(0));
  std::vector<char> request(16), reply(bytes);
  MPI_Barrier(g_comm);
  double total = 0;
  for (auto _ : state) {
    if (g_rank == 0) {
      const auto t0 = std::chrono::steady_clock::now();
      MPI_Send(request.data(), 16, MPI_CHAR, 1, 0, g_comm);
      MPI_Recv(reply.data(), static_cast<int>(bytes), MPI_CHAR, 1, 1, g_comm, MPI_STATUS_IGNORE);
      const double t = seconds_since(t0);
      total += t;
      best("MPI_round_trip/" + std::to_string(bytes) + "B", t);
      state.SetIterationTime(t);
    } else {
      if (g_rank == 1) {
        MPI_Recv(request.data(), 16, MPI_CHAR, 0, 0, g_comm, MPI_STATUS_IGNORE);
        MPI_Send(reply.data(), static_cast<int>(bytes), MPI_CHAR, 0, 1, g_comm);
      }
      state.SetIterationTime(0);
    }
  }
  MPI_Barrier(g_comm);
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * static_cast<std::int64_t>(bytes));
  record(state, "MPI_round_trip/" + std::to_string(bytes) + "B", total);
}

// ---- (c) hand-off of a dirty page, (d) a fault while the server computes ----------------------

std::atomic<int> g_turns{0};
mdsm::handler_id g_turn_h = 0, g_ping_h = 0, g_pong_h = 0;
std::atomic<int> g_pongs{0}, g_pings{0};

void register_more_handlers() {
  g_turn_h = mdsm::register_handler("bench.turn", [](mdsm::message& m) {
    m.accept();
    ++g_turns;
  });
  g_ping_h = mdsm::register_handler("bench.ping", [](mdsm::message& m) {
    mdsm::send_value(m.origin(), g_pong_h, 0, mdsm::annotation::none);
    ++g_pings;
  });
  g_pong_h = mdsm::register_handler("bench.pong", [](mdsm::message&) { ++g_pongs; });
}

// Ranks 0 and 1 pass a RELEASE back and forth; on its turn a rank checks the counter words the
// other wrote and writes them +1. One hand-off = half a round; timed on rank 0 over whole rounds.
void handoff(benchmark::State& state) {
  constexpr int k_counters = 8;
  static std::uint32_t* page = nullptr;
  if (page == nullptr) page = mdsm::alloc_collective_array<std::uint32_t>(k_words);
  mdsm::barrier b;
  const int base = g_turns.load();
  if (g_rank == 0)
    for (int w = 0; w < k_counters; ++w) page[w * 97] = 0;
  b.arrive_and_wait();
  bool ok = true;
  std::uint32_t expect = 0;
  int turn = 0;
  const auto t0 = std::chrono::steady_clock::now();
  for (auto _ : state) {
    if (g_rank == 0) {
      if (turn > 0) mdsm::wait_until([&] { return g_turns.load() == base + turn; });
      for (int w = 0; w < k_counters; ++w) ok = ok && page[w * 97] == expect;
      for (int w = 0; w < k_counters; ++w) page[w * 97] = expect + 1;
      mdsm::send_value(1, g_turn_h, 0, mdsm::annotation::release);
    } else if (g_rank == 1) {
      mdsm::wait_until([&] { return g_turns.load() == base + turn + 1; });
      for (int w = 0; w < k_counters; ++w) ok = ok && page[w * 97] == expect + 1;
      for (int w = 0; w < k_counters; ++w) page[w * 97] = expect + 2;
      mdsm::send_value(0, g_turn_h, 0, mdsm::annotation::release);
    }
    expect += 2;
    ++turn;
  }
  if (g_rank == 0) mdsm::wait_until([&] { return g_turns.load() == base + turn; });
  const double total = seconds_since(t0);
  b.arrive_and_wait();
  if (!ok) state.SkipWithError("a hand-off lost a write");
  if (g_rank == 0) g_means["handoff/dirty_page"].push_back(total * 1e9 / (2.0 * static_cast<double>(state.iterations())));
}

// An mdsm NONE round trip: rank 0 sends, rank 1's handler replies.
void none_round_trip(benchmark::State& state) {
  mdsm::barrier b;
  const int base = g_pongs.load();
  b.arrive_and_wait();
  int i = 0;
  const auto t0 = std::chrono::steady_clock::now();
  for (auto _ : state) {
    if (g_rank == 0) {
      ++i;
      mdsm::send_value(1, g_ping_h, 0, mdsm::annotation::none);
      mdsm::wait_until([&] { return g_pongs.load() == base + i; });
    }
  }
  const double total = seconds_since(t0);
  b.arrive_and_wait();
  if (g_rank == 0) g_means["none_round_trip"].push_back(total * 1e9 / static_cast<double>(state.iterations()));
}

// Rank 1 writes one word of every other page of a block and releases it to rank 0, then
// computes (busy, without entering mdsm) for as long as rank 0 reads the pages one by one, 1 ms
// apart; or, with range(0) == 0, waits in mdsm meanwhile. The median fault time is recorded.
void fault_while_busy(benchmark::State& state) {
  const bool busy = state.range(0) != 0;
  constexpr int k_pages = 200;
  // Fresh pages every time (pages read again and again would be pushed along with the release).
  std::uint32_t* block = mdsm::alloc_collective_array<std::uint32_t>(2 * k_pages * k_words);
  std::vector<double> times;
  const std::uint32_t round = 1;
  for (auto _ : state) {
    mdsm::barrier b;
    const int base = g_releases.load();
    b.arrive_and_wait();
    if (g_rank == 1) {
      for (int p = 0; p < k_pages; ++p) block[2 * p * k_words] = round * 1000 + static_cast<std::uint32_t>(p);
      mdsm::send_value(0, g_release_h, 0L, mdsm::annotation::release);
      if (busy) {
        const auto t0 = std::chrono::steady_clock::now();
        double x = 0;
        while (seconds_since(t0) < k_pages * 1.2e-3) {
          for (int k = 0; k < 1000; ++k) x += k * 0.5;
          benchmark::DoNotOptimize(x);
        }
      }
    } else if (g_rank == 0) {
      mdsm::wait_until([&] { return g_releases.load() == base + 1; });
      for (int p = 0; p < k_pages; ++p) {
        const auto t0 = std::chrono::steady_clock::now();
        const std::uint32_t v = *static_cast<const volatile std::uint32_t*>(&block[2 * p * k_words]);
        times.push_back(seconds_since(t0) * 1e9);
        if (v != round * 1000 + static_cast<std::uint32_t>(p)) state.SkipWithError("wrong page contents");
        const auto t1 = std::chrono::steady_clock::now();
        while (seconds_since(t1) < 1e-3) {
        }
      }
    }
    b.arrive_and_wait();
  }
  if (g_rank == 0) g_means[busy ? "fault/server_busy" : "fault/server_waits"].push_back(median(times));
}

// ---- (e) reading another rank's block in bulk -------------------------------------------------

constexpr std::size_t k_bulk_pages = 4096;  // 16 MiB: half of matmul's B at its table size
constexpr int k_bulk_rounds = 5;

// As matmul reads B: both ranks write their half of a fresh collective array, meet at a barrier,
// and rank 0 reads rank 1's half from start to end (timed: from the first read to the last),
// while rank 1 waits in the next barrier. Every word is read and checked after the timing.
void bulk_read(benchmark::State& state) {
  const std::size_t words = k_bulk_pages * k_words;
  for (auto _ : state) {
    auto* block = mdsm::alloc_collective_array<std::uint32_t>(2 * words);
    mdsm::barrier b;
    std::uint32_t* mine = block + static_cast<std::size_t>(g_rank) * words;
    if (g_rank < 2)
      for (std::size_t w = 0; w < words; ++w) mine[w] = static_cast<std::uint32_t>(w * 2654435761u) + static_cast<std::uint32_t>(g_rank);
    b.arrive_and_wait();
    if (g_rank == 0) {
      std::vector<std::uint32_t> copy(words);
      const auto t0 = std::chrono::steady_clock::now();
      // A plain forward loop, as the program reads: glibc's memcpy of this size walks several
      // pages at once, which is not how a program reads a matrix.
      const std::uint32_t* from = block + words;
      for (std::size_t w = 0; w < words; ++w) copy[w] = from[w];
      benchmark::DoNotOptimize(copy.data());
      const double t = seconds_since(t0);
      for (std::size_t w = 0; w < words; ++w)
        if (copy[w] != static_cast<std::uint32_t>(w * 2654435761u) + 1u) {
          state.SkipWithError("wrong contents");
          break;
        }
      g_means["bulk/mdsm"].push_back(t * 1e9);
      best("bulk/mdsm", t);
      state.SetIterationTime(t);
    } else {
      state.SetIterationTime(0);
    }
    b.arrive_and_wait();
  }
}

// The same bytes in raw MPI: a 16-byte request, then rank 1 sends its 16 MiB (as an allgather of
// B does).
void bulk_mpi(benchmark::State& state) {
  const std::size_t bytes = k_bulk_pages * k_page;
  std::vector<std::byte> data(bytes, std::byte{1});
  std::vector<char> request(16);
  for (auto _ : state) {
    MPI_Barrier(g_comm);
    if (g_rank == 0) {
      const auto t0 = std::chrono::steady_clock::now();
      MPI_Send(request.data(), 16, MPI_CHAR, 1, 2, g_comm);
      MPI_Recv(data.data(), static_cast<int>(bytes), MPI_BYTE, 1, 3, g_comm, MPI_STATUS_IGNORE);
      const double t = seconds_since(t0);
      g_means["bulk/mpi"].push_back(t * 1e9);
      best("bulk/mpi", t);
      state.SetIterationTime(t);
    } else {
      if (g_rank == 1) {
        MPI_Recv(request.data(), 16, MPI_CHAR, 0, 2, g_comm, MPI_STATUS_IGNORE);
        MPI_Send(data.data(), static_cast<int>(bytes), MPI_BYTE, 0, 3, g_comm);
      }
      state.SetIterationTime(0);
    }
  }
  MPI_Barrier(g_comm);
}

// ---- (b) diffs (rank 0 only) ------------------------------------------------------------------

template <class F>
void timed_loop(benchmark::State& state, const std::string& name, F&& f) {
  const auto t0 = std::chrono::steady_clock::now();
  for (auto _ : state) f();
  const double total = seconds_since(t0);
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * static_cast<std::int64_t>(k_page));
  record(state, name, total);
}

void diff_create(benchmark::State& state) {
  const int percent = static_cast<int>(state.range(0));
  page_pair pp(percent);
  timed_loop(state, "diff_create/" + std::to_string(percent) + "pct", [&] {
    auto d = mdsm::coherence::make_diff(pp.p(), pp.t(), k_page);
    benchmark::DoNotOptimize(d.data());
  });
}

void diff_apply(benchmark::State& state) {
  const int percent = static_cast<int>(state.range(0));
  page_pair pp(percent);
  const auto d = mdsm::coherence::make_diff(pp.p(), pp.t(), k_page);
  page_pair target(0);  // a page holding the twin's words
  timed_loop(state, "diff_apply/" + std::to_string(percent) + "pct", [&] {
    mdsm::coherence::apply_diff(reinterpret_cast<std::byte*>(target.page()), k_page, d);
    benchmark::ClobberMemory();
  });
  if (!reproduces(target, pp)) state.SkipWithError("applying the diff did not reproduce the page");
}

void page_memcmp(benchmark::State& state) {
  page_pair pp(0);  // page and twin hold the same words
  timed_loop(state, "memcmp", [&] {
    benchmark::DoNotOptimize(std::memcmp(pp.p(), pp.t(), k_page));
    benchmark::ClobberMemory();
  });
}

void page_memcpy(benchmark::State& state) {
  page_pair pp(0);
  timed_loop(state, "memcpy", [&] {
    std::memcpy(pp.page(), pp.t(), k_page);
    benchmark::ClobberMemory();
  });
}

void register_all() {
  auto fault = [](benchmark::internal::Benchmark* b) {
    b->Iterations(k_fault_iterations)
        ->Repetitions(k_repetitions)
        ->ReportAggregatesOnly(true)
        ->UseManualTime()
        ->Unit(benchmark::kMicrosecond);
  };
  for (int percent : {1, 10}) {
    fault(benchmark::RegisterBenchmark("MPI_round_trip/diff", mpi_round_trip)->Arg(static_cast<long>(diff_size(percent))));
    fault(benchmark::RegisterBenchmark("fault/diff_pct", fault_diff)->Arg(percent));
  }
  fault(benchmark::RegisterBenchmark("MPI_round_trip/page", mpi_round_trip)->Arg(static_cast<long>(k_page)));
  fault(benchmark::RegisterBenchmark("fault/whole_page", fault_page)->Arg(0));
  fault(benchmark::RegisterBenchmark("fault/page_run", fault_page)->Arg(1));
  fault(benchmark::RegisterBenchmark("fault/local_floor", local_fault));
  for (int r = 0; r < k_repetitions; ++r) {  // (c) and (d), interleaved
    benchmark::RegisterBenchmark("mdsm_NONE_round_trip", none_round_trip)->Iterations(k_fault_iterations)
        ->Unit(benchmark::kMicrosecond);
    benchmark::RegisterBenchmark("handoff/dirty_page", handoff)->Iterations(k_fault_iterations)
        ->Unit(benchmark::kMicrosecond);
    benchmark::RegisterBenchmark("fault/while_server", fault_while_busy)->Arg(0)->Iterations(1)
        ->Unit(benchmark::kMillisecond);
    benchmark::RegisterBenchmark("fault/while_server", fault_while_busy)->Arg(1)->Iterations(1)
        ->Unit(benchmark::kMillisecond);
  }
  for (int r = 0; r < k_bulk_rounds; ++r) {  // (e), interleaved
    benchmark::RegisterBenchmark("bulk/mpi", bulk_mpi)->Iterations(1)->UseManualTime()->Unit(benchmark::kMillisecond);
    benchmark::RegisterBenchmark("bulk/mdsm", bulk_read)->Iterations(1)->UseManualTime()->Unit(benchmark::kMillisecond);
  }
  if (g_rank != 0) return;
  // A fixed iteration count: left to itself, Google Benchmark first runs a benchmark with 1, 10,
  // ... iterations to size it, and every such probe would land in the medians (record() cannot
  // tell them apart), cold first applications included.
  auto local = [](benchmark::internal::Benchmark* b) {
    b->Iterations(k_local_iterations)->Repetitions(1)->Unit(benchmark::kNanosecond);
  };
  for (int round = 0; round < k_local_rounds; ++round) {
    local(benchmark::RegisterBenchmark("page/memcmp", page_memcmp));
    local(benchmark::RegisterBenchmark("page/memcpy", page_memcpy));
    for (int percent : {1, 10, 100}) {
      local(benchmark::RegisterBenchmark("diff/create_pct", diff_create)->Arg(percent));
      local(benchmark::RegisterBenchmark("diff/apply_pct", diff_apply)->Arg(percent));
    }
  }
}

// The median over rounds of base[r] / x[r] (bandwidth of x relative to base, round by round).
double median_ratio(const std::vector<double>& base, const std::vector<double>& x) {
  std::vector<double> r;
  for (std::size_t i = 0; i < std::min(base.size(), x.size()); ++i) r.push_back(base[i] / x[i]);
  return median(r);
}

void print_summary() {
  auto m = [](const std::string& name) { return median(g_means[name]); };
  std::printf("\nSummary (medians of %d repetitions; the machine is shared, so expect noise)\n", k_repetitions);
  std::printf("(a) remote read fault vs raw MPI round trip of the same bytes (target <= 2.0x)\n");
  std::printf("                                      median: fault      MPI   ratio |  fastest: fault      MPI   ratio\n");
  auto line = [&](const char* what, const std::string& fault, std::size_t bytes) {
    const std::string mpi = "MPI_round_trip/" + std::to_string(bytes) + "B";
    const double f = m(fault), r = m(mpi), fb = g_best[fault], rb = g_best[mpi];
    std::printf("  %-22s (%5zu B): %9.2f us %8.2f us %6.2fx | %9.2f us %8.2f us %6.2fx\n", what, bytes, f / 1e3,
                r / 1e3, f / r, fb / 1e3, rb / 1e3, fb / rb);
  };
  line("diff fetch, 1% words", "fault/diff_1pct", diff_size(1));
  line("diff fetch, 10% words", "fault/diff_10pct", diff_size(10));
  line("whole page fetch", "fault/whole_page", k_page);
  // What no implementation can remove: the local trap and one mprotect, plus the round trip.
  const double floor = m("fault/local_floor"), floor_best = g_best["fault/local_floor"];
  std::printf("  floor: SIGSEGV + one mprotect, no network: median %.2f us, fastest %.2f us\n", floor / 1e3,
              floor_best / 1e3);
  auto floor_line = [&](const char* what, std::size_t bytes) {
    const std::string mpi = "MPI_round_trip/" + std::to_string(bytes) + "B";
    const double r = m(mpi), rb = g_best[mpi];
    std::printf("  best possible ratio, %-14s (floor + round trip) / round trip: median %.2fx, fastest %.2fx\n", what,
                (floor + r) / r, (floor_best + rb) / rb);
  };
  floor_line("1% diff", diff_size(1));
  floor_line("10% diff", diff_size(10));
  floor_line("whole page", k_page);
  const double hand = m("handoff/dirty_page"), none_rt = m("none_round_trip");
  std::printf("(c) hand-off of a dirty page between two writers (RELEASE, read, write): %.2f us per hand-off,\n"
              "    %.2fx an mdsm NONE round trip (%.2f us); targets <= 5 us and <= 10x\n",
              hand / 1e3, hand / none_rt, none_rt / 1e3);
  std::printf("(d) remote read fault (diff of one word, no neighbour batched), median: %.1f us while the serving rank\n"
              "    computes, %.1f us while it waits in mdsm\n",
              m("fault/server_busy") / 1e3, m("fault/server_waits") / 1e3);
  const double bulk = m("bulk/mdsm"), bulk_mpi = m("bulk/mpi");
  std::printf("(e) reading another rank's freshly written %zu MiB block (matmul's B), median of %d: %.2f ms (%.0f MB/s),\n"
              "    %.2fx raw MPI sending it (%.2f ms; fastest %.2f vs %.2f ms)\n",
              k_bulk_pages * k_page >> 20, k_bulk_rounds, bulk / 1e6, static_cast<double>(k_bulk_pages * k_page) / bulk * 1e3,
              bulk / bulk_mpi, bulk_mpi / 1e6, g_best["bulk/mdsm"] * 1e-6, g_best["bulk/mpi"] * 1e-6);
  const double cmp = m("memcmp"), cpy = m("memcpy");
  auto gbs = [](double ns) { return static_cast<double>(k_page) / ns; };  // bytes/ns == GB/s
  std::printf("(b) 4 KiB page, medians of %d interleaved rounds; ratios are bandwidth relative to memcmp (create) or\n"
              "    memcpy (apply), taken within each round, median over rounds\n",
              k_local_rounds);
  std::printf("    memcmp %.1f ns (%.2f GB/s), memcpy %.1f ns (%.2f GB/s)\n", cmp, gbs(cmp), cpy, gbs(cpy));
  for (int percent : {1, 10, 100}) {
    const std::string create = "diff_create/" + std::to_string(percent) + "pct";
    const std::string apply = "diff_apply/" + std::to_string(percent) + "pct";
    const double c = m(create), a = m(apply);
    std::printf("  %3d%% changed: create %7.1f ns (%.2f GB/s, %.2fx memcmp; target >= 0.5x)  apply %7.1f ns "
                "(%.2f GB/s, %.2fx memcpy)\n",
                percent, c, gbs(c), median_ratio(g_means["memcmp"], g_means[create]), a, gbs(a),
                median_ratio(g_means["memcpy"], g_means[apply]));
  }
}

// Non-zero ranks run the same benchmarks but report nothing.
class silent_reporter : public benchmark::BenchmarkReporter {
 public:
  bool ReportContext(const Context&) override { return true; }
  void ReportRuns(const std::vector<Run>&) override {}
};

}  // namespace

int main(int argc, char** argv) {
  mdsm::init(&argc, &argv);
  g_rank = mdsm::rank();
  g_size = mdsm::size();
  if (g_size < 2) {
    if (g_rank == 0) std::fprintf(stderr, "bench_coherence needs 2 ranks: tools/mdsmrun -n 2 %s\n", argv[0]);
    mdsm::finalize();
    return 1;
  }
  MPI_Comm_dup(MPI_COMM_WORLD, &g_comm);
  register_handlers();
  register_more_handlers();
  benchmark::Initialize(&argc, argv);
  register_all();
  if (g_rank == 0) {
    std::printf("ranks: %d (fault benchmarks: medians of %d repetitions x %d faults)\n", g_size, k_repetitions,
                k_fault_iterations);
    benchmark::RunSpecifiedBenchmarks();
    print_summary();
  } else {
    silent_reporter quiet;
    benchmark::RunSpecifiedBenchmarks(&quiet);
  }
  // Rank 1 finishes first (it does not run (b)); it waits here asleep rather than spinning in
  // mdsm::finalize, which would take a core from rank 0's diff benchmarks.
  MPI_Request req;
  MPI_Ibarrier(g_comm, &req);
  for (int done = 0; !done;) {
    MPI_Test(&req, &done, MPI_STATUS_IGNORE);
    if (!done) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  MPI_Comm_free(&g_comm);
  mdsm::finalize();
  return 0;
}
