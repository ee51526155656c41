// One rank alone under mdsm against the same code on private memory (issue 17: a one-rank program
// under mdsm within 1.1x of the same program without it). With one rank there is nothing to keep
// coherent: the coherent region is plain read-write memory, with no fault, twin, notice or diff
// (DESIGN.md §3), so the only differences left are where the memory is (shared memory behind
// two views instead of private pages) and mdsm's idle progress thread.
//
// Groups, each in interleaved rounds (bench_report.hpp), baseline `private` (aligned_alloc):
//   stencil/*   red-black 5-point sweeps over a 1024 x 1024 grid of doubles (SOR's kernel shape)
//   scatter/*   1M increments at pseudo-random places of a 16 MiB int array (radix sort's shape)
// Every run checks its result against the private one; a mismatch is reported as an error.
//
// Run: tools/mdsmrun -n 1 build-rel/bench/bench_one_rank
#include "bench_report.hpp"

#include <mdsm/mdsm.hpp>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>

namespace {

constexpr long k_n = 1024;                          // stencil grid side
constexpr std::size_t k_ints = (16u << 20) / 4;     // scatter array
constexpr std::size_t k_increments = 1u << 20;      // per scatter iteration

struct arrays {
  double* grid;
  int* counts;
};
arrays g_private{}, g_coherent{};

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
void stencil(benchmark::State& state, arrays& a, bool check) {
  for (auto _ : state) sweep(a.grid);
  if (check && std::memcmp(a.grid, g_private.grid, k_n * k_n * sizeof(double)) != 0)
    state.SkipWithError("the coherent grid differs from the private one");
}

void scattered(benchmark::State& state, arrays& a, std::uint64_t& seed, bool check) {
  for (auto _ : state) scatter(a.counts, seed);
  if (check && std::memcmp(a.counts, g_private.counts, k_ints * sizeof(int)) != 0)
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
  if (mdsm::size() != 1) {
    if (mdsm::rank() == 0) std::fprintf(stderr, "bench_one_rank measures one rank alone: tools/mdsmrun -n 1 %s\n", argv[0]);
    mdsm::finalize();
    return 1;
  }
  g_private = {private_array<double>(k_n * k_n), private_array<int>(k_ints)};
  g_coherent = {mdsm::alloc_collective_array<double>(k_n * k_n), mdsm::alloc_collective_array<int>(k_ints)};
  fill(g_private);
  fill(g_coherent);
  std::uint64_t seed_private = 1, seed_coherent = 1;

  benchmark::Initialize(&argc, argv);
  using mdsm_bench::variant;
  mdsm_bench::round_options sweeps;
  sweeps.iterations = 20;
  sweeps.unit = benchmark::kMillisecond;
  mdsm_bench::register_interleaved(
      "stencil",
      {variant{"private", [](benchmark::State& s) { stencil(s, g_private, false); }},
       variant{"coherent", [](benchmark::State& s) { stencil(s, g_coherent, true); }}},
      sweeps);
  mdsm_bench::round_options scatters;
  scatters.iterations = 10;
  scatters.unit = benchmark::kMillisecond;
  mdsm_bench::register_interleaved(
      "scatter",
      {variant{"private", [&](benchmark::State& s) { scattered(s, g_private, seed_private, false); }},
       variant{"coherent", [&](benchmark::State& s) { scattered(s, g_coherent, seed_coherent, true); }}},
      scatters);
  mdsm_bench::ratio_reporter reporter({"private"}, {{"coherent", 1.10}});
  benchmark::RunSpecifiedBenchmarks(&reporter);
  const auto st = mdsm::statistics();
  std::printf("faults %llu, twins %llu, diffs %llu (one rank alone: all 0)\n",
              static_cast<unsigned long long>(st.at("read_faults") + st.at("write_faults")),
              static_cast<unsigned long long>(st.at("twins_created")),
              static_cast<unsigned long long>(st.at("diffs_created")));
  std::free(g_private.grid);
  std::free(g_private.counts);
  mdsm::free_collective(g_coherent.counts);
  mdsm::free_collective(g_coherent.grid);
  mdsm::finalize();
  return reporter.errors() ? 1 : 0;
}
