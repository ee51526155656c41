// demo.cpp: a tour of mdsm in one program, for `./quickstart demo` before the applications are
// built and for readers who want the pieces side by side.
//
//  1. A token travels around the ring of ranks in RELEASE messages; each holder adds its rank to
//     a counter in coherent memory. The token is only a pointer: the counter's new value reaches
//     the next rank through the release/acquire the message carries.
//  2. Every rank increments a second counter under an mdsm::mutex.
//  3. A barrier, then every rank checks both counters.
//
//   MDSM_STATS=1 mdsmrun -n 4 ./demo     (prints the per-rank message table at the end)
#include <mdsm/mdsm.hpp>

#include <atomic>
#include <cstdio>
#include <mutex>

int main(int argc, char** argv) {
  mdsm::init(&argc, &argv);
  const int me = mdsm::rank(), n = mdsm::size();
  constexpr int k_laps = 10, k_increments = 100;

  long* ring_sum = mdsm::alloc_collective_array<long>(1);
  long* locked_sum = mdsm::alloc_collective_array<long>(1);
  mdsm::mutex lock;
  mdsm::barrier everyone;

  std::atomic<int> tokens{0};
  const mdsm::handler_id token = mdsm::register_handler("token", [&](mdsm::message& m) {
    m.accept();  // the acquire: the sender's writes are visible once the application sees the token
    tokens.fetch_add(1);
  });

  if (me == 0) *ring_sum = 0, *locked_sum = 0;
  everyone.arrive_and_wait();

  // 1. The ring: rank 0 starts each lap; everyone else waits for the token, adds, passes it on.
  for (int lap = 0; lap < k_laps; ++lap) {
    if (me != 0 || lap > 0) mdsm::wait_until([&] { return tokens.load() > (me == 0 ? lap - 1 : lap); });
    *ring_sum += me;
    if (n > 1) mdsm::send(( me + 1) % n, token, {}, mdsm::annotation::release);
  }
  if (me == 0 && n > 1) mdsm::wait_until([&] { return tokens.load() == k_laps; });

  // 2. The lock.
  for (int i = 0; i < k_increments; ++i) {
    std::lock_guard<mdsm::mutex> hold(lock);
    ++*locked_sum;
  }

  // 3. Check.
  everyone.arrive_and_wait();
  const long want_ring = static_cast<long>(k_laps) * n * (n - 1) / 2, want_locked = static_cast<long>(k_increments) * n;
  const bool ok = *ring_sum == want_ring && *locked_sum == want_locked;
  std::printf("rank %d: ring sum %ld (want %ld), locked sum %ld (want %ld): %s\n", me, *ring_sum, want_ring,
              *locked_sum, want_locked, ok ? "ok" : "WRONG");
  std::fflush(stdout);
  everyone.arrive_and_wait();
  mdsm::finalize();
  return ok ? 0 : 1;
}
