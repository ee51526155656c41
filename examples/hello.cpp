// hello.cpp: the smallest hybrid program. Rank 0 writes a greeting into coherent memory and
// sends a RELEASE message that carries only a pointer; every other rank accepts it (an acquire)
// and reads the greeting through the pointer.
//
//   mdsmrun -n 2 ./hello_cpp
#include <mdsm/mdsm.hpp>

#include <atomic>
#include <cstdio>
#include <cstring>

int main(int argc, char** argv) {
  mdsm::init(&argc, &argv);
  const int me = mdsm::rank(), n = mdsm::size();

  std::atomic<const char*> greeting{nullptr};
  // Handlers run in mdsm's delivery context: accept the acquire, keep the pointer, do not read it
  // here (handlers must not touch coherent memory).
  const mdsm::handler_id hello = mdsm::register_handler("hello", [&](mdsm::message& m) {
    m.accept();
    greeting = m.as<const char*>();
  });

  if (me == 0) {
    char* text = mdsm::alloc_array<char>(64);
    std::snprintf(text, 64, "hello from rank 0 of %d", n);
    for (int r = 1; r < n; ++r) mdsm::send_value(r, hello, static_cast<const char*>(text), mdsm::annotation::release);
  } else {
    mdsm::wait_until([&] { return greeting.load() != nullptr; });
    std::printf("rank %d read: %s\n", me, greeting.load());
  }
  mdsm::finalize();
  return 0;
}
