// Misuse that needs a process of its own. Modes:
//   thread-level   MPI initialized without MPI_THREAD_MULTIPLE: mdsm::init must refuse with
//                  MDSM_ERR_THREAD_LEVEL (exit 0 if it did, 1 otherwise)
//   handler-touch  a message handler reads coherent memory: mdsm stops the process with a
//                  message naming the handler (check_misuse.sh checks the message)
#include <mdsm/mdsm.hpp>

#include <mpi.h>

#include <atomic>
#include <cstdio>
#include <cstring>

int main(int argc, char** argv) {
  const char* mode = argc > 1 ? argv[1] : "";
  if (std::strcmp(mode, "thread-level") == 0) {
    int provided = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_SINGLE, &provided);
    int code = 1;
    try {
      mdsm::init(MPI_COMM_WORLD);
      std::fprintf(stderr, "mdsm::init accepted MPI thread level %d\n", provided);
      mdsm::finalize();
    } catch (const mdsm::error& e) {
      std::printf("refused: %s\n", e.what());
      code = e.code() == MDSM_ERR_THREAD_LEVEL ? 0 : 1;
    }
    MPI_Finalize();
    return code;
  }
  if (std::strcmp(mode, "handler-touch") == 0) {
    mdsm::init(&argc, &argv);
    int* shared = mdsm::alloc_collective_array<int>(1024);
    std::atomic<bool> done{false};
    auto h = mdsm::register_handler("reads.coherent.memory", [&](mdsm::message& m) {
      m.accept();
      std::printf("handler read %d\n", *shared);  // not allowed: must stop the process
      done = true;
    });
    if (mdsm::rank() == 0) {
      *shared = 1;
      mdsm::send(1, h, {}, mdsm::annotation::release);  // invalidates rank 1's copy
    }
    if (mdsm::rank() == 1) mdsm::wait_until([&] { return done.load(); });
    mdsm::finalize();
    return 0;
  }
  if (std::strcmp(mode, "reinit-after-finalize") == 0) {
    mdsm::init(&argc, &argv);  // starts MPI, and its finalize ends it
    mdsm::finalize();
    try {
      mdsm::init(&argc, &argv);
      std::fprintf(stderr, "mdsm::init succeeded after MPI was finalized\n");
      return 1;
    } catch (const mdsm::error& e) {
      std::printf("refused: %s\n", e.what());
      return e.code() == MDSM_ERR_NOT_INITIALIZED ? 0 : 1;
    }
  }
  std::fprintf(stderr, "usage: %s thread-level|handler-touch|reinit-after-finalize\n", argv[0]);
  return 2;
}
