// A rank that stops (SIGSTOP: as a livelock or a host lost without its sockets closing looks to
// the others) while the others wait on it. Run by check_deadline.sh; modes:
//   barrier  the last rank stops before a barrier the others enter
//   lock     the last rank stops holding a mutex rank 0 then locks
//   page     the last rank stops after writing coherent memory rank 0 then reads
//   handler  rank 0 registers a handler no other rank registers (a collective call made by one
//            rank only: before, Open MPI aborted with MPI_ERR_TRUNCATE or the job hung unnamed)
//   slow     the last rank stops for SLOW_MS (default 2500) ms and is resumed by rank 0; the job
//            must finish normally (a slow rank is not a failed one)
// In the first three the failure detector must end the job (MDSM_WAIT_DEADLINE_S, set by the
// script) with a report naming the wait; the program prints "NOT DETECTED" if a wait returns.
#include <mdsm/mdsm.hpp>

#include <mpi.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <unistd.h>
#include <vector>

namespace {
void world_barrier() {
  MPI_Request req;
  MPI_Ibarrier(MPI_COMM_WORLD, &req);
  mdsm::wait_until([&] {
    int done = 0;
    MPI_Test(&req, &done, MPI_STATUS_IGNORE);
    return done != 0;
  });
}
// Stops this process. When mpirun ends the job it continues stopped processes before killing
// them: this one then must not go on and answer the wait that was detected.
[[noreturn]] void stop_for_good() {
  raise(SIGSTOP);
  for (;;) pause();
}
}  // namespace

int main(int argc, char** argv) {
  const char* mode = argc > 1 ? argv[1] : "";
  mdsm::init(&argc, &argv);
  const int me = mdsm::rank(), n = mdsm::size(), last = n - 1;
  std::vector<pid_t> pids(static_cast<std::size_t>(n));
  const pid_t mine = getpid();
  MPI_Allgather(&mine, sizeof mine, MPI_BYTE, pids.data(), sizeof mine, MPI_BYTE, MPI_COMM_WORLD);
  mdsm::barrier b;
  mdsm::mutex m(0);
  auto* data = mdsm::alloc_collective_array<long>(4096);
  b.arrive_and_wait();

  if (std::strcmp(mode, "barrier") == 0) {
    if (me == last) stop_for_good();
    b.arrive_and_wait();
    std::printf("NOT DETECTED: rank %d left the barrier\n", me);
  } else if (std::strcmp(mode, "lock") == 0) {
    if (me == last) {
      m.lock();
      world_barrier();
      stop_for_good();
    } else {
      world_barrier();
      if (me == 0) {
        m.lock();
        std::printf("NOT DETECTED: rank 0 got the lock\n");
      }
      world_barrier();
    }
  } else if (std::strcmp(mode, "page") == 0) {
    if (me == last) data[1000] = 42;  // unit of rank last's writes only
    b.arrive_and_wait();
    if (me == last) stop_for_good();
    // Read once the writer has surely stopped (it could serve the read while leaving the barrier).
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    if (me == 0) std::printf("NOT DETECTED: rank 0 read %ld\n", data[1000]);
    world_barrier();
  } else if (std::strcmp(mode, "handler") == 0) {
    if (me == 0) mdsm::register_handler("only.on.rank.zero", [](mdsm::message&) {});
    mdsm::barrier other;  // the other ranks' next collective step
    std::printf("NOT DETECTED: rank %d went on\n", me);
  } else if (std::strcmp(mode, "slow") == 0) {
    const char* ms = std::getenv("SLOW_MS");
    const int slow_ms = ms ? std::atoi(ms) : 2500;
    if (me == last) data[1000] = 7;
    std::thread resumer;
    if (me == 0)
      resumer = std::thread([&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(slow_ms));
        kill(pids[static_cast<std::size_t>(last)], SIGCONT);
      });
    if (me == last) raise(SIGSTOP);
    b.arrive_and_wait();  // waits for the stopped rank
    long v = data[1000];
    if (resumer.joinable()) resumer.join();
    b.arrive_and_wait();
    if (v != 7) {
      std::printf("rank %d read %ld, not 7\n", me, v);
      return 1;
    }
    if (me == 0) std::printf("slow rank tolerated\n");
  } else {
    std::fprintf(stderr, "usage: stopped_rank barrier|lock|page|handler|slow\n");
    return 2;
  }
  mdsm::finalize();
  return 0;
}
