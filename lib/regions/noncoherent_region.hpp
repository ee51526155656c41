// The non-coherent shared region: its mapping, layout and allocation (one-sided access is in
// regions/one_sided.hpp).
//
// Mapped at one virtual address on every rank (net::place_collectively; first choice: right after
// the coherent region, then right before it), as private anonymous memory with MAP_NORESERVE: every rank has its own
// bytes behind the same addresses, untouched pages cost nothing, and mdsm keeps no consistency
// between the ranks' copies. Size: MDSM_NONCOHERENT_SIZE or options::noncoherent_size (default
// 1 GiB of address space), the same on every rank (checked).
//
// Layout, in pages (as the coherent region's, lib/coherence/region_map.hpp):
//   [0, half)                   the collective arena: nc_alloc_collective gives every rank the
//                               same object at the same address
//   then one arena per rank     nc_alloc by that rank: the address is unique in the job
// Allocations are 16-byte aligned, page aligned from a page up (regions/arena).
//
// Threads: any thread; one mutex guards the arenas (a remote free is served by a handler).
#pragma once

#include "regions/arena.hpp"

#include <mdsm/mdsm_status.h>
#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>

namespace mdsm::regions {

struct noncoherent_config {
  std::size_t size = std::size_t{1} << 30;  // bytes; rounded up to pages
  // MDSM_NONCOHERENT_SIZE over the defaults.
  static noncoherent_config from_env(noncoherent_config defaults);
};

class noncoherent_region {
 public:
  // Collective over `comm`. Tries first to end at near_begin or begin at near_end (the
  // coherent region's bounds), then elsewhere. Throws
  // MDSM_ERR_INVALID_ARGUMENT, MDSM_ERR_MISMATCH (ranks asked for different sizes) or
  // MDSM_ERR_REGION_MAP, on every rank alike.
  noncoherent_region(MPI_Comm comm, const noncoherent_config& cfg, std::uintptr_t near_begin,
                     std::uintptr_t near_end);
  ~noncoherent_region();
  noncoherent_region(const noncoherent_region&) = delete;
  noncoherent_region& operator=(const noncoherent_region&) = delete;

  std::byte* base() const noexcept { return base_; }
  std::size_t size() const noexcept { return size_; }
  // The shared-memory file behind the region (open for the region's lifetime): ranks of this host
  // map it to reach this rank's bytes with plain loads, stores and atomics (one_sided).
  int backing() const noexcept { return backing_; }
  const std::string& placement() const noexcept { return placement_; }
  // [p, p + n) lies in the region (n == 0: p does). Overflow-safe.
  bool contains(const void* p, std::size_t n = 0) const noexcept {
    const auto a = reinterpret_cast<std::uintptr_t>(p), b = reinterpret_cast<std::uintptr_t>(base_);
    return a >= b && a - b <= size_ && n <= size_ - (a - b) && (n != 0 || a - b < size_);
  }
  // The rank whose arena holds p, or -1 in the collective arena. Pre: contains(p).
  int arena_owner(const void* p) const noexcept;

  void* alloc(int rank, std::size_t bytes);
  // Pre: every rank calls it with the same size (regions::check_same_everywhere).
  void* alloc_collective(std::size_t bytes);
  // Frees an allocation of this rank's arena; a status and `why` instead of throwing (it also
  // serves remote frees, in handler context).
  mdsm_status free_own(std::uintptr_t addr, std::string& why);
  void free_collective(void* p);

 private:
  static std::size_t alignment_for(std::size_t bytes);
  std::byte* base_ = nullptr;
  std::size_t size_ = 0;
  int backing_ = -1;
  std::size_t collective_bytes_ = 0;
  std::size_t arena_bytes_ = 0;
  int rank_ = 0;
  std::string placement_;
  std::mutex mutex_;
  arena collective_;
  arena own_;
};

}  // namespace mdsm::regions
