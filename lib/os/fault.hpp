// The fault signal seam. mdsm installs one SIGSEGV/SIGBUS handler; it passes each fault to the
// registered callback, and chains every fault the callback does not claim to the handler that
// was installed before (or to the default action), so a user's own segfault behaves exactly as
// it would without mdsm.
#pragma once

namespace mdsm::os {

struct fault_info {
  void* addr;        // faulting data address
  bool is_write;     // the access was a write (valid only if write_known)
  bool write_known;  // the platform told us the access type
};

// Returns true if the fault was resolved (the instruction is retried), false to chain it.
// Runs in signal context on the faulting thread; the fault is synchronous (caused by that
// thread's own access), so the callback may take locks that the faulting code cannot hold.
using fault_callback = bool (*)(const fault_info&);

// Pre: called once, from one thread, before any fault can occur in memory the callback owns.
void install_fault_handler(fault_callback cb);
// Restores the previous handlers.
void remove_fault_handler();

}  // namespace mdsm::os
