// The runtime: one per process between init and finalize, owning every layer in dependency
// order (members are destroyed in reverse).
#pragma once

#include "coherence/engine.hpp"
#include "messages/endpoint.hpp"
#include "net/progress.hpp"
#include "net/transport.hpp"
#include "regions/coherent_allocator.hpp"
#include "sync/services.hpp"

#include <atomic>
#include <memory>
#include <string>

namespace mdsm::detail {

struct runtime {
  bool owns_mpi = false;
  std::string stats_spec;
  std::atomic<std::uint64_t> gc_threshold{0};  // bytes; 0: never
  std::unique_ptr<net::transport> transport;
  std::unique_ptr<net::progress> progress;
  std::unique_ptr<coherence::engine> engine;
  std::unique_ptr<messages::endpoint> endpoint;
  std::unique_ptr<regions::coherent_allocator> allocator;
  std::unique_ptr<sync::services> sync;  // built last, over the public API
  ~runtime();
};

// The runtime; throws MDSM_ERR_NOT_INITIALIZED outside init..finalize. Also rethrows a deferred
// error (every public entry point goes through here).
runtime& rt();
// Like rt() for calls that must not happen inside a handler (they wait).
runtime& rt_blocking(const char* what);

}  // namespace mdsm::detail
