// The coherent region's mapping and layout.
//
// The region is mapped at one virtual address on every rank, agreed collectively at init with
// MAP_FIXED_NOREPLACE (an existing mapping is never clobbered: if any rank cannot map the
// candidate address, all ranks try another one). Its memory is reserved, not committed.
//
// Layout, in coherence units (a unit is `unit_pages` OS pages):
//   [0, collective_units)                      the collective arena (an eighth of the region):
//                                              every rank allocates the same objects at the
//                                              same addresses
//   then one arena of arena_units per rank     non-collective allocations by that rank (together
//                                              an eighth of the region)
//   then the pool, the rest, in chunks         runs of chunks claimed on demand, for one rank's
//                                              non-collective allocations or for the collective
//                                              arena, once the fixed arenas are full; never
//                                              given back (regions/coherent_allocator.cpp)
// So one rank may allocate most of the region (a main process that allocates everything), and
// so may the collective allocations; the fixed arenas keep small programs off the pool.
// The owner of a claimed chunk is in the chunk directory, which every rank has recorded before
// the claim's address is returned (so before any rank can hold a pointer into it).
// Default home of a unit (who keeps an authoritative copy after garbage collection, and who
// serves whole-unit fetches): the arena or chunk owner, or unit % ranks for collective units.
// The engine gives the units of a collective allocation blocks of it instead (engine::home_of).
#pragma once

#include <mpi.h>

#include <atomic>
#include <cstddef>
#include <memory>
#include <cstdint>
#include <string>

namespace mdsm::coherence {

struct region_config {
  std::size_t size = std::size_t{1} << 30;  // bytes; rounded up to whole units
  std::size_t unit_pages = 1;               // coherence unit, in OS pages
  std::uintptr_t address = 0;               // requested address; 0 = let the ranks agree on one
  bool strict_address = false;              // fail rather than move away from `address`
  // Interval closes a unit written in two consecutive intervals stays writable for (0: none;
  // at most 255). See engine::close_interval_locked.
  unsigned hot_intervals = 32;
  // Push the diffs of units a rank keeps re-reading along with our RELEASEs to it
  // (engine::encode_pushed_locked).
  bool push_diffs = true;
  // Ask for the next window of a walk through another rank's units while the current one is
  // fetched (engine::start_prefetch).
  bool prefetch = true;
  // Collect garbage in the background, without a barrier, past 1.5x the threshold
  // (background_gc.cpp).
  bool background_gc = true;
  // MDSM_COHERENT_SIZE, _UNIT_PAGES, _ADDRESS, MDSM_HOT_UNIT_INTERVALS, MDSM_PUSH_DIFFS,
  // MDSM_PREFETCH, MDSM_BACKGROUND_GC
  static region_config from_env(region_config defaults);
};

class region_map {
 public:
  // Collective over `comm`. Throws MDSM_ERR_REGION_MAP, MDSM_ERR_INVALID_ARGUMENT or
  // MDSM_ERR_MISMATCH (ranks passed different sizes) with a message saying what to change.
  region_map(MPI_Comm comm, const region_config& cfg);
  ~region_map();
  region_map(const region_map&) = delete;
  region_map& operator=(const region_map&) = delete;

  std::byte* app_base() const noexcept { return app_; }
  std::byte* lib_base() const noexcept { return lib_; }
  std::size_t size() const noexcept { return size_; }
  std::size_t unit() const noexcept { return unit_; }
  std::uint32_t units() const noexcept { return units_; }
  int ranks() const noexcept { return ranks_; }

  bool contains(const void* p) const noexcept {
    auto a = reinterpret_cast<std::uintptr_t>(p);
    auto b = reinterpret_cast<std::uintptr_t>(app_);
    return a >= b && a < b + size_;
  }
  std::uint32_t unit_of(const void* p) const noexcept {
    return static_cast<std::uint32_t>((reinterpret_cast<std::uintptr_t>(p) - reinterpret_cast<std::uintptr_t>(app_)) /
                                      unit_);
  }
  std::byte* app_unit(std::uint32_t u) const noexcept { return app_ + std::size_t{u} * unit_; }
  std::byte* lib_unit(std::uint32_t u) const noexcept { return lib_ + std::size_t{u} * unit_; }

  std::uint32_t collective_units() const noexcept { return collective_units_; }
  std::uint32_t arena_units() const noexcept { return arena_units_; }
  std::uint32_t arena_begin(int rank) const noexcept {
    return collective_units_ + static_cast<std::uint32_t>(rank) * arena_units_;
  }
  std::uint32_t pool_begin() const noexcept { return pool_begin_; }
  std::uint32_t pool_units() const noexcept { return units_ - pool_begin_; }
  std::uint32_t chunk_units() const noexcept { return chunk_units_; }

  // arena_owner's answers besides a rank.
  static constexpr int k_collective = -1;  // the collective arena, or a chunk claimed for it
  static constexpr int k_unclaimed = -2;   // a pool chunk nobody has claimed (as far as we know)

  // Owner of the arena or pool chunk holding unit u: a rank, k_collective or k_unclaimed.
  int arena_owner(std::uint32_t u) const noexcept {
    if (u < collective_units_) return k_collective;
    if (u < pool_begin_) return static_cast<int>((u - collective_units_) / arena_units_);
    return chunk_owner_[(u - pool_begin_) / chunk_units_].load(std::memory_order_acquire);
  }
  int home_of(std::uint32_t u) const noexcept {
    int owner = arena_owner(u);
    return owner >= 0 ? owner : static_cast<int>(u % static_cast<std::uint32_t>(ranks_));
  }
  // Records that the pool units [first, first + count) (whole chunks) belong to `owner` (a rank
  // or k_collective). Any thread, handlers included.
  void set_chunk_owner(std::uint32_t first, std::uint32_t count, int owner) noexcept;
  const std::string& placement() const noexcept { return placement_; }

 private:
  std::byte* app_ = nullptr;
  std::byte* lib_ = nullptr;
  int fd_ = -1;
  std::size_t size_ = 0;
  std::size_t unit_ = 0;
  std::uint32_t units_ = 0;
  std::uint32_t collective_units_ = 0;
  std::uint32_t arena_units_ = 0;
  std::uint32_t pool_begin_ = 0;
  std::uint32_t chunk_units_ = 1;
  std::unique_ptr<std::atomic<int>[]> chunk_owner_;  // per pool chunk: a rank, k_collective, k_unclaimed
  int ranks_ = 1;
  std::string placement_;
};

}  // namespace mdsm::coherence
