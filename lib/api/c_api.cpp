// The C API: each function calls the C++ API and turns mdsm::error into a status code (and the
// thread's last-error message). Nothing may throw across this boundary.
#include "api/c_guard.hpp"
#include "api/runtime.hpp"
#include "common/check.hpp"
#include "stats/counters.hpp"

#include <mdsm/mdsm.h>
#include <mdsm/mdsm.hpp>

#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace mdsm::capi {
std::string& last_error() {
  thread_local std::string message;
  return message;
}
}  // namespace mdsm::capi

namespace {

using mdsm::capi::guarded;
using mdsm::capi::null_arg;

mdsm::options to_options(const mdsm_options* o) {
  mdsm::options opts;
  if (o == nullptr) return opts;
  opts.coherent_size = o->coherent_size;
  opts.unit_pages = o->unit_pages;
  opts.coherent_address = o->coherent_address;
  opts.strict_address = o->strict_address != 0;
  opts.progress_thread = o->progress_thread != 0;
  opts.wait_deadline_s = o->wait_deadline_s;
  opts.noncoherent_size = o->noncoherent_size;
  return opts;
}

mdsm::message& msg(mdsm_message* m) { return *reinterpret_cast<mdsm::message*>(m); }
const mdsm::message& msg(const mdsm_message* m) { return *reinterpret_cast<const mdsm::message*>(m); }
mdsm::stored_message& st(mdsm_stored* s) { return *reinterpret_cast<mdsm::stored_message*>(s); }
const mdsm::stored_message& st(const mdsm_stored* s) { return *reinterpret_cast<const mdsm::stored_message*>(s); }

}  // namespace

extern "C" {

void mdsm_options_init(mdsm_options* o) {
  if (o == nullptr) return;
  std::memset(o, 0, sizeof *o);
  o->progress_thread = 1;
}

mdsm_status mdsm_init(int* argc, char*** argv, const mdsm_options* opts) {
  return guarded([&] { mdsm::init(argc, argv, to_options(opts)); });
}

mdsm_status mdsm_init_comm(MPI_Comm comm, const mdsm_options* opts) {
  return guarded([&] { mdsm::init(comm, to_options(opts)); });
}

mdsm_status mdsm_finalize(void) { return guarded([] { mdsm::finalize(); }); }
int mdsm_initialized(void) { return mdsm::initialized() ? 1 : 0; }

mdsm_status mdsm_rank(int* rank) {
  if (rank == nullptr) return null_arg("rank");
  return guarded([&] { *rank = mdsm::rank(); });
}

mdsm_status mdsm_size(int* size) {
  if (size == nullptr) return null_arg("size");
  return guarded([&] { *size = mdsm::size(); });
}

const char* mdsm_last_error(void) { return mdsm::capi::last_error().c_str(); }

mdsm_status mdsm_register_handler(const char* name, mdsm_handler_fn fn, void* context, mdsm_handler_id* id) {
  if (name == nullptr) return null_arg("name");
  if (fn == nullptr) return null_arg("fn");
  if (id == nullptr) return null_arg("id");
  return guarded([&] {
    *id = mdsm::register_handler(name, [fn, context](mdsm::message& m) {
      fn(reinterpret_cast<mdsm_message*>(&m), context);
    });
  });
}

mdsm_status mdsm_send(int dest, mdsm_handler_id handler, const void* payload, size_t len, mdsm_annotation a) {
  if (payload == nullptr && len != 0) return null_arg("payload (with a nonzero length)");
  // A C caller may pass any int: loading it as the enum would be undefined behaviour in C++, so
  // its bytes are read as an int and checked before they become an annotation.
  int raw = 0;
  static_assert(sizeof a == sizeof raw);
  std::memcpy(&raw, &a, sizeof raw);
  return guarded([&] {
    if (raw < MDSM_NONE || raw > MDSM_RELEASE_NT)
      throw mdsm::error(MDSM_ERR_INVALID_ANNOTATION, "mdsm_send: annotation " + std::to_string(raw) +
                                                         " is not MDSM_NONE, MDSM_REQUEST, MDSM_RELEASE or MDSM_RELEASE_NT");
    mdsm::send(dest, handler, std::span<const std::byte>(static_cast<const std::byte*>(payload), len),
               static_cast<mdsm::annotation>(raw));
  });
}

namespace {
// The C form of mdsm::unthrottled_sends: one scope object per thread, held while the nesting
// depth is above zero.
thread_local unsigned t_unthrottled_depth = 0;
thread_local std::optional<mdsm::unthrottled_sends> t_unthrottled;
}  // namespace

mdsm_status mdsm_unthrottled_begin(void) {
  if (t_unthrottled_depth++ == 0) t_unthrottled.emplace();
  return MDSM_SUCCESS;
}

mdsm_status mdsm_unthrottled_end(void) {
  if (t_unthrottled_depth == 0) {
    mdsm::capi::last_error() = "mdsm_unthrottled_end: no mdsm_unthrottled_begin of this thread to end";
    return MDSM_ERR_INVALID_ARGUMENT;
  }
  if (--t_unthrottled_depth == 0) t_unthrottled.reset();
  return MDSM_SUCCESS;
}

int mdsm_message_source(const mdsm_message* m) { return m ? msg(m).source() : -1; }
int mdsm_message_origin(const mdsm_message* m) { return m ? msg(m).origin() : -1; }
mdsm_annotation mdsm_message_annotation(const mdsm_message* m) {
  return m ? static_cast<mdsm_annotation>(msg(m).annot()) : MDSM_NONE;
}

const void* mdsm_message_payload(const mdsm_message* m, size_t* len) {
  if (m == nullptr) return nullptr;
  auto p = msg(m).payload();
  if (len) *len = p.size();
  return p.data();
}

mdsm_status mdsm_accept(mdsm_message* m) {
  if (m == nullptr) return null_arg("msg");
  return guarded([&] { msg(m).accept(); });
}

mdsm_status mdsm_forward(mdsm_message* m, int dest) {
  if (m == nullptr) return null_arg("msg");
  return guarded([&] { msg(m).forward(dest); });
}

mdsm_status mdsm_store(mdsm_message* m, mdsm_stored** out) {
  if (m == nullptr) return null_arg("msg");
  if (out == nullptr) return null_arg("stored");
  return guarded([&] {
    auto* s = new mdsm::stored_message(msg(m).store());
    *out = reinterpret_cast<mdsm_stored*>(s);
  });
}

mdsm_status mdsm_stored_accept(mdsm_stored* s) {
  if (s == nullptr) return null_arg("stored");
  return guarded([&] { st(s).accept(); });
}

mdsm_status mdsm_stored_forward(mdsm_stored* s, int dest) {
  if (s == nullptr) return null_arg("stored");
  return guarded([&] { st(s).forward(dest); });
}

mdsm_status mdsm_stored_discard(mdsm_stored* s) {
  if (s == nullptr) return null_arg("stored");
  return guarded([&] { st(s).discard(); });
}

int mdsm_stored_origin(const mdsm_stored* s) { return s ? st(s).origin() : -1; }
mdsm_annotation mdsm_stored_annotation(const mdsm_stored* s) {
  return s ? static_cast<mdsm_annotation>(st(s).annot()) : MDSM_NONE;
}

const void* mdsm_stored_payload(const mdsm_stored* s, size_t* len) {
  if (s == nullptr) return nullptr;
  auto p = st(s).payload();
  if (len) *len = p.size();
  return p.data();
}

void mdsm_stored_free(mdsm_stored* s) { delete reinterpret_cast<mdsm::stored_message*>(s); }

mdsm_status mdsm_poll(void) { return guarded([] { mdsm::poll(); }); }

mdsm_status mdsm_wait_until(int (*done)(void*), void* context) {
  if (done == nullptr) return null_arg("done");
  return guarded([&] { mdsm::wait_until([&] { return done(context) != 0; }); });
}

mdsm_status mdsm_set_upcalls(const mdsm_upcalls* u) {
  if (u == nullptr) return null_arg("upcalls");
  return guarded([&] {
    mdsm::detail::set_upcalls_from("mdsm_set_upcalls", mdsm::detail::upcall_trampolines<&mdsm_upcalls::context>(*u));
  });
}

int mdsm_in_handler(void) { return mdsm::in_handler() ? 1 : 0; }
mdsm_status mdsm_pause_progress_thread(void) { return guarded([] { mdsm::pause_progress_thread(); }); }
mdsm_status mdsm_resume_progress_thread(void) { return guarded([] { mdsm::resume_progress_thread(); }); }

mdsm_status mdsm_alloc(size_t bytes, void** ptr) {
  if (ptr == nullptr) return null_arg("ptr");
  return guarded([&] { *ptr = mdsm::alloc(bytes); });
}

mdsm_status mdsm_alloc_collective(size_t bytes, void** ptr) {
  if (ptr == nullptr) return null_arg("ptr");
  return guarded([&] { *ptr = mdsm::alloc_collective(bytes); });
}

mdsm_status mdsm_free(void* ptr) {
  return guarded([&] { mdsm::free(ptr); });
}

mdsm_status mdsm_free_collective(void* ptr) {
  return guarded([&] { mdsm::free_collective(ptr); });
}

int mdsm_is_coherent(const void* ptr) { return mdsm::is_coherent(ptr) ? 1 : 0; }

mdsm_status mdsm_make_coherent(void* addr, size_t bytes) {
  return guarded([&] { mdsm::make_coherent(addr, bytes); });
}

mdsm_status mdsm_gc(void) { return guarded([] { mdsm::gc(); }); }

mdsm_status mdsm_gc_threshold(uint64_t* bytes) {
  if (bytes == nullptr) return null_arg("bytes");
  return guarded([&] { *bytes = mdsm::gc_threshold(); });
}

mdsm_status mdsm_set_gc_threshold(uint64_t bytes) { return guarded([&] { mdsm::set_gc_threshold(bytes); }); }

size_t mdsm_stat_count(void) { return mdsm::stats::k_counters; }

const char* mdsm_stat_name(size_t index) {
  if (index >= mdsm::stats::k_counters) return nullptr;
  return mdsm::stats::name(static_cast<mdsm::stats::counter>(index)).data();
}

mdsm_status mdsm_stat(const char* name, uint64_t* value) {
  if (name == nullptr) return null_arg("name");
  if (value == nullptr) return null_arg("value");
  return guarded([&] { *value = mdsm::statistic(name); });
}

mdsm_status mdsm_stats_reset(void) { return guarded([] { mdsm::statistics_reset(); }); }
mdsm_status mdsm_set_stats_timing(int on) { return guarded([&] { mdsm::set_statistics_timing(on != 0); }); }

}  // extern "C"
