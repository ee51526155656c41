// The C API of the non-coherent region. A C request is an id into a table of nc_request objects;
// an id is never reused, so a finished, freed or made-up one is MDSM_ERR_INVALID_HANDLE.
#include "api/c_guard.hpp"

#include <mdsm/mdsm.h>
#include <mdsm/mdsm.hpp>

#include <mutex>
#include <unordered_map>

namespace {

using mdsm::capi::guarded;
using mdsm::capi::null_arg;

// Guarded by g_mutex, which is never held across a wait or a test (both may run handlers, which
// may use requests too).
std::mutex g_mutex;
std::unordered_map<std::uint64_t, mdsm::nc_request> g_requests;
std::uint64_t g_next_id = 1;

mdsm_request keep(mdsm::nc_request r) {
  std::lock_guard lk(g_mutex);
  const std::uint64_t id = g_next_id++;
  g_requests.emplace(id, std::move(r));
  return mdsm_request{id};
}

// Takes the request out of the table (put it back with `restore` if it is not finished).
mdsm::nc_request take(const mdsm_request* req, const char* what) {
  std::lock_guard lk(g_mutex);
  auto it = req->id == 0 ? g_requests.end() : g_requests.find(req->id);
  if (it == g_requests.end())
    throw mdsm::error(MDSM_ERR_INVALID_HANDLE, std::string("mdsm: ") + what + ": request " + std::to_string(req->id) +
                                                   (req->id == 0 ? " is the null request"
                                                                 : " is unknown (completed, freed, or never issued)"));
  mdsm::nc_request r = std::move(it->second);
  g_requests.erase(it);
  return r;
}

void restore(const mdsm_request* req, mdsm::nc_request r) {
  std::lock_guard lk(g_mutex);
  g_requests.emplace(req->id, std::move(r));
}

// Starts an operation and stores its request in *req.
template <class Start>
mdsm_status start(mdsm_request* req, Start&& s) {
  if (req == nullptr) return null_arg("req");
  return guarded([&] { *req = keep(s()); });
}

}  // namespace

extern "C" {

mdsm_status mdsm_nc_alloc(size_t bytes, void** ptr) {
  if (ptr == nullptr) return null_arg("ptr");
  return guarded([&] { *ptr = mdsm::nc_alloc(bytes); });
}

mdsm_status mdsm_nc_alloc_collective(size_t bytes, void** ptr) {
  if (ptr == nullptr) return null_arg("ptr");
  return guarded([&] { *ptr = mdsm::nc_alloc_collective(bytes); });
}

mdsm_status mdsm_nc_free(void* ptr) { return guarded([&] { mdsm::nc_free(ptr); }); }
mdsm_status mdsm_nc_free_collective(void* ptr) { return guarded([&] { mdsm::nc_free_collective(ptr); }); }
int mdsm_is_noncoherent(const void* ptr) { return mdsm::is_noncoherent(ptr) ? 1 : 0; }

mdsm_status mdsm_get(void* dst, int rank, const void* src, size_t bytes) {
  return guarded([&] { mdsm::get(dst, rank, src, bytes); });
}

mdsm_status mdsm_put(int rank, void* dst, const void* src, size_t bytes) {
  return guarded([&] { mdsm::put(rank, dst, src, bytes); });
}

mdsm_status mdsm_get_nb(void* dst, int rank, const void* src, size_t bytes, mdsm_request* req) {
  return start(req, [&] { return mdsm::get_nb(dst, rank, src, bytes); });
}

mdsm_status mdsm_put_nb(int rank, void* dst, const void* src, size_t bytes, mdsm_request* req) {
  return start(req, [&] { return mdsm::put_nb(rank, dst, src, bytes); });
}

mdsm_status mdsm_fetch_add(int rank, uint64_t* word, uint64_t value, uint64_t* old) {
  return guarded([&] {
    const std::uint64_t v = mdsm::fetch_add(rank, word, value);
    if (old) *old = v;
  });
}

mdsm_status mdsm_compare_swap(int rank, uint64_t* word, uint64_t expected, uint64_t desired, uint64_t* old) {
  return guarded([&] {
    const std::uint64_t v = mdsm::compare_swap(rank, word, expected, desired);
    if (old) *old = v;
  });
}

mdsm_status mdsm_fetch_add_nb(int rank, uint64_t* word, uint64_t value, mdsm_request* req) {
  return start(req, [&] { return mdsm::fetch_add_nb(rank, word, value); });
}

mdsm_status mdsm_compare_swap_nb(int rank, uint64_t* word, uint64_t expected, uint64_t desired, mdsm_request* req) {
  return start(req, [&] { return mdsm::compare_swap_nb(rank, word, expected, desired); });
}

mdsm_status mdsm_request_wait(mdsm_request* req, uint64_t* value) {
  if (req == nullptr) return null_arg("req");
  return guarded([&] {
    mdsm::nc_request r = take(req, "mdsm_request_wait");
    try {
      r.wait();
    } catch (...) {
      restore(req, std::move(r));  // still the caller's to wait for or free
      throw;
    }
    if (value) *value = r.value();
    req->id = 0;
  });
}

mdsm_status mdsm_request_test(mdsm_request* req, int* done, uint64_t* value) {
  if (req == nullptr) return null_arg("req");
  if (done == nullptr) return null_arg("done");
  return guarded([&] {
    *done = 0;
    mdsm::nc_request r = take(req, "mdsm_request_test");
    bool finished = false;
    try {
      finished = r.test();
    } catch (...) {
      restore(req, std::move(r));
      throw;
    }
    if (!finished) return restore(req, std::move(r));
    if (value) *value = r.value();
    req->id = 0;
    *done = 1;
  });
}

mdsm_status mdsm_request_free(mdsm_request* req) {
  if (req == nullptr) return null_arg("req");
  return guarded([&] {
    take(req, "mdsm_request_free");
    req->id = 0;
  });
}

}  // extern "C"
