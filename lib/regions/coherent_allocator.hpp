// Allocation in the coherent region (layout in lib/coherence/region_map.hpp).
//
//   alloc            non-collective: from this rank's arena, so the address is unique in the job
//   alloc_collective every rank runs the same deterministic allocation in the collective arena
//   free             any rank; a pointer into another rank's arena is freed by its owner (a
//                    REQUEST round trip, so the caller learns whether it was valid)
//
// The allocator tells the coherence engine when a unit gains its first allocation and when it
// loses its last one (units_allocated / units_freed), so only allocated memory is accessible.
// Small allocations are 16-byte aligned; allocations of a unit or more are unit aligned.
// Threads: any application thread; one mutex guards both arenas and the unit counts.
#pragma once

#include "coherence/engine.hpp"
#include "messages/endpoint.hpp"
#include "regions/arena.hpp"

#include <atomic>
#include <mutex>
#include <unordered_map>

namespace mdsm::regions {

class coherent_allocator {
 public:
  // Collective (registers the remote-free handlers).
  coherent_allocator(coherence::engine& e, messages::endpoint& ep);

  void* alloc(std::size_t bytes);
  void* alloc_collective(std::size_t bytes);
  void free(void* p);
  void free_collective(void* p);
  // Bytes of the collective arena in use (allocations and their alignment padding).
  std::uint64_t collective_bytes();

 private:
  std::size_t alignment_for(std::size_t bytes) const;
  void account(std::uintptr_t addr, std::size_t bytes, bool allocated);  // mutex_ held
  // Frees addr in this rank's own arena; returns a status instead of throwing (also serves
  // remote frees from handler context).
  mdsm_status free_own(std::uintptr_t addr, std::string& why);

  coherence::engine& engine_;
  messages::endpoint& endpoint_;
  coherence::region_map& region_;
  std::mutex mutex_;
  arena collective_;
  arena own_;
  std::vector<std::uint32_t> unit_users_;  // allocations touching each unit (own + collective)

  handler_id free_request_ = 0;
  handler_id free_reply_ = 0;
  struct pending_free {
    std::atomic<bool> done{false};
    mdsm_status status = MDSM_SUCCESS;
    std::string why;
  };
  std::mutex pending_mutex_;
  std::unordered_map<std::uint64_t, std::shared_ptr<pending_free>> pending_;
  std::uint64_t next_ticket_ = 1;
};

}  // namespace mdsm::regions
