// Allocation in the coherent region (layout in lib/coherence/region_map.hpp).
//
//   alloc            non-collective: from this rank's arena, so the address is unique in the job
//   alloc_collective every rank runs the same deterministic allocation in the collective arena
//   free             any rank; a pointer into another rank's arena is freed by its owner (a
//                    REQUEST round trip, so the caller learns whether it was valid)
//   make_coherent    collective: memory the program has (its globals) joins the region
//
// Both kinds of arena grow into the pool (region_map.hpp) when an allocation does not fit: rank 0
// keeps the pool's free chunks and grants runs of them. A rank's claim: a REQUEST to rank 0, which
// records the run in its chunk directory, answers the claimer and tells every other rank, each of
// which records it and acknowledges to the claimer; the claimer records it and allocates from it
// once every rank has. So every rank knows a chunk's owner (its home, and whether an access to it
// fetches or is an error) before any pointer into it exists. The collective arena's claims happen
// inside alloc_collective: rank 0 grants, and the collective agreement carries the address.
// Claimed runs stay with their owner for the rest of the run (freed allocations in them are
// reused by the owner only).
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
#include <optional>
#include <string>
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
  // Collective: [addr, addr + bytes), memory every rank has at that address (its globals), joins
  // the coherent region holding rank 0's bytes (region_map::register_range). Rank 0 keeps a valid
  // copy and is the units' home; every other rank fetches a unit at its first access. Every rank
  // returns once rank 0's copy is in place.
  void make_coherent(void* addr, std::size_t bytes);

 private:
  // Throws unless p may be passed to `call` (free, free_collective): a registered range is
  // MDSM_ERR_INVALID_ARGUMENT, memory outside the region MDSM_ERR_NOT_IN_REGION.
  void check_freeable(const void* p, const char* call) const;
  std::size_t alignment_for(std::size_t bytes) const;
  void account(std::uintptr_t addr, std::size_t bytes, bool allocated);  // mutex_ held
  // Frees addr in this rank's own arena; returns a status instead of throwing (also serves
  // remote frees from handler context).
  mdsm_status free_own(std::uintptr_t addr, std::string& why);

  coherence::engine& engine_;
  messages::endpoint& endpoint_;
  coherence::region_map& region_;
  // A run of pool chunks for `owner` (a rank or region_map::k_collective) of at least `need`
  // bytes, `want` if there is room for it: its first address and size, or nullopt when the pool
  // has no such run. Rank 0 only (the pool's keeper); any thread.
  std::optional<std::pair<std::uintptr_t, std::size_t>> grant(std::size_t need, std::size_t want, int owner);
  // (need, want) for grant, for an allocation of `bytes` into an arena that has `claimed`
  // (guarded by mutex_) bytes of the pool already: the allocation, or more, so claims stay few.
  std::pair<std::size_t, std::size_t> claim_bounds(std::size_t bytes, const std::size_t& claimed);
  // Tells every rank but rank 0 and the run's owner about a granted run (they acknowledge to
  // the owner).
  void announce(std::uint64_t ticket, std::uintptr_t at, std::size_t bytes, int owner);
  // This rank records the run's owner and adds the run to `a`, counting it in `claimed`.
  void adopt(arena& a, std::size_t& claimed, std::uintptr_t at, std::size_t bytes, int owner);
  // Grows own_ by a run of the pool of at least `bytes` (mutex_ not held); false when the pool
  // has no room.
  bool claim_own(std::size_t bytes);
  // Collective: grows collective_ by a run of at least `bytes` on every rank; false (on every
  // rank) when the pool has no room.
  bool claim_collective(std::size_t bytes);
  // The OUT_OF_MEMORY error for an allocation that did not fit even after a claim.
  // ("alloc(N): rank 2's arena has F bytes free ...; set a larger MDSM_COHERENT_SIZE")
  [[noreturn]] void out_of_memory(const arena& a, std::size_t bytes, const std::string& call, const std::string& which);

  std::mutex mutex_;
  arena collective_;
  arena own_;
  std::size_t own_claimed_ = 0;         // bytes of the pool own_ grew by (mutex_)
  std::size_t collective_claimed_ = 0;  // ... and collective_ (the same on every rank)

  // Rank 0: the pool's free chunks, as an arena over chunk indices.
  std::mutex pool_mutex_;
  arena pool_{0, 0};
  handler_id claim_request_ = 0;
  handler_id claim_reply_ = 0;
  handler_id claim_notice_ = 0;
  handler_id claim_ack_ = 0;
  struct pending_claim {
    std::atomic<bool> granted{false};  // rank 0's answer arrived
    std::atomic<int> acks{0};          // ranks other than 0 and us that recorded the run
    std::uintptr_t addr = 0;           // 0: the pool had no room
    std::size_t bytes = 0;
  };
  std::unordered_map<std::uint64_t, std::shared_ptr<pending_claim>> claims_;  // pending_mutex_
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
