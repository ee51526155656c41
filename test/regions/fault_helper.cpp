// A program that touches coherent memory it must not touch, for the script test that checks
// how mdsm reports it (tools: test/regions/expect_fault.sh). The process is meant to die of
// SIGSEGV after mdsm printed what happened.
//
//   fault_helper unallocated   reads the first unit of this rank's arena without allocating it
//   fault_helper freed         allocates a page, frees it, then writes to it
#include <mdsm/mdsm.hpp>

#include <cstdio>
#include <cstring>

int main(int argc, char** argv) {
  mdsm::init(&argc, &argv);
  const char* mode = argc > 1 ? argv[1] : "unallocated";
  volatile int* p = nullptr;
  if (std::strcmp(mode, "unallocated") == 0) {
    // Allocate and free once to learn where this rank's arena is, without keeping anything.
    auto* probe = static_cast<int*>(mdsm::alloc(64));
    mdsm::free(probe);
    p = probe + 4096;  // four 4 KiB units further on: never allocated
    std::fprintf(stderr, "fault_helper: reading unallocated %p\n", static_cast<void*>(const_cast<int*>(p)));
    return *p;
  }
  if (std::strcmp(mode, "freed") == 0) {
    auto* q = static_cast<int*>(mdsm::alloc(4096));
    q[0] = 1;
    mdsm::free(q);
    p = q;
    std::fprintf(stderr, "fault_helper: writing freed %p\n", static_cast<void*>(q));
    *p = 2;
    return 0;
  }
  std::fprintf(stderr, "fault_helper: unknown mode %s\n", mode);
  mdsm::finalize();
  return 2;
}
