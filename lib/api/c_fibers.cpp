// The C API of mdsm's fibers (mdsm.h): a handle is the fiber's control-block address; remote
// spawn wraps a C task in a task_fn and a remote_result in a struct that keeps the result after
// the wait (a buffer too small for it gets a second call).
#include "api/c_guard.hpp"

#include "common/check.hpp"

#include <mdsm/fibers.hpp>
#include <mdsm/mdsm.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

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

struct mdsm_remote_result {
  mdsm::fibers::remote_result r;
  std::optional<std::vector<std::byte>> got;  // taken from r by the first get
};

mdsm_status mdsm_task_register(const char* name, mdsm_task_fn fn, void* context, mdsm_task* task) {
  if (name == nullptr) return null_arg("name");
  if (fn == nullptr) return null_arg("fn");
  if (task == nullptr) return null_arg("task");
  return guarded([&] {
    const std::string task_name = name;
    *task = mdsm::fibers::register_task(name, [fn, context, task_name](std::span<const std::byte> args) {
      void* out = nullptr;
      std::size_t len = 0;
      const int rc = fn(args.data(), args.size(), &out, &len, context);
      std::vector<std::byte> result;
      if (out != nullptr) result.assign(static_cast<const std::byte*>(out), static_cast<const std::byte*>(out) + len);
      std::free(out);
      if (rc != 0) mdsm::detail::fail(MDSM_ERR_TASK_FAILED, "C task '", task_name, "' returned ", rc);
      if (out == nullptr && len != 0)
        mdsm::detail::fail(MDSM_ERR_TASK_FAILED, "C task '", task_name, "' set a result of ", len,
                           " bytes but no buffer");
      return result;
    });
  });
}

mdsm_status mdsm_spawn_remote(int rank, mdsm_task task, const void* args, size_t args_len, mdsm_annotation annotation,
                              mdsm_remote_result** result) {
  if (result == nullptr) return null_arg("result");
  if (args == nullptr && args_len != 0) return null_arg("args");
  return guarded([&] {
    const std::span<const std::byte> a(static_cast<const std::byte*>(args), args == nullptr ? 0 : args_len);
    auto r = std::make_unique<mdsm_remote_result>();
    r->r = mdsm::fibers::spawn_remote(rank, task, a, static_cast<mdsm::annotation>(annotation));
    *result = r.release();
  });
}

mdsm_status mdsm_remote_result_ready(const mdsm_remote_result* result, int* ready) {
  if (result == nullptr) return null_arg("result");
  if (ready == nullptr) return null_arg("ready");
  return guarded([&] { *ready = result->got.has_value() || result->r.ready() ? 1 : 0; });
}

mdsm_status mdsm_remote_result_get(mdsm_remote_result* result, void* buf, size_t cap, size_t* len) {
  if (result == nullptr) return null_arg("result");
  if (len == nullptr) return null_arg("len");
  if (buf == nullptr && cap != 0) return null_arg("buf");
  return guarded([&] {
    if (!result->got) result->got = result->r.get();
    const std::vector<std::byte>& v = *result->got;
    *len = v.size();
    if (v.size() > cap)
      mdsm::detail::fail(MDSM_ERR_INVALID_ARGUMENT, "mdsm_remote_result_get: the result has ", v.size(),
                         " bytes, the buffer ", cap, "; it is kept for the next call");
    if (!v.empty()) std::memcpy(buf, v.data(), v.size());
  });
}

void mdsm_remote_result_free(mdsm_remote_result* result) { delete result; }
