#include "os/fault.hpp"

#include "common/check.hpp"

#include <atomic>
#include <csignal>
#include <cstring>
#include <ucontext.h>

namespace mdsm::os {

namespace {

std::atomic<fault_callback> g_callback{nullptr};
struct sigaction g_previous_segv;
struct sigaction g_previous_bus;
bool g_installed = false;

void chain(int sig, siginfo_t* info, void* context) {
  const struct sigaction& prev = sig == SIGSEGV ? g_previous_segv : g_previous_bus;
  if (prev.sa_flags & SA_SIGINFO) {
    if (prev.sa_sigaction != nullptr) {
      prev.sa_sigaction(sig, info, context);
      return;
    }
  } else if (prev.sa_handler != SIG_DFL && prev.sa_handler != SIG_IGN) {
    prev.sa_handler(sig);
    return;
  }
  // Default action: restore it and return; the faulting instruction runs again and the kernel
  // delivers the signal with its default disposition (core dump), exactly as without mdsm.
  struct sigaction dfl;
  std::memset(&dfl, 0, sizeof dfl);
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  sigaction(sig, &dfl, nullptr);
}

void on_fault(int sig, siginfo_t* info, void* context) {
  fault_info fi{info->si_addr, false, false};
#if defined(__x86_64__)
  auto* uc = static_cast<ucontext_t*>(context);
  fi.is_write = (uc->uc_mcontext.gregs[REG_ERR] & 0x2) != 0;
  fi.write_known = true;
#endif
  fault_callback cb = g_callback.load(std::memory_order_acquire);
  if (cb != nullptr && cb(fi)) return;
  chain(sig, info, context);
}

}  // namespace

void install_fault_handler(fault_callback cb) {
  MDSM_ASSERT(!g_installed, "fault handler installed twice");
  g_callback.store(cb, std::memory_order_release);
  struct sigaction sa;
  std::memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = on_fault;
  // SA_NODEFER: a fault inside the fault path (e.g. a message handler touching coherent memory
  // while the faulting thread drives progress) re-enters on_fault and is reported instead of
  // being turned into an unconditional kill by the kernel.
  sa.sa_flags = SA_SIGINFO | SA_NODEFER | SA_RESTART;
  sigemptyset(&sa.sa_mask);
  if (sigaction(SIGSEGV, &sa, &g_previous_segv) != 0 || sigaction(SIGBUS, &sa, &g_previous_bus) != 0)
    detail::fail(MDSM_ERR_OS, "cannot install the SIGSEGV handler");
  g_installed = true;
}

void remove_fault_handler() {
  if (!g_installed) return;
  sigaction(SIGSEGV, &g_previous_segv, nullptr);
  sigaction(SIGBUS, &g_previous_bus, nullptr);
  g_callback.store(nullptr, std::memory_order_release);
  g_installed = false;
}

}  // namespace mdsm::os
