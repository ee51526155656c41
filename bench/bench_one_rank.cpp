// A rank working on coherent memory no other rank has a copy of, against the same code on
// private memory (issue 17: a one-rank program under mdsm within 1.1x of the same program without
// it; no write faults, twins or diffs where no other rank can read the writes). One rank alone
// has nothing to keep coherent, and at any rank count a rank's own allocation (`mdsm::alloc`)
// stays *private* until a copy of it goes to another rank: plain read-write memory with no fault,
// twin, notice or diff (COHERENCE.md §3), so the only differences left are where the memory is
// (shared memory behind two views instead of private pages) and mdsm's idle progress thread.
//
// Rank 0 runs the groups; with more ranks it sends rank 1 a RELEASE after every step (as a
// program's synchronization would: an interval closes), and rank 1 just takes them in.
// Groups, each in interleaved rounds (bench_report.hpp), baseline `private` (aligned_alloc):
//   stencil/*   red-black 5-point sweeps over a 1024 x 1024 grid of doubles (SOR's kernel shape)
//   scatter/*   1M increments at pseudo-random places of a 16 MiB int array (radix sort's shape)
// Variants: private; own (mdsm::alloc: rank 0's arena, private at every rank count); collective
// (alloc_collective: with 2+ ranks every rank holds a copy, so this is ordinary coherent memory,
// for comparison). Every run checks its result against the private one; a mismatch is an error.
// The faults and twins of each variant's runs are printed at the end.
//
// Run: tools/mdsmrun -n 1 build-rel/bench/bench_one_rank   (and -n 2)
#include "bench_report.hpp"

#include <mdsm/mdsm.hpp>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <new>
#include <string>

namespace {

constexpr long k_n = 1024;                          // stencil grid side
constexpr std::size_t k_ints = (16u << 20) / 4;     // scatter array
constexpr std::size_t k_increments = 1u << 20;      // per scatter iteration

struct arrays {
  double* grid;
  int* counts;
};
arrays g_private{}, g_own{}, g_collective{};
mdsm::handler_id g_step{};  // a RELEASE to rank 1 after every step (with 2+ ranks)
bool g_stop = false;        // rank 1: rank 0 is done

// Counters of one variant's runs.
struct tally {
  std::uint64_t faults = 0, twins = 0;
};
std::map<std::string, tally> g_tallies;

struct counted {
  std::string name;
  std::map<std::string, std::uint64_t> before = mdsm::statistics();
  ~counted() {
    const auto after = mdsm::statistics();
    auto d = [&](const char* k) { return after.at(k) - before.at(k); };
    tally& t = g_tallies[name];
    t.faults += d("read_faults") + d("write_faults");
    t.twins += d("twins_created");
  }
};

void step_done() {
  if (mdsm::size() > 1) mdsm::send_value(1, g_step, 0, mdsm::annotation::release);
}

void fill(arrays& a) {
  for (long i = 0; i < k_n; ++i)
    for (long j = 0; j < k_n; ++j) a.grid[i * k_n + j] = static_cast<double>((i * 31 + j * 17) % 101) / 101.0;
  std::memset(a.counts, 0, k_ints * sizeof(int));
}

void sweep(double* g) {
  for (int colour = 0; colour < 2; ++colour)
    for (long i = 1; i < k_n - 1; ++i) {
      double* row = g + i * k_n;
      for (long j = 1 + (i + colour) % 2; j < k_n - 1; j += 2)
        row[j] = -0.25 * row[j] + 1.25 * 0.25 * (row[j - k_n] + row[j + k_n] + row[j - 1] + row[j + 1]);
    }
}

void scatter(int* counts, std::uint64_t& state) {
  for (std::size_t k = 0; k < k_increments; ++k) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    ++counts[(state >> 33) % k_ints];
  }
}

// Both variants of a group run the same iterations from the same start, so their arrays must
// hold the same values after every run: checked in the coherent variant (which runs second).
void stencil(benchmark::State& state, const char* name, arrays& a) {
  const counted c{name};
  for (auto _ : state) {
    sweep(a.grid);
    step_done();
  }
  if (&a != &g_private && std::memcmp(a.grid, g_private.grid, k_n * k_n * sizeof(double)) != 0)
    state.SkipWithError("the coherent grid differs from the private one");
}

void scattered(benchmark::State& state, const char* name, arrays& a, std::uint64_t& seed) {
  const counted c{name};
  for (auto _ : state) {
    scatter(a.counts, seed);
    step_done();
  }
  if (&a != &g_private && std::memcmp(a.counts, g_private.counts, k_ints * sizeof(int)) != 0)
    state.SkipWithError("the coherent counts differ from the private ones");
}

template <class T>
T* private_array(std::size_t n) {
  void* p = std::aligned_alloc(4096, (n * sizeof(T) + 4095) / 4096 * 4096);
  if (p == nullptr) throw std::bad_alloc();
  return static_cast<T*>(p);
}

}  // namespace

int main(int argc, char** argv) {
  mdsm::init(&argc, &argv);
  g_step = mdsm::register_handler("bench.step", [](mdsm::message& m) { m.accept(); });
  const mdsm::handler_id stop = mdsm::register_handler("bench.stop", [](mdsm::message& m) {
    m.accept();
    g_stop = true;
  });
  g_collective = {mdsm::alloc_collective_array<double>(k_n * k_n), mdsm::alloc_collective_array<int>(k_ints)};
  if (mdsm::rank() != 0) {
    mdsm::wait_until([] { return g_stop; });
    mdsm::free_collective(g_collective.counts);
    mdsm::free_collective(g_collective.grid);
    mdsm::finalize();
    return 0;
  }
  g_private = {private_array<double>(k_n * k_n), private_array<int>(k_ints)};
  g_own = {mdsm::alloc_array<double>(k_n * k_n), mdsm::alloc_array<int>(k_ints)};
  fill(g_private);
  fill(g_own);
  fill(g_collective);
  std::uint64_t seed_private = 1, seed_own = 1, seed_collective = 1;

  benchmark::Initialize(&argc, argv);
  using mdsm_bench::variant;
  mdsm_bench::round_options sweeps;
  sweeps.iterations = 20;
  sweeps.unit = benchmark::kMillisecond;
  mdsm_bench::register_interleaved(
      "stencil",
      {variant{"private", [](benchmark::State& s) { stencil(s, "stencil/private", g_private); }},
       variant{"own", [](benchmark::State& s) { stencil(s, "stencil/own", g_own); }},
       variant{"collective", [](benchmark::State& s) { stencil(s, "stencil/collective", g_collective); }}},
      sweeps);
  mdsm_bench::round_options scatters;
  scatters.iterations = 10;
  scatters.unit = benchmark::kMillisecond;
  mdsm_bench::register_interleaved(
      "scatter",
      {variant{"private", [&](benchmark::State& s) { scattered(s, "scatter/private", g_private, seed_private); }},
       variant{"own", [&](benchmark::State& s) { scattered(s, "scatter/own", g_own, seed_own); }},
       variant{"collective",
               [&](benchmark::State& s) { scattered(s, "scatter/collective", g_collective, seed_collective); }}},
      scatters);
  // The target holds for memory no other rank has a copy of: own at any rank count, collective
  // only alone.
  std::map<std::string, double> targets{{"own", 1.10}};
  if (mdsm::size() == 1) targets["collective"] = 1.10;
  mdsm_bench::ratio_reporter reporter({"private"}, targets);
  benchmark::RunSpecifiedBenchmarks(&reporter);
  std::printf("%d rank(s); counters of each variant's runs (own: 0 at any rank count; collective: 0 alone):\n",
              mdsm::size());
  for (const auto& [name, t] : g_tallies)
    std::printf("  %-20s faults %llu, twins %llu\n", name.c_str(), static_cast<unsigned long long>(t.faults),
                static_cast<unsigned long long>(t.twins));
  for (int r = 1; r < mdsm::size(); ++r) mdsm::send_value(r, stop, 0, mdsm::annotation::none);
  std::free(g_private.grid);
  std::free(g_private.counts);
  mdsm::free(g_own.counts);
  mdsm::free(g_own.grid);
  mdsm::free_collective(g_collective.counts);
  mdsm::free_collective(g_collective.grid);
  mdsm::finalize();
  return reporter.errors() ? 1 : 0;
}
