// The runtime: one per process between init and finalize, owning every layer in dependency
// order (members are destroyed in reverse).
#pragma once

#include "coherence/engine.hpp"
#include "common/deferred.hpp"
#include "messages/endpoint.hpp"
#include "net/progress.hpp"
#include "net/transport.hpp"
#include "regions/coherent_allocator.hpp"
#include "regions/noncoherent_region.hpp"
#include "regions/one_sided.hpp"
#include "sync/services.hpp"

#include <mdsm/mdsm.hpp>

#include <atomic>
#include <functional>
#include <memory>
#include <vector>
#include <string>

namespace mdsm::detail {

// MDSM_GC_THRESHOLD's default, and the least the default threshold is.
inline constexpr std::uint64_t k_default_gc_threshold = std::uint64_t{64} << 20;

struct runtime {
  bool owns_mpi = false;
  std::string stats_spec;
  // The garbage-collection threshold (bytes of consistency metadata; 0: never), as set by
  // MDSM_GC_THRESHOLD or set_gc_threshold; until then (gc_threshold_set false) the default,
  // which grows with the memory allocated collectively (update_gc_threshold).
  std::atomic<std::uint64_t> gc_threshold{0};
  std::atomic<bool> gc_threshold_set{false};
  // The threshold in force, the same on every rank (collective allocations are); recomputed, and
  // handed to the engine, whenever one of its inputs changes (barriers read it every time).
  std::atomic<std::uint64_t> gc_threshold_effective{0};
  void update_gc_threshold();
  std::unique_ptr<net::transport> transport;
  std::unique_ptr<net::progress> progress;
  std::unique_ptr<coherence::engine> engine;
  std::unique_ptr<messages::endpoint> endpoint;
  std::unique_ptr<regions::coherent_allocator> allocator;
  std::unique_ptr<regions::noncoherent_region> noncoherent;
  std::unique_ptr<regions::one_sided> one_sided;  // get, put, atomics on `noncoherent`
  std::unique_ptr<sync::services> sync;  // built last, over the public API
  // mpi_ext's side channel: a duplicate of the communicator mdsm was initialized over (ranks are
  // mdsm ranks), carrying the consistency information of annotated MPI messages.
  MPI_Comm mpi_ext_comm = MPI_COMM_NULL;
  // The communicator mdsm was initialized over (the user's handle, not a duplicate).
  MPI_Comm user_comm = MPI_COMM_NULL;
  // Counts init calls in this process: tells state kept across sessions (mpi_ext's) it is stale.
  std::uint64_t session = 0;
  // Run by finalize once no frame is in flight, before the layers go (layers above the runtime,
  // e.g. lib/threads, drop what they keep of this session: stored messages among it).
  std::vector<std::function<void()>> at_finalize;
  ~runtime();
};

// The runtime between init and finalize, else null. Read through rt() (or rt_or_null()).
extern std::unique_ptr<runtime> g_runtime;
// rt() for short paths that must not throw: the runtime, or nullptr where rt() would throw (not
// initialized, or a deferred error to report on this thread; the caller's general path reports it).
inline runtime* rt_or_null() noexcept {
  runtime* r = g_runtime.get();
  return r != nullptr && !deferred_pending_here() ? r : nullptr;
}

// The runtime; throws MDSM_ERR_NOT_INITIALIZED outside init..finalize. Also rethrows a deferred
// error (every public entry point goes through here).
runtime& rt();
// Like rt() for calls that must not happen inside a handler (they wait).
runtime& rt_blocking(const char* what);
// set_upcalls and mdsm_set_upcalls: `u` holds trampolines into the caller's copy of its set (or
// nothing); refuses a handler context and a partial set, naming `api`.
void set_upcalls_from(const char* api, net::upcalls u);

// The trampolines from net::upcalls into a public upcall set (mdsm::upcalls, or C's mdsm_upcalls:
// the same three functions over its own token type, its context in member `Ctx`), reading a copy
// of the set that the result keeps. A set with no function gives empty upcalls (none).
template <class F>
struct upcall_token;
template <class Token>
struct upcall_token<void (*)(Token*, void*, void*)> {
  using type = Token;
};
template <auto Ctx, class Set>
net::upcalls upcall_trampolines(const Set& u) {
  using token = typename upcall_token<decltype(u.block)>::type;
  net::upcalls n;
  if (u.current == nullptr && u.block == nullptr && u.wake == nullptr) return n;
  auto kept = std::make_shared<const Set>(u);
  // A missing function stays null, so that set_upcalls_from refuses the partial set.
  if (u.current != nullptr) n.current = +[](void* c) {
    auto* k = static_cast<const Set*>(c);
    return k->current(k->*Ctx);
  };
  if (u.block != nullptr) n.block = +[](net::wait_token* t, void* waiter, void* c) {
    auto* k = static_cast<const Set*>(c);
    k->block(reinterpret_cast<token*>(t), waiter, k->*Ctx);
  };
  if (u.wake != nullptr) n.wake = +[](net::wait_token* t, void* waiter, void* c) {
    auto* k = static_cast<const Set*>(c);
    k->wake(reinterpret_cast<token*>(t), waiter, k->*Ctx);
  };
  n.ctx = const_cast<Set*>(kept.get());
  n.keep = std::move(kept);
  return n;
}

}  // namespace mdsm::detail
