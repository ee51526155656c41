// Coordination latency, mdsm next to MPI on the same transport, in one run:
//   lock acquire+release, uncontended (one rank locks repeatedly) and contended (every rank
//   hammers one lock), for an mdsm::mutex, an mdsm::mutex_handle (made by one rank, same
//   protocol: should cost the same), MPI_Win_lock(MPI_LOCK_EXCLUSIVE) and an MCS queue
//   lock on MPI_Fetch_and_op/MPI_Compare_and_swap; barrier: mdsm::barrier and
//   mdsm::barrier_handle vs MPI_Barrier, and mdsm::barrier after each rank wrote 4096 pages.
// In "lock+counter" each critical section increments a shared counter (coherent memory for
// mdsm, the window for MPI), checked at the end: for mdsm that includes the page faults and the
// diff that move the counter between ranks. "lock_only" is the lock handoff alone.
//
// Every rank runs the same benchmarks with fixed iteration counts (so they stay in step);
// rank 0 reports. Run: tools/mdsmrun -n 2 build/bench/bench_sync
#include "bench_report.hpp"

#include <mdsm/mdsm.hpp>

#include <mpi.h>

#include <cstdio>
#include <cstdlib>
#include <memory>

namespace {

constexpr int k_iterations = 1000;  // operations per run
constexpr int k_rounds = 11;        // interleaved runs of every variant
int g_rank = 0, g_size = 1;
// Where the lock and the counter live: the last rank, so rank 0 (which reports) works remotely.
int target() { return g_size - 1; }
MPI_Comm g_comm;  // the benchmark's own communicator

// ---- MCS lock on MPI RMA (Mellor-Crummey & Scott; the MPI-3 formulation of "Using Advanced
// MPI", ch. 4): the target rank holds the tail; each rank has {locked, next} in its window part.
class mcs_lock {
 public:
  explicit mcs_lock(MPI_Comm comm) {
    MPI_Win_allocate(3 * sizeof(int), sizeof(int), MPI_INFO_NULL, comm, &base_, &win_);
    base_[k_next] = -1;
    base_[k_locked] = 0;
    base_[k_tail] = -1;
    MPI_Win_lock_all(0, win_);
    MPI_Barrier(comm);
  }
  ~mcs_lock() {
    MPI_Win_unlock_all(win_);
    MPI_Win_free(&win_);
  }
  void lock() {
    base_[k_next] = -1;
    base_[k_locked] = 1;
    MPI_Win_sync(win_);
    int prev = -1;
    MPI_Fetch_and_op(&g_rank, &prev, MPI_INT, target(), k_tail, MPI_REPLACE, win_);
    MPI_Win_flush(target(), win_);
    if (prev == -1) return;
    MPI_Accumulate(&g_rank, 1, MPI_INT, prev, k_next, 1, MPI_INT, MPI_REPLACE, win_);
    MPI_Win_flush(prev, win_);
    int locked = 1;
    do {
      MPI_Fetch_and_op(nullptr, &locked, MPI_INT, g_rank, k_locked, MPI_NO_OP, win_);
      MPI_Win_flush(g_rank, win_);
    } while (locked == 1);
  }
  void unlock() {
    int next = -1;
    MPI_Fetch_and_op(nullptr, &next, MPI_INT, g_rank, k_next, MPI_NO_OP, win_);
    MPI_Win_flush(g_rank, win_);
    if (next == -1) {
      int nobody = -1, old = -1;
      MPI_Compare_and_swap(&nobody, &g_rank, &old, MPI_INT, target(), k_tail, win_);
      MPI_Win_flush(target(), win_);
      if (old == g_rank) return;
      do {  // a successor is linking itself in
        MPI_Fetch_and_op(nullptr, &next, MPI_INT, g_rank, k_next, MPI_NO_OP, win_);
        MPI_Win_flush(g_rank, win_);
      } while (next == -1);
    }
    const int zero = 0;
    MPI_Accumulate(&zero, 1, MPI_INT, next, k_locked, 1, MPI_INT, MPI_REPLACE, win_);
    MPI_Win_flush(next, win_);
  }

 private:
  static constexpr int k_next = 0, k_locked = 1, k_tail = 2;
  int* base_ = nullptr;
  MPI_Win win_;
};

// A counter in an MPI window at the target rank, incremented inside the MPI critical sections.
struct mpi_counter {
  long* base = nullptr;
  MPI_Win win;
  mpi_counter() {
    MPI_Win_allocate(sizeof(long), sizeof(long), MPI_INFO_NULL, g_comm, &base, &win);
    *base = 0;
    MPI_Barrier(g_comm);
  }
  ~mpi_counter() { MPI_Win_free(&win); }
};

// Which ranks take part: uncontended = rank 0 only; contended = every rank.
bool takes_part(bool contended) { return contended || g_rank == 0; }

void check(bool ok, benchmark::State& state) {
  int mine = ok ? 1 : 0, all = 0;
  MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_MIN, g_comm);
  if (!all) state.SkipWithError("wrong counter value");
}

// A mutex handle made by the target rank alone (so managed there, as mdsm::mutex m(target())),
// handed to the others as a plain value.
mdsm::mutex_handle shared_handle() {
  mdsm::mutex_handle h;
  if (g_rank == target()) h = mdsm::mutex_handle::create();
  MPI_Bcast(&h, sizeof h, MPI_BYTE, target(), g_comm);
  return h;
}

// Destroys it once every rank is done with it (the token is idle wherever it is cached).
void destroy_handle(mdsm::mutex_handle h) {
  mdsm::barrier b;
  b.arrive_and_wait();
  if (g_rank == 0) h.destroy();
  b.arrive_and_wait();
}

// The counter every mdsm variant increments (allocated once, collectively).
long* mdsm_counter() {
  static long* counter = mdsm::alloc_collective_array<long>(1);
  return counter;
}

template <class Lock>
void mdsm_lock_with(benchmark::State& state, bool contended, Lock& m) {
  long* counter = mdsm_counter();
  mdsm::barrier b;
  if (g_rank == target()) *counter = 0;
  b.arrive_and_wait();
  long rounds = 0;
  for (auto _ : state) {
    if (takes_part(contended)) {
      m.lock();
      ++*counter;
      m.unlock();
    }
    ++rounds;
  }
  b.arrive_and_wait();
  check(*counter == rounds * (contended ? g_size : 1), state);
  b.arrive_and_wait();
}

void mdsm_lock(benchmark::State& state, bool contended) {
  mdsm::mutex m(target());
  mdsm_lock_with(state, contended, m);
}

void mdsm_lock_handle(benchmark::State& state, bool contended) {
  mdsm::mutex_handle m = shared_handle();
  mdsm_lock_with(state, contended, m);
  destroy_handle(m);
}

void mpi_win_lock(benchmark::State& state, bool contended) {
  mpi_counter c;
  long rounds = 0;
  for (auto _ : state) {
    if (takes_part(contended)) {
      MPI_Win_lock(MPI_LOCK_EXCLUSIVE, target(), 0, c.win);
      long v = 0;
      MPI_Get(&v, 1, MPI_LONG, target(), 0, 1, MPI_LONG, c.win);
      MPI_Win_flush(target(), c.win);
      ++v;
      MPI_Put(&v, 1, MPI_LONG, target(), 0, 1, MPI_LONG, c.win);
      MPI_Win_unlock(target(), c.win);
    }
    ++rounds;
  }
  MPI_Barrier(g_comm);
  MPI_Win_lock(MPI_LOCK_SHARED, target(), 0, c.win);
  long v = 0;
  MPI_Get(&v, 1, MPI_LONG, target(), 0, 1, MPI_LONG, c.win);
  MPI_Win_unlock(target(), c.win);
  check(v == rounds * (contended ? g_size : 1), state);
}

void mpi_mcs_lock(benchmark::State& state, bool contended) {
  mpi_counter c;
  mcs_lock l(g_comm);
  MPI_Win_lock_all(0, c.win);
  long rounds = 0;
  for (auto _ : state) {
    if (takes_part(contended)) {
      l.lock();
      long v = 0;
      MPI_Get(&v, 1, MPI_LONG, target(), 0, 1, MPI_LONG, c.win);
      MPI_Win_flush(target(), c.win);
      ++v;
      MPI_Put(&v, 1, MPI_LONG, target(), 0, 1, MPI_LONG, c.win);
      MPI_Win_flush(target(), c.win);
      l.unlock();
    }
    ++rounds;
  }
  MPI_Win_unlock_all(c.win);
  MPI_Barrier(g_comm);
  MPI_Win_lock(MPI_LOCK_SHARED, target(), 0, c.win);
  long v = 0;
  MPI_Get(&v, 1, MPI_LONG, target(), 0, 1, MPI_LONG, c.win);
  MPI_Win_unlock(target(), c.win);
  check(v == rounds * (contended ? g_size : 1), state);
}

// Lock handoff only (no data in the critical section): what the lock protocols themselves cost.
// Every rank locks and unlocks; mutual exclusion itself is tested in test/sync.
void mdsm_lock_only(benchmark::State& state) {
  mdsm::mutex m(target());
  for (auto _ : state) {
    m.lock();
    m.unlock();
  }
  mdsm::barrier b;
  b.arrive_and_wait();
}

void mdsm_lock_handle_only(benchmark::State& state) {
  const mdsm::mutex_handle m = shared_handle();
  for (auto _ : state) {
    m.lock();
    m.unlock();
  }
  destroy_handle(m);
}

void mpi_win_lock_only(benchmark::State& state) {
  mpi_counter c;
  for (auto _ : state) {
    MPI_Win_lock(MPI_LOCK_EXCLUSIVE, target(), 0, c.win);
    MPI_Win_unlock(target(), c.win);
  }
  MPI_Barrier(g_comm);
}

void mpi_mcs_lock_only(benchmark::State& state) {
  mcs_lock l(g_comm);
  for (auto _ : state) {
    l.lock();
    l.unlock();
  }
  MPI_Barrier(g_comm);
}

void mdsm_barrier(benchmark::State& state) {
  mdsm::barrier b;
  for (auto _ : state) b.arrive_and_wait();
}

// The barrier of a grid code (issue 20): before every barrier each rank writes one word in each
// of its 4096 pages (16 MiB) of a collective array, as SOR rewrites its block every half-sweep.
// The writes are not timed; what is, is the coherence work the barrier does for them (closing
// the interval, notices for 4096 units per rank -- a run, once the units are hot -- and their
// invalidation at the other ranks), next to the empty barrier.
void mdsm_barrier_written(benchmark::State& state) {
  constexpr std::size_t k_pages = 4096, k_words = 4096 / sizeof(double);
  // A fresh array per round, freed after it: its units, hot by then, would otherwise be announced
  // at every later barrier, the other variants' included.
  double* const grid = mdsm::alloc_collective_array<double>(k_pages * k_words * static_cast<std::size_t>(g_size));
  mdsm::barrier b;
  double* const mine = grid + static_cast<std::size_t>(g_rank) * k_pages * k_words;
  for (auto _ : state) {
    state.PauseTiming();
    for (std::size_t p = 0; p < k_pages; ++p) mine[p * k_words] += 1;
    state.ResumeTiming();
    b.arrive_and_wait();
  }
  b.arrive_and_wait();
  mdsm::free_collective(grid);
}

// Made by rank 0 alone for every rank (rank 0 is also the collective barrier's manager).
void mdsm_barrier_handle(benchmark::State& state) {
  mdsm::barrier_handle b;
  if (g_rank == 0) b = mdsm::barrier_handle::create(g_size);
  MPI_Bcast(&b, sizeof b, MPI_BYTE, 0, g_comm);
  for (auto _ : state) b.arrive_and_wait();
  b.arrive_and_wait();  // every rank is out of the timed ones before rank 0 destroys it
  if (g_rank == 0) b.destroy();
  MPI_Barrier(g_comm);
}

void mpi_barrier(benchmark::State& state) {
  for (auto _ : state) MPI_Barrier(g_comm);
}

void register_all() {
  using mdsm_bench::register_interleaved;
  const mdsm_bench::round_options opt{.rounds = k_rounds, .iterations = k_iterations, .unit = benchmark::kMicrosecond};
  for (bool contended : {false, true}) {
    register_interleaved(std::string("lock+counter/") + (contended ? "contended" : "uncontended"),
                         {{"MPI_Win_lock_exclusive", [=](benchmark::State& s) { mpi_win_lock(s, contended); }},
                          {"MPI_RMA_MCS", [=](benchmark::State& s) { mpi_mcs_lock(s, contended); }},
                          {"mdsm_mutex", [=](benchmark::State& s) { mdsm_lock(s, contended); }},
                          {"mdsm_mutex_handle", [=](benchmark::State& s) { mdsm_lock_handle(s, contended); }}},
                         opt);
  }
  register_interleaved("lock_only/contended", {{"MPI_Win_lock_exclusive", mpi_win_lock_only},
                                               {"MPI_RMA_MCS", mpi_mcs_lock_only},
                                               {"mdsm_mutex", mdsm_lock_only},
                                               {"mdsm_mutex_handle", mdsm_lock_handle_only}},
                       opt);
  register_interleaved("barrier",
                       {{"MPI_Barrier", mpi_barrier},
                        {"mdsm_barrier", mdsm_barrier},
                        {"mdsm_barrier_handle", mdsm_barrier_handle},
                        {"mdsm_barrier_4096_written", mdsm_barrier_written}},
                       opt);
}

}  // namespace

int main(int argc, char** argv) {
  mdsm::init(&argc, &argv);
  g_rank = mdsm::rank();
  g_size = mdsm::size();
  MPI_Comm_dup(MPI_COMM_WORLD, &g_comm);
  benchmark::Initialize(&argc, argv);
  register_all();
  if (g_rank == 0) {
    std::printf("ranks: %d; %d interleaved rounds x %d operations per variant (time per operation on rank 0)\n",
                g_size, k_rounds, k_iterations);
    mdsm_bench::ratio_reporter report({"MPI_Win_lock_exclusive", "MPI_Barrier"});
    benchmark::RunSpecifiedBenchmarks(&report);
  } else {
    mdsm_bench::silent_reporter quiet;
    benchmark::RunSpecifiedBenchmarks(&quiet);
  }
  MPI_Comm_free(&g_comm);
  mdsm::finalize();
  return 0;
}
