// The C API of mdsm's fibers (mdsm.h): a handle is the fiber's control-block address.
#include "api/c_guard.hpp"

#include <mdsm/fibers.hpp>
#include <mdsm/mdsm.h>

using mdsm::capi::guarded;
using mdsm::capi::null_arg;

mdsm_status mdsm_fiber_spawn(void (*fn)(void*), void* arg, size_t stack_bytes, mdsm_fiber* fiber) {
  if (fn == nullptr) return null_arg("fn");
  if (fiber == nullptr) return null_arg("fiber");
  return guarded([&] {
    const mdsm::fibers::fiber f = mdsm::fibers::spawn([fn, arg] { fn(arg); }, {.stack_bytes = stack_bytes});
    *fiber = static_cast<mdsm_fiber>(const_cast<void*>(f.address()));
  });
}

mdsm_status mdsm_fiber_yield(void) { return guarded([] { mdsm::fibers::yield(); }); }

mdsm_status mdsm_fiber_join(mdsm_fiber fiber) {
  return guarded([&] { mdsm::fibers::join(mdsm::fibers::fiber::from_address(fiber)); });
}

mdsm_status mdsm_fibers_run(void) { return guarded([] { mdsm::fibers::run(); }); }

int mdsm_in_fiber(void) { return mdsm::fibers::in_fiber() ? 1 : 0; }
